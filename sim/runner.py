"""Run a resolved scenario config in its mode and return its records.

`run_config(config)` builds the server (`sim.build`) and the workload from `config.workload`
and the seed, then:
- simulate: SimPy clock, `CostModelExecutor` (cost.model "profile", "linear" or "hardware";
  with cost.jitter, every step also scaled by the profiled machine's speed, `sim.costs.jitter`);
- cosimulate (cost.model "live" names this source): SimPy clock, the real `NumpyExecutor` on random prompt token
  ids (a conversation's turn extends its previous turn's ids), its measured step time advancing
  the clock;
- serve: the wall clock, the real engine, through `engine.server.serve`.
The notes a run says (`sim.notes`: a fallback to the roofline, say) are its recorder's `notes`,
which its report lists. `simulate(scenario)` runs every variant at every sweep point of a
scenario, each checked first (`sim.checks`).
"""

from __future__ import annotations

from pathlib import Path

from engine.benchmark import counted
from engine.records import RunRecorder
from scenarios import RunConfig

from . import notes
from .build import build_server, resolved_spec, run_mode, sequence_maker
from .checks import SERVE_SESSIONS, SERVE_THINK_TIME, check_scenario, sent_as_run
from .costs.executor import check_cost_model
from .loop import run_loop
from .workloads import Workload, build_workload, seeded_streams


def run_config(config: RunConfig, progress: bool = False, base_dir=None, cost=None,
               jitter_rng=None, fast_forward: bool = True,
               steady: bool | None = None) -> RunRecorder:
    """Run one resolved config (see docs/sim/simulation.md); `base_dir` resolves a relative
    trace path (after the current directory). `cost`: in simulate mode, a cost model to use
    instead of the one `config.cost` selects. `jitter_rng`: with `cost.jitter`, a generator
    for the machine's speed instead of the seed's own "jitter" stream (another realisation of
    the same machine on the same requests). `fast_forward=False`: every simulated step goes
    through the scheduler one by one, counting every sequence (the same records; for checking
    the fast paths); `steady`: count steady decoders in bulk (`sim.fastpath.steady`) or not,
    whatever `fast_forward` says."""
    if cost is not None:
        check_cost_model(cost)
    with notes.collected() as said:
        recorder = _run_config(config, progress, base_dir, cost, jitter_rng, fast_forward,
                               steady)
        _say_if_all_warmup(config, recorder)
    recorder.notes = tuple(said)
    return recorder


def _say_if_all_warmup(config: RunConfig, recorder: RunRecorder) -> None:
    """Say so when every request was sent within the warm-up (nothing counted): a closed
    loop's, a capped client's or conversations' send times are known only once run
    (`sim.checks.warmup_problem` refuses the others before they start)."""
    warmup_s = config.workload.warmup_s
    if warmup_s and sent_as_run(config.workload) and \
            not counted(recorder.request_columns(), warmup_s).any():
        notes.say_once(f"note: {config.name}: every request was sent within the {warmup_s:g} s "
                       f"warm-up (workload.warmup_s), so none is counted; shorten the warm-up "
                       f"or send more requests")


def _run_config(config: RunConfig, progress, base_dir, cost, jitter_rng, fast_forward,
                steady) -> RunRecorder:
    mode = run_mode(config)
    streams = seeded_streams(config.seed)
    steady = fast_forward if steady is None else steady
    if config.cluster is not None:
        from .cluster import run_cluster

        return run_cluster(config, mode, streams, base_dir, progress=progress, cost=cost,
                           jitter_rng=jitter_rng, fast_forward=fast_forward, steady=steady)
    workload = build_workload(config.workload, streams["workload"], base_dir)
    scheduler, executor, model = build_server(config, mode, streams, cost, jitter_rng,
                                              steady=steady)
    recorder = RunRecorder(scheduler.block_manager.num_blocks)
    if mode == "serve" and workload.closed_loop is not None \
            and workload.closed_loop.think_time_s:
        raise ValueError(SERVE_THINK_TIME)
    if mode == "serve" and workload.sessions is not None:
        raise ValueError(SERVE_SESSIONS)
    make = sequence_maker(workload, mode, streams, model, scheduler.block_manager)
    if mode == "serve":
        return _serve(scheduler, executor, recorder, workload, make)
    return run_loop(scheduler, executor, recorder, make, arrival_s=workload.arrival_s,
                    closed_loop=workload.closed_loop, sessions=workload.sessions,
                    num_requests=len(workload), progress=progress, fast_forward=fast_forward)


def run_notes(scenario) -> list[str]:
    """What a user should read before a scenario's runs start: each trace file's notes
    (fewer requests than asked for, entries skipped), once per file."""
    from .workloads.traces import trace_notes

    notes = []
    for spec in scenario.runs():
        trace = spec.config.workload.trace
        for note in trace_notes(trace) if trace is not None else ():
            if note not in notes:
                notes.append(note)
    return notes


def simulate(scenario_or_name, progress: bool = False, overrides=()) -> list:
    """Every run of a scenario (a `scenarios.Scenario`, a built-in name or a path):
    [(RunSpec, RunRecorder), ...] in `Scenario.runs()` order. Every run is checked
    (`sim.checks.check_scenario`) before the first starts."""
    import scenarios

    scenario = scenario_or_name
    if isinstance(scenario, (str, Path)):
        scenario = scenarios.load(scenario, overrides)
    check_scenario(scenario)
    base_dir = Path(scenario.path).parent if scenario.path else None
    return [(resolved_spec(spec), run_config(spec.config, progress=progress, base_dir=base_dir))
            for spec in scenario.runs()]


def _serve(scheduler, executor, recorder, workload: Workload, make) -> RunRecorder:
    """Serve in real time: open arrivals at their times; a capped or closed loop's requests
    at theirs (a closed loop's: all at once) once one of its slots is free."""
    from engine.server import serve

    arrival_s, cap = workload.served_arrivals()
    requests = [make(i, float(t)) for i, t in enumerate(arrival_s.tolist())]
    serve(scheduler, executor, requests, recorder, max_in_flight=cap,
          send_until_s=workload.send_until_s)
    return recorder
