"""One measured table read into what the lookups of `kernels.py` interpolate: the rows of one
shape and dtype, of the kernel the framework runs by default (the one measured most often; a
GEMM shape's rows beyond those from the others, `dispatched_kernels`), as `Curve`s over the
token dimension or `Grid`s of curves by batch size. Each is read once per
process (cached by path and shape); `None` where the table has no such rows.
"""

from __future__ import annotations

import math
from functools import lru_cache

from .interpolation import Curve, Difference, Grid


@lru_cache(maxsize=32)
def cached_table(path: str):
    """The whole table at `path` (a parquet file), latencies in milliseconds."""
    import pandas as pd  # pandas reads parquet through pyarrow, which servesim[gpu] brings

    return pd.read_parquet(path)


def default_kernel(table):
    """The rows of the kernel measured most often: the framework's default implementation."""
    return table[table["kernel_source"] == table["kernel_source"].value_counts().index[0]]


def is_triton(kernel: str) -> bool:
    """Whether a fused MoE kernel the tables name is Triton's: named so, or vLLM's
    `fused_experts` ("vllm_fused_moe"), its Triton kernel, as the package's collectors for vLLM
    0.14 to 0.22 name it."""
    return "triton" in kernel.lower() or kernel == "vllm_fused_moe"


def grid_by_batch(table, length) -> Grid:
    """A `Grid` of the table's latencies: one curve over `length` per measured batch size."""
    batches, curves = [], []
    for batch, rows in table.assign(length=length).groupby("batch_size"):
        batches.append(float(batch))
        curves.append(Curve(rows["length"].to_numpy(), rows["latency"].to_numpy()))
    return Grid(batches, curves)


@lru_cache(maxsize=32)
def gemm_curves(path: str | None, dtype: str):
    """(sorted n values, sorted k values, {(n, k): Curve over m}) of one dtype's GEMMs."""
    if path is None:
        return None
    table = cached_table(path)
    table = table[table["gemm_dtype"] == dtype]
    if table.empty:
        return None
    table = dispatched_kernels(table)
    curves = {(int(n), int(k)): Curve(group["m"].to_numpy(), group["latency"].to_numpy())
              for (n, k), group in table.groupby(["n", "k"])}
    return (sorted({n for n, _ in curves}), sorted({k for _, k in curves}), curves)


def dispatched_kernels(table):
    """The GEMM rows of the kernel measured most often (`default_kernel`) and, shape by shape,
    the other kernels' rows below and above the rows it was measured at: a framework that
    dispatches by rows (vLLM's block-scaled fp8 GEMMs on Hopper: FlashInfer's up to 17 rows,
    DeepGEMM's from 32) was measured where each kernel runs."""
    import pandas as pd

    order = table["kernel_source"].value_counts().index
    rows = table[table["kernel_source"] == order[0]]
    for kernel in order[1:]:
        span = rows.groupby(["n", "k"])["m"].agg(["min", "max"])
        other = table[table["kernel_source"] == kernel].join(span, on=["n", "k"], how="inner")
        other = other[(other["m"] < other["min"]) | (other["m"] > other["max"])]
        rows = pd.concat([rows, other[table.columns]])
    return rows


@lru_cache(maxsize=32)
def scale_differences(path: str | None):
    """(sorted k values, {k: Difference over m}) of the fp8 activation-scale times."""
    if path is None:
        return None
    table = cached_table(path)
    table = table[table["quant_dtype"] == "fp8"]
    if table.empty:
        return None
    differences = {int(k): Difference(group["m"].to_numpy(), group["latency"].to_numpy())
                   for k, group in table.groupby("k")}
    return sorted(differences), differences


@lru_cache(maxsize=64)
def attention_grid(path: str | None, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
                    window: int, decode: bool) -> Grid | None:
    if path is None:
        return None
    table = cached_table(path)
    window_size = table["window_size"] if "window_size" in table else 0  # older: no windows
    table = table[(table["num_heads"] == heads) & (table["num_key_value_heads"] == kv_heads)
                  & (table["head_dim"] == head_dim) & (table["kv_cache_dtype"] == kv_dtype)
                  & (window_size == window)]
    if table.empty:
        return None
    table = default_kernel(table)
    if "attn_dtype" in table and not decode:
        # its attention math in bf16 where the kernel was measured so (TensorRT-LLM's, both);
        # else as it was (SGLang's default with an fp8 cache computes in fp8, and only so)
        bf16 = table[table["attn_dtype"] == "bfloat16"]
        table = table if bf16.empty else bf16
    length = table["step"] + 1 if decode else table["isl"]
    return grid_by_batch(table, length)


