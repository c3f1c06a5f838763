"""The models and GPUs of the real-GPU serving runs servesim simulates (`silicon_runs.py`), and
the servers InferenceMAX's runs among them served, as its scripts of each run's day configured
them (`inferencemax_server`).
"""

from __future__ import annotations

import os

SILICON_MODELS = {"nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B",
                  "meta-llama/Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
                  "Qwen/Qwen3-32B": "Qwen/Qwen3-32B",
                  "openai/gpt-oss-120b": "openai/gpt-oss-120b",
                  "deepseek-ai/DeepSeek-R1": "deepseek-ai/DeepSeek-V3"}  # V3's architecture
GPT_OSS = "openai/gpt-oss-120b"  # its "fp4" is MXFP4 experts, servesim's mxfp4
DEEPSEEK = "deepseek-ai/DeepSeek-R1"
MINIMAX = "MiniMaxAI/MiniMax-M2.5"  # no catalog model: read from the package's config.json
QWEN35 = "Qwen/Qwen3.5-397B-A17B"  # likewise; linear attention beside full attention
# InferenceMAX's MiniMax-M2.5 runs simulated: (GPU, day measured) of each script's version
MINIMAX_RUNS = {("h200_sxm", "2026-03-01"), ("h200_sxm", "2026-03-27"), ("b200_sxm", "2026-03-11"),
                ("h100_sxm", "2026-03-27")}
SILICON_DTYPES = {"fp8": "fp8", "fp4": "nvfp4", "bf16": "bf16"}
SILICON_GPUS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200"}


