"""Calibration: a cost model scaled to the machine's speed now.

A profile's step times are normalised to the median time of one fixed reference step
(`sim.profiling.reference.REFERENCE`), recorded as `cost_model.reference_s`. A machine shared with
other work runs at another overall speed minutes later (10-30% slower or faster on the 2-core
machine servesim was measured on), and every step shifts with it.
`sim.profiling.reference.measure_speed` times the reference step now and returns (median now) /
`reference_of(cost)`; `ScaledCost(cost, factor)` predicts steps at that speed. `servesim
validate --calibrate` uses both; the validation also uses `ScaledCost` as a diagnostic, scaled
by the served steps' own speed ratio.
"""

from __future__ import annotations


def reference_of(cost) -> float:
    """The profile's reference time, or a clear error for a model without one."""
    reference = getattr(cost, "reference_s", None)
    if reference is None:
        source = getattr(cost, "source", "the cost model")
        raise ValueError(f"calibrate: {source} records no reference step time (a linear cost "
                         f"model, or a profile written before calibration existed); profile "
                         f"again with `servesim profile`")
    return reference


class ScaledCost:
    """A cost model whose every prediction (and wake-up cost) is multiplied by `factor`; the
    inner model's jitter, if any, is kept (it multiplies on top)."""

    def __init__(self, cost, factor: float):
        self.cost, self.factor = cost, factor
        self.jitter = getattr(cost, "jitter", None)
        self.source = getattr(cost, "source", "cost model")
        self.model = getattr(cost, "model", None)
        self.counts_gathered = getattr(cost, "counts_gathered", False)
        inner = getattr(cost, "wake_cost", None)
        if inner is not None:
            self.wake_cost = lambda idle_s: factor * inner(idle_s)
        after = getattr(cost, "after_prefill_cost", None)
        if after is not None:
            self.after_prefill_cost = lambda tokens, k: factor * after(tokens, k)
            self.after_prefill_steps = getattr(cost, "after_prefill_steps", 0)

    def predict(self, *counts) -> float:
        return self.factor * self.cost.predict(*counts)

    def predict_shape(self, shape) -> float:
        return self.predict(*shape.counts())
