"""Which of a step's operators the measured kernel tables cost, and their times.

`MeasuredOps(arch, tp, dtype, kv_dtype, tables)` maps the hardware model's operators onto the
tables of `kernels.py`: each weight matmul of a layer and the LM head onto a GEMM of its shape
on one GPU (m = the step's rows, n and k after tensor parallelism), the two all-reduces of a
layer onto the framework's custom all-reduce, and prefill and decode attention onto the context
and generation attention kernels of the GPU's heads. The elementwise kernels (norms, rotary
embedding, activation, residual adds, embedding lookup) have no tables: they stay on the
roofline, as in the package's own estimator. `sources()` says, operator by operator, where each
time comes from, for the report.

Attention is looked up per step: prefill as `prefill_seqs` prompts of the length whose causal
work n (n + 1) / 2 is the step's mean per chunk (a chunk after a context does n c + n (n + 1) / 2:
the kernel's time follows its work); decode as `decode_seqs` sequences of the mean context.
"""

from __future__ import annotations

import math

import numpy as np

from .architecture import Architecture
from .kernels import KernelTables
from .operators import matmul_shapes

MEASURED, ROOFLINE = "measured", "roofline"
_SAID: set = set()


def say_once(note: str) -> None:
    """Print a note to stderr the first time this process meets it (a fallback a run meets at
    every step is said once, not per step)."""
    import sys

    if note not in _SAID:
        _SAID.add(note)
        print(note, file=sys.stderr)


class MeasuredOps:
    """The measured times of one model's operators on one GPU (module docstring)."""

    def __init__(self, arch: Architecture, tp: int, dtype: str, kv_dtype: str,
                 tables: KernelTables):
        self.arch, self.tp, self.dtype, self.kv_dtype, self.tables = \
            arch, tp, dtype, kv_dtype, tables
        self.heads = arch.q_dim // tp // arch.hd
        self.kv_heads = arch.kv_heads_per_gpu(tp)
        # the GEMM shape (n, k) of each matmul on one GPU
        self.gemms = {op: (written, read) for op, (read, _, written)
                      in matmul_shapes(arch, tp).items()}
        self.gemms["lm_head"] = (-(-arch.vocab_size // tp), arch.d_model)
        probe = np.asarray([1.0])
        self._gemm_known = {op: tables.gemm(probe, n, k, dtype) is not None
                            for op, (n, k) in self.gemms.items()}
        self._ar_known = tp <= 1 or tables.all_reduce(probe, arch.d_model, tp) is not None
        self._prefill = tables.prefill_grid(self.heads, self.kv_heads, arch.hd, kv_dtype)
        self._decode = tables.decode_grid(self.heads, self.kv_heads, arch.hd, kv_dtype)

    def describe(self) -> str:
        return self.tables.describe()

    def sources(self) -> dict:
        """{operator: "measured" or "roofline"} of every operator the tables could cost."""
        out = {op: MEASURED if known else ROOFLINE for op, known in self._gemm_known.items()}
        if self.tp > 1:
            out["all_reduce"] = MEASURED if self._ar_known else ROOFLINE
        out["prefill_attention"] = MEASURED if self._prefill is not None else ROOFLINE
        out["decode_attention"] = MEASURED if self._decode is not None else ROOFLINE
        return out

    def matmul(self, op: str, tokens):
        """Seconds of matmul `op` for `tokens` rows (an array; NaN out of the tables' reach),
        or None when the tables lack its shape."""
        if not self._gemm_known[op]:
            return None
        n, k = self.gemms[op]
        return self.tables.gemm(np.maximum(tokens, 1.0), n, k, self.dtype)

    def all_reduce(self, tokens):
        """Seconds of one all-reduce of `tokens` rows of activations (an array), or None."""
        if not self._ar_known:
            return None
        return self.tables.all_reduce(np.maximum(tokens, 1.0), self.arch.d_model, self.tp)

    def prefill_attention(self, chunks: float, causal: float) -> float:
        """Seconds of one layer's prefill attention: `chunks` chunks doing `causal` work in
        all (NaN: out of reach or not measured)."""
        if self._prefill is None:
            return math.nan
        per_chunk = causal / chunks
        length = (math.sqrt(8.0 * per_chunk + 1.0) - 1.0) / 2.0  # n (n + 1) / 2 = per_chunk
        return self._prefill.at_one(chunks, length)

    def decode_attention(self, decodes: float, context: float) -> float:
        """Seconds of one layer's decode attention: `decodes` sequences attending to `context`
        keys in all (NaN: out of reach or not measured)."""
        if self._decode is None:
            return math.nan
        return self._decode.at_one(decodes, context / decodes)
