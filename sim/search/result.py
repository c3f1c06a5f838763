"""What a search found: per point, its probes and the figures points are compared by.

A point's capacity is the highest probed arrival rate at which the target share of requests
met every SLO; per GPU it divides by the point's GPUs (each replica's `hardware.tp` x
`hardware.dp`, summed over `cluster.replicas` or the pools), per dollar-hour by what they
cost (`hardware.cost_per_hour`, else the GPU catalog's assumed price; none for other cost
models or when a replica's price is unknown). The goodput measured at that rate (requests
meeting every SLO over the probe's whole run, the drain of its last requests included, as
summary.csv's goodput) is reported beside it as `measured_goodput`: it differs from the capacity
by the requests that missed an SLO, by the drain and by how far the drawn arrivals' rate is
from the nominal one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..costs.hardware.catalog import cost_per_hour
from .probe import Probe

FOUND, AT_LEAST_HIGH, FAILS_AT_LOW = "found", "at_least_high", "fails_at_low"
# a probe serving its requests below this share of the offered rate did not reach a steady state
STEADY_SHARE = 0.8


@dataclass(frozen=True)
class PointResult:
    spec: object  # the point's RunSpec: its variant, grid values (`sweep`) and config
    probes: tuple[Probe, ...]
    said: tuple[str, ...] = ()  # what its probes told the user (`sim.notes`), each once

    @property
    def notes(self) -> tuple[str, ...]:
        """What its probes said, and whether its capacity was measured on too few requests."""
        short = self.short_run_note()
        return self.said + ((f"note: {short}",) if short else ())

    def short_run_note(self) -> str | None:
        """A note when the probe at the capacity served its requests well below the rate
        offered: its run was a burst the server drained, not a steady state, and its SLOs held
        only for want of requests (a probe's throughput is about rate / (1 + in flight /
        requests), by Little's law, so this says the requests were fewer than about four
        times those in flight)."""
        best = self.best
        workload = self.spec.config.workload
        if best is None or workload.sessions is not None:  # conversations/s against requests/s
            return None
        if best.throughput >= STEADY_SHARE * best.rate:
            return None
        longer = ", or a longer --max-seconds" if workload.max_seconds is not None else ""
        return (f"at the capacity found, {best.rate:.3g} requests/s, the probe's "
                f"{best.requests:,} requests were served at {best.throughput:.3g} requests/s: "
                f"too few to reach a steady state, so the capacity is overstated; send more "
                f"(--num-prompts{longer})")

    @property
    def status(self) -> str:
        """found; at_least_high (it met the target at the bracket's top); fails_at_low."""
        if not self.probes[0].meets:
            return FAILS_AT_LOW
        return AT_LEAST_HIGH if self.probes[1].meets else FOUND

    @property
    def best(self) -> Probe | None:
        """The probe at the highest rate that met the target (None: not even `low` did)."""
        met = [probe for probe in self.probes if probe.meets]
        return max(met, key=lambda probe: probe.rate) if met else None

    @property
    def gpus(self) -> int:
        """GPUs of every replica (each pool's own `hardware.tp` x `hardware.dp`)."""
        return sum(hardware.tp * hardware.dp if hardware else 1
                   for hardware in _replica_hardware(self.spec.config))

    @property
    def dollars_per_hour(self) -> float | None:
        """What the point's GPUs cost an hour (None: a replica's price is not known)."""
        total = 0.0
        for hardware in _replica_hardware(self.spec.config):
            price = cost_per_hour(hardware) if hardware else None
            if price is None:
                return None
            total += price * hardware.tp * hardware.dp
        return total

    def figures(self) -> dict:
        """The point's row of search.csv (after its variant and grid values); NaN where a
        figure does not exist (no rate met the target, no price)."""
        best, cost = self.best, self.dollars_per_hour
        capacity = best.rate if best else math.nan
        return {"status": self.status, "gpus": self.gpus, "capacity": capacity,
                "attainment": best.attainment if best else math.nan,
                "measured_goodput": best.goodput if best else math.nan,
                "capacity_per_gpu": capacity / self.gpus,
                "dollars_per_hour": math.nan if cost is None else cost,
                "capacity_per_dollar_hour": math.nan if cost is None else capacity / cost,
                # what a million output tokens cost served at the capacity
                "dollars_per_million_tokens": math.nan if cost is None or not best else
                cost / (best.output_throughput * 3600) * 1e6,
                "ttft_p90_s": best.ttft_p90_s if best else math.nan,
                "tpot_p90_s": best.tpot_p90_s if best else math.nan,
                "probes": len(self.probes)}


def _replica_hardware(config) -> list:
    """The hardware settings of each replica of a config (None: the NumPy engine): one
    without `[cluster]`, each replica's (a pool's settings applied) with it."""
    if config.cluster is None:
        return [config.hardware]
    from ..cluster.run import replica_configs

    return [replica.hardware for _, replica in replica_configs(config)]


@dataclass(frozen=True)
class SearchResult:
    scenario: object  # the searched scenario, its grid crossed into its sweep
    settings: dict  # the [search] table: target, rate {low, high}, tolerance, grid
    points: tuple[PointResult, ...]

    def rows(self) -> list[dict]:
        """Every point's figures, with `pareto` (on the front of capacity per GPU against
        capacity per dollar-hour: no other point is at least as good on both and better on
        one)."""
        rows = [point.figures() for point in self.points]
        for row in rows:
            row["pareto"] = _on_front(row, rows)
        return rows

    def best(self, figure: str) -> PointResult | None:
        """The point with the highest `figure` (e.g. "capacity_per_gpu"); the first of equals;
        None when no point has it."""
        scored = [(row[figure], i) for i, row in enumerate(self.rows())
                  if not math.isnan(row[figure])]
        return self.points[max(scored, key=lambda s: (s[0], -s[1]))[1]] if scored else None


def _on_front(row: dict, rows: list[dict]) -> bool:
    keys = ("capacity_per_gpu", "capacity_per_dollar_hour")
    if any(math.isnan(row[k]) for k in keys):
        return False
    return not any(all(other[k] >= row[k] for k in keys) and
                   any(other[k] > row[k] for k in keys) for other in rows
                   if not any(math.isnan(other[k]) for k in keys))
