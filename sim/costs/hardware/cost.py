"""`HardwareCost`: a step's time on a real GPU, from silicon-measured kernel times where the
GPU's tables have them (`measured.py`: the weight matmuls, the fused MoE kernel, the LM head, the
all-reduces, prefill and decode attention) and the roofline of every other operator, and of any
the tables miss; past their reach, the roofline's growth from their time where they end
(`reach.py`). A step's attention is `attention.py`'s.

    gpu_s = layers x (linear and elementwise operators of T rows
                      + 2 all-reduces of T x d_model with tp > 1)
            + prefill attention + decode attention (each layer's)
            + embedding(T) + LM head(rows that sample)
            + prefill_overhead_s where the step prefills
    host_s = step_overhead_s + seq_overhead_s x sequences    (the server's own time)
    step_s = max(gpu_s, host_s) with async scheduling, else gpu_s + host_s

with T = prefill tokens + decodes + padding rows. With async scheduling (the default, as every
framework now runs: vLLM's `async_scheduling`, SGLang's overlap schedule, TensorRT-LLM's overlap
scheduler) the server plans and prepares a step while the one before runs on the GPU, so its
own time hides behind the GPU's; the price, one step more before a newcomer is scheduled, is
the simulation loop's (`sim.loop`). A step that prefills may take longer than its kernels, the
GPU waiting on the host (an eager step's kernel launches, its synchronisations):
`prefill_overhead_s`, none unless set (docs/sim/hardware.md, "Prefill overhead"), is part of
the step's GPU time, so that async scheduling does not hide it. A model with experts has two
kinds of layer, dense-MLP and mixture-of-experts, each costed with its own operators; a model
with sliding windows has two kinds of attention, full and windowed; a hybrid with linear
attention has attention layers and linear layers, each with its own projections, and its linear
layers' convolution and delta rule cost a step by its chunks and decodes (`attention.py`). The
part that depends on T alone (every weight matmul, every elementwise kernel, the all-reduces,
the embedding) is tabulated per T the first time a T is seen, so a step costs a table lookup
and the attention terms; a run of decode-only steps (`CostModelExecutor.execute_run`) is the
same arithmetic on arrays, so every duration is bit for bit the one the step alone would give.

With attention data parallelism (`hardware.dp` ranks of tp GPUs, a model with experts) every
rank attends over its own requests and the experts take every rank's tokens, the ranks
stepping together: a step costs its most loaded rank (its ceil(n/dp) share of the step's n
decodes and of its prefill chunks, `rank_shape`) through every operator but the routed experts,
and the routed experts of all T rows across the tp x dp GPUs, with the exchange of those rows
around them (an all-gather before and a reduce-scatter after: costed as one all-reduce of
T x d_model over the tp x dp GPUs) in place of the rank's second all-reduce of an expert layer.

Under sparse attention (DeepSeek-V3.2's) the layer is the measured sparse block where the
tables have it, its indexer within; elsewhere a query's latent attention is charged at most
`index_topk` keys, as a window's is (below), and its indexer, a group of its own, every key:
its fp8 logits at the GPU's fp8 peak and its fp8 keys read, by the roofline
(docs/sim/hardware.md, "Sparse attention").

A sliding layer's attention is charged at most `sliding_window` keys a query: decode attends
min(keys, decodes x window) keys and prefill does min(causal work, tokens x window) and reads
min(context, tokens + chunks x window) cached keys, from the step's totals. This is exact when
every sequence is past the window or none is, and an upper bound otherwise.
"""

from __future__ import annotations

import numpy as np

from ..model import CostModel
from ..shape import StepShape
from .attention import StepAttention, attention_groups
from .dtypes import KEPT_BYTES, activation_dtype, compute_dtype
from .measured import EXPERT_OPS, MeasuredOps
from .operators import (ADDS_PER_LAYER, TIMED_AS, elementwise_bytes, embedding_bytes,
                        expert_counts, layer_counts, layers_of, lm_head_counts,
                        matmul_counts)
from .reach import PastReach
from .ranks import rank_shape
from .setup import HardwareSetup
from .timing import elementwise_time, matmul_time

# The routed experts' operators (the roofline's three, or the measured fused kernel)
ROUTED_OPS = (*EXPERT_OPS, "moe_experts")
STEP_OVERHEAD_S = 1.0e-3  # the server's own time a step (scheduling, inputs, sampling, outputs)
SEQ_OVERHEAD_S = 10e-6  # and per sequence in the batch (an assumption; hardware.* overrides it)


