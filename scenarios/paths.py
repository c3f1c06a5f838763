"""The files a scenario names (a trace, a profile, a model's config.json): a relative path is
looked up in the current directory, then beside the scenario file, then at the repository
root, and stored absolute when found; a shipped trace's name becomes the absolute path of its
packaged file. Whether a file exists and loads is checked where the simulator reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from .defaults import SHIPPED_TRACES

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACE_DATA = REPO_ROOT / "sim" / "workloads" / "traces" / "data"  # package data, as installed


def shipped_trace(name: str) -> Path:
    """The packaged file of a shipped trace (`SHIPPED_TRACES`)."""
    return TRACE_DATA / SHIPPED_TRACES[name][0]


def find_file(name: str, scenario_path: Path, exists=Path.is_file) -> str:
    """A relative path as the absolute path of the first existing file (`exists`) among the
    current directory, the scenario's folder and the repository root (`~` is the home folder);
    unchanged when none exists (the simulator then says where it looked)."""
    name = os.path.expanduser(name)
    if Path(name).is_absolute():
        return name
    for base in (Path.cwd(), scenario_path.parent, REPO_ROOT):
        if exists(base / name):
            return str((base / name).resolve())
    return name


def model_config(name: str, scenario_path: Path) -> str:
    """`model.config` found as `find_file` finds a file: a config.json, or a model's folder
    holding one, as vLLM takes a model's folder."""
    found = Path(find_file(name, scenario_path, _config_or_folder))
    if not found.exists():  # an empty folder, say, which the reader then names
        found = Path(find_file(name, scenario_path, Path.exists))
    return str(found / "config.json") if (found / "config.json").is_file() else str(found)


def _config_or_folder(path: Path) -> bool:
    return path.is_file() or (path / "config.json").is_file()


def is_path(profile: str) -> bool:
    """A profile given as a file path, not as the name of a shipped one."""
    return "/" in profile or profile.endswith(".json")
