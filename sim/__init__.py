"""servesim's simulator: a SimPy loop around the engine's own scheduler, with workloads, trace
replay, step-cost models fitted to the real engine, and the profiler that fits them.

    import sim
    recorder = sim.run_config(config)          # one resolved config, in its mode
    runs = sim.simulate("static-vs-continuous")  # [(RunSpec, RunRecorder), ...]
    sim.layer_op_times("meta-llama/Llama-3.1-8B", "h100-sxm", tp=1, num_tokens=512)
"""

import importlib

_HOMES = {"CostModel": "costs", "CostModelExecutor": "costs", "FittedCost": "costs",
          "LinearCost": "costs", "load_profile": "costs", "run_config": "runner",
          "simulate": "runner", "Workload": "workloads", "build_workload": "workloads",
          "seeded_streams": "workloads", "HardwareCost": "costs.hardware",
          "layer_op_times": "costs.hardware"}


def __getattr__(name):
    """The public names, imported on first use: `servesim` sets BLAS threads before NumPy
    loads, so importing the package (for `sim.cli`) must not load it."""
    if name in _HOMES:
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CostModel", "CostModelExecutor", "FittedCost", "HardwareCost", "LinearCost",
           "Workload", "build_workload", "layer_op_times", "load_profile", "run_config",
           "seeded_streams", "simulate"]
