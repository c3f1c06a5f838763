"""Request-length and priority distributions: each a frozen dataclass that draws `n` values from
an explicit `np.random.Generator`.

Lengths are token counts (integers >= 1):
- `Fixed(value)`: every request the same;
- `Uniform(low, high)`: integers in [low, high], both ends included;
- `LogNormal(median, sigma, min, max)`: round(exp(N(ln median, sigma))), truncated to
  [min, max] by redrawing the values that fall outside (never clipped, so no mass piles up at
  the bounds). A range that accepts less than `MIN_ACCEPTANCE` of the draws is refused up front,
  because redrawing would take forever.
Priorities: `Choice(values, weights)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .tables import from_table

MIN_ACCEPTANCE = 1e-3  # below this, truncation by redrawing needs > 1,000 draws per value


def _check_int(key: str, value) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class Fixed:
    value: int
    key: str = "length"  # the config key, for error messages

    def __post_init__(self):
        _check_int(f"{self.key}.value", self.value)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)  # [n]

    @property
    def mean(self) -> float:
        return float(self.value)


@dataclass(frozen=True)
class Uniform:
    low: int
    high: int
    key: str = "length"

    def __post_init__(self):
        _check_int(f"{self.key}.low", self.low)
        _check_int(f"{self.key}.high", self.high)
        if self.low > self.high:
            raise ValueError(f"{self.key}.low ({self.low}) must be <= {self.key}.high ({self.high})")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)  # [n]

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


@dataclass(frozen=True)
class LogNormal:
    median: float
    sigma: float
    min: int
    max: int
    key: str = "length"

    def __post_init__(self):
        if not (isinstance(self.median, (int, float)) and self.median > 0):
            raise ValueError(f"{self.key}.median must be a positive number, got {self.median!r}")
        if not (isinstance(self.sigma, (int, float)) and self.sigma > 0):
            raise ValueError(f"{self.key}.sigma must be a positive number, got {self.sigma!r}")
        _check_int(f"{self.key}.min", self.min)
        _check_int(f"{self.key}.max", self.max)
        if self.min > self.max:
            raise ValueError(f"{self.key}.min ({self.min}) must be <= {self.key}.max ({self.max})")
        p = self.acceptance
        if p < MIN_ACCEPTANCE:
            raise ValueError(
                f"{self.key}: lognormal(median={self.median}, sigma={self.sigma}) puts only "
                f"{p:.2g} of its mass in [min, max] = [{self.min}, {self.max}] (at least "
                f"{MIN_ACCEPTANCE:g} is needed to truncate by redrawing); widen the range or "
                f"move the median into it")

    @property
    def acceptance(self) -> float:
        """Probability that one draw rounds into [min, max]."""
        mu = math.log(self.median)
        lo = (math.log(self.min - 0.5) - mu) / self.sigma if self.min > 0.5 else -math.inf
        hi = (math.log(self.max + 0.5) - mu) / self.sigma
        return _normal_cdf(hi) - (_normal_cdf(lo) if lo > -math.inf else 0.0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = np.empty(n, dtype=np.int64)  # [n]
        filled, mu = 0, math.log(self.median)
        while filled < n:
            # Draw enough that one round usually suffices; the order of draws is fixed by n.
            want = n - filled
            batch = min(int(want / self.acceptance * 1.1) + 16, 4 * want + 1_000_000)
            values = np.rint(np.exp(rng.normal(mu, self.sigma, size=batch)))  # [batch]
            kept = values[(values >= self.min) & (values <= self.max)][:want]
            out[filled:filled + kept.size] = kept
            filled += kept.size
        return out


@dataclass(frozen=True)
class Choice:
    values: tuple
    weights: tuple
    key: str = "priority"

    def __post_init__(self):
        if not self.values:
            raise ValueError(f"{self.key}.values must be a non-empty list of integers")
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                   for v in self.values):
            raise ValueError(f"{self.key}.values must be integers, got {list(self.values)}")
        if len(self.weights) != len(self.values):
            raise ValueError(f"{self.key}.weights must have one weight per value "
                             f"({len(self.values)}), got {len(self.weights)}")
        if any(not w >= 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError(f"{self.key}.weights must be non-negative and not all zero, "
                             f"got {list(self.weights)}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        p = np.asarray(self.weights, dtype=np.float64)
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, p=p / p.sum())  # [n]


LENGTHS = {"fixed": Fixed, "uniform": Uniform, "lognormal": LogNormal}


def length_dist(spec: dict, key: str):
    """A length distribution from its config table, e.g. {"dist": "uniform", "low": 1, ...}."""
    if not isinstance(spec, dict) or spec.get("dist") not in LENGTHS:
        raise ValueError(f"{key}.dist must be one of {', '.join(LENGTHS)}, got "
                         f"{spec.get('dist') if isinstance(spec, dict) else spec!r}")
    return from_table(LENGTHS[spec["dist"]], spec, key, "dist")


def priority_dist(spec: dict, key: str = "workload.priority") -> Choice:
    if spec.get("dist", "choice") != "choice":
        raise ValueError(f"{key}.dist must be choice, got {spec.get('dist')!r}")
    values = tuple(spec["values"])
    weights = tuple(spec.get("weights") or [1.0] * len(values))
    return Choice(values, weights, key=key)

