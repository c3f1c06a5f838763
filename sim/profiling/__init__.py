"""Profiling: measuring the real NumPy engine to fit a step-cost profile (`sim.costs`).

- `profiler.py`: `profile_engine(model, out_path)`, the whole measurement and the JSON it writes;
- `grid.py`: the step shapes measured and how a plan of a given shape is built;
- `fit.py`: the fitted model's design matrix and fit;
- `loop_overhead.py`: the serving loop's own cost per step, measured through the real server;
- `wake.py`: the cost of waking from idle and of the steps after a prefill;
- `reference.py`: the reference step, timing in bursts, jitter and calibration measurements.
"""

from .profiler import profile_engine

__all__ = ["profile_engine"]
