"""One probe of the search: a point's config simulated at one arrival rate, and what the
search keeps of it (a `Probe`: a few numbers, cheap to send back from a worker).

SLO attainment is the share of the counted requests (those arriving after the warm-up) that
finished and met every SLO the scenario gives (`engine.benchmark.meets_slo`): a rejected or
unfinished request counts against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine.benchmark import counted, meets_slo, request_metrics, summarize

from scenarios import RunConfig

from .. import notes
from ..runner import run_config
from .bisection import bisect_rate

RATE_KEY = "workload.arrival.rate"


@dataclass(frozen=True)
class Probe:
    rate: float  # the offered arrival rate, requests/s
    attainment: float  # the share of counted requests that met every SLO
    meets: bool  # attainment >= the target
    goodput: float  # requests/s that met every SLO (summary.csv's goodput)
    throughput: float  # requests completed per second
    output_throughput: float  # output tokens per second
    ttft_p90_s: float
    tpot_p90_s: float
    requests: int  # the requests its run sent (fewer than num_requests under a time limit)


@dataclass(frozen=True)
class PointJob:
    """What a worker needs to search one point (a module-level job for `sim.parallel`)."""

    config: RunConfig
    base_dir: Path | None
    target: float
    low: float
    high: float
    tolerance: float
    label: str  # the point's run label, to name it in a probe's error


def search_point(job: PointJob) -> tuple[tuple[Probe, ...], tuple[str, ...]]:
    """(the probes of one point's bisection, run one after the other; the notes they said,
    each once: `sim.notes`). A probe's error (a ValueError) names the point and the rate."""
    unit = "conversations/s" if job.config.workload.sessions else "requests/s"

    def probe(rate: float) -> Probe:
        try:
            return run_probe(job.config, job.base_dir, job.target, rate)
        except (ValueError, OSError) as exc:  # a file a run reads, too
            raise ValueError(f"{job.label} at {rate:g} {unit}: {exc}") from None

    with notes.collected() as said:
        probes = tuple(bisect_rate(probe, job.low, job.high, job.tolerance))
    return probes, tuple(said)


def run_probe(config: RunConfig, base_dir, target: float, rate: float) -> Probe:
    """Simulate `config` at arrival rate `rate` (same seed, so the same requests at every
    rate, their arrival times scaled) and measure it against `target`."""
    workload = config.workload
    config = replace(config, workload=replace(workload, arrival=workload.arrival.at(rate)))
    recorder = run_config(config, base_dir=base_dir)
    slo, warmup_s = config.slo.limits(), workload.warmup_s
    summary = summarize(recorder, slo, warmup_s)
    attainment = slo_attainment(recorder, slo, warmup_s)
    if math.isnan(attainment):  # said at its rate by `search_point`
        raise ValueError(f"every request arrives within the {warmup_s:g} s warm-up "
                         f"(workload.warmup_s), so none is counted; lower the warm-up or send "
                         f"more requests (--num-prompts)")
    return Probe(rate, attainment, attainment >= target, summary["goodput"],
                 summary["request_throughput"], summary["output_throughput"],
                 summary["ttft_p90_s"], summary["tpot_p90_s"],
                 recorder.num_requests)


def slo_attainment(recorder, slo: dict, warmup_s: float = 0.0) -> float:
    """The share of requests arriving from `warmup_s` on that finished meeting every SLO
    (NaN when none arrived then)."""
    columns = recorder.request_columns()
    kept = counted(columns, warmup_s)
    finished = np.asarray(columns["status"], dtype=object) == "finished"
    met = meets_slo(request_metrics(columns), slo) & finished
    return float(met[kept].mean()) if kept.any() else math.nan
