"""Which measured attention a model's layers are, and its lookups per step: a mixin of
`MeasuredOps` (`measured.py`). Grouped-query attention is the context and generation kernels of
the GPU's heads per group of layers (full, or sliding with its window); a latent-attention
layer of DeepSeek-V3's shape is its whole measured block (`mla_block.py`), or its attention
alone with its projections as GEMMs; a sparse-attention layer (DeepSeek-V3.2's, GLM-5's) its
whole measured layer, the indexer within, where the package measured it (`sparse_block`).

A linear-attention layer's convolution and delta rule are the Gated DeltaNet kernels the
package measured for Qwen3.5's shapes, by the GPU's key and value heads (`linear_grid`).

Attention is looked up per step: prefill as `prefill_seqs` prompts of the length whose causal
work n (n + 1) / 2 is the step's mean per chunk (a chunk of n after c computed tokens does
n c + n (n + 1) / 2: the kernel's time follows its work); decode as `decode_seqs` sequences of
the mean context.
"""

from __future__ import annotations

import math

from .kernels import MLA_OUTSIDE
from .mla_block import MLA_BLOCK_OPS, MLA_HEAD_DIMS, SPARSE_BLOCK_OPS, mla_model, sparse_model


class MeasuredAttention:
    """The attention part of `MeasuredOps` (module docstring); it reads the instance's `arch`,
    `tp`, `tables`, `gemms`, `_gemm_dtype`, `gemm_chain` and `_first`."""

    def _find_attention(self, probe, dtype: str, kv_dtype: str) -> None:
        """Which measured kernel or block each group of layers' attention is (`_grids`, by
        window), and the operators a measured block holds (`block_ops`), which the GEMM
        tables then leave (a latent block's projections outside it become GEMMs)."""
        arch, tp, tables = self.arch, self.tp, self.tables
        sparse = sparse_model(arch) if arch.is_sparse else None
        self._grids = {}
        self.mla_block = False  # the latent attention block measured whole (`block_ops`)
        self.sparse_block = False  # and it a sparse-attention layer, its indexer within
        self.block_ops = ()  # the operators its measured time holds
        self._linear = (None, None)
        if arch.linear_layers:  # (prefill, decode), each None where not measured
            shape = (arch.linear_k_heads // tp, arch.linear_v_heads // tp, arch.linear_k_dim,
                     arch.linear_v_dim)
            self._linear = (tables.linear_grid(*shape, decode=False),
                            tables.linear_grid(*shape, decode=True))
        if sparse is not None:  # measured whole, indexer and all
            heads = arch.n_heads // tp
            gemm = self._first(lambda d: tables.sparse_grid(sparse, heads, kv_dtype, d, True),
                               dtype)
            if gemm is not None:
                self._grids[0] = (tables.sparse_grid(sparse, heads, kv_dtype, gemm, False),
                                  tables.sparse_grid(sparse, heads, kv_dtype, gemm, True))
                self.mla_block = self.sparse_block = True
                self.block_ops = (*SPARSE_BLOCK_OPS, "attn_rope")
                for op in SPARSE_BLOCK_OPS:  # within the block, never a GEMM of its own
                    self._gemm_dtype.pop(op, None)
        if arch.is_mla and not self.sparse_block:  # measured only as DeepSeek's whole block
            heads, model = arch.n_heads // tp, mla_model(arch)
            gemm = self._first(lambda d: tables.mla_grid(model, heads, kv_dtype, d, False),
                               dtype)
            decode = tables.mla_grid(model, heads, kv_dtype, gemm, True) if gemm else None
            outside = ()  # its projections from the GEMM tables
            if decode is not None:
                prefill = tables.mla_grid(model, heads, kv_dtype, gemm, False)
                self._grids[0], self.mla_block = (prefill, decode), True
                outside = MLA_OUTSIDE.get(tables.framework, ())
                self.block_ops = tuple(op for op in (*MLA_BLOCK_OPS, "attn_rope")
                                       if op not in outside)
            else:  # and its attention the kernel's alone
                outside = MLA_BLOCK_OPS
            self._gemm_dtype |= {
                op: self._first(lambda d: tables.gemm(probe, n, k, d), dtype, self.gemm_chain)
                for op, (n, k) in self.gemms.items() if op in outside}
            if decode is None and mla_model(arch, MLA_HEAD_DIMS):
                self._grids[0] = (tables.mla_attention_grid(heads, kv_dtype, False),
                                  tables.mla_attention_grid(heads, kv_dtype, True))
        elif not arch.is_mla:
            heads, kv_heads = arch.q_dim // tp // arch.hd, arch.kv_heads_per_gpu(tp)
            for layers, window in ((arch.full_layers, 0),
                                   (arch.sliding_layers, arch.sliding_window)):
                if layers:  # a group of layers the model has (Mistral-7B's are all sliding)
                    self._grids[window] = (
                        tables.prefill_grid(heads, kv_heads, arch.hd, kv_dtype, window),
                        tables.decode_grid(heads, kv_heads, arch.hd, kv_dtype, window))

    # --- attention, per step ----------------------------------------------------------------
    def prefill_attention(self, window: int, chunks: float, causal: float,
                          tokens: float) -> float:
        """Seconds of one layer's prefill attention (its `window`, 0: full): `chunks` chunks of
        `tokens` in all doing `causal` work (NaN: out of reach or not measured), looked up as
        fresh prompts of the length whose work is the mean chunk's (`prefill_point`)."""
        grid = self._grids.get(window, (None, None))[0]
        if grid is None:
            return math.nan
        return grid.at_one(*self.prefill_point(window, chunks, causal, tokens))

    @staticmethod
    def prefill_point(window: int, chunks: float, causal: float,
                      tokens: float) -> tuple[float, float]:
        """(chunks, length): the fresh prompts a prefill's lookup stands its chunks for."""
        if window:  # a query attends to at most `window` keys
            causal = min(causal, tokens * window)
        return chunks, prompt_length(causal / chunks, window)

    def decode_attention(self, window: int, decodes: float, context: float) -> float:
        """Seconds of one layer's decode attention: `decodes` sequences attending to `context`
        keys in all (NaN: out of reach or not measured)."""
        grid = self._grids.get(window, (None, None))[1]
        if grid is None:
            return math.nan
        return grid.at_one(decodes, context / decodes)

    def linear_measured(self, decode: bool) -> bool:
        """Whether the tables have the linear-attention layers' decode (or prefill)."""
        return self._linear[decode] is not None

    def linear_prefill(self, batch: float, length: float) -> float:
        """Seconds of one linear-attention layer's prefill of `batch` prompts of `length`
        tokens (NaN: out of reach or not measured)."""
        grid = self._linear[0]
        return math.nan if grid is None else grid.at_one(batch, length)

    def linear_decode(self, decodes: float) -> float:
        """Seconds of one linear-attention layer's decode of `decodes` sequences (NaN: out of
        reach or not measured)."""
        grid = self._linear[1]
        return math.nan if grid is None else grid.at_one(decodes, 1.0)

    def linear_anchored(self, decode: bool, batch: float, length: float, growth) -> float | None:
        """`anchored` of the linear-attention layers' prefill or decode."""
        grid = self._linear[decode]
        return None if grid is None else grid.anchored(batch, length, growth)

    def anchored(self, kind: str, window: int, batch: float, length: float,
                 growth) -> float | None:
        """Seconds of one layer's `kind` ("prefill" or "decode") attention at (batch, length)
        past its tables' reach: their times nearest to it carried by `growth` (`Grid.anchored`);
        None: not measured."""
        grid = self._grids.get(window, (None, None))[kind == "decode"]
        return None if grid is None else grid.anchored(batch, length, growth)


def prompt_length(work: float, window: int = 0) -> float:
    """The length L of a fresh prompt whose causal attention work is `work`: L (L + 1) / 2, or
    under a window w, w (w + 1) / 2 + (L - w) w once L passes it."""
    if window and work > window * (window + 1) / 2:
        return window + (work - window * (window + 1) / 2) / window
    return (math.sqrt(8.0 * work + 1.0) - 1.0) / 2.0
