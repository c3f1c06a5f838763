"""A machine's fingerprint: what a profile's step costs belong to.

Step costs belong to one machine and one setting: its host, CPU model and cores, the BLAS
library NumPy uses and its thread count, the NumPy version, and the model's shape. A profile
records the fingerprint it was measured under (`fingerprint`); `differences` says, in words, how
another differs; `key` names it in the profile cache (`cache.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform

import numpy as np

from .threads import current

MODEL_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff")


def fingerprint(model: dict) -> dict:
    """This machine's fingerprint for a model (its ModelConfig fields)."""
    return {"host": platform.node(), "cpu": cpu_model(), "cores": _cores(),
            "blas": blas_library(), "blas_threads": current() or "default",
            "numpy": np.__version__, "model": {k: model[k] for k in MODEL_KEYS}}


def key(print_: dict) -> str:
    """A short stable name of a fingerprint (the profile cache's file name)."""
    text = json.dumps(print_, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def differences(measured: dict, here: dict, ignore=()) -> list[str]:
    """How the fingerprint a profile was measured under differs from this one, in words
    (leaving out the fields named in `ignore`)."""
    out = []
    for name in ("host", "cpu", "cores", "blas", "blas_threads", "numpy"):
        if name not in ignore and measured.get(name) != here.get(name):
            out.append(f"{name.replace('_', ' ')} {measured.get(name)!r} there, "
                       f"{here.get(name)!r} here")
    model = measured.get("model")
    model = model if isinstance(model, dict) else {}  # a damaged one: every key differs
    for name in MODEL_KEYS:
        a, b = model.get(name), here["model"].get(name)
        if a != b:
            out.append(f"model.{name} {a!r} there, {b!r} here")
    return out


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_library() -> str:
    """NumPy's BLAS, as "name version" (from its build configuration)."""
    try:
        deps = np.show_config(mode="dicts").get("Build Dependencies", {})
        blas = deps.get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '?')}"
    except (TypeError, ValueError, AttributeError):  # older NumPy: no dict mode
        return "unknown"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1
