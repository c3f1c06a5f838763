"""Run a resolved scenario config in its mode and return its records.

`run_config(config)` builds the engine's own objects (BlockManager, Scheduler, RunRecorder) from
the config, the workload from `config["workload"]` and the seed, then:
- simulate: SimPy clock, `CostModelExecutor` (cost.model "profile" or "linear"; with
  cost.jitter, every step also scaled by the profiled machine's speed, `sim.costs.jitter`);
- cosimulate (or cost.model "live"): SimPy clock, the real `NumpyExecutor` on random prompt token
  ids (a conversation's turn extends its previous turn's ids), its measured step time advancing
  the clock;
- serve: the wall clock, the real engine, through `engine.server.serve`.
`simulate(scenario)` runs every variant at every sweep point of a scenario.
Real-engine runs sample with temperature 1 and ignore EOS, so every request generates exactly
its `output_tokens` (as vLLM's benchmarks do).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.prefix_cache import make_block_manager
from engine.model import ModelConfig, init_params
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import SamplingParams, Sequence
from engine.swap import SwapSpace

from .costs import CostModelExecutor, cost_model
from .costs.jitter import SpeedProcess
from .fastpath import SteadyScheduler
from .loop import run_loop
from .memory import check_memory
from .workloads import (SessionTokens, Workload, build_workload, check_turn_lengths,
                        check_workload, load_trace, seeded_streams)

MODES = ("simulate", "cosimulate", "serve")
REAL_SAMPLING = SamplingParams(temperature=1.0)
SERVE_SESSIONS = ("workload.sessions is supported in modes simulate and cosimulate only (serve "
                  "replays arrival times given up front; a conversation sends each turn when "
                  "the last one finishes)")


def run_config(config: dict, progress: bool = False, base_dir=None, cost=None,
               jitter_rng=None, fast_forward: bool = True,
               steady: bool | None = None) -> RunRecorder:
    """Run one resolved config (see docs/sim/simulation.md); `base_dir` resolves a relative
    trace path (after the current directory). `cost`: in simulate mode, a cost model to use
    instead of the one `config["cost"]` selects. `jitter_rng`: with `cost.jitter`, a generator
    for the machine's speed instead of the seed's own "jitter" stream (another realisation of
    the same machine on the same requests). `fast_forward=False`: every simulated step goes
    through the scheduler one by one, counting every sequence (the same records; for checking
    the fast paths); `steady`: count steady decoders in bulk (`sim.fastpath.steady`) or not,
    whatever `fast_forward` says."""
    mode = run_mode(config)
    streams = seeded_streams(config["seed"])
    steady = fast_forward if steady is None else steady
    if config.get("cluster") is not None:
        from .cluster import run_cluster

        return run_cluster(config, mode, streams, base_dir, progress=progress, cost=cost,
                           jitter_rng=jitter_rng, fast_forward=fast_forward, steady=steady)
    workload = build_workload(config["workload"], streams["workload"], base_dir)
    scheduler, executor, model = build_engine(config, mode, streams, cost, jitter_rng,
                                              keyed=workload.block_keys is not None,
                                              steady=steady)
    recorder = RunRecorder(scheduler.block_manager.num_blocks)
    if mode == "serve" and workload.closed_loop is not None \
            and workload.closed_loop.think_time_s:
        raise ValueError("workload.arrival.think_time_s: a closed loop with think time is "
                         "supported in modes simulate and cosimulate only (serve sends each "
                         "request at its arrival time or once a slot is free)")
    if mode == "serve" and workload.sessions is not None:
        raise ValueError(SERVE_SESSIONS)
    make = sequence_maker(workload, mode, streams, model, scheduler.block_manager)
    if mode == "serve":
        return _serve(scheduler, executor, recorder, workload, make)
    return run_loop(scheduler, executor, recorder, make, arrival_s=workload.arrival_s,
                    closed_loop=workload.closed_loop, sessions=workload.sessions,
                    num_requests=len(workload), progress=progress, fast_forward=fast_forward)


def run_mode(config: dict) -> str:
    """The mode a config runs in (simulate with cost.model "live" cosimulates)."""
    mode = config.get("mode", "simulate")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "simulate" and config["cost"].get("model") == "live":
        mode = "cosimulate"
    return mode


def build_engine(config: dict, mode: str, streams: dict, cost=None, jitter_rng=None,
                 keyed: bool = True, steady: bool = False):
    """(scheduler, executor, NumPy model config or None) of one engine of a resolved config:
    in simulate mode a `CostModelExecutor` (`cost`: instead of the config's cost model;
    `jitter_rng`: instead of the seed's "jitter" stream), else the real `NumpyExecutor`.
    `keyed`: whether the workload gives simulated requests prefix-cache keys; without them no
    block is ever found cached, so a simulation keeps plain block bookkeeping (the same counts
    and records, less work a block). `steady`: a simulation's scheduler counts its steady
    decoders in bulk (`sim.fastpath.SteadyScheduler`; continuous batching only)."""
    hardware = hardware_of(config)
    model = None if hardware is not None else ModelConfig(**config["model"])
    simulated = mode == "simulate"
    caching = False if simulated and not keyed else None
    max_seq_len, blocks = (model.max_seq_len, None) if hardware is None else \
        (hardware.arch.max_seq_len, hardware.kv_blocks)
    scheduler = build_scheduler(config, max_seq_len, blocks, prefix_caching=caching,
                                steady=steady and simulated)
    if mode != "simulate":
        return scheduler, _numpy_executor(model, scheduler, streams["sampling"]), model
    cost = cost or build_cost(config, hardware)
    speed = speed_process(config["cost"], cost, jitter_rng or streams["jitter"])
    executor = CostModelExecutor(cost, speed, scheduler.block_manager.block_size,
                                 swap_block_s(config, cost))
    return scheduler, executor, model


def sequence_maker(workload: Workload, mode: str, streams: dict, model, block_manager):
    """`sequence_factory` for a run's mode: simulated sequences carry the workload's block
    keys (with prefix caching), real ones random token ids."""
    if mode == "simulate":
        return sequence_factory(workload, block_size=block_manager.block_size
                                if block_manager.prefix_caching else None)
    return sequence_factory(workload, streams["tokens"], model.vocab_size)


def speed_process(cost_config: dict, cost, rng) -> SpeedProcess | None:
    """The machine's speed process when `cost.jitter` is on (the profile's measured jitter)."""
    if not cost_config.get("jitter"):
        return None
    if cost.jitter is None:
        raise ValueError(f"cost.jitter = true needs a profile with a jitter measurement; "
                         f"{cost.source} has none (profile again with `servesim profile`, or "
                         f"set cost.jitter = false)")
    return SpeedProcess(cost.jitter, rng)


def build_scheduler(config: dict, max_seq_len: int, num_kv_blocks: int | None = None,
                    prefix_caching: bool | None = None, steady: bool = False) -> Scheduler:
    """The engine's scheduler and block manager for a resolved config (`num_kv_blocks`: the
    derived count of an "auto" config; `prefix_caching`: instead of the config's
    `engine.enable_prefix_caching`; `steady`: a `sim.fastpath.SteadyScheduler` under
    continuous batching, for simulated sequences)."""
    engine_cfg = config["engine"]
    if prefix_caching is None:
        prefix_caching = engine_cfg.get("enable_prefix_caching", False)
    block_manager = make_block_manager(num_kv_blocks or engine_cfg["num_kv_blocks"],
                                       engine_cfg["block_size"], prefix_caching)
    swap_blocks = engine_cfg.get("swap_blocks", 0)
    scheduler_config = SchedulerConfig(
        max_num_seqs=engine_cfg["max_num_seqs"],
        max_num_batched_tokens=engine_cfg["max_num_batched_tokens"],
        max_seq_len=max_seq_len, **config["scheduler"])
    kind = SteadyScheduler if steady and scheduler_config.policy == "continuous" else Scheduler
    return kind(scheduler_config, block_manager, SwapSpace(swap_blocks) if swap_blocks else None)


def swap_block_s(config: dict, cost) -> float:
    """Simulated seconds to copy one KV block to or from host memory (swap preemption): the
    cost model's own (a hardware model's: over the GPU's host link), else a memcpy of the NumPy
    engine's float32 block at cost.swap_bandwidth_gbs."""
    block_size = config["engine"]["block_size"]
    own = cost.swap_block_s(block_size)
    if own is not None:
        return own
    model = config["model"]
    block_bytes = 2 * model["n_layers"] * block_size * model["d_model"] * 4  # K and V
    return block_bytes / (config["cost"].get("swap_bandwidth_gbs", 10.0) * 1e9)


