"""Character-level tokenization: the engine's part 2 (`build_vocab`, `encode_prompt`, `decode_tokens`).

A vocabulary is the plain dict `{"token_to_id": {token: id}, "id_to_token": [token, ...]}`.
Special tokens (such as "<bos>", "<eos>", "<unk>") take ids 0 .. S-1 in the order given, then
every distinct character of the corpus follows in sorted (code point) order. Every ordinary token
is exactly one character, so a token of any other length is a special one.
"""

from __future__ import annotations

import numpy as np

BOS, UNK = "<bos>", "<unk>"


def build_vocab(corpus, special_tokens) -> dict:
    """A character vocabulary of `corpus` (an iterable of strings) with `special_tokens` first.

    The caller's lists are not modified. A special token listed twice, or one that is not a
    non-empty string, raises ValueError; a corpus character equal to a (one-character) special
    token keeps the special's id rather than appearing twice.
    """
    specials = list(special_tokens)
    for token in specials:
        if not isinstance(token, str) or not token:
            raise ValueError(f"build_vocab: special tokens must be non-empty strings, got {token!r}")
    duplicates = sorted({t for t in specials if specials.count(t) > 1})
    if duplicates:
        raise ValueError(f"build_vocab: special tokens listed more than once: {duplicates}")
    if isinstance(corpus, str):
        corpus = [corpus]
    chars = set()
    for text in corpus:
        if not isinstance(text, str):
            raise ValueError(f"build_vocab: corpus must hold strings, got {type(text).__name__}")
        chars.update(text)
    id_to_token = specials + sorted(chars - set(specials))
    return {"token_to_id": {t: i for i, t in enumerate(id_to_token)}, "id_to_token": id_to_token}


def encode_prompt(text: str, vocab: dict, add_bos: bool = True) -> list[int]:
    """Token ids of `text`, one per character, after the "<bos>" id when add_bos is true.

    A character missing from the vocabulary becomes "<unk>" when the vocabulary has it, and
    otherwise raises ValueError naming the character; add_bos without a "<bos>" token raises too.
    Special tokens written inside `text` are ordinary characters ("<eos>" is five ids).
    """
    token_to_id = vocab["token_to_id"]
    ids = []
    if add_bos:
        if BOS not in token_to_id:
            raise ValueError(f"encode_prompt: add_bos=True but the vocabulary has no {BOS} token")
        ids.append(token_to_id[BOS])
    unk_id = token_to_id.get(UNK)
    for position, char in enumerate(text):
        token_id = token_to_id.get(char, unk_id)
        if token_id is None:
            raise ValueError(f"encode_prompt: character {char!r} (position {position}) is not in "
                             f"the vocabulary, which has no {UNK} token")
        ids.append(token_id)
    return ids


def decode_tokens(ids, vocab: dict, skip_special: bool = True) -> str:
    """The text of token ids: their tokens concatenated, special tokens left out when skip_special.

    An id that is not an integer in [0, len(id_to_token)) raises ValueError (negative ids are not
    counted from the end).
    """
    id_to_token = vocab["id_to_token"]
    pieces = []
    for token_id in ids:
        if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
            raise ValueError(f"decode_tokens: token ids must be integers, got {token_id!r}")
        if not 0 <= token_id < len(id_to_token):
            raise ValueError(f"decode_tokens: token id {token_id} is outside the vocabulary "
                             f"[0, {len(id_to_token)})")
        token = id_to_token[token_id]
        if not (skip_special and len(token) != 1):
            pieces.append(token)
    return "".join(pieces)
