"""servesim's simulator: a SimPy loop around the engine's own scheduler, with workloads, trace
replay, step-cost models fitted to the real engine, and the profiler that fits them.

    import sim
    recorder = sim.run_config(config)          # one resolved config, in its mode
    runs = sim.simulate("static-vs-continuous")  # [(RunSpec, RunRecorder), ...]
"""

from .costs import CostModelExecutor, FittedCost, LinearCost, load_profile
from .runner import run_config, simulate
from .workloads import Workload, build_workload, seeded_streams

__all__ = ["CostModelExecutor", "FittedCost", "LinearCost", "Workload", "build_workload",
           "load_profile", "run_config", "seeded_streams", "simulate"]