def hardware_of(config: dict):
    """The `sim.costs.hardware.HardwareSetup` of a config whose cost.model is "hardware"
    (its model, GPU, memory plan and KV blocks), else None."""
    if config["cost"].get("model") != "hardware":
        return None
    from .costs.hardware import hardware_setup

    return hardware_setup(config)


def build_cost(config: dict, hardware=None):
    """The cost model a resolved simulate config selects."""
    if config["cost"]["model"] == "hardware":
        from .costs.hardware import HardwareCost

        table = config["hardware"]
        return HardwareCost(hardware or hardware_of(config), table["step_overhead_s"],
                            table["seq_overhead_s"])
    return cost_model(config["cost"], config["model"])


def resolved_spec(spec):
    """A run's spec as run: with cost.model "hardware", its config also says what the hardware
    came to (`hardware.derived`: the model, GPU, memory and the KV blocks "auto" gave); with a
    trace, what its file held that a user should know (`workload.trace.notes`)."""
    import copy
    from dataclasses import replace

    from .workloads.traces import trace_notes

    hardware = hardware_of(spec.config)
    trace = spec.config["workload"]["trace"]
    notes = trace_notes(trace) if trace is not None else []
    if hardware is None and not notes:
        return spec
    config = copy.deepcopy(spec.config)
    if notes:
        config["workload"]["trace"]["notes"] = notes
    if hardware is not None:
        config["engine"]["num_kv_blocks"] = hardware.kv_blocks
        config["model"] = {"name": hardware.arch.name} | {
            k: getattr(hardware.arch, k) for k in ("n_layers", "d_model", "n_heads",
                                                   "n_kv_heads", "d_ff", "vocab_size",
                                                   "max_seq_len")}
        config["hardware"] = config["hardware"] | {
            "derived": hardware.describe(),
            "num_kv_blocks_auto": spec.config["engine"]["num_kv_blocks"] == "auto"}
    return replace(spec, config=config)


