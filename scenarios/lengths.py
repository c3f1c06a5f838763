"""Length and priority distributions as classes: each is one frozen dataclass that owns its
fields (with their defaults), its schema table, its cross-field checks, what it draws and its
one-line description, as the arrival processes do (`arrival.py`).

Length distributions (`workload.prompt_tokens`, `output_tokens`; token counts >= 1):
- `Fixed(value)`; `Uniform(low, high)`, both ends included;
- `LogNormal(median, sigma, min, max)`: round(exp(N(ln median, sigma))), truncated to [min, max]
  by redrawing the values that fall outside (never clipped, so no mass piles up at the bounds).
  A range that accepts less than `MIN_ACCEPTANCE` of the draws is refused, because redrawing
  would take forever.
Priorities (`workload.priority`): `Choice(values, weights)`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np

from .errors import FieldError
from .specs import INT_LIST, LENGTH_BOUND, POSITIVE_NUMBER, WEIGHT_LIST, Table, Tagged

MIN_ACCEPTANCE = 1e-3  # below this, truncation by redrawing needs > 1,000 draws per value


class LengthDist:
    """A distribution of token counts (integers >= 1)."""

    dist: ClassVar[str]  # its name in `dist = ...`
    table: ClassVar[Table]

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def mean(self) -> float:
        raise NotImplementedError

    @property
    def lowest(self) -> int:
        """The smallest count it draws."""
        raise NotImplementedError

    @property
    def highest(self) -> int:
        """The largest count it draws."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def check(self, key: str) -> None:
        """Rules between this distribution's fields (FieldError naming the key)."""

    def to_dict(self) -> dict:
        return {"dist": self.dist} | asdict(self)


@dataclass(frozen=True)
class Fixed(LengthDist):
    value: int
    dist: ClassVar[str] = "fixed"
    table: ClassVar[Table] = Table({"value": LENGTH_BOUND}, required=("value",))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)  # [n]

    @property
    def mean(self) -> float:
        return float(self.value)

    @property
    def lowest(self) -> int:
        return self.value

    @property
    def highest(self) -> int:
        return self.value

    def describe(self) -> str:
        return f"fixed {self.value}"


@dataclass(frozen=True)
class Uniform(LengthDist):
    low: int
    high: int
    dist: ClassVar[str] = "uniform"
    table: ClassVar[Table] = Table({"low": LENGTH_BOUND, "high": LENGTH_BOUND},
                                   required=("low", "high"))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)  # [n]

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def lowest(self) -> int:
        return self.low

    @property
    def highest(self) -> int:
        return self.high

    def describe(self) -> str:
        return f"uniform in [{self.low}, {self.high}]"

    def check(self, key: str) -> None:
        _check_order(key, "low", self.low, "high", self.high)


