"""servesim end to end against real-GPU serving that NVIDIA measured and published, through
the hardware cost model with the silicon-measured kernel tables (servesim[gpu]). Also parts 0c
and 0d of `benchmarks/hardware_accuracy.py`.

Serving (`--only serving`): servesim against real-GPU serving measured by NVIDIA and
shipped with the tables (`systems/silicon_sample.csv` of aiconfigurator-core: runs of nominal
input/output lengths at a fixed client concurrency, with their mean TTFT and TPOT), the runs of
catalog models on catalog GPUs. The Llama-70B runs of vLLM and TensorRT-LLM, the gpt-oss-120b
runs of vLLM and the DeepSeek-R1 runs of TensorRT-LLM and SGLang are InferenceMAX's
(`silicon_rows`) and are simulated with its client and server flags (`simulate_inferencemax`,
`inferencemax_server`); the others, whose client is not recorded, with that many requests in
flight, users ramping up over one request's time and vLLM V1's defaults (`simulate_row`).
Beside servesim's, the Llama-70B and DeepSeek-R1 runs as aiconfigurator-core's own
steady-state model of aggregated serving predicts them from the same tables
(`aiconfigurator_estimate`): what the discrete-event simulation adds to the measured kernels.

Maximum throughput (`--only trtllm`): servesim against TensorRT-LLM's own performance page
(`trtllm_page.py`, which says how it is simulated).

    python benchmarks/serving_accuracy.py                 # about 5 minutes
    python benchmarks/serving_accuracy.py --only serving  # about 4 minutes
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path


import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trtllm_page  # noqa: E402  (this folder's)
from sim.cli.flag_types import positive_integer  # noqa: E402

SILICON_MODELS = {"nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B",
                  "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
                  "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
                  "openai/gpt-oss-120b": "openai/gpt-oss-120b",
                  "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-V3"}  # V3's architecture
GPT_OSS = "openai/gpt-oss-120b"  # its "fp4" is MXFP4 experts, servesim's mxfp4
DEEPSEEK = "deepseek-ai/DeepSeek-R1"
SILICON_DTYPES = {"fp8": "fp8", "fp4": "nvfp4", "bf16": "bf16"}
SILICON_GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200"}


def serving_part(limit: int | None = None) -> None:
    """Part 0c: end-to-end TTFT and TPOT against the package's measured serving runs."""
    runs = silicon_rows()
    if runs is None:
        print("the measured serving runs need servesim[gpu] (pip install 'servesim[gpu]')")
        return
    if limit:
        runs = [rows.iloc[::max(len(rows) // limit, 1)] for rows in runs]
    inferencemax, gpt_oss, deepseek, others = runs
    print("InferenceMAX's Llama-3.3-70B runs (its client and server flags of 2025-10-29):")
    compare(inferencemax, simulate_inferencemax, inferencemax_group)
    print("\nThe same runs by aiconfigurator-core's own aggregated-serving estimate "
          "(`aiconfigurator_estimate`):")
    compare(inferencemax, aiconfigurator_estimate, inferencemax_group, rows_shown=False)
    print("\nInferenceMAX's gpt-oss-120b runs on vLLM (its client and server flags of "
          "2026-03-27):")
    compare(gpt_oss, simulate_inferencemax, lambda row: (row.backend, SILICON_GPUS[row.system],
                                                         "mxfp4"))
    print("\nInferenceMAX's DeepSeek-R1 runs on eight H200s in fp8 (latent attention and 256 "
          "experts; TensorRT-LLM's of 2025-11-02, SGLang's of 2026-03-25):")
    compare(deepseek, simulate_inferencemax, server_group)
    print("\nThe same runs by aiconfigurator-core's own estimate:")
    compare(deepseek, aiconfigurator_estimate, server_group, rows_shown=False)
    print("\nThe other runs (client not recorded; users ramping up over one request's time):")
    compare(others, simulate_row, server_group)


def server_group(row) -> tuple:
    """(backend, GPU, dtype): a group of runs."""
    return row.backend, SILICON_GPUS[row.system], row.precision


def batch_waits(row) -> bool:
    """Whether InferenceMAX's server held new prefills for a fuller batch: its TensorRT-LLM
    servers at 1,024/1,024 below TP 8 (`batch_wait_timeout_iters: 20`,
    `batch_wait_max_tokens_ratio: 0.9`)."""
    return row.backend == "trtllm" and row.isl == row.osl == 1024 and row.tp_size < 8


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
                  f"{SILICON_MODELS[row.model_path][-26:]:26s} {row.precision:5s} "
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


def silicon_rows():
    """(InferenceMAX's Llama-70B runs, its gpt-oss-120b runs, its DeepSeek-R1 runs, the
    others): the package's measured aggregated runs of catalog models on catalog GPUs that
    servesim can simulate (no pipeline or attention data parallelism as recorded), or None
    without the package.

    The Llama-70B runs of vLLM and TensorRT-LLM are InferenceMAX's (SemiAnalysis): their
    matrix is its matrix of 2025-10-29, their measurement date (ISL/OSL 1,024/1,024,
    1,024/8,192 and 8,192/1,024; 4 to 64 users under vLLM, 4 to 128 under TensorRT-LLM; TP 2 to
    8 on the H100, 1 to 8 elsewhere). So are the gpt-oss-120b vLLM runs on the H100 and H200
    measured 2026-03-27 (the same lengths, 4 to 64 users, TP 1 to 8; shipped twice, once
    here); its other gpt-oss runs (older scripts, and the B200's MXFP4 x MXFP8 kernels servesim
    does not cost) are left out. Its DeepSeek-R1 runs in fp8 on the H200 are TensorRT-LLM's
    measured 2025-11-02 and SGLang's measured 2026-03-25 (the same lengths, 4 to 64 users, TP
    8; SGLang's shipped twice, once here); the others are later scripts with multi-token
    prediction, or of other days whose layouts the rows record in ways their scripts do not
    say."""
    import importlib.util

    import pandas as pd

    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "systems", "silicon_sample.csv")
    rows = pd.read_csv(path)
    from sim.costs.hardware import gpus

    known = set(gpus())
    keep = ((rows["mode"] == "agg") & rows["model_path"].isin(list(SILICON_MODELS))
            & rows["system"].map(lambda s: SILICON_GPUS.get(s) in known)
            & rows["precision"].isin(list(SILICON_DTYPES))
            & (rows["pp_size"].fillna(1) == 1) & (rows["attention_dp_size"].fillna(1) <= 1))
    rows = rows[keep].sort_values(["backend", "system", "model_path", "precision", "tp_size",
                                   "isl", "osl", "batch_size"])
    inferencemax = (rows["silicon_data_source"].str.contains("model=Llama-3.1-70B", regex=False)
                    & rows["backend"].isin(["vllm", "trtllm"]))
    oss = rows["model_path"] == GPT_OSS
    gpt_oss = rows[oss & (rows["backend"] == "vllm") & rows["system"].isin(["h100_sxm", "h200_sxm"])
                   & rows["silicon_data_source"].str.contains("measured=2026-03-27", regex=False)]
    gpt_oss = gpt_oss.drop_duplicates(["system", "tp_size", "batch_size", "isl", "osl"])
    source = rows["silicon_data_source"]
    deepseek = rows[(rows["model_path"] == DEEPSEEK) & (rows["system"] == "h200_sxm")
                    & (((rows["backend"] == "trtllm")
                        & source.str.contains("measured=2025-11-02", regex=False))
                       | ((rows["backend"] == "sglang")
                          & source.str.contains("measured=2026-03-25", regex=False)))]
    deepseek = deepseek.drop_duplicates(["backend", "batch_size", "isl", "osl"])
    return (rows[inferencemax], gpt_oss, deepseek,
            rows[~inferencemax & ~oss & (rows["backend"] == "vllm")])


def simulate_inferencemax(row):
    """(mean TTFT ms, mean TPOT ms) servesim predicts for one of InferenceMAX's runs.

    Its client (vLLM's benchmark_serving.py as forked in kimbochen/bench_serving) sends 10 x
    users prompts with `--request-rate inf --max-concurrency users --ignore-eos`, input and
    output lengths drawn uniformly between 0.8 x and 1 x the nominal ones
    (`--random-range-ratio 0.8`), and averages over every request; from 2026 its
    `run_benchmark_serving` also sent 2 x users warm-up requests first, left out of its means
    (servesim's server needs no warming). Its servers: `inferencemax_server`."""
    from scenarios.resolve import resolve
    from sim.runner import run_config

    users, isl, osl = int(row.batch_size), int(row.isl), int(row.osl)
    model, hardware, engine, scheduler = inferencemax_server(row)
    table = {"name": f"inferencemax-{row.id}", "seed": 0,
             "model": {"name": model, "max_seq_len": isl + osl},
             "hardware": {"gpu": SILICON_GPUS[row.system], "tp": int(row.tp_size),
                          "framework": row.backend, "gpu_memory_utilization": 0.9} | hardware,
             "cost": {"model": "hardware"}, "engine": engine, "scheduler": scheduler,
             "workload": {"num_requests": 10 * users, "max_concurrency": users,
                          "arrival": {"process": "burst"},
                          "prompt_tokens": {"dist": "uniform", "low": int(0.8 * isl), "high": isl},
                          "output_tokens": {"dist": "uniform", "low": int(0.8 * osl),
                                            "high": osl}}}
    recorder = run_config(resolve(table, Path(__file__)))
    columns = recorder.request_columns()
    first = np.asarray(columns["first_token_s"], float)
    ttft = first - np.asarray(columns["arrival_s"], float)
    tpot = ((np.asarray(columns["finish_s"], float) - first)
            / (np.asarray(columns["output_tokens"], float) - 1))
    return 1e3 * float(np.mean(ttft)), 1e3 * float(np.mean(tpot))


def inferencemax_server(row) -> tuple[str, dict, dict, dict]:
    """(catalog model, `[hardware]` keys beyond the GPU, TP and framework, `[engine]`,
    `[scheduler]`) of the server one of InferenceMAX's runs served, as its scripts of the
    run's day say (benchmarks/*.sh in SemiAnalysisAI/InferenceX).

    - Llama-3.3-70B (2025-10-29, 70b_*.sh): vLLM 0.10.2 with an fp8 KV cache, 8,192 tokens a
      step, chunked prefill, async scheduling, no prefix caching, 90% of the memory and as many
      sequences as users (512 on the B200); TensorRT-LLM 1.1.0rc2 with an fp8 KV cache, 16,384
      tokens a step, no chunked prefill, no block reuse, its overlap scheduler (on by default;
      both servers' async scheduling is servesim's default), up to 2,048 sequences
      (trtllm-serve's default), at 1,024/1,024 below TP 8 holding new prefills up to 20 steps
      while they and the decodes fill less than 90% of a step's tokens (`batch_waits`).
    - gpt-oss-120b (2026-03-27, single_node/gptoss_fp4_h100.sh and _h200.sh): vLLM 0.18.0 with
      its MXFP4 experts on Marlin kernels (w4a16: `moe_backend = "marlin"`), the KV cache in
      bf16, 8,192 tokens a step, no prefix caching, as many sequences as users.
    - DeepSeek-R1 (DeepSeek-V3's architecture) in fp8 on eight H200s: TensorRT-LLM
      (2025-11-02, dsr1_fp8_h200_trt_slurm.sh) with the experts whole on each GPU (`--ep_size`
      = TP = 8; the measured rows record moe_tp 8, not what the script ran), attention data
      parallel above 64 users (above 32 at 8,192/1,024), an fp8 KV cache, no block reuse,
      `--max_num_tokens` users + ISL + 64 rounded up to a multiple of 64, no chunked prefill;
      SGLang 0.5.9 (2026-03-25, single_node/dsr1_fp8_h200.sh) with the experts split by TP,
      the KV cache in bf16 (its "auto"), 82% of the memory (`--mem-fraction-static 0.82`),
      32,768 tokens a step, chunked prefill, no radix cache, 512 sequences at 1,024/1,024 and
      256 otherwise, its overlap scheduler. Both streamed every 10th token
      (`stream_interval` 10), which servesim does not model: SGLang sends a request's first
      token at once; whether TensorRT-LLM's waits is not shown here."""
    users, isl, osl = int(row.batch_size), int(row.isl), int(row.osl)
    vllm = row.backend == "vllm"
    if row.model_path == DEEPSEEK:
        if row.backend == "sglang":
            return (SILICON_MODELS[DEEPSEEK],
                    {"dtype": "fp8", "activation_scheme": "block", "kv_dtype": "auto",
                     "gpu_memory_utilization": 0.82},
                    {"max_num_seqs": 512 if isl == osl == 1024 else 256,
                     "max_num_batched_tokens": 32768}, {"chunked_prefill": True})
        ranks = 8 if users > (32 if isl == 8192 else 64) else 1  # attention data parallel
        tokens = (users + isl + 127) // 64 * 64
        return (SILICON_MODELS[DEEPSEEK],
                {"tp": 8 // ranks, "dp": ranks, "ep": 8, "dtype": "fp8",
                 "activation_scheme": "block", "kv_dtype": "fp8"},
                {"max_num_seqs": min(2048, tokens), "max_num_batched_tokens": tokens},
                {"chunked_prefill": False})
    if row.model_path == GPT_OSS:
        return (GPT_OSS, {"dtype": "mxfp4", "kv_dtype": "auto", "moe_backend": "marlin"},
                {"max_num_seqs": users, "max_num_batched_tokens": 8192}, {"chunked_prefill": True})
    hardware = {"dtype": SILICON_DTYPES[row.precision], "kv_dtype": "fp8"}
    if vllm:
        engine = {"max_num_seqs": 512 if row.system == "b200_sxm" else users,
                  "max_num_batched_tokens": 8192}
    else:
        engine = {"max_num_seqs": 2048, "max_num_batched_tokens": 16384}
    scheduler = {"chunked_prefill": vllm} | (
        {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}
        if batch_waits(row) else {})
    return "meta-llama/Llama-3.3-70B-Instruct", hardware, engine, scheduler


def aiconfigurator_estimate(row):
    """(TTFT ms, TPOT ms) that aiconfigurator-core's own model of aggregated serving predicts
    for one of InferenceMAX's Llama-70B or DeepSeek-R1 runs, from the same kernel tables
    servesim reads, or None where its tables cannot answer: its backend's `run_agg` (a steady
    state of mixed and decode-only steps, `users` requests in flight, `ctx_tokens` = ISL as its
    command line defaults to) for its bundled config of the architecture (Llama-3.1-70B's,
    Llama-3.3-70B's; DeepSeek-V3's, R1's), the run's TP (and the experts' layout the run's
    script gives, bf16 attention math), its GEMM dtype and KV dtype, the newest tables of the
    framework and GPU (as its regression script falls back to when the run's version has
    none). The package's own command line (the `aiconfigurator` package, not installed here)
    resolves a few more defaults before it calls the same function."""
    import contextlib
    import io

    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import ModelConfig, RuntimeConfig
    from aiconfigurator_core.sdk.models import get_model

    if row.model_path == DEEPSEEK:
        _, hardware, _, _ = inferencemax_server(row)
        experts = {"moe_tp_size": 8 // hardware.get("ep", 1), "moe_ep_size": hardware.get("ep", 1),
                   "moe_quant_mode": common.MoEQuantMode[row.moe_quant_mode],
                   "fmha_quant_mode": common.FMHAQuantMode.bfloat16}
        name, kv = "deepseek-ai/DeepSeek-V3", "fp8" if hardware["kv_dtype"] == "fp8" else "bfloat16"
    else:
        experts, name, kv = {}, "meta-llama/Meta-Llama-3.1-70B", "fp8"
    config = ModelConfig(tp_size=int(row.tp_size),
                         gemm_quant_mode=common.GEMMQuantMode[row.gemm_quant_mode],
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
    parser.add_argument("--only", choices=("serving", "trtllm"), action="append",
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
