"""Block hashes for prefix caching, as vLLM keys blocks: a full block of token ids is known by a
hash of its tokens chained with its parent block's hash (`hash_block`), so equal hashes mean equal
prefixes. A sequence with token ids hashes them block by block as they become known
(`block_hashes`); a simulated sequence carries the hashes of its blocks from its workload
(`Sequence.block_hashes`, e.g. a trace's prefix hash ids, or keys of its own that no other
sequence shares: `own_keys`), and one with neither takes no part. The block manager that finds
blocks by them is `prefix_cache.PrefixCachingBlockManager`.
"""

from __future__ import annotations

import hashlib
import struct

ROOT_HASH = 0x5EED  # the parent of a sequence's first block


def own_keys(hashes) -> bool:
    """Whether block keys are a sequence's own (a `range`: a simulated request that shares no
    prefix, `sim.workloads.block_keys.own_block_keys`): no other sequence can find its blocks,
    so they are registered when it is preempted, the only time another admission (its own
    readmission) can find them, not as they fill (`Scheduler.preempt`)."""
    return type(hashes) is range


def hash_block(parent: int, tokens) -> int:
    """The hash of a full block of token ids after the block whose hash is `parent`: 128 bits
    of the SHA-256 of both, as vLLM keys blocks (SHA-256 since 0.10.2). Python's own hash of
    integers can be collided on purpose: a prompt made to would read another's KV."""
    tokens = tuple(tokens)
    data = parent.to_bytes(16, "little") + struct.pack(f"<{len(tokens)}q", *tokens)
    return int.from_bytes(hashlib.sha256(data).digest()[:16], "little")


def block_hashes(seq, block_size: int, n_blocks: int) -> list | None:
    """The hashes of the sequence's first `n_blocks` full blocks, as far as they are known: a
    list of at most `n_blocks` (hashes of token ids are computed and kept on first use), None
    for a sequence that takes no part in prefix caching."""
    hashes = seq.block_hashes
    if hashes is None or len(hashes) >= n_blocks or seq.prompt_token_ids is None:
        return hashes
    tokens = seq.prompt_token_ids
    known = len(tokens) + len(seq.output_token_ids)
    n_blocks = min(n_blocks, known // block_size)
    if len(hashes) < n_blocks:
        if n_blocks * block_size > len(tokens):
            tokens = list(tokens) + seq.output_token_ids
        parent = hashes[-1] if hashes else ROOT_HASH
        for i in range(len(hashes), n_blocks):
            parent = hash_block(parent, tokens[i * block_size:(i + 1) * block_size])
            hashes.append(parent)
    return hashes