@dataclass(frozen=True)
class LogNormal(LengthDist):
    median: float
    sigma: float
    max: int
    min: int = 1
    dist: ClassVar[str] = "lognormal"
    table: ClassVar[Table] = Table({"median": POSITIVE_NUMBER, "sigma": POSITIVE_NUMBER,
                                    "min": LENGTH_BOUND, "max": LENGTH_BOUND},
                                   required=("median", "sigma", "max"))

    def _bounds(self) -> tuple[float, float]:
        """[min - 0.5, max + 0.5], the draws that round into [min, max], in standard normal
        units of the log."""
        mu = math.log(self.median)
        lo = (math.log(self.min - 0.5) - mu) / self.sigma if self.min > 0.5 else -math.inf
        return lo, (math.log(self.max + 0.5) - mu) / self.sigma

    @property
    def acceptance(self) -> float:
        """Probability that one draw rounds into [min, max]."""
        lo, hi = self._bounds()
        return _normal_cdf(hi) - (_normal_cdf(lo) if lo > -math.inf else 0.0)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = np.empty(n, dtype=np.int64)  # [n]
        filled, mu = 0, math.log(self.median)
        while filled < n:
            # Draw enough that one round usually suffices; the order of draws is fixed by n.
            want = n - filled
            batch = min(int(want / self.acceptance * 1.1) + 16, 4 * want + 1_000_000)
            with np.errstate(over="ignore"):  # a wide sigma: past any max, out of range
                values = np.rint(np.exp(rng.normal(mu, self.sigma, size=batch)))  # [batch]
            kept = values[(values >= self.min) & (values <= self.max)][:want]
            out[filled:filled + kept.size] = kept
            filled += kept.size
        return out

    def describe(self) -> str:
        return (f"lognormal (median {self.median:g}, sigma {self.sigma:g}) "
                f"in [{self.min}, {self.max}]")

    @property
    def mean(self) -> float:
        """The mean of a draw kept in [min - 0.5, max + 0.5] before rounding (rounding moves it
        by well under one): E[X | a < X < b] of a lognormal X, in closed form."""
        (lo, hi), s = self._bounds(), self.sigma
        below = _normal_cdf(lo - s) if lo > -math.inf else 0.0
        return self.median * math.exp(s * s / 2) * (_normal_cdf(hi - s) - below) / \
            self.acceptance

    @property
    def lowest(self) -> int:
        return self.min

    @property
    def highest(self) -> int:
        return self.max

    def check(self, key: str) -> None:
        _check_order(key, "min", self.min, "max", self.max)
        if self.acceptance < MIN_ACCEPTANCE:
            raise FieldError(key, f"lognormal(median={self.median}, sigma={self.sigma}) puts "
                                  f"only {self.acceptance:.2g} of its mass in [min, max] = "
                                  f"[{self.min}, {self.max}] (at least {MIN_ACCEPTANCE:g} is "
                                  f"needed to truncate by redrawing); widen the range or move "
                                  f"the median into it")


LENGTHS = {cls.dist: cls for cls in (Fixed, Uniform, LogNormal)}


@dataclass(frozen=True)
class Choice:
    """Priorities drawn from `values` with `weights` (equal weights by default)."""

    values: tuple
    weights: tuple
    table: ClassVar[Table] = Table({"values": INT_LIST, "weights": WEIGHT_LIST},
                                   required=("values",))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        p = np.asarray(self.weights, dtype=np.float64)
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, p=p / p.sum())  # [n]

    def check(self, key: str) -> None:
        if len(self.weights) != len(self.values):
            raise FieldError(f"{key}.weights", f"must have one weight per value "
                                               f"({len(self.values)}), got {len(self.weights)}")
        if sum(self.weights) <= 0:
            raise FieldError(f"{key}.weights", f"must not be all zero, got {list(self.weights)}")
        if not math.isfinite(sum(self.weights)):
            raise FieldError(f"{key}.weights", f"must have a finite sum (they are relative: "
                                               f"scale them down), got {list(self.weights)}")

    def to_dict(self) -> dict:
        return {"dist": "choice", "values": list(self.values), "weights": list(self.weights)}


LENGTH_SCHEMA = Tagged("dist", {name: cls.table for name, cls in LENGTHS.items()})
PRIORITY_SCHEMA = Tagged("dist", {"choice": Choice.table})


def length_of(table: dict, key: str) -> LengthDist:
    """The distribution a checked length table ({"dist": ..., ...}) describes."""
    dist = LENGTHS[table["dist"]](**{k: v for k, v in table.items() if k != "dist"})
    dist.check(key)
    return dist


def priority_of(table: dict, key: str = "workload.priority") -> Choice:
    values = tuple(table["values"])
    choice = Choice(values, tuple(table.get("weights") or (1.0,) * len(values)))
    choice.check(key)
    return choice


def _check_order(key: str, low_name: str, low, high_name: str, high) -> None:
    if low > high:
        raise FieldError("", f"{key}.{low_name} ({low}) must be <= {key}.{high_name} ({high})")


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))
