"""Steps that run colder than the profile's: after the engine was idle (the wake-up cost), and
after a prefill (the after-prefill cost).

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

A prefill pushes its many rows through every weight matrix and attention, evicting what the
decode steps around it keep in cache; the few steps after it run slower until their weights and
KV blocks are back (a one-sequence decode of the small fidelity model: +13% after a 96-token
prefill, settling over about five steps; +47% right after a 512-token one). Under continuous
batching a prefill comes every few steps, so this is a steady few percent of the decode time.
`measure_after_prefill` runs reference decode steps until they settle, then one prefill of
AFTER_TOKENS tokens (or none, the control), then AFTER_STEPS more, interleaved over rounds, and
keeps, for each prefill length and each following step, the median extra time over the control.
"""

from __future__ import annotations

import time

import numpy as np

from .grid import ShapeSpec, build_plan, release

IDLE_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
ROUNDS = 20
AFTER_TOKENS = (16, 64, 256, 1024)  # prefill lengths the after-prefill cost is measured after
AFTER_STEPS = 8  # steps after a prefill that are timed
SETTLE = 10  # reference steps run back to back before each measurement


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


def measure_after_prefill(executor, rng: np.random.Generator, vocab_size: int,
                          rounds: int | None = None, max_tokens: int | None = None) -> dict:
    """{"prefill_tokens": AFTER_TOKENS (those <= max_tokens), "extra_s": [[seconds added to
    each of the AFTER_STEPS steps after a prefill of that length], ...]}."""
    rounds = rounds or ROUNDS
    block_manager, bs = executor.block_manager, executor.block_manager.block_size
    tokens = [n for n in AFTER_TOKENS if max_tokens is None or n <= max_tokens]
    followers = [build_plan(ShapeSpec(decodes=(8 * bs,)), block_manager, rng, vocab_size),
                 build_plan(ShapeSpec(decodes=(8 * bs,) * 8), block_manager, rng, vocab_size)]
    prefills = [None] + [build_plan(ShapeSpec(prefills=((0, n),)), block_manager, rng,
                                    vocab_size) for n in tokens]
    times = np.zeros((len(followers), len(prefills), rounds, AFTER_STEPS))
    try:
        for r in range(rounds):
            for f, follower in enumerate(followers):
                for p in rng.permutation(len(prefills)):
                    for _ in range(SETTLE):
                        executor.execute(follower)
                    if prefills[p] is not None:
                        executor.execute(prefills[p])
                    for k in range(AFTER_STEPS):
                        times[f, p, r, k] = executor.execute(follower).duration_s
    finally:
        for plan in followers + [p for p in prefills if p is not None]:
            release(plan, block_manager)
    median = np.median(times, axis=2)  # [follower, prefill, step]
    extra = np.median(median[:, 1:] - median[:, :1], axis=0)  # [prefill lengths, steps]
    return {"prefill_tokens": tokens, "extra_s": np.maximum(extra, 0.0).tolist()}
