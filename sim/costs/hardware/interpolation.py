"""Interpolation over measured kernel latencies, in log-log space: between two measured
sizes a kernel's time follows the power law through them (a size measured more than once, at
the geometric mean of its times); past either end the end segment's power law holds for at
most `MAX_REACH` times the measured range, and beyond that the answer is NaN, for the caller
to cost by another model and say so."""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

MAX_REACH = 2.0  # times past the measured range that a power-law extrapolation may go


def merged(sizes, values) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct sizes in order, the mean of the values at each): a table may hold a point
    measured twice, which a segment between two points cannot."""
    unique, where = np.unique(np.asarray(sizes, dtype=np.float64), return_inverse=True)
    values = np.asarray(values, dtype=np.float64)
    return unique, np.bincount(where, weights=values) / np.bincount(where)


class Curve:
    """Measured (size, latency) points of one kernel shape, as log-log segments."""

    def __init__(self, sizes, latencies):
        sizes, logs = merged(sizes, np.log(np.maximum(np.asarray(latencies, np.float64), 1e-9)))
        self.x, self.y = np.log(sizes), logs
        self.low, self.high = self.x[0] - math.log(MAX_REACH), self.x[-1] + math.log(MAX_REACH)
        self._x, self._y = self.x.tolist(), self.y.tolist()

    def log_at_one(self, logx: float) -> float:
        """`log_at` of one size, in plain Python (a step's attention: no array overhead)."""
        x, y = self._x, self._y
        if not self.low <= logx <= self.high:
            return math.nan
        if len(x) == 1:
            return y[0]
        i = min(max(bisect_right(x, logx) - 1, 0), len(x) - 2)
        return y[i] + (logx - x[i]) * ((y[i + 1] - y[i]) / (x[i + 1] - x[i]))

    def log_at(self, logx) -> np.ndarray:
        """log latency at log size (number or array), by the measured points' power laws;
        NaN more than `MAX_REACH` past the measured range."""
        logx = np.asarray(logx, dtype=np.float64)
        x, y = self.x, self.y
        if len(x) == 1:
            out = np.full(logx.shape, y[0])
        else:
            below = y[0] + (logx - x[0]) * ((y[1] - y[0]) / (x[1] - x[0]))
            above = y[-1] + (logx - x[-1]) * ((y[-1] - y[-2]) / (x[-1] - x[-2]))
            out = np.where(logx < x[0], below,
                           np.where(logx > x[-1], above, np.interp(logx, x, y)))
        return np.where((logx < self.low) | (logx > self.high), np.nan, out)


class Difference:
    """A measured difference of two kernels' times (one minus the other) at measured sizes,
    piecewise linear in time against log size: a difference may be zero or, by noise, slightly
    negative, which a log-log `Curve` cannot hold. NaN more than `MAX_REACH` past the measured
    range."""

    def __init__(self, sizes, seconds):
        sizes, self.y = merged(sizes, seconds)
        self.x = np.log(sizes)
        self.low, self.high = self.x[0] - math.log(MAX_REACH), self.x[-1] + math.log(MAX_REACH)

    def at(self, logx) -> np.ndarray:
        """The difference at log size (number or array): interpolated between measured sizes,
        the nearest end's value up to `MAX_REACH` past them, NaN beyond."""
        logx = np.asarray(logx, dtype=np.float64)
        out = np.interp(logx, self.x, self.y)
        return np.where((logx < self.low) | (logx > self.high), np.nan, out)


class Grid:
    """A kernel measured over (batch, length): one `Curve` over length per measured batch,
    blended log-linearly between the two measured batches around the batch asked for (the
    grid is truncated where batch x length grows large, so each batch has its own range).
    Evaluated in plain Python one (batch, length) at a time, so that a run of steps gets, to
    the last bit, what its steps one by one get; past its reach, `anchored` carries the
    nearest times it reaches by another model's growth."""

    def __init__(self, batches: list, curves: list):
        self.logb = [math.log(b) for b in batches]
        self.curves = curves
        self.reach = math.log(MAX_REACH)

    def at_one(self, batch: float, length: float) -> float:
        """Seconds at one (batch, length), NaN out of reach."""
        logb, logl = math.log(batch), math.log(max(length, 1.0))
        points = self.logb
        if not points[0] - self.reach <= logb <= points[-1] + self.reach:
            return math.nan
        if len(points) == 1:
            return math.exp(self.curves[0].log_at_one(logl)) * 1e-3
        i = min(max(bisect_right(points, logb) - 1, 0), len(points) - 2)
        w = (logb - points[i]) / (points[i + 1] - points[i])
        lo = self.curves[i].log_at_one(logl)
        if w == 0.0:  # a measured batch: its own curve alone
            value = lo
        elif w == 1.0:
            value = self.curves[i + 1].log_at_one(logl)
        else:
            value = (1.0 - w) * lo + w * self.curves[i + 1].log_at_one(logl)
        return math.exp(value) * 1e-3

    def anchored(self, batch: float, length: float, growth) -> float:
        """Seconds at (batch, length) past the grid's reach (`at_one` inside it): the batch
        brought into the batches' reach (b), and each curve it blends taken at the length
        nearest to `length` that the curve reaches (n), times `growth(b, n)`, how much another
        model grows from (b, n) to (batch, length); blended as `at_one` blends, so that the
        time does not jump where a curve's reach or the grid's ends."""
        points = self.logb
        logb = min(max(math.log(batch), points[0] - self.reach), points[-1] + self.reach)
        logl, b = math.log(max(length, 1.0)), math.exp(logb)
        if len(points) == 1:
            blend = [(0, 1.0)]
        else:
            i = min(max(bisect_right(points, logb) - 1, 0), len(points) - 2)
            w = (logb - points[i]) / (points[i + 1] - points[i])
            blend = [(i, 1.0)] if w == 0.0 else [(i + 1, 1.0)] if w == 1.0 else \
                [(i, 1.0 - w), (i + 1, w)]
        value = 0.0
        for index, weight in blend:
            curve = self.curves[index]
            near = min(max(logl, curve.low), curve.high)
            value += weight * (curve.log_at_one(near) + math.log(growth(b, math.exp(near))))
        return math.exp(value) * 1e-3


def bracket(points: list, value: float):
    """([(index, weight)], factor): the log-linear blend of `value` between the measured
    `points` (itself when measured, else its two neighbours; below the smallest, the first two
    up to `MAX_REACH`), times `factor`. Past the largest, up to `MAX_REACH`: the largest alone
    times value / largest, for a weight's dimension (a GEMM's n or k), whose work and bytes
    grow in proportion (a power law through two points far below would amplify their noise).
    None beyond."""
    if value in points:
        return [(points.index(value), 1.0)], 1.0
    if len(points) < 2 or not points[0] / MAX_REACH <= value <= points[-1] * MAX_REACH:
        return None
    if value > points[-1]:
        return [(len(points) - 1, 1.0)], value / points[-1]
    i = max(bisect_right(points, value) - 1, 0)
    w = (math.log(value) - math.log(points[i])) / (math.log(points[i + 1]) - math.log(points[i]))
    return [(i, 1.0 - w), (i + 1, w)], 1.0
