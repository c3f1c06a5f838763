"""From measured steps to a `FittedCost`: the design matrix of the fitted model and its fit.

Columns, for a step of `rows` rows (StepShape.rows):
- one "hat" per row knot: the weights that interpolate linearly between the two knots around
  `rows` (a partition of unity, so together they also carry the per-step constant);
- the three row tails (ROW_TAILS: bits 0, 1 and 2 of `rows`, for rows >= 2);
- the linear features FEATURES[1:] (the constant "step" is in the hats).
The fit is `fitting.fit_relative`: non-negative least squares on relative error, so every knot's
cost, tail and coefficient is >= 0.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from ..costs.fitted import FEATURES, ROW_TAILS, FittedCost, feature_vector
from ..costs.fitting import fit_relative

# Candidate knots, denser where BLAS efficiency changes fastest (few rows).
ROW_KNOTS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
             1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)


def knots_for(measured_rows) -> tuple:
    """The candidate knots that were measured (a knot between measurements would be a free
    parameter), and the largest row count measured, which is always the last."""
    measured = set(int(r) for r in measured_rows)
    top = max(measured)
    return tuple(k for k in ROW_KNOTS if k < top and k in measured) + (top,)


def row_basis(rows: int, knots: tuple) -> np.ndarray:
    """[K] interpolation weights of `rows` over the knots (past the last: along the last
    segment, as FittedCost.rows_cost extrapolates)."""
    weights = np.zeros(len(knots))
    i = bisect_left(knots, rows)
    if i < len(knots) and knots[i] == rows:
        weights[i] = 1.0
        return weights
    lo = max(min(i, len(knots) - 1) - 1, 0)
    hi = min(lo + 1, len(knots) - 1)
    if hi == lo:  # a single knot: proportional
        weights[lo] = rows / knots[lo]
        return weights
    t = (rows - knots[lo]) / (knots[hi] - knots[lo])
    weights[lo], weights[hi] = 1.0 - t, t
    return weights


def row_tails(rows: int) -> tuple:
    return (rows & 1, rows >> 1 & 1, rows >> 2 & 1) if rows >= 2 else (0, 0, 0)


def design_matrix(shapes: list, knots: tuple) -> np.ndarray:
    """[P, K + 3 + F - 1] columns of the fitted model for each StepShape."""
    return np.array([np.concatenate([row_basis(s.rows, knots), row_tails(s.rows),
                                     feature_vector(s)[1:]]) for s in shapes], dtype=float)


def fit_cost(shapes: list, seconds: np.ndarray, model: dict, knots: tuple) -> FittedCost:
    """The executor's fitted cost (no loop overhead) from measured steps."""
    c = fit_relative(design_matrix(shapes, knots), np.asarray(seconds, float))
    k = len(knots)
    return FittedCost((0.0, *c[k + len(ROW_TAILS):].tolist()), dict(model), "profile",
                      tuple(int(x) for x in knots), tuple(c[:k].tolist()),
                      tuple(c[k:k + len(ROW_TAILS)].tolist()))


def with_loop(cost: FittedCost, loop: dict, wake: dict, jitter=None,
              reference_s=None, after: dict | None = None) -> FittedCost:
    """The cost plus the engine loop's per-step coefficients ({feature: seconds}), the
    wake-up cost ({"idle_s": [...], "extra_s": [...]}), the machine's jitter, the reference
    step's median time and the after-prefill cost ({"prefill_tokens": [...], "extra_s":
    [[...], ...]})."""
    unknown = set(loop) - set(FEATURES)
    assert not unknown, f"loop features must be cost features, got {sorted(unknown)}"
    total = tuple(c + loop.get(name, 0.0) for name, c in zip(FEATURES, cost.coefficients))
    return FittedCost(total, cost.model, cost.source, cost.row_knots, cost.row_costs,
                      cost.row_tails, tuple(wake["idle_s"]), tuple(wake["extra_s"]), jitter,
                      reference_s, tuple((after or {}).get("prefill_tokens", ())),
                      tuple(tuple(row) for row in (after or {}).get("extra_s", ())))
