"""`layer_op_times`: one transformer layer's operator times on a GPU, by the measured kernel
tables where they reach and the roofline elsewhere, as a run costs them, for any model of the
catalog, a config.json or a table of architecture keys (docs/sim/hardware.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from scenarios.defaults import (ACTIVATION_SCHEMES, FRAMEWORKS, KERNEL_SOURCES, MAX_GPUS,
                               MOE_BACKENDS)

from ...notes import say_once
from .catalog import MODEL_KEYS, gpu_spec, model_architecture, models
from .dtypes import DTYPE_BYTES, activation_dtype, compute_dtype, expert_bytes
from .kernels import TablesMiss
from .measured import MeasuredOps
from .memory import ACT_BYTES
from .row_tables import operator_times
from .setup import check_dtypes, kernel_tables, kv_cache_dtype


def layer_op_times(model, gpu, tp: int, num_tokens, dtype: str = "fp16", ep: int = 1,
                   kernels=None, framework: str = "vllm",
                   activation_scheme: str = "static", moe_backend: str = "auto") -> dict:
    """One transformer layer's operator times in seconds on one of `tp` GPUs, for a batch of
    `num_tokens` tokens (a number or an array), keyed by the operator names of the published
    measurements (`attn_pre_proj`, `attn_post_proj`, `mlp_up_proj`, `mlp_act`, `mlp_down_proj`,
    `input_layernorm`, `post_attention_layernorm`, `add`, and `attn_rope`) and, for a model with
    experts, latent or linear attention, its own (`moe_router`, `moe_up_proj`, `moe_act`,
    `moe_down_proj`, `shared_*`, `mla_*`, `linear_*`; docs/sim/hardware.md); a model with
    experts and dense layers has both a dense layer's `mlp_*` and an expert layer's `moe_*`, one
    with linear attention both an attention layer's `attn_*` and a linear layer's `linear_*`
    (its convolution and delta rule, a step's, are not among them). `model`: a catalog id, the
    path of a Hugging Face config.json (or of a model's folder holding one), or a dict of
    architecture keys (`n_layers, d_model, n_heads, n_kv_heads, d_ff, gated_mlp, vocab_size,
    max_seq_len`, ...; or `config`, a config.json); `gpu`: a catalog id (or a GPU table); `ep`:
    expert parallelism, 1 or `tp`. `kernels`: "measured" (the operators of `framework`'s newest
    measured tables for the GPU, the roofline where they do not reach; a model with experts then
    has the fused kernel's `moe_experts` in place of `moe_up_proj`, `moe_act` and
    `moe_down_proj`), "roofline", or None: measured where the GPU has tables.
    `activation_scheme`: an fp8 checkpoint's scales, "static" or "dynamic" (per tensor) or
    "block" (block-scaled: DeepSeek's and Qwen3's own FP8 checkpoints); mxfp4 experts'
    activations, "static" (bf16) or "mxfp8" (quantized to MXFP8, on Blackwell). `moe_backend`:
    the fused MoE kernel, "auto" (the framework's default), "marlin" (mxfp4 experts) or "triton"
    (the Triton fused MoE kernel, from the newest tables that timed it). Every argument is
    checked (a ValueError saying what is allowed); where the tables do not reach (past 2x their
    range) the roofline answers, scaled to meet them where they end, as in a run; where the GPU
    has none under `kernels=None`, or they lack an operator, the roofline answers; a note says
    so once (`sim.notes`)."""
    arch, device = _checked(model, gpu, tp, ep, dtype, kernels, framework, activation_scheme,
                            moe_backend)
    tokens = _tokens(num_tokens)

    def roofline(rows):
        return operator_times(arch, tp, ep, rows, DTYPE_BYTES[dtype], ACT_BYTES,
                              device.peak_flops(compute_dtype(dtype)), device.bandwidth,
                              device.efficiency(), expert_bytes(dtype),
                              device.peak_flops(activation_dtype(dtype)))

    measured = _measured_ops(arch, device, tp, ep, dtype, kernels, framework, activation_scheme,
                             moe_backend)
    if measured is None:
        times = roofline(tokens)
    else:
        rows = tokens.ravel()
        times, beyond = measured.layer_times(roofline(rows), rows, keep_block=True)
        if beyond:  # costed with the row counts where the tables end, as a run's are
            edges = [edge for op in beyond for edge in measured.reach_edges(op)]
            grid = np.union1d(rows, edges)
            times, _ = measured.layer_times(roofline(grid), grid, keep_block=True)
            times = {op: t[np.searchsorted(grid, rows)] for op, t in times.items()}
        if measured.mla_block:
            what = "sparse attention is measured as a whole layer (its indexer, " \
                if measured.sparse_block else "latent attention is measured as a whole block ("
            say_once(f"note: layer_op_times: {arch.name}'s {what}projections, attention over "
                     f"the latent, output projection), which a run costs per step; its "
                     f"{', '.join(measured.block_ops)} here are the roofline's")
        times = {op: t.reshape(tokens.shape) for op, t in times.items()}
        if beyond:
            say_once(f"note: layer_op_times: num_tokens past the measured tables' reach (2x "
                     f"their range) for {', '.join(sorted(beyond))}; costed there by the "
                     f"roofline, scaled to meet the tables where they end")
    if np.ndim(num_tokens) == 0:
        return {op: float(t) for op, t in times.items()}
    return times


def _checked(model, gpu, tp, ep, dtype, kernels, framework, activation_scheme, moe_backend):
    """(the model's `Architecture`, the GPU) once every argument of `layer_op_times` is one it
    takes, else a ValueError saying what is allowed."""
    arch = model_architecture(_model_table(model))
    if not isinstance(gpu, (str, Mapping)):
        raise ValueError(f"gpu must be a catalog id or a table of GPU keys, got {gpu!r}")
    device = gpu_spec(gpu)
    for name, value in (("tp", tp), ("ep", ep)):
        if not _is_int(value) or not 1 <= value <= MAX_GPUS:
            raise ValueError(f"{name} must be an integer from 1 to {MAX_GPUS}, got {value!r}")
    arch.check_tp(tp)
    arch.check_ep(ep, tp)
    for name, value, allowed in (("dtype", dtype, tuple(DTYPE_BYTES)),
                                 ("kernels", kernels, (None, *KERNEL_SOURCES)),
                                 ("framework", framework, FRAMEWORKS),
                                 ("activation_scheme", activation_scheme, ACTIVATION_SCHEMES),
                                 ("moe_backend", moe_backend, MOE_BACKENDS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got "
                             f"{value!r}")
    check_dtypes(arch, device, dtype, activation_scheme=activation_scheme,
                 moe_backend=moe_backend)
    return arch, device


def _model_table(model) -> dict:
    """`model` (a catalog id, the path of a config.json or of a model's folder holding one,
    or a dict of architecture keys or `config`) as a `[model]` table; an unknown key is
    refused, naming the allowed ones. A catalog id is read as one before any path."""
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        known = any(name.lower() == k.lower() for k in models())
        path = Path(name).expanduser()
        if not known and (path.is_file() or (path / "config.json").is_file()):
            return {"config": name}
        return {"name": name}
    if not isinstance(model, Mapping):
        raise ValueError(f"model must be a catalog id or a dict of architecture keys, got "
                         f"{model!r}")
    unknown = [key for key in model if key not in (*MODEL_KEYS, "name", "config")]
    if unknown:
        raise ValueError(f"model: unknown key {unknown[0]!r} (allowed: name, config, "
                         f"{', '.join(MODEL_KEYS)})")
    config = model.get("config")
    if "config" in model and not (isinstance(config, str) and config):
        raise ValueError(f"model.config must be a non-empty string (the path of a "
                         f"config.json), got {config!r}")
    return dict(model)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _tokens(num_tokens) -> np.ndarray:
    """`num_tokens` as float64 (a number or an array of whole numbers >= 1)."""
    try:
        tokens = np.asarray(num_tokens)
        whole = tokens.dtype.kind in "iuf" and tokens.size > 0 and bool(
            np.all(np.isfinite(tokens)) and np.all(tokens >= 1)
            and np.all(tokens == np.floor(tokens)))
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise ValueError(f"num_tokens must be a whole number of tokens >= 1 (or an array of "
                         f"them), got {num_tokens!r}")
    return tokens.astype(np.float64)


def _measured_ops(arch, device, tp: int, ep: int, dtype: str, kernels, framework: str,
                  activations: str, moe_backend: str):
    """The measured operators `kernels` asks for (None: the roofline); a GPU without tables
    under `kernels=None` is the roofline's, said once."""
    if kernels == "roofline":
        return None
    try:
        tables = kernel_tables(device, framework)
    except TablesMiss as exc:
        if kernels == "measured":
            raise ValueError(f"kernels: {exc}") from None
        say_once(f"note: layer_op_times: {exc}; costed by the roofline")
        return None
    ops = MeasuredOps(arch, tp, dtype, kv_cache_dtype(dtype), tables, ep, activations,
                      moe_backend=moe_backend)
    refused = ops.refusal()
    if refused:
        raise ValueError(f"{refused[0]}: {refused[1]}")
    ops.say_roofline("layer_op_times")
    return ops
