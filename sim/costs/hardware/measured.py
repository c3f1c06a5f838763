"""Which of a step's operators the measured kernel tables cost, and their times.

`MeasuredOps(arch, tp, dtype, kv_dtype, tables, ep)` maps the hardware model's operators onto
the tables of `kernels.py`:
- every weight matmul of a layer (the attention projections, a dense MLP's, the router's, the
  shared experts', latent attention's) and the LM head onto a GEMM of its shape on one GPU
  (m = the step's rows, n and k after tensor parallelism);
- a mixture-of-experts layer's routed experts onto the framework's fused MoE kernel
  (`moe_experts`: gate and up, activation and down in one kernel, for the layer's tokens before
  routing, with its TP and EP sizes: TP x 1 with `ep` = 1, 1 x EP with `ep` = tp);
- the two all-reduces of a layer onto the framework's custom all-reduce;
- prefill and decode attention of each group of layers (full, or sliding with its window) onto
  the context and generation attention kernels of the GPU's heads;
- a latent-attention layer (DeepSeek-V3), where the package measured it, as one block: its
  projections, norms, attention and output projection from the context and generation MLA
  module tables, per step (`mla_block`).
The elementwise kernels (norms, rotary embedding, activation, residual adds, embedding lookup)
have no tables and stay on the roofline, as in the package's own estimator; so does any
operator whose shape, dtype or head count the tables lack. `sources()` says, operator by
operator, where each time comes from, for the report.

Attention is looked up per step: prefill as `prefill_seqs` prompts of the length whose causal
work n (n + 1) / 2 is the step's mean per chunk (a chunk of n after c computed tokens does
n c + n (n + 1) / 2: the kernel's time follows its work); decode as `decode_seqs` sequences of
the mean context.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from .architecture import Architecture
from .kernels import KernelTables
from .operators import matmul_shapes

MEASURED, ROOFLINE = "measured", "roofline"
EXPERT_OPS = ("moe_up_proj", "moe_act", "moe_down_proj")  # what the fused MoE kernel runs
# The tables' GEMM and MoE dtypes to try for a servesim dtype, in order (DeepSeek's fp8 is
# block-scaled; the MoE tables of its shape have only that)
DTYPE_CHAIN = {"fp8": ("fp8", "fp8_block"), "fp16": ("bfloat16",), "bf16": ("bfloat16",)}
# What DeepSeek's measured latent-attention block runs besides attention: its projections, the
# latents' norms and the output projection (in `mla_block` steps, costed with the attention)
MLA_BLOCK_OPS = ("mla_down_proj", "mla_q_up_proj", "mla_kv_up_proj", "mla_norm",
                 "attn_post_proj")
_SAID: set = set()


def say_once(note: str) -> None:
    """Print a note to stderr the first time this process meets it (a fallback a run meets at
    every step is said once, not per step)."""
    if note not in _SAID:
        _SAID.add(note)
        print(note, file=sys.stderr)


class MeasuredOps:
    """The measured times of one model's operators on one GPU (module docstring)."""

    def __init__(self, arch: Architecture, tp: int, dtype: str, kv_dtype: str,
                 tables: KernelTables, ep: int = 1):
        self.arch, self.tp, self.ep, self.tables = arch, tp, ep, tables
        probe = np.asarray([1.0])
        self.gemms = {op: (written, read) for op, (read, _, written)
                      in matmul_shapes(arch, tp).items()}
        self.gemms["lm_head"] = (-(-arch.vocab_size // tp), arch.d_model)
        self._gemm_dtype = {op: self._first(lambda d: tables.gemm(probe, n, k, d), dtype)
                            for op, (n, k) in self.gemms.items()}
        self._moe_dtype = self._first(lambda d: self._moe(probe, d), dtype) \
            if arch.is_moe else None
        self._ar_known = tp <= 1 or tables.all_reduce(probe, arch.d_model, tp) is not None
        self._grids = {}
        self.mla_block = False  # the latent attention block measured whole (MLA_BLOCK_OPS)
        if arch.is_mla:  # measured only as DeepSeek's whole block
            gemm = self._first(lambda d: tables.mla_grid(arch.name, arch.n_heads // tp,
                                                         kv_dtype, d, False), dtype)
            grids = (tables.mla_grid(arch.name, arch.n_heads // tp, kv_dtype, gemm, False),
                     tables.mla_grid(arch.name, arch.n_heads // tp, kv_dtype, gemm, True)) \
                if gemm else (None, None)
            if None not in grids:
                self._grids[0], self.mla_block = grids, True
        else:
            heads, kv_heads = arch.q_dim // tp // arch.hd, arch.kv_heads_per_gpu(tp)
            for window in {0, arch.sliding_window}:
                self._grids[window] = (
                    tables.prefill_grid(heads, kv_heads, arch.hd, kv_dtype, window),
                    tables.decode_grid(heads, kv_heads, arch.hd, kv_dtype, window))

    def _first(self, lookup, dtype: str):
        """The first of the dtype's table spellings the lookup finds (None: none)."""
        for candidate in DTYPE_CHAIN.get(dtype, (dtype,)):
            if lookup(candidate) is not None:
                return candidate
        return None

    def describe(self) -> str:
        return self.tables.describe()

    def sources(self) -> dict:
        """{operator: "measured" or "roofline"} of every operator the tables could cost."""
        out = {op: MEASURED if known else ROOFLINE for op, known in self._gemm_dtype.items()}
        if self.arch.is_moe:
            out["moe_experts"] = MEASURED if self._moe_dtype else ROOFLINE
        if self.tp > 1:
            out["all_reduce"] = MEASURED if self._ar_known else ROOFLINE
        prefill = bool(self._grids) and all(g[0] is not None for g in self._grids.values())
        decode = bool(self._grids) and all(g[1] is not None for g in self._grids.values())
        out["prefill_attention"] = MEASURED if prefill else ROOFLINE
        out["decode_attention"] = MEASURED if decode else ROOFLINE
        if self.mla_block:  # projections measured with the attention, as one block
            out |= {op: MEASURED for op in MLA_BLOCK_OPS if op in out or op == "mla_norm"}
        return out

    # --- what depends on the step's rows ----------------------------------------------------
    def layer_times(self, roofline: dict, tokens) -> tuple[dict, dict]:
        """(one layer's operator times with the measured ones in place, {operator: the rows
        past which its tables do not reach}) for `tokens` rows (an array): each operator the
        tables have takes their time where they reach and keeps the roofline's elsewhere; a
        mixture-of-experts layer's routed experts become `moe_experts`."""
        times, beyond = dict(roofline), {}
        rows = np.maximum(tokens, 1.0)
        for op, dtype in self._gemm_dtype.items():
            if op in times and dtype is not None:
                n, k = self.gemms[op]
                times[op] = _merge(times[op], self.tables.gemm(rows, n, k, dtype), op, beyond)
        if self.mla_block:  # in the block's per-step time instead (`prefill_attention`)
            for op in MLA_BLOCK_OPS:
                times.pop(op, None)
        if self._moe_dtype is not None:
            fused = sum(times.pop(op) for op in EXPERT_OPS)
            times["moe_experts"] = _merge(fused, self._moe(rows, self._moe_dtype),
                                          "moe_experts", beyond)
        return times, beyond

    def lm_head(self, roofline, tokens, beyond: dict):
        dtype = self._gemm_dtype["lm_head"]
        if dtype is None:
            return roofline
        n, k = self.gemms["lm_head"]
        return _merge(roofline, self.tables.gemm(np.maximum(tokens, 1.0), n, k, dtype),
                      "lm_head", beyond)

    def all_reduce(self, roofline, tokens, beyond: dict):
        if self.tp <= 1 or not self._ar_known:
            return roofline
        measured = self.tables.all_reduce(np.maximum(tokens, 1.0), self.arch.d_model, self.tp)
        return _merge(roofline, measured, "all_reduce", beyond)

    def _moe(self, tokens, dtype: str):
        arch = self.arch
        moe_tp, moe_ep = (self.tp, 1) if self.ep == 1 else (1, self.ep)
        return self.tables.moe(tokens, arch.d_model, arch.moe_d_ff, arch.experts_per_token,
                               arch.n_experts, moe_tp, moe_ep, dtype)

    # --- attention, per step ----------------------------------------------------------------
    def prefill_attention(self, window: int, chunks: float, causal: float) -> float:
        """Seconds of one layer's prefill attention (its `window`, 0: full): `chunks` chunks
        doing `causal` work in all (NaN: out of reach or not measured)."""
        grid = self._grids.get(window, (None, None))[0]
        if grid is None:
            return math.nan
        per_chunk = causal / chunks
        length = (math.sqrt(8.0 * per_chunk + 1.0) - 1.0) / 2.0  # n (n + 1) / 2 = per_chunk
        return grid.at_one(chunks, length)

    def decode_attention(self, window: int, decodes: float, context: float) -> float:
        """Seconds of one layer's decode attention: `decodes` sequences attending to `context`
        keys in all (NaN: out of reach or not measured)."""
        grid = self._grids.get(window, (None, None))[1]
        if grid is None:
            return math.nan
        return grid.at_one(decodes, context / decodes)


def _merge(roofline, measured, op: str, beyond: dict):
    """The measured times where they are numbers, the roofline's where they are NaN (out of
    the tables' reach: noted in `beyond` with the rows where it starts) or absent."""
    if measured is None:
        return roofline
    missing = np.isnan(measured)
    if np.ndim(missing) and missing[1:].any():  # row count 0 is never a step
        beyond[op] = int(missing[1:].argmax())
    return np.where(missing, roofline, measured)
