"""The hardware cost model: a real model on a real GPU (`cost.model = "hardware"`).

A roofline per operator (FLOPs and bytes from the step's exact shape, `operators.py`) with
efficiency curves fitted to published GPU measurements (`calibration.py`, `timing.py`), tensor-
parallel all-reduces, and the KV capacity the GPU's memory leaves (`memory.py`), for the models
and GPUs of the catalogs (`catalog.py`, `data/`). docs/sim/hardware.md has the formulas, the
sources and the measured error.

`layer_op_times(model, gpu, tp, num_tokens, dtype="fp16", ep=1, kernels=None,
framework="vllm")` gives one layer's operator times; `kernels.py` reads the silicon-measured
kernel tables of the optional extra servesim[gpu] and `measured.py` maps the operators onto
them.
"""

from __future__ import annotations

import numpy as np

from scenarios.defaults import ACTIVATION_SCHEMES, KERNEL_SOURCES

from .architecture import (DTYPE_BYTES, Architecture, compute_dtype, engine_architecture,
                           expert_bytes)
from .catalog import Gpu, gpu_spec, gpus, model_architecture, models
from .cost import HardwareCost, operator_times
from .kernels import KernelTables, TablesMiss
from .measured import MeasuredOps
from .memory import ACT_BYTES
from .setup import HardwareSetup, hardware_setup, kv_cache_dtype

__all__ = ["Architecture", "Gpu", "HardwareCost", "HardwareSetup", "engine_architecture",
           "gpu_spec", "gpus", "hardware_setup", "layer_op_times", "model_architecture",
           "models"]


def layer_op_times(model, gpu, tp: int, num_tokens, dtype: str = "fp16", ep: int = 1,
                   kernels=None, framework: str = "vllm",
                   activation_scheme: str = "static") -> dict:
    """One transformer layer's operator times in seconds on one of `tp` GPUs, for a batch of
    `num_tokens` tokens (a number or an array), keyed by the operator names of the published
    measurements (`attn_pre_proj`, `attn_post_proj`, `mlp_up_proj`, `mlp_act`, `mlp_down_proj`,
    `input_layernorm`, `post_attention_layernorm`, `add`, and `attn_rope`) and, for a model with
    experts or latent attention, its own (`moe_router`, `moe_up_proj`, `moe_act`,
    `moe_down_proj`, `shared_*`, `mla_*`; docs/sim/hardware.md); a model with experts and dense
    layers has both a dense layer's `mlp_*` and an expert layer's `moe_*`. `model`: a catalog
    id or a dict of architecture keys (`n_layers, d_model, n_heads, n_kv_heads, d_ff,
    gated_mlp, vocab_size, max_seq_len`, ...; or `config`, a config.json); `gpu`: a catalog id
    (or a GPU table); `ep`: expert parallelism, 1 or `tp`. `kernels`: "measured" (the operators
    of `framework`'s newest measured tables for the GPU, the roofline where they do not reach;
    a model with experts then has the fused kernel's `moe_experts` in place of `moe_up_proj`,
    `moe_act` and `moe_down_proj`), "roofline", or None: measured where the GPU has tables.
    `activation_scheme`: an fp8 checkpoint's activation scales, "static" or "dynamic"."""
    arch = model_architecture({"name": model} if isinstance(model, str) else dict(model))
    device = gpu_spec(gpu)
    arch.check_tp(tp)
    arch.check_ep(ep, tp)
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    if kernels not in (None, *KERNEL_SOURCES):
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_SOURCES)} or None, got "
                         f"{kernels!r}")
    tokens = np.asarray(num_tokens, dtype=np.float64)
    times = operator_times(arch, tp, ep, tokens, DTYPE_BYTES[dtype], ACT_BYTES,
                           device.peak_flops(compute_dtype(dtype)), device.bandwidth,
                           device.efficiency(), expert_bytes(dtype))
    if activation_scheme not in ACTIVATION_SCHEMES:
        raise ValueError(f"activation_scheme must be one of {', '.join(ACTIVATION_SCHEMES)}, "
                         f"got {activation_scheme!r}")
    measured = _measured_ops(arch, device, tp, ep, dtype, kernels, framework, activation_scheme)
    if measured is not None:
        times, _ = measured.layer_times(times, np.atleast_1d(tokens))
        times = {op: t.reshape(tokens.shape) for op, t in times.items()}
    if np.ndim(num_tokens) == 0:
        return {op: float(t) for op, t in times.items()}
    return times


def _measured_ops(arch, device, tp: int, ep: int, dtype: str, kernels, framework: str,
                  activations: str):
    """The measured operators `kernels` asks for (None: the roofline)."""
    if kernels == "roofline":
        return None
    try:
        tables = KernelTables(device.id, framework)
    except TablesMiss:
        if kernels == "measured":
            raise
        return None
    return MeasuredOps(arch, tp, dtype, kv_cache_dtype(dtype), tables, ep, activations)
