"""What a scenario's runs need in memory, estimated before any starts, against what the machine
has.

A command keeps every run's records until it writes the report, so the requests of all the
runs (each variant at each sweep point) add up; what a run allocates while it runs (its
replicas' engines, and on the real engine the KV cache as float32 keys and values and the
model's weights) is freed when it ends, so only the largest run's counts. The figures per
request, per replica and per run are measured by `benchmarks/memory_use.py` on whole `servesim
run` processes (simulation, tables, charts and report), rounded up. `check_memory` refuses a
scenario whose estimate passes the machine's memory, naming the key that asks for the most,
before anything is allocated.
"""

from __future__ import annotations

import os

# benchmarks/memory_use.py on a 2-core machine (a 5M-iteration Python loop in 0.17 s, load 1.7):
# 6,050 bytes a request (the default workload, kept up with: many small steps, whose rows, table
# and timeline cost as much as the requests') and 3,017 at 1.5x overload; 112 KB a replica;
# 1.43 MB a run (its config, table rows, chart lines and the report's images). Rounded up.
REQUEST_BYTES = 6_500
REPLICA_BYTES = 120_000
RUN_BYTES = 1_500_000


def machine_memory_bytes() -> int | None:
    """Physical memory, where the platform tells (Linux, macOS)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def run_memory(config, requests: int) -> dict:
    """{dotted key: bytes} one run of a resolved config allocates while it runs, by what asks
    for it (its records, which outlive it, are counted by `scenario_memory`)."""
    replicas = _replicas(config)
    need = {"cluster.replicas": replicas * REPLICA_BYTES} if replicas > 1 else {}
    if config.mode != "simulate" or config.cost.model == "live":
        # each pool's replicas run its own engine (its set applied), named by the pool's key
        pooled = [(f"cluster.pools[{i}].set.", pool.replicas, own)
                  for i, (pool, own) in enumerate(config.pool_configs())]
        for prefix, count, own in pooled or [("", replicas, config)]:
            engine = own.engine
            for key, size in engine_memory(own.model, engine.num_kv_blocks,
                                           engine.block_size).items():
                named = prefix + key if prefix and _set_by(own, config, key) else key
                need[named] = need.get(named, 0) + count * size
    return need


def _set_by(own, config, key: str) -> bool:
    """Whether a pool's config `own` differs from the base `config` in the setting `key`
    (then the pool's set is what asks for it)."""
    section, name = key.split(".")
    return getattr(getattr(own, section), name) != getattr(getattr(config, section), name)


def engine_memory(model, num_kv_blocks: int, block_size: int) -> dict:
    """{dotted key: bytes} of one NumPy engine: its float32 KV cache and weights."""
    d, layers = model.d_model, model.n_layers
    return {"engine.num_kv_blocks": 2 * layers * num_kv_blocks * block_size * d * 4,
            "model.d_model": 4 * (2 * model.vocab_size * d
                                  + layers * (4 * d * d + 2 * d * model.d_ff)),
            "model.max_seq_len": 4 * model.max_seq_len * d}  # the position table


def scenario_memory(runs: list[tuple[object, int]]) -> dict:
    """{what asks: bytes} of a command over `runs` ([(resolved config, its requests)]): every
    run's records and config, and the largest run's allocations."""
    counted = runs[0][0].workload.count_key if runs else "workload.num_requests"
    need = {counted: sum(requests for _, requests in runs) * REQUEST_BYTES,
            "runs (variants x sweep points)": len(runs) * RUN_BYTES}
    largest = max((run_memory(config, requests) for config, requests in runs),
                  key=lambda part: sum(part.values()), default={})
    return need | largest


def check_memory(runs: list[tuple[object, int]]) -> None:
    """ValueError naming what asks for the most when the runs would not fit in this machine's
    memory."""
    total = machine_memory_bytes()
    if total is None:
        return
    need = scenario_memory(runs)
    if sum(need.values()) > total:
        key = max(need, key=need.get)
        what = f"{len(runs):,} runs, " if len(runs) > 1 else ""
        raise ValueError(f"{key}: the run{'s' if len(runs) > 1 else ''} would need about "
                         f"{_size(sum(need.values()))} of memory ({what}"
                         f"{', '.join(f'{k} {_size(v)}' for k, v in need.items() if v)}); "
                         f"this machine has {_size(total)}")


def check_engine_memory(model, num_kv_blocks: int, block_size: int, doing: str) -> None:
    """ValueError naming what asks for the most when one NumPy engine (its model and KV cache;
    no records) would not fit in this machine's memory; `doing` says what for ("serving",
    "profiling")."""
    total = machine_memory_bytes()
    need = engine_memory(model, num_kv_blocks, block_size)
    if total is not None and sum(need.values()) > total:
        key = max(need, key=need.get)
        raise ValueError(f"{key}: {doing} would need about {_size(sum(need.values()))} of "
                         f"memory ({', '.join(f'{k} {_size(v)}' for k, v in need.items())}); "
                         f"this machine has {_size(total)}")


def _replicas(config) -> int:
    return 1 if config.cluster is None else config.cluster.size


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"  # not reached
