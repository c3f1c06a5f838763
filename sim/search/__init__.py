"""SLO capacity search (`servesim search`): for every point of a grid of configurations, the
highest Poisson (or gamma, or constant) arrival rate at which a target share of requests meets
every SLO, found by bisection.

    scenario = search_scenario(scenarios.load("capacity-search"))
    result = search(scenario, Parallel(workers=2))     # a SearchResult
    result.rows()                                       # search.csv's figures per point

The grid (`search.grid`, dotted keys to lists of values) is crossed into the scenario's sweep
and with its variants, so each point is one run of `Scenario.runs()`, validated on load like
any sweep. Each point's bisection is sequential (`bisection.py`); the points run in parallel
through `sim.parallel`, so the result is the same serially, on a process pool or on Ray.
docs/sim/search.md has the semantics.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import scenarios

from scenarios.writes import overlap
from scenarios.overrides import flatten
from scenarios.arrival import RATE_PROCESSES

from ..build import resolved_spec
from ..checks import check_scenario, warmup_problem
from ..parallel import Parallel, run_jobs
from .probe import RATE_KEY, PointJob, Probe, search_point, slo_attainment
from .result import AT_LEAST_HIGH, FAILS_AT_LOW, FOUND, PointResult, SearchResult

CAPPED = ("workload.max_concurrency: a request's latencies start when it is sent, so a client "
          "holding requests back hides their wait from every SLO and any rate would pass; leave "
          "it out (the server's own limit is engine.max_num_seqs)")

__all__ = ["AT_LEAST_HIGH", "FAILS_AT_LOW", "FOUND", "PointResult", "Probe", "SearchResult",
           "search", "search_scenario", "slo_attainment"]


def search_scenario(scenario) -> scenarios.Scenario:
    """`scenario` with its search grid crossed into its sweep, every point checked to run
    (`sim.checks.check_scenario`); a one-line ScenarioError when it cannot be searched."""
    settings = scenario.base.search
    if settings is None:
        raise scenario.error("search: servesim search needs a [search] table, at least "
                             "rate = { low = ..., high = ... } (docs/sim/search.md)")
    for variant in scenario.variants:
        if any(key.split(".")[0] == "search" for key in variant.set):
            raise scenario.error(f"variant {variant.name!r}: a variant cannot set search "
                                 f"keys; the search's settings are the scenario's")
        if RATE_KEY in flatten(variant.set):
            raise scenario.error(f"variant {variant.name!r}: sets {RATE_KEY}, which the search "
                                 f"sets itself, from search.rate's low to its high (a variant "
                                 f"may set the process and its cv)")
    grid = settings.grid
    for key in grid:
        swept = next((k for k in scenario.sweep if overlap(k, key)), None)
        if swept is not None:  # the same key, or a table and a key inside it
            also = "also a key of the sweep" if swept == key else f"overlaps the sweep's {swept}"
            raise scenario.error(f"search.grid.{key}: {also}; the grid is crossed into the "
                                 f"sweep, so give its values in one of them")
    for key in [*scenario.sweep, *grid]:
        if overlap(key, RATE_KEY) or key.split(".")[0] == "search":  # the key, or a table of it
            where = "search.grid" if key in grid else "sweep"
            raise scenario.error(f"{where}.{key}: cannot be searched over (the search "
                                 f"sets {RATE_KEY} and reads [search] itself)")
    for key, value in scenario.overrides:
        if RATE_KEY in flatten({key: value}):
            raise scenario.error(f"{key}: sets {RATE_KEY}, which the search sets itself, from "
                                 f"search.rate's low to its high; set those instead (the "
                                 f"process and its cv may be set alone)", by_override=True)
    if scenario.base.workload.max_concurrency is not None:  # the file's, or an override's
        in_file = scenario.file_base is not None and \
            scenario.file_base.workload.max_concurrency is not None
        raise scenario.error(CAPPED, by_override=not in_file)
    alone = scenario.variants[0].name if len(scenario.variants) == 1 else None  # --variant
    flags = {key: values for key, values in scenario.sweep.items()
             if scenario.origins.get(key) == "--sweep"}
    gridded = scenarios.load(scenario.path, scenario.overrides, sweep=flags, grid=grid,
                             sources=scenario.sources, variant=alone)
    base_dir, high = Path(scenario.path).parent, settings.rate["high"]
    for spec in gridded.specs:
        workload = spec.config.workload
        if not workload.arrival.at_rate:
            overridden = not scenario.base.workload.arrival.at_rate and any(
                overlap(key, "workload.arrival.process") for key, _ in scenario.overrides)
            raise gridded.error(f"workload.arrival.process: the search varies {RATE_KEY}, so "
                                f"arrivals must come at a rate ({', '.join(RATE_PROCESSES)}), "
                                f"got {workload.arrival.process!r}",
                                None if overridden else spec, by_override=overridden)
        if workload.max_concurrency is not None:  # a variant's or a grid point's
            raise gridded.error(CAPPED, spec)
        # the probe at the bracket's top counts only what arrives after the warm-up
        at_high = replace(workload, arrival=workload.arrival.at(high))
        problem = warmup_problem(replace(spec.config, workload=at_high), base_dir)
        if problem:
            raise gridded.error(f"search.rate.high: at {high:g} requests/s {problem} "
                                f"(workload.warmup_s); lower the bracket's top or the warm-up, "
                                f"or send more requests", spec)
    check_scenario(gridded)
    return gridded


def search(scenario, parallel: Parallel = Parallel(), done=None) -> SearchResult:
    """Search every run of `scenario` (from `search_scenario`); `done(index, probes)` as each
    point's bisection ends (in the order they end)."""
    settings = scenario.base.search
    base_dir = Path(scenario.path).parent
    specs = scenario.runs()
    jobs = [PointJob(spec.config, base_dir, settings.target, settings.rate["low"],
                     settings.rate["high"], settings.tolerance, spec.label) for spec in specs]
    ended = None if done is None else lambda index, found: done(index, found[0])
    found = run_jobs(search_point, jobs, parallel, ended)
    return SearchResult(scenario, settings, tuple(
        PointResult(resolved_spec(spec), probes, said)
        for spec, (probes, said) in zip(specs, found)))
