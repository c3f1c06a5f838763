"""The hardware cost model against measurements: the silicon-measured kernel tables, the GPUs
the roofline is calibrated on, and the NumPy engine on this machine.

0. The measured kernel tables (servesim[gpu], `sim/costs/hardware/kernels.py`), for every GPU
   that has them, under vLLM's newest collection: each kernel's points with every other point in
   the token dimension held out, (a) the held-out points predicted by interpolating the others
   (log-log, as the model does) and (b) the same points predicted by the roofline; median and
   p90 of |predicted - measured| / measured per GPU and operator family (GEMM in bf16 and fp8,
   decode and prefill attention, MoE experts, the custom all-reduce); and how far Marlin's MoE
   kernel carries from the shape it was measured at (`benchmarks/marlin_transfer.py`).
0c, 0d. End to end (`--only serving`, `--only trtllm`): servesim against real-GPU serving
   (`benchmarks/serving_accuracy.py` and `trtllm_page.py`, which say how each is simulated).
1. Refit the efficiencies to the shipped measurements (`sim.costs.hardware.calibration`) and say
   whether the fit equals the shipped `calibration.json`.
2. For each measured GPU (A100 80GB, H100 80GB) and operator: median and p90 of |predicted -
   measured| / measured and the mean signed error over every tensor-parallel degree and token
   count; the same for a whole layer (the operators summed); the all-reduce fit per node and
   GPU count.
3. Unless --no-engine: the same analytical model, given only this machine's measured peaks
   (`benchmarks/engine_speed.py`'s sgemm rate and memory bandwidth) and the NumPy engine's
   architecture (fp32, three separate QKV projections, full-rectangle prefill attention),
   predicts the engine's steps served in the real loop (the held-out profiling workloads), beside
   this machine's fitted profile on the same steps: as a pure roofline, and with the serving
   loop's measured per-step and per-sequence costs (docs/validation/fidelity.md, causes 4-5).

    python benchmarks/hardware_accuracy.py               # about 5 minutes (2 more to profile)
    python benchmarks/hardware_accuracy.py --no-engine   # the GPU parts alone
    python benchmarks/hardware_accuracy.py --only tables # part 0 alone
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from sim.cli.flag_types import positive_integer
from sim.profiling import threads

threads.apply(threads.DEFAULT_THREADS)  # before NumPy loads: the engine is served as profiled

import numpy as np  # noqa: E402

from sim.costs.hardware import layer_op_times  # noqa: E402
from sim.costs.hardware.calibration import (ELEMENTWISE_OPS, MATMULS, MEASURED_GPUS,  # noqa: E402
                                            calibrate, fit_all_reduce, operator_rows,
                                            read_measured)
from sim.costs.hardware.catalog import DATA, calibration  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving_accuracy  # noqa: E402  (this folder's)
import trtllm_page  # noqa: E402

OPS = (*MATMULS, *ELEMENTWISE_OPS)


def errors_text(errors: np.ndarray) -> str:
    a = np.abs(errors)
    return (f"{100 * np.median(a):6.1f}% {100 * np.quantile(a, 0.9):7.1f}% "
            f"{100 * errors.mean():+8.1f}%")


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
    from marlin_transfer import marlin_transfer

    marlin_transfer()


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
    from sim.costs.hardware.cost import operator_times

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


def gpu_part() -> None:
    fitted = json.loads(json.dumps(calibrate()))
    same = fitted == json.loads((DATA / "calibration.json").read_text())
    print(f"refit from the shipped measurements {'equals' if same else 'DIFFERS FROM'} "
          f"sim/costs/hardware/data/calibration.json\n")
    rows = read_measured("llama2_7b_layer_ops")
    print(f"{'gpu':6s} {'operator':26s} {'points':>6s} {'median':>7s} {'p90':>8s} {'mean':>9s}")
    for measured, (gpu_id, _) in MEASURED_GPUS.items():
        ops = operator_rows(rows, measured)
        layer_pred, layer_meas = 0, 0
        for op in OPS:
            tp, tokens, seconds = ops[op]
            pred = np.empty_like(seconds)
            for degree in np.unique(tp):
                at = tp == degree
                pred[at] = layer_op_times("meta-llama/Llama-2-7b-hf", gpu_id, int(degree),
                                          tokens[at])[op]
            repeats = 2 if op == "add" else 1  # two residual adds a layer
            layer_pred, layer_meas = layer_pred + repeats * pred, layer_meas + repeats * seconds
            print(f"{measured:6s} {op:26s} {len(seconds):6d} {errors_text(pred / seconds - 1)}")
        print(f"{measured:6s} {'layer (operators summed)':26s} {len(layer_meas):6d} "
              f"{errors_text(layer_pred / layer_meas - 1)}")
    print(f"\n{'node':9s} {'gpus':>4s} {'latency us':>10s} {'bus GB/s':>9s} {'median':>7s} "
          f"{'p90':>8s} {'mean':>9s}")
    reduce_rows = read_measured("all_reduce")
    for _, (_, node) in MEASURED_GPUS.items():
        for n, fit in fit_all_reduce(reduce_rows, node).items():
            mine = [r for r in reduce_rows if r["node"] == node and int(r["num_workers"]) == n
                    and int(r["devices_per_node"]) == n]
            size = np.array([float(r["size_bytes"]) for r in mine])
            seconds = np.array([float(r["all_reduce_ms"]) for r in mine]) / 1e3
            print(f"{node:9s} {n:4d} {fit.latency_s * 1e6:10.1f} {fit.bus_bandwidth / 1e9:9.1f} "
                  f"{errors_text(fit.time(size, n) / seconds - 1)}")
    print("\nEach catalog GPU uses its datasheet peaks with the efficiency curves of: "
          + ", ".join(f"{gpu} -> {table['measured']}" for gpu, table in _catalog().items()))


def _catalog() -> dict:
    from sim.costs.hardware import gpus

    return gpus()


def engine_part() -> None:
    from dataclasses import asdict

    from engine.model import ModelConfig, init_params
    from engine_speed import machine_figures
    from sim.costs import load_profile
    from sim.costs.hardware import HardwareCost, HardwareSetup, engine_architecture
    from sim.costs.hardware.catalog import Gpu
    from sim.costs.hardware.memory import memory_plan
    from sim.costs.hardware.operators import ELEMENTWISE
    from sim.costs.hardware.timing import Efficiency
    from sim.profiling.served import ServedSteps, served_steps, step_errors
    from sim.profiling.workloads import HELD_OUT
    from sim.validation.machine import profile_for

    config = ModelConfig()
    model = asdict(config)
    gflops, gbs = machine_figures(config, repeats=7)
    profile = load_profile(profile_for(model, progress=True))
    params = init_params(config)
    steps = ServedSteps.join([served_steps(*_served(w.config(model), params)) for w in HELD_OUT])
    arch = engine_architecture(config)
    cpu = Gpu(id="this-machine", name="this machine's CPU", memory_gib=64.0,
              memory_bandwidth_gbs=gbs, peak_tflops={"fp32": gflops / 1e3},
              interconnect_bandwidth_gbs=1.0, interconnect_latency_us=0.0, measured="a100")
    plan = memory_plan(arch, cpu.memory_bytes, 0.9, 1, 4, 4, 16, 2048, 32)
    setup = HardwareSetup(arch, cpu, 1, "fp32", plan, 4096, 16)
    ideal = Efficiency((1,), (1.0,), 1.0, 0.0, {op: (0.0, 1.0) for op in (*ELEMENTWISE, "emb")})
    print(f"\n{len(steps)} steps of the held-out workloads served by the NumPy engine (default "
          f"model); load average {os.getloadavg()[0]:.2f}")
    print(f"{'cost model':52s} {'median':>7s} {'p90':>8s} {'mean':>9s} {'pred/served':>12s}")
    for name, cost in (
            ("this machine's fitted profile", profile),
            (f"roofline: {gflops:.0f} GFLOP/s, {gbs:.0f} GB/s, nothing else",
             HardwareCost(setup, 0.0, 0.0, efficiency=ideal, async_scheduling=False)),
            ("roofline + the loop's 50 us a step, 60 us a sequence",
             HardwareCost(setup, 50e-6, 60e-6, efficiency=ideal, async_scheduling=False))):
        e = step_errors(cost, steps)
        print(f"{name:52s} {100 * e['median_abs_rel_error']:6.1f}% "
              f"{100 * e['p90_abs_rel_error']:7.1f}% {100 * e['mean_rel_error']:+8.1f}% "
              f"{e['total_time_ratio']:12.3f}")


def _served(config, params):
    from sim.profiling.serving import serve_logged

    recorder, log = serve_logged(config, params=params)
    return recorder, log.shapes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-engine", action="store_true",
                        help="only the GPU measurements (no serving on this machine)")
    parser.add_argument("--only", choices=("tables", "serving", "trtllm", "calibration",
                                           "engine"),
                        action="append", help="run only this part (repeatable)")
    parser.add_argument("--runs", type=positive_integer, default=None,
                        help="end to end: at most about this many of the measured runs")
    args = parser.parse_args(argv)
    parts = set(args.only or ("tables", "serving", "trtllm", "calibration", "engine"))
    if args.no_engine:
        parts.discard("engine")
    calibration()  # the shipped file reads
    if "tables" in parts:
        tables_part()
        print()
    if "serving" in parts:
        serving_accuracy.serving_part(args.runs)
        print()
    if "trtllm" in parts:
        trtllm_page.trtllm_part()
        print()
    if "calibration" in parts:
        gpu_part()
    if "engine" in parts:
        engine_part()
    return 0


if __name__ == "__main__":
    sys.exit(main())
