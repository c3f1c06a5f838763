"""The reference step and timing in bursts: how the profiler, the jitter measurement and
calibration time a step on the real engine.

`REFERENCE` (a 32-token prefill beside 8 decodes of 128 tokens) is timed beside every profiled
point, so the profile's times are normalised to its median (`cost_model.reference_s`);
`measure_speed` times it again later (calibration), and `measure_jitter` runs it back to back to
measure how the machine's speed swings (`sim.costs.jitter`).
"""

from __future__ import annotations

import time

import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor

from ..costs import jitter as jitter_model
from ..costs.fitted import PROFILED_BLOCK_SIZE
from .grid import ShapeSpec, build_plan, release

BLOCK_SIZE = PROFILED_BLOCK_SIZE  # every profile's (recorded in it)
BURST, BURST_S, MAX_BURST = 3, 0.01, 16  # runs of a point in a row: >= 3, >= 10 ms, <= 16
REFERENCE = ShapeSpec(prefills=((0, 32),), decodes=(128,) * 8)  # paired with every measurement
JITTER_S = 20.0  # REFERENCE back to back, for the machine's jitter
CALIBRATE_S = 3.0  # how long calibration times the reference step
WARM_S = 0.3  # runs first, not counted (a fresh executor's first steps are slower)


def burst(executor, plan) -> float:
    """Run the plan in a row at least BURST times and until BURST_S seconds have passed (at
    most MAX_BURST times); the median of the second half of the runs. A small step after an
    unrelated one needs a few runs to reach its steady time (a one-sequence decode of the small
    fidelity model: 1.0, 0.9, 0.86, 0.77, then 0.70 ms), as in a server's run of decode steps."""
    runs = []
    while len(runs) < BURST or (sum(runs) < BURST_S and len(runs) < MAX_BURST):
        runs.append(executor.execute(plan).duration_s)
    return float(np.median(runs[len(runs) // 2:]))


def measure_back_to_back(executor, plan, seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """Run `plan` back to back for `seconds`, and as many times as a jitter fit needs however
    slow the machine is: (start times [n] from 0, durations [n]), seconds."""
    starts, durations = [], []
    t0 = time.perf_counter()
    while (now := time.perf_counter()) - t0 < seconds or len(starts) < jitter_model.MIN_STEPS:
        starts.append(now - t0)
        durations.append(executor.execute(plan).duration_s)
    return np.array(starts), np.array(durations)


def measure_jitter(executor, model, rng, seconds: float = JITTER_S):
    """The machine's jitter (`sim.costs.jitter`): REFERENCE run back to back for `seconds`."""
    plan = build_plan(REFERENCE, executor.block_manager, rng, model.vocab_size)
    try:
        for _ in range(BURST):  # reach its steady time first
            executor.execute(plan)
        return jitter_model.fit(*measure_back_to_back(executor, plan, seconds))
    finally:
        release(plan, executor.block_manager)


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
