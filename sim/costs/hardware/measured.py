"""Which of a step's operators the measured kernel tables cost, and their times.

`MeasuredOps(arch, tp, dtype, kv_dtype, tables, ep, activations, dp, moe_backend)` maps the
hardware model's operators onto the tables of `kernels.py`:
- every weight matmul of a layer (the attention projections, a dense MLP's, the router's, the
  shared experts', latent attention's) and the LM head onto a GEMM of its shape on one GPU
  (m = the step's rows, n and k after tensor parallelism), the router and the LM head in bf16
  whatever the weights' dtype, as servers run them; fp8 (per-tensor) GEMMs with the checkpoint's
  activation scheme (`activations`: "static" or "dynamic" scales, `kernels.MEASURED_ACTIVATIONS`),
  a block-scaled checkpoint's ("block") onto the block-scaled fp8 kernels (under vLLM, whose
  block-scaled rows hold a floor, `FLOORED_BLOCK_GEMMS`, onto its per-tensor ones, with
  dynamic scales);
- a mixture-of-experts layer's routed experts onto the framework's fused MoE kernel
  (`moe_experts`: gate and up, activation and down in one kernel, for the layer's tokens before
  routing, every data-parallel rank's, with its TP and EP sizes over the experts' GPUs (tp x
  dp): TP x 1 with `ep` = 1, 1 x EP with `ep` = tp x dp), measured
  with the routing skew the package assumes for the model (a power law of exponent 1.01 for
  DeepSeek, 1.2 for the others: aiconfigurator's `sdk/models`); under `moe_backend` "marlin"
  onto Marlin's, under "triton" onto the Triton kernel's; mxfp4 experts with MXFP8 activations
  (`activations` "mxfp8") onto the kernel measured so (`measured_moe.py`);
- the two all-reduces of a layer onto the framework's custom all-reduce;
- prefill and decode attention of each group of layers (full, or sliding with its window) onto
  the context and generation attention kernels of the GPU's heads; a linear-attention layer's
  convolution and delta rule onto the Gated DeltaNet kernels of its heads;
- a latent-attention layer of DeepSeek-V3's shape (DeepSeek-R1's too, from any config.json),
  where the package measured it, as one block: its projections, norms, attention and output
  projection from the context and generation MLA module tables, per step (`mla_block`;
  SGLang's block without its down projection, a GEMM: `kernels.MLA_OUTSIDE`); where it did
  not (SGLang's tables of 16-bit weights, or on the A100, L40S and RTX PRO 6000; TensorRT-
  LLM's on the A100 and L40S; some of vLLM's), its projections onto GEMMs and its attention
  onto the latent-attention kernel measured alone, in DeepSeek-V3's head dims, where the
  tables have it (`sources()` names what falls to the roofline); a sparse-attention layer
  (DeepSeek-V3.2's, GLM-5's) whole, its indexer within, where the package measured it
  (`sparse_block`, `mla_block.SPARSE_MODELS`: vLLM's and TensorRT-LLM's tables). Which
  attention each group of layers is, and its lookups per step: `measured_attention.py`.
The elementwise kernels (norms, rotary embedding, activation, residual adds, embedding lookup)
have no tables and stay on the roofline, as in the package's own estimator; so does any
operator whose shape, dtype or head count the tables lack. `sources()` says, operator by
operator, where each time comes from, for the report; past the tables' reach, `reach.py`.
"""

from __future__ import annotations

import numpy as np

from ...notes import say_once
from .architecture import Architecture
from .kernels import (BF16_OPS, BLOCK_CHAIN, DTYPE_CHAIN, FLOORED_BLOCK_GEMMS,
                      MEASURED_ACTIVATIONS, MOE_CHAIN, SLOW_FP8_MOE, KernelTables)
from .measured_attention import MeasuredAttention
from .measured_moe import MeasuredMoe
from .mla_block import MLA_BLOCK_OPS
from .operators import matmul_shapes
from .reach import merge

