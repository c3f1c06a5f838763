"""The simulation loop: SimPy processes that feed a workload to the engine's own `Scheduler` and
advance simulated time by each step's duration.

Scenario: requests arrive (`sim.clients`: open arrivals at precomputed times, closed-loop users
that send their next request when the last one finishes, or conversations that send their next
turn when the last one finishes); the engine process repeats the engine's own loop,
`LLMEngine.start_step` (schedule, execute) -> `yield env.timeout(duration)` ->
`LLMEngine.finish_step` (postprocess, record). The executor is a `CostModelExecutor` (simulate)
or the real `NumpyExecutor` (cosimulate): only the duration's origin differs.

An idle engine sleeps on a `wakeup` event that the next arrival triggers, so a step starts at the
instant a request arrives (no polling). A static-batching plan with `idle_until_s` (waiting for a
fuller batch) sleeps until that time or the next arrival, whichever comes first. One arrival
process may feed several engines (a cluster's replicas, `sim.cluster`): each engine is a
`Replica` with its own process, and the state's `router` picks the replica of each request.
With prefill/decode disaggregation a prefill replica hands each request off after its first
token (`SimState.hand_off`) to a decode replica's queue; once that replica has reserved its
blocks (`SimState.fetch`) the router moves its KV there.

Async scheduling: a server that plans each step while the one before runs (the cost model's
`async_scheduling`: vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap schedulers)
has planned the next step by the time a request arrives during a step; the request joins the
step after that. Its replica holds it (`Replica.held`) until the engine has planned its next
step, then queues it; an engine with nothing to run plans it at once.

Fast forward: after a decode-only step, the decode steps that follow it
(`sim.fastpath.decode_run`) up to the next event in SimPy's queue (an arrival, a think time
ending) are predicted and recorded in one go (`sim.fastpath.start_run` / `finish_run`) with one
timeout; nothing can happen between them that the step-by-step loop would see, so the records are
the same, to the last bit. A simulation's scheduler may also count its steady decoders in bulk
(`sim.fastpath.SteadyScheduler`, chosen where it is built): a step then costs O(changes) rather
than O(batch), with the same plans.
"""

from __future__ import annotations

import math
import sys

import simpy

from engine.llm_engine import LLMEngine
from engine.records import RunRecorder
from engine.sequence import SequenceStatus

from scenarios.defaults import MAX_TIME_S

from .clients import start_clients
from .fastpath import finish_run, start_run
from .replica import NEW, Replica


