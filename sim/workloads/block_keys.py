"""The KV block keys of a trace's requests: what a simulated sequence gives the engine's prefix
cache (`Sequence.block_hashes`) instead of hashes of token ids, so that requests the trace says
share a prefix share their cached blocks (`engine.prefix_cache`).

A trace names prompt blocks of its own size (`PrefixBlocks.block_tokens`: 512 for Mooncake);
engine block j (tokens j*B .. (j+1)*B - 1 for block size B) lies wholly in the prompt or not:
- in the prompt: its tokens end in trace block k = ((j+1)*B - 1) // block_tokens, whose id names
  every token up to there, so (id of k, j) names its contents and its prefix exactly, whether or
  not B divides block_tokens: key = id * 2^32 + j;
- past the prompt (it holds generated tokens, which no other request has): a key of its own,
  -(request * 2^32 + j) - 1 (`own_block_keys`: every block of a request that shares no prefix,
  whose tokens are random, as a real one's).
Real-engine runs get token ids instead (`trace_token_ids`): each trace block's tokens are drawn
from a generator seeded by its (renumbered) id, so equal ids give equal tokens and the engine's own hashes
find the same shared prefixes.
"""

from __future__ import annotations

import numpy as np

from .traces.trace import PrefixBlocks

SPAN = 2**32  # engine blocks a key keeps apart (far more than any sequence has)


def trace_block_keys(blocks: PrefixBlocks, index: int, prompt_len: int, total_tokens: int,
                     block_size: int) -> list[int]:
    """The keys of request `index`'s full engine blocks over `total_tokens` (prompt and
    output), in order."""
    ids = blocks.of(index)  # [k]
    j = np.arange(total_tokens // block_size, dtype=np.int64)  # [m] engine blocks
    ends = (j + 1) * block_size  # [m] one past each block's last token
    in_prompt = (ends <= prompt_len) & (len(ids) > 0)
    owner = np.minimum((ends - 1) // blocks.block_tokens, max(len(ids) - 1, 0))  # [m]
    shared = ids[owner] * SPAN + j if len(ids) else j
    own = -(index * SPAN + j) - 1
    return np.where(in_prompt, shared, own).tolist()


def own_block_keys(index: int, n_blocks: int) -> range:
    """Keys of request `index`'s `n_blocks` full engine blocks that no other request has (a
    request without shared prefixes: random tokens), the keys a trace gives blocks past the
    prompt; a range, so that a million requests make no lists."""
    return range(-index * SPAN - 1, -index * SPAN - 1 - n_blocks, -1)


def trace_token_ids(blocks: PrefixBlocks, index: int, prompt_len: int, vocab_size: int,
                    rng: np.random.Generator) -> list[int]:
    """Prompt token ids for request `index` of a real-engine run: each trace block's from a
    generator seeded by its id (the trace alone decides them); a prompt without ids draws its
    own from `rng`."""
    ids = blocks.of(index)
    if not len(ids):
        return rng.integers(0, vocab_size, size=prompt_len).tolist()
    per_block = [np.random.default_rng(int(i)).integers(0, vocab_size, size=blocks.block_tokens)
                 for i in ids]
    return np.concatenate(per_block)[:prompt_len].tolist()
