"""The hardware cost model against measurements: the silicon-measured kernel tables, the GPUs
the roofline is calibrated on, and the NumPy engine on this machine.

0. The measured kernel tables (`--only tables`: `benchmarks/table_accuracy.py`, which says
   how), held out point by point, interpolated and by the roofline; and how far Marlin's MoE
   kernel and MXFP8 activations carry from the shape measured (`benchmarks/moe_transfer.py`).
0c, 0d. End to end (`--only serving`, `--only trtllm`): servesim against real-GPU serving
   (`benchmarks/serving_accuracy.py` and `trtllm_page.py`, which say how each is simulated);
   and, asked for alone (`--only overhead`), with each server's prefill overhead set from one
   of its runs (`benchmarks/prefill_overhead.py`).
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
import prefill_overhead  # noqa: E402  (this folder's)
import serving_accuracy  # noqa: E402
import table_accuracy  # noqa: E402
import trtllm_page  # noqa: E402

OPS = (*MATMULS, *ELEMENTWISE_OPS)


def errors_text(errors: np.ndarray) -> str:
    a = np.abs(errors)
    return (f"{100 * np.median(a):6.1f}% {100 * np.quantile(a, 0.9):7.1f}% "
            f"{100 * errors.mean():+8.1f}%")


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
    parser.add_argument("--only", choices=("tables", "serving", "trtllm", "overhead",
                                           "calibration", "engine"),
                        action="append", help="run only this part (repeatable)")
    parser.add_argument("--runs", type=positive_integer, default=None,
                        help="end to end: at most about this many of the measured runs")
    args = parser.parse_args(argv)
    parts = set(args.only or ("tables", "serving", "trtllm", "calibration", "engine"))
    if args.no_engine:
        parts.discard("engine")
    calibration()  # the shipped file reads
    if "tables" in parts:
        table_accuracy.tables_part()
        print()
    if "serving" in parts:
        serving_accuracy.serving_part(args.runs)
        print()
    if "trtllm" in parts:
        trtllm_page.trtllm_part()
        print()
    if "overhead" in parts:
        prefill_overhead.overhead_part(args.runs)
        print()
    if "calibration" in parts:
        gpu_part()
    if "engine" in parts:
        engine_part()
    return 0


if __name__ == "__main__":
    sys.exit(main())
