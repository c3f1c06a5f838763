"""The workload's parts as classes: each arrival process and each length distribution is one
frozen dataclass that owns its fields (with their defaults), its schema table, its cross-field
checks, what it draws, the time span of its arrivals and its one-line description. The schema,
the workload builder, the search, the reports and the vLLM JSON all ask these classes; none
keeps its own list of processes or distributions.

Arrival processes (`workload.arrival.process`):
- `Poisson(rate)`: exponential gaps of mean 1 / rate (coefficient of variation 1);
- `Gamma(rate, cv)`: gamma gaps of mean 1 / rate and coefficient of variation `cv` (cv > 1 is
  burstier than Poisson, cv < 1 more regular; cv = 1 is Poisson);
- `Constant(rate)`: one request every 1 / rate seconds;
- `Burst()`: every request at time 0 (vLLM's request rate `inf`);
- `ClosedLoop(concurrency, think_time_s)`: `concurrency` users, each sending its next request
  `think_time_s` after its previous one finished; arrivals happen during the run;
- `TraceArrivals()`: the arrival times a trace file gives.
The first arrival of an open process is one gap after time 0.

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
from dataclasses import asdict, dataclass, replace
from typing import ClassVar

import numpy as np

from .defaults import GAMMA_CV
from .errors import FieldError
from .specs import (INT_LIST, LENGTH_BOUND, NON_NEGATIVE_NUMBER, POSITIVE_INT, POSITIVE_NUMBER,
                    WEIGHT_LIST, Spec, Table, Tagged, is_number)

MIN_ACCEPTANCE = 1e-3  # below this, truncation by redrawing needs > 1,000 draws per value


class ArrivalProcess:
    """How requests arrive. `times` draws an open process's n arrival times up front; a
    closed loop's and a trace's arrivals come from elsewhere (the run, the file)."""

    process: ClassVar[str]  # its name in `workload.arrival.process`
    table: ClassVar[Table]  # its keys besides `process`
    at_rate: ClassVar[bool] = False  # arrivals come at `rate` requests/s (a search varies it)

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray | None:
        return None

    def span(self, n: int) -> tuple[float, str, str]:
        """(seconds that n arrivals span, the key that sets it, the words for an error); a
        burst's and a trace's span is 0 here (a trace's is checked where it is read)."""
        return 0.0, "", ""

    def describe(self) -> str:
        """One line for reports: "poisson at 4 req/s"."""
        return self.process

    def traffic(self) -> tuple:
        """(request_rate, burstiness, max_concurrency) as vLLM's benchmark writes them."""
        return "inf", None, None

    def check(self, key: str) -> None:
        """Rules between this process's fields (FieldError naming the key)."""

    def to_dict(self) -> dict:
        return {"process": self.process} | asdict(self)


@dataclass(frozen=True)
class RateProcess(ArrivalProcess):
    """An open process at `rate` requests/s."""

    rate: float
    at_rate: ClassVar[bool] = True
    table: ClassVar[Table] = Table({"rate": POSITIVE_NUMBER}, required=("rate",))
    burstiness: ClassVar[float | str]  # vLLM's gamma shape of the gaps

    def span(self, n: int) -> tuple[float, str, str]:
        return n / self.rate, "rate", f"at {self.rate:g}/s"

    def describe(self, rate: str | None = None) -> str:
        """`rate`: words in place of the rate (a search's "the rate searched")."""
        return f"{self.process} at {rate or f'{self.rate:g} req/s'}"

    def traffic(self) -> tuple:
        return self.rate, self.burstiness, None

    def at(self, rate: float) -> "RateProcess":
        """The same process at another rate."""
        return replace(self, rate=rate)


@dataclass(frozen=True)
class Poisson(RateProcess):
    process: ClassVar[str] = "poisson"
    burstiness: ClassVar[float] = 1.0

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.cumsum(rng.exponential(1.0 / self.rate, size=n))  # [n]


@dataclass(frozen=True)
class Gamma(RateProcess):
    cv: float = 1.0
    process: ClassVar[str] = "gamma"
    table: ClassVar[Table] = Table({
        "rate": POSITIVE_NUMBER,
        "cv": Spec(f"a number from {GAMMA_CV[0]} to {GAMMA_CV[1]} (the gaps' coefficient of "
                   f"variation)", lambda v: is_number(v) and GAMMA_CV[0] <= v <= GAMMA_CV[1])},
        required=("rate", "cv"))

    @property
    def shape(self) -> float:
        return 1.0 / self.cv**2  # gamma(k, theta) has cv 1 / sqrt(k) and mean k * theta

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.cumsum(rng.gamma(self.shape, 1.0 / (self.rate * self.shape), size=n))  # [n]

    def describe(self, rate: str | None = None) -> str:
        return f"gamma at {rate or f'{self.rate:g} req/s'} (cv {self.cv:g})"

    def traffic(self) -> tuple:
        return self.rate, self.shape, None


@dataclass(frozen=True)
class Constant(RateProcess):
    process: ClassVar[str] = "constant"
    burstiness: ClassVar[str] = "inf"  # vLLM: no randomness in the gaps

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.arange(1, n + 1, dtype=np.float64) / self.rate  # [n], no rounding drift


@dataclass(frozen=True)
class Burst(ArrivalProcess):
    process: ClassVar[str] = "burst"
    table: ClassVar[Table] = Table({})

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.zeros(n)  # [n]

    def describe(self) -> str:
        return "all at once, at time 0"

    def traffic(self) -> tuple:
        return "inf", 1.0, None  # vLLM writes its --burstiness, 1.0 by default, at rate inf


@dataclass(frozen=True)
class ClosedLoop(ArrivalProcess):
    concurrency: int
    think_time_s: float = 0.0  # each user sends its next request as soon as one finishes
    process: ClassVar[str] = "closed_loop"
    table: ClassVar[Table] = Table({"concurrency": POSITIVE_INT,
                                    "think_time_s": NON_NEGATIVE_NUMBER},
                                   required=("concurrency",))

    def span(self, n: int) -> tuple[float, str, str]:
        return (n * self.think_time_s / self.concurrency, "think_time_s",
                f"after {self.think_time_s:g} s of thinking")

    def describe(self) -> str:
        return f"closed loop of {self.concurrency} users (think time {self.think_time_s:g} s)"

    def traffic(self) -> tuple:
        return "inf", None, self.concurrency


@dataclass(frozen=True)
class TraceArrivals(ArrivalProcess):
    process: ClassVar[str] = "trace"
    table: ClassVar[Table] = Table({})

    def describe(self) -> str:
        return "trace"


ARRIVALS = {cls.process: cls for cls in (Poisson, Gamma, Constant, Burst, ClosedLoop,
                                         TraceArrivals)}
OPEN_PROCESSES = tuple(name for name, cls in ARRIVALS.items()
                       if cls not in (ClosedLoop, TraceArrivals))
RATE_PROCESSES = tuple(name for name, cls in ARRIVALS.items() if cls.at_rate)


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


ARRIVAL_SCHEMA = Tagged("process", {name: cls.table for name, cls in ARRIVALS.items()})
LENGTH_SCHEMA = Tagged("dist", {name: cls.table for name, cls in LENGTHS.items()})
PRIORITY_SCHEMA = Tagged("dist", {"choice": Choice.table})


def arrival_of(table: dict, key: str = "workload.arrival") -> ArrivalProcess:
    """The process a checked `workload.arrival` table describes."""
    process = ARRIVALS[table["process"]](**{k: v for k, v in table.items() if k != "process"})
    process.check(key)
    return process


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
