"""What a scenario file may contain: every key, its type and its allowed values, as a `Table`
of `Spec`s (`specs.py`, whose `check_table` walks a parsed TOML table against it). The arrival
processes and length distributions bring their own tables (`arrival.py`, `lengths.py`). Rules that tie
several keys together (files that must exist, a cluster's pools) live in `checks.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .defaults import (ACTIVATION_SCHEMES, COST_MODELS, DECODE_ROUTERS, FRAMEWORKS,
                       GPU_TABLE_KEYS, HARDWARE_DTYPES, HARDWARE_NORMS, KERNEL_SOURCES, KV_DTYPES,
                       LINEAR_MODEL_KEYS, MAX_GPUS, MAX_TP, MLA_MODEL_KEYS, MODES, MOE_BACKENDS,
                       MOE_MODEL_KEYS, ROUTERS, SHAREGPT_TOKENIZERS, SHIPPED_TRACES,
                       SPARSE_MODEL_KEYS, STATE_DTYPES, TRACE_FORMATS, WINDOW_MODEL_KEYS)
from .errors import FieldError
from .overrides import flatten
from .specs import (BOOL, NON_EMPTY_TEXT, NON_NEGATIVE_INT, NON_NEGATIVE_NUMBER, POSITIVE_INT,
                    POSITIVE_NUMBER, SLO_LIMIT, TEXT, TOKENS_OR_NONE, Spec, Table, check_table,
                    choice, is_int, is_number)
from .arrival import ARRIVAL_SCHEMA
from .lengths import LENGTH_SCHEMA, PRIORITY_SCHEMA
from engine.queues import QUEUES
from engine.scheduler_config import CAPACITY_POLICIES, POLICIES, PREEMPTION_MODES


LENGTH = LENGTH_SCHEMA


@dataclass(frozen=True)
class CountOrLength(Spec):
    """An integer, or a length distribution table (checked as `LENGTH`)."""

    def check(self, key: str, value) -> None:
        if isinstance(value, dict):
            check_table(value, LENGTH, key)
        else:
            super().check(key, value)


# Multi-turn chat sessions: the arrival process starts conversations, prompt_tokens is each new
# user message's length, output_tokens each reply's (cross-key rules: checks.py).
SESSIONS = Table({
    "conversations": POSITIVE_INT,
    "turns": CountOrLength("a positive integer or a length distribution table (as "
                           "workload.prompt_tokens)", lambda v: is_int(v) and v >= 1),
    "system_prompt_tokens": TOKENS_OR_NONE,
    "think_time_s": NON_NEGATIVE_NUMBER,
}, required=("conversations", "turns"))

ARRIVAL = ARRIVAL_SCHEMA

WORKLOAD = Table({
    "num_requests": POSITIVE_INT,
    "max_seconds": POSITIVE_NUMBER,
    # at most this many requests in flight; the others wait on the client (checks.py)
    "max_concurrency": POSITIVE_INT,
    "warmup_s": NON_NEGATIVE_NUMBER,
    "arrival": ARRIVAL,
    "prompt_tokens": LENGTH,
    "output_tokens": LENGTH,
    "priority": PRIORITY_SCHEMA,
    # name (a shipped trace) or path (a file) and the keys of its format: checks.py
    "trace": Table({"name": choice(tuple(SHIPPED_TRACES)), "path": NON_EMPTY_TEXT,
                    "format": choice(TRACE_FORMATS), "time_scale": POSITIVE_NUMBER,
                    "max_requests": POSITIVE_INT, "tokenizer": choice(SHAREGPT_TOKENIZERS),
                    "shuffle": BOOL}),
    "sessions": SESSIONS,
})


@dataclass(frozen=True)
class Grid(Spec):
    """A table of dotted scenario keys (quoted or nested), each a non-empty list of values."""

    def check(self, key: str, value) -> None:
        if not isinstance(value, dict) or not value:
            raise FieldError(key, f"must be {self.allowed}, got {value!r}")
        for name, values in flatten(value).items():
            if not isinstance(values, list) or not values:
                raise FieldError(f"{key}.{name}", f"must be a non-empty list of values, got "
                                                  f"{values!r}")


def _is_bracket(v) -> bool:
    return (isinstance(v, dict) and set(v) == {"low", "high"} and is_number(v["low"])
            and is_number(v["high"]) and 0 < v["low"] < v["high"])


@dataclass(frozen=True)
class Bracket(Spec):
    """A table { low, high } of positive numbers, low below high: its mistakes named by key."""

    def check(self, key: str, value) -> None:
        if isinstance(value, dict):
            check_table(value, Table({"low": POSITIVE_NUMBER, "high": POSITIVE_NUMBER},
                                     required=("low", "high")), key)
            if value["low"] >= value["high"]:
                raise FieldError(key, f"low ({value['low']}) must be below high "
                                      f"({value['high']})")
        super().check(key, value)


# `servesim search` (docs/sim/search.md): the SLO attainment to hold, the bracket of arrival
# rates to bisect, when to stop, and the configurations to search.
SEARCH = Table({
    "target": Spec("a number above 0 and at most 1 (the fraction of requests meeting every SLO)",
                   lambda v: is_number(v) and 0 < v <= 1),
    "rate": Bracket("a table { low, high } of arrival rates (requests/s) with 0 < low < high",
                    _is_bracket),
    "tolerance": Spec("a number above 0 and below 1 (stop when (high - low) / high is below it)",
                      lambda v: is_number(v) and 0 < v < 1),
    "grid": Grid("a non-empty table of dotted scenario keys, each a list of values",
                 lambda v: True),
}, required=("rate",))


@dataclass(frozen=True)
class Pools(Spec):
    """`[[cluster.pools]]`: a non-empty array of tables, each a pool's name, its number of
    replicas and the dotted keys it sets (checked as `POOL`)."""

    def check(self, key: str, value) -> None:
        if not isinstance(value, list) or not value:
            raise FieldError(key, f"must be {self.allowed}, got {value!r}")
        for i, pool in enumerate(value):
            check_table(pool, POOL, f"{key}[{i}]")


POOL = Table({"name": NON_EMPTY_TEXT, "replicas": POSITIVE_INT,
              "set": Spec("a table of dotted keys", lambda v: isinstance(v, dict))},
             required=("name", "replicas"))

# Replicas of the engine behind a router (docs/sim/cluster.md); cross-key rules: checks.py.
CLUSTER = Table({
    "replicas": POSITIVE_INT,
    "router": choice(ROUTERS),
    "report_delay_s": NON_NEGATIVE_NUMBER,
    "pools": Pools("a non-empty array of tables ([[cluster.pools]]) with name, replicas and "
                   "set", lambda v: True),
    # prefill/decode disaggregation (sim/cluster/disaggregation.py)
    "prefill_replicas": POSITIVE_INT,
    "decode_replicas": POSITIVE_INT,
    "decode_router": choice(DECODE_ROUTERS),
    "kv_transfer_gbps": POSITIVE_NUMBER,
    "kv_transfer_latency_s": NON_NEGATIVE_NUMBER,
})


SCENARIO = Table({
    "name": NON_EMPTY_TEXT,
    "description": TEXT,
    "seed": NON_NEGATIVE_INT,
    "mode": choice(MODES),
    "model": Table({name: POSITIVE_INT for name in
                    ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len")}
                   | {"d_ff": NON_NEGATIVE_INT}
                   # cost.model = "hardware" only (checks.py): a catalog model or its shape
                   | {"name": NON_EMPTY_TEXT, "n_kv_heads": POSITIVE_INT, "head_dim": POSITIVE_INT,
                      "gated_mlp": BOOL, "tie_embeddings": BOOL, "norm": choice(HARDWARE_NORMS),
                      "qkv_bias": BOOL, "parallel_attn_mlp": BOOL, "attn_gate": BOOL,
                      "state_dtype": choice(STATE_DTYPES),
                      "config": NON_EMPTY_TEXT}  # a Hugging Face config.json
                   # experts, latent, sparse, sliding-window and linear attention: 0 is off
                   # (architecture.py)
                   | {name: NON_NEGATIVE_INT for name in
                      (*MOE_MODEL_KEYS, *MLA_MODEL_KEYS, *SPARSE_MODEL_KEYS,
                       *WINDOW_MODEL_KEYS, *LINEAR_MODEL_KEYS)}),
    "engine": Table({"block_size": POSITIVE_INT,
                     "num_kv_blocks": Spec('a positive integer, or "auto" (from the GPU\'s '
                                           'memory, with cost.model = "hardware")',
                                           lambda v: v == "auto" or is_int(v) and v >= 1),
                     "max_num_seqs": POSITIVE_INT, "max_num_batched_tokens": POSITIVE_INT,
                     "enable_prefix_caching": BOOL, "swap_blocks": NON_NEGATIVE_INT}),
    "hardware": Table({
        "gpu": Spec("a GPU catalog id (e.g. \"h100-sxm\") or a table defining a GPU ("
                    + ", ".join(GPU_TABLE_KEYS) + ")",
                    lambda v: isinstance(v, str) and v.strip() != "" or isinstance(v, dict)),
        "tp": Spec(f"an integer from 1 to {MAX_TP}", lambda v: is_int(v) and 1 <= v <= MAX_TP),
        "ep": Spec(f"an integer from 1 to {MAX_GPUS} (1, or hardware.tp x hardware.dp)",
                   lambda v: is_int(v) and 1 <= v <= MAX_GPUS),
        "dp": Spec(f"an integer from 1 to {MAX_GPUS} (attention data-parallel ranks)",
                   lambda v: is_int(v) and 1 <= v <= MAX_GPUS),
        "dtype": choice(HARDWARE_DTYPES),
        "kv_dtype": choice(KV_DTYPES),
        "activation_scheme": choice(ACTIVATION_SCHEMES),
        "moe_backend": choice(MOE_BACKENDS),
        "gpu_memory_utilization": Spec("a number above 0 and at most 1",
                                       lambda v: is_number(v) and 0 < v <= 1),
        "step_overhead_s": NON_NEGATIVE_NUMBER,
        "seq_overhead_s": NON_NEGATIVE_NUMBER,
        "prefill_overhead_s": NON_NEGATIVE_NUMBER,
        "async_scheduling": BOOL,
        "cost_per_hour": POSITIVE_NUMBER,  # dollars a GPU-hour, for `servesim search`
        # whose measured kernels, and which version of them (checked against the tables when
        # the hardware is built: sim/costs/hardware/kernels.py)
        "framework": choice(FRAMEWORKS),
        "framework_version": Spec('a version in quotes, e.g. "0.24.0" (on the command line '
                                  '--set \'hardware.framework_version="0.24.0"\')',
                                  lambda v: isinstance(v, str) and v.strip() != ""),
        "kernels": choice(KERNEL_SOURCES)}),
    "scheduler": Table({"policy": choice(POLICIES), "queue": choice(tuple(QUEUES)),
                        "chunked_prefill": BOOL, "max_batch_size": POSITIVE_INT,
                        "batch_timeout_s": NON_NEGATIVE_NUMBER,
                        "preemption": choice(PREEMPTION_MODES),
                        "capacity_scheduler_policy": choice(CAPACITY_POLICIES),
                        "enable_mixed_chunk": BOOL,
                        "scheduler_recv_interval": POSITIVE_INT,
                        "batch_wait_timeout_iters": NON_NEGATIVE_INT,
                        "batch_wait_max_tokens_ratio": Spec("a number from 0 to 1",
                                                            lambda v: is_number(v)
                                                            and 0 <= v <= 1)}),
    "cost": Table({"model": choice(COST_MODELS), "profile": NON_EMPTY_TEXT, "jitter": BOOL,
                   "swap_bandwidth_gbs": POSITIVE_NUMBER}
                  | {name: NON_NEGATIVE_NUMBER for name in
                     ("step_overhead_s", "prefill_token_s", "decode_seq_s", "context_token_s")}),
    "workload": WORKLOAD,
    "slo": Table({key: SLO_LIMIT for key in ("ttft_s", "tpot_s", "e2e_s")}),
    "cluster": CLUSTER,
    "search": SEARCH,
}, required=("workload",))

# vLLM's engine arguments (`vllm serve --max-model-len` is `max_model_len`) that servesim keys
# under another name, for the hint of an unknown key
VLLM_NAMES = {"max_model_len": "model.max_seq_len", "tensor_parallel_size": "hardware.tp",
              "data_parallel_size": "hardware.dp", "enable_expert_parallel": "hardware.ep",
              "kv_cache_dtype": "hardware.kv_dtype", "quantization": "hardware.dtype",
              "enable_chunked_prefill": "scheduler.chunked_prefill",
              "scheduling_policy": "scheduler.queue", "preemption_mode": "scheduler.preemption",
              "num_gpu_blocks_override": "engine.num_kv_blocks"}


def key_elsewhere(name: str) -> str | None:
    """The whole key an unknown `name` most likely meant: a top-level setting of that name
    (`seed`, `mode`; not the scenario's `name` or `description`), a section's (the first of
    `SCENARIO`'s sections that has it), else the servesim key of a vLLM engine argument."""
    if name in ("seed", "mode"):
        return name
    for section, table in SCENARIO.fields.items():
        if isinstance(table, Table) and name in table.fields:
            return f"{section}.{name}"
    return VLLM_NAMES.get(name)
