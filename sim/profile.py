"""Profile the real engine: time `NumpyExecutor` over a grid of step shapes, fit the step-cost
model (`FittedCost`) and write it as a JSON profile that `cost.model = "profile"` loads.

Every point is measured `repeats` times; the rounds visit the points in a fresh random order
each time so that a burst of load elsewhere on the machine spreads over many points instead of
spoiling one, and each point keeps its median. The fit (relative least squares, non-negative
coefficients) uses the structured grid; the random held-out steps measure its accuracy.

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

from .cost_model import FEATURES, FittedCost, shape_of
from .fitting import error_summary, fit_relative
from .profile_grid import build_plan, grid_shapes, held_out_shapes, release

FORMAT = "servesim-profile/1"
BLOCK_SIZE = 16
MAX_KV_TOKENS = 16384  # largest context one profiled step holds (bounds the KV storage)


STATISTICS = {"median": np.median, "min": np.min}


def profile_engine(model_config, out_path, quick: bool = False, progress: bool = True,
                   repeats: int | None = None, seed: int = 0, statistic: str = "median") -> dict:
    """Measure, fit and write a profile for `model_config` (a ModelConfig or its dict) to
    `out_path`; returns the profile dict. `repeats` defaults to 7 (`quick`: a small grid and 3
    repeats, about a tenth of the time, rougher fit). `statistic`: how a point's repeats become one time: "median"
    (default) or "min" (the least disturbed run, for a machine busy with other work)."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    model = model_config if isinstance(model_config, ModelConfig) else ModelConfig(**model_config)
    repeats = repeats or (3 if quick else 7)
    load_before = _load_average()
    rng = np.random.default_rng(seed)
    train = grid_shapes(quick, MAX_KV_TOKENS)
    held = held_out_shapes(rng, 10 if quick else 30, quick, MAX_KV_TOKENS)
    times, features = _measure(model, train + held, repeats, rng, progress)
    seconds = STATISTICS[statistic](times, axis=0)  # [P]
    x_train, y_train = features[:len(train)], seconds[:len(train)]
    x_held, y_held = features[len(train):], seconds[len(train):]
    coefficients = fit_relative(x_train, y_train)
    profile = {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": asdict(model),
        "machine": machine_info() | {"load_average_1m": [load_before, _load_average()]},
        "cost_model": {
            "form": "step_s = sum(coefficients[f] * f) over features; prefill_attention = "
                    "sum over chunks of n * (tokens before the chunk + n); decode_context = "
                    "sum over decodes of tokens attended",
            "features": list(FEATURES),
            "coefficients": dict(zip(FEATURES, coefficients.tolist())),
        },
        "fit": {"method": "non-negative least squares on relative error", "repeats": repeats,
                "statistic": statistic, "train": error_summary(x_train @ coefficients, y_train),
                "held_out": error_summary(x_held @ coefficients, y_held)},
        "grid": [_point(name, x, y) for name, xs, ys in (("train", x_train, y_train),
                                                          ("held_out", x_held, y_held))
                 for x, y in zip(xs, ys)],
    }
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(profile, indent=1) + "\n")
    return profile


def _measure(model: ModelConfig, shapes: list, repeats: int, rng, progress: bool):
    """Step seconds of every repeat [R, P] and features [P, F] of every shape."""
    block_manager = BlockManager(MAX_KV_TOKENS // BLOCK_SIZE + 256, BLOCK_SIZE)
    executor = NumpyExecutor(init_params(model), block_manager, rng=np.random.default_rng(0))
    features = np.zeros((len(shapes), len(FEATURES)))  # [P, F]
    times = np.zeros((repeats, len(shapes)))  # [R, P]
    bar = _bar(repeats * len(shapes), progress)
    for i, shape in enumerate(shapes[:3]):  # warm-up: first-touch of buffers and caches
        _run(executor, shape, block_manager, rng, model)
    for r in range(repeats):
        for i in rng.permutation(len(shapes)):
            times[r, i], features[i] = _run(executor, shapes[i], block_manager, rng, model)
            bar.update(1)
    bar.close()
    return times, features


def _run(executor, shape, block_manager, rng, model: ModelConfig):
    plan = build_plan(shape, block_manager, rng, model.vocab_size)
    try:
        seconds = executor.execute(plan).duration_s
        return seconds, shape_of(plan).vector()
    finally:
        release(plan, block_manager)


def _point(split: str, x: np.ndarray, y: float) -> dict:
    point = {name: int(v) for name, v in zip(FEATURES[1:], x[1:])}
    return {"split": split, **point, "measured_s": float(y)}


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
    info["thread_env"] = {k: os.environ[k] for k in
                          ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
                          if k in os.environ}
    return info


def _load_average() -> float | None:
    """The 1-minute load average (other work competing for the CPU while profiling)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        return None


def predict_profile_points(profile: dict) -> np.ndarray:
    """Predicted seconds of every grid point of a profile dict (for checks and reports)."""
    coefficients = [profile["cost_model"]["coefficients"][f] for f in FEATURES]
    cost = FittedCost(tuple(coefficients), profile["model"])
    return np.array([cost.predict(*(p[f] for f in FEATURES[1:])) for p in profile["grid"]])


def _bar(total: int, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="step", desc="profiling",
                disable=not progress or not sys.stderr.isatty())
