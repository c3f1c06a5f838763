"""Part 0 of `benchmarks/hardware_accuracy.py`: the measured kernel tables (servesim[gpu],
`sim/costs/hardware/kernels.py`), for every GPU that has them, under vLLM's newest collection:
each kernel's points with every other point in the token dimension held out, (a) the held-out
points predicted by interpolating the others (log-log, as the model does) and (b) the same
points predicted by the roofline; median and p90 of |predicted - measured| / measured per GPU
and operator family (GEMM in bf16 and fp8, decode and prefill attention, MoE experts, the custom
all-reduce); how far apart the GEMM points measured one row apart are; how far Marlin's MoE
kernel and MXFP8 activations carry from the shape measured (`moe_transfer.py`); and the Gated
DeltaNet kernels of linear attention, every framework's (`linear_attention_accuracy.py`).

    python benchmarks/hardware_accuracy.py --only tables   # about 20 seconds; or this file alone
"""

from __future__ import annotations

import numpy as np


def tables_part() -> None:
    """Part 0: held-out interpolation error beside the roofline's, per GPU and family."""
    from sim.costs.hardware import kernels

    if kernels.data_root() is None:
        print("the measured kernel tables need servesim[gpu] (pip install 'servesim[gpu]')")
        return
    print(f"{'gpu':14s} {'family':22s} {'points':>7s} {'interp median':>14s} {'p90':>7s} "
          f"{'roofline median':>16s} {'p90':>7s}")
    for gpu in kernels.SYSTEMS:
        for family, (interp, roof) in held_out_errors(kernels.KernelTables(gpu, "vllm")).items():
            print(f"{gpu:14s} {family:22s} {len(interp):7d} "
                  f"{100 * np.median(interp):13.1f}% {100 * np.quantile(interp, 0.9):6.1f}% "
                  + (f"{100 * np.median(roof):15.1f}% {100 * np.quantile(roof, 0.9):6.1f}%"
                     if len(roof) else f"{'n/a':>16s} {'':>7s}"))
    print("\nGEMM points measured one row apart (m = 16k and 16k + 1, 32 <= m): |difference|, "
          "the steps and noise no interpolation between them can know")
    for gpu in kernels.SYSTEMS:
        for dtype, steps in row_steps(kernels.KernelTables(gpu, "vllm")).items():
            if len(steps):
                print(f"{gpu:14s} gemm {dtype:17s} {len(steps):7d} "
                      f"{100 * np.median(steps):13.1f}% {100 * np.quantile(steps, 0.9):6.1f}%")
    versions = "/".join(sorted({kernels.versions(g, "vllm")[-1] for g in kernels.SYSTEMS}))
    print(f"\n(interpolation: every other measured point in the token dimension predicted from "
          f"the rest; roofline: the datasheet peaks with the fitted efficiencies, where the GPU "
          f"is in the catalog; vLLM {versions})\n")
    from linear_attention_accuracy import linear_attention_accuracy
    from moe_transfer import moe_transfer

    moe_transfer()
    print()
    linear_attention_accuracy()


def held_out_errors(measured) -> dict:
    """{family: (|interpolation errors|, |roofline errors|)} of one GPU's tables."""
    from sim.costs.hardware import gpu_spec, kernels, tables
    from sim.costs.hardware.timing import matmul_time

    try:
        gpu = gpu_spec(measured.gpu)
    except ValueError:
        gpu = None  # not in the catalog: no roofline to compare
    out = {}
    for dtype in ("bf16", "fp8"):
        path = measured.table_path("gemm", "gemm_perf.parquet")
        shapes = tables.gemm_curves(path, kernels.GEMM_DTYPES[dtype])
        if shapes is None:
            continue
        table = tables.cached_table(path)
        table = table[table["gemm_dtype"] == kernels.GEMM_DTYPES[dtype]]
        kernel = table["kernel_source"].value_counts().index[0]
        table = table[table["kernel_source"] == kernel]
        interp, roof = [], []
        for (n, k), rows in table.groupby(["n", "k"]):
            m, ms = _sorted(rows["m"], rows["latency"])
            interp.append(_held_out(m, ms))
            if gpu is not None and dtype in gpu.peak_tflops:
                size = 1 if dtype == "fp8" else 2
                flops, nbytes = 2 * m * n * k, (n * k * size + m * (n + k) * 2)
                pred = matmul_time(flops, nbytes, m, gpu.peak_flops(dtype), gpu.bandwidth,
                                   gpu.efficiency())
                roof.append(np.abs(pred[1::2] / ms[1::2] - 1))
        out[f"gemm {dtype}"] = (np.concatenate(interp), np.concatenate(roof) if roof else [])
    for decode, name in ((True, "decode attention"), (False, "prefill attention")):
        file = "generation_attention_perf.parquet" if decode else "context_attention_perf.parquet"
        path = measured.table_path("attention", file)
        table = tables.cached_table(path)
        window = table["window_size"] if "window_size" in table else 0
        table = table[(window == 0) & (table["kv_cache_dtype"] == "bfloat16")
                      & (table["head_dim"] == 128) & (table["attn_dtype"] == "bfloat16")]
        interp, roof = [], []
        for (heads, kv, batch, _), rows in table.groupby(["num_heads", "num_key_value_heads",
                                                         "batch_size", "kernel_source"]):
            length, ms = _sorted(rows["step"] + 1 if decode else rows["isl"], rows["latency"])
            if len(length) < 3:
                continue
            interp.append(_held_out(length, ms))
            if gpu is not None:
                roof.append(np.abs(_attention_roofline(gpu, heads, kv, batch, length, decode)
                                   [1::2] / ms[1::2] - 1))
        out[name] = (np.concatenate(interp), np.concatenate(roof) if roof else [])
    path = measured.table_path("moe", "moe_perf.parquet")
    if path is not None:
        table = tables.cached_table(path)
        table = table[table["moe_dtype"] == "bfloat16"]
        interp, roof = [], []
        for shape, rows in table.groupby(["hidden_size", "inter_size", "topk", "num_experts",
                                          "moe_tp_size", "moe_ep_size", "kernel_source",
                                          "distribution"]):
            if len(rows) < 3:
                continue
            tokens, seconds = _sorted(rows["num_tokens"], rows["latency"])
            interp.append(_held_out(tokens, seconds))
            if gpu is not None:
                roof.append(np.abs(_experts_roofline(gpu, *shape[:6], tokens)[1::2]
                                   / seconds[1::2] - 1))
        if interp:
            out["moe experts bf16"] = (np.concatenate(interp),
                                       np.concatenate(roof) if roof else [])
    path = measured.table_path("comm", "custom_allreduce_perf.parquet")
    if path is not None:
        table = tables.cached_table(path)
        interp, roof = [], []
        flavour = "backend" if "backend" in table else "implementation"
        for (gpus, _), rows in table.groupby(["num_gpus", flavour]):
            size, ms = _sorted(rows["message_size"], rows["latency"])
            interp.append(_held_out(size, ms))
            ring = gpu.all_reduce(int(gpus)) if gpu is not None else None
            if ring is not None:
                roof.append(np.abs(ring.time(size * 2, int(gpus))[1::2] / ms[1::2] - 1))
        out["all-reduce"] = (np.concatenate(interp), np.concatenate(roof) if roof else [])
    return out


