"""servesim's maximum throughput against TensorRT-LLM's own performance page
(NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md, the v1.0 release's:
`trtllm-bench throughput`, every request at once, 3,000 requests (30,000 at 128/128) of
fixed lengths, NVIDIA's ModelOpt FP8/FP4 checkpoints, whose KV cache is fp8, 95% of the free
memory for it, trtllm-bench's scheduling: its capacity policy guaranteed_no_evict, no chunked
prefill), with the TensorRT-LLM tables, 2,048 sequences and 8,192 tokens a step: output tokens
per second, with servesim's default server time (1 ms a step, 10 us a sequence) overlapping
the GPU's, as TensorRT-LLM's overlap scheduler runs by default, and added to it
(`hardware.async_scheduling = false`); and, without attention data parallelism, overlapped
and sized as trtllm-bench sizes a run that gives no sizes (`trtllm_bench_sizes`).

Part 0d of `benchmarks/hardware_accuracy.py`; `serving_accuracy.py --only trtllm` runs it too.

    python benchmarks/trtllm_page.py   # about 20 seconds
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# TensorRT-LLM's perf-overview (v1.0): model, GPU, (TP, DP, EP), dtype, ISL, OSL, output tokens/s.
# Its mixtures of experts ran `--tp 8 --ep 8` with `enable_attention_dp: true`: eight
# attention data-parallel ranks of one GPU, the experts whole across the eight.
TRTLLM_PAGE = [("meta-llama/Llama-3.1-8B", "h200", (1, 1, 1), "fp8", 1000, 1000, 17744),
               ("meta-llama/Llama-3.1-8B", "h100-sxm", (1, 1, 1), "fp8", 1000, 1000, 15220),
               ("meta-llama/Llama-3.1-8B", "h200", (1, 1, 1), "fp8", 2048, 128, 3538),
               ("meta-llama/Llama-3.1-8B", "h200", (1, 1, 1), "fp8", 128, 128, 27911),
               ("meta-llama/Llama-3.3-70B-Instruct", "h200", (1, 1, 1), "fp8", 1000, 1000, 2909),
               ("meta-llama/Llama-3.3-70B-Instruct", "h100-sxm", (2, 1, 1), "fp8", 1000, 1000,
                4205),
               ("meta-llama/Llama-3.3-70B-Instruct", "b200", (1, 1, 1), "nvfp4", 1000, 1000,
                7007),
               ("Qwen/Qwen3-235B-A22B", "h200", (1, 8, 8), "fp8", 1000, 1000, 23789),
               ("Qwen/Qwen3-235B-A22B", "h100-sxm", (1, 8, 8), "fp8", 1000, 1000, 14898),
               ("Qwen/Qwen3-235B-A22B", "b200", (1, 8, 8), "nvfp4", 1000, 1000, 42391),
               ("Qwen/Qwen3-30B-A3B", "b200", (1, 1, 1), "nvfp4", 1000, 1000, 25828)]
SCHEDULING = {"overlap scheduler": True, "without overlap": False}  # async_scheduling
SIZED = "trtllm-bench's sizes"  # the overlap scheduler's run, sized as trtllm-bench sizes it
WEIGHT_BYTES = {"fp8": 1.0, "nvfp4": 0.5}


def trtllm_bench_sizes(model: str, gpu: str, tp: int, dtype: str, isl: int,
                       osl: int) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) as `trtllm-bench throughput` sets them when a run gives
    neither, as the page's runs gave neither (NVIDIA/TensorRT-LLM
    tensorrt_llm/bench/build/tuning.py, `calc_engine_setting` and `finetune_setting`): the
    requests of ISL + OSL tokens an fp8 KV cache holds in 95% of the memory the weights leave
    (the GPUs' whole memory in GiB, the weights as parameters x bytes, a token's KV over at
    least `tp` KV heads), at most 4,096, rounded up to a multiple of 32 (at least 64), 128 or
    256; the tokens a step that many requests' ISL / OSL ratio asks, at most 32,768, rounded up
    to a multiple of 256 (at least 2,048), 512 or 1,024."""
    import math

    from sim.costs.hardware import gpu_spec, model_architecture

    arch = model_architecture({"name": model})
    head = arch.head_dim or arch.d_model // arch.n_heads
    token_gib = 2 * arch.n_layers * max(tp, arch.n_kv_heads) * head / 2**30  # fp8: a byte
    free_gib = gpu_spec(gpu).memory_gib * tp - arch.parameters() * WEIGHT_BYTES[dtype] / 2**30
    requests = min(free_gib * 0.95 / (token_gib * (isl + osl)), 4096)
    if requests < 1:  # trtllm-bench refuses such a run too
        raise ValueError(f"{model} in {dtype} leaves no KV cache for one request on {tp} {gpu}")
    tokens = min(requests * (1 + isl / osl), 32768)
    step = 32 if requests < 256 else 128 if requests < 1024 else 256
    batch = max(64 if step == 32 else 0, step * math.ceil(requests / step))
    step = 256 if tokens < 4096 else 512 if tokens < 8192 else 1024
    return batch, max(2048 if step == 256 else 0, step * math.ceil(tokens / step))


