"""servesim's maximum throughput against TensorRT-LLM's own performance page
(NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md, the v1.0 release's:
`trtllm-bench throughput`, every request at once, 3,000 requests (30,000 at 128/128) of
fixed lengths, NVIDIA's ModelOpt FP8/FP4 checkpoints, whose KV cache is fp8, 95% of the free
memory for it), with the TensorRT-LLM tables, 2,048 sequences and 8,192 tokens a step: output
tokens per second, with servesim's default server time (1 ms a step, 10 us a sequence)
overlapping the GPU's, as TensorRT-LLM's overlap scheduler runs by default, and added to it
(`hardware.async_scheduling = false`).

Part 0d of `benchmarks/hardware_accuracy.py`; `serving_accuracy.py --only trtllm` runs it too.

    python benchmarks/trtllm_page.py   # about a minute
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


def trtllm_part() -> None:
    """Part 0d: maximum output throughput against TensorRT-LLM's performance page."""
    from engine.benchmark import summarize
    from scenarios.resolve import resolve
    from sim.runner import run_config

    print(f"{'model':34s} {'gpu':9s} {'tp.dp.ep':>8s} {'dtype':5s} {'isl/osl':>10s} {'page':>7s} "
          + " ".join(f"{name:>20s}" for name in SCHEDULING))
    errors = {name: [] for name in SCHEDULING}
    for model, gpu, (tp, dp, ep), dtype, isl, osl, published in TRTLLM_PAGE:
        cells = []
        for name, overlapped in SCHEDULING.items():
            table = {"name": "trtllm-page", "model": {"name": model, "max_seq_len": isl + osl},
                     "hardware": {"gpu": gpu, "tp": tp, "dp": dp, "ep": ep, "dtype": dtype,
                                  "kv_dtype": "fp8",
                                  "framework": "trtllm", "gpu_memory_utilization": 0.95,
                                  "async_scheduling": overlapped},
                     "cost": {"model": "hardware"},
                     "engine": {"max_num_seqs": 2048, "max_num_batched_tokens": 8192},
                     "scheduler": {"chunked_prefill": True},
                     "workload": {"num_requests": 30000 if isl == 128 else 3000,
                                  "arrival": {"process": "burst"},
                                  "prompt_tokens": {"dist": "fixed", "value": isl},
                                  "output_tokens": {"dist": "fixed", "value": osl}}}
            tokens_s = summarize(run_config(resolve(table, Path(__file__))))["output_throughput"]
            errors[name].append(tokens_s / published - 1)
            cells.append(f"{tokens_s:9,.0f} ({100 * errors[name][-1]:+6.1f}%)")
        print(f"{model:34s} {gpu:9s} {f'{tp}.{dp}.{ep}':>8s} {dtype:5s} {f'{isl}/{osl}':>10s} "
              f"{published:7,d} "
              + " ".join(f"{c:>20s}" for c in cells), flush=True)
    for name, values in errors.items():
        a = np.abs(values)
        print(f"{name}: median |error| {100 * np.median(a):.1f}%, "
              f"mean signed {100 * np.mean(values):+.1f}%")


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    trtllm_part()
