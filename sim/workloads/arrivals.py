"""Arrival processes of an open workload (times in seconds, drawn up front) and the closed-loop
description (arrivals happen during the run, when users' previous requests finish).

- `Poisson(rate)`: exponential gaps of mean 1 / rate (coefficient of variation 1);
- `Gamma(rate, cv)`: gamma gaps of mean 1 / rate and coefficient of variation `cv` (cv > 1 is
  burstier than Poisson, cv < 1 more regular; cv = 1 is Poisson);
- `Constant(rate)`: one request every 1 / rate seconds;
- `Burst()`: every request at time 0;
- `ClosedLoop(concurrency, think_time_s)`: `concurrency` users, each sending its next request
  `think_time_s` after its previous one finished (or was rejected); with `arrival_s`, request
  i is not sent before its arrival time: an open process behind a cap on requests in flight
  (`workload.max_concurrency`, vLLM's `--max-concurrency`: a request waits on the client for
  a free slot, and its latencies start when it is sent).
The first arrival of an open process is one gap after time 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .tables import from_table


def _check_positive(key: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or value == float("inf"):
        raise ValueError(f"{key} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class Poisson:
    rate: float
    key: str = "workload.arrival"

    def __post_init__(self):
        _check_positive(f"{self.key}.rate", self.rate)

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.cumsum(rng.exponential(1.0 / self.rate, size=n))  # [n]


@dataclass(frozen=True)
class Gamma:
    rate: float
    cv: float
    key: str = "workload.arrival"

    def __post_init__(self):
        _check_positive(f"{self.key}.rate", self.rate)
        _check_positive(f"{self.key}.cv", self.cv)

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        shape = 1.0 / self.cv**2  # gamma(k, theta) has cv 1 / sqrt(k) and mean k * theta
        return np.cumsum(rng.gamma(shape, 1.0 / (self.rate * shape), size=n))  # [n]


@dataclass(frozen=True)
class Constant:
    rate: float
    key: str = "workload.arrival"

    def __post_init__(self):
        _check_positive(f"{self.key}.rate", self.rate)

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.arange(1, n + 1, dtype=np.float64) / self.rate  # [n], no rounding drift


@dataclass(frozen=True)
class Burst:
    """Every request arrives at time 0 (vLLM's request rate `inf`)."""

    key: str = "workload.arrival"

    def times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.zeros(n)  # [n]


@dataclass(frozen=True)
class ClosedLoop:
    concurrency: int
    think_time_s: float = 0.0
    key: str = "workload.arrival"
    max_seconds: float | None = None  # users send no request after this time
    # [n] seconds: request i is sent at its arrival or once a slot frees, whichever is later
    arrival_s: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self):
        c = self.concurrency
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ValueError(f"{self.key}.concurrency must be a positive integer, got {c!r}")
        t = self.think_time_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
            raise ValueError(f"{self.key}.think_time_s must be a number >= 0, got {t!r}")


OPEN = {"poisson": Poisson, "gamma": Gamma, "constant": Constant, "burst": Burst}
PROCESSES = (*OPEN, "closed_loop", "trace")


def arrival_process(spec: dict, key: str = "workload.arrival"):
    """An open process or a `ClosedLoop` from its config table ({"process": ..., ...})."""
    name = spec.get("process") if isinstance(spec, dict) else None
    if name not in OPEN and name != "closed_loop":
        raise ValueError(f"{key}.process must be one of {', '.join(PROCESSES)}, got {name!r}")
    return from_table(OPEN.get(name, ClosedLoop), spec, key, "process")
