"""From a parsed scenario table to the resolved run config: every key checked, every default
filled, every relative path made absolute. The result is a typed `RunConfig` (`config.py`;
docs/scenarios/format.md gives its keys)."""

from __future__ import annotations

import copy
from pathlib import Path

from . import checks, workload_checks
from .config import RunConfig
from .defaults import (CLUSTER_DEFAULTS, DEFAULTS, DISAGGREGATION_DEFAULTS, HARDWARE_DEFAULTS,
                       SEARCH_DEFAULTS, SESSIONS_DEFAULTS, SHAREGPT_DEFAULTS, SHIPPED_TRACES,
                       TRACE_DEFAULTS, UNTIMED_TRACE_FORMATS)
from .errors import FieldError
from .overrides import apply, flatten
from .schema import SCENARIO, check_table, key_elsewhere

SECTIONS = ("model", "engine", "scheduler", "cost", "slo")


def resolve(raw: dict, path: Path) -> RunConfig:
    """Validate `raw` (a scenario without its variants and sweep) and return the full config.
    Raises FieldError naming the first bad key."""
    check_table(raw, SCENARIO, elsewhere=key_elsewhere)
    config = {
        "name": raw.get("name", path.stem),
        "description": raw.get("description", DEFAULTS["description"]),
        "seed": raw.get("seed", DEFAULTS["seed"]),
        "mode": raw.get("mode", DEFAULTS["mode"]),
    }
    for section in SECTIONS:
        config[section] = copy.deepcopy(DEFAULTS[section]) | copy.deepcopy(raw.get(section, {}))
    config["slo"] = {key: None if limit is False else limit  # false: no SLO on it
                     for key, limit in config["slo"].items()}
    if config["cost"]["model"] == "hardware":  # a real model on a real GPU: no engine defaults
        config["model"] = copy.deepcopy(raw.get("model", {}))
        if "num_kv_blocks" not in raw.get("engine", {}):
            config["engine"]["num_kv_blocks"] = "auto"
        config["hardware"] = HARDWARE_DEFAULTS | copy.deepcopy(raw.get("hardware", {}))
    elif "hardware" in raw:  # kept for checks.py to refuse, never silently dropped
        config["hardware"] = copy.deepcopy(raw["hardware"])
    config["workload"] = _workload(copy.deepcopy(raw["workload"]))
    if "search" in raw:  # read by `servesim search` only (sim/search/)
        config["search"] = _search(copy.deepcopy(raw["search"]))
    if "cluster" in raw:  # replicas behind a router (sim/cluster/)
        config["cluster"] = _cluster(raw, path)
    checks.check_config(config, path)
    return RunConfig.from_dict(config)


def _workload(raw: dict) -> dict:
    workload_checks.check_workload_parts(raw)
    trace = raw.get("trace")
    return {
        "num_requests": raw.get("num_requests"),
        "max_seconds": raw.get("max_seconds"),  # None: every request arrives
        "max_concurrency": raw.get("max_concurrency"),  # None: no cap on requests in flight
        "warmup_s": raw.get("warmup_s", 0.0),
        "arrival": raw.get("arrival", {"process": "trace"}),
        "prompt_tokens": raw.get("prompt_tokens"),
        "output_tokens": raw.get("output_tokens"),
        "priority": raw.get("priority"),
        "trace": None if trace is None else _trace(trace),
        "sessions": _sessions(raw.get("sessions")),
    }


def _search(search: dict) -> dict:
    """The search's defaults filled in, its grid as {dotted key: values} (a grid written with
    unquoted dotted keys is nested tables in TOML)."""
    if "grid" in search:
        search["grid"] = flatten(search["grid"])
    return SEARCH_DEFAULTS | search


def _cluster(raw: dict, path: Path) -> dict:
    """The cluster's defaults filled in; each pool's settings checked by resolving the
    scenario with them (a problem is placed at the pool's `set`)."""
    cluster = CLUSTER_DEFAULTS | copy.deepcopy(raw["cluster"])
    checks.check_disaggregation_keys(cluster)
    if "prefill_replicas" in cluster:
        cluster = DISAGGREGATION_DEFAULTS | cluster
    single = {key: value for key, value in raw.items() if key != "cluster"}
    for i, pool in enumerate(cluster.get("pools", ())):
        pool["set"] = flatten(pool.get("set", {}))  # unquoted dotted keys are nested tables
        checks.check_pool_keys(pool["set"], f"cluster.pools[{i}].set")
        pool_raw = single
        for key, value in pool["set"].items():
            pool_raw = apply(pool_raw, key, value)
        try:
            resolve(pool_raw, path)
        except FieldError as exc:
            raise FieldError(f"cluster.pools[{i}].set", str(exc)) from None
    return cluster


def _sessions(sessions: dict | None) -> dict | None:
    return None if sessions is None else SESSIONS_DEFAULTS | sessions


def _trace(trace: dict) -> dict:
    """Every key of a trace table: a shipped trace's format is its own; a ShareGPT file's
    tokenizer and shuffle have defaults too."""
    if "name" in trace:
        trace["format"] = SHIPPED_TRACES[trace["name"]][1]
    untimed = trace.get("format", TRACE_DEFAULTS["format"]) in UNTIMED_TRACE_FORMATS
    return TRACE_DEFAULTS | (SHAREGPT_DEFAULTS if untimed else {}) | trace
