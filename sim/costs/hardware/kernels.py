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
fills older versions in.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from .interpolation import Curve, Difference, Grid, bracket

FRAMEWORKS = ("vllm", "sglang", "trtllm")
# servesim GPU ids with tables -> the package's system folder
SYSTEMS = {"a100-80gb-sxm": "a100_sxm", "h100-sxm": "h100_sxm", "h200": "h200_sxm",
           "b200": "b200_sxm", "gb200": "gb200", "b300": "b300_sxm", "gb300": "gb300",
           "l40s": "l40s", "rtx-pro-6000": "rtx_pro_6000_server"}
# servesim dtypes -> the tables' spellings (16-bit kernels were measured in bfloat16)
GEMM_DTYPES = {"fp16": "bfloat16", "bf16": "bfloat16", "fp8": "fp8", "nvfp4": "nvfp4"}
KV_DTYPES = {"fp16": "bfloat16", "bf16": "bfloat16", "fp8": "fp8"}
MOE_DTYPES = {"fp16": "bfloat16", "bf16": "bfloat16", "fp8": "fp8", "nvfp4": "nvfp4"}
# An fp8 (per-tensor) GEMM quantizes its activations with a scale fixed in the checkpoint
# ("static", as NVIDIA's ModelOpt FP8 checkpoints ship) or computed from them at every call
# ("dynamic"). The scheme each framework's GEMM tables were measured with (the package's
# collectors: vLLM's sets activation_scheme = "static"; TensorRT-LLM's Linear gets no input
# scale and so quantizes dynamically; SGLang's quantizes per token), and each framework's
# `quantize` tables time the difference, dynamic minus static.
ACTIVATION_SCHEMES = ("static", "dynamic")
MEASURED_ACTIVATIONS = {"vllm": "static", "sglang": "dynamic", "trtllm": "dynamic"}
# vLLM captures CUDA graphs for batches up to 512 tokens by default: an all-reduce in a step
# of more tokens runs eagerly (`backend` vllm_graph / vllm_eager, sglang_graph / _eager)
GRAPH_TOKENS = 512


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


def version_key(version: str) -> tuple:
    """Order of versions, as packaging orders them: 0.5.6.post2 < 0.5.10, 1.3.0rc20 < 1.3.0rc23
    < 1.3.0 (a release candidate before its release, a post-release after)."""
    match = re.match(r"(\d+(?:\.\d+)*)\.?([a-z]*)(\d*)", version)
    if match is None:
        return ((), 0, 0)
    numbers = tuple(int(part) for part in match.group(1).split("."))
    rank = {"dev": -3, "a": -2, "b": -2, "rc": -1, "": 0, "post": 1}.get(match.group(2), 0)
    return (numbers, rank, int(match.group(3) or 0))


def versions(gpu: str, framework: str, root: Path | None = None) -> list[str]:
    """The framework versions with a complete collection (GEMM and attention) for a GPU,
    oldest first; empty where there are none."""
    root = root or data_root()
    system = SYSTEMS.get(gpu)
    if root is None or system is None:
        return []
    gemm = _version_dirs(root / system / "gemm" / framework)
    attention = set(_version_dirs(root / system / "attention" / framework))
    return [v for v in gemm if v in attention]


def _version_dirs(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=version_key)


def _read(path: Path):
    import pandas as pd  # pandas reads parquet through pyarrow, which servesim[gpu] brings

    return pd.read_parquet(path)


