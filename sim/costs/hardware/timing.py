"""Operator times from FLOPs and bytes: a roofline with efficiency curves.

A matmul of T rows takes `launch + max(FLOPs / (peak x compute_eff(T)), bytes / (bandwidth x
memory_eff))`: memory-bound at few rows (the weights are read once whatever the rows), compute-
bound at many, with a fixed launch cost. `compute_eff(T)` is piecewise linear in log2 T between
knots (a GPU reaches its matmul peak only with enough rows to fill its cores; tiles that do not
divide the rows waste some). Fitted on 16-bit weights, the curve is a function of the FLOPs a
byte of weights feeds (below a few hundred rows the measured GEMMs are bound by reading their
weights): a weight-only-quantized matmul (4-bit weights, 16-bit math) of T rows feeds 16 / 4.25
times the FLOPs a byte, and is costed at the efficiency of that many times T. An elementwise
operator (norms, activation, rotary embedding, residual add, embedding lookup) takes
`launch + bytes / (bandwidth x elementwise_eff)`.
Attention kernels use the matmul curves: prefill attention as compute at the efficiency of its
tokens, decode attention as memory traffic. An all-reduce of S bytes over n GPUs takes
`latency + 2 (n - 1) / n x S / bus_bandwidth` (a ring).

`Efficiency` holds the fitted constants of one measured GPU (`calibration.py` fits them to
published measurements); a catalog GPU without measurements uses those of its `measured` GPU
with its own datasheet peaks and bandwidths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Efficiency:
    """The fitted efficiencies of one measured GPU (fractions of its datasheet peaks) and its
    kernel launch costs (seconds): the matmul curve, and each elementwise operator's own
    (`{op: (launch_s, bandwidth efficiency)}`: a norm reduces over its row, an add streams)."""

    knots: tuple  # token counts, increasing
    compute: tuple  # matmul compute efficiency at each knot
    memory: float  # matmul memory-bandwidth efficiency
    launch_s: float  # a matmul's fixed cost
    elementwise: dict  # {op: (launch_s, bandwidth efficiency)}

    def compute_at(self, tokens):
        """compute_eff(T): linear in log2 T between knots, flat outside them."""
        return np.interp(np.log2(np.maximum(tokens, 1)), np.log2(self.knots), self.compute)

    def to_dict(self) -> dict:
        return {"knots": list(self.knots), "compute": [round(c, 5) for c in self.compute],
                "memory": round(self.memory, 5), "launch_s": round(self.launch_s, 9),
                "elementwise": {op: [round(launch, 9), round(eff, 5)]
                                for op, (launch, eff) in self.elementwise.items()}}

    @classmethod
    def from_dict(cls, table: dict) -> "Efficiency":
        return cls(tuple(table["knots"]), tuple(table["compute"]), table["memory"],
                   table["launch_s"], {op: tuple(v) for op, v in table["elementwise"].items()})


def matmul_time(flops, nbytes, tokens, peak_flops: float, bandwidth: float, eff: Efficiency):
    """Seconds of a matmul (numbers or arrays)."""
    return eff.launch_s + np.maximum(flops / (peak_flops * eff.compute_at(tokens)),
                                     nbytes / (bandwidth * eff.memory))


def elementwise_time(op: str, nbytes, bandwidth: float, eff: Efficiency):
    """Seconds of an elementwise kernel; 0 for one that moves nothing (a model without it)."""
    launch, efficiency = eff.elementwise[op]
    return np.where(nbytes > 0, launch + nbytes / (bandwidth * efficiency), 0.0)


@dataclass(frozen=True)
class AllReduce:
    """A ring all-reduce: `latency_s + 2 (n - 1) / n x bytes / bus_bandwidth`."""

    latency_s: float
    bus_bandwidth: float  # bytes/s

    def time(self, nbytes, workers: int):
        if workers <= 1:
            return 0 * nbytes
        return self.latency_s + 2 * (workers - 1) / workers * nbytes / self.bus_bandwidth
