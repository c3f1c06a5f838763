"""Which profile a command may compare the real engine with: one measured on this machine.

A profile's step costs belong to the machine and setting it was measured under (its
`fingerprint`). `servesim validate` compares a simulation with serving on this machine, so it
uses a profile of this machine: with `--profile auto` (the default), the one in the profile
cache for this machine's fingerprint, profiling first when there is none (`profile_for`);
with a shipped name or a path, only one measured here (`check_profile`, else one line that
says what to run). `servesim run` only predicts, and any profile will do, but a profile from
another machine predicts that machine: it says so, once per machine and profile
(`note_foreign_profiles`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scenarios import ScenarioError
from scenarios.config import as_table

from ..costs import load_profile, profile_path
from ..profiling import cache
from ..profiling.fingerprint import differences, fingerprint, key


def profile_for(model: dict, progress: bool = False) -> Path:
    """This machine's cached profile of `model`, profiled (and cached) when there is none."""
    here = fingerprint(model)
    path = cache.profile_file(key(here))
    if not path.is_file():
        from ..profiling.profiler import profile_engine

        if progress:
            print(f"profiling this machine for the model (d_model {model['d_model']}, "
                  f"{model['n_layers']} layers), about 2 minutes; cached in {path.parent}/ for "
                  f"later runs", file=sys.stderr)
        profile_engine(model, progress=progress)
    elif progress and not cache.holds_full(key(here)):
        print(f"using this machine's quick profile ({path}); `servesim profile` (about 2 "
              f"minutes) fits a closer one", file=sys.stderr)
    return path


def check_profile(profile, model: dict, where: str) -> Path:
    """The path of `profile` (a shipped name or a path) when it was measured on this machine
    for this model; else a one-line ScenarioError saying how it differs and what to run."""
    try:
        path = profile_path(profile)
        load_profile(path)  # a file that is no profile says so first
    except FileNotFoundError as exc:  # (its words name cost.profile, which --profile sets)
        raise ScenarioError(f"{where}--profile {profile}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise ScenarioError(f"{where}cost.profile: {exc}") from None
    measured = _fingerprint_of(path)
    if measured is None:
        raise ScenarioError(f"{where}cost.profile: {path} records no machine fingerprint (it "
                            f"was written before profiles had one); use --profile auto, or "
                            f"profile this machine with `servesim profile`")
    diff = differences(measured, fingerprint(model))
    if diff:
        raise ScenarioError(f"{where}cost.profile: {path} was measured on another machine or "
                            f"setting ({'; '.join(diff)}); use --profile auto to profile this "
                            f"one, or `servesim profile`")
    return path


def note_foreign_profiles(scenario) -> list[str]:
    """One note for each profile of a scenario's runs measured on another machine, the first
    time it is used on this one."""
    notes, seen = [], set()
    for spec in scenario.runs():
        cost, model = spec.config.cost, as_table(spec.config.model)
        if cost.model != "profile" or cost.profile in seen:
            continue
        seen.add(cost.profile)
        path = profile_path(cost.profile)
        measured = _fingerprint_of(path)
        here = fingerprint(model)
        diff = ["it records no fingerprint"] if measured is None else \
            differences(measured, here, ignore=("blas_threads",))  # a simulation runs no BLAS
        if diff and cache.warned_once(f"{key(measured or {})}-{key(here)}"):
            notes.append(f"note: {path.name}'s step costs were measured on another machine "
                         f"({'; '.join(diff)}): they predict that machine; for this one, "
                         f"profile it with `servesim profile` (said once)")
    return notes


def _fingerprint_of(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    print_ = data.get("fingerprint") if isinstance(data, dict) else None
    return print_ if isinstance(print_, dict) else None
