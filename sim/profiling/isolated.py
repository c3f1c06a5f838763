"""The isolated grid: the first way servesim profiled the engine, kept to compare with fitting on
served steps (`served.py`), which the profiler does by default.

`NumpyExecutor` times a grid of step shapes, each alone and in bursts; the step-cost model
(`FittedCost`) is fitted to them, the engine loop's own cost per step is measured through the
real server loop and added, and the wake-up and after-prefill costs are measured in isolation.
Every point is measured in `repeats` rounds; each round visits the points in a fresh random
order, so that a burst of load elsewhere on the machine spreads over many points instead of
spoiling one, and each point keeps its median. Within a round a point runs several times back to
back (at least 3 times and 10 ms) and keeps the median of the second half of its runs. Every
measurement is paired with one of a fixed reference step taken just before it, to take out the
machine's drift in speed (see `_measure`). The fit (`fit.py`) uses the structured grid; the
random held-out steps measure its accuracy on the grid.
"""

from __future__ import annotations

import sys
from dataclasses import asdict

import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.model import ModelConfig

from ..costs.fitted import FEATURES, LATER_FEATURES, ROW_TAILS, FittedCost
from ..costs.fitting import error_summary
from ..costs.shape import COUNTS, StepShape, shape_of, slot_bytes
from .fit import fit_cost, knots_for, with_loop
from .grid import build_plan, grid_shapes, held_out_shapes, release
from .loop_overhead import measure_loop_overhead
from .reference import BLOCK_SIZE, BURST, BURST_S, MAX_BURST, REFERENCE, burst
from .wake import measure_after_prefill, measure_wake_cost

MAX_KV_TOKENS = 16384  # largest context one profiled step holds (bounds the KV storage)

STATISTICS = {"median": np.median, "min": np.min}


def profile_isolated(model: ModelConfig, rng, executor, quick: bool, repeats: int,
                     statistic: str, progress: bool) -> tuple[FittedCost, dict, list]:
    """(the cost, the fit's report, the grid points) of the isolated grid, on `executor` (a
    `NumpyExecutor` of the model with room for MAX_KV_TOKENS)."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    train = grid_shapes(quick, MAX_KV_TOKENS, model.max_seq_len)
    held = held_out_shapes(rng, 10 if quick else 30, quick, MAX_KV_TOKENS, model.max_seq_len)
    times, shapes, reference_s = _measure(executor, model, train + held, repeats, rng, progress)
    seconds = STATISTICS[statistic](times, axis=0)  # [P]
    s_train, y_train = shapes[:len(train)], seconds[:len(train)]
    s_held, y_held = shapes[len(train):], seconds[len(train):]
    knots = knots_for(s.rows for s in s_train)
    fitted = fit_cost(s_train, y_train, asdict(model), knots)
    wake = measure_wake_cost(executor, rng, model.vocab_size, rounds=5 if quick else None)
    after = measure_after_prefill(executor, rng, model.vocab_size, rounds=5 if quick else None,
                                  max_tokens=model.max_seq_len)
    loop, loop_fit = measure_loop_overhead(executor, rng, model.vocab_size, model.max_seq_len)
    total = with_loop(fitted, loop, wake, None, reference_s, after)
    report = {"method": "isolated grid: non-negative least squares on relative error",
              "quick": quick, "repeats": repeats,
              "burst": {"min_runs": BURST, "min_s": BURST_S, "max_runs": MAX_BURST},
              "statistic": statistic,
              "train": error_summary(_predict(fitted, s_train), y_train),
              "held_out": error_summary(_predict(fitted, s_held), y_held),
              "loop": loop_fit, "executor_coefficients": dict(zip(FEATURES, fitted.coefficients)),
              "loop_coefficients": loop}
    points = [_point(name, shape, y) for name, ss, ys in (("train", s_train, y_train),
                                                           ("held_out", s_held, y_held))
              for shape, y in zip(ss, ys)]
    return total, report, points


def grid_executor(model: ModelConfig, params: dict) -> NumpyExecutor:
    """An executor with room for the grid's largest step."""
    block_manager = BlockManager(MAX_KV_TOKENS // BLOCK_SIZE + 256, BLOCK_SIZE)
    return NumpyExecutor(params, block_manager, rng=np.random.default_rng(0))


def _measure(executor, model: ModelConfig, shapes: list, repeats: int, rng, progress: bool):
    """Step seconds of every round [R, P], the StepShape of every point and the reference
    step's median seconds (what the times are normalised to). Each measurement
    is paired with one of REFERENCE, taken just before it, and scaled by the ratio of the
    reference's median over the whole profile to that measurement: the machine's speed drifts
    over seconds (other work, its CPU's clock), and the pairing takes most of that out."""
    measured = [None] * len(shapes)
    times = np.zeros((repeats, len(shapes)))  # [R, P]
    reference = np.zeros((repeats, len(shapes)))  # [R, P]
    bar = _bar(repeats * len(shapes), progress)
    for shape in shapes[:3]:  # warm-up: first-touch of buffers and caches
        _run(executor, shape, rng, model)
    block_manager = executor.block_manager
    ref_plan = build_plan(REFERENCE, block_manager, rng, model.vocab_size)
    try:
        for r in range(repeats):
            for i in rng.permutation(len(shapes)):
                reference[r, i] = burst(executor, ref_plan)
                times[r, i], measured[i] = _run(executor, shapes[i], rng, model)
                bar.update(1)
    finally:
        release(ref_plan, block_manager)
    bar.close()
    return times * (np.median(reference) / reference), measured, float(np.median(reference))


def _run(executor, shape, rng, model: ModelConfig) -> tuple[float, StepShape]:
    """Build the shape's plan and time it (`burst`); (seconds, shape)."""
    block_manager = executor.block_manager
    plan = build_plan(shape, block_manager, rng, model.vocab_size)
    try:
        return burst(executor, plan), shape_of(plan, block_manager.block_size,
                                               slot_bytes(asdict(model)))
    finally:
        release(plan, block_manager)


def _predict(cost: FittedCost, shapes: list) -> np.ndarray:
    return np.array([cost.step_time(s) for s in shapes])


def _point(split: str, shape: StepShape, seconds: float) -> dict:
    return {"split": split, **shape._asdict(), "measured_s": float(seconds)}


def executor_cost(profile: dict) -> FittedCost:
    """An isolated-grid profile's fitted executor cost alone (without the loop's), as the fit
    saw it."""
    fit = profile["cost_model"]
    rows = fit["rows"]
    given = LATER_FEATURES | (profile.get("fit", {}).get("executor_coefficients")
                              or fit["executor_coefficients"])  # profiles before format 3
    return FittedCost(tuple(given[f] for f in FEATURES), profile["model"],
                      "profile", tuple(rows["knots"]), tuple(rows["costs_s"]),
                      tuple(rows["tails_s"][t] for t in ROW_TAILS))


def predict_profile_points(profile: dict) -> np.ndarray:
    """Predicted executor seconds of every grid point of a profile dict (the fit's errors)."""
    cost = executor_cost(profile)
    points = [dict.fromkeys(LATER_FEATURES, 0) | p for p in profile["grid"]]
    return np.array([cost.step_time(StepShape(**{c: p[c] for c in COUNTS})) for p in points])


def _bar(total: int, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="step", desc="profiling",
                disable=not progress or not sys.stderr.isatty())
