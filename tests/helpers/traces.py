"""Trace files for the tests: one written to a temporary folder, and the one-line error that
reading a bad one must give."""

from __future__ import annotations

import pytest

from sim.workloads.traces import load_trace


def write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def error(path, fmt: str, **options) -> str:
    with pytest.raises(ValueError) as info:
        load_trace(path, fmt, **options)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    return message