@lru_cache(maxsize=16)
def mla_grid(path: str | None, model: str, heads: int, kv_dtype: str, gemm_dtype: str,
              decode: bool) -> Grid | None:
    if path is None:
        return None
    table = cached_table(path)
    table = table[(table["model"] == model) & (table["num_heads"] == heads)
                  & (table["kv_cache_dtype"] == kv_dtype) & (table["gemm_type"] == gemm_dtype)
                  & (table["mla_dtype"] == "bfloat16")]
    if not decode:  # fresh prompts (the sparse blocks' also hold prompts after 128 cached)
        table = table[table["step"] == 0]
    if table.empty:
        return None
    # the kernel measured most often, and another's points where it has none (vLLM's MLA
    # backends were each measured over part of the lengths)
    order = table["kernel_source"].value_counts().index
    table = table.assign(rank=table["kernel_source"].map({k: i for i, k in enumerate(order)}))
    table = table.sort_values("rank").drop_duplicates(["batch_size", "isl", "step"])
    length = table["step"] if decode else table["isl"]  # the KV length, or the prompt's
    return grid_by_batch(table, length)


@lru_cache(maxsize=16)
def gdn_grid(path: str | None, k_heads: int, v_heads: int, k_dim: int, v_dim: int,
             decode: bool) -> Grid | None:
    """The Gated DeltaNet kernels of one layer over (batch, length) (`gdn_points`)."""
    both = gdn_points(path, k_heads, v_heads, k_dim, v_dim, decode)
    if both is None:
        return None
    both = both.reset_index()
    return grid_by_batch(both, both["seq_len"])


def gdn_points(path: str | None, k_heads: int, v_heads: int, k_dim: int, v_dim: int,
               decode: bool):
    """The Gated DeltaNet kernels of one layer, milliseconds by (batch_size, seq_len): the
    causal convolution and the gated delta rule (chunked in prefill, recurrent in decode),
    their times added at each point both were measured at (the mean where several models
    share the heads); None unless the phase has one kernel of each."""
    if path is None:
        return None
    table = cached_table(path)
    table = table[(table["num_k_heads"] == k_heads) & (table["num_v_heads"] == v_heads)
                  & (table["head_k_dim"] == k_dim) & (table["head_v_dim"] == v_dim)
                  & (table["phase"] == ("generation" if decode else "context"))]
    kernels = sorted(set(table["kernel_source"]))
    conv = [k for k in kernels if k.startswith("causal_conv1d")]
    rule = [k for k in kernels if "gated_delta_rule" in k]
    if len(conv) != 1 or len(rule) != 1:
        return None
    points = ["batch_size", "seq_len"]
    times = [table[table["kernel_source"] == k].groupby(points)["latency"].mean()
             for k in (conv[0], rule[0])]
    return (times[0] + times[1]).dropna().rename("latency")


# SGLang's default latent-attention backend on Hopper and on Blackwell (its server_args), of
# which its block tables hold one or the other
SGLANG_MLA_KERNELS = ("fa3", "trtllm_mla")


@lru_cache(maxsize=16)
def sglang_mla_grid(path: str | None, model: str, heads: int, gemm_dtype: str,
                    decode: bool) -> Grid | None:
    """`mla_grid` from SGLang's block tables (`wideep_*_mla_perf`, named for the wide expert-
    parallel deployments they were measured for: `heads` on one GPU, the block's GEMMs in
    `gemm_dtype`), its default kernel's rows, whatever the run's KV dtype: their collector
    set no KV dtype, so SGLang's default cache (bf16) ran, though the rows say fp8. A row of
    `isl` is a prompt of that length, or a decode step over `isl` cached tokens and its own
    (`step` is 0). The block leaves out the fused down projection (`kernels.MLA_OUTSIDE`)."""
    if path is None:
        return None
    table = cached_table(path)
    if not {"model", "gemm_type"} <= set(table.columns):  # the oldest collection names neither
        return None
    table = table[(table["model"] == model) & (table["num_heads"] == heads)
                  & (table["gemm_type"] == gemm_dtype) & (table["tp_size"] == 1)]
    if table.empty:
        return None
    kernel = next((k for k in SGLANG_MLA_KERNELS if k in set(table["kernel_source"])), None)
    table = default_kernel(table) if kernel is None else \
        table[table["kernel_source"] == kernel]
    return grid_by_batch(table, table["isl"] + table["step"] + (1 if decode else 0))


