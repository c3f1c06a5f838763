"""Simulator speed: requests and steps per second of wall time, and peak memory, six ways.

- replay: the whole Azure conversation trace (19,366 requests) at its real rate, as a user runs
  it: `servesim run benchmarks/azure-conv-real-rate.toml` timed as a whole process (imports,
  simulation, every report file), beside the simulation alone with fast forward and step by step
  (`run_config(..., fast_forward=False)`), with a check that both give the same records;
- saturated: the same trace replayed 1.5x faster than a large server serves it (the default
  profile's costs, 256 sequences, 65,536 KV blocks, chunked prefill): big batches, a queue that
  grows for the whole run; beside it, the same run counting every sequence every step
  (`fast_forward=False`: no bulk counting of steady decoders), with a check of the records;
- synthetic: --requests requests (default 1,000,000) with lognormal lengths fitted to the trace
  and Poisson arrivals at the same overload;
- hardware: the whole trace at its real rate on the `llama3-8b-h100` server (256 sequences,
  8,192 tokens a step, chunked prefill), costed by the hardware model (Llama-3.1-8B on an H100)
  and by the fitted default profile, the two simulations alternated `--repeats` times (so the
  machine's drift falls on both), the best of each compared.
- mooncake: the whole Mooncake conversation trace (12,031 requests of 12,035 prompt tokens on
  average) with prefix caching on, on four H100s (the hardware model):
  `servesim run benchmarks/mooncake-conv-full.toml` timed as a whole process, beside the
  simulation alone with fast forward and step by step, with a check that both give the same
  records (prefix-cache counts included) and the hit rate reached.
- cluster: sixteen replicas of the replay's server behind a least-outstanding router serving
  the whole Azure conversation trace compressed 16x (`benchmarks/azure-conv-16x-cluster.toml`),
  `servesim run` timed as a whole process, with its peak memory.
Each part runs in its own process, so each peak memory (ru_maxrss) is its own. The machine's
state is printed with the figures: the seconds a fixed pure-Python loop takes (its speed) and
the load average.

    python benchmarks/sim_speed.py                   # all six (several minutes)
    python benchmarks/sim_speed.py --requests 50000  # a quick check
    python benchmarks/sim_speed.py --only replay
    python benchmarks/sim_speed.py --only hardware
    python benchmarks/sim_speed.py --only mooncake
    python benchmarks/sim_speed.py --only cluster
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path


import numpy as np

from engine.benchmark import summarize, weighted_percentile
from engine.model import ModelConfig
from scenarios.resolve import resolve
from sim.cli.flag_types import positive_integer
from sim.runner import run_config
from sim.workloads.traces import load_trace, shipped_trace

HERE = Path(__file__).resolve().parent
REPLAY = HERE / "azure-conv-real-rate.toml"
MOONCAKE = HERE / "mooncake-conv-full.toml"
CLUSTER = HERE / "azure-conv-16x-cluster.toml"
TRACE = shipped_trace("azure-conv")  # the Azure conversation trace, shipped with servesim
OVERLOAD = 1.5  # arrival rate / service rate
SERVER = {
    "name": "sim-speed", "description": "", "seed": 0, "mode": "simulate",
    "model": {k: v for k, v in vars(ModelConfig()).items() if k != "seed"} | {"max_seq_len": 16384},
    "engine": {"block_size": 16, "num_kv_blocks": 65536, "max_num_seqs": 256,
               "max_num_batched_tokens": 8192, "enable_prefix_caching": False},
    "scheduler": {"policy": "continuous", "queue": "fcfs", "chunked_prefill": True,
                  "max_batch_size": 256, "batch_timeout_s": 0.0},
    "cost": {"model": "profile", "profile": "default", "jitter": False, "step_overhead_s": 0.0,
             "prefill_token_s": 0.0, "decode_seq_s": 0.0, "context_token_s": 0.0},
    "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
}


def machine_state() -> str:
    """How fast this machine runs Python right now, and how busy it is."""
    t0 = time.perf_counter()
    total = 0
    for i in range(5_000_000):
        total += i
    loop_s = time.perf_counter() - t0
    return (f"machine: a 5,000,000-iteration Python loop took {loop_s:.3f} s; load average "
            f"{os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")


# --- the real-rate replay --------------------------------------------------------------------------


def replay_whole_process(repeats: int, scenario: Path = REPLAY) -> dict:
    """`servesim run` of a scenario (the real-rate replay), timed from outside, `repeats`
    times."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "sim.cli", "run", str(scenario), "--out",
                            str(Path(tmp) / "out"), "--quiet"], check=True,
                           stdout=subprocess.DEVNULL, cwd=HERE.parent)
            times.append(time.perf_counter() - t0)
        steps = sum(1 for _ in open(Path(tmp) / "out" / "steps.csv")) - 1
        requests = sum(1 for _ in open(Path(tmp) / "out" / "requests.csv")) - 1
    return {"requests": requests, "steps": steps, "best_s": min(times),
            "median_s": float(np.median(times)),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def replay_in_process(repeats: int, scenario: Path = REPLAY) -> dict:
    """A scenario's simulation alone (best of `repeats`), with fast forward and step by step;
    the same records?"""
    import scenarios

    config = scenarios.load(scenario).runs()[0].config
    out = {}
    for name, fast in (("fast_forward", True), ("step_by_step", False)):
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            recorder = run_config(config, fast_forward=fast)
            best = min(best, time.perf_counter() - t0)
        out[f"{name}_s"], out[name] = best, recorder
    same = _records(out["fast_forward"]) == _records(out["step_by_step"])
    summary = summarize(out["fast_forward"])
    return {"fast_forward_s": out["fast_forward_s"], "step_by_step_s": out["step_by_step_s"],
            "steps": out["fast_forward"].num_steps, "identical": same,
            "prefix_cache_hit_rate": summary["prefix_cache_hit_rate"]}


def _records(recorder) -> list:
    steps = recorder.step_columns()
    requests = recorder.request_columns()
    return ([bytes(steps[k]) for k in steps if k != "kv_blocks_total"]
            + [str(requests[k]) for k in requests]
            + [bytes(recorder.itl_gaps), bytes(recorder.itl_counts)])


# --- the saturated server --------------------------------------------------------------------------


def server_config(workload: dict):
    """The saturated server's resolved config serving `workload` (a scenario's table)."""
    return resolve(SERVER | {"workload": workload}, Path(__file__))


def trace_config(time_scale: float, max_requests=None):
    limit = {} if max_requests is None else {"max_requests": max_requests}
    return server_config({"trace": {"path": str(TRACE), "format": "azure",
                                    "time_scale": time_scale} | limit})


def synthetic_config(n: int, rate: float):
    trace = load_trace(TRACE)
    return server_config({"num_requests": n, "arrival": {"process": "poisson", "rate": rate},
                          "prompt_tokens": _lognormal(trace.prompt_tokens),
                          "output_tokens": _lognormal(trace.output_tokens)})


def _lognormal(tokens: np.ndarray) -> dict:
    logs = np.log(tokens)
    return {"dist": "lognormal", "median": float(np.exp(np.median(logs))),
            "sigma": float(logs.std()), "min": int(tokens.min()), "max": int(tokens.max())}


def service_rate() -> float:
    """Requests per simulated second the server completes when it is never idle: the first
    2,000 trace requests, all arriving at once."""
    recorder = run_config(trace_config(1e-9, 2000))
    finish = np.asarray(recorder.request_columns()["finish_s"])
    return float(len(finish) / np.nanmax(finish))


def run_saturated(part: str, n: int, rate: float) -> dict:
    arrivals = load_trace(TRACE).arrival_s
    trace_rate = len(arrivals) / arrivals[-1]
    if part == "saturated":
        cfg = trace_config(trace_rate / (OVERLOAD * rate))
    else:
        cfg = synthetic_config(n, OVERLOAD * rate)
    t0 = time.perf_counter()
    recorder = run_config(cfg)
    wall_s = time.perf_counter() - t0
    eager = {}
    if part == "saturated":  # beside it: every sequence counted every step, step by step
        t0 = time.perf_counter()
        reference = run_config(cfg, fast_forward=False)
        eager = {"eager_s": time.perf_counter() - t0,
                 "identical": _records(reference) == _records(recorder)}
    statuses = recorder.statuses
    return eager | {"part": part, "requests": recorder.num_requests, "steps": recorder.num_steps,
            "finished": statuses.count("finished"), "rejected": statuses.count("rejected"),
            "wall_s": wall_s, "requests_per_s": recorder.num_requests / wall_s,
            "steps_per_s": recorder.num_steps / wall_s,
            "itl_p50_s": weighted_percentile(recorder.itl_gaps, recorder.itl_counts, 50),
            "itl_p99_s": weighted_percentile(recorder.itl_gaps, recorder.itl_counts, 99),
            "itl_tokens": int(np.sum(recorder.itl_counts))}


# --- the hardware cost model against the fitted profile ------------------------------------------


def hardware_vs_profile(repeats: int) -> dict:
    """Best wall time of the real-rate replay costed by the hardware model and by the fitted
    profile (alternated), with steps and requests."""
    import scenarios

    from sim.build import resolved_spec

    spec = scenarios.load("llama3-8b-h100").runs()[1]  # the continuous variant
    hardware = spec.config
    blocks = resolved_spec(spec).config.engine.num_kv_blocks
    server = trace_config(1.0)
    profile = replace(hardware, model=server.model, cost=server.cost, hardware=None,
                      engine=replace(hardware.engine, num_kv_blocks=blocks))
    best = {"hardware": float("inf"), "profile": float("inf")}
    steps = {}
    for _ in range(repeats):
        for name, cfg in (("hardware", hardware), ("profile", profile)):
            t0 = time.perf_counter()
            recorder = run_config(cfg)
            best[name] = min(best[name], time.perf_counter() - t0)
            steps[name] = recorder.num_steps
    return {"requests": recorder.num_requests, "best_s": best, "steps": steps}


def show_hardware(r: dict) -> None:
    for name in ("hardware", "profile"):
        s, n = r["best_s"][name], r["steps"][name]
        print(f" {name:>8}: {r['requests']:,} requests, {n:,} steps in {s:.2f} s: "
              f"{r['requests'] / s:,.0f} requests/s, {s / n * 1e6:.1f} us a step")
    print(f"           hardware / profile wall time: "
          f"{r['best_s']['hardware'] / r['best_s']['profile']:.2f}")


# --- driver ----------------------------------------------------------------------------------------


def child(part: str, args) -> dict:
    """One part in a fresh process: its figures and its own peak memory."""
    cmd = [sys.executable, __file__, "--part", part, "--requests", str(args.requests),
           "--rate", repr(args.rate or 0.0), "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def part_main(args) -> None:
    if args.part == "replay":
        result = replay_in_process(args.repeats) | {"whole": replay_whole_process(args.repeats)}
    elif args.part == "hardware":
        result = hardware_vs_profile(args.repeats)
    elif args.part == "cluster":
        result = {"whole": replay_whole_process(args.repeats, CLUSTER)}
    elif args.part == "mooncake":
        result = replay_in_process(1, MOONCAKE) | {
            "whole": replay_whole_process(args.repeats, MOONCAKE)}
    else:
        result = run_saturated(args.part, args.requests, args.rate)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(result))


def show_replay(r: dict, name: str = "replay") -> None:
    whole = r["whole"]
    print(f"{name:>9}: {whole['requests']:,} requests, {whole['steps']:,} steps; whole process "
          f"(`servesim run`, reports included) best {whole['best_s']:.2f} s = "
          f"{whole['requests'] / whole['best_s']:,.0f} requests/s, median "
          f"{whole['median_s']:.2f} s")
    print(f"           simulation alone (best of the repeats): fast forward {r['fast_forward_s']:.2f} s "
          f"({r['fast_forward_s'] / r['steps'] * 1e6:.1f} us a step), step by step "
          f"{r['step_by_step_s']:.2f} s: {r['step_by_step_s'] / r['fast_forward_s']:.1f}x; "
          f"identical records: {r['identical']}; prefix cache hit rate "
          f"{r['prefix_cache_hit_rate']:.1%}")


def show_cluster(r: dict) -> None:
    whole = r["whole"]
    print(f"  cluster: 16 replicas, {whole['requests']:,} requests, {whole['steps']:,} steps; "
          f"whole process best {whole['best_s']:.2f} s = {whole['requests'] / whole['best_s']:,.0f} "
          f"requests/s, median {whole['median_s']:.2f} s; peak RSS {whole['peak_rss_mb']:,.0f} MB")


def show_saturated(r: dict) -> None:
    print(f"{r['part']:>9}: {r['requests']:>9,} requests ({r['finished']:,} finished, "
          f"{r['rejected']:,} rejected), {r['steps']:>9,} steps in {r['wall_s']:7.1f} s: "
          f"{r['requests_per_s']:8,.0f} requests/s, {r['steps_per_s']:7,.0f} steps/s, "
          f"peak RSS {r['peak_rss_mb']:6,.0f} MB; ITL p50 {r['itl_p50_s']:.4f} s, "
          f"p99 {r['itl_p99_s']:.4f} s over {r['itl_tokens']:,} gaps")
    if "eager_s" in r:
        print(f"           every sequence counted every step: {r['eager_s']:.1f} s "
              f"({r['eager_s'] / r['wall_s']:.1f}x); identical records: {r['identical']}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=positive_integer, default=1_000_000,
                        help="synthetic workload size (default 1,000,000; e.g. 50000 to check)")
    parser.add_argument("--repeats", type=positive_integer, default=3,
                        help="whole-process replays to time (best and median; default 3)")
    parser.add_argument("--only", choices=("replay", "saturated", "synthetic", "hardware",
                                            "mooncake", "cluster"),
                        action="append",
                        help="run only this part (repeatable)")
    parser.add_argument("--part", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        part_main(args)
        return
    print(machine_state())
    parts = args.only or ["replay", "saturated", "synthetic", "hardware", "mooncake", "cluster"]
    if "replay" in parts:
        show_replay(child("replay", args))
    if {"saturated", "synthetic"} & set(parts):
        args.rate = service_rate()
        print(f"saturated server: service rate {args.rate:.4f} requests/simulated s; arrivals "
              f"at {OVERLOAD}x that")
        for part in ("saturated", "synthetic"):
            if part in parts:
                show_saturated(child(part, args))
    if "hardware" in parts:
        show_hardware(child("hardware", args))
    if "mooncake" in parts:
        show_replay(child("mooncake", args), "mooncake")
    if "cluster" in parts:
        show_cluster(child("cluster", args))
    print(machine_state())


if __name__ == "__main__":
    main()
