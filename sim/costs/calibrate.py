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

from .model import CostModel
from .shape import StepShape


def reference_of(cost: CostModel) -> float:
    """The profile's reference time, or a clear error for a model without one."""
    if cost.reference_s is None:
        raise ValueError(f"calibrate: {cost.source} records no reference step time (a linear "
                         f"cost model, or a profile written before calibration existed); profile "
                         f"again with `servesim profile`")
    return cost.reference_s


class ScaledCost(CostModel):
    """A cost model whose every step time (wake-up and after-prefill costs included) is
    multiplied by `factor`. The inner model's jitter is kept (it multiplies on top), and so
    are its source, model, gathered-keys counting, swap time and async scheduling; it has no
    reference step of its own (`reference_s` None: calibrate the inner model)."""

    def __init__(self, cost: CostModel, factor: float):
        self.cost, self.factor = cost, factor
        self.jitter, self.source, self.model = cost.jitter, cost.source, cost.model
        self.counts_gathered = cost.counts_gathered
        self.after_prefill_steps = cost.after_prefill_steps
        self.async_scheduling = cost.async_scheduling

    def step_time(self, shape: StepShape):
        return self.factor * self.cost.step_time(shape)

    def wake_cost(self, idle_s: float) -> float:
        return self.factor * self.cost.wake_cost(idle_s)

    def after_prefill_cost(self, tokens: int, k: int) -> float:
        return self.factor * self.cost.after_prefill_cost(tokens, k)

    def swap_block_s(self, block_size: int) -> float | None:
        return self.cost.swap_block_s(block_size)
