"""Every default of a scenario, in one place. A scenario file only says what differs.

The model and scheduler defaults are read from the engine's own config dataclasses, so the
engine and the scenarios cannot disagree; the rest is chosen here, each with its reason.
`[workload]` has no defaults: what to serve is the one thing a scenario must say.
"""

from __future__ import annotations

from dataclasses import fields

from engine.model import ModelConfig
from engine.scheduler_config import SchedulerConfig

MODES = ("simulate", "cosimulate", "serve")
COST_MODELS = ("profile", "live", "linear", "hardware")
# Trace formats (docs/sim/traces.md). A ShareGPT file gives lengths but no times: its arrivals
# come from `workload.arrival`, as in vLLM's benchmark; the others give both.
TRACE_FORMATS = ("azure", "mooncake", "csv", "jsonl", "sharegpt")
UNTIMED_TRACE_FORMATS = ("sharegpt",)
SHAREGPT_TOKENIZERS = ("char", "whitespace")
# Traces shipped as package data in sim/workloads/traces/data/ (whose README.md gives each one's
# source, licence and citation), named by `workload.trace.name`: file and format.
SHIPPED_TRACES = {
    "azure-conv": ("azure_llm_2023_conv.csv.gz", "azure"),
    "azure-code": ("azure_llm_2023_code.csv.gz", "azure"),
    "mooncake-conv": ("mooncake_conversation.jsonl.gz", "mooncake"),
}

_MODEL = {f.name: f.default for f in fields(ModelConfig) if f.name != "seed"}
_SCHED = {f.name: f.default for f in fields(SchedulerConfig)}

DEFAULTS = {
    "description": "",
    "seed": 0,
    "mode": "simulate",
    "model": _MODEL,  # vocab_size, d_model, n_layers, n_heads, d_ff, max_seq_len
    "engine": {
        "block_size": 16,  # vLLM's default block size
        "num_kv_blocks": 512,  # 8,192 token slots: 128 MiB of float32 K+V for the default model
        "max_num_seqs": _SCHED["max_num_seqs"],
        "max_num_batched_tokens": _SCHED["max_num_batched_tokens"],
        "enable_prefix_caching": True,  # vLLM's default: reuse the KV of cached prompt prefixes
        "swap_blocks": 0,  # host KV blocks for scheduler.preemption = "swap" (none: recompute)
    },
    "scheduler": {
        "policy": _SCHED["policy"],
        "queue": _SCHED["queue"],
        "chunked_prefill": _SCHED["chunked_prefill"],
        "max_batch_size": _SCHED["max_batch_size"],
        "batch_timeout_s": _SCHED["batch_timeout_s"],
        "preemption": _SCHED["preemption"],  # recompute, as vLLM's V1 engine always does
        # TensorRT-LLM's batch waiting: hold new prefills while sequences decode, up to this
        # many steps or until they fill this share of the token budget (0: never hold)
        "batch_wait_timeout_iters": _SCHED["batch_wait_timeout_iters"],
        "batch_wait_max_tokens_ratio": _SCHED["batch_wait_max_tokens_ratio"],
        # admit while the first chunk's KV blocks are free, preempt when a decode finds none
        # (vLLM's way), or "guaranteed_no_evict": admit only what the cache holds to every
        # admitted sequence's last token (TensorRT-LLM's default capacity policy), or
        # "new_token_ratio": beside a decaying share of the running requests' future tokens
        # (SGLang's admission)
        "capacity_scheduler_policy": _SCHED["capacity_scheduler_policy"],
        # run decodes beside prefill chunks in a step (vLLM's and TensorRT-LLM's way), or
        # false: prefills alone while any can run, the decodes waiting (SGLang's default)
        "enable_mixed_chunk": _SCHED["enable_mixed_chunk"],
        # SGLang's --scheduler-recv-interval: read new requests every this many steps of
        # decodes, the step after one with a prefill, or at once when nothing runs (1: every
        # step)
        "scheduler_recv_interval": _SCHED["scheduler_recv_interval"],
    },
    "cost": {
        "model": "profile",
        "profile": "default",  # shipped in sim/costs/profiles/, fitted to the default model
        # Scale each simulated step by the profiled machine's speed from moment to moment
        # (sim.costs.jitter): off, a machine of constant speed, so a what-if answer has no noise.
        "jitter": False,
        # Swap preemption's host copies on the NumPy engine: a memcpy, 7-18 GB/s measured on a
        # 2-core cloud VM for 4-64 blocks of the default model (cost.model "hardware" uses the
        # GPU's host link instead, hardware.gpu's host_bandwidth_gbs).
        "swap_bandwidth_gbs": 10.0,
        # Coefficients of the `linear` cost model (docs/sim/cost_models.md), used only when
        # model = "linear"; the values are of the order the default profile measures.
        "step_overhead_s": 0.003,
        "prefill_token_s": 0.0004,
        "decode_seq_s": 0.0009,
        "context_token_s": 3e-6,
    },
    "slo": {
        "ttft_s": 1.0,  # interactive chat: first token within a second
        "tpot_s": 0.1,  # ten tokens a second, faster than reading speed
    },
}