class KernelTables:
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
        logm = np.log(np.asarray(m, dtype=np.float64))
        total = 0.0
        for ni, nw in n_side:
            for ki, kw in k_side:
                curve = curves.get((ns[ni], ks[ki]))
                if curve is None:
                    return None
                total = total + nw * kw * curve.log_at(logm)
        seconds = np.exp(total) * 1e-3
        if dtype == "fp8" and activations != MEASURED_ACTIVATIONS[self.framework]:
            extra = self.activation_scale_time(m, k)
            if extra is not None:
                seconds = seconds + extra if activations == "dynamic" else seconds - extra
        return seconds

    def activation_scale_time(self, m, k: int):
        """Seconds that computing an fp8 activation scale adds to quantizing m rows of width k
        (dynamic minus static quantization, as the framework measured it); None: the tables
        have no such measurement near k."""
        table = _scale_differences(self._table_path("quantize", "computescale_perf.parquet"))
        if table is None:
            return None
        ks, differences = table
        side = bracket(ks, k)
        if side is None:
            return None
        logm = np.log(np.asarray(m, dtype=np.float64))
        return sum(w * differences[ks[i]].at(logm) for i, w in side) * 1e-3

    def _gemm_shapes(self, dtype: str):
        return _gemm_curves(self._table_path("gemm", "gemm_perf.parquet"), dtype)

    def _table_path(self, family: str, name: str, framework: str | None = None) -> str | None:
        folder = self.root / self.system / family / (framework or self.framework)
        limit = version_key(self.version)
        for version in reversed(_version_dirs(folder)):
            path = folder / version / name
            if version_key(version) <= limit and path.is_file():
                return str(path)
        return None

    # --- attention --------------------------------------------------------------------------
    def decode_grid(self, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
                    window: int = 0) -> Grid | None:
        """Decode attention of one layer over (batch, KV length per sequence), `heads` and
        `kv_heads` per GPU; None: not measured for these heads or this KV dtype."""
        return _attention_grid(self._table_path("attention", "generation_attention_perf.parquet"),
                               heads, kv_heads, head_dim, KV_DTYPES.get(kv_dtype, kv_dtype),
                               window, decode=True)

    def prefill_grid(self, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
                     window: int = 0) -> Grid | None:
        """Prefill attention of one layer over (batch, prompt length: causal, from the start)."""
        return _attention_grid(self._table_path("attention", "context_attention_perf.parquet"),
                               heads, kv_heads, head_dim, KV_DTYPES.get(kv_dtype, kv_dtype),
                               window, decode=False)

    def mla_grid(self, model: str, heads: int, kv_dtype: str, gemm_dtype: str,
                 decode: bool) -> Grid | None:
        """A whole multi-head latent attention block of one layer (its down and up projections,
        attention over the latent and the output projection) of `model` (the package measured
        DeepSeek-V3's), `heads` per GPU, over (batch, prompt length) or (batch, KV length)."""
        name = "mla_generation_module_perf.parquet" if decode else \
            "mla_context_module_perf.parquet"
        return _mla_grid(self._table_path("mla", name), model, heads,
                         KV_DTYPES.get(kv_dtype, kv_dtype), gemm_dtype, decode)

    # --- mixture of experts -----------------------------------------------------------------
    def moe(self, tokens, hidden: int, inter: int, topk: int, experts: int, tp: int, ep: int,
            dtype: str, distribution: str = "power_law_1.2"):
        """Seconds of one MoE layer's experts for `tokens` tokens (before routing), their
        routing skewed as `distribution` ("balanced", "power_law_1.01", "power_law_1.2")."""
        curve = _moe_curve(self._table_path("moe", "moe_perf.parquet"),
                           MOE_DTYPES.get(dtype, dtype), hidden, inter, topk, experts, tp, ep,
                           distribution)
        if curve is None:
            return None
        return np.exp(curve.log_at(np.log(np.asarray(tokens, dtype=np.float64)))) * 1e-3

    # --- communication ----------------------------------------------------------------------
    def all_reduce(self, tokens, hidden: int, gpus: int):
        """Seconds of an all-reduce of `tokens` x `hidden` 16-bit activations over `gpus`
        GPUs (the framework's custom all-reduce; in a CUDA graph up to `GRAPH_TOKENS` tokens,
        eager above where the tables have both); None: not measured for `gpus` GPUs."""
        tokens = np.asarray(tokens, dtype=np.float64)
        path = self._table_path("comm", "custom_allreduce_perf.parquet")
        graph = _all_reduce_curve(path, gpus, graph=True)
        if graph is None:
            return None
        eager = _all_reduce_curve(path, gpus, graph=False) or graph
        logs = np.log(np.maximum(tokens, 1.0) * hidden)
        out = np.where(tokens <= GRAPH_TOKENS, graph.log_at(logs), eager.log_at(logs))
        return np.exp(out) * 1e-3


@lru_cache(maxsize=32)
def _cached_table(path: str):
    return _read(Path(path))


def _default_kernel(table):
    """The rows of the kernel measured most often: the framework's default implementation."""
    return table[table["kernel_source"] == table["kernel_source"].value_counts().index[0]]


def _grid_by_batch(table, length) -> Grid:
    """A `Grid` of the table's latencies: one curve over `length` per measured batch size."""
    batches, curves = [], []
    for batch, rows in table.assign(length=length).groupby("batch_size"):
        batches.append(float(batch))
        curves.append(Curve(rows["length"].to_numpy(), rows["latency"].to_numpy()))
    return Grid(batches, curves)


