"""Profiling: measuring the real NumPy engine on this machine to fit a step-cost profile
(`sim.costs`).

- `profiler.py`: `profile_engine(model, out_path)`, the whole measurement and the JSON it writes;
- `workloads.py`, `serving.py`, `served.py`: synthetic workloads served in real time, and the
  cost model fitted to their steps (the default method);
- `isolated.py`, `grid.py`, `fit.py`, `loop_overhead.py`, `wake.py`: the isolated grid, kept for
  comparison;
- `reference.py`: the reference step, timing in bursts, jitter and calibration measurements;
- `fingerprint.py`, `cache.py`, `threads.py`: what a profile belongs to, where profiles of this
  machine are kept, and the BLAS thread count set before NumPy loads.

The package imports its modules on use, so `threads` can run before NumPy is imported.
"""


def __getattr__(name):
    if name == "profile_engine":
        from .profiler import profile_engine

        return profile_engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["profile_engine"]