# cost.model = "hardware": a real model on a real GPU (sim/costs/hardware/). Its [model] table
# names a catalog model (or defines one with these keys), and engine.num_kv_blocks defaults to
# "auto": what the GPU's memory leaves after the weights, as vLLM derives it.
# `config` reads them from a Hugging Face config.json instead (sim/costs/hardware/hf_config.py).
# The optional parts of an architecture, each off at 0: mixture of experts, multi-head latent
# attention, sliding-window attention, linear attention (sim/costs/hardware/architecture.py).
MOE_MODEL_KEYS = ("n_experts", "experts_per_token", "moe_d_ff", "n_shared_experts",
                  "shared_d_ff", "n_dense_layers")
MLA_MODEL_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                  "v_head_dim")
WINDOW_MODEL_KEYS = ("sliding_window", "sliding_layers")
# DeepSeek's sparse attention (with latent attention): a query attends to its index_topk keys
SPARSE_MODEL_KEYS = ("index_topk", "index_n_heads", "index_head_dim")
# Linear attention (Gated DeltaNet, Qwen3-Next's and Qwen3.5's): linear_layers of the layers
LINEAR_MODEL_KEYS = ("linear_layers", "linear_k_heads", "linear_v_heads", "linear_k_dim",
                     "linear_v_dim", "linear_conv")
# their state's elements
STATE_DTYPES = ("fp32", "bf16")
HARDWARE_MODEL_KEYS = ("name", "config", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff",
                       "gated_mlp", "vocab_size", "max_seq_len", "head_dim", "tie_embeddings",
                       "norm", "qkv_bias", "parallel_attn_mlp", "attn_gate", *MOE_MODEL_KEYS,
                       *MLA_MODEL_KEYS, *SPARSE_MODEL_KEYS, *WINDOW_MODEL_KEYS,
                       *LINEAR_MODEL_KEYS, "state_dtype")
# Weights: fp8 and nvfp4 (4-bit NVFP4, Blackwell GPUs only) run with 16-bit activations.
HARDWARE_DTYPES = ("fp16", "bf16", "fp8", "nvfp4", "mxfp4")
# The KV cache: "auto" is vLLM's --kv-cache-dtype auto, the model's activation dtype (the
# weights' for fp16 and bf16, bf16 under fp8 or nvfp4 weights).
KV_DTYPES = ("auto", "fp16", "bf16", "fp8")
# An fp8 checkpoint's scales: per tensor, the activations' fixed in the checkpoint (static) or
# computed at every GEMM (dynamic); or per 128 x 128 block of weights and 128 channels of a
# token's activations (block: DeepSeek-V3/R1's and Qwen3's own FP8 checkpoints). mxfp4 experts'
# activations: bf16 (static, the default) or quantized to MXFP8 (mxfp8: vLLM's
# VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 on Blackwell, FlashInfer's TensorRT-LLM MoE kernel)
ACTIVATION_SCHEMES = ("static", "dynamic", "block", "mxfp8")
# The fused MoE kernel (vLLM's --moe-backend): "auto", the framework's default for the model's
# shape, as measured; "marlin", Marlin's weight-only kernel (mxfp4 experts: gpt-oss under
# VLLM_MXFP4_USE_MARLIN=1); "triton", the Triton fused MoE kernel (vLLM's with its FlashInfer
# and DeepGEMM MoE kernels turned off, SGLang's default on Hopper)
MOE_BACKENDS = ("auto", "marlin", "triton")
HARDWARE_NORMS = ("rmsnorm", "layernorm")
MAX_TP = 8
MAX_GPUS = 8  # tp x dp: one node (servesim costs no network between nodes)
HARDWARE_DEFAULTS = {
    "tp": 1,
    # vLLM's expert parallelism spans tp x data-parallel GPUs; one engine has one data-parallel
    # rank, so experts are split by tensor parallelism (1) or whole across the tp GPUs (tp)
    "ep": 1,
    # attention data parallelism (vLLM's --data-parallel-size with --enable-expert-parallel,
    # TensorRT-LLM's enable_attention_dp, SGLang's --enable-dp-attention): dp ranks of tp GPUs,
    # each attending over its own requests, the experts across all dp x tp GPUs
    "dp": 1,
    "dtype": "fp16",
    "kv_dtype": "auto",
    # an fp8 (per-tensor) checkpoint's activation scales: "static" (fixed in the checkpoint, as
    # NVIDIA's ModelOpt FP8 checkpoints) or "dynamic" (computed at every GEMM)
    "activation_scheme": "static",
    "moe_backend": "auto",
    # vLLM's default, read under framework = "trtllm" as its free_gpu_memory_fraction (a share
    # of what the weights and activations leave; its default too) and under "sglang" as its
    # --mem-fraction-static (whose own default depends on the GPU)
    "gpu_memory_utilization": 0.9,
    "step_overhead_s": 1.0e-3,  # the server's own time a step (an assumption: measure yours)
    "seq_overhead_s": 10e-6,  # and per sequence of the batch
    # what a step with a prefill takes beyond its kernels while the GPU waits (an eager step's
    # launches, its synchronisations), not hidden by async scheduling: none is known by
    # default (docs/sim/hardware.md, "Prefill overhead": measured servers, and how to set it)
    "prefill_overhead_s": 0.0,
    # the server plans each step while the one before runs, its own time hidden behind the
    # GPU's (vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap schedulers: each
    # framework's default in current releases); false: plan, then run, as older vLLM did
    "async_scheduling": True,
    "framework": "vllm",  # whose measured kernels cost the step (sim/costs/hardware/kernels.py)
}
FRAMEWORKS = ("vllm", "sglang", "trtllm")
# "measured": the silicon-measured kernel tables (servesim[gpu]), the roofline for what they
# lack; "roofline": the roofline alone. Unset: measured where tables exist for the GPU.
KERNEL_SOURCES = ("measured", "roofline")
GPU_TABLE_KEYS = ("name", "memory_gib", "memory_bandwidth_gbs", "peak_tflops",
                  "interconnect_bandwidth_gbs", "interconnect_latency_us", "measured",
                  "interconnect", "host_bandwidth_gbs")

