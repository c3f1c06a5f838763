"""A scenario file written for a test, and the one-line error loading one gives."""

from __future__ import annotations

from pathlib import Path

import pytest

import scenarios
from scenarios import ScenarioError


WORKLOAD = """
[workload]
num_requests = 20
arrival = { process = "poisson", rate = 4.0 }
prompt_tokens = { dist = "lognormal", median = 64, sigma = 0.5, max = 512 }
output_tokens = { dist = "uniform", low = 4, high = 32 }
"""
LINEAR = '[cost]\nmodel = "linear"\n'


def write(tmp_path: Path, text: str, name: str = "case.toml") -> Path:
    """`text` as the file `name` in `tmp_path`."""
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(path, overrides=()) -> str:
    """The error loading `path` with `overrides` gives: one line."""
    with pytest.raises(ScenarioError) as info:
        scenarios.load(path, overrides)
    message = str(info.value)
    assert "\n" not in message
    return message