def row_steps(measured) -> dict:
    """{dtype: |t(m + 1) / t(m) - 1|} over the GEMM points measured one row apart (the grid
    measures m = 16k and 16k + 1 around tile edges), of the kernel each dtype's GEMMs use."""
    from sim.costs.hardware import kernels, tables

    out = {}
    path = measured.table_path("gemm", "gemm_perf.parquet")
    table = tables.cached_table(path)
    for dtype in ("bf16", "fp8"):
        rows = table[table["gemm_dtype"] == kernels.GEMM_DTYPES[dtype]]
        if rows.empty:
            continue
        rows = rows[rows["kernel_source"] == rows["kernel_source"].value_counts().index[0]]
        steps = []
        for _, shape in rows.groupby(["n", "k"]):
            latency = dict(zip(shape["m"], shape["latency"]))
            steps += [latency[m + 1] / latency[m] - 1 for m in latency
                      if m >= 32 and m % 16 == 0 and m + 1 in latency]
        out[dtype] = np.abs(steps)
    return out


def _sorted(sizes, latencies):
    """(sizes in order, seconds): a size measured more than once taken once, as the model
    takes it (the geometric mean of its times: `interpolation.merged`)."""
    from sim.costs.hardware.interpolation import merged

    sizes, logs = merged(sizes, np.log(np.asarray(latencies, dtype=float) * 1e-3))
    return sizes, np.exp(logs)


def _held_out(sizes: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """|error| of the odd-index points (distinct sizes, in order: `_sorted`) predicted from the
    even-index ones (`interpolation.Curve`)."""
    from sim.costs.hardware.interpolation import Curve

    kept = Curve(sizes[0::2], seconds[0::2] * 1e3)
    predicted = np.exp(kept.log_at(np.log(sizes[1::2]))) * 1e-3
    errors = np.abs(predicted / seconds[1::2] - 1)
    return errors[np.isfinite(errors)]  # a last point 2x past the kept ones: not extrapolated


def _experts_roofline(gpu, hidden, inter, topk, experts, tp, ep, tokens) -> np.ndarray:
    """One mixture-of-experts layer's routed experts (gate and up, activation, down) by the
    hardware model's roofline, 16-bit, with the table's TP x EP split (`operators.py`)."""
    from sim.costs.hardware.architecture import Architecture
    from sim.costs.hardware.row_tables import operator_times

    gpus = max(int(tp), int(ep))
    arch = Architecture(n_layers=1, d_model=int(hidden), n_heads=gpus, n_kv_heads=gpus,
                        d_ff=int(inter), vocab_size=gpus, max_seq_len=2, head_dim=1,
                        n_experts=int(experts), experts_per_token=int(topk),
                        moe_d_ff=int(inter))
    times = operator_times(arch, gpus, int(ep), tokens, 2, 2, gpu.peak_flops("bf16"),
                           gpu.bandwidth, gpu.efficiency())
    return times["moe_up_proj"] + times["moe_act"] + times["moe_down_proj"]


def _attention_roofline(gpu, heads, kv, batch, length, decode: bool) -> np.ndarray:
    """One layer's attention by the hardware model's roofline (`cost.py`), 16-bit, head dim
    128."""
    eff, hd = gpu.efficiency(), 128
    peak, bandwidth = gpu.peak_flops("bf16"), gpu.bandwidth
    q, kvd = heads * hd, kv * hd
    if decode:
        flops = 4 * q * batch * length
        nbytes = 2 * batch * q * 2 + 2 * kvd * batch * length * 2
        return eff.launch_s + np.maximum(flops / (peak * eff.compute[-1]),
                                         nbytes / (bandwidth * eff.memory))
    tokens = batch * length
    flops = 4 * q * batch * length * (length + 1) / 2
    nbytes = 2 * tokens * q * 2 + 2 * kvd * tokens * 2
    return eff.launch_s + np.maximum(flops / (peak * eff.compute_at(tokens)),
                                     nbytes / (bandwidth * eff.memory))


if __name__ == "__main__":
    tables_part()