def inferencemax_server(row) -> tuple[dict, dict, dict, dict]:
    """(`[model]` keys: a catalog model or a config.json, `[hardware]` keys beyond the GPU, TP
    and framework, `[engine]`, `[scheduler]`) of the server one of InferenceMAX's runs served,
    as its scripts of the run's day say (benchmarks/*.sh in SemiAnalysisAI/InferenceX).

    - Llama-3.3-70B (2025-10-29, 70b_*.sh): vLLM 0.10.2 with an fp8 KV cache, 8,192 tokens a
      step, chunked prefill, async scheduling, no prefix caching, 90% of the memory and as many
      sequences as users (512 on the B200); TensorRT-LLM 1.1.0rc2 with an fp8 KV cache, 16,384
      tokens a step, no chunked prefill, no block reuse, its overlap scheduler (on by default;
      both servers' async scheduling is servesim's default), up to 2,048 sequences
      (trtllm-serve's default), its default KV cache and capacity policy (the scripts set
      neither: 0.9 of the memory the weights and activations leave, which servesim's
      framework = "trtllm" gives, and guaranteed_no_evict), at 1,024/1,024 below TP 8 holding
      new prefills up to 20 steps while they and the decodes fill less than 90% of a step's
      tokens (`batch_waits`).
    - gpt-oss-120b (2026-03-27, single_node/gptoss_fp4_h100.sh and _h200.sh): vLLM 0.18.0 with
      its MXFP4 experts on Marlin kernels (w4a16: `moe_backend = "marlin"`), the KV cache in
      bf16, 8,192 tokens a step, no prefix caching, as many sequences as users; on the B200
      (2026-02-25, single_node/gptoss_fp4_b200.sh of that day): vLLM 0.15.1 with the experts'
      activations quantized to MXFP8 on FlashInfer's TensorRT-LLM kernel
      (`VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`: `activation_scheme = "mxfp8"`), an fp8 KV cache,
      8,192 tokens a step, no prefix caching, 512 sequences, CUDA graphs of up to 2,048 tokens
      (`max-cudagraph-capture-size`: servesim's all-reduce runs in a graph up to vLLM's default,
      512, `kernels.GRAPH_TOKENS`) and the all-reduce fused with the norm (`fuse_allreduce_rms`,
      not modelled).
    - DeepSeek-R1 (DeepSeek-V3's architecture) in fp8 on eight H200s and on B200s: TensorRT-LLM
      (2025-11-02, dsr1_fp8_h200_trt_slurm.sh) with the experts whole on each GPU (`--ep_size`
      = TP = 8; the measured rows record moe_tp 8, not what the script ran), attention data
      parallel above 64 users (above 32 at 8,192/1,024), an fp8 KV cache of 0.75 of the
      memory the weights and activations leave (`free_gpu_memory_fraction: 0.75`), no block
      reuse,
      `--max_num_tokens` users + ISL + 64 rounded up to a multiple of 64, no chunked prefill,
      its default capacity policy (guaranteed_no_evict);
      SGLang 0.5.9 (2026-03-25, single_node/dsr1_fp8_h200.sh) with the experts split by TP,
      the KV cache in bf16 (its "auto"), 82% of the memory for the weights and the KV cache
      (`--mem-fraction-static 0.82`, as servesim's framework = "sglang" reads it),
      32,768 tokens a step, chunked prefill, no radix cache (`enable_prefix_caching =
      false`), 512 sequences at 1,024/1,024 and 256 otherwise, its overlap scheduler, its
      prefills run alone (no `--enable-mixed-chunk`: `enable_mixed_chunk = false`), its
      admission (`capacity_scheduler_policy = "new_token_ratio"`, which without a radix cache
      holds a request that ignores EOS back until every running one and it can finish). Both
      streamed every 10th token
      (`stream_interval` 10), which servesim does not model: SGLang sends a request's first
      token at once; whether TensorRT-LLM's waits is not shown here. SGLang 0.5.9 on the B200
      (2026-03-25, single_node/dsr1_fp8_b200.sh): the same but for an fp8 KV cache and its
      scheduler reading new requests every 10 decode steps (`scheduler_recv_interval`); at
      TP 8 82% of the memory, 32,768 tokens a step, 128 sequences, and a read every 30 steps
      from 16 users; at TP 4 95%, 8,192 tokens and 32 sequences. Its TRT-LLM attention and MoE
      kernels (`--attention-backend trtllm_mla`, `--moe-runner-backend flashinfer_trtllm`) are
      those SGLang's B200 tables measured; its block-scaled GEMMs ran on FlashInfer's kernels
      (`SGLANG_ENABLE_FLASHINFER_GEMM=true`, DeepGEMM off), which the tables do not time, and
      are costed from DeepGEMM's, the one block-scaled fp8 GEMM they time; its all-reduce
      fused with the norm (`--enable-flashinfer-allreduce-fusion`) is not modelled, and it
      streamed every 30th token.
    - MiniMax-M2.5 (its FP8 checkpoint, block-scaled: `activation_scheme = "block"`; the
      model read from the package's copy of its config.json): vLLM with the KV cache in bf16
      (its "auto"), 8,192 tokens a step and prefix caching (its defaults: the scripts turned
      it off only on 2026-03-28, and the client's random prompts share nothing), as many
      sequences as users; on the H200 (single_node/minimaxm2.5_fp8_h200.sh) 95% of the memory,
      on 2026-03-01 (vLLM 0.16.0) at TP 4 with the experts split by TP, on 2026-03-27 (vLLM
      0.18.0) at TP 8 with `--enable-expert-parallel` (`ep = 8`: the script enables it for an
      `EP_SIZE` of 1 or more, though the rows record the experts split by TP); on the H100
      (minimaxm2.5_fp8_h100.sh, 2026-03-27, vLLM 0.18.0) 90% of the memory, TP 4 with expert
      parallelism (`ep = 4`), at most 256 sequences, and CUDA graphs of pieces
      (`cudagraph_mode: PIECEWISE`, which servesim does not model); on the B200
      (minimaxm2.5_fp8_b200.sh, 2026-03-11, vLLM 0.17.0) 95% of the memory, TP 2 and 4 with
      expert parallelism (`ep` = TP, as on the H200 on 2026-03-27), blocks of 32 tokens, and
      the experts on the Triton fused MoE kernel, its FlashInfer and DeepGEMM MoE kernels
      turned off (`VLLM_USE_FLASHINFER_MOE_FP8=0`, `VLLM_MOE_USE_DEEP_GEMM=0`:
      `moe_backend = "triton"`).
    - Qwen3.5-397B-A17B (its FP8 checkpoint, block-scaled; the model read from the package's
      copy of its config.json) on eight H200s (2026-03-04, single_node/qwen3.5_fp8_h200.sh of
      2026-03-03): SGLang 0.5.9 at TP 8 with the experts whole on each GPU (`--ep-size 8`),
      an fp8 KV cache, the linear layers' states in bf16 (`--mamba-ssm-dtype bfloat16`: the
      model key `state_dtype`), 80% of the memory for the weights, states and KV cache
      (`--mem-fraction-static 0.8`), 16,384 tokens a step, chunked prefill, no radix cache,
      128 sequences (its mamba pool holds that many states: `--max-running-requests 128`
      with the radix cache off), its overlap scheduler, its prefills run alone and its
      admission, as DeepSeek-R1's; it streamed every 50th token (`--stream-interval 50`,
      which sends a request's first token at once). On the B200 (2026-03-24,
      single_node/qwen3.5_fp8_b200.sh of that day) the same but for 82% of the memory, 32,768
      tokens a step, the layouts the rows record (TP 8 with the experts split by TP below 32
      users, TP 4 x EP 4 from 32), and its scheduler reading new requests every 10 decode
      steps below 16 users and every 30 from 16 (`--scheduler-recv-interval`:
      `scheduler_recv_interval`); it streamed every 30th token."""
    users, isl, osl = int(row.batch_size), int(row.isl), int(row.osl)
    vllm = row.backend == "vllm"
    if row.model_path == MINIMAX:
        tp, day = int(row.tp_size), str(row.silicon_data_source)
        b200 = row.system == "b200_sxm"
        experts = b200 or row.system == "h100_sxm" or "measured=2026-03-27" in day
        return ({"config": minimax_config()},
                {"dtype": "fp8", "activation_scheme": "block", "kv_dtype": "auto",
                 "ep": tp if experts else 1,
                 "gpu_memory_utilization": 0.90 if row.system == "h100_sxm" else 0.95}
                | ({"moe_backend": "triton"} if b200 else {}),
                {"max_num_seqs": users, "max_num_batched_tokens": 8192}
                | ({"block_size": 32} if b200 else {}),
                {"chunked_prefill": True})
    if row.model_path == QWEN35:
        b200 = row.system == "b200_sxm"
        return ({"config": package_config("Qwen--Qwen3.5-397B-A17B_config.json"),
                 "state_dtype": "bf16"},
                {"dtype": "fp8", "activation_scheme": "block", "kv_dtype": "fp8",
                 "ep": int(row.moe_ep_size) if b200 else 8,
                 "gpu_memory_utilization": 0.82 if b200 else 0.8},
                {"max_num_seqs": 128, "max_num_batched_tokens": 32768 if b200 else 16384,
                 "enable_prefix_caching": False},
                {"chunked_prefill": True, "enable_mixed_chunk": False,
                 "capacity_scheduler_policy": "new_token_ratio"}
                | ({"scheduler_recv_interval": 30 if users >= 16 else 10} if b200 else {}))
    if row.model_path == DEEPSEEK:
        if row.backend == "sglang" and row.system == "b200_sxm":
            tp8 = int(row.tp_size) == 8
            return ({"name": SILICON_MODELS[DEEPSEEK]},
                    {"dtype": "fp8", "activation_scheme": "block", "kv_dtype": "fp8",
                     "gpu_memory_utilization": 0.82 if tp8 else 0.95},
                    {"max_num_seqs": 128 if tp8 else 32,
                     "max_num_batched_tokens": 32768 if tp8 else 8192,
                     "enable_prefix_caching": False},
                    {"chunked_prefill": True, "enable_mixed_chunk": False,
                     "capacity_scheduler_policy": "new_token_ratio",
                     "scheduler_recv_interval": 30 if tp8 and users >= 16 else 10})
        if row.backend == "sglang":
            return ({"name": SILICON_MODELS[DEEPSEEK]},
                    {"dtype": "fp8", "activation_scheme": "block", "kv_dtype": "auto",
                     "gpu_memory_utilization": 0.82},
                    {"max_num_seqs": 512 if isl == osl == 1024 else 256,
                     "max_num_batched_tokens": 32768, "enable_prefix_caching": False},
                    {"chunked_prefill": True, "enable_mixed_chunk": False,
                     "capacity_scheduler_policy": "new_token_ratio"})
        ranks = 8 if users > (32 if isl == 8192 else 64) else 1  # attention data parallel
        tokens = (users + isl + 127) // 64 * 64
        return ({"name": SILICON_MODELS[DEEPSEEK]},
                {"tp": 8 // ranks, "dp": ranks, "ep": 8, "dtype": "fp8",
                 "activation_scheme": "block", "kv_dtype": "fp8",
                 "gpu_memory_utilization": 0.75},
                {"max_num_seqs": min(2048, tokens), "max_num_batched_tokens": tokens},
                {"chunked_prefill": False, "capacity_scheduler_policy": "guaranteed_no_evict"})
    if row.model_path == GPT_OSS and row.system == "b200_sxm":
        return ({"name": GPT_OSS}, {"dtype": "mxfp4", "kv_dtype": "fp8",
                                    "activation_scheme": "mxfp8"},
                {"max_num_seqs": 512, "max_num_batched_tokens": 8192,
                 "enable_prefix_caching": False}, {"chunked_prefill": True})
    if row.model_path == GPT_OSS:
        return ({"name": GPT_OSS}, {"dtype": "mxfp4", "kv_dtype": "auto", "moe_backend": "marlin"},
                {"max_num_seqs": users, "max_num_batched_tokens": 8192}, {"chunked_prefill": True})
    hardware = {"dtype": SILICON_DTYPES[row.precision], "kv_dtype": "fp8"}
    if vllm:
        engine = {"max_num_seqs": 512 if row.system == "b200_sxm" else users,
                  "max_num_batched_tokens": 8192}
    else:
        engine = {"max_num_seqs": 2048, "max_num_batched_tokens": 16384}
    scheduler = {"chunked_prefill": vllm} | (
        {} if vllm else {"capacity_scheduler_policy": "guaranteed_no_evict"}) | (
        {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9}
        if batch_waits(row) else {})
    return {"name": "meta-llama/Llama-3.3-70B-Instruct"}, hardware, engine, scheduler


def minimax_config() -> str:
    """The path of MiniMax-M2.5's config.json as aiconfigurator-core ships it."""
    return package_config("MiniMaxAI--MiniMax-M2.5_config.json")


def package_config(name: str) -> str:
    """The path of a model's config.json as aiconfigurator-core ships it."""
    import importlib.util

    package = os.path.dirname(importlib.util.find_spec("aiconfigurator_core").origin)
    return os.path.join(package, "model_configs", name)


def batch_waits(row) -> bool:
    """Whether InferenceMAX's server held new prefills for a fuller batch: its TensorRT-LLM
    servers at 1,024/1,024 below TP 8 (`batch_wait_timeout_iters: 20`,
    `batch_wait_max_tokens_ratio: 0.9`)."""
    return row.backend == "trtllm" and row.isl == row.osl == 1024 and row.tp_size < 8
