"""The routed experts on Marlin's weight-only kernel (`hardware.moe_backend = "marlin"`, vLLM's
`--moe-backend marlin`), from the measured tables' Marlin rows (`KernelTables.moe_marlin`).

Where Marlin was measured at the model's own experts' shape, its time is the table's. Where it
was measured only at another shape, its time is the one measured at as many rows an expert,
scaled by the experts' size, and never below the default kernel's time (`on_marlin`): at a few
rows an expert a kernel's time is mostly fixed, which does not scale with the size
(docs/sim/hardware.md, "The MoE kernel").
"""

from __future__ import annotations

import numpy as np

from scenarios.defaults import MAX_GPUS

from .architecture import Architecture
from .kernels import KernelTables


def expert_shape(arch: Architecture) -> tuple[int, int, int, int]:
    """(hidden, intermediate, top-k, experts): the shape the MoE tables are keyed by."""
    return arch.d_model, arch.moe_d_ff, arch.experts_per_token, arch.n_experts


def on_marlin(tables: KernelTables, tokens, shape: tuple, layout: tuple, dtype: str,
              distribution: str, default):
    """(the experts' seconds on Marlin for `tokens`, the shape Marlin was measured at); None:
    not measured at `layout` (moe TP, moe EP). `default`: the default kernel's seconds, which
    Marlin measured at another shape is not taken below."""
    found = tables.moe_marlin(tokens, *shape, *layout, dtype, distribution)
    if found is None:
        return None
    seconds, measured_at = found
    return (seconds if measured_at == shape else np.maximum(default, seconds)), measured_at


def marlin_text(shape: tuple, measured_at: tuple) -> str:
    """Where the experts' Marlin time comes from, for the notes and the report."""
    if measured_at == shape:
        return "Marlin's kernel, as measured at this model's shape"
    hidden, inter, topk, experts = measured_at
    return (f"Marlin's kernel, as measured at hidden {hidden}, intermediate {inter}, {experts} "
            f"experts, top {topk}: scaled to this model's experts at as many rows an expert, "
            f"never below the default kernel's time")


def marlin_missing(tables: KernelTables, dtype: str, layout: tuple, distribution: str) -> str:
    """Why Marlin cannot cost experts in the tables' `dtype` at `layout`, naming the layouts
    a run can take (up to `MAX_GPUS` GPUs, split by TP or whole by EP) that have it."""
    layouts = [(tp, ep) for tp, ep in tables.marlin_layouts(dtype, distribution)
               if tp * ep <= MAX_GPUS and 1 in (tp, ep)]
    have = ("; they have it at moe TP x EP " + ", ".join(f"{tp} x {ep}" for tp, ep in layouts)
            if layouts else "")
    return (f"{tables.describe()} have no Marlin MoE kernel in {dtype} with the experts at moe "
            f"TP {layout[0]} x EP {layout[1]}{have}")
