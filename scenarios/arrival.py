"""Arrival processes (`workload.arrival.process`) as classes: each is one frozen dataclass that
owns its fields (with their defaults), its schema table, its cross-field checks, the times it
draws, the time span of its arrivals, its one-line description and its traffic as vLLM's
benchmark writes it. The schema, the workload builder, the search, the reports and the vLLM
JSON all ask these classes; none keeps its own list of processes.

- `Poisson(rate)`: exponential gaps of mean 1 / rate (coefficient of variation 1);
- `Gamma(rate, cv)`: gamma gaps of mean 1 / rate and coefficient of variation `cv` (cv > 1 is
  burstier than Poisson, cv < 1 more regular; cv = 1 is Poisson);
- `Constant(rate)`: one request every 1 / rate seconds;
- `Burst()`: every request at time 0 (vLLM's request rate `inf`);
- `ClosedLoop(concurrency, think_time_s)`: `concurrency` users, each sending its next request
  `think_time_s` after its previous one finished; arrivals happen during the run;
- `TraceArrivals()`: the arrival times a trace file gives.
The first arrival of an open process is one gap after time 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import ClassVar

import numpy as np

from .defaults import GAMMA_CV
from .specs import (NON_NEGATIVE_NUMBER, POSITIVE_INT, POSITIVE_NUMBER, Spec, Table, Tagged,
                    is_number)


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


FIXED_SPAN = Spec("true or false (true: the gaps rescaled so that the last arrival is at "
                  "exactly the number of arrivals / rate, as vLLM's bench serve sends them)",
                  lambda v: isinstance(v, bool))


@dataclass(frozen=True)
class RandomGaps(RateProcess):
    """A rate process of random gaps. `fixed_span`: the arrival times rescaled so that the last
    of n is at exactly n / rate, as vLLM's `bench serve` rescales its gaps (to steady its
    throughput from seed to seed); the flags `--request-rate` and `--burstiness` ask for it."""

    fixed_span: bool = field(default=False, kw_only=True)  # after a subclass's own fields

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        times = np.cumsum(self.gaps(rng, n))  # [n]
        if self.fixed_span and n and times[-1] > 0:
            times *= (n / self.rate) / times[-1]
            times[-1] = n / self.rate  # exactly, whatever the rounding
        return times

    def describe(self, rate: str | None = None) -> str:
        rescaled = ", gaps rescaled to end at the number of arrivals / rate (vLLM's)" \
            if self.fixed_span else ""
        return f"{self.process} at {rate or f'{self.rate:g} req/s'}{self.shape_text()}{rescaled}"

    def shape_text(self) -> str:
        """The gaps' shape beyond their rate, for `describe`."""
        return ""


@dataclass(frozen=True)
class Poisson(RandomGaps):
    process: ClassVar[str] = "poisson"
    burstiness: ClassVar[float] = 1.0
    table: ClassVar[Table] = Table({"rate": POSITIVE_NUMBER, "fixed_span": FIXED_SPAN},
                                   required=("rate",))

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(1.0 / self.rate, size=n)  # [n]


@dataclass(frozen=True)
class Gamma(RandomGaps):
    cv: float = 1.0
    process: ClassVar[str] = "gamma"
    table: ClassVar[Table] = Table({
        "rate": POSITIVE_NUMBER,
        "cv": Spec(f"a number from {GAMMA_CV[0]} to {GAMMA_CV[1]} (the gaps' coefficient of "
                   f"variation)", lambda v: is_number(v) and GAMMA_CV[0] <= v <= GAMMA_CV[1]),
        "fixed_span": FIXED_SPAN},
        required=("rate", "cv"))

    @property
    def shape(self) -> float:
        return 1.0 / self.cv**2  # gamma(k, theta) has cv 1 / sqrt(k) and mean k * theta

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.gamma(self.shape, 1.0 / (self.rate * self.shape), size=n)  # [n]

    def shape_text(self) -> str:
        return f" (cv {self.cv:g})"

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
ARRIVAL_SCHEMA = Tagged("process", {name: cls.table for name, cls in ARRIVALS.items()})


def arrival_of(table: dict, key: str = "workload.arrival") -> ArrivalProcess:
    """The process a checked `workload.arrival` table describes."""
    process = ARRIVALS[table["process"]](**{k: v for k, v in table.items() if k != "process"})
    process.check(key)
    return process
