"""Plain-language descriptions of a resolved config, for the report's "what was run" table."""

from __future__ import annotations

from pathlib import Path


def what_was_run(scenario, num_runs: int) -> list[list[str]]:
    """[field, description] rows for the scenario's base config."""
    config = scenario.base
    model, engine, sched = config["model"], config["engine"], config["scheduler"]
    slo = config["slo"]
    rows = [
        ["scenario", f"{scenario.name} (`{shown_path(scenario.path)}`)"],
        ["seed", str(config["seed"])],
        ["mode", config["mode"]],
        ["step costs", step_costs(config)],
        ["model", f"vocab {model['vocab_size']}, d_model {model['d_model']}, "
                  f"{model['n_layers']} layers, {model['n_heads']} heads, d_ff {model['d_ff']}, "
                  f"max_seq_len {model['max_seq_len']}"],
        ["engine", f"{engine['num_kv_blocks']} KV blocks of {engine['block_size']} tokens, "
                   f"max_num_seqs {engine['max_num_seqs']}, "
                   f"max_num_batched_tokens {engine['max_num_batched_tokens']}"],
        ["scheduler", f"{sched['policy']} batching, {sched['queue']} queue, chunked_prefill "
                      f"{str(sched['chunked_prefill']).lower()}, static max_batch_size "
                      f"{sched['max_batch_size']}, batch_timeout_s {sched['batch_timeout_s']}"],
        ["workload", workload_text(config["workload"])],
        ["SLO (goodput)", f"TTFT <= {slo['ttft_s']} s and TPOT <= {slo['tpot_s']} s"],
        ["runs", _runs_text(num_runs, len(scenario.variants), bool(scenario.sweep))],
    ]
    if scenario.overrides:
        rows.append(["overrides (--set)", ", ".join(f"`{k} = {_toml(v)}`"
                                                    for k, v in scenario.overrides)])
    return rows


def _runs_text(num_runs: int, num_variants: int, swept: bool) -> str:
    variants = f"{num_variants} variant{'s' if num_variants > 1 else ''}"
    if not swept:
        return f"{num_runs} ({variants})"
    return f"{num_runs} ({variants} x {num_runs // num_variants} sweep points)"


def shown_path(path) -> str:
    """Relative to the current directory when inside it, else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def step_costs(config: dict) -> str:
    cost = config["cost"]
    if config["mode"] != "simulate" or cost["model"] == "live":
        return "measured: the real NumPy engine runs every step"
    if cost["model"] == "profile":
        return f"predicted by the fitted profile `{cost['profile']}`"
    return ("linear: " + ", ".join(f"{name} {cost[name]:g}" for name in
                                   ("step_overhead_s", "prefill_token_s", "decode_seq_s",
                                    "context_token_s")))


def workload_text(workload: dict) -> str:
    parts = []
    if workload["trace"] is not None:
        trace = workload["trace"]
        limit = (f"first {trace['max_requests']} requests" if trace["max_requests"]
                 else "every request")
        parts.append(f"trace replay of `{Path(trace['path']).name}` ({trace['format']} format, "
                     f"{limit}, inter-arrival gaps x{trace['time_scale']:g})")
    else:
        parts.append(f"{workload['num_requests']} requests, arrivals "
                     + _arrival(workload["arrival"]))
        parts.append("prompt tokens " + length_text(workload["prompt_tokens"]))
        parts.append("output tokens " + length_text(workload["output_tokens"]))
    if workload["priority"] is not None:
        p = workload["priority"]
        pairs = ", ".join(f"{v} (weight {w:g})" for v, w in zip(p["values"], p["weights"]))
        parts.append(f"priorities {pairs}")
    return "; ".join(parts)


def _arrival(arrival: dict) -> str:
    process = arrival["process"]
    if process == "closed_loop":
        return (f"closed loop of {arrival['concurrency']} users "
                f"(think time {arrival['think_time_s']:g} s)")
    if process == "gamma":
        return f"gamma at {arrival['rate']:g} req/s (cv {arrival['cv']:g})"
    return f"{process} at {arrival['rate']:g} req/s"


def length_text(dist: dict) -> str:
    if dist["dist"] == "fixed":
        return f"fixed {dist['value']}"
    if dist["dist"] == "uniform":
        return f"uniform in [{dist['low']}, {dist['high']}]"
    return (f"lognormal (median {dist['median']:g}, sigma {dist['sigma']:g}) "
            f"in [{dist['min']}, {dist['max']}]")


def settings_text(settings: dict) -> str:
    """A variant's `set` table as `key = value` pairs."""
    if not settings:
        return "(the base config)"
    return ", ".join(f"`{key} = {_toml(value)}`" for key, value in settings.items())


def _toml(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)
