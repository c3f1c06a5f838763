"""Simulator speed: how many requests and steps per second of wall time `sim.run_config`
simulates, and its peak memory, on a large continuous-batching server.

Two workloads, each run in its own process so each peak memory (ru_maxrss) is its own:
- the whole Azure conversation trace (19,366 requests), replayed faster (time_scale chosen so
  that requests arrive 1.5x faster than the engine serves them: saturated, the queue grows);
- a synthetic workload of --requests requests (default 1,000,000) with lognormal lengths fitted
  to the trace (median and log-standard deviation of its prompt and output tokens) and Poisson
  arrivals at the same overload.
Cost model: the shipped default profile. ITL percentiles are computed exactly from the recorder's
(gap, count) pairs.

    python benchmarks/sim_speed.py                  # the full benchmark (minutes)
    python benchmarks/sim_speed.py --requests 50000 # a quick check
    python benchmarks/sim_speed.py --cprofile       # also print the hot path (slower run)
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from engine.benchmark import weighted_percentile
from engine.model import ModelConfig
from sim.runner import run_config
from sim.workloads.traces import load_trace

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "azure_llm_2023_conv.csv"
OVERLOAD = 1.5  # arrival rate / service rate
SERVER = {
    "name": "sim-speed", "description": "", "seed": 0, "mode": "simulate",
    "model": {k: v for k, v in vars(ModelConfig()).items() if k != "seed"} | {"max_seq_len": 16384},
    "engine": {"block_size": 16, "num_kv_blocks": 65536, "max_num_seqs": 256,
               "max_num_batched_tokens": 8192},
    "scheduler": {"policy": "continuous", "queue": "fcfs", "chunked_prefill": True,
                  "max_batch_size": 256, "batch_timeout_s": 0.0},
    "cost": {"model": "profile", "profile": "default", "step_overhead_s": 0.0,
             "prefill_token_s": 0.0, "decode_seq_s": 0.0, "context_token_s": 0.0},
    "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
}


def trace_config(time_scale: float, max_requests=None) -> dict:
    cfg = copy.deepcopy(SERVER)
    cfg["workload"] = {"num_requests": None, "arrival": {"process": "trace"}, "prompt_tokens": None,
                       "output_tokens": None, "priority": None,
                       "trace": {"path": str(TRACE), "format": "azure", "time_scale": time_scale,
                                 "max_requests": max_requests}}
    return cfg


def synthetic_config(n: int, rate: float) -> dict:
    trace = load_trace(TRACE)
    cfg = copy.deepcopy(SERVER)
    cfg["workload"] = {"num_requests": n, "arrival": {"process": "poisson", "rate": rate},
                       "prompt_tokens": _lognormal(trace.prompt_tokens),
                       "output_tokens": _lognormal(trace.output_tokens),
                       "priority": None, "trace": None}
    return cfg


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


def run_part(part: str, n: int, rate: float, cprofile: bool) -> dict:
    arrivals = load_trace(TRACE).arrival_s
    trace_rate = len(arrivals) / arrivals[-1]
    if part == "trace":
        cfg = trace_config(trace_rate / (OVERLOAD * rate))
    else:
        cfg = synthetic_config(n, OVERLOAD * rate)
    t0 = time.perf_counter()
    if cprofile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        recorder = profiler.runcall(run_config, cfg)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(18)
    else:
        recorder = run_config(cfg)
    wall_s = time.perf_counter() - t0
    statuses = recorder.statuses
    return {"part": part, "requests": recorder.num_requests, "steps": recorder.num_steps,
            "finished": statuses.count("finished"), "rejected": statuses.count("rejected"),
            "wall_s": wall_s, "requests_per_s": recorder.num_requests / wall_s,
            "steps_per_s": recorder.num_steps / wall_s,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "itl_p50_s": weighted_percentile(recorder.itl_gaps, recorder.itl_counts, 50),
            "itl_p99_s": weighted_percentile(recorder.itl_gaps, recorder.itl_counts, 99),
            "itl_tokens": int(np.sum(recorder.itl_counts))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000,
                        help="synthetic workload size (default 1,000,000; e.g. 50000 for a quick check)")
    parser.add_argument("--skip-trace", action="store_true", help="only the synthetic workload")
    parser.add_argument("--cprofile", action="store_true", help="print the hot path (slower)")
    parser.add_argument("--part", choices=("trace", "synthetic"), help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:  # a child process: one workload, one JSON line
        print(json.dumps(run_part(args.part, args.requests, args.rate, args.cprofile)))
        return
    rate = service_rate()
    print(f"service rate {rate:.4f} requests/simulated s; arrivals at {OVERLOAD}x that")
    parts = ["synthetic"] if args.skip_trace else ["trace", "synthetic"]
    for part in parts:
        cmd = [sys.executable, __file__, "--part", part, "--requests", str(args.requests),
               "--rate", repr(rate)] + (["--cprofile"] if args.cprofile else [])
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{r['part']:>9}: {r['requests']:>9,} requests ({r['finished']:,} finished, "
              f"{r['rejected']:,} rejected), {r['steps']:>9,} steps in {r['wall_s']:7.1f} s: "
              f"{r['requests_per_s']:8,.0f} requests/s, {r['steps_per_s']:7,.0f} steps/s, "
              f"peak RSS {r['peak_rss_mb']:6,.0f} MB; ITL p50 {r['itl_p50_s']:.4f} s, "
              f"p99 {r['itl_p99_s']:.4f} s over {r['itl_tokens']:,} gaps")


if __name__ == "__main__":
    main()