class SimState:
    """What the processes share: the engines, the router, the waiters and the progress bar.
    `router`: None (one engine), or an object whose `route(seq)` picks the `Replica` of a new
    request, whose `done(seq)` hears of each request that finished or was rejected, and whose
    `in_flight` counts the requests that may still reach a replica other than as arrivals
    (disaggregation: `hand_off(seq, replica, state)` moves one to a decode replica)."""

    def __init__(self, replicas: list[Replica], make_sequence, bar=None,
                 fast_forward: bool = True, closed_loop: bool = False, router=None,
                 refused=None):
        self.replicas = replicas
        self.router = router
        self.fast_forward = fast_forward  # advance runs of decode-only steps in one go
        self.closed_loop = closed_loop  # requests are sent as earlier ones finish (users, turns)
        self.make_sequence = make_sequence  # (index, arrival_s) -> Sequence
        self.bar = bar
        self.all_arrived = False
        self.next_arrival_s = math.inf  # open arrivals: when the next request is due
        self.waiters: dict[int, simpy.Event] = {}  # closed loop: seq_id -> "request done" event
        self.refused = refused  # the recorder of requests never sent (None: the first engine's)

    def submit(self, index: int, arrival_s: float, done=None):
        """Create request `index` and queue it at its replica (the engine records it at once
        if rejected), or, if the replica plans ahead, hold it there until its engine has planned
        its next step (`Replica.queue_held`); returns its Sequence. `done`: an event to trigger
        when it finishes or is rejected."""
        seq = self.make_sequence(index, arrival_s)
        if done is not None:
            self.waiters[seq.seq_id] = done
        replica = self.replicas[0] if self.router is None else self.router.route(seq)
        if replica.plans_ahead:
            replica.held.append((seq, NEW))  # queued once the engine planned its next step
            replica.wake()
        elif replica.engine.add_request(seq):
            replica.wake()
        else:
            self.retire(seq)
        return seq

    def refuse(self, index: int, arrival_s: float, reason: str) -> None:
        """Record request `index` as rejected without sending it (`reason` says why)."""
        seq = self.make_sequence(index, arrival_s)
        seq.reject_reason = reason
        seq.set_status(SequenceStatus.REJECTED)
        (self.refused or self.replicas[0].engine.recorder).record_request(seq)
        self.retire(seq, sent=False)

    def arrived_all(self) -> None:
        """No request is left to send: wake every engine, so that an idle one can end."""
        self.all_arrived = True
        self.next_arrival_s = math.inf
        self.wake_all()

    def wake_all(self) -> None:
        for replica in self.replicas:
            replica.wake()

    def drained(self) -> bool:
        """No request is left to send and none is on its way between replicas: an idle engine
        with nothing unfinished may end."""
        return self.all_arrived and not (self.router is not None and self.router.in_flight)

    def hand_off(self, seq, replica: Replica) -> None:
        """A prefill replica is done with `seq` (disaggregation): the router moves it on."""
        self.router.hand_off(seq, replica, self)

    def fetch(self, plan, replica: Replica) -> None:
        """A decode replica reserved blocks for the requests of `plan.kv_requested`
        (disaggregation): the router moves their KV to it."""
        for seq in plan.kv_requested:
            self.router.fetch(seq, replica, self)

    def retire(self, seq, sent: bool = True) -> None:
        """A request is done (finished or rejected, and recorded): tell its user (and the
        router, of a request it sent)."""
        if sent and self.router is not None:
            in_flight = self.router.in_flight
            self.router.done(seq)
            if in_flight and self.drained():  # the last one: idle engines may end
                self.wake_all()
        waiter = self.waiters.pop(seq.seq_id, None)
        if waiter is not None:
            waiter.succeed()
        if self.bar is not None:
            self.bar.update(1)

    def run_horizon(self, env) -> float:
        """When the next event that could change what a replica runs may happen: SimPy's next
        event on a single server; in a cluster with open arrivals, the next arrival (the other
        replicas' steps change nothing here, and only an arrival reads a replica's state),
        unless a request is on its way between replicas (disaggregation: its KV lands after a
        prefill step that is due ends)."""
        if self.router is not None and not self.closed_loop and not self.router.in_flight:
            return self.next_arrival_s
        return env.peek()


def check_clock(end_s: float) -> None:
    """ValueError when a step would end past `MAX_TIME_S` of simulated time (or at no finite
    time): its costs are too large to simulate."""
    if not end_s <= MAX_TIME_S:
        raise ValueError(f"a step would end at t = {end_s:.3g} s of simulated time, past "
                         f"{MAX_TIME_S:.3g} s (136 years), where times lose sub-microsecond "
                         f"precision: its costs (the cost or hardware settings, or "
                         f"cluster.kv_transfer_*) are too large")


def engine(env, state: SimState, replica: Replica):
    """The engine loop: one iteration per step, sleeping while there is nothing to run. An
    executor with `after_idle(idle_s)` (the cost model's) is told how long the engine slept
    before the step it is about to run (not before the first step: a server starts serving at
    its first request)."""
    llm, scheduler, kv_log = replica.engine, replica.scheduler, replica.kv_log
    after_idle = getattr(llm.executor, "after_idle", None)
    # A closed-loop user (a conversation) sends its next request when one finishes, and a
    # router reads how many requests a replica has: runs stop at finishes.
    through_finishes = not state.closed_loop and state.router is None
    idle_since, stepped = None, False
    while True:
        start_s = env.now
        if idle_since is not None and after_idle is not None:
            after_idle(start_s - idle_since)
        plan, result = llm.start_step(start_s)
        reserved = bool(plan.kv_requested)
        if reserved:
            state.fetch(plan, replica)
        queued = False
        if replica.held and replica.queue_held(state.retire):
            if result is None:  # nothing was planned ahead of them: they go now
                plan, result = llm.start_step(start_s)
                if plan.kv_requested:
                    reserved = True
                    state.fetch(plan, replica)
            else:
                queued = True
        if result is None:
            if reserved and kv_log is not None:  # blocks reserved, and no step logs them
                kv_log.kv_changed(env.now, scheduler.block_manager.num_used)
            if state.drained() and not scheduler.has_unfinished():
                return
            if plan.idle_until_s is None and scheduler.has_unfinished() and \
                    not scheduler.awaiting_kv():
                raise RuntimeError(f"the scheduler made no progress at t={env.now:.6f}s with "
                                   f"{scheduler.num_queued()} waiting, "
                                   f"{len(scheduler.kv.landed)} landed and "
                                   f"{len(scheduler.running)} running")
            if stepped and idle_since is None:
                idle_since = env.now
            yield from _idle(env, replica, plan.idle_until_s)
            continue
        idle_since, stepped = None, True
        end_s = start_s + result.duration_s
        check_clock(end_s)
        if kv_log is not None:
            kv_log.step_started(start_s, plan.kv_blocks_used)
        # no run after requests queued behind this plan: the next step takes them
        run = start_run(llm, plan, end_s, state.run_horizon(env), through_finishes) \
            if state.fast_forward and not queued else None
        if run is None:
            yield env.timeout(result.duration_s)
            finished = llm.finish_step(plan, result, start_s, env.now)
        else:  # the steps that repeat this one, up to the next event, in one go
            check_clock(float(run.end_s[-1]))
            if kv_log is not None:
                kv_log.run_started(run, scheduler.block_manager)
            for delay in delays_to(env.now, float(run.end_s[-1])):
                yield env.timeout(delay)  # nothing the run depends on happens before its end
            finished = llm.finish_step(plan, result, start_s, end_s) + finish_run(llm, run)
        if kv_log is not None:
            kv_log.step_ended(env.now, scheduler.block_manager.num_used)
        for seq in finished:
            state.retire(seq)
        for seq in plan.handed_off:
            state.hand_off(seq, replica)


