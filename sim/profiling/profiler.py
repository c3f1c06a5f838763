"""`servesim profile`: measure the real engine on this machine and write the step-cost profile
that `cost.model = "profile"` loads.

By default the steps are measured where they really run: synthetic workloads (`workloads.py`)
served in real time through the real serving loop, and the cost model fitted to what each step
took there (`served.py`). Before and after each workload the reference step (`reference.py`) is
timed, and the workload's step times are scaled by the machine's speed then against its median
over the whole profile: a shared machine drifts by tens of percent over minutes, and this takes
the drift between workloads out. `method="grid"` measures the isolated grid instead
(`isolated.py`), the older way, kept for comparison. Either way the machine's jitter is measured
last (the reference step back to back), and the profile records this machine's fingerprint
(`fingerprint.py`), and is stored in the profile cache (`cache.py`) for `validate --profile
auto` to reuse.

    profile_engine(ModelConfig(), "my-profile.json")   # -> the profile as a dict
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
from dataclasses import asdict, replace

import numpy as np

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.model import ModelConfig, init_params

from ..costs.profile_file import FORMAT, cost_model_dict
from . import cache
from .fingerprint import fingerprint, key
from .grid import build_plan, release
from .reference import BLOCK_SIZE, JITTER_S, REFERENCE, burst, measure_jitter
from .served import ServedSteps, fit_served, served_steps, step_errors
from .serving import serve_logged
from .threads import THREAD_ENV
from .workloads import HELD_OUT, TRAIN

METHODS = ("served", "grid")
REFERENCE_S, QUICK_REFERENCE_S = 0.4, 0.15  # the reference step timed before/after a workload


def profile_engine(model_config, out_path=None, quick: bool = False, progress: bool = True,
                   method: str = "served", seed: int = 0, repeats: int | None = None,
                   statistic: str = "median", jitter_s: float | None = None,
                   store: bool = True) -> dict:
    """Measure, fit and write a profile of `model_config` (a ModelConfig or its dict); returns
    the profile dict, written to `out_path` when given and, with `store`, to the profile cache
    (a quick profile never replaces a full one there).
    `quick`: a sixth of the served requests (a rougher fit in a fraction of the time).
    `jitter_s`: how long the jitter is measured (default JITTER_S; `quick`: an eighth).
    `repeats` and `statistic` are the grid method's."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    model = model_config if isinstance(model_config, ModelConfig) else ModelConfig(**model_config)
    model_dict = asdict(model)
    load_before, t0 = _load_average(), time.perf_counter()
    rng = np.random.default_rng(seed)
    params = init_params(model)
    if method == "served":
        cost, fit = _profile_served(model_dict, params, quick, progress)
        points = None
    else:
        from .isolated import grid_executor, profile_isolated

        cost, fit, points = profile_isolated(model, rng, grid_executor(model, params), quick,
                                             repeats or (3 if quick else 7), statistic,
                                             progress)
    jitter_s = jitter_s if jitter_s is not None else JITTER_S / 8 if quick else JITTER_S
    jitter = measure_jitter(_reference_executor(params), model, rng, jitter_s)
    cost = replace(cost, jitter=jitter)
    print_ = fingerprint(model_dict)
    profile = {
        "format": FORMAT,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": model_dict,
        "block_size": BLOCK_SIZE,
        "fingerprint": print_,
        "fingerprint_key": key(print_),
        "machine": machine_info() | {"load_average_1m": [load_before, _load_average()],
                                     "profiling_s": round(time.perf_counter() - t0, 1)},
        "cost_model": cost_model_dict(cost),
        "fit": fit,
    }
    if points is not None:
        profile["grid"] = points
    text = json.dumps(profile, indent=1) + "\n"
    if out_path is not None:
        from reports.output import write_atomic

        from ..costs.profile_file import is_profile_text

        write_atomic(out_path, text, is_profile_text)
    if store and not (quick and cache.holds_full(profile["fingerprint_key"])):
        try:
            cache.store(profile["fingerprint_key"], text)
        except OSError as exc:  # the profile itself is written: a cache is no reason to fail
            print(f"note: the profile cache cannot be written ({exc.strerror or exc}); the "
                  f"profile is not cached", file=sys.stderr)
    return profile


def _profile_served(model: dict, params: dict, quick: bool, progress: bool):
    """(the cost, the fit's report): every workload served, each between two timings of the
    reference step; fitted on TRAIN, its error measured on HELD_OUT."""
    reference = _reference_executor(params)
    plan = build_plan(REFERENCE, reference.block_manager, np.random.default_rng(0),
                      model["vocab_size"])
    seconds_ref = QUICK_REFERENCE_S if quick else REFERENCE_S
    runs, speeds, times = {}, [], []
    bar = _bar(len(TRAIN) + len(HELD_OUT), progress)
    try:
        before = _time_reference(reference, plan, seconds_ref)
        for workload in TRAIN + HELD_OUT:
            recorder, log = serve_logged(workload.config(model, quick), params=params)
            after = _time_reference(reference, plan, seconds_ref)
            runs[workload.name] = served_steps(recorder, log.shapes)
            speeds.append((before + after) / 2)
            times.append(before)
            before = after
            bar.update(1)
    finally:
        release(plan, reference.block_manager)
        bar.close()
    times.append(before)
    reference_s = float(np.median(times))
    for workload, speed in zip(TRAIN + HELD_OUT, speeds):  # the drift between workloads, out
        runs[workload.name] = runs[workload.name].scaled(reference_s / speed)
    train = ServedSteps.join([runs[w.name] for w in TRAIN])
    held = ServedSteps.join([runs[w.name] for w in HELD_OUT])
    cost = fit_served(train, model)
    cost = replace(cost, jitter=None, reference_s=reference_s)
    fit = {"method": "served: non-negative least squares on error relative to the prediction, "
                     "over the steps of synthetic workloads served in real time",
           "quick": quick, "train": step_errors(cost, train), "held_out": step_errors(cost, held),
           "workloads": {w.name: {"steps": len(runs[w.name]),
                                  "speed": round(speed / reference_s, 4)}
                         for w, speed in zip(TRAIN + HELD_OUT, speeds)}}
    return cost, fit


def _reference_executor(params: dict) -> NumpyExecutor:
    """A scratch executor with room for the reference step, sharing the model's weights."""
    tokens = sum(c + n for c, n, *_ in REFERENCE.prefills) + sum(REFERENCE.decodes)
    blocks = len(REFERENCE.prefills) + len(REFERENCE.decodes) + -(-tokens // BLOCK_SIZE)
    return NumpyExecutor(params, BlockManager(blocks, BLOCK_SIZE), rng=np.random.default_rng(0))


def _time_reference(executor, plan, seconds: float) -> float:
    """The reference step's median time in bursts over `seconds`."""
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 3:
        times.append(burst(executor, plan))
    return float(np.median(times))


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


def _bar(total: int, progress: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="workload", desc="profiling",
                disable=not progress or not sys.stderr.isatty())
