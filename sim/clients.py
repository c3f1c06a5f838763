"""The client side of a simulation: SimPy processes that send the workload's requests to the
engines through `SimState.submit` (`sim.loop`), as open arrivals at precomputed times,
closed-loop users (a client's slots) that send their next request when the last one ends, or
conversations that send their next turn when the last one ends. Each calls
`SimState.arrived_all` once its last request is sent.
"""

from __future__ import annotations

from engine.sequence import SequenceStatus

from .workloads.sessions import REJECTED_EARLIER


def start_clients(env, state, arrival_s, closed_loop, sessions, num_requests: int) -> None:
    """Start the processes that send `num_requests` requests: the conversations of
    `sessions`, else `closed_loop`'s users (`sim.workloads.Slots`), else open arrivals at
    `arrival_s`."""
    if sessions is not None:
        env.process(conversation_starts(env, state, sessions))
    elif closed_loop is None:
        env.process(open_arrivals(env, state, arrival_s))
    else:
        indices = iter(range(num_requests))  # shared: whichever user is free takes the next
        users = min(closed_loop.concurrency, num_requests)  # the others would never send one
        users_left = [users]
        times = None if closed_loop.arrival_s is None else closed_loop.arrival_s.tolist()
        for _ in range(users):
            env.process(closed_loop_user(env, state, indices, closed_loop.think_time_s,
                                         users_left, closed_loop.max_seconds, times))


def open_arrivals(env, state, arrival_s):
    """Submit request i at time arrival_s[i]; requests due at the same instant go together."""
    times = arrival_s.tolist()
    i, n = 0, len(times)
    while i < n:
        state.next_arrival_s = times[i]
        if times[i] > env.now:
            yield env.timeout(times[i] - env.now)
            continue  # float rounding may land a hair early: wait the rest
        while i < n and times[i] <= env.now:
            state.submit(i, times[i])
            i += 1
    state.arrived_all()


def closed_loop_user(env, state, next_index, think_time_s: float, users_left: list,
                     max_seconds: float | None = None, arrival_s=None):
    """One user (a client slot): send a request, wait until it is done, think, repeat while
    requests remain (and, with `max_seconds`, until then). With `arrival_s`, a request is
    not sent before its arrival time."""
    for index in next_index:
        send_s = env.now if arrival_s is None else max(env.now, arrival_s[index])
        if max_seconds is not None and send_s > max_seconds:
            break
        while send_s > env.now:  # float rounding may land a hair early: wait the rest
            yield env.timeout(send_s - env.now)
        done = env.event()
        state.submit(index, env.now, done)
        yield done
        if think_time_s:
            yield env.timeout(think_time_s)
    users_left[0] -= 1
    if users_left[0] == 0:
        state.arrived_all()


def conversation_starts(env, state, sessions):
    """Start each conversation of a `SessionPlan` at its start time, as a process of its own."""
    left = [sessions.num_conversations]
    for c, start_s in enumerate(sessions.start_s.tolist()):
        while start_s > env.now:  # float rounding may land a hair early: wait the rest
            yield env.timeout(start_s - env.now)
        env.process(conversation(env, state, start_s, sessions.requests(c),
                                 sessions.think_time_s, left))


def conversation(env, state, start_s: float, turns: range, think_time_s: float,
                 left: list):
    """One conversation: its first turn at `start_s`, each later one `think_time_s` after the
    previous one finished. After a rejected turn the later ones are never sent, and are
    recorded as rejected (every request is accounted for)."""
    arrival_s = start_s
    for index in turns:
        done = env.event()
        seq = state.submit(index, arrival_s, done)
        yield done
        if seq.status is SequenceStatus.REJECTED:
            for later in range(index + 1, turns.stop):
                state.refuse(later, env.now, REJECTED_EARLIER)
            break
        if think_time_s and index + 1 < turns.stop:
            yield env.timeout(think_time_s)
        arrival_s = env.now
    left[0] -= 1
    if left[0] == 0:
        state.arrived_all()
