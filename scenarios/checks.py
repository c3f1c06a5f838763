"""Rules that tie several keys of a scenario together, and the paths a scenario names.

The engine's config dataclasses are built from the resolved config here, so their own rules
(d_model divisible by n_heads, a token budget that holds max_num_seqs decodes) apply at load
time, in their own words. Each check raises `FieldError(dotted_key, problem)`; the loader turns
it into a one-line `ScenarioError` with the file's name. Relative paths (a trace, a profile
file) are looked up in the current directory, then beside the scenario file, then at the
repository root, and stored absolute when found. Whether a file exists and loads is checked
where the simulator builds what it needs from it (`sim.runner.check_scenario`), with the same
one-line errors: scenarios are data and schema, and never import the simulator.
"""

from __future__ import annotations

from pathlib import Path

from .defaults import MAX_TIME_S
from .errors import FieldError
from engine.model import ModelConfig
from engine.scheduler_config import SchedulerConfig

REPO_ROOT = Path(__file__).resolve().parent.parent


def check_workload_parts(workload: dict) -> None:
    """A trace replaces arrivals and lengths; without one, all of them are required."""
    if "trace" in workload:
        for name in ("num_requests", "prompt_tokens", "output_tokens"):
            if name in workload:
                raise FieldError(f"workload.{name}",
                                 "not allowed with workload.trace (the trace gives the requests; "
                                 "limit them with workload.trace.max_requests)")
        process = workload.get("arrival", {}).get("process", "trace")
        if process != "trace":
            raise FieldError("workload.arrival.process",
                             f"must be 'trace' (or absent) with workload.trace, got {process!r}")
        return
    if workload.get("arrival", {}).get("process") == "trace":
        raise FieldError("workload.trace", "required when workload.arrival.process = 'trace'")
    for name, what in (("num_requests", "a positive integer"), ("arrival", "a table"),
                       ("prompt_tokens", "a table"), ("output_tokens", "a table")):
        if name not in workload:
            raise FieldError(f"workload.{name}", f"required ({what}) unless workload.trace is given")


def check_config(config: dict, path: Path) -> None:
    """Cross-key rules of a resolved config; makes its relative file paths absolute."""
    _check_model(config["model"])
    _check_engine(config)
    workload = config["workload"]
    for name in ("prompt_tokens", "output_tokens"):
        if workload[name] is not None:
            check_length_range(workload[name], f"workload.{name}")
    if workload["trace"] is not None:
        trace = workload["trace"]
        trace["path"] = find_file(trace["path"], path)
    cost = config["cost"]
    if cost["model"] == "profile" and _is_path(cost["profile"]):
        cost["profile"] = find_file(cost["profile"], path)
    if config["mode"] == "simulate" and cost["model"] == "live":
        raise FieldError("cost.model", "'live' runs the real engine: use mode = 'cosimulate' "
                                       "(or cost.model = 'profile' or 'linear' to simulate)")
    check_horizon(config)


def check_horizon(config: dict) -> None:
    """Times the run would reach that a float can no longer tell apart to the microsecond: the
    arrivals' span (num_requests / rate; a closed loop's think times), a batch timeout."""
    workload = config["workload"]
    arrival, n = workload["arrival"], workload["num_requests"]
    if arrival["process"] in ("poisson", "gamma", "constant"):
        span, key = n / arrival["rate"], "workload.arrival.rate"
        what = f"{n:,} requests at {arrival['rate']:g}/s would span"
    elif arrival["process"] == "closed_loop":
        span, key = n * arrival["think_time_s"] / arrival["concurrency"], \
            "workload.arrival.think_time_s"
        what = f"{n:,} requests after {arrival['think_time_s']:g} s of thinking would span"
    else:
        span, key, what = 0.0, "", ""  # a trace: its span is checked where it is read
    timeout = config["scheduler"]["batch_timeout_s"]
    for value, where, text in ((span, key, what),
                               (timeout, "scheduler.batch_timeout_s", "a batch timeout of")):
        if value > MAX_TIME_S:
            raise FieldError(where, f"{text} about {value:.3g} s of simulated time; times past "
                                    f"{MAX_TIME_S:.3g} s (136 years) lose sub-microsecond "
                                    f"precision")


def check_length_range(dist: dict, key: str) -> None:
    """A length distribution's bounds in order: uniform low <= high, lognormal min <= max."""
    low, high = {"uniform": ("low", "high"), "lognormal": ("min", "max")}.get(dist["dist"],
                                                                              (None, None))
    if low is not None and dist[low] > dist[high]:
        raise FieldError("", f"{key}.{low} ({dist[low]}) must be <= {key}.{high} ({dist[high]})")


def _check_model(model: dict) -> None:
    try:
        ModelConfig(**model)
    except ValueError as exc:  # the engine's own rules, in its own words
        raise FieldError("", str(exc)) from None


def _check_engine(config: dict) -> None:
    engine, scheduler = config["engine"], config["scheduler"]
    try:
        SchedulerConfig(max_num_seqs=engine["max_num_seqs"],
                        max_num_batched_tokens=engine["max_num_batched_tokens"],
                        max_seq_len=config["model"]["max_seq_len"], **scheduler)
    except ValueError as exc:
        raise FieldError("", str(exc)) from None


def find_file(name: str, scenario_path: Path) -> str:
    """A relative path as the absolute path of the first existing file among the current
    directory, the scenario's folder and the repository root; unchanged when none exists (the
    simulator then says where it looked)."""
    if Path(name).is_absolute():
        return name
    for base in (Path.cwd(), scenario_path.parent, REPO_ROOT):
        if (base / name).is_file():
            return str((base / name).resolve())
    return name


def _is_path(profile: str) -> bool:
    """A profile given as a file path, not as the name of a shipped one."""
    return "/" in profile or profile.endswith(".json")