def operator_times(arch, tp: int, ep: int, tokens, weight_bytes: float, act_bytes: float,
                   peak: float, bandwidth: float, eff, expert_bytes: float | None = None,
                   kept_peak: float | None = None) -> dict:
    """{operator: seconds} of one layer's operators on one GPU for `tokens` rows (a number or
    an array): the matmuls, then the elementwise kernels (`operators.py` names them). An
    elementwise kernel that was not measured takes the efficiency of the one it is timed as
    (`TIMED_AS`). The routed experts' weights take `expert_bytes` an element (default
    `weight_bytes`); narrower than the weights they compute with (mxfp4: 4-bit experts in bf16
    math), they take the compute efficiency of the rows that read as many bytes a FLOP
    (`timing.py`). The router stays 16-bit under quantized weights (`KEPT_BYTES`, at
    `kept_peak`, the activations' dtype's; default `peak`)."""
    times = {op: matmul_time(flops, wb + ab, tokens, peak, bandwidth, eff)
             for op, (flops, wb, ab) in matmul_counts(arch, tp, tokens, weight_bytes,
                                                      act_bytes).items()}
    if "moe_router" in times and weight_bytes < KEPT_BYTES:
        flops, wb, ab = matmul_counts(arch, tp, tokens, KEPT_BYTES, act_bytes)["moe_router"]
        times["moe_router"] = matmul_time(flops, wb + ab, tokens, kept_peak or peak, bandwidth,
                                          eff)
    expert_bytes = weight_bytes if expert_bytes is None else expert_bytes
    narrower = weight_bytes / expert_bytes  # the FLOPs a byte feeds, over the other weights'
    times |= {op: matmul_time(flops, wb + ab, rows * narrower, peak, bandwidth, eff)
              for op, (flops, wb, ab, rows) in expert_counts(
                  arch, tp, ep, tokens, expert_bytes, act_bytes).items()}
    moved = elementwise_bytes(arch, tp, tokens, act_bytes, ep)
    times |= {op: elementwise_time(TIMED_AS.get(op, op), nbytes, bandwidth, eff)
              for op, nbytes in moved.items()}
    return times


