"""Checking a config before running it: everything a run would build from files and
distributions (the workload, its trace file, the cost model, the jitter, the hardware), and
that every run of a command fits in memory together, so that a problem is one line before any
run starts, placed in the scenario file, an override or a variant (docs/architecture.md,
"From a scenario file to a chart")."""

from __future__ import annotations

import math
from pathlib import Path

from scenarios import RunConfig

from . import notes
from .build import build_cost, build_scheduler, hardware_of, speed_process
from .memory import check_memory
from .workloads import build_workload, check_turn_lengths, check_workload, load_trace, \
    seeded_streams

SERVE_SESSIONS = ("workload.sessions is supported in modes simulate and cosimulate only (serve "
                  "replays arrival times given up front; a conversation sends each turn when "
                  "the last one finishes)")
SERVE_THINK_TIME = ("workload.arrival.think_time_s: a closed loop with think time is supported "
                    "in modes simulate and cosimulate only (serve sends each request at its "
                    "arrival time or once a slot is free)")


def check_config(config: RunConfig, base_dir=None) -> int:
    """Build what a resolved config's run needs from files and distributions (the workload's
    trace file, the cost model, the jitter) without running it, and check that the run fits in
    memory; raises ValueError or FileNotFoundError naming the dotted key. Returns how many
    requests the run sends."""
    workload = config.workload
    if config.mode == "serve" and getattr(workload.arrival, "think_time_s", 0.0):
        raise ValueError(SERVE_THINK_TIME)
    check_workload(workload, base_dir)
    trace = workload.trace
    if workload.sessions is not None:
        requests = _check_sessions(config)
    elif trace is None:
        requests = workload.num_requests
    else:
        requests = len(load_trace(trace.path, trace.format, trace.time_scale,
                                  trace.max_requests, base_dir))  # read once, by check_workload
    check_memory([(config, requests)])
    problem = warmup_problem(config, base_dir)
    if problem:
        raise ValueError(f"workload.warmup_s: {problem}; lower it, or send more requests")
    if config.on_hardware:
        for place, replica in _servers(config):
            try:
                hardware = hardware_of(replica)
                build_scheduler(replica, hardware.arch.max_seq_len, hardware.kv_blocks,
                                state_blocks=hardware.state_blocks)
            except ValueError as exc:
                raise ValueError(f"{place}{exc}") from None
    elif config.mode == "simulate" and config.cost.model != "live":
        speed_process(config.cost, build_cost(config), None)
    return requests


def sent_as_run(workload) -> bool:
    """Whether requests are sent as earlier ones end (a closed loop, a capped client,
    conversations), at times only the run knows."""
    return workload.sessions is not None or workload.max_concurrency is not None or \
        workload.arrival.process == "closed_loop"


def warmup_problem(config: RunConfig, base_dir=None) -> str | None:
    """What is wrong with a warm-up that every arrival time given up front falls within
    (nothing would be counted), or None; a closed loop's, a capped client's and conversations'
    later requests are sent as earlier ones end, which only the run knows."""
    workload = config.workload
    if not workload.warmup_s or sent_as_run(workload):
        return None
    arrival_s = build_workload(workload, seeded_streams(config.seed)["workload"],
                               base_dir).arrival_s
    # seconds from the first arrival, as the warm-up and every reported time count them
    last_s = float(arrival_s[-1] - arrival_s[0])
    if last_s >= workload.warmup_s:
        return None
    return (f"every request arrives within the {workload.warmup_s:g} s warm-up (the last at "
            f"{last_s:.3g} s), so none would be counted")


def _servers(config: RunConfig) -> list:
    """[(where, config)] of each kind of server a config runs: the config itself, or with
    `cluster.pools` each pool's (its `set` applied; "cluster.pools[i].set: " the place of its
    problems), the base alone then being no server's."""
    return [(f"cluster.pools[{i}].set: ", pooled)
            for i, (_, pooled) in enumerate(config.pool_configs())] or [("", config)]


def _check_sessions(config: RunConfig) -> int:
    """Refuse sessions in serve mode, or a conversation whose last turn passes the model's
    max_seq_len (the turns the seed draws); returns how many requests (turns) there are."""
    if config.mode == "serve":
        raise ValueError(SERVE_SESSIONS)
    hardware = hardware_of(_servers(config)[0][1])
    max_seq_len = config.model.max_seq_len if hardware is None else hardware.arch.max_seq_len
    sessions = config.workload.sessions
    turns = sessions.turn_counts
    workload = config.workload
    turn = workload.prompt_tokens.lowest + workload.output_tokens.lowest  # a message, a reply
    fewest = sessions.system_prompt_tokens + turns.lowest * turn
    if fewest > max_seq_len:  # said before a plan of that many turns is built
        raise ValueError(f"workload.sessions.turns: a conversation of {turns.lowest:,} turns "
                         f"of at least {turn:,} tokens (a message and a reply) holds at least "
                         f"{fewest:,} tokens at its last, past the model's max_seq_len of "
                         f"{max_seq_len:,}")
    check_memory([(config, math.ceil(sessions.conversations * turns.mean))])  # before building
    workload = build_workload(config.workload, seeded_streams(config.seed)["workload"])
    check_turn_lengths(workload.sessions, max_seq_len)
    return len(workload)


def check_scenario(scenario, specs=None) -> None:
    """Check the base config and every run of a loaded scenario (`check_config`), and that all
    the runs' records fit in memory together; the first problem is a one-line `ScenarioError`
    placed in the file, an override or a variant at a sweep point, as the scenario loader
    places its own. `specs`: check these runs (the scenario's, changed by the caller) instead
    of the base and the scenario's runs. The notes the checks meet (`sim.notes`) are printed
    after the last check passes."""
    with notes.held() as said:  # printed once every run passed, else the error alone
        _check_runs(scenario, specs)
    notes.release(said)


def _check_runs(scenario, specs) -> None:
    base_dir = Path(scenario.path).parent
    # the base alone, unless it holds a lone variant's settings: its runs, checked below, then
    # place a problem in that variant
    folded = len(scenario.variants) == 1 and scenario.variants[0].set
    problem = None if specs is not None or folded else _problem(scenario.base, base_dir)[0]
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


def _problem(config: RunConfig, base_dir) -> tuple[str | None, int]:
    """(what is wrong with a config, or None; how many requests its run sends)."""
    try:
        return None, check_config(config, base_dir)
    except (ValueError, FileNotFoundError) as exc:
        return str(exc), 0
