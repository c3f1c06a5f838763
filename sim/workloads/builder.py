"""A workload: every request's arrival time, prompt and output lengths and priority, built from
the config's `workload` settings (`scenarios.config.WorkloadSettings`) before the run starts.

All random values come from one `np.random.Generator` in a fixed order: arrival gaps, then
prompt lengths, then output lengths, then priorities. The same seed therefore gives the same
requests in every mode (simulate, cosimulate, serve). A closed loop has no arrival times up
front (users send requests as earlier ones finish), nor do multi-turn sessions (conversations
start by the arrival process, and each sends its next turn when the last one finishes:
`sessions.py`); a trace gives arrivals and lengths and only priorities are drawn. A trace of
lengths only (ShareGPT) is shuffled first (a permutation of its requests is the first draw,
before `max_requests` keeps the first N), then arrivals are drawn from the arrival process, then
priorities.

`seeded_streams(seed)` splits one seed into independent generators for the workload, the prompt
token ids (real engine only), the engine's sampling, the simulated machine's jitter and a
cluster's random router, so drawing token ids in cosimulation never changes the workload.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from scenarios.config import TraceSettings, WorkloadSettings
from scenarios.defaults import MAX_TIME_S
from scenarios.arrival import ClosedLoop

from .arrivals import Slots
from .block_keys import trace_block_keys, trace_token_ids
from .sessions import SessionPlan, plan_sessions
from .traces import load_trace


@dataclass(frozen=True)
class Workload:
    prompt_tokens: np.ndarray  # [n] int64
    output_tokens: np.ndarray  # [n] int64
    priority: np.ndarray  # [n] int64 (all 0 without a priority distribution)
    arrival_s: np.ndarray | None  # [n] float64 seconds, non-decreasing; None when sent in a loop
    closed_loop: Slots | None = None  # sent as users' (or client slots') requests finish
    sessions: SessionPlan | None = None  # multi-turn conversations (sessions.py)
    # (index, block_size) -> the prefix-cache keys of request index's full KV blocks, for a
    # simulated run (no token ids); None: the workload has none
    block_keys: Callable[[int, int], list] | None = None
    # (index, vocab_size, rng) -> request index's prompt token ids, sharing what its block keys
    # share, for a real-engine run; None: random ids from rng
    prompt_ids: Callable[[int, int, np.random.Generator], list] | None = None

    def __post_init__(self):
        n = len(self.prompt_tokens)
        assert len(self.output_tokens) == n and len(self.priority) == n
        assert sum(x is not None for x in (self.arrival_s, self.closed_loop, self.sessions)) == 1
        assert self.arrival_s is None or len(self.arrival_s) == n

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def served_arrivals(self) -> tuple[np.ndarray, int | None]:
        """When a real-time server is sent each request, and the cap on requests in flight
        (`engine.server.serve`'s max_in_flight): open arrivals at their times, no cap; a capped
        or closed loop's requests at theirs (a closed loop's all at once), each once one of its
        slots is free. Conversations are not served (their turns wait on replies)."""
        slots = self.closed_loop
        if slots is None:
            return self.arrival_s, None
        arrival_s = slots.arrival_s if slots.arrival_s is not None else np.zeros(len(self))
        return arrival_s, slots.concurrency

    @property
    def send_until_s(self) -> float | None:
        """When a capped or closed loop's slots stop sending (`workload.max_seconds` after its
        first arrival; a request still waiting for a slot then is never sent), else None."""
        return None if self.closed_loop is None else self.closed_loop.max_seconds


STREAMS = ("workload", "tokens", "sampling", "jitter", "router")


def seeded_streams(seed: int) -> dict[str, np.random.Generator]:
    """Independent generators {"workload", "tokens", "sampling", "jitter", "router"} derived
    from one seed (a child's stream depends on its index only, so adding a stream changes no
    other)."""
    children = np.random.SeedSequence(seed).spawn(len(STREAMS))
    return {name: np.random.default_rng(child) for name, child in zip(STREAMS, children)}


def build_workload(spec: WorkloadSettings, rng: np.random.Generator, base_dir=None) -> Workload:
    """The requests described by a resolved config's workload (see docs/sim/workloads.md); with
    `max_seconds`, those that arrive within it of the first (a closed loop's users stop
    sending then; the conversations of sessions that start within it are kept whole)."""
    return _until(_capped(_build(spec, rng, base_dir), spec.max_concurrency), spec.max_seconds)


def _capped(workload: Workload, max_concurrency: int | None) -> Workload:
    """Open arrivals behind a cap on requests in flight: `max_concurrency` client slots, each
    sending the next request at its arrival time or once its last one is done."""
    if max_concurrency is None or workload.arrival_s is None:
        return workload
    slots = Slots(max_concurrency, arrival_s=workload.arrival_s)
    return replace(workload, arrival_s=None, closed_loop=slots)


def _until(workload: Workload, max_seconds: float | None) -> Workload:
    if max_seconds is None:
        return workload
    slots = workload.closed_loop
    if slots is not None:  # users, or client slots: none sends after the time
        first = 0.0 if slots.arrival_s is None else float(slots.arrival_s[0])
        return replace(workload, closed_loop=replace(slots, max_seconds=first + max_seconds))
    if workload.sessions is not None:
        starts = workload.sessions.start_s
        kept = int(np.searchsorted(starts, starts[0] + max_seconds, side="right"))
        return _session_workload(workload.sessions.first(kept), workload.priority)
    # counted from the first arrival, as every reported time is
    n = int(np.searchsorted(workload.arrival_s, workload.arrival_s[0] + max_seconds,
                            side="right"))
    return replace(workload, prompt_tokens=workload.prompt_tokens[:n],
                   output_tokens=workload.output_tokens[:n], priority=workload.priority[:n],
                   arrival_s=workload.arrival_s[:n])


def _build(spec: WorkloadSettings, rng: np.random.Generator, base_dir) -> Workload:
    if spec.sessions is not None:
        plan = plan_sessions(spec, rng)
        return _session_workload(plan, _priorities(spec, rng, len(plan.prompt_tokens)))
    if spec.trace is not None:
        return _from_trace(spec, spec.trace, rng, base_dir)
    n = spec.num_requests
    arrival_s, slots = _arrivals(spec, rng, n)
    prompts = spec.prompt_tokens.sample(rng, n)
    outputs = spec.output_tokens.sample(rng, n)
    return Workload(prompts, outputs, _priorities(spec, rng, n), arrival_s, slots)


def _arrivals(spec: WorkloadSettings, rng: np.random.Generator, n: int):
    """(arrival times, None) of an open process's n requests, or (None, a closed loop's
    users)."""
    process = spec.arrival
    if isinstance(process, ClosedLoop):
        return None, Slots(process.concurrency, process.think_time_s)
    return process.times(rng, n), None


def _session_workload(plan: SessionPlan, priority: np.ndarray) -> Workload:
    """The requests of a sessions plan (the first len(plan.prompt_tokens) priorities)."""
    n = len(plan.prompt_tokens)
    return Workload(plan.prompt_tokens, plan.output_tokens, priority[:n], None,
                    sessions=plan, block_keys=plan.block_keys)


def check_workload(spec: WorkloadSettings, base_dir=None) -> None:
    """Read what a resolved config's workload needs from files (its trace, read whole now and
    kept: a bad row fails here, before any run starts) and check the span of a lengths-only
    trace's arrivals; raises ValueError or FileNotFoundError with the dotted key (or the trace
    file's name and line)."""
    if spec.trace is not None:
        loaded = _load_trace(spec.trace, base_dir)
        if loaded.arrival_s is None:  # lengths only: the arrival process gives the times
            _check_span(spec.arrival, len(loaded))


