"""BLAS threads: set before NumPy loads, from the profile a command will compare against.

A step's time depends severalfold on how many threads BLAS runs matrix products with (on a
2-core machine, two threads make small steps slower and far noisier than one), and BLAS reads
its thread count once, when NumPy loads. So the profiler measures with a known count (one by
default) and records it, and `servesim validate` serves with the count its profile was measured
with: `apply` sets the environment before anything imports NumPy. A count the user set
themselves is kept (and the profile must then have been measured with it).

This module imports nothing heavy: the command line calls it first.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
DEFAULT_THREADS = 1  # what profiles are measured with unless the user sets a count
PROFILE_DIR = Path(__file__).resolve().parent.parent / "costs" / "profiles"


def current() -> str | None:
    """The BLAS thread count set in the environment (the first of THREAD_ENV set), or None
    (BLAS then uses every core)."""
    name = set_by()
    return os.environ[name] if name else None


def set_by() -> str | None:
    """The name of the variable `current` reads, or None."""
    return next((name for name in THREAD_ENV if os.environ.get(name)), None)


def apply(count) -> bool:
    """Set every THREAD_ENV variable to `count` unless the user set one; True when set here.
    Must run before NumPy is imported (raises RuntimeError after)."""
    if current() is not None or count is None:
        return False
    if "numpy" in sys.modules:
        raise RuntimeError("BLAS threads must be set before NumPy is imported")
    for name in THREAD_ENV:
        os.environ[name] = str(count)
    return True


def recorded(profile) -> str | None:
    """The thread count a profile file (a shipped name or a path) was measured with, read
    without NumPy; None when the file records none or cannot be read (the caller reports
    that once it loads the profile)."""
    text = str(profile)
    path = PROFILE_DIR / f"{text}.json" if "/" not in text and not text.endswith(".json") \
        else Path(text)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fingerprint = data.get("fingerprint") if isinstance(data, dict) else None
    threads = fingerprint.get("blas_threads") if isinstance(fingerprint, dict) else None
    return None if threads in (None, "default") else str(threads)
