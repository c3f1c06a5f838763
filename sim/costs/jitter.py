"""The machine's speed from moment to moment ("jitter"), measured and simulated.

On a real machine the same step does not always take the same time: the CPU's clock, other
programs, a shared core's sibling and memory traffic make it run faster or slower, and these
swings last from milliseconds to seconds. A server under load feels them: a slow second at 70%
load is a second at 90%, and a queue builds that a machine of constant speed never sees, so the
tails of TTFT and TPOT are longer than a deterministic simulation predicts.

Model: a step that starts at time t takes its cost model's time multiplied by exp(x(t) + e),
where
- x(t) = sum_k x_k(t), each x_k an Ornstein-Uhlenbeck process (mean 0, stationary standard
  deviation sigmas[k], correlation time timescales_s[k]): the autocovariance of x at lag L is
  sum_k sigmas[k]^2 exp(-L / timescales_s[k]);
- e is independent per step, standard deviation step_sigma.
The profile's step times are medians, normalised to the median speed of a reference step, so
x = e = 0 is the speed the cost model predicts; exp(x + e) has median 1.

Measured by the profiler (`sim.profiling.reference.measure_jitter`): the reference step runs back to back for a few seconds;
y = log(step time) - mean is the log speed. Its autocovariance at lags from one step to a
quarter of the run is fitted (non-negative least squares) as sum_k a_k exp(-lag / tau_k) over a
fixed ladder of timescales TIMESCALES_S; sigmas = sqrt(a), and what the lag-0 variance has
beyond sum(a) is step_sigma^2.

Simulated by `SpeedProcess`: each x_k is advanced exactly over the time since the previous step
(x <- x a + sigma sqrt(1 - a^2) z, a = exp(-dt / tau)), so the result does not depend on how
time is cut into steps; its normal draws come from one seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .fitting import nnls

TIMESCALES_S = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # the ladder the fit chooses from


@dataclass(frozen=True)
class Jitter:
    """Log-speed components: (correlation time, stationary standard deviation) pairs and an
    independent per-step standard deviation."""

    timescales_s: tuple = ()
    sigmas: tuple = ()
    step_sigma: float = 0.0

    def __post_init__(self):
        taus = list(self.timescales_s)
        if len(taus) != len(self.sigmas) or any(not t > 0 for t in taus) or \
                any(not s >= 0 for s in self.sigmas) or not self.step_sigma >= 0:
            raise ValueError(f"jitter needs one sigma >= 0 per timescale > 0 and step_sigma >= 0, "
                             f"got timescales {taus}, sigmas {list(self.sigmas)}, step_sigma "
                             f"{self.step_sigma}")

    def covariance(self, lag_s) -> np.ndarray:
        """The autocovariance of x at lags (seconds) > 0."""
        lag = np.asarray(lag_s, float)[..., None]
        return (np.square(self.sigmas) * np.exp(-lag / np.asarray(self.timescales_s))).sum(-1)

    @property
    def log_std(self) -> float:
        """Standard deviation of a single step's log speed (x + e)."""
        return math.sqrt(sum(s * s for s in self.sigmas) + self.step_sigma ** 2)

    def to_dict(self) -> dict:
        return {"timescales_s": list(self.timescales_s), "sigmas": list(self.sigmas),
                "step_sigma": self.step_sigma}

    @classmethod
    def from_dict(cls, data: dict) -> "Jitter":
        return cls(tuple(float(t) for t in data["timescales_s"]),
                   tuple(float(s) for s in data["sigmas"]), float(data["step_sigma"]))


def lag_covariance(start_s: np.ndarray, duration_s: np.ndarray, max_points: int = 40):
    """(lags [m] seconds, autocovariances [m], variance) of the log durations, at log-spaced
    step offsets from 1 to a quarter of the series (lag = mean start-time difference)."""
    y = np.log(duration_s)
    y = y - y.mean()  # [n]
    n = len(y)
    offsets = np.unique(np.geomspace(1, max(n // 4, 1), max_points).astype(int))
    lags = np.array([np.mean(start_s[m:] - start_s[:-m]) for m in offsets])  # [m]
    cov = np.array([np.mean(y[m:] * y[:-m]) for m in offsets])  # [m]
    return lags, cov, float(np.mean(y * y))


MIN_STEPS = 16  # timed steps a fit needs


def fit(start_s: np.ndarray, duration_s: np.ndarray, timescales=TIMESCALES_S) -> Jitter:
    """The `Jitter` of a back-to-back series of one step (see the module docstring); timescales
    longer than a quarter of the series cannot be told from its mean and are left out."""
    if len(duration_s) < MIN_STEPS:
        raise ValueError(f"jitter: need at least {MIN_STEPS} timed steps, got {len(duration_s)}")
    lags, cov, variance = lag_covariance(start_s, duration_s)
    span = start_s[-1] - start_s[0]
    taus = tuple(t for t in timescales if t <= span / 4)
    if not taus:
        return Jitter((), (), math.sqrt(variance))
    basis = np.exp(-lags[:, None] / np.asarray(taus))  # [m, K]
    a = nnls(basis, np.maximum(cov, 0.0))  # [K] variances
    slow = float(a.sum())
    kept = [(t, math.sqrt(v)) for t, v in zip(taus, a) if v > 0]
    return Jitter(tuple(t for t, _ in kept), tuple(s for _, s in kept),
                  math.sqrt(max(variance - slow, 0.0)))


class SpeedProcess:
    """Draws the speed factor exp(x + e) of successive steps; `factor(dt_s)` advances the
    components by the `dt_s` seconds since the previous step's start (ignored for the first)."""

    BLOCK = 4096  # normal draws taken from the generator at a time

    def __init__(self, jitter: Jitter, rng: np.random.Generator):
        self.jitter, self.rng = jitter, rng
        self._taus = jitter.timescales_s
        self._sigmas = jitter.sigmas
        self._x: list[float] | None = None
        self._z = np.empty(0)
        self._i = 0

    def _normal(self) -> float:
        if self._i == len(self._z):
            self._z, self._i = self.rng.standard_normal(self.BLOCK).tolist(), 0
        self._i += 1
        return self._z[self._i - 1]

    def factor(self, dt_s: float) -> float:
        x = self._x
        if x is None:  # the first step: each component from its stationary distribution
            x = self._x = [s * self._normal() for s in self._sigmas]
        else:
            for k, (tau, sigma) in enumerate(zip(self._taus, self._sigmas)):
                a = math.exp(-dt_s / tau)
                x[k] = a * x[k] + sigma * math.sqrt(1.0 - a * a) * self._normal()
        return math.exp(sum(x) + self.jitter.step_sigma * self._normal())
