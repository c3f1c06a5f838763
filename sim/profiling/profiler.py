"""Profile the real engine: time `NumpyExecutor` over a grid of step shapes, fit the step-cost
model (`FittedCost`), add the engine loop's own cost per step, and write it all as a JSON profile
that `cost.model = "profile"` loads.

Every point is measured in `repeats` rounds; each round visits the points in a fresh random
order, so that a burst of load elsewhere on the machine spreads over many points instead of
spoiling one, and each point keeps its median. Within a round a point runs several times back to
back (at least 3 times and 10 ms) and keeps the median of the second half of its runs: a server
runs steps of nearly the same shape one after the other, with its weights and KV blocks in
cache, which the first runs of a new shape after an unrelated one are not. Every measurement is paired with one of a fixed reference step
taken just before it, to take out the machine's drift in speed (see `_measure`). The fit (`fit.py`) uses the structured grid; the random
held-out steps measure its accuracy. The loop's cost (`loop_overhead.py`) is measured through the
real server loop and added to the fitted coefficients. Last, the reference step runs back to
back for a while: how its time swings from step to step and second to second is the machine's
jitter (`sim.costs.jitter`), which a simulation may apply (`cost.jitter`).

    profile_engine(ModelConfig(), "my-profile.json")   # -> the profile as a dict
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.model import ModelConfig, init_params

from ..costs.fitted import FEATURES, LATER_FEATURES, ROW_TAILS, FittedCost
from ..costs.fitting import error_summary
from ..costs.profile_file import FORMAT
from ..costs.shape import COUNTS, StepShape, shape_of, slot_bytes
from .fit import fit_cost, knots_for, with_loop
from .grid import build_plan, grid_shapes, held_out_shapes, release
from .loop_overhead import measure_loop_overhead
from .reference import (BLOCK_SIZE, BURST, BURST_S, JITTER_S, MAX_BURST, REFERENCE, burst,
                        measure_jitter)
from .wake import measure_after_prefill, measure_wake_cost

MAX_KV_TOKENS = 16384  # largest context one profiled step holds (bounds the KV storage)

STATISTICS = {"median": np.median, "min": np.min}
THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")  # BLAS threads


def profile_engine(model_config, out_path, quick: bool = False, progress: bool = True,
                   repeats: int | None = None, seed: int = 0, statistic: str = "median",
                   jitter_s: float | None = None) -> dict:
    """Measure, fit and write a profile for `model_config` (a ModelConfig or its dict) to
    `out_path`; returns the profile dict. `repeats` defaults to 7 (`quick`: a small grid and 3
    repeats, about a tenth of the time, rougher fit). `statistic`: how a point's rounds become
    one time: "median" (default) or "min" (the least disturbed round). `jitter_s`: how long the
    jitter is measured (default JITTER_S; `quick`: a quarter of it)."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    model = model_config if isinstance(model_config, ModelConfig) else ModelConfig(**model_config)
    repeats = repeats or (3 if quick else 7)
    load_before = _load_average()
    rng = np.random.default_rng(seed)
    train = grid_shapes(quick, MAX_KV_TOKENS, model.max_seq_len)
    held = held_out_shapes(rng, 10 if quick else 30, quick, MAX_KV_TOKENS, model.max_seq_len)
    executor = _executor(model)
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
    jitter_s = jitter_s if jitter_s is not None else JITTER_S / 4 if quick else JITTER_S
    jitter = measure_jitter(executor, model, rng, jitter_s)
    total = with_loop(fitted, loop, wake, jitter, reference_s, after)
    profile = {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": asdict(model),
        "machine": machine_info() | {"load_average_1m": [load_before, _load_average()]},
        "cost_model": {
            "form": "step_s = rows_cost(rows) + sum(coefficients[f] * f) [+ wake_cost(idle "
                    "seconds before the step)] [+ after_prefill extra_s of the k-th step after "
                    "a prefill, linear in its tokens]; rows = prefill_tokens + decode_seqs + "
                    "padding_seqs; rows_cost = linear between rows.knots (costs_s) + "
                    "tails_s[rows_tail_k] * bit k of rows (rows >= 2); coefficients = "
                    "executor_coefficients + loop_coefficients; wake_cost linear in idle_s "
                    "through (0, 0) and wake.extra_s, flat past the last",
            "features": list(FEATURES),
            "coefficients": dict(zip(FEATURES, total.coefficients)),
            "rows": {"knots": list(fitted.row_knots), "costs_s": list(fitted.row_costs),
                     "tails_s": dict(zip(ROW_TAILS, fitted.row_tails))},
            "executor_coefficients": dict(zip(FEATURES, fitted.coefficients)),
            "loop_coefficients": loop,
            "wake": wake,
            "after_prefill": after,
            "jitter": jitter.to_dict(),
            "reference_s": reference_s,
        },
        "fit": {"method": "non-negative least squares on relative error", "repeats": repeats,
                "burst": {"min_runs": BURST, "min_s": BURST_S, "max_runs": MAX_BURST},
                "statistic": statistic,
                "train": error_summary(_predict(fitted, s_train), y_train),
                "held_out": error_summary(_predict(fitted, s_held), y_held),
                "loop": loop_fit},
        "grid": [_point(name, shape, y) for name, ss, ys in (("train", s_train, y_train),
                                                              ("held_out", s_held, y_held))
                 for shape, y in zip(ss, ys)],
    }
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(profile, indent=1) + "\n")
    return profile


def _executor(model: ModelConfig) -> NumpyExecutor:
    block_manager = BlockManager(MAX_KV_TOKENS // BLOCK_SIZE + 256, BLOCK_SIZE)
    return NumpyExecutor(init_params(model), block_manager, rng=np.random.default_rng(0))


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
    return np.array([cost.predict_shape(s) for s in shapes])


def _point(split: str, shape: StepShape, seconds: float) -> dict:
    return {"split": split, **dict(zip(COUNTS, shape.counts())), "measured_s": float(seconds)}


def machine_info() -> dict:
    """Where the profile was measured: CPU, Python, NumPy and its BLAS, thread settings."""
    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__}
    try:
        config = np.show_config(mode="dicts")
        deps = config.get("Build Dependencies", {})
        info["blas"] = {f"{k}_{f}": deps.get(k, {}).get(f) for k in ("blas", "lapack")
                        for f in ("name", "version", "openblas configuration")}
    except (TypeError, ValueError, AttributeError):  # older NumPy: no dict mode
        info["blas"] = None
    info["thread_env"] = {k: os.environ[k] for k in THREAD_ENV if k in os.environ}
    return info


def _load_average() -> float | None:
    """The 1-minute load average (other work competing for the CPU while profiling)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        return None


def executor_cost(profile: dict) -> FittedCost:
    """The profile's fitted executor cost alone (without the loop's), as the fit saw it."""
    fit = profile["cost_model"]
    rows = fit["rows"]
    given = LATER_FEATURES | fit["executor_coefficients"]
    return FittedCost(tuple(given[f] for f in FEATURES), profile["model"],
                      "profile", tuple(rows["knots"]), tuple(rows["costs_s"]),
                      tuple(rows["tails_s"][t] for t in ROW_TAILS))


def predict_profile_points(profile: dict) -> np.ndarray:
    """Predicted executor seconds of every grid point of a profile dict (the fit's errors)."""
    cost = executor_cost(profile)
    points = [dict.fromkeys(LATER_FEATURES, 0) | p for p in profile["grid"]]
    return np.array([cost.predict(*(p[c] for c in COUNTS)) for p in points])


def _bar(total: int, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="step", desc="profiling",
                disable=not progress or not sys.stderr.isatty())