def run_notes(scenario) -> list[str]:
    """What a user should read before a scenario's runs start: each trace file's notes
    (fewer requests than asked for, entries skipped), once per file."""
    from .workloads.traces import trace_notes

    notes = []
    for spec in scenario.runs():
        trace = spec.config["workload"]["trace"]
        for note in trace_notes(trace) if trace is not None else ():
            if note not in notes:
                notes.append(note)
    return notes


def simulate(scenario_or_name, progress: bool = False, overrides=()) -> list:
    """Every run of a scenario (a `scenarios.Scenario`, a built-in name or a path):
    [(RunSpec, RunRecorder), ...] in `Scenario.runs()` order. Every run is checked
    (`check_scenario`) before the first starts."""
    import scenarios

    scenario = scenario_or_name
    if isinstance(scenario, (str, Path)):
        scenario = scenarios.load(scenario, overrides)
    check_scenario(scenario)
    base_dir = Path(scenario.path).parent if scenario.path else None
    return [(resolved_spec(spec), run_config(spec.config, progress=progress, base_dir=base_dir))
            for spec in scenario.runs()]


def check_config(config: dict, base_dir=None) -> int:
    """Build what a resolved config's run needs from files and distributions (the workload's
    processes and distributions, its trace file, the cost model, the jitter) without running
    it, and check that the run fits in memory; raises ValueError or FileNotFoundError naming
    the dotted key. Returns how many requests the run sends."""
    check_workload(config["workload"], base_dir)
    trace = config["workload"]["trace"]
    if config["workload"].get("sessions") is not None:
        requests = _check_sessions(config)
    elif trace is None:
        requests = config["workload"]["num_requests"]
    else:
        requests = len(load_trace(trace["path"], trace["format"], trace["time_scale"],
                                  trace["max_requests"], base_dir))  # read once, by check_workload
    check_memory([(config, requests)])
    hardware = hardware_of(config)
    if hardware is not None:
        build_scheduler(config, hardware.arch.max_seq_len, hardware.kv_blocks)
    elif config["mode"] == "simulate" and config["cost"]["model"] != "live":
        speed_process(config["cost"], cost_model(config["cost"], config["model"]), None)
    return requests


