"""Prompts of a given token count for a server whose tokenizer the client does not know.

- "ids" (default for /v1/completions, which accepts a list of token ids as its `prompt`): each
  prompt is N token ids drawn from the seed's "tokens" stream in [ID_LOW, ID_HIGH), ids every
  vocabulary of 64 tokens or more holds and that common tokenizers keep for ordinary tokens
  (their special tokens sit at 0-2 or at the top of the vocabulary). The server counts exactly
  N prompt tokens.
- "text" (default for /v1/chat/completions): the request's index, then a word repeated. How
  many tokens a word is, and what a chat template adds, is measured once on two probe requests
  (`usage.prompt_tokens` of 16 and of 64 words: a line through them); each prompt then has the
  word count that line gives for N. Tokenizers are not exactly linear, so the count is close,
  not exact.

Either way, every response's `usage.prompt_tokens` is recorded beside the planned count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ID_LOW, ID_HIGH = 10, 60
WORD = "hello"
PROBE_WORDS = (16, 64)
PROMPT_KINDS = ("ids", "text")


@dataclass(frozen=True)
class TextScale:
    """prompt tokens = tokens_per_word * words + overhead_tokens, as measured by the probe."""

    tokens_per_word: float = 1.0
    overhead_tokens: float = 0.0
    note: str = "not calibrated: one word is taken as one token"

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead_tokens) / self.tokens_per_word))


def fit_text_scale(counts: dict[int, int]) -> TextScale:
    """The line through the probe's {words: reported prompt tokens}."""
    (w1, t1), (w2, t2) = sorted(counts.items())
    slope = (t2 - t1) / (w2 - w1)
    if not slope > 0:
        raise ValueError(f"the probe's prompt token counts do not grow with the words: {counts}")
    overhead = t1 - slope * w1
    return TextScale(slope, overhead, f"calibrated: {slope:.3g} tokens a word, "
                                      f"{overhead:+.3g} tokens a prompt")


def probe_text(words: int) -> str:
    return " ".join([WORD] * words)


def text_prompt(index: int, tokens: int, scale: TextScale) -> str:
    """Request `index`'s prompt: its index first, so no two prompts share a cached prefix."""
    return f"{index} " + probe_text(scale.words_for(tokens))


def id_prompts(prompt_tokens, rng: np.random.Generator, shared=None) -> list[list[int]]:
    """One list of token ids per request, in request order; with `shared` (a trace's
    `Workload.prompt_ids`: requests whose prompts share blocks), the trace's shared blocks hold
    the same ids in every request that shares them, so a server's prefix cache finds them."""
    if shared is None:
        return [rng.integers(ID_LOW, ID_HIGH, size=int(n)).tolist() for n in prompt_tokens]
    return [[ID_LOW + t for t in shared(i, ID_HIGH - ID_LOW, rng)]
            for i in range(len(prompt_tokens))]
