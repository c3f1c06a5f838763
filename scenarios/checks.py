"""Rules that tie several keys of a scenario together (the workload's own, `workload_checks.py`);
the files a scenario names are found by `paths.py`.

The engine's config dataclasses are built from the resolved config here, so their own rules
(d_model divisible by n_heads, a token budget that holds max_num_seqs decodes) apply at load
time, in their own words. Each check raises `FieldError(dotted_key, problem)`; the loader turns
it into a one-line `ScenarioError` with the file's name. The files a config names are stored
absolute (`paths.py`); whether one exists and loads is checked where the simulator builds what
it needs from it (`sim.checks.check_scenario`), with the same one-line errors: scenarios are
data and schema, and never import the simulator.
"""

from __future__ import annotations

from pathlib import Path

from engine.model import ModelConfig
from engine.scheduler_config import SchedulerConfig

from .defaults import (DISAGGREGATION_KEYS, GPU_TABLE_KEYS, HARDWARE_MODEL_KEYS, MAX_GPUS,
                       POOL_SECTIONS)
from .errors import FieldError
from .paths import find_file, is_path, model_config, shipped_trace
from .workload_checks import check_horizon, check_max_concurrency


def check_config(config: dict, path: Path) -> None:
    """Cross-key rules of a resolved config; makes its relative file paths absolute."""
    if config["cost"]["model"] == "hardware":
        _check_hardware(config, path)
    else:
        _check_not_hardware(config)
        _check_model(config["model"])
        _check_engine(config)
    workload = config["workload"]
    check_max_concurrency(workload)
    window = workload.get("max_seconds")
    if window is not None and workload["warmup_s"] >= window:
        raise FieldError("workload.warmup_s", f"must be below workload.max_seconds ({window:g}), "
                                              f"else no request arrives after the warm-up, got "
                                              f"{workload['warmup_s']:g}")
    if workload["trace"] is not None:
        trace = workload["trace"]
        trace["path"] = str(shipped_trace(trace["name"])) if trace.get("name") else \
            find_file(trace["path"], path)
    cost = config["cost"]
    if cost["model"] == "profile" and is_path(cost["profile"]):
        cost["profile"] = find_file(cost["profile"], path)
    if config["mode"] == "simulate" and cost["model"] == "live":
        raise FieldError("cost.model", "'live' runs the real engine: use mode = 'cosimulate' "
                                       "(or cost.model = 'profile' or 'linear' to simulate)")
    check_horizon(config)
    if "cluster" in config:
        check_cluster(config)


def check_cluster(config: dict) -> None:
    """A cluster has `replicas`, `pools` (one block size in all) or prefill and decode
    replicas (simulate mode only), runs in simulate or cosimulate mode, and routes by prefix
    only where every replica caches prefixes."""
    cluster = config["cluster"]
    if "prefill_replicas" in cluster and config["mode"] != "simulate":
        raise FieldError("cluster.prefill_replicas", "runs in mode simulate only (moving real "
                                                     "KV between engines is not modelled)")
    if "prefill_replicas" in cluster and \
            config["scheduler"]["capacity_scheduler_policy"] == "new_token_ratio":
        raise FieldError("scheduler.capacity_scheduler_policy",
                         "'new_token_ratio' is SGLang's admission on one engine; its prefill "
                         "and decode servers reserve otherwise, which is not modelled (use "
                         "'max_utilization' or 'guaranteed_no_evict' with "
                         "cluster.prefill_replicas)")
    if "replicas" in cluster and "pools" in cluster:
        raise FieldError("cluster.pools", "not allowed with cluster.replicas (give N identical "
                                          "replicas, or pools of them)")
    if not {"replicas", "pools", "prefill_replicas"} & cluster.keys():
        raise FieldError("cluster.replicas", "required (a positive integer) unless "
                                             "cluster.pools, or cluster.prefill_replicas with "
                                             "cluster.decode_replicas, is given")
    if config["mode"] == "serve":
        raise FieldError("cluster", "runs in modes simulate and cosimulate only (serve runs "
                                    "one engine on the wall clock)")
    pools = cluster.get("pools", [{"set": {}}])
    names = [pool.get("name") for pool in pools]
    for i, pool in enumerate(pools):
        if pool.get("name") in names[:i]:
            raise FieldError(f"cluster.pools[{i}].name", f"must be unique, {pool['name']!r} "
                                                         f"is used twice")
        engine = config["engine"] | {key.split(".", 1)[1]: value for key, value
                                     in pool["set"].items() if key.startswith("engine.")}

        def place(key: str) -> str:  # a pool's own setting, or the scenario's
            return f"cluster.pools[{i}].set.{key}" if key in pool["set"] else key

        if engine["block_size"] != config["engine"]["block_size"]:
            raise FieldError(place("engine.block_size"), "must be the cluster's one block size "
                                                         "(a request's KV block keys depend "
                                                         "on it)")
        if cluster["router"] == "prefix_affinity" and not engine["enable_prefix_caching"]:
            raise FieldError(place("engine.enable_prefix_caching"),
                             "must be true with cluster.router = 'prefix_affinity' (it routes "
                             "a request to the replica that cached its prefix)")