def _check_sessions(config: dict) -> int:
    """Refuse sessions in serve mode, or a conversation whose last turn passes the model's
    max_seq_len (the turns the seed draws); returns how many requests (turns) there are."""
    if config["mode"] == "serve":
        raise ValueError(SERVE_SESSIONS)
    hardware = hardware_of(config)
    max_seq_len = config["model"]["max_seq_len"] if hardware is None else \
        hardware.arch.max_seq_len
    workload = build_workload(config["workload"], seeded_streams(config["seed"])["workload"])
    check_turn_lengths(workload.sessions, max_seq_len)
    return len(workload)


def check_scenario(scenario, specs=None) -> None:
    """Check the base config and every run of a loaded scenario (`check_config`), and that all
    the runs' records fit in memory together; the first problem is a one-line `ScenarioError`
    placed in the file, an override or a variant at a sweep point, as the scenario loader
    places its own. `specs`: check these runs (the scenario's, changed by the caller) instead
    of the base and the scenario's runs."""
    base_dir = Path(scenario.path).parent
    problem = None if specs is not None else _problem(scenario.base, base_dir)[0]
    if problem is not None:
        by_override = bool(scenario.overrides) and (
            scenario.file_base is None or _problem(scenario.file_base, base_dir)[0] != problem)
        raise scenario.error(problem, by_override=by_override)
    runs = []
    for spec in scenario.specs if specs is None else specs:
        problem, requests = _problem(spec.config, base_dir)
        if problem is not None:
            raise scenario.error(problem, spec)
        runs.append((spec.config, requests))
    try:
        check_memory(runs)
    except ValueError as exc:
        raise scenario.error(str(exc), by_override=bool(scenario.overrides)) from None


def _problem(config: dict, base_dir) -> tuple[str | None, int]:
    """(what is wrong with a config, or None; how many requests its run sends)."""
    try:
        return None, check_config(config, base_dir)
    except (ValueError, FileNotFoundError) as exc:
        return str(exc), 0


def sequence_factory(workload: Workload, token_rng=None, vocab_size: int | None = None,
                     block_size: int | None = None):
    """(index, arrival_s) -> the Sequence of request `index`; with `token_rng`, its prompt gets
    random token ids (drawn when the request is created, so in request order; a conversation's
    turn extends its previous turn's ids, `SessionTokens`). With `block_size` (a simulated run
    with prefix caching), it carries the workload's block keys (`Workload.block_keys`), if any,
    as its `block_hashes`."""
    prompts, outputs, priorities = workload.prompt_tokens, workload.output_tokens, workload.priority
    keys = workload.block_keys if block_size is not None else None

    def new(index: int, arrival_s: float, ids: list | None = None) -> Sequence:
        return Sequence(index, int(prompts[index]), int(outputs[index]), prompt_token_ids=ids,
                        priority=int(priorities[index]), arrival_s=arrival_s,
                        sampling=REAL_SAMPLING, ignore_eos=True, seq_id=index,
                        block_hashes=None if keys is None else keys(index, block_size))

    if token_rng is None:
        return new
    if workload.sessions is not None:
        return SessionTokens(workload.sessions, token_rng, vocab_size, new).make

    def make(index: int, arrival_s: float) -> Sequence:
        if workload.prompt_ids is not None:  # a trace's shared prefixes
            return new(index, arrival_s, workload.prompt_ids(index, vocab_size, token_rng))
        size = int(prompts[index])
        return new(index, arrival_s, token_rng.integers(0, vocab_size, size=size).tolist())

    return make


def _numpy_executor(model: ModelConfig, scheduler: Scheduler, rng):
    from engine.executor import NumpyExecutor

    swap = scheduler.swap
    return NumpyExecutor(init_params(model), scheduler.block_manager, rng=rng,
                         swap_blocks=swap.num_blocks if swap is not None else 0)


def _serve(scheduler, executor, recorder, workload: Workload, make) -> RunRecorder:
    """Serve in real time: open arrivals at their times; a capped or closed loop's requests
    at theirs (a closed loop's: all at once) once one of its slots is free."""
    from engine.server import serve

    slots = workload.closed_loop
    if slots is None:
        arrival_s, cap = workload.arrival_s, None
    else:
        arrival_s = slots.arrival_s if slots.arrival_s is not None else np.zeros(len(workload))
        cap = slots.concurrency
    requests = [make(i, float(t)) for i, t in enumerate(arrival_s.tolist())]
    serve(scheduler, executor, requests, recorder, max_in_flight=cap)
    return recorder
