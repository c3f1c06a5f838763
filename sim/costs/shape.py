"""The shape of a step: what its cost depends on, counted from a `StepPlan`.

A step's shape (`StepShape`) counts the rows pushed through every weight matrix (prefill tokens +
decodes + static batching's padding rows), the sequences that sample a token (one LM-head row
and one `sample_token` call each), the prefill chunks and their attention work (a chunk of n
tokens over c computed ones costs n * (c + n), and gathers c + n keys from the paged cache when
c > 0), the decodes, the keys they attend to, and their span (decodes x the longest context:
decode attention pads every sequence to the longest one) and the keys it gathers
(`decode_gathered`: the engine gathers keys a group of sequences at a time, each up to its
group's longest, `engine.model_runner.decode_groups`), and whether it decodes at all
(`decoding`: decode attention's own fixed cost in every layer, beside a prefill's), and the
chunks' squared lengths (`prefill_square`: with `prefill_attention`, the causal attention work
n * c + n * (n + 1) / 2 a GPU kernel does).

`shape_of(plan)` counts a plan directly, in O(batch); `CostModelExecutor` keeps the decode sums
as running totals instead, so a simulated step costs O(prefill chunks). A cost model's
`step_time(shape)` (`sim.costs.model.CostModel`) reads these fields by name; for a run of steps
predicted at once, some of them are arrays of one length (one element per step).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from engine.model_runner import GATHER_GROUP_BYTES, decode_groups

KV_ITEMSIZE = 4  # bytes of one stored key element (float32)


class StepShape(NamedTuple):
    """The counts a step's cost depends on: numbers, or for a run of steps arrays of one length
    (with numbers for the counts every step shares). A named tuple: immutable, and cheap to
    build once a simulated step."""

    prefill_tokens: int = 0
    prefill_attention: int = 0  # sum over chunks of n * (tokens before the chunk + n)
    prefill_seqs: int = 0
    decode_seqs: int = 0
    decode_context: int = 0  # sum over decodes of the keys attended (the sequence's num_tokens)
    padding_seqs: int = 0
    sampled_seqs: int = 0  # decodes + prefill chunks that complete their sequence
    prefill_context: int = 0  # sum over chunks after a context (c > 0) of c + n: keys gathered
    decode_span: int = 0  # decodes x the longest decode context
    decode_gathered: int = 0  # keys gathered per layer for decode attention (decode_groups)
    decoding: int = 0  # 1 when the step has decodes (decode attention runs), else 0
    prefill_square: int = 0  # sum over chunks of n * n (with prefill_attention: causal work)

    @property
    def rows(self) -> int:
        """Rows through every weight matmul: prefill tokens, decodes and padding rows."""
        return self.prefill_tokens + self.decode_seqs + self.padding_seqs


COUNTS = StepShape._fields  # the counts' names, in field order


def prefill_counts(prefills) -> tuple[int, int, int, int, int]:
    """(tokens, attention work, gathered context, chunks that sample, sum of squared chunk
    lengths) of a plan's prefills."""
    tokens = attention = context = sampled = square = 0
    for seq, n in prefills:
        computed = seq.num_computed_tokens
        tokens += n
        attention += n * (computed + n)
        square += n * n
        if computed:
            context += computed + n
        if computed + n == seq.num_tokens:
            sampled += 1
    return tokens, attention, context, sampled, square


def slot_bytes(model: dict) -> int:
    """Bytes of one token's keys in one layer of the paged KV cache."""
    return model["d_model"] * KV_ITEMSIZE


def gathered_keys(contexts, block_size: int, slot_bytes: int) -> int:
    """Keys one layer gathers for a decode batch of these contexts, in batch order: each group
    of `engine.model_runner.decode_groups` gathers all its sequences up to its longest."""
    return block_size * sum((g1 - g0) * blocks
                            for g0, g1, blocks in decode_groups(contexts, block_size, slot_bytes))


def gathered_keys_repeated(contexts, repeats: np.ndarray, block_size: int,
                           slot_bytes: int) -> np.ndarray:
    """`gathered_keys` of the batch `contexts` [B] with every context `repeats[j]` tokens longer,
    for each j: [K] (the decode steps of a repeated plan), counted in one pass per group size."""
    ctx = np.asarray(contexts, dtype=np.int64)  # [B]
    n = len(ctx)
    blocks_max = -(-(int(ctx.max()) + repeats) // block_size)  # [K] longest, in blocks
    group = np.maximum(1, GATHER_GROUP_BYTES // (block_size * slot_bytes
                                                 * np.maximum(blocks_max, 1)))  # [K]
    out = np.empty(len(repeats), dtype=np.int64)  # [K]
    for g in np.unique(group).tolist():
        at = group == g
        g = min(g, n)
        blocks = -(-(ctx[None, :] + repeats[at, None]) // block_size)  # [Kg, B]
        groups = -(-n // g)
        padded = np.zeros((len(blocks), groups * g), dtype=np.int64)  # [Kg, groups * g]
        padded[:, :n] = blocks
        longest = padded.reshape(len(blocks), groups, g).max(axis=2)  # [Kg, groups]
        sizes = np.minimum(g, n - g * np.arange(groups))  # [groups] sequences per group
        out[at] = block_size * (longest * sizes).sum(axis=1)
    return out


def gather_group(max_context: int, block_size: int, slot_bytes: int) -> int:
    """Sequences per group when decode attention gathers a batch whose longest context is
    `max_context` (`engine.model_runner.decode_groups`): the batch is one group when there are
    no more, and with 1 every sequence gathers its own blocks."""
    blocks = -(-max_context // block_size)
    return max(1, GATHER_GROUP_BYTES // (block_size * slot_bytes * max(blocks, 1)))


def shape_of(plan, block_size: int, slot_bytes: int) -> StepShape:
    """A plan's shape, computed directly (O(batch)); the executor keeps the decode sums running.
    `block_size` and `slot_bytes` (the KV cache's) say how decode attention gathers its keys."""
    tokens, attention, context, sampled, square = prefill_counts(plan.prefills)
    contexts = [seq.num_tokens for seq in plan.decodes]
    decodes = len(contexts)
    return StepShape(prefill_tokens=tokens, prefill_attention=attention,
                     prefill_seqs=len(plan.prefills), decode_seqs=decodes,
                     decode_context=sum(contexts), padding_seqs=plan.padding_seqs,
                     sampled_seqs=sampled + decodes, prefill_context=context,
                     decode_span=decodes * max(contexts) if contexts else 0,
                     decode_gathered=gathered_keys(contexts, block_size, slot_bytes),
                     decoding=int(decodes > 0), prefill_square=square)