@lru_cache(maxsize=16)
def mla_attention_grid(path: str | None, heads: int, kv_dtype: str, decode: bool) -> Grid | None:
    if path is None:
        return None
    table = cached_table(path)
    table = table[(table["num_heads"] == heads) & (table["kv_cache_dtype"] == kv_dtype)
                  & (table["mla_dtype"] == "bfloat16")]
    if table.empty:
        return None
    table = default_kernel(table)
    length = table["step"] + 1 if decode else table["isl"]  # as `attention_grid`'s
    return grid_by_batch(table, length)


@lru_cache(maxsize=64)
def moe_curve(path: str | None, dtype: str, hidden: int, inter: int, topk: int, experts: int,
               tp: int, ep: int, distribution: str, kernel: str = "auto") -> Curve | None:
    """The fused MoE kernel's time over tokens at one shape and layout: the default kernel's
    (`kernel` "auto"), or Triton's ("triton", `is_triton`); None: not measured so."""
    if path is None:
        return None
    table = cached_table(path)
    table = table[(table["moe_dtype"] == dtype) & (table["hidden_size"] == hidden)
                  & (table["inter_size"] == inter) & (table["topk"] == topk)
                  & (table["num_experts"] == experts) & (table["moe_tp_size"] == tp)
                  & (table["moe_ep_size"] == ep)
                  & (table["distribution"] == distribution)]
    if kernel == "triton":
        table = table[table["kernel_source"].map(is_triton)]
    if table.empty:
        return None
    table = default_kernel(table)
    return Curve(table["num_tokens"].to_numpy(), table["latency"].to_numpy())


MOE_SHAPE = ("hidden_size", "inter_size", "topk", "num_experts")


@lru_cache(maxsize=16)
def nearest_moe_curve(path: str | None, dtype: str, shape: tuple, tp: int, ep: int,
                      distribution: str, kernel: str | None = None,
                      at: tuple | None = None) -> tuple[Curve, tuple] | None:
    """A fused MoE kernel in `dtype` at TP `tp`, EP `ep` (with `kernel`, those whose name holds
    it alone, "marlin": Marlin's): (its curve over tokens, the (hidden, inter, topk, experts) it
    was measured at): at `at` where given, else at `shape` where measured there, else at the
    measured shape whose experts are nearest in size (experts x hidden x inter); of the kernels
    there, the one measured most. None: not measured so."""
    if path is None:
        return None
    table = cached_table(path)
    table = table[(table["moe_dtype"] == dtype) & (table["moe_tp_size"] == tp)
                  & (table["moe_ep_size"] == ep) & (table["distribution"] == distribution)]
    if kernel is not None:
        table = table[table["kernel_source"].str.contains(kernel, case=False)]
    if table.empty:
        return None
    shapes = {tuple(int(v) for v in row) for row in table[list(MOE_SHAPE)].to_numpy()}

    def distance(other):
        hidden, inter, _, experts = other
        return abs(math.log(hidden * inter * experts / (shape[0] * shape[1] * shape[3])))
    if at is not None and at not in shapes:
        return None
    found = at or (shape if shape in shapes else min(sorted(shapes), key=distance))
    rows = default_kernel(table[(table[list(MOE_SHAPE)] == list(found)).all(axis=1)])
    return Curve(rows["num_tokens"].to_numpy(), rows["latency"].to_numpy()), found


@lru_cache(maxsize=16)
def marlin_layouts(path: str | None, dtype: str, distribution: str) -> tuple:
    """The (moe TP, moe EP) layouts at which Marlin's fused MoE kernel was measured in
    `dtype`, in order."""
    if path is None:
        return ()
    table = cached_table(path)
    table = table[(table["moe_dtype"] == dtype) & (table["distribution"] == distribution)
                  & table["kernel_source"].str.contains("marlin", case=False)]
    return tuple(sorted({(int(tp), int(ep)) for tp, ep in
                         table[["moe_tp_size", "moe_ep_size"]].to_numpy()}))


@lru_cache(maxsize=32)
def all_reduce_curve(path: str | None, gpus: int, graph: bool) -> Curve | None:
    if path is None:
        return None
    table = cached_table(path)
    table = table[table["num_gpus"] == gpus]
    if "backend" in table:
        table = table[table["backend"].str.endswith("_graph" if graph else "_eager")]
    elif not graph:
        return None  # one implementation (TensorRT-LLM): the graph curve serves every step
    if table.empty:
        return None
    return Curve(table["message_size"].to_numpy(), table["latency"].to_numpy())