# [search] (`servesim search`, docs/sim/search.md): the SLO attainment to hold and when the
# bisection stops; the bracket of rates has no default (it depends on the server), and without a
# grid the search covers the scenario's own variants and sweep points.
SEARCH_DEFAULTS = {
    "target": 0.9,  # nine requests in ten meet every SLO, a common serving objective
    "tolerance": 0.05,  # the capacity known to within 5%: finer than run-to-run noise of a load
}

# [cluster] (sim/cluster/, docs/sim/cluster.md): replicas of the engine behind a router.
ROUTERS = ("round_robin", "random", "least_outstanding", "least_kv", "prefix_affinity")
CLUSTER_DEFAULTS = {
    "router": "round_robin",  # what a plain load balancer (a Kubernetes Service) does
    "report_delay_s": 0.0,  # the router sees each replica's load as it is
}
# Prefill/decode disaggregation (cluster.prefill_replicas, decode_replicas): where a prefilled
# request goes to decode, and its KV link when cost.model is not "hardware" (the hardware model
# takes the GPU catalog's interconnect).
DECODE_ROUTERS = ("least_kv", "least_outstanding")
DISAGGREGATION_DEFAULTS = {
    "decode_router": "least_kv",  # a decode replica is bound by its KV memory, not its compute
}
KV_TRANSFER_GBPS = 25.0  # GB/s: a 200 Gb/s InfiniBand NIC between two servers
KV_TRANSFER_LATENCY_S = 10e-6  # an RDMA write's setup, as the catalog assumes for NVLink
DISAGGREGATION_KEYS = ("decode_router", "kv_transfer_gbps", "kv_transfer_latency_s")
# The keys a pool of replicas may set: its GPU, its engine's limits and its scheduler.
POOL_SECTIONS = ("hardware", "engine", "scheduler")

# Limits of what can be simulated faithfully.
MAX_TOKENS = 2**31 - 1  # a request's token counts: sums over millions of requests stay exact
GAMMA_CV = (0.01, 10.0)  # beyond 10 the gamma shape (1 / cv^2) is so small that gaps underflow
MAX_TIME_S = 2.0**32  # about 136 years: simulated times stay below a microsecond's resolution

# Defaults inside the workload's optional parts (the parts themselves have none; a process's or
# a distribution's own defaults are its class's, scenarios/arrival.py and lengths.py).
# workload.sessions: no shared system prompt; each turn sent as soon as the last one finishes
SESSIONS_DEFAULTS = {"system_prompt_tokens": 0, "think_time_s": 0.0}
TRACE_DEFAULTS = {"name": None, "format": "azure", "time_scale": 1.0, "max_requests": None}
# A ShareGPT file's own keys: one token per character (the engine's tokenizer), and a shuffle
# seeded by the scenario's seed before taking max_requests (vLLM samples its prompts so too).
SHAREGPT_DEFAULTS = {"tokenizer": "char", "shuffle": True}