def delays_to(now: float, target: float) -> list[float]:
    """Timeouts that take SimPy's clock from `now` to exactly `target` (>= now), where adding
    the steps' durations one by one would have put it. SimPy sets the clock to `now + delay`,
    rounded, which for some pairs steps over `target` whatever the delay; then two: to a point t
    in [target / 2, target], from which `target - t` is exact (Sterbenz) and lands."""
    delay = target - now
    for d in (delay, math.nextafter(delay, math.inf), math.nextafter(delay, -math.inf)):
        if now + d == target:
            return [d]
    first = max(0.75 * target - now, 0.0)
    t = now + first
    assert target / 2 <= t <= target and t + (target - t) == target
    return [first, target - t]


def _idle(env, replica: Replica, until_s: float | None):
    replica.wakeup = env.event()
    if until_s is None:
        yield replica.wakeup
    else:
        yield replica.wakeup | env.timeout(max(until_s - env.now, 0.0))
    replica.wakeup = None


def run_loop(scheduler, executor, recorder: RunRecorder, make_sequence, *, arrival_s=None,
             closed_loop=None, sessions=None, num_requests: int, progress: bool = False,
             fast_forward: bool = True) -> RunRecorder:
    """Simulate `num_requests` requests to the end. Give `arrival_s` (open arrivals, [n]
    seconds), `closed_loop` (`sim.workloads.Slots`) or `sessions` (a `SessionPlan`);
    `make_sequence(index, arrival_s)` builds one. `fast_forward=False` takes every step
    through the scheduler one at a time (the same records, slower: for checking the fast
    path)."""
    llm = LLMEngine(scheduler, executor, recorder, timing="executor")
    run_engines(simpy.Environment(), [Replica(llm)], make_sequence, arrival_s=arrival_s,
                closed_loop=closed_loop, sessions=sessions, num_requests=num_requests,
                progress=progress, fast_forward=fast_forward)
    return recorder


def run_engines(env, replicas: list[Replica], make_sequence, *, arrival_s=None,
                closed_loop=None, sessions=None, num_requests: int, progress: bool = False,
                fast_forward: bool = True, router=None, refused=None) -> None:
    """Simulate the requests (as `run_loop`) on `replicas`, each with its own engine process,
    until every engine is done. `router`: picks each request's replica (see `SimState`);
    `refused`: the recorder of requests never sent (a conversation's turns after a
    rejected one)."""
    bar = _progress_bar(num_requests) if progress else None
    state = SimState(replicas, make_sequence, bar, fast_forward,
                     closed_loop is not None or sessions is not None, router, refused)
    start_clients(env, state, arrival_s, closed_loop, sessions, num_requests)
    # created last: they see the arrivals of their instant
    engines = [env.process(engine(env, state, replica)) for replica in replicas]
    try:
        env.run(until=engines[0] if len(engines) == 1 else env.all_of(engines))
    finally:
        if bar is not None:
            bar.close()


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="req", desc="simulating", disable=not sys.stderr.isatty())
