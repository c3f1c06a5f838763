"""The hardware cost model: a real model on a real GPU (`cost.model = "hardware"`).

A roofline per operator (FLOPs and bytes from the step's exact shape, `operators.py`) with
efficiency curves fitted to published GPU measurements (`calibration.py`, `timing.py`), tensor-
parallel all-reduces, and the KV capacity the GPU's memory leaves (`memory.py`), for the models
and GPUs of the catalogs (`catalog.py`, `data/`). docs/sim/hardware.md has the formulas, the
sources and the measured error.

`layer_op_times(model, gpu, tp, num_tokens, dtype="fp16", ep=1, kernels=None, framework="vllm")`
gives one layer's operator times (`op_times.py`); `kernels.py` reads the silicon-measured kernel
tables of the optional extra servesim[gpu] and `measured.py` maps the operators onto them.
"""

from __future__ import annotations

from .architecture import Architecture, engine_architecture
from .catalog import Gpu, gpu_spec, gpus, model_architecture, models
from .cost import HardwareCost
from .op_times import layer_op_times
from .setup import HardwareSetup, hardware_setup

__all__ = ["Architecture", "Gpu", "HardwareCost", "HardwareSetup", "engine_architecture",
           "gpu_spec", "gpus", "hardware_setup", "layer_op_times", "model_architecture",
           "models"]
