"""The real-GPU serving runs NVIDIA measured and ships with aiconfigurator-core
(`systems/silicon_sample.csv`) that servesim is checked against (`silicon_rows`), and how
InferenceMAX's among them are simulated: its client (`simulate_inferencemax`), its servers'
flags of the run's day in `inferencemax_servers.py`. `serving_accuracy.py` compares them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from inferencemax_servers import (DEEPSEEK, GPT_OSS, MINIMAX, MINIMAX_RUNS, QWEN35,
                                  SILICON_DTYPES, SILICON_GPUS, SILICON_MODELS,
                                  inferencemax_server)



def silicon_rows():
    """(InferenceMAX's Llama-70B runs, its gpt-oss-120b runs, its DeepSeek-R1 runs, its
    MiniMax-M2.5 runs, its Qwen3.5-397B-A17B runs, the others): the package's measured
    aggregated runs of catalog models (and MiniMax-M2.5 and Qwen3.5, from the package's own
    copies of their config.json) on catalog GPUs that servesim can simulate (no pipeline or
    attention data parallelism as recorded), or None without the package.

    The Llama-70B runs of vLLM and TensorRT-LLM are InferenceMAX's (SemiAnalysis): their matrix
    is its matrix of 2025-10-29, their measurement date (ISL/OSL 1,024/1,024, 1,024/8,192 and
    8,192/1,024; 4 to 64 users under vLLM, 4 to 128 under TensorRT-LLM; TP 2 to 8 on the H100, 1
    to 8 elsewhere). So are the gpt-oss-120b vLLM runs on the H100 and H200 measured 2026-03-27
    (the same lengths, 4 to 64 users, TP 1 to 8; shipped twice, once here) and on the B200
    measured 2026-02-25 (4 to 128 users, TP 1 to 8; 18 of them shipped twice, once here); its
    other gpt-oss runs (older scripts) are left out. Its DeepSeek-R1 runs in fp8 are
    TensorRT-LLM's on the H200 measured 2025-11-02 and SGLang's on the H200 and the B200
    measured 2026-03-25 (the same lengths, 4 to 64 users, TP 8, but on the B200 at 8,192/1,024
    TP 8 at 4 users and TP 4 at 4 to 32; SGLang's shipped twice, once here; the B200's beside
    its multi-token prediction runs of the same day, told apart by `deepseek_plain`). Left out:
    TensorRT-LLM's on the B200 measured 2026-01-29 (20 runs of its plain matrix), whose servers
    ran TensorRT-LLM's own block-scaled fp8 MoE kernel (`moe_config.backend: TRTLLM`), which its
    B200 tables do not time: their one block-scaled fp8 MoE kernel there is DeepGEMM's, 0.18 ms
    a layer for 8 tokens with the experts split by TP 8, 10 ms of the 58 MoE layers of a decode
    step whose measured TPOT is 11 ms (so costed, the TPOT median came out 33% slow); the others
    are later scripts with multi-token prediction, or of other days whose layouts the rows
    record in ways their scripts do not say. Its MiniMax-M2.5 runs on vLLM in fp8 are those on
    the H200 measured 2026-03-01 (TP 4) and 2026-03-27 (TP 8), on the H100 measured 2026-03-27
    (TP 4), the same lengths and 4 to 128 users, and on the B200 measured 2026-03-11 (TP 2 and
    4, 4 to 64 users: 15 of the 30 points of the day's matrix; shipped twice, once here); those
    of 2026-03-28 are left out: the H200's measure the same layout again (TTFT within 2% in the
    median), the H100's record attention data parallelism; so are its other B200 runs and its
    B300's, of many layouts and days. Its Qwen3.5-397B-A17B runs are SGLang's in fp8 on the H200
    measured 2026-03-04 (TP 8 x EP 8, the same lengths, 4 to 64 users; shipped three times, once
    here) and on the B200 measured 2026-03-24 (the image the day's matrix names,
    lmsysorg/sglang:v0.5.9-cu130-amd64: TP 8 at 4 to 16 users, TP 4 x EP 4 at 32 to 128; shipped
    twice, once here); the B200's of 2026-03-20 (another image, that of the day's multi-token
    prediction matrix, and a layout the day's plain matrix does not have), of 2026-03-03 (TP 16
    recorded on one node) and in bf16 (a nightly image), and the B300's (no script of that day
    names the GPU), are left out."""
    import importlib.util

    import pandas as pd

    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "systems", "silicon_sample.csv")
    rows = pd.read_csv(path)
    from sim.costs.hardware import gpus

    known = set(gpus())
    keep = ((rows["mode"] == "agg")
            & rows["model_path"].isin([*SILICON_MODELS, MINIMAX, QWEN35])
            & rows["system"].map(lambda s: SILICON_GPUS.get(s) in known)
            & rows["precision"].isin(list(SILICON_DTYPES))
            & (rows["pp_size"].fillna(1) == 1) & (rows["attention_dp_size"].fillna(1) <= 1))
    order = ["backend", "system", "model_path", "precision", "tp_size", "isl", "osl",
             "batch_size"]
    rows = rows[keep].sort_values(order)
    inferencemax = (rows["silicon_data_source"].str.contains("model=Llama-3.1-70B", regex=False)
                    & rows["backend"].isin(["vllm", "trtllm"]))
    oss = rows["model_path"] == GPT_OSS
    source = rows["silicon_data_source"]
    hopper = rows["system"].isin(["h100_sxm", "h200_sxm"]) \
        & source.str.contains("measured=2026-03-27", regex=False)
    blackwell = (rows["system"] == "b200_sxm") \
        & source.str.contains("measured=2026-02-25", regex=False)
    gpt_oss = rows[oss & (rows["backend"] == "vllm") & (hopper | blackwell)]
    gpt_oss = gpt_oss.drop_duplicates(["system", "tp_size", "batch_size", "isl", "osl"])
    deepseek = rows[(rows["model_path"] == DEEPSEEK) & (rows["precision"] == "fp8")
                    & (((rows["backend"] == "trtllm") & (rows["system"] == "h200_sxm")
                        & source.str.contains("measured=2025-11-02", regex=False))
                       | ((rows["backend"] == "sglang")
                          & source.str.contains("measured=2026-03-25", regex=False)))]
    deepseek = deepseek[deepseek.apply(deepseek_plain, axis=1)]
    # of each B200 pair (the plain server's and the multi-token prediction server's), the plain
    # one: the slower decodes (`deepseek_plain`)
    deepseek = deepseek.sort_values("silicon_tpot_ms", ascending=False).drop_duplicates(
        ["backend", "system", "tp_size", "batch_size", "isl", "osl"]).sort_values(order)
    day = source.str.extract(r"measured=(\d{4}-\d\d-\d\d)", expand=False).fillna("")
    minimax = rows[(rows["model_path"] == MINIMAX) & (rows["backend"] == "vllm")
                   & (rows["system"] + " " + day).isin([" ".join(r) for r in MINIMAX_RUNS])]
    minimax = minimax.drop_duplicates(["system", "tp_size", "batch_size", "isl", "osl"])
    qwen = rows[(rows["model_path"] == QWEN35) & (rows["precision"] == "fp8")
                & (((rows["system"] == "h200_sxm") & (rows["tp_size"] == 8)
                    & (day == "2026-03-04"))
                   | ((rows["system"] == "b200_sxm") & (day == "2026-03-24")
                      & source.str.contains("cu130-amd64", regex=False)))]
    qwen = qwen.drop_duplicates(["system", "batch_size", "isl", "osl"])
    return (rows[inferencemax], gpt_oss, deepseek, minimax, qwen,
            rows[~inferencemax & ~oss & ~rows["model_path"].isin([MINIMAX, QWEN35])
                 & (rows["backend"] == "vllm")])


def simulate_inferencemax(row, prefill_overhead_s: float = 0.0):
    """(mean TTFT ms, mean TPOT ms) servesim predicts for one of InferenceMAX's runs, each step
    with a prefill taking `prefill_overhead_s` beyond its kernels (`hardware.prefill_overhead_s`).

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
             "model": model | {"max_seq_len": isl + osl},
             "hardware": {"gpu": SILICON_GPUS[row.system], "tp": int(row.tp_size),
                          "framework": row.backend, "gpu_memory_utilization": 0.9,
                          "prefill_overhead_s": prefill_overhead_s} | hardware,
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


def deepseek_plain(row) -> bool:
    """Whether one of InferenceMAX's DeepSeek-R1 runs is in the plain matrix of its day (no
    multi-token prediction). On 2026-03-25 the B200's SGLang image changed for both
    `dsr1-fp8-b200-sglang` (TP 8 at 4 to 64 users with 1,024-token prompts, 4 users with
    8,192; TP 4 at 4 to 32 users with 8,192) and `dsr1-fp8-b200-sglang-mtp` (TP 8, EAGLE
    drafts, 4 to 512 users), and the rows do not say which ran: the points of the plain matrix
    are this; where both measured a point, the plain run is the one whose decodes were slower
    (`silicon_rows` keeps it). In each of the 11 pairs one run is both the slower to decode
    and the faster to its first token, as a server without a draft model's prefill and without
    several tokens a step would be."""
    if row.backend != "sglang" or row.system != "b200_sxm":
        return True
    if int(row.tp_size) == 4:
        return row.isl == 8192 and row.osl == 1024 and row.batch_size <= 32
    return int(row.tp_size) == 8 and row.batch_size <= (4 if row.isl == 8192 else 64)
