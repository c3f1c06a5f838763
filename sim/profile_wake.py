"""The wake-up cost: how much longer a step takes when the engine was idle just before it.

An idle server sleeps until the next request arrives (`engine.server.sleep_until`). While it
sleeps its CPU may slow down or be given to other work, which also evicts its caches, so the
step that follows runs colder than one that follows another step: on a 2-core machine shared
with other work, about +0.2 ms after 2 ms of idleness and +0.5 to +0.8 ms after 5 ms or more,
whatever the step's shape. At low load most requests find the server idle, so this lands
directly on their time to first token.

`measure_wake_cost` runs a few reference steps right after one another and right after idle
waits of IDLE_S seconds (with the server's own `sleep_until`), interleaved so that the machine's
slower drifts cancel, and keeps, for each wait, the median extra time over the reference shapes.
The result is made non-decreasing in the wait (a longer sleep is never warmer) and >= 0.
"""

from __future__ import annotations

import time

import numpy as np

from .profile_grid import ShapeSpec, build_plan, release

IDLE_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
ROUNDS = 20


def reference_shapes(block_size: int) -> list[ShapeSpec]:
    """A lone decode, a decode batch and a prefill: the steps an idle server starts with."""
    return [ShapeSpec(decodes=(8 * block_size,)), ShapeSpec(decodes=(8 * block_size,) * 8),
            ShapeSpec(prefills=((0, 4 * block_size),))]


def measure_wake_cost(executor, rng: np.random.Generator, vocab_size: int,
                      rounds: int | None = None) -> dict:
    """{"idle_s": IDLE_S, "extra_s": [seconds added to a step after each idle wait]}."""
    from engine.server import sleep_until

    rounds = rounds or ROUNDS
    block_manager, clock = executor.block_manager, time.perf_counter
    plans = [build_plan(s, block_manager, rng, vocab_size)
             for s in reference_shapes(block_manager.block_size)]
    waits = (0.0,) + IDLE_S
    times = np.zeros((len(plans), len(waits), rounds))  # [shape, wait, round]
    try:
        for r in range(rounds):
            for p, plan in enumerate(plans):
                for w in rng.permutation(len(waits)):
                    executor.execute(plan)  # the step before: the same shape, back to back
                    if waits[w]:
                        sleep_until(clock() + waits[w], clock)
                    times[p, w, r] = executor.execute(plan).duration_s
    finally:
        for plan in plans:
            release(plan, block_manager)
    median = np.median(times, axis=2)  # [shape, wait]
    extra = np.median(median[:, 1:] - median[:, :1], axis=0)  # [waits]
    extra = np.maximum.accumulate(np.maximum(extra, 0.0))
    return {"idle_s": list(IDLE_S), "extra_s": extra.tolist()}