def trtllm_part() -> None:
    """Part 0d: maximum output throughput against TensorRT-LLM's performance page."""
    from engine.benchmark import summarize
    from scenarios.resolve import resolve
    from sim.runner import run_config

    print(f"{'model':34s} {'gpu':9s} {'tp.dp.ep':>8s} {'dtype':5s} {'isl/osl':>10s} {'page':>7s} "
          + " ".join(f"{name:>20s}" for name in (*SCHEDULING, SIZED)))
    errors = {name: [] for name in (*SCHEDULING, SIZED)}
    for model, gpu, (tp, dp, ep), dtype, isl, osl, published in TRTLLM_PAGE:
        cells = []
        runs = [(name, overlapped, (2048, 8192)) for name, overlapped in SCHEDULING.items()]
        if dp == 1:  # how trtllm-bench sizes attention data-parallel ranks varies by version
            runs.append((SIZED, True, trtllm_bench_sizes(model, gpu, tp, dtype, isl, osl)))
        for name, overlapped, (sequences, tokens) in runs:
            table = {"name": "trtllm-page", "model": {"name": model, "max_seq_len": isl + osl},
                     "hardware": {"gpu": gpu, "tp": tp, "dp": dp, "ep": ep, "dtype": dtype,
                                  "kv_dtype": "fp8",
                                  "framework": "trtllm", "gpu_memory_utilization": 0.95,
                                  "async_scheduling": overlapped},
                     "cost": {"model": "hardware"},
                     "engine": {"max_num_seqs": sequences, "max_num_batched_tokens": tokens},
                     "scheduler": {"chunked_prefill": False,
                                   "capacity_scheduler_policy": "guaranteed_no_evict"},
                     "workload": {"num_requests": 30000 if isl == 128 else 3000,
                                  "arrival": {"process": "burst"},
                                  "prompt_tokens": {"dist": "fixed", "value": isl},
                                  "output_tokens": {"dist": "fixed", "value": osl}}}
            tokens_s = summarize(run_config(resolve(table, Path(__file__))))["output_throughput"]
            errors[name].append(tokens_s / published - 1)
            cells.append(f"{tokens_s:9,.0f} ({100 * errors[name][-1]:+6.1f}%)")
        cells += ["n/a"] * (len(errors) - len(cells))
        print(f"{model:34s} {gpu:9s} {f'{tp}.{dp}.{ep}':>8s} {dtype:5s} {f'{isl}/{osl}':>10s} "
              f"{published:7,d} "
              + " ".join(f"{c:>20s}" for c in cells), flush=True)
    for name, values in errors.items():
        a = np.abs(values)
        print(f"{name} ({len(values)} rows): median |error| {100 * np.median(a):.1f}%, "
              f"mean signed {100 * np.mean(values):+.1f}%")
    sized = [dp == 1 for _, _, (_, dp, _), *_ in TRTLLM_PAGE]
    same = np.abs(np.asarray(errors["overlap scheduler"])[sized])
    print(f"({SIZED}: max_batch_size and max_num_tokens as trtllm-bench sets them when a run "
          f"gives neither, `trtllm_bench_sizes`, beside 2,048 and 8,192; the rows without "
          f"attention data parallelism, where the overlap scheduler's median |error| is "
          f"{100 * np.median(same):.1f}%)")


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    trtllm_part()