class HardwareCost(CostModel):
    """The hardware cost model (module docstring) of a `HardwareSetup`: measured kernels where
    its tables have them, the roofline elsewhere; its swap time is a block over the GPU's host
    link. Decode attention reads each sequence's own keys (paged
    kernels), so it does not count gathered keys."""

    def __init__(self, setup: HardwareSetup, step_overhead_s: float = STEP_OVERHEAD_S,
                 seq_overhead_s: float = SEQ_OVERHEAD_S, efficiency=None,
                 async_scheduling: bool = True, prefill_overhead_s: float = 0.0):
        """`efficiency`: a `timing.Efficiency` instead of the GPU's fitted one;
        `async_scheduling`: the server's own time overlaps the GPU's; `prefill_overhead_s`:
        what a step with a prefill takes beyond its kernels, the GPU waiting (module
        docstring)."""
        self.setup = setup
        self.async_scheduling = async_scheduling
        self.arch, self.gpu, self.tp = setup.arch, setup.gpu, setup.tp
        self.peak = setup.gpu.peak_flops(compute_dtype(setup.dtype))
        # attention, the LM head and the routers run in the activations' dtype
        self.kept_peak = setup.gpu.peak_flops(activation_dtype(setup.dtype))
        self.bandwidth = setup.gpu.bandwidth
        self.eff = efficiency or setup.gpu.efficiency()
        self.all_reduce = setup.gpu.all_reduce(setup.tp)
        self.dp = setup.dp  # attention data-parallel ranks (module docstring)
        self.exchange = setup.gpu.all_reduce(setup.tp * setup.dp) if setup.dp > 1 else None
        self.step_overhead_s, self.seq_overhead_s = step_overhead_s, seq_overhead_s
        self.prefill_overhead_s = prefill_overhead_s
        self.measured: MeasuredOps | None = setup.kernels
        kernels = self.measured.describe() if self.measured else "roofline"
        gpus = f"{self.tp}" if setup.dp == 1 else \
            f"{self.tp * setup.dp} ({setup.dp} data-parallel ranks of {self.tp})"
        self.source = (f"hardware: {self.arch.name} on {self.gpu.id} x {gpus} "
                       f"({setup.dtype}; {kernels})")
        if self.measured is not None:
            self.measured.say_roofline(self.source)
        self._reach = PastReach(self.source)
        self._reach_experts = PastReach(self.source, " (every rank's)")
        self.model = {"max_seq_len": self.arch.max_seq_len}
        self._block_list: list = []  # a measured latent block's projections, by T (roofline)
        self._rows = np.zeros(0)  # seconds of the T-dependent part, by T
        self._rows_list: list = []
        self._head = np.zeros(0)  # seconds of the LM head, by rows sampled
        self._head_list: list = []
        # with dp > 1: `_rows` is one rank's part, by its rows, and this the routed experts'
        # and their exchange, by every rank's rows
        self._experts = np.zeros(0)
        self._experts_list: list = []
        self._compute = np.zeros(0)  # matmul compute efficiency, by tokens
        self._compute_list: list = []
        self._grow(1024)
        fp8_peak = setup.gpu.peak_tflops.get("fp8", 0.0) * 1e12  # a sparse indexer's logits
        groups = {kind: attention_groups(self.arch, self.tp, kind, self.eff, self.kept_peak,
                                         self.bandwidth, setup.act_bytes, setup.kv_bytes,
                                         fp8_peak or None)
                  for kind in ("prefill", "decode")}
        self.attention = StepAttention(groups["prefill"], groups["decode"], self.measured, self,
                                       self.eff.compute[-1], self.arch.flash_attention,
                                       self.source)

    def swap_block_s(self, block_size: int) -> float:
        """Seconds to copy one KV block between GPU and host memory (swap preemption): every
        GPU moves its shard of the block over its own link to the host at once."""
        block_bytes = block_size * self.setup.plan.kv_bytes_per_token
        return block_bytes / (self.gpu.host_bandwidth_gbs * 1e9)

    # --- tables -----------------------------------------------------------------------------
    def _grow(self, size: int) -> None:
        """Tabulate T = 0 .. size - 1."""
        t = np.arange(size, dtype=np.float64)  # [size]
        arch, tp, w = self.arch, self.tp, self.setup.weight_bytes
        counts = layer_counts(arch)
        layer = {kind: np.zeros(size) for kind in counts}  # one layer's seconds, by its kind
        times = operator_times(arch, tp, self.setup.ep, t, w, self.setup.act_bytes, self.peak,
                               self.bandwidth, self.eff, self.setup.expert_bytes,
                               self.kept_peak)
        beyond: dict = {}
        if self.measured is not None:
            if self.measured.mla_block:  # the block's projections, should a step fall back
                block = sum(times[op] for op in self.measured.block_ops
                            if op in times) * arch.n_layers
                self._block_list = block.tolist()
            ranks_only = None if self.dp == 1 else [op for op in times if op not in ROUTED_OPS]
            times, beyond = self.measured.layer_times(times, t, ranks_only)
        ranks = self.dp > 1  # the routed experts and their exchange: `_grow_experts`
        for op, seconds in times.items():
            if ranks and op in ROUTED_OPS:
                continue
            repeats = ADDS_PER_LAYER if op == "add" else 1
            for kind in layers_of(op, bool(arch.linear_layers)):
                if kind in layer:
                    layer[kind] += repeats * seconds
        if self.all_reduce is not None:
            reduce = self.all_reduce.time(t * arch.d_model * self.setup.act_bytes, self.tp)
            if self.measured is not None:
                reduce = self.measured.all_reduce(reduce, t, beyond)
            one, reduce = reduce, 2 * reduce
            for kind in ("dense", "moe"):  # with ranks, an expert layer's second is the exchange
                if kind in layer:
                    layer[kind] += one if ranks and kind == "moe" else reduce
        rows = sum(counts[kind] * seconds for kind, seconds in layer.items()) + elementwise_time(
            "emb", embedding_bytes(arch, t, self.setup.act_bytes), self.bandwidth, self.eff)
        rows[0] = 0.0
        flops, wb, ab = lm_head_counts(arch, tp, t, max(w, KEPT_BYTES), self.setup.act_bytes)
        head = matmul_time(flops, wb + ab, t, self.kept_peak, self.bandwidth, self.eff)
        if self.measured is not None:
            head = self.measured.lm_head(head, t, beyond)
        head[0] = 0.0
        self._reach.tabulated(beyond)
        self._rows, self._rows_list = rows, rows.tolist()
        self._head, self._head_list = head, head.tolist()
        self._compute = self.eff.compute_at(np.maximum(t, 1))
        self._compute_list = self._compute.tolist()

    def _grow_experts(self, size: int) -> None:
        """Tabulate, for T = 0 .. size - 1 rows of every data-parallel rank, the routed
        experts across every GPU and their exchange (module docstring)."""
        t = np.arange(size, dtype=np.float64)  # [size]
        arch, act, spread = self.arch, self.setup.act_bytes, self.tp * self.dp
        times = operator_times(arch, spread, self.setup.ep, t, self.setup.weight_bytes, act,
                               self.peak, self.bandwidth, self.eff, self.setup.expert_bytes,
                               self.kept_peak)
        beyond: dict = {}
        if self.measured is not None:
            times, beyond = self.measured.layer_times(times, t, ROUTED_OPS)
        exchange = self.exchange.time(t * arch.d_model * act, spread)
        if self.measured is not None:
            exchange = self.measured.exchange(exchange, t, beyond)
        routed = sum(seconds for op, seconds in times.items() if op in ROUTED_OPS)
        experts = arch.moe_layers * (routed + exchange)
        experts[0] = 0.0
        self._reach_experts.tabulated(beyond)
        self._experts, self._experts_list = experts, experts.tolist()

    def _fit(self, rows: int, sampled: int = 0) -> None:
        """Tabulate up to a step of `rows` rows, `sampled` of them sampled, if need be."""
        largest = max(rows, sampled)
        if largest >= len(self._rows_list):  # `_tabulate`, inline: once a step
            self._grow(covering(len(self._rows_list), largest))
        if largest >= self._reach.first:
            self._reach.reached(rows, sampled)

    def _tabulate(self, largest: int) -> None:
        """Tabulate up to `largest` rows, if need be (not a step: no note)."""
        if largest >= len(self._rows_list):
            self._grow(covering(len(self._rows_list), largest))

    def _fit_experts(self, largest: int) -> None:
        if largest >= len(self._experts_list):
            self._grow_experts(covering(max(len(self._experts_list), 1024), largest))
        if largest >= self._reach_experts.first:
            self._reach_experts.reached(largest)

    # --- the cost -----------------------------------------------------------------------------
    def step_time(self, shape: StepShape):
        rows = shape.rows
        if isinstance(rows, np.ndarray) or isinstance(shape.decode_context, np.ndarray):
            if self.dp > 1:
                self._fit_experts(int(np.max(rows, initial=0)))
                rank = rank_shape(shape, self.dp)
                gpu = self._step_time_arrays(rank) + self._experts[rows]
            else:
                rank = shape
                gpu = self._step_time_arrays(shape)
            host = self._host_s(rank)
            return np.maximum(gpu, host) if self.async_scheduling else gpu + host
        if self.dp > 1:
            self._fit_experts(rows)
            rank = rank_shape(shape, self.dp)
            gpu = self._rank_step_time(rank) + self._experts_list[rows]
        else:
            rank = shape
            gpu = self._rank_step_time(shape)
        host = self._host_s(rank)
        if self.async_scheduling:
            return host if host > gpu else gpu
        return gpu + host

    def _host_s(self, shape: StepShape):
        """The server's own seconds of a step of `shape` (a rank's with dp > 1)."""
        return self.step_overhead_s + self.seq_overhead_s * (shape.prefill_seqs
                                                             + shape.decode_seqs)

    def _rank_step_time(self, shape: StepShape) -> float:
        """A step's GPU time through every operator `_rows` holds, of `shape` (one rank's
        with dp > 1)."""
        rows = shape.rows
        sampled, tokens, decodes = shape.sampled_seqs, shape.prefill_tokens, shape.decode_seqs
        self._fit(rows, sampled)
        time = self._rows_list[rows] + self._head_list[sampled]  # as on arrays
        if tokens:
            time = self.attention.plus_prefill(time, shape) + self.prefill_overhead_s
        if decodes:
            time = self.attention.plus_decode(time, decodes, shape.decode_context)
        return time

    def compute_at(self, rows: int) -> float:
        """The matmuls' compute efficiency at `rows` rows (`attention.RowTables`)."""
        self._tabulate(rows)
        return self._compute_list[rows]

    def block_projections(self, rows: int) -> float:
        """The roofline's seconds of a measured latent-attention block's projections for `rows`
        rows, all layers: what a step past the block's tables adds to its attention (0 without
        such a block; `attention.RowTables`)."""
        if self.measured is None or not self.measured.mla_block:
            return 0.0
        self._tabulate(rows)
        return self._block_list[rows]

    def _step_time_arrays(self, shape: StepShape) -> np.ndarray:
        """`_rank_step_time` on arrays, operation for operation (decode-only runs: no
        prefill)."""
        if np.any(np.asarray(shape.prefill_tokens)):
            raise ValueError("HardwareCost predicts arrays of decode-only steps")
        size = np.broadcast(shape.prefill_tokens, shape.decode_seqs, shape.decode_context,
                            shape.padding_seqs, shape.sampled_seqs).shape
        rows = np.broadcast_to(np.asarray(shape.rows), size)
        sampled = np.broadcast_to(np.asarray(shape.sampled_seqs), size)
        decodes = np.broadcast_to(np.asarray(shape.decode_seqs), size)
        context = np.broadcast_to(np.asarray(shape.decode_context), size)
        self._fit(int(rows.max(initial=0)), int(sampled.max(initial=0)))
        time = self._rows[rows] + self._head[sampled]
        return np.where(decodes > 0, self.attention.plus_decode_arrays(time, decodes, context),
                        time)


def covering(size: int, largest: int) -> int:
    """`size` doubled until a table of that many rows holds row `largest`."""
    while size <= largest:
        size *= 2
    return size