def _from_trace(spec: WorkloadSettings, trace: TraceSettings, rng: np.random.Generator,
                base_dir) -> Workload:
    loaded = _load_trace(trace, base_dir, rng if trace.shuffle else None)
    n = len(loaded)
    if loaded.arrival_s is not None:
        shared = {} if loaded.prefix_blocks is None else _shared_prefixes(loaded)
        return Workload(loaded.prompt_tokens, loaded.output_tokens, _priorities(spec, rng, n),
                        loaded.arrival_s, **shared)
    _check_span(spec.arrival, n)
    arrival_s, slots = _arrivals(spec, rng, n)
    return Workload(loaded.prompt_tokens, loaded.output_tokens, _priorities(spec, rng, n),
                    arrival_s, slots)


def _shared_prefixes(trace) -> dict:
    """The Workload fields of a trace that says which prompts share a prefix (mooncake's
    hash ids): each request's block keys, and its prompt ids for a real engine
    (`block_keys.trace_token_ids`)."""
    blocks, prompts, outputs = trace.prefix_blocks, trace.prompt_tokens, trace.output_tokens

    def keys(index: int, block_size: int) -> list[int]:
        prompt = int(prompts[index])
        return trace_block_keys(blocks, index, prompt, prompt + int(outputs[index]), block_size)

    def prompt_ids(index: int, vocab_size: int, rng: np.random.Generator) -> list[int]:
        return trace_token_ids(blocks, index, int(prompts[index]), vocab_size, rng)

    return {"block_keys": keys, "prompt_ids": prompt_ids}


def _load_trace(trace: TraceSettings, base_dir, rng=None):
    """The requests of a resolved trace; `rng` shuffles a lengths-only trace."""
    return load_trace(trace.path, trace.format, trace.time_scale, trace.max_requests, base_dir,
                      tokenizer=trace.tokenizer, rng=rng)


def _check_span(arrivals, n: int) -> None:
    """The arrivals of a trace's n requests stay where times keep microsecond precision (as
    `scenarios.workload_checks.check_horizon` checks when the count is known before reading)."""
    span, key, _ = arrivals.span(n)
    if span > MAX_TIME_S:
        raise ValueError(f"workload.arrival.{key}: the trace's {n:,} requests would span about "
                         f"{span:.3g} s of simulated time; times past {MAX_TIME_S:.3g} s (136 "
                         f"years) lose sub-microsecond precision")


def _priorities(spec: WorkloadSettings, rng: np.random.Generator, n: int) -> np.ndarray:
    if spec.priority is None:
        return np.zeros(n, dtype=np.int64)
    return spec.priority.sample(rng, n)
