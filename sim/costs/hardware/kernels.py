"""Silicon-measured kernel times: the latency tables of NVIDIA's `aiconfigurator-core` package
(Apache-2.0; the optional extra `servesim[gpu]`), read directly with pandas.

The package measured, on each GPU and under each serving framework's version, the kernels a
transformer step runs: GEMMs by (m, n, k, dtype), context (prefill) attention by (batch, input
length, heads, key-value heads, head dim, KV dtype), generation (decode) attention by (batch,
KV length, ...), mixture-of-experts layers by (tokens, hidden, expert width, top-k, experts,
TP, EP, dtype) and custom all-reduces by (elements, GPUs). Its files lie under
`aiconfigurator_core/systems/data/<system>/<family>/<framework>/<version>/*.parquet`, latencies
in milliseconds.

They are read directly rather than through the package's own estimator because servesim must
know, for every operator it costs, whether the time is measured, interpolated between measured
points or beyond them: the estimator extrapolates past its grid without limit and without
saying so. Here a time is:
- interpolated between measured points, piecewise linear in log(latency) against log(size) in
  the token dimension (tokens, batch, KV length, elements: a power law between neighbours) and
  log-bilinear in a GEMM's (n, k) between measured shapes;
- extrapolated by the end segment's power law up to 2x past the measured range
  (`interpolation.MAX_REACH`);
- NaN beyond that (element by element: a run of steps is costed exactly as its steps one by
  one), and `None` for a shape, dtype or kernel the tables do not have: the caller then costs
  that operator (or that step's operator) by the roofline, and says so once.

A framework version names a complete collection (GEMM and attention tables); each operator
family is read from the newest version not newer than it that has its table, as the package
fills older versions in. The mixture-of-experts lookups are in `moe_tables.py`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from . import tables
from .interpolation import Grid, bracket
from .moe_tables import MoeTables
from .table_versions import version_dirs, version_key

FRAMEWORKS = ("vllm", "sglang", "trtllm")
# servesim GPU ids with tables -> the package's system folder
SYSTEMS = {"a100-80gb-sxm": "a100_sxm", "h100-sxm": "h100_sxm", "h200": "h200_sxm",
           "b200": "b200_sxm", "gb200": "gb200", "b300": "b300_sxm", "gb300": "gb300",
           "l40s": "l40s", "rtx-pro-6000": "rtx_pro_6000_server"}
# servesim dtypes -> the tables' spellings (16-bit kernels were measured in bfloat16)
GEMM_DTYPES = {"fp16": "bfloat16", "bf16": "bfloat16", "fp8": "fp8", "nvfp4": "nvfp4"}
KV_DTYPES = {"fp16": "bfloat16", "bf16": "bfloat16", "fp8": "fp8"}
# An fp8 (per-tensor) GEMM quantizes its activations with a scale fixed in the checkpoint
# ("static", as NVIDIA's ModelOpt FP8 checkpoints ship) or computed from them at every call
# ("dynamic"). The scheme each framework's GEMM tables were measured with (the package's
# collectors: vLLM's sets activation_scheme = "static"; TensorRT-LLM's Linear gets no input
# scale and so quantizes dynamically; SGLang's quantizes per token), and each framework's
# `quantize` tables time the difference, dynamic minus static.
MEASURED_ACTIVATIONS = {"vllm": "static", "sglang": "dynamic", "trtllm": "dynamic"}
# The tables' GEMM and MoE dtypes to try for a servesim dtype, in order, operator by operator:
# fp8 is per-tensor scaled where that was measured, else block-scaled (DeepSeek's experts and
# MLA block were measured only so), so one model may mix the two; a block-scaled checkpoint's
# (`activations` "block") the other way round
DTYPE_CHAIN = {"fp8": ("fp8", "fp8_block"), "fp16": ("bfloat16",), "bf16": ("bfloat16",),
               "mxfp4": ("bfloat16",)}
BLOCK_CHAIN = DTYPE_CHAIN | {"fp8": ("fp8_block", "fp8")}
# Frameworks whose block-scaled GEMM rows hold a floor no kernel has: vLLM 0.24's take 60 us
# (H200) to 560 us (GB300) at one row, the median over shapes, 5 to 27 times its per-tensor
# rows (FlashInfer's, DeepGEMM's, CUTLASS's, Triton's kernels), while vLLM served
# MiniMax-M2.5's block-scaled checkpoint at 8.1 ms a token at TP 8 (InferenceMAX), less than
# that floor of its attention projections alone (docs/sim/hardware.md, "Measured kernels");
# their block-scaled checkpoints' GEMMs read the per-tensor rows, scaled at every call
FLOORED_BLOCK_GEMMS = ("vllm",)
# Systems whose per-tensor fp8 MoE rows a framework measured on one kernel alone, 2.2 to 4 times
# its bf16 rows (vLLM 0.24's on Hopper: FlashInfer's CUTLASS kernel): a run whose experts they
# cost says so (docs/sim/hardware.md, "Measured kernels")
SLOW_FP8_MOE = {"vllm": ("h100_sxm", "h200_sxm")}
# The fused MoE kernel's, where they differ: mxfp4's experts are MXFP4 weights with bf16
# activations (gpt-oss)
MOE_CHAIN = {"mxfp4": ("w4a16_mxfp4",)}
# Matmuls servers run in bf16 whatever the weights' dtype (the package times them so too)
BF16_OPS = ("moe_router", "lm_head")
# vLLM captures CUDA graphs for batches up to 512 tokens by default: an all-reduce in a step
# of more tokens runs eagerly (`backend` vllm_graph / vllm_eager, sglang_graph / _eager)
GRAPH_TOKENS = 512


# The latent-attention projections a framework's measured block leaves out, costed as GEMMs:
# SGLang's collector replaced the fused q_a/kv_a down projection with random numbers (the
# package's own SGLang model adds it back as a GEMM: sdk/models/deepseek.py)
MLA_OUTSIDE = {"sglang": ("mla_down_proj",)}


class TablesMiss(ValueError):
    """A request the measured tables cannot answer (no such GPU, framework or version), and
    the scenario key it is about."""

    def __init__(self, problem: str, key: str = "hardware.kernels"):
        super().__init__(problem)
        self.key = key


def data_root() -> Path | None:
    """The package's data folder, or None without `servesim[gpu]`."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent / "systems" / "data"
    return root if root.is_dir() else None


