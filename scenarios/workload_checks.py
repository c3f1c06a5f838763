"""Rules that tie a scenario's workload keys together: what a trace, sessions or an arrival
process with lengths must give (`check_workload_parts`, on the raw workload before the
defaults), a cap on requests in flight, and the simulated times a run would reach
(`check_horizon`). Each raises `FieldError(dotted_key, problem)`, as `checks.py`'s rules do.
"""

from __future__ import annotations

from .arrival import OPEN_PROCESSES, arrival_of
from .defaults import MAX_TIME_S, SHAREGPT_DEFAULTS, SHIPPED_TRACES, TRACE_DEFAULTS, \
    UNTIMED_TRACE_FORMATS
from .errors import FieldError
from .lengths import LENGTHS


def check_workload_parts(workload: dict) -> None:
    """A trace replaces arrivals and lengths (a ShareGPT file: lengths only); without one, all
    of them are required."""
    if "sessions" in workload:
        check_session_parts(workload)
        return
    if "trace" in workload:
        untimed = check_trace_keys(workload["trace"])
        for name in ("num_requests", "prompt_tokens", "output_tokens"):
            if name in workload:
                raise FieldError(f"workload.{name}",
                                 "not allowed with workload.trace (the trace gives the requests; "
                                 "limit them with workload.trace.max_requests)")
        process = workload.get("arrival", {}).get("process", "trace")
        if untimed and process == "trace":
            raise FieldError("workload.arrival", "required with a sharegpt trace, which gives "
                                                 "lengths but no arrival times (a process other "
                                                 "than trace, e.g. { process = \"poisson\", "
                                                 "rate = 4.0 })")
        if not untimed and process != "trace":
            raise FieldError("workload.arrival.process",
                             f"must be 'trace' (or absent) with workload.trace, which times the "
                             f"arrivals, got {process!r} (workload.trace.time_scale stretches "
                             f"or shrinks its gaps)")
        return
    if workload.get("arrival", {}).get("process") == "trace":
        raise FieldError("workload.trace", "required when workload.arrival.process = 'trace'")
    for name, what in (("num_requests", "a positive integer"), ("arrival", "a table"),
                       ("prompt_tokens", "a table"), ("output_tokens", "a table")):
        if name not in workload:
            raise FieldError(f"workload.{name}", f"required ({what}) unless workload.trace is given")


def check_session_parts(workload: dict) -> None:
    """Sessions: an open arrival process starts the conversations, whose turns are the requests
    (no num_requests, no trace); the new messages' and replies' lengths are required."""
    for name in ("num_requests", "trace"):
        if name in workload:
            raise FieldError(f"workload.{name}", "not allowed with workload.sessions (the "
                                                 "requests are the conversations' turns)")
    process = workload.get("arrival", {}).get("process")
    if process is not None and process not in OPEN_PROCESSES:
        raise FieldError("workload.arrival.process",
                         f"{process!r} cannot start the conversations of workload.sessions "
                         f"(each conversation is its own closed loop); use "
                         f"{', '.join(OPEN_PROCESSES)}")
    for name, what in (("arrival", "the conversations' start"),
                       ("prompt_tokens", "each new user message's length"),
                       ("output_tokens", "each reply's length")):
        if name not in workload:
            raise FieldError(f"workload.{name}", f"required with workload.sessions ({what})")


def check_trace_keys(trace: dict) -> bool:
    """A trace is a shipped one's `name` or a file's `path`, with the keys of its format only;
    returns whether that format gives lengths but no arrival times."""
    if "name" in trace and "path" in trace:
        raise FieldError("workload.trace.path", "not allowed with workload.trace.name (give a "
                                                "shipped trace's name or a file's path)")
    if "name" not in trace and "path" not in trace:
        raise FieldError("workload.trace", "needs name (a shipped trace: "
                                           f"{', '.join(SHIPPED_TRACES)}) or path (a trace file)")
    if "name" in trace and "format" in trace:
        raise FieldError("workload.trace.format", f"not allowed with workload.trace.name (the "
                                                  f"shipped trace {trace['name']!r} is in format "
                                                  f"{SHIPPED_TRACES[trace['name']][1]!r})")
    fmt = SHIPPED_TRACES[trace["name"]][1] if "name" in trace else \
        trace.get("format", TRACE_DEFAULTS["format"])
    untimed = fmt in UNTIMED_TRACE_FORMATS
    own = tuple(SHAREGPT_DEFAULTS) if untimed else ("time_scale",)
    for key in ("time_scale", *SHAREGPT_DEFAULTS):
        if key in trace and key not in own:
            why = "it gives no arrival times; the rate is workload.arrival's" if untimed else \
                "a ShareGPT file's key (this format gives its requests' lengths and order)"
            raise FieldError(f"workload.trace.{key}", f"not allowed with format {fmt!r} ({why})")
    return untimed


def check_max_concurrency(workload: dict) -> None:
    """A cap on requests in flight holds back an open process's (or a trace's) arrivals; a
    closed loop and conversations send as earlier requests finish, capped by their own
    numbers."""
    if workload.get("max_concurrency") is None:
        return
    if workload.get("sessions") is not None:
        raise FieldError("workload.max_concurrency", "not allowed with workload.sessions (each "
                                                     "conversation is its own closed loop)")
    if workload["arrival"]["process"] == "closed_loop":
        raise FieldError("workload.max_concurrency", "not allowed with a closed loop, whose "
                                                     "concurrency caps its requests in flight")


def check_horizon(config: dict) -> None:
    """Times the run would reach that a float can no longer tell apart to the microsecond: the
    arrivals' span (num_requests / rate; a closed loop's think times), a batch timeout."""
    workload = config["workload"]
    arrival, n, unit = workload["arrival"], workload["num_requests"], "requests"
    if workload.get("sessions") is not None:  # the arrivals start conversations
        n, unit = workload["sessions"]["conversations"], "conversations"
    elif n is None:  # a ShareGPT trace's requests: unless limited, counted where it is read
        n = (workload["trace"] or {}).get("max_requests") or 0
    seconds, name, words = arrival_of(arrival).span(n)
    span, key = seconds, f"workload.arrival.{name}" if name else ""
    what = f"{n:,} {unit} {words} would span"
    timeout = config["scheduler"]["batch_timeout_s"]
    checks = [(span, key, what), (timeout, "scheduler.batch_timeout_s", "a batch timeout of")]
    sessions = workload.get("sessions")
    if sessions is not None:  # a conversation thinks between its turns
        turns = sessions["turns"]
        most = turns if isinstance(turns, int) else \
            LENGTHS[turns["dist"]](**{k: v for k, v in turns.items() if k != "dist"}).highest
        think_s = sessions.get("think_time_s") or 0.0
        checks.append(((most - 1) * think_s, "workload.sessions.think_time_s",
                       f"{most - 1:,} think times of {think_s:g} s in a conversation would "
                       f"span"))
    for value, where, text in checks:
        if value > MAX_TIME_S:
            raise FieldError(where, f"{text} about {value:.3g} s of simulated time; times past "
                                    f"{MAX_TIME_S:.3g} s (136 years) lose sub-microsecond "
                                    f"precision")
