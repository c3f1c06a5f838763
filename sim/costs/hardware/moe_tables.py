"""The measured mixture-of-experts layers (`KernelTables` mixes it in: it reads
`self.table_path` and `self.table_paths`): the framework's default fused MoE kernel, the Triton
kernel (from the newest collection that timed it), Marlin's, and mxfp4 experts with MXFP8
activations, by tokens, at one shape (hidden, expert width, top-k, experts) and layout (moe TP,
moe EP); the last two, where measured only at other shapes, from the nearest (`transferred`).
Every method answers seconds, or None where the tables do not have it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from . import tables
from .table_versions import version_dirs

# servesim dtypes -> the MoE tables' spellings (16-bit kernels were measured in bfloat16)
MOE_DTYPES = {"fp16": "bfloat16", "bf16": "bfloat16", "fp8": "fp8", "nvfp4": "nvfp4"}
# mxfp4 experts with MXFP8 activations (`hardware.activation_scheme = "mxfp8"`), and the kernel
# vLLM and SGLang run them on (FlashInfer's TensorRT-LLM kernel), as their rows name it
MXFP8_EXPERTS = "w4a8_mxfp4_mxfp8"
FLASHINFER_MXFP8 = "flashinfer_trtllm"


def transferred(found, tokens, shape: tuple):
    """(seconds for `tokens` tokens of a curve `found` at (curve, the shape it was measured at),
    that shape) on a model's experts of `shape`; None where `found` is. Measured at another
    shape, its time is the one measured at as many rows an expert (tokens x topk / experts),
    scaled by the experts' size (experts x hidden x inter): the work, and the weights read, at
    that many rows."""
    if found is None:
        return None
    curve, their = found
    hidden, inter, topk, experts = shape
    their_hidden, their_inter, their_topk, their_experts = their
    rows = np.asarray(tokens, dtype=np.float64) * topk / experts
    size = experts * hidden * inter / (their_experts * their_hidden * their_inter)
    return _seconds(curve, rows * their_experts / their_topk) * size, their


@lru_cache(maxsize=32)
def flashinfer_collections(folder: str, framework: str) -> tuple[tuple[str, str], ...]:
    """("framework version", its MoE table) of the newest collection under `folder` (a GPU's
    `moe` tables) of each framework but `framework` that runs FlashInfer's MoE kernels (vLLM,
    SGLang), in order: read once a GPU."""
    out = []
    for other in ("vllm", "sglang"):
        path = Path(folder) / other
        if other == framework or not path.is_dir():
            continue
        found = [version for version in version_dirs(path)
                 if (path / version / "moe_perf.parquet").is_file()]
        if found:
            out.append((f"{other} {found[-1]}", str(path / found[-1] / "moe_perf.parquet")))
    return tuple(out)


def _seconds(curve, tokens):
    """The curve's milliseconds at `tokens` (interpolated in log-log), in seconds."""
    return np.exp(curve.log_at(np.log(np.asarray(tokens, dtype=np.float64)))) * 1e-3


class MoeTables:
    """The fused MoE kernels' times (module docstring)."""

    def moe(self, tokens, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int,
            dtype: str, distribution: str = "power_law_1.2"):
        """Seconds of one MoE layer's experts for `tokens` tokens (before routing), their
        routing skewed as `distribution` ("balanced", "power_law_1.01", "power_law_1.2")."""
        curve = tables.moe_curve(self.table_path("moe", "moe_perf.parquet"),
                                 MOE_DTYPES.get(dtype, dtype), hidden, inter, topk, experts, tp,
                                 ep, distribution)
        return None if curve is None else _seconds(curve, tokens)

    def moe_triton(self, tokens, hidden: int, inter: int, topk: int, experts: int, tp: int,
                   ep: int, dtype: str, distribution: str = "power_law_1.2"):
        """(seconds of one MoE layer's experts on the Triton fused MoE kernel for `tokens`
        tokens, the version whose tables timed it: this one, else the newest older one that
        did, as vLLM's newest collections time other kernels alone on some GPUs); None: none
        timed it in `dtype` at this shape, TP `tp` and EP `ep`."""
        for version, path in self.table_paths("moe", "moe_perf.parquet"):
            curve = tables.moe_curve(path, MOE_DTYPES.get(dtype, dtype), hidden, inter, topk,
                                     experts, tp, ep, distribution, "triton")
            if curve is not None:
                return _seconds(curve, tokens), version
        return None

    def moe_marlin(self, tokens, hidden: int, inter: int, topk: int, experts: int, tp: int,
                   ep: int, dtype: str, distribution: str = "power_law_1.2",
                   at: tuple | None = None):
        """(seconds of one MoE layer's experts on Marlin's kernel for `tokens` tokens, the
        (hidden, inter, topk, experts) Marlin was measured at: `at` where given, else the
        model's own or the nearest, `tables.nearest_moe_curve`); None: not measured in `dtype`
        at TP `tp`, EP `ep`. Measured at another shape: `transferred` (`marlin.on_marlin`
        floors it)."""
        found = tables.nearest_moe_curve(self.table_path("moe", "moe_perf.parquet"),
                                         MOE_DTYPES.get(dtype, dtype),
                                         (hidden, inter, topk, experts), tp, ep, distribution,
                                         kernel="marlin", at=at)
        return transferred(found, tokens, (hidden, inter, topk, experts))

    def moe_mxfp8(self, tokens, hidden: int, inter: int, topk: int, experts: int, tp: int,
                  ep: int, distribution: str = "power_law_1.2"):
        """(seconds of one MoE layer's mxfp4 experts with their activations in MXFP8 for
        `tokens` tokens, the (hidden, inter, topk, experts) they were measured at, the other
        collection whose rows they are or None); None: not measured at TP `tp`, EP `ep`. Read at
        the model's own shape from this collection, else from another framework's newest on this
        GPU that timed FlashInfer's TensorRT-LLM kernel there (the kernel vLLM and SGLang both
        run; not for TensorRT-LLM, whose own kernel is another), else at the nearest shape this
        collection timed, `transferred`."""
        shape = (hidden, inter, topk, experts)
        path = self.table_path("moe", "moe_perf.parquet")
        own = tables.nearest_moe_curve(path, MXFP8_EXPERTS, shape, tp, ep, distribution, at=shape)
        if own is not None:
            return (*transferred(own, tokens, shape), None)
        others = flashinfer_collections(str(self.root / self.system / "moe"), self.framework) \
            if self.framework != "trtllm" else ()
        for other, other_path in others:
            found = tables.nearest_moe_curve(other_path, MXFP8_EXPERTS, shape, tp, ep,
                                             distribution, kernel=FLASHINFER_MXFP8, at=shape)
            if found is not None:
                return (*transferred(found, tokens, shape), other)
        found = tables.nearest_moe_curve(path, MXFP8_EXPERTS, shape, tp, ep, distribution)
        return None if found is None else (*transferred(found, tokens, shape), None)

    def marlin_layouts(self, dtype: str, distribution: str = "power_law_1.2") -> tuple:
        """The (moe TP, moe EP) layouts Marlin's MoE kernel was measured at in `dtype`."""
        return tables.marlin_layouts(self.table_path("moe", "moe_perf.parquet"),
                                     MOE_DTYPES.get(dtype, dtype), distribution)