@lru_cache(maxsize=32)
def _gemm_curves(path: str | None, dtype: str):
    """(sorted n values, sorted k values, {(n, k): Curve over m}) of one dtype's GEMMs."""
    if path is None:
        return None
    table = _cached_table(path)
    table = table[table["gemm_dtype"] == dtype]
    if table.empty:
        return None
    table = _default_kernel(table)
    curves = {(int(n), int(k)): Curve(group["m"].to_numpy(), group["latency"].to_numpy())
              for (n, k), group in table.groupby(["n", "k"])}
    return (sorted({n for n, _ in curves}), sorted({k for _, k in curves}), curves)


@lru_cache(maxsize=32)
def _scale_differences(path: str | None):
    """(sorted k values, {k: Difference over m}) of the fp8 activation-scale times."""
    if path is None:
        return None
    table = _cached_table(path)
    table = table[table["quant_dtype"] == "fp8"]
    if table.empty:
        return None
    differences = {int(k): Difference(group["m"].to_numpy(), group["latency"].to_numpy())
                   for k, group in table.groupby("k")}
    return sorted(differences), differences


@lru_cache(maxsize=64)
def _attention_grid(path: str | None, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
                    window: int, decode: bool) -> Grid | None:
    if path is None:
        return None
    table = _cached_table(path)
    window_size = table["window_size"] if "window_size" in table else 0  # older: no windows
    table = table[(table["num_heads"] == heads) & (table["num_key_value_heads"] == kv_heads)
                  & (table["head_dim"] == head_dim) & (table["kv_cache_dtype"] == kv_dtype)
                  & (window_size == window)]
    if "attn_dtype" in table and not decode:
        table = table[table["attn_dtype"] == "bfloat16"]
    if table.empty:
        return None
    table = _default_kernel(table)
    length = table["step"] + 1 if decode else table["isl"]
    return _grid_by_batch(table, length)


@lru_cache(maxsize=16)
def _mla_grid(path: str | None, model: str, heads: int, kv_dtype: str, gemm_dtype: str,
              decode: bool) -> Grid | None:
    if path is None:
        return None
    table = _cached_table(path)
    table = table[(table["model"] == model) & (table["num_heads"] == heads)
                  & (table["kv_cache_dtype"] == kv_dtype) & (table["gemm_type"] == gemm_dtype)
                  & (table["mla_dtype"] == "bfloat16")]
    if table.empty:
        return None
    # the kernel measured most often, and another's points where it has none (vLLM's MLA
    # backends were each measured over part of the lengths)
    order = table["kernel_source"].value_counts().index
    table = table.assign(rank=table["kernel_source"].map({k: i for i, k in enumerate(order)}))
    table = table.sort_values("rank").drop_duplicates(["batch_size", "isl", "step"])
    length = table["step"] if decode else table["isl"]  # the KV length, or the prompt's
    return _grid_by_batch(table, length)


@lru_cache(maxsize=64)
def _moe_curve(path: str | None, dtype: str, hidden: int, inter: int, topk: int, experts: int,
               tp: int, ep: int, distribution: str) -> Curve | None:
    if path is None:
        return None
    table = _cached_table(path)
    table = table[(table["moe_dtype"] == dtype) & (table["hidden_size"] == hidden)
                  & (table["inter_size"] == inter) & (table["topk"] == topk)
                  & (table["num_experts"] == experts) & (table["moe_tp_size"] == tp)
                  & (table["moe_ep_size"] == ep)
                  & (table["distribution"] == distribution)]
    if table.empty:
        return None
    table = _default_kernel(table)
    return Curve(table["num_tokens"].to_numpy(), table["latency"].to_numpy())


@lru_cache(maxsize=32)
def _all_reduce_curve(path: str | None, gpus: int, graph: bool) -> Curve | None:
    if path is None:
        return None
    table = _cached_table(path)
    table = table[table["num_gpus"] == gpus]
    if "backend" in table:
        table = table[table["backend"].str.endswith("_graph" if graph else "_eager")]
    elif not graph:
        return None  # one implementation (TensorRT-LLM): the graph curve serves every step
    if table.empty:
        return None
    return Curve(table["message_size"].to_numpy(), table["latency"].to_numpy())
