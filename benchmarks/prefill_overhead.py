"""Prefill overhead set from one measured run (`--only overhead` of `serving_accuracy.py` and
`hardware_accuracy.py`): how close servesim comes to a server's other runs once
`hardware.prefill_overhead_s` (what a step with a prefill takes beyond its kernels) is set from
one of them, as a user would set it from one measurement of their own server.

For each group of InferenceMAX's runs (a framework on a GPU with a model and dtype, as
`serving_accuracy.py` groups them), the calibration run is the one at the least load: the
fewest users, then the shortest prompts, the shortest outputs, the fewest GPUs. The overhead is
the one at which servesim's mean TTFT of that run equals the measured (bisection; none where
servesim is already slower). Every other run of the group is then simulated with it, and its
errors are printed beside those without it, over the same runs (the calibration run left out
of both).

    python benchmarks/serving_accuracy.py --only overhead   # about 12 minutes
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inferencemax_servers import SILICON_GPUS  # noqa: E402
from silicon_runs import silicon_rows, simulate_inferencemax  # noqa: E402

STEPS = 14  # bisection steps: the overhead to about 1/16,000 of the run's measured TTFT


def overhead_part(limit: int | None = None) -> None:
    """Print each group's overhead, set from its calibration run, and its other runs' errors
    with it and without."""
    runs = silicon_rows()
    if runs is None:
        print("the measured serving runs need servesim[gpu] (pip install 'servesim[gpu]')")
        return
    names = ("Llama-3.3-70B", "gpt-oss-120b", "DeepSeek-R1", "MiniMax-M2.5",
             "Qwen3.5-397B-A17B")
    print(f"{'model':18s} {'backend':7s} {'gpu':9s} {'dtype':5s} {'calibration run':22s} "
          f"{'overhead':>9s} {'runs':>4s}  {'TTFT without':>12s} {'with':>6s}  "
          f"{'TPOT without':>12s} {'with':>6s}")
    everything: dict[str, list] = {"ttft": [], "tpot": [], "ttft0": [], "tpot0": []}
    for name, rows in zip(names, runs[:5]):  # the others' client is not recorded
        if limit:
            rows = rows.iloc[::max(len(rows) // limit, 1)]
        for group, members in rows.groupby(["backend", "system", "precision"], sort=True):
            errors = _group(name, group, members)
            for key, values in errors.items():
                everything[key] += values
    print(f"all {len(everything['ttft'])} runs: TTFT median "
          f"{_median(everything['ttft0'])} without, {_median(everything['ttft'])} with; "
          f"TPOT median {_median(everything['tpot0'])} without, {_median(everything['tpot'])} "
          f"with")


def _group(name: str, group: tuple, members) -> dict[str, list]:
    backend, system, precision = group
    order = members.sort_values(["batch_size", "isl", "osl", "tp_size"])
    first, others = order.iloc[0], order.iloc[1:]
    overhead = calibrated(first)
    errors: dict[str, list] = {"ttft": [], "tpot": [], "ttft0": [], "tpot0": []}
    for row in others.itertuples():
        without = simulate_inferencemax(row)
        with_it = simulate_inferencemax(row, overhead) if overhead else without
        for key, (ttft, tpot) in (("0", without), ("", with_it)):
            errors["ttft" + key].append(ttft / row.silicon_ttft_ms - 1)
            errors["tpot" + key].append(tpot / row.silicon_tpot_ms - 1)
    run = (f"TP {int(first.tp_size)}, {first.isl}/{first.osl}, "
           f"{int(first.batch_size)} users")
    print(f"{name:18s} {backend:7s} {SILICON_GPUS[system]:9s} {precision:5s} {run:22s} "
          f"{1e3 * overhead:7.1f} ms {len(others):4d}  {_median(errors['ttft0']):>12s} "
          f"{_median(errors['ttft']):>6s}  {_median(errors['tpot0']):>12s} "
          f"{_median(errors['tpot']):>6s}", flush=True)
    return errors


def calibrated(row) -> float:
    """The prefill overhead (seconds) at which servesim's mean TTFT of `row` is the measured:
    0 where servesim's is already as long, else found by bisection below the measured TTFT."""
    measured = row.silicon_ttft_ms
    if simulate_inferencemax(row)[0] >= measured:
        return 0.0
    low, high = 0.0, measured * 1e-3
    for _ in range(STEPS):
        middle = (low + high) / 2
        if simulate_inferencemax(row, middle)[0] < measured:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _median(errors: list) -> str:
    return f"{100 * np.median(np.abs(errors)):.1f}%" if errors else "-"
