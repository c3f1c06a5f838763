"""Rules that tie several keys of a scenario together, and the files a scenario names.

The engine's config dataclasses and the simulator's workload and cost-model constructors are
built from the resolved config here, so their own rules (d_model divisible by n_heads, low <=
high, a profile measured on this model...) apply at load time, in their own words. Each check
raises `FieldError(dotted_key, problem)`; the loader turns it into a one-line
`ScenarioError` with the file's name. Relative paths are looked up in the current directory,
then beside the scenario file, then at the repository root (where `../shared/traces/...`
points), and stored absolute.
"""

from __future__ import annotations

from pathlib import Path

from .errors import FieldError
from engine.model import ModelConfig
from engine.scheduler_config import SchedulerConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
PROFILE_DIR = REPO_ROOT / "sim" / "profiles"


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
    if workload["trace"] is not None:
        trace = workload["trace"]
        trace["path"] = str(find_file(trace["path"], path, "workload.trace.path"))
    cost = config["cost"]
    if cost["model"] == "profile":
        cost["profile"] = find_profile(cost["profile"], path)
    if config["mode"] == "simulate" and cost["model"] == "live":
        raise FieldError("cost.model", "'live' runs the real engine: use mode = 'cosimulate' "
                                       "(or cost.model = 'profile' or 'linear' to simulate)")
    _check_with_simulator(config)


def _check_with_simulator(config: dict) -> None:
    """Build the simulator's distributions, arrival process and cost model from the config, so
    what the simulator would refuse (a lognormal range that holds almost no mass, a profile
    measured on another model) is refused at load time, before any run starts."""
    from sim.arrivals import arrival_process  # sim reads scenarios: import on use, not at load
    from sim.cost_model import cost_model
    from sim.distributions import length_dist, priority_dist
    from sim.runner import speed_process

    workload = config["workload"]
    try:
        if workload["trace"] is None:
            arrival_process(workload["arrival"], "workload.arrival")
            for name in ("prompt_tokens", "output_tokens"):
                length_dist(workload[name], f"workload.{name}")
        if workload["priority"] is not None:
            priority_dist(workload["priority"], "workload.priority")
        if config["mode"] == "simulate":
            speed_process(config["cost"], cost_model(config["cost"], config["model"]), None)
    except (ValueError, FileNotFoundError) as exc:
        raise FieldError("", str(exc)) from None


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


def find_file(name: str, scenario_path: Path, key: str) -> Path:
    """An existing file: absolute, or relative to cwd, the scenario's directory or the repo."""
    candidates = [Path(name)] if Path(name).is_absolute() else [
        Path.cwd() / name, scenario_path.parent / name, REPO_ROOT / name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    where = "" if Path(name).is_absolute() else \
        " (looked in the current directory, beside the scenario and in the repository root)"
    raise FieldError(key, f"file not found: {name}{where}")


def find_profile(profile: str, scenario_path: Path) -> str:
    """A shipped profile name (sim/profiles/<name>.json) stays a name; a path becomes absolute."""
    shipped = PROFILE_DIR / f"{profile}.json"
    if "/" not in profile and not profile.endswith(".json"):
        if shipped.is_file():
            return profile
        names = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.json"))) or "none shipped"
        raise FieldError("cost.profile", f"no shipped profile {profile!r} (shipped: {names}; "
                                         "or give a path to a .json profile)")
    return str(find_file(profile, scenario_path, "cost.profile"))
