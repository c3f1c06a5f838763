"""Configs written as nested dicts, resolved as a scenario file is: every default filled and
every key checked by `scenarios.resolve` (a key whose value is None is left out, as a file
that does not give it)."""

from __future__ import annotations

from pathlib import Path

from scenarios import RunConfig
from scenarios.resolve import resolve


def resolved(table: dict, path: str | Path = "test.toml") -> RunConfig:
    """The `RunConfig` of a scenario given as a dict."""
    return resolve(_given(table), Path(path))


def _given(value):
    if isinstance(value, dict):
        return {key: _given(item) for key, item in value.items() if item is not None}
    return value
