"""`HardwareCost`: a step's time on a real GPU, from silicon-measured kernel times where the
tables have them (`measured.py`: every weight matmul, the LM head, the all-reduces, prefill and
decode attention) and the roofline of every other operator, and of any the tables miss.

    step_s = cpu_overhead + layers x (linear and elementwise operators of T rows
                                      + 2 all-reduces of T x d_model with tp > 1
                                      + prefill attention + decode attention)
             + embedding(T) + LM head(rows that sample)

with T = prefill tokens + decodes + padding rows. The part that depends on T alone (every
weight matmul, every elementwise kernel, the all-reduces, the embedding) is tabulated per T the
first time a T is seen, so a step costs a table lookup and the two attention terms; a run of
decode-only steps (`CostModelExecutor.execute_run`) is the same arithmetic on arrays, so every
duration is bit for bit the one the step alone would give.
"""

from __future__ import annotations

import math

import numpy as np

from ..model import CostModel
from ..shape import StepShape
from .operators import (ADDS_PER_LAYER, ELEMENTWISE, embedding_bytes, elementwise_bytes,
                        lm_head_counts, matmul_counts)
from .measured import MeasuredOps, say_once
from .setup import HardwareSetup
from .timing import elementwise_time, matmul_time

STEP_OVERHEAD_S = 1.0e-3  # the server's own time a step (scheduling, inputs, sampling, outputs)
SEQ_OVERHEAD_S = 10e-6  # and per sequence in the batch (an assumption; hardware.* overrides it)


