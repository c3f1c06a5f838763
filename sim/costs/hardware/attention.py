"""A step's attention on a real GPU, group of layers by group (the full layers, then the
sliding ones): the measured kernel's time where the GPU's tables reach the step's (batch,
length) (`measured.py`); past their reach, each measured batch's time that the lookup blends,
at the nearest length it reaches (the batch brought into the batches' reach), times the
roofline's growth from there (`Grid.anchored`), not the roofline's level, which may be several
times off theirs (the H200's tables time gpt-oss's sliding decode at 3.5 to 8.6 times it where
they end); where they have no kernel for the group, the roofline:

    prefill: launch + max(flop x causal work / compute efficiency(T),
                          query x T + key x (keys gathered + T))
    decode:  launch + max(flop x keys / top compute efficiency, query x decodes + key x keys)

with a measured latent-attention block's projections added to the roofline's (the block's
time holds them). A sliding layer charges at most `window` keys a query (`cost.py` says how).
Under sparse attention the latent group is the measured sparse layer where the tables have it
(decode at full lengths, a prefill at its chunks' own lengths) and the indexer, a group of its
own, adds only a chunk's pairs with cached keys; elsewhere the latent group charges at most
`index_topk` keys a query, as a window does, and the indexer every key, by the roofline.
A linear-attention layer (Gated DeltaNet) is a group of its own, costed by the step's chunks
and decodes, not its keys (`linear_attention.py`): its convolution and the delta rule over each
sequence's state, the measured kernels' where the tables have them (prefill as T / L prompts of
L tokens, L the chunks' length weighted by their tokens, sum n^2 / sum n, which the longest
chunk bounds; decode at `decode_seqs` sequences), else the roofline's

    prefill: launches + max(flop x T / DELTA_EFFICIENCY,
                            a token's activations x T + a state read and written x chunks,
                            DELTA_STEP_S x ceil(L / 64))
    decode:  launches + max(flop x decodes / top compute efficiency,
                            (a token's activations + a state read and written) x decodes)

`HardwareCost` holds the tables by rows that the roofline reads (`RowTables`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...notes import say_once
from ..shape import StepShape
from .dtypes import STATE_DTYPES
from .linear_attention import DELTA_CHUNK, DELTA_KERNELS, DELTA_STEP_S, LinearSteps
from .measured import MeasuredOps
from .operators import attention_shapes
from .reach import growth


@dataclass(frozen=True)
class Attention:
    """Seconds of one kind of attention (prefill or decode) in a group of layers (all, full or
    sliding), per unit of each count: FLOPs per query-key pair / peak (to divide by the compute
    efficiency), a query's activations and a key's cache bytes / bandwidth; `window` keys a
    query attends to at most (0: every key)."""

    launch_s: float
    flop_s: float
    query_s: float
    key_s: float
    window: int = 0
    layers: int = 0  # how many layers (a measured kernel's time is per layer)
    sparse: int = 0  # keys a query attends to at most, an indexer's choice among them all
    indexer: bool = False  # sparse attention's indexer: every key scored (the roofline's)
    linear: bool = False  # linear attention: `query_s` a token's, `key_s` a sequence's state
    step_s: float = 0.0  # and in prefill, each chunk of a sequence's at least (`DELTA_STEP_S`)


def attention_groups(arch, tp: int, kind: str, eff, peak: float, bandwidth: float,
                     act_bytes: float, kv_bytes: float, fp8_peak: float | None = None) -> tuple:
    """The `Attention` of `kind` ("prefill" or "decode") of each group of layers: the full
    ones, then the sliding ones, then a sparse attention's indexer; its FLOPs at `peak` (the
    indexer's, in fp8, at `fp8_peak`: default `peak`), its bytes at `bandwidth` times the
    efficiency `eff` reaches."""
    flops, queries, keys = attention_shapes(arch, tp)[kind]
    memory = bandwidth * eff.memory
    groups = tuple(Attention(layers * eff.launch_s, layers * flops / peak,
                             layers * queries * act_bytes / memory,
                             layers * keys * kv_bytes / memory, window, layers,
                             sparse=arch.index_topk if not window else 0)
                   for layers, window in ((arch.full_layers, 0),
                                          (arch.sliding_layers, arch.sliding_window)) if layers)
    if arch.linear_layers:
        groups = (*groups, linear_group(arch, tp, kind, eff, peak, bandwidth, act_bytes))
    if not arch.is_sparse:
        return groups
    # the indexer: each query's logits over every key, its heads' fp8 dot products, reading
    # its fp8 key (a float32 scale per 128 values) a key, whole on every GPU
    layers, heads, width = arch.n_layers, arch.index_n_heads, arch.index_head_dim
    key_bytes = width + 4 * -(-width // 128)
    return (*groups, Attention(layers * eff.launch_s,
                               layers * 2 * heads * width / (fp8_peak or peak),
                               layers * heads * width * act_bytes / memory,
                               layers * key_bytes / memory, 0, layers, indexer=True))


def linear_group(arch, tp: int, kind: str, eff, peak: float, bandwidth: float,
                 act_bytes: float) -> Attention:
    """The `Attention` of `kind` of the linear-attention layers on one GPU (module docstring):
    two kernels a layer in decode (the convolution and the recurrent rule), seven in prefill
    (the convolution and the chunked form's `DELTA_KERNELS`); a token's FLOPs (the
    convolution's, and a value head's k x v state read, corrected and written: 6 k v, with the
    chunked form's work within a chunk in prefill) and activations (the convolution's input
    and output, the rule's queries, keys, values, two scalars a head and output), and a
    sequence's state (its matrices and the convolution's window), read and written once; in
    prefill also each chunk's state, written and read back, and `DELTA_STEP_S` a chunk."""
    k_heads, v_heads = arch.linear_k_heads // tp, arch.linear_v_heads // tp
    k, v = arch.linear_k_dim, arch.linear_v_dim
    channels = 2 * k_heads * k + v_heads * v  # what the convolution runs over
    flops = 2 * channels * arch.linear_conv + v_heads * 6 * k * v
    activations = (3 * channels + 2 * v_heads + v_heads * v) * act_bytes
    step_s, kernels = 0.0, 2
    if kind == "prefill":  # the work within a chunk; each chunk's state written and read back
        flops += v_heads * 2 * DELTA_CHUNK * (k + v)
        activations += 2 * v_heads * k * v * act_bytes / DELTA_CHUNK
        step_s, kernels = DELTA_STEP_S, 1 + DELTA_KERNELS
    state = v_heads * k * v * STATE_DTYPES[arch.state_dtype] + \
        (arch.linear_conv - 1) * channels * act_bytes
    layers, memory = arch.linear_layers, bandwidth * eff.memory
    return Attention(kernels * layers * eff.launch_s, layers * flops / peak,
                     layers * activations / memory, layers * 2 * state / memory, 0, layers,
                     linear=True, step_s=layers * step_s)


class RowTables(Protocol):
    """What the roofline's attention reads from the cost model's tables by rows."""

    def compute_at(self, rows: int) -> float:
        """The matmuls' compute efficiency at `rows` rows."""

    def block_projections(self, rows: int) -> float:
        """The roofline's seconds of a measured latent block's projections (0: no block)."""


class StepAttention(LinearSteps):
    """The attention of a step's prefill and decode (module docstring), added to a time group
    by group in one order everywhere, so that a run of steps costs, to the last bit, what its
    steps one by one do."""

    def __init__(self, prefill: tuple, decode: tuple, measured: MeasuredOps | None,
                 tables: RowTables, top_compute: float, flash_attention: bool, source: str):
        """`prefill`, `decode`: each group's `Attention`; `top_compute`: the compute
        efficiency decode attention runs at; `flash_attention`: a chunk's causal work counts
        the keys before each query (n (n + 1) / 2), not the square; `source`: the run's name
        in notes."""
        self.prefill_groups, self.decode_groups = prefill, decode
        self.measured, self.tables, self.source = measured, tables, source
        self.top_compute, self.flash_attention = top_compute, flash_attention
        # a sparse-attention layer measured whole, its indexer within (`MeasuredOps`)
        self.sparse_measured = measured is not None and measured.sparse_block

    def plus_prefill(self, time: float, shape: StepShape) -> float:
        """`time` plus the prefill attention of a step of `shape` (with prefill tokens)."""
        tokens, chunks = shape.prefill_tokens, shape.prefill_seqs
        causal = shape.prefill_attention - (shape.prefill_square - tokens) / 2 \
            if self.flash_attention else shape.prefill_attention
        compute = self.tables.compute_at(tokens)
        fresh = (shape.prefill_square + tokens) / 2  # the chunks' work were they fresh prompts
        for group in self.prefill_groups:
            if group.linear:
                time += self._linear_prefill(group, chunks, tokens, shape.prefill_square)
                continue
            if group.indexer and self.sparse_measured:  # the context's pairs: the block holds
                extra = max(causal - fresh, 0.0)  # its fresh prompts' and not theirs
                if extra:
                    time += group.launch_s + max(group.flop_s * extra / compute,
                                                 group.query_s * tokens
                                                 + group.key_s * shape.prefill_context)
                continue
            work = causal
            if group.sparse:  # measured whole: at its chunks' lengths; else at most topk keys
                work = fresh if self.sparse_measured else min(causal, tokens * group.sparse)
            measured = self._measured_prefill(group, chunks, work, tokens)
            if measured == measured:  # a number, not NaN
                time += measured
                continue
            if not group.indexer:
                time += self.tables.block_projections(tokens)
            reads = shape.prefill_context + tokens  # keys read
            if group.window:
                work = min(work, tokens * group.window)
                reads = min(reads, 2 * tokens + chunks * group.window)
            if group.sparse:
                reads = min(reads, tokens * group.sparse)
            time += group.launch_s + max(group.flop_s * work / compute,
                                         group.query_s * tokens + group.key_s * reads)
        return time

    def plus_decode(self, time: float, decodes: int, context: int) -> float:
        """`time` plus the decode attention of `decodes` sequences attending to `context` keys
        in all."""
        for group in self.decode_groups:
            time += self._decode(group, decodes, context)
        return time

    def plus_decode_arrays(self, time: np.ndarray, decodes: np.ndarray,
                           context: np.ndarray) -> np.ndarray:
        """`plus_decode` of steps given as arrays, operation for operation (0 where a step has
        no decodes)."""
        for group in self.decode_groups:
            if self.measured is not None:  # step by step, as a step alone is costed
                attention = np.array([self._decode(group, d, c) if d else 0.0 for d, c in
                                      zip(decodes.tolist(), context.tolist())], dtype=np.float64)
            elif group.linear:  # the sequences' states, whatever their lengths
                attention = group.launch_s + np.maximum(
                    group.flop_s * decodes / self.top_compute,
                    (group.query_s + group.key_s) * decodes)
            else:
                keys = np.minimum(context, decodes * group.window) if group.window else context
                if group.sparse:
                    keys = np.minimum(keys, decodes * group.sparse)
                attention = group.launch_s + np.maximum(
                    group.flop_s * keys / self.top_compute,
                    group.query_s * decodes + group.key_s * keys)
            time = time + attention
        return time

    # --- one group ----------------------------------------------------------------------------
    def _decode(self, group: Attention, decodes: int, context: int) -> float:
        if self.sparse_measured and group.indexer:  # within the measured block
            return 0.0
        if group.linear:
            return self._linear_decode(group, decodes)
        if group.sparse and not self.sparse_measured:
            context = min(context, decodes * group.sparse)
        measured = self._measured_decode(group, decodes, context)
        if measured == measured:
            return measured
        return self._decode_roofline(group, decodes, context)

    def _decode_roofline(self, group: Attention, decodes: float, context: float) -> float:
        """The roofline's seconds of a group's decode attention (with a measured block's
        projections): `decodes` sequences attending to `context` keys in all."""
        keys = min(context, decodes * group.window) if group.window else context
        projections = 0.0 if group.indexer else \
            self.tables.block_projections(max(round(decodes), 1))
        return projections + group.launch_s + max(
            group.flop_s * keys / self.top_compute, group.query_s * decodes + group.key_s * keys)

    def _prefill_roofline(self, group: Attention, tokens: float, chunks: float,
                          length: float) -> float:
        """The roofline's seconds of a group's prefill attention (with a measured block's
        projections) for `tokens` rows doing the work of `chunks` fresh prompts of `length`
        tokens, as the tables' lookup stands them for (`MeasuredOps.prefill_point`)."""
        rows = max(round(tokens), 1)
        keys = chunks * length
        work = keys * (length + 1) / 2
        if group.window:
            work = min(work, keys * group.window)
        return self.tables.block_projections(rows) + group.launch_s + max(
            group.flop_s * work / self.tables.compute_at(rows), group.query_s * tokens
            + group.key_s * keys)

    def _measured_prefill(self, group: Attention, chunks: int, causal: float,
                          tokens: int) -> float:
        """Seconds of a group's measured prefill attention (NaN: not measured; an indexer's
        never is)."""
        if self.measured is None or group.indexer:
            return math.nan
        seconds = self.measured.prefill_attention(group.window, chunks, causal, tokens)
        if seconds == seconds:
            return group.layers * seconds
        batch, length = self.measured.prefill_point(group.window, chunks, causal, tokens)
        here = self._prefill_roofline(group, tokens, batch, length)
        seconds = self.measured.anchored(
            "prefill", group.window, batch, length, lambda b, n: growth(here, (
                self._prefill_roofline(group, tokens * (b * n) / (batch * length), b, n))))
        return self._past_reach("prefill", group, seconds)

    def _measured_decode(self, group: Attention, decodes: int, context: int) -> float:
        """Seconds of a group's measured decode attention (NaN: not measured; an indexer's
        never is)."""
        if self.measured is None or group.indexer:
            return math.nan
        seconds = self.measured.decode_attention(group.window, decodes, context)
        if seconds == seconds:
            return group.layers * seconds
        here = self._decode_roofline(group, decodes, context)
        seconds = self.measured.anchored(
            "decode", group.window, decodes, context / decodes,
            lambda b, n: growth(here, self._decode_roofline(group, b, b * n)))
        return self._past_reach("decode", group, seconds)

    def _past_reach(self, kind: str, group: Attention, seconds: float | None) -> float:
        """A group's `kind` attention past its tables' reach, from one layer's `seconds`
        (None: not measured), said once."""
        if seconds is None or seconds != seconds:
            return math.nan
        self._say_past_reach(f"{kind} attention")
        return group.layers * seconds

    def _say_past_reach(self, what: str) -> None:
        say_once(f"note: {self.source}: {what} of some steps is past the measured tables' "
                 f"reach (2x their range of batch or length); costed there by the roofline, "
                 f"scaled to meet the tables where they end")