def versions(gpu: str, framework: str, root: Path | None = None) -> list[str]:
    """The framework versions with a complete collection (GEMM and attention) for a GPU,
    oldest first; empty where there are none."""
    root = root or data_root()
    system = SYSTEMS.get(gpu)
    if root is None or system is None:
        return []
    gemm = version_dirs(root / system / "gemm" / framework)
    attention = set(version_dirs(root / system / "attention" / framework))
    return [v for v in gemm if v in attention]


class KernelTables(MoeTables):
    """The measured kernel times of one GPU under one framework version (module docstring);
    every method answers seconds (a number or an array like its size argument) or None."""

    def __init__(self, gpu: str, framework: str = "vllm", version: str | None = None,
                 root: Path | None = None):
        self.root = root or data_root()
        if self.root is None:
            raise TablesMiss("measured kernel tables need the optional extra servesim[gpu] "
                             "(pip install 'servesim[gpu]')")
        if framework not in FRAMEWORKS:
            raise TablesMiss(f"must be one of {', '.join(FRAMEWORKS)}, got {framework!r}",
                             "hardware.framework")
        if gpu not in SYSTEMS:
            raise TablesMiss(f"no measured kernel tables for GPU {gpu!r} (tables exist for "
                             f"{', '.join(SYSTEMS)})")
        known = versions(gpu, framework, self.root)
        if not known:
            raise TablesMiss(f"no measured {framework} tables for {gpu}")
        if version is None:
            version = known[-1]
        elif version not in known:
            raise TablesMiss(f"{framework} tables for {gpu} exist for version "
                             f"{', '.join(known)}, not {version!r}", "hardware.framework_version")
        self.gpu, self.framework, self.version = gpu, framework, version
        self.system = SYSTEMS[gpu]

    def describe(self) -> str:
        return f"{self.framework} {self.version} kernels measured on {self.gpu}"

    # --- GEMM -------------------------------------------------------------------------------
    def gemm(self, m, n: int, k: int, dtype: str, activations: str = "static"):
        """Seconds of an (m x k) @ (k x n) GEMM in `dtype` (servesim's spelling) for m tokens
        (a number or an array; NaN where m is out of reach); None: no measured shape near
        (n, k). An fp8 (per-tensor) GEMM's time is that of its `activations` scheme: the
        measured one, plus or minus the framework's measured scale computation where the
        tables were measured with the other (`activation_scale_time`; as measured where the
        framework has no such table)."""
        dtype = GEMM_DTYPES.get(dtype, dtype)
        table = self._gemm_shapes(dtype)
        if table is None:
            return None
        ns, ks, curves = table
        n_side, k_side = bracket(ns, n), bracket(ks, k)
        if n_side is None or k_side is None:
            return None
        (n_side, n_factor), (k_side, k_factor) = n_side, k_side
        logm = np.log(np.asarray(m, dtype=np.float64))
        total = 0.0
        for ni, nw in n_side:
            for ki, kw in k_side:
                curve = curves.get((ns[ni], ks[ki]))
                if curve is None:
                    return None
                total = total + nw * kw * curve.log_at(logm)
        seconds = np.exp(total) * 1e-3 * n_factor * k_factor
        if dtype == "fp8" and activations != MEASURED_ACTIVATIONS[self.framework]:
            extra = self.activation_scale_time(m, k)
            if extra is not None:
                seconds = seconds + extra if activations == "dynamic" else seconds - extra
        return seconds

    def activation_scale_time(self, m, k: int):
        """Seconds that computing an fp8 activation scale adds to quantizing m rows of width k
        (dynamic minus static quantization, as the framework measured it); None: the tables
        have no such measurement near k."""
        path = self.table_path("quantize", "computescale_perf.parquet")
        table = tables.scale_differences(path)
        if table is None:
            return None
        ks, differences = table
        side = bracket(ks, k)
        if side is None:
            return None
        side, factor = side
        logm = np.log(np.asarray(m, dtype=np.float64))
        return sum(w * differences[ks[i]].at(logm) for i, w in side) * 1e-3 * factor

    def _gemm_shapes(self, dtype: str):
        return tables.gemm_curves(self.table_path("gemm", "gemm_perf.parquet"), dtype)

    def table_path(self, family: str, name: str, framework: str | None = None) -> str | None:
        """The file of `family`'s table `name` that this version reads (the newest not newer
        that has it); None: none."""
        found = self.table_paths(family, name, framework)
        return found[0][1] if found else None

    def table_paths(self, family: str, name: str,
                    framework: str | None = None) -> list[tuple[str, str]]:
        """(version, file) of `family`'s table `name` in every version not newer than this
        one that has it, the newest first."""
        folder = self.root / self.system / family / (framework or self.framework)
        limit = version_key(self.version)
        return [(version, str(folder / version / name))
                for version in reversed(version_dirs(folder))
                if version_key(version) <= limit and (folder / version / name).is_file()]

    # --- attention --------------------------------------------------------------------------
    def decode_grid(self, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
                    window: int = 0) -> Grid | None:
        """Decode attention of one layer over (batch, KV length per sequence), `heads` and
        `kv_heads` per GPU; None: not measured for these heads or this KV dtype."""
        path = self.table_path("attention", "generation_attention_perf.parquet")
        return tables.attention_grid(path, heads, kv_heads, head_dim,
                                     KV_DTYPES.get(kv_dtype, kv_dtype), window, decode=True)

    def prefill_grid(self, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
                     window: int = 0) -> Grid | None:
        """Prefill attention of one layer over (batch, prompt length: causal, from the start)."""
        path = self.table_path("attention", "context_attention_perf.parquet")
        return tables.attention_grid(path, heads, kv_heads, head_dim,
                                     KV_DTYPES.get(kv_dtype, kv_dtype), window, decode=False)

    def mla_grid(self, model: str, heads: int, kv_dtype: str, gemm_dtype: str,
                 decode: bool) -> Grid | None:
        """A whole multi-head latent attention block of one layer (its down and up projections,
        attention over the latent and the output projection) of `model` (the package measured
        DeepSeek-V3's), `heads` per GPU, over (batch, prompt length) or (batch, KV length).
        SGLang's tables keep it under another name and layout, without its down projection
        (`tables.sglang_mla_grid`, `MLA_OUTSIDE`)."""
        phase = "generation" if decode else "context"
        kv_dtype = KV_DTYPES.get(kv_dtype, kv_dtype)
        if self.framework == "sglang":
            path = self.table_path("mla", f"wideep_{phase}_mla_perf.parquet")
            return tables.sglang_mla_grid(path, model, heads, gemm_dtype, decode)
        return tables.mla_grid(self.table_path("mla", f"mla_{phase}_module_perf.parquet"),
                               model, heads, kv_dtype, gemm_dtype, decode)

    def sparse_grid(self, model: str, heads: int, kv_dtype: str, gemm_dtype: str,
                    decode: bool) -> Grid | None:
        """A whole sparse-attention layer of `model` (the package measured DeepSeek-V3.2's and
        GLM-5's: `mla_block.SPARSE_BLOCK_OPS` and the sparse attention over `index_topk` keys a
        query), `heads` per GPU, over (batch, prompt length) or (batch, KV length). vLLM's and
        TensorRT-LLM's; SGLang's tables mix its kernels by length and are not read (None)."""
        if self.framework == "sglang":
            return None
        phase = "generation" if decode else "context"
        return tables.mla_grid(self.table_path("sparse_attention",
                                               f"dsa_{phase}_module_perf.parquet"),
                               model, heads, KV_DTYPES.get(kv_dtype, kv_dtype), gemm_dtype,
                               decode)

    def mla_attention_grid(self, heads: int, kv_dtype: str, decode: bool) -> Grid | None:
        """The attention of a multi-head latent attention layer alone, in DeepSeek-V3's head
        dims (the kernel the package measured without the block's projections, which are
        GEMMs), `heads` per GPU, over (batch, prompt length) or (batch, KV length)."""
        name = "generation_mla_perf.parquet" if decode else "context_mla_perf.parquet"
        return tables.mla_attention_grid(self.table_path("mla", name), heads,
                                         KV_DTYPES.get(kv_dtype, kv_dtype), decode)

    def linear_grid(self, k_heads: int, v_heads: int, k_dim: int, v_dim: int,
                    decode: bool) -> Grid | None:
        """A linear-attention layer's convolution and gated delta rule (Gated DeltaNet), its
        `k_heads` query and key heads and `v_heads` value heads on one GPU, over (batch,
        prompt length), or over batch at length 1 for decode; None: not measured so."""
        path = self.table_path("linear_attention", "gdn_perf.parquet")
        return tables.gdn_grid(path, k_heads, v_heads, k_dim, v_dim, decode)

    # --- communication ----------------------------------------------------------------------
    def all_reduce(self, tokens, hidden: int, gpus: int):
        """Seconds of an all-reduce of `tokens` x `hidden` 16-bit activations over `gpus`
        GPUs (the framework's custom all-reduce; in a CUDA graph up to `GRAPH_TOKENS` tokens,
        eager above where the tables have both); None: not measured for `gpus` GPUs."""
        tokens = np.asarray(tokens, dtype=np.float64)
        path = self.table_path("comm", "custom_allreduce_perf.parquet")
        graph = tables.all_reduce_curve(path, gpus, graph=True)
        if graph is None:
            return None
        eager = tables.all_reduce_curve(path, gpus, graph=False) or graph
        logs = np.log(np.maximum(tokens, 1.0) * hidden)
        out = np.where(tokens <= GRAPH_TOKENS, graph.log_at(logs), eager.log_at(logs))
        return np.exp(out) * 1e-3
