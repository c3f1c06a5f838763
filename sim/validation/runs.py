"""Which runs of a scenario `servesim validate` can compare, each with the profile it uses.

`validatable_runs` refuses, before anything is profiled or served, every run that cannot be
compared (`check_validatable`: a live cost model; served in-process, the hardware model, a
cluster, conversations and a closed loop with think time; a calibration without a profiled
reference step) and gives each run whose cost model is a profile this machine's
(`machine.py`: `--profile auto`, profiled first where the cache has none, or a named profile
measured here).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from scenarios import ScenarioError
from scenarios.arrival import ClosedLoop
from scenarios.config import as_table

from ..checks import check_scenario
from ..costs import cost_model as build_cost_model
from ..costs.calibrate import reference_of
from .machine import check_profile, profile_for

VALIDATED_COST_MODELS = ("profile", "linear")


def validatable_runs(scenario, calibrate: bool, profile: str, progress: bool,
                     in_process: bool = True) -> list:
    """The scenario's runs, each with this machine's profile where it uses one; everything
    that cannot be compared is refused first, as one line (`in_process`: served here, not
    benched at a server's URL)."""
    specs = scenario.runs()
    if profile != "auto" and all(spec.config.cost.model != "profile" for spec in specs):
        raise ScenarioError(f"{scenario.path}: --profile {profile}: no run of the scenario "
                            f"costs its steps with a profile (cost.model is "
                            f"{specs[0].config.cost.model!r}); drop --profile, or set "
                            f"cost.model = 'profile'")
    for i, spec in enumerate(specs):
        check_validatable(scenario, spec, calibrate=False, in_process=in_process)
        if calibrate:  # before any profile is made (the reference step is checked below)
            check_calibratable(scenario, spec)
        if spec.config.cost.model == "profile" and profile != "auto":
            where = f"{scenario.path}: " + (f"run {spec.label!r}: " if spec.variant else "")
            specs[i] = _with_profile(spec, check_profile(profile, as_table(spec.config.model),
                                                         where))
    if profile == "auto":
        for spec in specs:  # before anything is profiled or served
            if spec.config.cost.model == "profile":
                check_profilable(scenario, spec)
        for i, spec in enumerate(specs):  # this machine's profile (profiled first, the first time)
            if spec.config.cost.model == "profile":
                specs[i] = _with_profile(spec, profile_for(as_table(spec.config.model),
                                                           progress))
    check_scenario(scenario, specs)
    for spec in specs:
        check_validatable(scenario, spec, calibrate, in_process)
    return specs


def check_profilable(scenario, spec) -> None:
    """A one-line ScenarioError where `--profile auto` would have to profile a model shorter
    than the profiler's longest request (`servesim profile` refuses it too); a profile of this
    machine cached already (by `servesim profile --method grid`, say) is used as it is."""
    from ..profiling import cache
    from ..profiling.fingerprint import fingerprint, key
    from ..profiling.workloads import longest_request

    model = as_table(spec.config.model)
    if cache.profile_file(key(fingerprint(model))).is_file():
        return
    if spec.config.model.max_seq_len < longest_request():
        where = f"{scenario.path}: " + (f"run {spec.label!r}: " if spec.variant else "")
        raise ScenarioError(f"{where}model.max_seq_len: --profile auto profiles this machine "
                            f"with requests of up to {longest_request():,} tokens, so the "
                            f"model's max_seq_len must be at least that, got "
                            f"{spec.config.model.max_seq_len}; give --profile a profile of this "
                            f"model, or use cost.model = 'linear'")


def _with_profile(spec, profile: Path):
    """A run whose cost model reads `profile`."""
    config = spec.config
    return replace(spec, config=replace(config, cost=replace(config.cost, profile=str(profile))))


def check_validatable(scenario, spec, calibrate: bool = False, in_process: bool = True) -> None:
    """Refuse what cannot be compared, before anything runs: a live cost model (nothing to
    validate) or, served in-process, the hardware model (a GPU's, not this machine's; against
    a server's URL it is what is checked), conversations and a closed loop with think time
    (serving sends requests at their arrival times or as slots free), a cluster (one engine is
    served) and a calibration without a profiled reference step. A cluster is refused only
    `in_process` (a server at a URL may be one)."""
    where = f"{scenario.path}: " + (f"run {spec.label!r}: " if spec.variant else "")
    model = spec.config.cost.model
    allowed = VALIDATED_COST_MODELS + (() if in_process else ("hardware",))
    if model not in allowed:
        also = " (the hardware model is validated against a GPU server: --against URL)" \
            if in_process else " (the hardware model too, against a server's URL)"
        raise ScenarioError(f"{where}cost.model: validate compares a cost model with serving, "
                            f"so it must be one of {', '.join(VALIDATED_COST_MODELS)}{also}, "
                            f"got {model!r}")
    if spec.config.workload.sessions is not None:
        raise ScenarioError(f"{where}workload.sessions: validate serves requests at arrival "
                            f"times given up front; a conversation's turns (each sent when the "
                            f"last one ends) are not served (validate a scenario without "
                            f"sessions)")
    if in_process and spec.config.cluster is not None:
        raise ScenarioError(f"{where}cluster: validate serves one NumPy engine, so a cluster's "
                            f"replicas cannot be compared with it (validate one server: leave "
                            f"[cluster] out)")
    arrival = spec.config.workload.arrival
    if isinstance(arrival, ClosedLoop) and arrival.think_time_s:
        raise ScenarioError(f"{where}workload.arrival.think_time_s: validate serves requests "
                            f"at their arrival times or as slots free; a closed loop with "
                            f"think time is not served (set it to 0, or use "
                            f"workload.max_concurrency)")
    if calibrate:
        check_calibratable(scenario, spec)
        try:
            reference_of(build_cost_model(spec.config.cost, spec.config.model))
        except ValueError as exc:
            raise ScenarioError(f"{where}cost: {exc}") from None


def check_calibratable(scenario, spec) -> None:
    """`--calibrate` scales a profile's costs: a run costed otherwise is refused."""
    if spec.config.cost.model != "profile":
        where = f"{scenario.path}: " + (f"run {spec.label!r}: " if spec.variant else "")
        raise ScenarioError(f"{where}cost.model: --calibrate scales a profile's step costs by "
                            f"the machine's speed, and this run's cost model is "
                            f"{spec.config.cost.model!r}; drop --calibrate, or set "
                            f"cost.model = 'profile'")
