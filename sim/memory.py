"""What a run needs in memory, estimated before it starts, against what the machine has.

A simulation keeps a few hundred bytes per request (its workload arrays, its recorded row) and
nothing per KV block (the block manager grows with the blocks used); a run on the real engine
(cosimulate, serve, validate) also allocates the whole KV cache as float32 keys and values, and
the model's weights. `check_memory` refuses a run whose estimate passes the machine's memory,
naming the key that asks for the most, before anything is allocated.
"""

from __future__ import annotations

import os

REQUEST_BYTES = 400  # workload arrays, a recorder row, ids and statuses; a live Sequence


def machine_memory_bytes() -> int | None:
    """Physical memory, where the platform tells (Linux, macOS)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def run_memory(config: dict, requests: int) -> dict:
    """{dotted key: bytes} the run of a resolved config asks for, by what asks for it."""
    need = {"workload.num_requests": requests * REQUEST_BYTES}
    real = config["mode"] != "simulate" or config["cost"]["model"] == "live"
    if real:
        model, engine = config["model"], config["engine"]
        d, layers = model["d_model"], model["n_layers"]
        need["engine.num_kv_blocks"] = 2 * layers * engine["num_kv_blocks"] * \
            engine["block_size"] * d * 4
        need["model.d_model"] = 4 * (2 * model["vocab_size"] * d + model["max_seq_len"] * d
                                     + layers * (4 * d * d + 2 * d * model["d_ff"]))
    return need


def check_memory(config: dict, requests: int) -> None:
    """ValueError naming the largest key when the run would not fit in this machine's memory."""
    total = machine_memory_bytes()
    if total is None:
        return
    need = run_memory(config, requests)
    if sum(need.values()) > total:
        key = max(need, key=need.get)
        raise ValueError(f"{key}: the run would need about {_size(sum(need.values()))} of "
                         f"memory ({', '.join(f'{k} {_size(v)}' for k, v in need.items())}); "
                         f"this machine has {_size(total)}")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"  # not reached
