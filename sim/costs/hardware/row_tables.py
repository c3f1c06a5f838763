"""The part of a hardware step's time that depends on its rows alone (T: every weight matmul,
every elementwise kernel, the all-reduces, the embedding; the LM head by rows sampled), costed
by `operator_times` and the measured kernels and tabulated per T the first time a T is seen
(`TabulatedRows`, which `cost.HardwareCost` mixes in), so that a step costs a table lookup and
its attention terms. With attention data parallelism the routed experts and their exchange are
a table of their own, by every rank's rows (docs/sim/hardware.md, "The step cost").
"""

from __future__ import annotations

import numpy as np

from .dtypes import KEPT_BYTES
from .measured import EXPERT_OPS
from .operators import (ADDS_PER_LAYER, TIMED_AS, elementwise_bytes, embedding_bytes,
                        expert_counts, layer_counts, layers_of, lm_head_counts,
                        matmul_counts)
from .timing import elementwise_time, matmul_time

# The routed experts' operators (the roofline's three, or the measured fused kernel)
ROUTED_OPS = (*EXPERT_OPS, "moe_experts")


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


class TabulatedRows:
    """The tables of a step's row-dependent part (module docstring), grown by doubling. The
    host class sets `arch`, `tp`, `dp`, `setup`, `peak`, `kept_peak`, `bandwidth`, `eff`,
    `all_reduce`, `exchange`, `measured` and the `_reach` and `_reach_experts` notes
    (`reach.PastReach`), then calls `_start_tables`."""

    def _start_tables(self) -> None:
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


def covering(size: int, largest: int) -> int:
    """`size` doubled until a table of that many rows holds row `largest`."""
    while size <= largest:
        size *= 2
    return size
