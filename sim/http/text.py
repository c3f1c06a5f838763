"""Text in and out of the engine: the character vocabulary of a model, the chat template, and
the incremental detokenizer that holds back text which may be the start of a stop string.

The model's weights are random, so its vocabulary is any `vocab_size` characters: the three
special tokens, then the characters of `ALPHABET` in order (printable ASCII first), as many as
fit. A character outside the vocabulary becomes "<unk>".
"""

from __future__ import annotations

import string

from engine.tokenizer import build_vocab, decode_tokens

SPECIAL_TOKENS = ("<bos>", "<eos>", "<unk>")
ALPHABET = (" \n" + string.ascii_lowercase + string.ascii_uppercase + string.digits
            + string.punctuation + "".join(chr(c) for c in range(0xA1, 0x3000)))


def model_vocab(vocab_size: int) -> dict:
    """A character vocabulary of exactly `vocab_size` tokens (`engine.tokenizer` format)."""
    n_chars = vocab_size - len(SPECIAL_TOKENS)
    if not 1 <= n_chars <= len(ALPHABET):
        raise ValueError(f"model.vocab_size must be from {len(SPECIAL_TOKENS) + 1} to "
                         f"{len(SPECIAL_TOKENS) + len(ALPHABET)} to serve text, got {vocab_size}")
    return build_vocab([ALPHABET[:n_chars]], SPECIAL_TOKENS)


def render_chat(messages: list[tuple[str, str]]) -> str:
    """The chat template: one "{role}: {text}" line per (role, text) message, then
    "assistant:" for the reply to follow."""
    lines = [f"{role}: {text}\n" for role, text in messages]
    return "".join(lines) + "assistant:"


class Detokenizer:
    """A request's output text, token by token. `push(token)` returns the new text that is safe
    to send: text that might begin a stop string is held back until it cannot. `stopped` turns
    true when the text reaches a stop string; the text is cut before it."""

    def __init__(self, vocab: dict, stop: tuple[str, ...] = ()):
        self.vocab = vocab
        self.stop = stop
        self.text = ""
        self.sent = 0  # characters of `text` already returned
        self.stopped = False

    def push(self, token_id: int) -> str:
        before = len(self.text)
        self.text += decode_tokens([token_id], self.vocab)
        end = len(self.text) - self._held()
        for stop in self.stop:
            # a stop string not found before can only end in the new text: search its tail
            at = self.text.find(stop, max(0, before - len(stop) + 1))
            if at >= 0:
                self.stopped = True
                self.text = self.text[:at]
                end = at
        return self.take(end)

    def flush(self) -> str:
        """The held-back text, when the request ends without reaching a stop string."""
        return self.take(len(self.text))

    def take(self, end: int) -> str:
        piece = self.text[self.sent:end]
        self.sent = max(self.sent, end)
        return piece

    def _held(self) -> int:
        """Length of the longest end of the text that is a proper start of a stop string."""
        held = 0
        for stop in self.stop:
            for n in range(min(len(stop) - 1, len(self.text)), held, -1):
                if self.text.endswith(stop[:n]):
                    held = n
                    break
        return held
