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
scheduler) the server plans and prepares a step while the one before runs on the GPU, so its own
time hides behind the GPU's; the price, one step more before a newcomer is scheduled, is the
simulation loop's (`sim.loop`). A step that prefills may take longer than its kernels, the GPU
waiting on the host (an eager step's kernel launches, its synchronisations):
`prefill_overhead_s`, none unless set (docs/sim/hardware.md, "Prefill overhead"), is part of the
step's GPU time, so that async scheduling does not hide it. A model with experts has two kinds
of layer, dense-MLP and mixture-of-experts, each costed with its own operators; a model with
sliding windows has two kinds of attention, full and windowed; a hybrid with linear attention
has attention layers and linear layers, each with its own projections, and its linear layers'
convolution and delta rule cost a step by its chunks and decodes (`attention.py`). The part that
depends on T alone (every weight matmul, every elementwise kernel, the all-reduces, the
embedding) is tabulated per T the first time a T is seen (`row_tables.py`), so a step costs a
table lookup and the attention terms; a run of decode-only steps
(`CostModelExecutor.execute_run`) is the same arithmetic on arrays, so every duration is bit for
bit the one the step alone would give.

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
from .dtypes import activation_dtype, compute_dtype
from .measured import MeasuredOps
from .ranks import rank_shape
from .reach import PastReach
from .row_tables import TabulatedRows
from .setup import HardwareSetup

STEP_OVERHEAD_S = 1.0e-3  # the server's own time a step (scheduling, inputs, sampling, outputs)
SEQ_OVERHEAD_S = 10e-6  # and per sequence in the batch (an assumption; hardware.* overrides it)


class HardwareCost(TabulatedRows, CostModel):
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
        self._start_tables()
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
