"""Step-level validation: every step the real engine served, with the cost model's prediction for
that step's exact shape.

End-to-end percentiles mix the cost model's error with the noise of a busy machine and with
the schedule drifting apart once one step differs; a step's own prediction does not.
`profiling.serving.StepLog` wraps the real executor during serving and keeps each plan's
`StepShape` and the executor's own time; `step_rows` joins them with the recorder's step times:

- `measured_s` = end - start: the whole step as the server timed it (schedule, forward pass,
  sampling, postprocess);
- `cycle_s` = next start - start, for a step followed at once by another (the engine had work):
  what the simulator's clock must advance by, since the simulated engine starts the next step
  the instant one ends (the server's loop between steps is part of it);
- `predicted_s`: the cost model on the step's shape, plus its wake-up cost when the server was
  idle before the step and its after-prefill cost when a step with prefill chunks came before
  it since (as the simulator charges them); `error_pct` compares it with `cycle_s` where
  defined, else with `measured_s`.

`speed_ratio` is the served steps' total time over their total predicted time: how much slower
(> 1) or faster the machine ran while serving than the cost model expects. On a machine shared with
other work the speed drifts by tens of percent over minutes, between profiling and serving;
`costs.calibrate.ScaledCost` is the cost model scaled by that one number, a diagnostic that
separates that drift from errors in how the model's step cost depends on the step's shape.
"""

from __future__ import annotations

import math

import numpy as np

from ..costs.shape import COUNTS

STEP_COLUMNS = ("variant", "step", *COUNTS, "executor_s", "measured_s", "cycle_s",
                "predicted_s", "error_pct")


def busy_after(recorder) -> np.ndarray:
    """[S] True where the served engine started its next step at once: the server did not
    sleep before it (to the next arrival, or to a static batch's timeout; the server records
    each sleep). The last step's: True (nothing follows it)."""
    slept = ~np.isnan(recorder.slept_before())  # [S]
    return np.append(~slept[1:], True)


def step_rows(variant: str, recorder, log, cost_model) -> list[dict]:
    """One row per served step (STEP_COLUMNS); times in seconds."""
    steps = recorder.step_columns()
    start, end = np.asarray(steps["start_s"]), np.asarray(steps["end_s"])  # [S]
    assert len(start) == len(log.shapes), "every executed plan is one recorded step"
    busy = busy_after(recorder)
    rows, last_prefill, since = [], 0, 0
    for k, shape in enumerate(log.shapes):
        measured = float(end[k] - start[k])
        cycle = float(start[k + 1] - start[k]) if k + 1 < len(start) and busy[k] else math.nan
        predicted = float(cost_model.step_time(shape))
        if k and not busy[k - 1]:  # the server slept before this step
            last_prefill = 0
            predicted += cost_model.wake_cost(float(start[k] - end[k - 1]))
        if last_prefill:
            since += 1
            predicted += cost_model.after_prefill_cost(last_prefill, since)
        if shape.prefill_tokens:
            last_prefill, since = shape.prefill_tokens, 0
        reference = measured if math.isnan(cycle) else cycle
        rows.append({"variant": variant, "step": k,
                     **shape._asdict(),
                     "executor_s": log.executor_s[k], "measured_s": measured, "cycle_s": cycle,
                     "predicted_s": predicted,
                     "error_pct": 100.0 * (predicted - reference) / reference})
    return rows


def step_error_summary(rows: list[dict]) -> dict:
    """Median and mean signed error, median absolute error (percent) of the steps' predictions,
    and the share of the served time spent outside the executor (scheduling, loop, records)."""
    if not rows:
        return {"steps": 0, "median_error_pct": math.nan, "mean_error_pct": math.nan,
                "median_abs_error_pct": math.nan, "outside_executor_pct": math.nan}
    err = np.array([r["error_pct"] for r in rows])  # [S]
    cycles = [(r["cycle_s"], r["executor_s"]) for r in rows if not math.isnan(r["cycle_s"])]
    outside = (100.0 * (1 - sum(e for _, e in cycles) / sum(c for c, _ in cycles))
               if cycles else math.nan)
    return {"steps": len(rows), "median_error_pct": float(np.median(err)),
            "mean_error_pct": float(err.mean()), "median_abs_error_pct": float(np.median(abs(err))),
            "outside_executor_pct": outside}


def write_steps_csv(rows: list[dict], path) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(STEP_COLUMNS)
        for row in rows:
            writer.writerow([_cell(row[c]) for c in STEP_COLUMNS])


def _cell(value):
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.9g}"
    return value


def speed_ratio(rows: list[dict]) -> float:
    """Served time over predicted time, summed over the served steps (measured: cycle where
    defined): how much slower (> 1) the served steps ran, weighted by their length."""
    if not rows:
        return math.nan
    served = sum(r["measured_s"] if math.isnan(r["cycle_s"]) else r["cycle_s"] for r in rows)
    predicted = sum(r["predicted_s"] for r in rows)
    return float(served / predicted) if predicted > 0 else math.nan  # nothing to scale
