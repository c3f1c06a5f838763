"""Least-squares fitting of step-cost coefficients on relative error, with non-negative
coefficients, and the error statistics a profile reports.

Minimising sum(((X @ c) - y) / y)^2 instead of the plain squared error weighs a 10 ms step as
much as a 2 s one, so small steps (most decode steps) are predicted as well as long prefills.
Coefficients are constrained to be >= 0 (Lawson-Hanson NNLS): every feature counts work, and a
negative cost would let an extrapolated step take negative time.
"""

from __future__ import annotations

import numpy as np


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """argmin ||a @ x - b|| subject to x >= 0 (Lawson and Hanson's active-set method).
    a [m, n], b [m] -> x [n]."""
    m, n = a.shape
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(m, n)
    for _ in range(max_iter or 3 * n):
        w = a.T @ (b - a @ x)  # [n] gradient of -1/2 ||a x - b||^2
        if passive.all() or w[~passive].max() <= tol:
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if z[passive].min() > 0:
                x = z
                break
            # Step back to the boundary and drop the coefficients that hit zero.
            bad = passive & (z <= 0)
            alpha = np.min(x[bad] / (x[bad] - z[bad]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
    return x


def fit_relative(features: np.ndarray, seconds: np.ndarray, relative_to=None) -> np.ndarray:
    """Non-negative coefficients c minimising the relative error of features @ c against
    `seconds`: sum(((features @ c - seconds) / relative_to) ** 2), relative to the measured
    times themselves by default. features [m, n], seconds [m] (> 0) -> c [n]."""
    if np.any(seconds <= 0):
        raise ValueError("measured step times must be > 0")
    scale_to = seconds if relative_to is None else relative_to
    a = features / scale_to[:, None]  # [m, n]: each row scaled to relative error
    scale = np.linalg.norm(a, axis=0)  # [n] columns to unit norm, or NNLS is ill-conditioned
    scale[scale == 0] = 1.0
    return nnls(a / scale, seconds / scale_to) / scale


def fit_mean_relative(features: np.ndarray, seconds: np.ndarray, rounds: int = 3) -> np.ndarray:
    """Like `fit_relative`, but with the errors relative to the fit's own predictions (found by
    reweighting, `rounds` times): noisy times then average to their mean. Relative to the
    measured times, a step measured slow weighs less than one measured fast, and the fit
    predicts less than the steps take on average (several percent, at a busy machine's
    noise)."""
    c = fit_relative(features, seconds)
    for _ in range(rounds):
        predicted = np.maximum(features @ c, 1e-3 * np.median(seconds))
        c = fit_relative(features, seconds, predicted)
    return c


def relative_errors(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """|predicted - measured| / measured, per point."""
    return np.abs(predicted - measured) / measured


def error_summary(predicted: np.ndarray, measured: np.ndarray) -> dict:
    """{"points", "median_abs_rel_error", "p90_abs_rel_error", "max_abs_rel_error"}."""
    err = relative_errors(np.asarray(predicted, float), np.asarray(measured, float))
    return {"points": int(err.size),
            "median_abs_rel_error": float(np.median(err)),
            "p90_abs_rel_error": float(np.percentile(err, 90)),
            "max_abs_rel_error": float(err.max())}
