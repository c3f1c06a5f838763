"""Steps measured where they really run: in the real serving loop, and the cost model fitted to
them.

A step measured alone on the profiling grid is faster than the same step inside a server (the
scheduler, the recorder and the loop run between steps and take cache with them; a sleeping
server wakes up late and cold). So the profiler serves synthetic workloads (`workloads.py`)
through `engine.server.serve` and learns from what each step took there:

- a step followed at once by another (the server had work) took its cycle, from its start to the
  next one's: what the simulated clock must advance by, scheduling and recording included;
- the first step after an idle wait also took the wake-up: from when the sleep was to end (the
  arrival, or a static batch's timeout, that woke the server; the server records each sleep)
  to the step's start (the sleep's overshoot), and the step's own extra time, colder;
- the k-th step after one with prefill chunks (k = 1..AFTER_STEPS, counted as the simulator
  counts them: reset by an idle wait) runs slower by an amount that grows with the prefill's
  tokens (it evicted what the steps around it keep in cache).

`served_steps` turns a served run into these quantities; `fit_served` fits the `FittedCost` on
busy steps (rows cost, features and the after-prefill cost together, by non-negative least
squares on relative error, once more without the 0.5% of steps the machine disturbed most), then
the wake-up cost from what the steps after idle waits took beyond the fit, by idle time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..costs.fitted import FEATURES, ROW_TAILS, FittedCost
from ..costs.fitting import fit_mean_relative
from .fit import design_matrix, knots_for

AFTER_STEPS = 8  # steps after a prefill that may pay for it
WAKE_IDLE_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3, 1.0)  # wake-up knots
DISTURBED = 99.5  # percentile of relative residuals kept for the second fit


@dataclass(frozen=True)
class ServedSteps:
    """The steps of served runs, columnar. For step i: its shape; `seconds[i]` what it took
    (its cycle when the server went on at once, else start to end); `busy[i]` whether it went
    on at once; `idle_s[i]` the idle wait before it (NaN when it followed a step at once) and
    `lag_s[i]` from when the sleep was to end to its start; `after_k[i]`, `after_tokens
    [i]`: it is the after_k-th step after one with after_tokens prefill tokens (0: none)."""

    shapes: list
    seconds: np.ndarray  # [S]
    busy: np.ndarray  # [S] bool
    idle_s: np.ndarray  # [S]
    lag_s: np.ndarray  # [S]
    after_k: np.ndarray  # [S] int
    after_tokens: np.ndarray  # [S] int

    def __len__(self) -> int:
        return len(self.shapes)

    @classmethod
    def join(cls, parts: list["ServedSteps"]) -> "ServedSteps":
        return cls(*[sum((p.shapes for p in parts), [])] + [
            np.concatenate([getattr(p, name) for p in parts])
            for name in ("seconds", "busy", "idle_s", "lag_s", "after_k", "after_tokens")])

    def scaled(self, factor: float) -> "ServedSteps":
        """The same steps with every time multiplied by `factor` (the machine's drift out)."""
        return ServedSteps(self.shapes, self.seconds * factor, self.busy, self.idle_s * factor,
                           self.lag_s * factor, self.after_k, self.after_tokens)

    @property
    def woke(self) -> np.ndarray:
        """[S] the steps right after an idle wait."""
        return ~np.isnan(self.idle_s)


def served_steps(recorder, shapes: list) -> ServedSteps:
    """The steps of one served run (`serving.serve_logged`'s recorder and log shapes)."""
    from ..validation.steps import busy_after

    steps = recorder.step_columns()
    start, end = np.asarray(steps["start_s"]), np.asarray(steps["end_s"])  # [S]
    assert len(start) == len(shapes), "every executed plan is one recorded step"
    busy = busy_after(recorder)  # [S]
    woken_at = recorder.slept_before()  # [S] when the sleep before a step was to end
    cycle = np.append(np.diff(start), np.nan)  # [S]
    seconds = np.where(busy & ~np.isnan(cycle), cycle, end - start)
    idle = np.full(len(start), np.nan)
    lag = np.full(len(start), np.nan)
    after_k = np.zeros(len(start), dtype=np.int64)
    after_tokens = np.zeros(len(start), dtype=np.int64)
    tokens, k = 0, 0
    for i, shape in enumerate(shapes):
        if i and not busy[i - 1]:  # the server slept before this step: as the simulator, reset
            idle[i] = start[i] - end[i - 1]
            lag[i] = max(start[i] - woken_at[i], 0.0)
            tokens = 0
        if tokens:
            k += 1
            if k <= AFTER_STEPS:
                after_k[i], after_tokens[i] = k, tokens
        if shape.prefill_tokens:
            tokens, k = shape.prefill_tokens, 0
    return ServedSteps(list(shapes), seconds, busy & ~np.isnan(cycle), idle, lag, after_k,
                       after_tokens)


def after_columns(steps: ServedSteps) -> np.ndarray:
    """[S, AFTER_STEPS] the prefill tokens a step pays for at its distance from the prefill."""
    columns = np.zeros((len(steps), AFTER_STEPS))
    rows = np.flatnonzero(steps.after_k)
    columns[rows, steps.after_k[rows] - 1] = steps.after_tokens[rows]
    return columns


def fit_served(steps: ServedSteps, model: dict, source: str = "profile") -> FittedCost:
    """The cost model of served steps (see the module docstring); no jitter or reference time
    (the profiler adds them)."""
    fit = steps.busy & ~steps.woke  # the steady state: the simulator's plain step
    knots = knots_for(s.rows for s, keep in zip(steps.shapes, fit) if keep)
    x = np.hstack([design_matrix(steps.shapes, knots), after_columns(steps)])  # [S, P]
    y = steps.seconds
    c = fit_mean_relative(x[fit], y[fit])
    residual = np.abs(x @ c - y) / (x @ c)  # [S]
    kept = fit & (residual <= np.percentile(residual[fit], DISTURBED))
    c = fit_mean_relative(x[kept], y[kept])
    cost = _cost(c, len(knots), knots, model, source, steps)
    return _with_wake(cost, steps, x @ c)


def _cost(c: np.ndarray, k: int, knots: tuple, model: dict, source: str,
          steps: ServedSteps) -> FittedCost:
    """A FittedCost from the fit's parameters: knots' costs, tails, features, after-prefill
    seconds per token at each distance (linear in the tokens up to the longest prefill seen)."""
    features = c[k + len(ROW_TAILS):k + len(ROW_TAILS) + len(FEATURES) - 1]
    per_token = c[-AFTER_STEPS:]
    longest = int(steps.after_tokens.max()) if steps.after_tokens.any() else 0
    after = ((longest,), (tuple((per_token * longest).tolist()),)) if longest else ((), ())
    return FittedCost((0.0, *features.tolist()), dict(model), source,
                      tuple(int(x) for x in knots), tuple(c[:k].tolist()),
                      tuple(c[k:k + len(ROW_TAILS)].tolist()), after_tokens=after[0],
                      after_extra_s=after[1])


def _with_wake(cost: FittedCost, steps: ServedSteps, predicted: np.ndarray) -> FittedCost:
    """The cost with its wake-up cost: for the steps after idle waits, what they took (and the
    lag before them) beyond the steady prediction, the median per idle knot (a wait is counted
    at the nearest knot below), non-decreasing in the wait (a longer sleep is never warmer)."""
    woke = steps.woke
    extra = steps.seconds[woke] + steps.lag_s[woke] - predicted[woke]  # [W]
    bins = np.searchsorted(WAKE_IDLE_S, steps.idle_s[woke], side="right") - 1  # [W]
    idle, added = [], []
    for b, knot in enumerate(WAKE_IDLE_S):
        here = extra[bins == b]
        if len(here) >= 3:
            idle.append(knot)
            added.append(max(float(np.median(here)), added[-1] if added else 0.0))
    return replace(cost, wake_idle_s=tuple(idle), wake_extra_s=tuple(added), jitter=None,
                   reference_s=None)


def predict_served(cost, steps: ServedSteps) -> np.ndarray:
    """[S] what the simulator charges each served step: the cost model on its shape, plus its
    after-prefill cost and, after an idle wait, its wake-up cost (which the lag is part of)."""
    out = np.array([cost.step_time(s) for s in steps.shapes])
    for i in np.flatnonzero(steps.after_k):
        out[i] += cost.after_prefill_cost(int(steps.after_tokens[i]), int(steps.after_k[i]))
    for i in np.flatnonzero(steps.woke):
        out[i] += cost.wake_cost(float(steps.idle_s[i]))
    return out


def step_errors(cost, steps: ServedSteps) -> dict:
    """Relative error of `predict_served` against what the served steps took (the lag added
    to the steps after idle waits): {"steps", "median_abs_rel_error", "p90_abs_rel_error",
    "mean_rel_error"} over all steps, and the same over busy steps alone."""
    measured = steps.seconds + np.nan_to_num(steps.lag_s)
    err = (predict_served(cost, steps) - measured) / measured  # [S]
    return {"steps": int(len(err)), "median_abs_rel_error": float(np.median(np.abs(err))),
            "p90_abs_rel_error": float(np.percentile(np.abs(err), 90)),
            "mean_rel_error": float(err.mean()),
            "busy_median_abs_rel_error": float(np.median(np.abs(err[steps.busy]))),
            "total_time_ratio": float(predict_served(cost, steps).sum() / measured.sum())}
