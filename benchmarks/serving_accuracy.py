"""servesim end to end against real-GPU serving that NVIDIA measured and published, through
the hardware cost model with the silicon-measured kernel tables (servesim[gpu]). Also parts 0c
and 0d of `benchmarks/hardware_accuracy.py`.

Serving (`--only serving`): servesim against real-GPU serving measured by NVIDIA and
shipped with the tables (`systems/silicon_sample.csv` of aiconfigurator-core: runs of nominal
input/output lengths at a fixed client concurrency, with their mean TTFT and TPOT), the runs of
catalog models (and of MiniMax-M2.5 and Qwen3.5-397B-A17B) on catalog GPUs. The Llama-70B
runs of vLLM and TensorRT-LLM, the gpt-oss-120b runs of vLLM, the DeepSeek-R1 runs of
TensorRT-LLM and SGLang, the MiniMax-M2.5 runs of vLLM and the Qwen3.5-397B-A17B runs of SGLang
(models read from their config.json) are InferenceMAX's
(`silicon_runs.py`: `silicon_rows`) and are simulated with its client and server flags
(`simulate_inferencemax` there, `inferencemax_servers.py`); the others, whose client is not
recorded, with that many requests in flight, users ramping up over one request's time and
vLLM V1's defaults (`simulate_row`).
Beside servesim's, the Llama-70B, DeepSeek-R1 and MiniMax-M2.5 runs as aiconfigurator-core's own
steady-state model of aggregated serving predicts them from the same tables
(`aiconfigurator_estimate`): what the discrete-event simulation adds to the measured kernels.

Maximum throughput (`--only trtllm`): servesim against TensorRT-LLM's own performance page
(`trtllm_page.py`, which says how it is simulated).

Prefill overhead (`--only overhead`, not run by default): InferenceMAX's runs again, each
server's `hardware.prefill_overhead_s` set from one of its runs (`prefill_overhead.py`, which
says how).

    python benchmarks/serving_accuracy.py                  # about 5 minutes
    python benchmarks/serving_accuracy.py --only serving   # about 4 minutes
    python benchmarks/serving_accuracy.py --only overhead  # about 12 minutes
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path


import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prefill_overhead  # noqa: E402  (this folder's)
import trtllm_page  # noqa: E402
from inferencemax_servers import (DEEPSEEK, MINIMAX, SILICON_DTYPES,  # noqa: E402
                                  SILICON_GPUS, SILICON_MODELS, batch_waits, inferencemax_server)
from silicon_runs import silicon_rows, simulate_inferencemax  # noqa: E402
from sim.cli.flag_types import positive_integer  # noqa: E402


def serving_part(limit: int | None = None) -> None:
    """Part 0c: end-to-end TTFT and TPOT against the package's measured serving runs."""
    runs = silicon_rows()
    if runs is None:
        print("the measured serving runs need servesim[gpu] (pip install 'servesim[gpu]')")
        return
    if limit:
        runs = [rows.iloc[::max(len(rows) // limit, 1)] for rows in runs]
    inferencemax, gpt_oss, deepseek, minimax, qwen, others = runs
    print("InferenceMAX's Llama-3.3-70B runs (its client and server flags of 2025-10-29):")
    compare(inferencemax, simulate_inferencemax, inferencemax_group)
    print("\nThe same runs by aiconfigurator-core's own aggregated-serving estimate "
          "(`aiconfigurator_estimate`):")
    compare(inferencemax, aiconfigurator_estimate, inferencemax_group, rows_shown=False)
    print("\nInferenceMAX's gpt-oss-120b runs on vLLM (its client and server flags of "
          "2026-03-27 on the H100 and H200, of 2026-02-25 on the B200):")
    compare(gpt_oss, simulate_inferencemax, lambda row: (row.backend, SILICON_GPUS[row.system],
                                                         "mxfp4"))
    print("\nInferenceMAX's DeepSeek-R1 runs in fp8 (latent attention and 256 experts; "
          "TensorRT-LLM's on eight H200s of 2025-11-02, SGLang's on eight H200s and four or "
          "eight B200s of 2026-03-25):")
    compare(deepseek, simulate_inferencemax, server_group)
    print("\nThe same runs by aiconfigurator-core's own estimate:")
    compare(deepseek, aiconfigurator_estimate, server_group, rows_shown=False)
    print("\nInferenceMAX's MiniMax-M2.5 runs on vLLM in fp8 (256 experts, 8 a token; its "
          "client and server flags of each run's day):")
    compare(minimax, simulate_inferencemax, minimax_group)
    print("\nThe same runs by aiconfigurator-core's own estimate:")
    compare(minimax, aiconfigurator_estimate, minimax_group, rows_shown=False)
    print("\nInferenceMAX's Qwen3.5-397B-A17B runs on SGLang in fp8 (45 linear-attention "
          "layers of 60, 512 experts; its client and server flags of each run's day: the H200's "
          "of 2026-03-03, the B200's of 2026-03-24):")
    compare(qwen, simulate_inferencemax, server_group)
    print("\nThe other runs (client not recorded; users ramping up over one request's time):")
    compare(others, simulate_row, server_group)


def server_group(row) -> tuple:
    """(backend, GPU, dtype): a group of runs."""
    return row.backend, SILICON_GPUS[row.system], row.precision


def minimax_group(row) -> tuple:
    """(backend, GPU, dtype, layout): MiniMax-M2.5's runs by their experts' layout."""
    _, hardware, _, _ = inferencemax_server(row)
    return (row.backend, SILICON_GPUS[row.system], row.precision,
            f"TP {int(row.tp_size)}" + (f" x EP {hardware['ep']}" if hardware["ep"] > 1 else ""))


def inferencemax_group(row) -> tuple:
    """(backend, GPU, dtype, note): the runs with held prefills apart."""
    return (row.backend, SILICON_GPUS[row.system], row.precision,
            "held prefills (batch wait)" if batch_waits(row) else "")


def compare(rows, simulate, group_of, rows_shown: bool = True) -> dict:
    """Print the predictions of `simulate(row)` (servesim's, by default) against each measured
    run (unless `rows_shown` is False), then median and p90 |error| per group (`group_of(row)`,
    a tuple) and over all runs; returns {group: {"ttft": [...], "tpot": [...]}} of relative
    errors."""
    if rows_shown:
        print(f"{'backend':7s} {'gpu':9s} {'model':26s} {'dtype':5s} {'tp':>2s} {'isl/osl':>10s} "
              f"{'users':>5s} {'TTFT ms':>8s} {'sim':>8s} {'err':>7s} {'TPOT ms':>8s} "
              f"{'sim':>7s} {'err':>7s}")
    errors: dict[tuple, dict[str, list]] = {}
    for row in rows.itertuples():
        simulated = simulate(row)
        if simulated is None:
            continue
        ttft, tpot = simulated
        e_ttft = ttft / row.silicon_ttft_ms - 1
        e_tpot = tpot / row.silicon_tpot_ms - 1
        group = errors.setdefault(group_of(row), {"ttft": [], "tpot": []})
        group["ttft"].append(e_ttft)
        group["tpot"].append(e_tpot)
        if rows_shown:
            print(f"{row.backend:7s} {SILICON_GPUS[row.system]:9s} "
                  f"{SILICON_MODELS.get(row.model_path, row.model_path)[-26:]:26s} "
                  f"{row.precision:5s} "
                  f"{int(row.tp_size):2d} {f'{row.isl}/{row.osl}':>10s} "
                  f"{int(row.batch_size):5d} {row.silicon_ttft_ms:8.1f} {ttft:8.1f} "
                  f"{100 * e_ttft:+6.1f}% {row.silicon_tpot_ms:8.2f} {tpot:7.2f} "
                  f"{100 * e_tpot:+6.1f}%", flush=True)
    everything = {"ttft": [], "tpot": []}
    for group, values in sorted(errors.items()):
        for name in everything:
            everything[name] += values[name]
        print(f"{' '.join(part for part in group if part)} ({len(values['ttft'])} runs): "
              f"TTFT {summary(values['ttft'])}; TPOT {summary(values['tpot'])}")
    if everything["ttft"]:
        print(f"all {len(everything['ttft'])} runs: TTFT {summary(everything['ttft'])}; "
              f"TPOT {summary(everything['tpot'])}")
    return errors


def summary(errors: list) -> str:
    """Median / p90 |error| and the mean signed error of relative errors."""
    a = np.abs(errors)
    return (f"median {100 * np.median(a):.1f}%, p90 {100 * np.quantile(a, 0.9):.1f}%, "
            f"mean signed {100 * np.mean(errors):+.1f}%")


def aiconfigurator_estimate(row):
    """(TTFT ms, TPOT ms) that aiconfigurator-core's own model of aggregated serving predicts
    for one of InferenceMAX's Llama-70B, DeepSeek-R1 or MiniMax-M2.5 runs, from the same kernel
    tables servesim reads, or None where its tables cannot answer: its backend's `run_agg` (a
    steady state of mixed and decode-only steps, `users` requests in flight, `ctx_tokens` = ISL
    as its command line defaults to) for its bundled config of the architecture
    (Llama-3.1-70B's, Llama-3.3-70B's; DeepSeek-V3's, R1's; MiniMax-M2.5's), the run's TP (and
    the experts' layout the run's script gives, bf16 attention math), its GEMM dtype
    (MiniMax-M2.5's block-scaled, as its checkpoint) and KV dtype, the newest tables of the
    framework and GPU (as its regression script falls back to when the run's version has
    none). The package's own command line (the `aiconfigurator` package, not installed here)
    resolves a few more defaults before it calls the same function."""
    import contextlib
    import io

    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import ModelConfig, RuntimeConfig
    from aiconfigurator_core.sdk.models import get_model

    gemm = row.gemm_quant_mode
    if row.model_path in (DEEPSEEK, MINIMAX):
        _, hardware, _, _ = inferencemax_server(row)
        ep = hardware.get("ep", 1)
        experts = {"moe_tp_size": int(row.tp_size) // ep, "moe_ep_size": ep,
                   "moe_quant_mode": common.MoEQuantMode[row.moe_quant_mode],
                   "fmha_quant_mode": common.FMHAQuantMode.bfloat16}
        if row.model_path == MINIMAX:  # its checkpoint's block-scaled fp8 (the rows say fp8)
            gemm, experts["moe_quant_mode"] = "fp8_block", common.MoEQuantMode.fp8_block
        name = "deepseek-ai/DeepSeek-V3" if row.model_path == DEEPSEEK else row.model_path
        kv = "fp8" if hardware["kv_dtype"] == "fp8" else "bfloat16"
    else:
        experts, name, kv = {}, "meta-llama/Meta-Llama-3.1-70B", "fp8"
    config = ModelConfig(tp_size=int(row.tp_size),
                         gemm_quant_mode=common.GEMMQuantMode[gemm],
                         kvcache_quant_mode=common.KVCacheQuantMode[kv], **experts)
    try:
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            database = _aiconfigurator_tables(row.system, row.backend)
            model = get_model(name, config, row.backend)
            result = get_backend(row.backend).run_agg(
                model, database, RuntimeConfig(batch_size=int(row.batch_size),
                                               isl=int(row.isl), osl=int(row.osl)),
                ctx_tokens=int(row.isl)).get_result_dict()
    except Exception as exc:  # the package's own: tables it lacks for this layout
        print(f"no estimate for {row.backend} {row.system} {name} {row.isl}/{row.osl} "
              f"{int(row.batch_size)} users: {str(exc).splitlines()[0][:120]}")
        return None
    return float(result["ttft"]), float(result["tpot"])


@functools.cache
def _aiconfigurator_tables(system: str, backend: str):
    """aiconfigurator-core's newest perf database of a system and framework, loaded once."""
    from aiconfigurator_core.sdk.perf_database import (get_database_view,
                                                       get_latest_database_version)

    version = get_latest_database_version(system=system, backend=backend)
    return get_database_view(system, backend, version)


def simulate_row(row):
    """(mean TTFT ms, mean TPOT ms) servesim predicts for one measured run, or None when it
    cannot run. The client keeps `users` requests in flight; its users start one after another
    over one request's time, as a benchmark client ramps up (all at once, users of equal
    lengths would stay in lockstep, every prefill together, which no real run keeps up), and the
    first two rounds of requests are left out of the means."""
    from scenarios.resolve import resolve
    from sim.runner import run_config

    users, isl, osl = int(row.batch_size), int(row.isl), int(row.osl)
    table = {"name": f"silicon-{row.id}", "seed": 0,
             "model": {"name": SILICON_MODELS[row.model_path], "max_seq_len": isl + osl},
             "hardware": {"gpu": SILICON_GPUS[row.system], "tp": int(row.tp_size),
                          "dtype": SILICON_DTYPES[row.precision], "framework": "vllm"},
             "cost": {"model": "hardware"},
             "engine": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192},
             "scheduler": {"chunked_prefill": True},
             "workload": {"num_requests": 2 * users,
                          "arrival": {"process": "closed_loop", "concurrency": users},
                          "prompt_tokens": {"dist": "fixed", "value": isl},
                          "output_tokens": {"dist": "fixed", "value": osl}}}
    try:
        lockstep = run_config(resolve(table, Path(__file__)))  # a request's time, roughly
        columns = lockstep.request_columns()
        duration = float(np.nanmean(np.subtract(columns["finish_s"], columns["arrival_s"])))
        table["workload"] = table["workload"] | {
            "num_requests": 6 * users, "max_concurrency": users,
            "arrival": {"process": "constant", "rate": users / duration}}
        recorder = run_config(resolve(table, Path(__file__)))
    except ValueError as exc:
        print(f"skipped {row.system} {row.model_path} tp {row.tp_size}: {exc}")
        return None
    columns = recorder.request_columns()
    arrival = np.asarray(columns["arrival_s"], float)
    first = np.asarray(columns["first_token_s"], float)
    finish = np.asarray(columns["finish_s"], float)
    later = np.argsort(arrival)[2 * users:]  # after the ramp and the first round
    ttft = (first - arrival)[later]
    tpot = ((finish - first) / (osl - 1))[later] if osl > 1 else ttft * 0
    return 1e3 * float(np.nanmean(ttft)), 1e3 * float(np.nanmean(tpot))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("serving", "trtllm", "overhead"), action="append",
                        help="run only this part (repeatable)")
    parser.add_argument("--runs", type=positive_integer, default=None,
                        help="serving: at most about this many of the measured runs")
    args = parser.parse_args(argv)
    parts = args.only or ("serving", "trtllm")
    if "serving" in parts:
        serving_part(args.runs)
        print()
    if "trtllm" in parts:
        trtllm_page.trtllm_part()
        print()
    if "overhead" in parts:
        prefill_overhead.overhead_part(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