MEASURED, ROOFLINE = "measured", "roofline"
EXPERT_OPS = ("moe_up_proj", "moe_act", "moe_down_proj")  # what the fused MoE kernel runs


class MeasuredOps(MeasuredMoe, MeasuredAttention):
    """The measured times of one model's operators on one GPU (module docstring)."""

    def __init__(self, arch: Architecture, tp: int, dtype: str, kv_dtype: str,
                 tables: KernelTables, ep: int = 1, activations: str = "static", dp: int = 1,
                 moe_backend: str = "auto"):
        self.arch, self.tp, self.ep, self.tables = arch, tp, ep, tables
        self.activations, self.moe_backend = activations, moe_backend
        self.marlin_shape = None  # where Marlin's experts were measured (moe_backend "marlin")
        self.triton_version = None  # whose tables timed the Triton kernel (moe_backend "triton")
        self.mxfp8_shape = None  # where mxfp4 experts with MXFP8 activations were measured
        self.mxfp8_source = None  # the other collection that timed them there, if one did
        # a per-tensor fp8 GEMM's activation scales (a block-scaled checkpoint's, in a shape
        # the tables lack block-scaled: scaled at every call)
        self.tensor_scales = "dynamic" if activations == "block" else activations
        self.chain = BLOCK_CHAIN if activations == "block" else DTYPE_CHAIN
        self.gemm_chain = DTYPE_CHAIN if tables.framework in FLOORED_BLOCK_GEMMS else self.chain
        self.experts_gpus = tp * dp  # the experts span every data-parallel rank's GPUs
        probe = np.asarray([1.0])
        # (n, k) of each matmul on one GPU: its outputs, and its weights over them
        self.gemms = {op: (written, weights // written) for op, (_, weights, written)
                      in matmul_shapes(arch, tp).items()}
        self.gemms["lm_head"] = (-(-arch.vocab_size // tp), arch.d_model)
        self.distribution = "power_law_1.01" if arch.is_mla else "power_law_1.2"
        self._gemm_dtype = {op: self._first(lambda d: tables.gemm(probe, n, k, d),
                                            "bf16" if op in BF16_OPS else dtype,
                                            self.gemm_chain)
                            for op, (n, k) in self.gemms.items()
                            if not (op in MLA_BLOCK_OPS and arch.is_mla)}
        self._moe_dtype = self._first(lambda d: self._moe(probe, d), dtype,
                                      self.chain | MOE_CHAIN) if arch.is_moe else None
        self.backend_missing = self._backend_missing(probe, dtype)
        self.scheme_missing = self._scheme_missing()
        self._ar_known = tp <= 1 or tables.all_reduce(probe, arch.d_model, tp) is not None
        self._exchange_known = dp > 1 and \
            tables.all_reduce(probe, arch.d_model, self.experts_gpus) is not None
        self._find_attention(probe, dtype, kv_dtype)
        self._sources = self._find_sources()
        self._scales_known = ("fp8" not in self._gemm_dtype.values()
                              or self.tensor_scales == MEASURED_ACTIVATIONS[tables.framework]
                              or tables.activation_scale_time(probe, arch.d_model) is not None)

    def _first(self, lookup, dtype: str, chain: dict | None = None):
        """The first of the dtype's table spellings the lookup finds (None: none)."""
        for candidate in (chain or self.chain).get(dtype, (dtype,)):
            if lookup(candidate) is not None:
                return candidate
        return None

    def describe(self) -> str:
        return self.tables.describe()

    def sources(self) -> dict:
        """{operator: "measured" or "roofline"} of every operator the tables could cost."""
        return dict(self._sources)

    def _find_sources(self) -> dict:
        out = {op: MEASURED if known else ROOFLINE for op, known in self._gemm_dtype.items()}
        if self.arch.is_moe:
            out["moe_experts"] = MEASURED if self._moe_dtype else ROOFLINE
        if self.tp > 1:
            out["all_reduce"] = MEASURED if self._ar_known else ROOFLINE
        if self.experts_gpus > self.tp:
            out["expert_exchange"] = MEASURED if self._exchange_known else ROOFLINE
        for side, op in enumerate(("prefill_attention", "decode_attention")):
            known = {window: grids[side] is not None for window, grids in self._grids.items()}
            if len(set(known.values())) == 2:  # the full layers' measured, the sliding not
                out |= {f"{op} ({'sliding' if window else 'full'} layers)":
                        MEASURED if found else ROOFLINE for window, found in sorted(known.items())}
            else:
                out[op] = MEASURED if known and all(known.values()) else ROOFLINE
        if self.arch.linear_layers:
            out |= {f"{side}_linear_attention": MEASURED if grid is not None else ROOFLINE
                    for side, grid in zip(("prefill", "decode"), self._linear)}
        if self.arch.is_sparse:  # a sparse layer's indexer: within its measured block
            out["sparse_indexer"] = MEASURED if self.sparse_block else ROOFLINE
        if self.mla_block:  # measured with the attention, as one block
            out |= {op: MEASURED for op in self.block_ops}
        return out

    def say_roofline(self, source: str) -> None:
        """One note naming the operators the tables do not have, said once."""
        missing = [op for op, where in self.sources().items() if where == ROOFLINE]
        if missing:
            say_once(f"note: {source}: the measured tables have no {', '.join(missing)} of "
                     f"this model and GPU; costed by the roofline")
        if self.arch.is_sparse and not self.sparse_block:
            say_once(f"note: {source}: the measured tables have no sparse-attention layer of "
                     f"this shape, {self.arch.n_heads // self.tp} heads a GPU and this KV "
                     f"dtype under {self.tables.framework}; its latent attention is costed "
                     f"over at most index_topk keys a query and its indexer by the roofline, "
                     f"which servers' padded sparse kernels outrun: its prefill comes out "
                     f"fast (docs/sim/hardware.md, \"Sparse attention\")")
        if self._moe_dtype == "fp8" and self.triton_version is None and \
                self.tables.system in SLOW_FP8_MOE.get(self.tables.framework, ()):
            say_once(f"note: {source}: the experts are costed from the per-tensor fp8 MoE rows "
                     f"{self.tables.framework} was measured with on this GPU, one kernel's "
                     f"(FlashInfer's CUTLASS), 2.2 to 4 times its bf16 rows; a block-scaled "
                     f"checkpoint (hardware.activation_scheme = \"block\": Qwen's and "
                     f"DeepSeek's own FP8 releases) reads its block-scaled rows "
                     f"(docs/sim/hardware.md, \"Measured kernels\")")
        kernel = self.moe_kernel_text()
        if kernel is not None:
            key = "activation_scheme" if self.mxfp8_shape else "moe_backend"
            say_once(f"note: {source}: moe_experts on {kernel} (hardware.{key})")
        if not self._scales_known:
            measured = MEASURED_ACTIVATIONS[self.tables.framework]
            say_once(f"note: {source}: the measured tables do not time fp8 activation scales; "
                     f"fp8 GEMMs are costed with {measured} scales, as measured, not "
                     f"{self.tensor_scales}")

    # --- what depends on the step's rows ----------------------------------------------------
    def layer_times(self, roofline: dict, tokens, only=None,
                    keep_block: bool = False) -> tuple[dict, dict]:
        """(one layer's operator times with the measured ones in place, {operator: the fewest
        rows its tables do not reach}) for `tokens` rows (an array): each operator the
        tables have takes their time where they reach and keeps the roofline's elsewhere; a
        mixture-of-experts layer's routed experts become `moe_experts`. `only`: the operators
        wanted (the others are left out). A measured latent-attention block's operators are
        left out too (a step costs the block whole, `prefill_attention`), unless `keep_block`:
        then they keep the roofline's times."""
        if only is not None:
            roofline = {op: t for op, t in roofline.items() if op in only}
        times, beyond = dict(roofline), {}
        rows = np.maximum(tokens, 1.0)
        if not keep_block:  # in the block's per-step time instead
            for op in self.block_ops:
                times.pop(op, None)
        for op in self._gemm_dtype:
            if op in times and op != "lm_head":
                times[op] = merge(times[op], self.lookup(op, rows), op, beyond, tokens)
        if self._moe_dtype is not None and EXPERT_OPS[0] in times:
            fused = sum(times.pop(op) for op in EXPERT_OPS)
            experts = merge(fused, self.lookup("moe_experts", rows), "moe_experts", beyond,
                            tokens)
            if self.moe_backend == "marlin":  # past Marlin's reach too: not below the default
                default = self.lookup("moe_experts", rows, "auto")
                experts = np.maximum(experts, merge(fused, default, "moe_experts", {}, tokens))
            times["moe_experts"] = experts
        return times, beyond

    def lookup(self, op: str, rows, backend: str | None = None):
        """The measured seconds of a layer's matmul `op` or its `moe_experts` (on `backend`'s
        kernel; None: `moe_backend`'s) for `rows` rows (an array; NaN past the tables'
        reach); None: not measured."""
        if op == "moe_experts":
            return None if self._moe_dtype is None else self._moe(rows, self._moe_dtype,
                                                                  backend)
        dtype = self._gemm_dtype.get(op)
        if dtype is None:
            return None
        n, k = self.gemms[op]
        return self.tables.gemm(rows, n, k, dtype, self.tensor_scales)

    def reach_edges(self, op: str) -> tuple:
        """The row counts where `op`'s tables end (`reach`): under Marlin, the experts'
        default kernel's too, which floors Marlin's time (`layer_times`)."""
        edges = self.reach(op) or ()
        if op == "moe_experts" and self.moe_backend == "marlin":
            edges += self.reach(op, "auto") or ()
        return edges

    def reach(self, op: str, backend: str | None = None) -> tuple[int, int] | None:
        """(the fewest, the most) rows `op`'s tables reach (the experts' on `backend`'s
        kernel), by bisection from the first power of two they reach (None: none up to
        2^30)."""
        def reached(rows: int) -> bool:
            return not np.isnan(self.lookup(op, np.array([float(rows)]), backend)[0])

        inside = next((2 ** i for i in range(31) if reached(2 ** i)), None)
        if inside is None:
            return None
        fewest = 1
        if not reached(1):
            low, high = 1, inside  # not reached at low, reached at high
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (low, mid) if reached(mid) else (mid, high)
            fewest = high
        low, high = inside, 2 ** 31  # reached at low, not at high
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if reached(mid) else (low, mid)
        return fewest, low

    def lm_head(self, roofline, tokens, beyond: dict):
        """Seconds of the LM head for `tokens` sampling rows (in bf16, as servers run it)."""
        dtype = self._gemm_dtype["lm_head"]
        if dtype is None:
            return roofline
        n, k = self.gemms["lm_head"]
        return merge(roofline, self.tables.gemm(np.maximum(tokens, 1.0), n, k, dtype),
                     "lm_head", beyond, tokens)

    def all_reduce(self, roofline, tokens, beyond: dict):
        """Seconds of one all-reduce of `tokens` rows of activations over the GPUs."""
        if self.tp <= 1 or not self._ar_known:
            return roofline
        measured = self.tables.all_reduce(np.maximum(tokens, 1.0), self.arch.d_model, self.tp)
        return merge(roofline, measured, "all_reduce", beyond, tokens)

    def exchange(self, roofline, tokens, beyond: dict):
        """Seconds of the routed experts' exchange of `tokens` rows across the experts' GPUs
        (data-parallel ranks: an all-gather before them and a reduce-scatter after, the bytes
        of one all-reduce, timed as the framework's all-reduce over that many GPUs)."""
        if not self._exchange_known:
            return roofline
        measured = self.tables.all_reduce(np.maximum(tokens, 1.0), self.arch.d_model,
                                          self.experts_gpus)
        return merge(roofline, measured, "expert_exchange", beyond, tokens)
