"""Configs written as nested dicts, resolved as a scenario file is: every default filled and
every key checked by `scenarios.resolve` (a key whose value is None is left out, as a file
that does not give it); the default scenario's model, as its figures (`DEFAULT_MODEL`), and
a workload of one request (`ONE_REQUEST`)."""

from __future__ import annotations

from pathlib import Path

from scenarios import RunConfig
from scenarios.resolve import resolve

# the model a scenario gets when it names none (scenarios.DEFAULTS), which the shipped
# profile was measured on
DEFAULT_MODEL = {"vocab_size": 512, "d_model": 512, "n_layers": 4, "n_heads": 8, "d_ff": 2048,
                 "max_seq_len": 4096}
# a workload of one request of 4 prompt tokens and 2 outputs, sent at once
ONE_REQUEST = {"num_requests": 1, "arrival": {"process": "burst"},
               "prompt_tokens": {"dist": "fixed", "value": 4},
               "output_tokens": {"dist": "fixed", "value": 2}}


def resolved(table: dict, path: str | Path = "test.toml") -> RunConfig:
    """The `RunConfig` of a scenario given as a dict."""
    return resolve(_given(table), Path(path))


def _given(value):
    if isinstance(value, dict):
        return {key: _given(item) for key, item in value.items() if item is not None}
    return value