class HardwareCost(CostModel):
    """The roofline cost model (module docstring) of a `HardwareSetup`; its swap time is a
    block over the GPU's host link. Decode attention reads each sequence's own keys (paged
    kernels), so it does not count gathered keys."""

    def __init__(self, setup: HardwareSetup, step_overhead_s: float = STEP_OVERHEAD_S,
                 seq_overhead_s: float = SEQ_OVERHEAD_S, efficiency=None):
        """`efficiency`: a `timing.Efficiency` instead of the GPU's fitted one."""
        self.setup = setup
        self.arch, self.gpu, self.tp = setup.arch, setup.gpu, setup.tp
        self.peak = setup.gpu.peak_flops(setup.dtype)
        self.bandwidth = setup.gpu.bandwidth
        self.eff = efficiency or setup.gpu.efficiency()
        self.all_reduce = setup.gpu.all_reduce(setup.tp)
        self.step_overhead_s, self.seq_overhead_s = step_overhead_s, seq_overhead_s
        self.measured: MeasuredOps | None = setup.kernels
        kernels = self.measured.describe() if self.measured else "roofline"
        self.source = (f"hardware: {self.arch.name} on {self.gpu.id} x {self.tp} "
                       f"({setup.dtype}; {kernels})")
        self.model = {"max_seq_len": self.arch.max_seq_len}
        self._beyond: dict = {}  # operator -> rows past which its tables do not reach
        self._rows = np.zeros(0)  # seconds of the T-dependent part, by T
        self._rows_list: list = []
        self._head = np.zeros(0)  # seconds of the LM head, by rows sampled
        self._head_list: list = []
        self._compute = np.zeros(0)  # matmul compute efficiency, by tokens
        self._compute_list: list = []
        self._grow(1024)
        layers, q = self.arch.n_layers, self.arch.q_dim // self.tp
        kv = self.arch.kv_heads_per_gpu(self.tp) * self.arch.hd
        kv_bytes = setup.weight_bytes
        # attention per step, all layers: FLOPs and bytes per unit of each count
        self._flop_s = layers * 4 * q / self.peak  # x causal work / compute efficiency
        self._q_bytes_s = (layers * 2 * q * self.setup.act_bytes
                           / (self.bandwidth * self.eff.memory))
        self._kv_bytes_s = layers * 2 * kv * kv_bytes / (self.bandwidth * self.eff.memory)
        self._attn_launch_s = layers * self.eff.launch_s
        self._top_compute = self.eff.compute[-1]

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
        layer = np.zeros(size)
        for op, (flops, wb, ab) in matmul_counts(arch, tp, t, w, self.setup.act_bytes).items():
            layer += self._matmul(op, flops, wb + ab, t)
        moved = elementwise_bytes(arch, tp, t, self.setup.act_bytes)
        for op in ELEMENTWISE:
            repeats = ADDS_PER_LAYER if op == "add" else 1
            layer += repeats * elementwise_time(op, moved[op], self.bandwidth, self.eff)
        if self.all_reduce is not None:
            roof = self.all_reduce.time(t * arch.d_model * self.setup.act_bytes, self.tp)
            layer += 2 * self._measured_or(roof, self.measured and self.measured.all_reduce(t),
                                           "all_reduce")
        rows = arch.n_layers * layer + elementwise_time(
            "emb", embedding_bytes(arch, t, self.setup.act_bytes), self.bandwidth, self.eff)
        rows[0] = 0.0
        flops, wb, ab = lm_head_counts(arch, tp, t, w, self.setup.act_bytes)
        head = self._matmul("lm_head", flops, wb + ab, t)
        head[0] = 0.0
        self._say_beyond()
        self._rows, self._rows_list = rows, rows.tolist()
        self._head, self._head_list = head, head.tolist()
        self._compute = self.eff.compute_at(np.maximum(t, 1))
        self._compute_list = self._compute.tolist()

    def _matmul(self, op: str, flops, nbytes, t):
        """Seconds of matmul `op` for each row count of `t`: measured where the tables reach,
        the roofline elsewhere."""
        roof = matmul_time(flops, nbytes, t, self.peak, self.bandwidth, self.eff)
        return self._measured_or(roof, self.measured and self.measured.matmul(op, t), op)

    def _measured_or(self, roof, measured, op: str):
        """`measured` where it is a time, `roof` where it is NaN (out of the tables' reach; the
        run says so once) or where there is no measured time at all."""
        if measured is None:
            return roof
        missing = np.isnan(measured)
        if missing[1:].any():  # row count 0 is never a step
            self._beyond[op] = int(missing[1:].argmax())  # rows of the last measured reach
        return np.where(missing, roof, measured)

    def _say_beyond(self) -> None:
        """One note for the operators whose measured tables a step's rows outgrew."""
        if self._beyond:
            rows = min(self._beyond.values())
            say_once(f"note: {self.source}: steps of more than {rows:,} rows are past the "
                     f"measured tables' reach (2x their range) for "
                     f"{', '.join(sorted(self._beyond))}; costed by the roofline there")

    def _fit(self, largest: int) -> None:
        if largest >= len(self._rows_list):
            size = len(self._rows_list)
            while size <= largest:
                size *= 2
            self._grow(size)

    # --- the cost -----------------------------------------------------------------------------
    def step_time(self, shape: StepShape):
        rows = shape.rows
        if isinstance(rows, np.ndarray) or isinstance(shape.decode_context, np.ndarray):
            return self._step_time_arrays(shape)
        sampled, tokens, decodes = shape.sampled_seqs, shape.prefill_tokens, shape.decode_seqs
        self._fit(max(rows, sampled))
        time = self.step_overhead_s + self.seq_overhead_s * (shape.prefill_seqs + decodes)
        time = time + self._rows_list[rows] + self._head_list[sampled]  # as on arrays
        if tokens:
            causal = shape.prefill_attention - (shape.prefill_square - tokens) / 2 \
                if self.arch.flash_attention else shape.prefill_attention
            measured = self._prefill_measured(shape.prefill_seqs, causal)
            time += measured if measured == measured else self._attn_launch_s + max(
                self._flop_s * causal / self._compute_list[tokens],
                self._q_bytes_s * tokens + self._kv_bytes_s * (shape.prefill_context + tokens))
        if decodes:
            measured = self._decode_measured(decodes, shape.decode_context)
            time += measured if measured == measured else self._attn_launch_s + max(
                self._flop_s * shape.decode_context / self._top_compute,
                self._q_bytes_s * decodes + self._kv_bytes_s * shape.decode_context)
        return time

    def _prefill_measured(self, chunks: int, causal: float) -> float:
        """Seconds of every layer's measured prefill attention (NaN: the roofline's)."""
        if self.measured is None:
            return math.nan
        return self.arch.n_layers * self.measured.prefill_attention(chunks, causal)

    def _decode_measured(self, decodes: int, context: int) -> float:
        """Seconds of every layer's measured decode attention (NaN: the roofline's)."""
        if self.measured is None:
            return math.nan
        return self.arch.n_layers * self.measured.decode_attention(decodes, context)

    def _step_time_arrays(self, shape: StepShape) -> np.ndarray:
        """`step_time` on arrays, operation for operation (decode-only runs: no prefill)."""
        if np.any(np.asarray(shape.prefill_tokens)):
            raise ValueError("HardwareCost predicts arrays of decode-only steps")
        size = np.broadcast(shape.prefill_tokens, shape.decode_seqs, shape.decode_context,
                            shape.padding_seqs, shape.sampled_seqs).shape
        rows = np.broadcast_to(np.asarray(shape.rows), size)
        sampled = np.broadcast_to(np.asarray(shape.sampled_seqs), size)
        decodes = np.broadcast_to(np.asarray(shape.decode_seqs), size)
        context = np.broadcast_to(np.asarray(shape.decode_context), size)
        self._fit(int(max(rows.max(initial=0), sampled.max(initial=0))))
        time = self.step_overhead_s + self.seq_overhead_s * (shape.prefill_seqs + decodes)
        time = time + self._rows[rows] + self._head[sampled]
        attention = self._attn_launch_s + np.maximum(
            self._flop_s * context / self._top_compute,
            self._q_bytes_s * decodes + self._kv_bytes_s * context)
        if self.measured is not None:  # step by step, as `step_time` looks each one up
            measured = np.array([self._decode_measured(d, c) if d else math.nan for d, c in
                                 zip(decodes.tolist(), context.tolist())], dtype=np.float64)
            attention = np.where(np.isnan(measured), attention, measured)
        return np.where(decodes > 0, time + attention, time)
