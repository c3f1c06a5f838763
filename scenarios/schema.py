"""What a scenario file may contain: every key, its type and its allowed values.

A schema is a `Table` of named `Spec`s (leaf values), nested `Table`s and `Tagged` tables (a
table whose keys depend on one tag, as `dist` in `{dist = "lognormal", median, sigma, ...}`).
`check_table` walks a parsed TOML table against it and raises a `FieldError` naming the dotted
key of the first unknown key, wrong type or bad value. Rules that tie several keys together
(min <= max, files that must exist) live in `checks.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from .defaults import (ARRIVAL_PROCESSES, COST_MODELS, DECODE_ROUTERS, GAMMA_CV,
                       GPU_TABLE_KEYS, HARDWARE_DTYPES, HARDWARE_NORMS, LENGTH_DISTS, MAX_TOKENS,
                       MAX_TP,
                       MODES, ROUTERS, SHAREGPT_TOKENIZERS, SHIPPED_TRACES, TRACE_FORMATS)
from .errors import FieldError
from .overrides import flatten
from engine.queues import QUEUES
from engine.scheduler_config import POLICIES, PREEMPTION_MODES


@dataclass(frozen=True)
class Spec:
    """A leaf value: `allowed` completes "must be ...", `accepts` says whether a value is."""

    allowed: str
    accepts: Callable[[object], bool]

    def check(self, key: str, value) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
            raise FieldError(key, f"must be at most 2^63 - 1 (what NumPy's int64 holds), got "
                                  f"{value}")
        if not self.accepts(value):
            raise FieldError(key, f"must be {self.allowed}, got {value!r}")


@dataclass(frozen=True)
class Table:
    fields: dict
    required: tuple = ()


@dataclass(frozen=True)
class Tagged:
    """A table whose allowed keys depend on the value of its `tag` key."""

    tag: str
    options: dict = field(default_factory=dict)  # tag value -> Table of the other keys


INT_MAX = 2**63 - 1  # the largest integer NumPy's int64 holds


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= INT_MAX


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def choice(options) -> Spec:
    return Spec("one of " + ", ".join(options), lambda v: isinstance(v, str) and v in options)


POSITIVE_INT = Spec("a positive integer", lambda v: _is_int(v) and v >= 1)
NON_NEGATIVE_INT = Spec("a non-negative integer", lambda v: _is_int(v) and v >= 0)
TOKENS = Spec(f"a whole number of tokens from 1 to {MAX_TOKENS:,}",
              lambda v: _is_int(v) and 1 <= v <= MAX_TOKENS)
TOKENS_OR_NONE = Spec(f"a whole number of tokens from 0 to {MAX_TOKENS:,}",
                      lambda v: _is_int(v) and 0 <= v <= MAX_TOKENS)
POSITIVE_NUMBER = Spec("a positive number", lambda v: _is_number(v) and v > 0)
NON_NEGATIVE_NUMBER = Spec("a non-negative number", lambda v: _is_number(v) and v >= 0)
BOOL = Spec("true or false", lambda v: isinstance(v, bool))
# an SLO's limit in seconds, or false: none on this metric (to turn a default SLO off)
SLO_LIMIT = Spec("a positive number of seconds, or false (no SLO on this metric)",
                 lambda v: v is False or _is_number(v) and v > 0)
TEXT = Spec("a string", lambda v: isinstance(v, str))
NON_EMPTY_TEXT = Spec("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "")
INT_LIST = Spec("a non-empty list of integers",
                lambda v: isinstance(v, list) and len(v) > 0 and all(_is_int(x) for x in v))
WEIGHT_LIST = Spec("a non-empty list of non-negative numbers",
                   lambda v: isinstance(v, list) and len(v) > 0
                   and all(_is_number(x) and x >= 0 for x in v))

LENGTH = Tagged("dist", {
    "fixed": Table({"value": TOKENS}, required=("value",)),
    "uniform": Table({"low": TOKENS, "high": TOKENS}, required=("low", "high")),
    "lognormal": Table({"median": POSITIVE_NUMBER, "sigma": POSITIVE_NUMBER,
                        "min": TOKENS, "max": TOKENS},
                       required=("median", "sigma", "max")),
})
assert tuple(LENGTH.options) == LENGTH_DISTS


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
                           "workload.prompt_tokens)", lambda v: _is_int(v) and v >= 1),
    "system_prompt_tokens": TOKENS_OR_NONE,
    "think_time_s": NON_NEGATIVE_NUMBER,
}, required=("conversations", "turns"))

_RATE = Table({"rate": POSITIVE_NUMBER}, required=("rate",))
ARRIVAL = Tagged("process", {
    "poisson": _RATE,
    "gamma": Table({"rate": POSITIVE_NUMBER,
                    "cv": Spec(f"a number from {GAMMA_CV[0]} to {GAMMA_CV[1]} (the gaps' "
                               f"coefficient of variation)",
                               lambda v: _is_number(v) and GAMMA_CV[0] <= v <= GAMMA_CV[1])},
                   required=("rate", "cv")),
    "constant": _RATE,
    "burst": Table({}),
    "closed_loop": Table({"concurrency": POSITIVE_INT, "think_time_s": NON_NEGATIVE_NUMBER},
                         required=("concurrency",)),
    "trace": Table({}),
})
assert tuple(ARRIVAL.options) == ARRIVAL_PROCESSES

WORKLOAD = Table({
    "num_requests": POSITIVE_INT,
    "max_seconds": POSITIVE_NUMBER,
    # at most this many requests in flight; the others wait on the client (checks.py)
    "max_concurrency": POSITIVE_INT,
    "warmup_s": NON_NEGATIVE_NUMBER,
    "arrival": ARRIVAL,
    "prompt_tokens": LENGTH,
    "output_tokens": LENGTH,
    "priority": Tagged("dist", {
        "choice": Table({"values": INT_LIST, "weights": WEIGHT_LIST}, required=("values",)),
    }),
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
    return (isinstance(v, dict) and set(v) == {"low", "high"} and _is_number(v["low"])
            and _is_number(v["high"]) and 0 < v["low"] < v["high"])


# `servesim search` (docs/sim/search.md): the SLO attainment to hold, the bracket of arrival
# rates to bisect, when to stop, and the configurations to search.
SEARCH = Table({
    "target": Spec("a number above 0 and at most 1 (the fraction of requests meeting every SLO)",
                   lambda v: _is_number(v) and 0 < v <= 1),
    "rate": Spec("a table { low, high } of arrival rates (requests/s) with 0 < low < high",
                 _is_bracket),
    "tolerance": Spec("a number above 0 and below 1 (stop when (high - low) / high is below it)",
                      lambda v: _is_number(v) and 0 < v < 1),
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
                      "qkv_bias": BOOL, "parallel_attn_mlp": BOOL}),
    "engine": Table({"block_size": POSITIVE_INT,
                     "num_kv_blocks": Spec('a positive integer, or "auto" (from the GPU\'s '
                                           'memory, with cost.model = "hardware")',
                                           lambda v: v == "auto" or _is_int(v) and v >= 1),
                     "max_num_seqs": POSITIVE_INT, "max_num_batched_tokens": POSITIVE_INT,
                     "enable_prefix_caching": BOOL, "swap_blocks": NON_NEGATIVE_INT}),
    "hardware": Table({
        "gpu": Spec("a GPU catalog id (e.g. \"h100-sxm\") or a table defining a GPU ("
                    + ", ".join(GPU_TABLE_KEYS) + ")",
                    lambda v: isinstance(v, str) and v.strip() != "" or isinstance(v, dict)),
        "tp": Spec(f"an integer from 1 to {MAX_TP}", lambda v: _is_int(v) and 1 <= v <= MAX_TP),
        "dtype": choice(HARDWARE_DTYPES),
        "gpu_memory_utilization": Spec("a number above 0 and at most 1",
                                       lambda v: _is_number(v) and 0 < v <= 1),
        "step_overhead_s": NON_NEGATIVE_NUMBER,
        "seq_overhead_s": NON_NEGATIVE_NUMBER,
        "cost_per_hour": POSITIVE_NUMBER}),  # dollars a GPU-hour, for `servesim search`
    "scheduler": Table({"policy": choice(POLICIES), "queue": choice(tuple(QUEUES)),
                        "chunked_prefill": BOOL, "max_batch_size": POSITIVE_INT,
                        "batch_timeout_s": NON_NEGATIVE_NUMBER,
                        "preemption": choice(PREEMPTION_MODES)}),
    "cost": Table({"model": choice(COST_MODELS), "profile": NON_EMPTY_TEXT, "jitter": BOOL,
                   "swap_bandwidth_gbs": POSITIVE_NUMBER}
                  | {name: NON_NEGATIVE_NUMBER for name in
                     ("step_overhead_s", "prefill_token_s", "decode_seq_s", "context_token_s")}),
    "workload": WORKLOAD,
    "slo": Table({key: SLO_LIMIT for key in ("ttft_s", "tpot_s", "e2e_s")}),
    "cluster": CLUSTER,
    "search": SEARCH,
}, required=("workload",))


def check_table(value, schema: Table | Tagged, key: str = "") -> None:
    """Raise FieldError at the first key of `value` that `schema` does not allow."""
    if not isinstance(value, dict):
        raise FieldError(key, f"must be a table, got {value!r}")
    if isinstance(schema, Tagged):
        schema, value, key = _select_option(value, schema, key)
    for name, item in value.items():
        sub = f"{key}.{name}" if key else name
        if name not in schema.fields:
            allowed = ", ".join(schema.fields) or "nothing"
            raise FieldError(sub, f"unknown key (allowed: {allowed})")
        spec = schema.fields[name]
        if isinstance(spec, Spec):
            spec.check(sub, item)
        else:
            check_table(item, spec, sub)
    for name in schema.required:
        if name not in value:
            spec = schema.fields[name]
            what = spec.allowed if isinstance(spec, Spec) else "a table"
            raise FieldError(f"{key}.{name}" if key else name, f"required ({what})")


def _select_option(value: dict, schema: Tagged, key: str):
    """The option table chosen by the tag, and the value without its tag."""
    allowed = ", ".join(schema.options)
    if schema.tag not in value:
        raise FieldError(f"{key}.{schema.tag}", f"required (one of {allowed})")
    tag = value[schema.tag]
    if not isinstance(tag, str) or tag not in schema.options:
        raise FieldError(f"{key}.{schema.tag}", f"must be one of {allowed}, got {tag!r}")
    option = schema.options[tag]
    fields = {schema.tag: choice(tuple(schema.options))} | option.fields
    rest = {k: v for k, v in value.items() if k != schema.tag}
    for name in rest:
        if name not in option.fields:
            names = ", ".join(fields)
            raise FieldError(f"{key}.{name}",
                             f"unknown key for {schema.tag} = {tag!r} (allowed: {names})")
    return Table(option.fields, option.required), rest, key