def check_disaggregation_keys(cluster: dict) -> None:
    """Prefill and decode replicas come together, instead of `replicas` or `pools`; the
    disaggregation's own keys only with them."""
    if "prefill_replicas" not in cluster and "decode_replicas" not in cluster:
        for key in DISAGGREGATION_KEYS:
            if key in cluster:
                raise FieldError(f"cluster.{key}", "only with cluster.prefill_replicas and "
                                                   "decode_replicas (a disaggregated cluster)")
        return
    for key in ("replicas", "pools"):
        if key in cluster:
            raise FieldError(f"cluster.{key}", "not allowed with cluster.prefill_replicas and "
                                               "decode_replicas (a disaggregated cluster)")
    for given, missing in (("prefill_replicas", "decode_replicas"),
                           ("decode_replicas", "prefill_replicas")):
        if missing not in cluster:
            raise FieldError(f"cluster.{missing}", f"required (a positive integer) with "
                                                   f"cluster.{given}")


def check_pool_keys(settings: dict, key: str) -> None:
    """A pool sets dotted keys of its GPU, engine and scheduler only."""
    for name in settings:
        if name.split(".", 1)[0] not in POOL_SECTIONS or "." not in name:
            raise FieldError(f"{key}.{name}", f"a pool sets keys of "
                                              f"{', '.join(POOL_SECTIONS)} only (e.g. "
                                              f"\"hardware.gpu\" = \"h100-sxm\")")


def _check_hardware(config: dict, path: Path) -> None:
    """A real model on a real GPU: simulated only, a GPU named, at most a node's GPUs, the
    model named, read from a config.json (its path made absolute) or defined (the catalogs, the
    file, the parallel layout and what fits are the simulator's to check, the model known:
    sim.costs.hardware)."""
    if config["mode"] != "simulate":
        raise FieldError("mode", f"cost.model = 'hardware' simulates a GPU; mode must be "
                                 f"'simulate', got {config['mode']!r}")
    if "gpu" not in config["hardware"]:
        raise FieldError("hardware.gpu", "required with cost.model = 'hardware' (a GPU catalog "
                                         "id, e.g. \"h100-sxm\", or a table defining one)")
    gpu = config["hardware"]["gpu"]
    if isinstance(gpu, dict):
        unknown = [k for k in gpu if k not in GPU_TABLE_KEYS]
        if unknown:
            raise FieldError(f"hardware.gpu.{unknown[0]}",
                             f"unknown key (allowed: {', '.join(GPU_TABLE_KEYS)})")
    if config["cost"].get("jitter"):
        raise FieldError("cost.jitter", "measures this machine's speed swings; it applies to "
                                        "cost.model = 'profile' only")
    hardware = config["hardware"]
    tp, dp = hardware["tp"], hardware.get("dp", 1)
    if tp * dp > MAX_GPUS:
        raise FieldError("hardware.dp", f"{dp} data-parallel ranks of hardware.tp = {tp} GPUs "
                                        f"make {tp * dp}; at most {MAX_GPUS} (one node)")
    model = config["model"]
    if "name" in model and "config" in model:
        raise FieldError("model.config", "give model.name (a catalog id) or model.config (a "
                                         "config.json), not both")
    if "config" in model:
        model["config"] = model_config(model["config"], path)
        if not Path(model["config"]).expanduser().exists():
            raise FieldError("model.config", f"file not found: {model['config']} (looked in "
                                             f"the current directory, beside the scenario and "
                                             f"at the repository root)")
    elif "name" not in model:
        missing = [k for k in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size",
                               "max_seq_len") if k not in model]
        if missing:
            raise FieldError(f"model.{missing[0]}",
                             "required with cost.model = 'hardware' unless model.name names "
                             "a catalog model or model.config a config.json (missing: "
                             + ", ".join(missing) + ")")


def _check_not_hardware(config: dict) -> None:
    """Keys that only a hardware cost model reads are errors elsewhere, never ignored."""
    extra = [k for k in config["model"] if k in HARDWARE_MODEL_KEYS and k not in
             ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size", "max_seq_len")]
    if extra:
        raise FieldError(f"model.{extra[0]}", "only with cost.model = 'hardware' (the NumPy "
                                              "engine's model has vocab_size, d_model, "
                                              "n_layers, n_heads, d_ff, max_seq_len)")
    if "hardware" in config:
        raise FieldError("hardware", "only with cost.model = 'hardware'")
    if config["engine"]["num_kv_blocks"] == "auto":
        raise FieldError("engine.num_kv_blocks", "\"auto\" derives the KV blocks from a GPU's "
                                                 "memory: only with cost.model = 'hardware'")


def _check_model(model: dict) -> None:
    try:
        ModelConfig(**model)
    except ValueError as exc:  # the engine's own rules, in its own words
        raise FieldError("", str(exc)) from None


def _check_engine(config: dict) -> None:
    engine, scheduler = config["engine"], config["scheduler"]
    try:
        SchedulerConfig(max_num_seqs=engine["max_num_seqs"],
                        max_num_batched_tokens=engine["max_num_batched_tokens"],
                        max_seq_len=config["model"]["max_seq_len"], **scheduler)
    except ValueError as exc:
        raise FieldError("", str(exc)) from None
    if engine["block_size"] > config["model"]["max_seq_len"]:
        raise FieldError("engine.block_size", f"must be at most model.max_seq_len "
                                              f"({config['model']['max_seq_len']}), got "
                                              f"{engine['block_size']}")
    if scheduler["preemption"] == "swap" and not engine["swap_blocks"]:
        raise FieldError("engine.swap_blocks", "must be at least 1 with scheduler.preemption = "
                                               "'swap' (host KV blocks for swapped-out sequences)")
