"""Calibration: the machine's speed right now, against the speed its profile was measured at.

A profile's step times are normalised to the median time of one fixed reference step
(`sim.profile.REFERENCE`, a 32-token prefill beside 8 decodes of 128 tokens), recorded as
`cost_model.reference_s`. A machine shared with other work runs at another overall speed minutes
later (10-30% slower or faster on the 2-core machine servesim was measured on), and every step
shifts with it. `measure_speed` times the same reference step now, in the profiler's bursts,
for a few seconds, and returns (median now) / (median in the profile): scaling the cost model by
it predicts steps at the machine's present speed. It looks at nothing but the
reference step, never at the workload about to run. `sim.validate` (`--calibrate`) scales the
cost model by it (`validation_steps.ScaledCost`).
"""

from __future__ import annotations

import time

import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor

from .profile import BLOCK_SIZE, REFERENCE, burst
from .profile_grid import build_plan, release

CALIBRATE_S = 3.0  # how long the reference step is timed
WARM_S = 0.3  # runs first, not counted (a fresh executor's first steps are slower)


def measure_speed(params: dict, vocab_size: int, reference_s: float,
                  seconds: float = CALIBRATE_S) -> float:
    """(the reference step's median time now) / `reference_s`, timed for `seconds` on a scratch
    executor sharing `params` (the weights the server uses, so their cache state is the same);
    > 1: the machine is slower than when profiled."""
    tokens = sum(c + n for c, n, *_ in REFERENCE.prefills) + sum(REFERENCE.decodes)
    blocks = len(REFERENCE.prefills) + len(REFERENCE.decodes) + -(-tokens // BLOCK_SIZE)
    block_manager = BlockManager(blocks, BLOCK_SIZE)
    executor = NumpyExecutor(params, block_manager, rng=np.random.default_rng(0))
    plan = build_plan(REFERENCE, block_manager, np.random.default_rng(0), vocab_size)
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < WARM_S:
            executor.execute(plan)
        times = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or len(times) < 3:
            times.append(burst(executor, plan))
    finally:
        release(plan, block_manager)
    return float(np.median(times)) / reference_s


def reference_of(cost) -> float:
    """The profile's reference time, or a clear error for a model without one."""
    reference = getattr(cost, "reference_s", None)
    if reference is None:
        source = getattr(cost, "source", "the cost model")
        raise ValueError(f"calibrate: {source} records no reference step time (a linear cost "
                         f"model, or a profile written before calibration existed); profile "
                         f"again with `servesim profile`")
    return reference
