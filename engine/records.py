"""Flat records of a run: one row per engine step, one row per request, and the pooled
inter-token gaps. The real server and the simulator fill the same `RunRecorder`, so the metric
functions and the reports read one format whatever produced it.

Columns are kept as `array.array`s (8 bytes a value), not lists of objects, so a million-request
simulation stays small. Times are seconds on the caller's clock; `request_columns()` and
`step_columns()` shift them to seconds from the first arrival.

Inter-token latencies are exact without a timestamp per token: in a step, every sequence whose
previous token came from the previous step has the same gap (this step's end minus the previous
step's end), so a step adds one (gap, count) pair, plus one pair per sequence resumed after a
preemption.

Prefix caching: a request row keeps the prompt tokens its first admission found cached, a step
row the prompt tokens its admissions found cached (re-admissions after a preemption included)
and the KV blocks registered under a hash after its planning.

A cluster of replicas (`sim.cluster`) fills one `RunRecorder` per replica, read as one run by
`cluster_records.ClusterRecorder`. With prefill/decode disaggregation a request is recorded by
its decode replica, with the `KvTransfer` that brought it there.
"""

from __future__ import annotations

import math
from array import array
from typing import NamedTuple

import numpy as np

from .step_plan import StepPlan
from .sequence import Sequence, SequenceStatus

REQUEST_COLUMNS = ("request_id", "priority", "arrival_s", "first_scheduled_s", "first_token_s",
                   "finish_s", "prompt_tokens", "output_tokens", "preemptions", "status",
                   "cached_tokens")
STEP_COLUMNS = ("step", "start_s", "end_s", "num_prefill_tokens", "num_prefill_seqs",
                "num_decode_seqs", "num_padding_seqs", "num_running", "num_waiting",
                "kv_blocks_used", "preemptions", "cached_tokens", "kv_blocks_cached")

RECORD_STATUSES = ("finished", "rejected", "unfinished", "failed")  # failed: a benchmarked
# server's error (`sim.bench`)

NAN = math.nan


class KvTransfer(NamedTuple):
    """A request's move from the replica that prefilled it to a decode replica (times on the
    run's clock): when it was first scheduled and sampled its first token there, when it left
    and when its KV arrived (None while in flight)."""

    prefill_replica: int
    first_scheduled_s: float
    first_token_s: float
    sent_s: float
    arrived_s: float | None = None


class RunRecorder:
    """Collects the rows of one run (one variant at one sweep point)."""

    sees_steps = True  # the engine's steps are recorded (a client's benchmark sees none)

    def __init__(self, kv_blocks_total: int, block_size: int | None = None):
        self.kv_blocks_total = kv_blocks_total
        self.block_size = block_size  # tokens a KV block holds; an engine tells its recorder
        self._steps = {name: array("d") for name in STEP_COLUMNS}
        self._start = self._steps["start_s"]
        self._end = self._steps["end_s"]
        self.request_ids: list = []
        self._requests = {name: array("d") for name in REQUEST_COLUMNS
                          if name not in ("request_id", "status")}
        self.statuses: list[str] = []
        self.reject_reasons: dict = {}
        self.transfers: dict = {}  # request_id -> KvTransfer, of the requests prefilled elsewhere
        self.decode_first_token: dict = {}  # request_id -> its first token here, of those
        self.itl_gaps = array("d")  # gap values, seconds
        self.itl_counts = array("q")  # how many tokens had that gap
        self.itl_steps = array("q")  # the step that ended the gap
        # Real-time serving only: how long after its planned arrival each request reached the
        # scheduler (the rest of a running step, or the wake-up overshoot when idle).
        self.submit_lag_s = array("d")
        # Real-time serving only: {step: when the server last slept until before it (the next
        # arrival, or a static batch's timeout)}, on the requests' clock
        self.sleeps: dict[int, float] = {}
        self.notes: tuple = ()  # what the run told its user, for its report

    # --- filling ---------------------------------------------------------------------------------

    def record_step(self, plan: StepPlan, start_s: float, end_s: float) -> None:
        """Call after `Scheduler.postprocess(plan, ...)`, with the step's start and end times."""
        assert plan.step == len(self._end), "steps must be recorded in order, each once"
        columns = self._steps
        columns["step"].append(plan.step)
        self._start.append(start_s)
        self._end.append(end_s)
        columns["num_prefill_tokens"].append(plan.num_prefill_tokens)
        columns["num_prefill_seqs"].append(len(plan.prefills))
        columns["num_decode_seqs"].append(len(plan.decodes))
        columns["num_padding_seqs"].append(plan.padding_seqs)
        columns["num_running"].append(plan.num_running)
        columns["num_waiting"].append(plan.num_waiting)
        columns["kv_blocks_used"].append(plan.kv_blocks_used)
        columns["preemptions"].append(len(plan.preempted))
        columns["cached_tokens"].append(plan.cached_tokens)
        columns["kv_blocks_cached"].append(plan.kv_blocks_cached)
        if plan.itl_consecutive:
            self.itl_gaps.append(end_s - self._end[plan.step - 1])
            self.itl_counts.append(plan.itl_consecutive)
            self.itl_steps.append(plan.step)
        for previous in plan.itl_from_steps:
            self.itl_gaps.append(end_s - self._end[previous])
            self.itl_counts.append(1)
            self.itl_steps.append(plan.step)

    def record_steps(self, first_step: int, start_s, end_s, columns: dict,
                     itl_counts) -> None:
        """Record K consecutive steps at once, numbered from `first_step` (the next one):
        [K] NumPy arrays of their start and end times, each step column of `columns` (every
        STEP_COLUMNS name but step, start_s and end_s) as a [K] array, a list or one number
        for all, and each step ending one inter-token gap (its duration: it starts where the
        step before it ended) for `itl_counts` tokens (a [K] array or one number)."""
        assert first_step == len(self._end), "steps must be recorded in order, each once"
        k, steps = len(end_s), self._steps
        steps["step"].extend(array("d", range(first_step, first_step + k)))
        self._start.frombytes(np.asarray(start_s, dtype=np.float64).tobytes())
        self._end.frombytes(np.asarray(end_s, dtype=np.float64).tobytes())
        for name, value in columns.items():
            if isinstance(value, np.ndarray):
                steps[name].frombytes(value.astype(np.float64).tobytes())
            elif isinstance(value, list):
                steps[name].extend(array("d", value))
            else:
                steps[name].extend(array("d", (value,)) * k)
        assert all(len(column) == len(self._end) for column in steps.values()), \
            "every step column is given"
        self.itl_steps.extend(range(first_step, first_step + k))
        self.itl_gaps.frombytes((np.asarray(end_s) - np.asarray(start_s)).tobytes())  # [K]
        if isinstance(itl_counts, np.ndarray):
            self.itl_counts.frombytes(itl_counts.astype(np.int64).tobytes())
        else:
            self.itl_counts.extend(array("q", (itl_counts,)) * k)

    def record_request(self, seq: Sequence, status: str | None = None) -> None:
        """Call once per request when it finishes or is rejected (or, with status="unfinished",
        when the run stops before it is done)."""
        status = status or seq.status.value
        if status not in RECORD_STATUSES:
            raise ValueError(f"request {seq.request_id}: status must be one of "
                             f"{', '.join(RECORD_STATUSES)}, got {status!r}")
        cols = self._requests
        self.request_ids.append(seq.request_id)
        cols["priority"].append(seq.priority)
        cols["arrival_s"].append(seq.arrival_s)
        transfer = seq.kv_transfer
        if transfer is None:
            cols["first_scheduled_s"].append(self._time(self._start, seq.first_scheduled_step))
            cols["first_token_s"].append(self._time(self._end, seq.first_token_step))
        else:
            self._record_transferred(seq, transfer)
        cols["finish_s"].append(self._time(self._end, seq.finish_step)
                                if seq.status is SequenceStatus.FINISHED else NAN)
        cols["prompt_tokens"].append(seq.prompt_len)
        cols["output_tokens"].append(seq.num_output_tokens)
        cols["preemptions"].append(seq.preemptions)
        cols["cached_tokens"].append(seq.num_cached_tokens or 0)  # 0: never admitted
        self.statuses.append(status)
        if seq.reject_reason:
            self.reject_reasons[seq.request_id] = seq.reject_reason

    def _record_transferred(self, seq: Sequence, transfer: KvTransfer) -> None:
        """The prefill replica's times of a transferred request, and the gap from its first
        token there to its first token here (its second), which includes the transfer."""
        self.transfers[seq.request_id] = transfer
        self._requests["first_scheduled_s"].append(transfer.first_scheduled_s)
        self._requests["first_token_s"].append(transfer.first_token_s)
        if seq.first_token_step is not None:
            self.decode_first_token[seq.request_id] = self._end[seq.first_token_step]
            self.itl_gaps.append(self._end[seq.first_token_step] - transfer.first_token_s)
            self.itl_counts.append(1)
            self.itl_steps.append(seq.first_token_step)

    def step_times_s(self, step: int) -> tuple[float, float]:
        """(start, end) of a recorded step."""
        return self._start[step], self._end[step]

    def record_submit_lag(self, lag_s: float) -> None:
        """Real-time serving: the submission delay of one request (seconds, >= 0)."""
        self.submit_lag_s.append(lag_s)

    def record_sleep(self, until_s: float) -> None:
        """Real-time serving: the server sleeps until `until_s` before its next step."""
        self.sleeps[self.num_steps] = until_s

    @staticmethod
    def _time(times: array, step: int | None) -> float:
        return NAN if step is None else times[step]

    # --- reading ---------------------------------------------------------------------------------

    @property
    def num_steps(self) -> int:
        return len(self._end)

    @property
    def num_requests(self) -> int:
        return len(self.request_ids)

    def origin_s(self) -> float:
        """The first arrival: the zero of every reported time."""
        arrivals = self._requests["arrival_s"]
        return min(arrivals) if arrivals else 0.0

    def failed_end_s(self, warmup_s: float = 0.0) -> float | None:
        """When the last request sent from `warmup_s` on that failed was given up on, from
        the first arrival (None: none failed; only a benchmarked server's requests fail,
        `sim.bench`)."""
        return None

    def request_columns(self, origin_s: float | None = None) -> dict:
        """Request rows as {column: list}, in arrival order (requests arriving at the same
        instant in the order they were recorded), times from the first arrival (or from
        `origin_s`)."""
        t0 = self.origin_s() if origin_s is None else origin_s
        order = np.argsort(np.asarray(self._requests["arrival_s"]), kind="stable").tolist()
        columns = {"request_id": [self.request_ids[i] for i in order],
                   "status": [self.statuses[i] for i in order]}
        for name, values in self._requests.items():
            columns[name] = ([values[i] - t0 for i in order] if name.endswith("_s")
                             else [values[i] for i in order])
        return {name: columns[name] for name in REQUEST_COLUMNS}

    def itl_end_s(self, origin_s: float | None = None) -> np.ndarray:
        """[pairs] when each inter-token gap ended (its step's end), from the first arrival
        (or from `origin_s`)."""
        ends = np.frombuffer(self._end, dtype=np.float64)
        t0 = self.origin_s() if origin_s is None else origin_s
        return ends[np.frombuffer(self.itl_steps, dtype=np.int64)] - t0

    def slept_before(self, origin_s: float | None = None) -> np.ndarray:
        """[steps] until when the server slept before each step, from the first arrival (or
        from `origin_s`); NaN where it went on at once (and in a simulation)."""
        t0 = self.origin_s() if origin_s is None else origin_s
        until = np.full(self.num_steps, np.nan)
        for step, until_s in self.sleeps.items():
            if step < self.num_steps:  # not a sleep after the last step
                until[step] = until_s - t0
        return until

    def step_columns(self, origin_s: float | None = None) -> dict:
        """Step rows as {column: array}, times from the first arrival (or from `origin_s`)."""
        t0 = self.origin_s() if origin_s is None else origin_s
        columns = dict(self._steps)
        for name, times in (("start_s", self._start), ("end_s", self._end)):
            columns[name] = array("d", (np.frombuffer(times, dtype=np.float64) - t0).tobytes())
        columns["kv_blocks_total"] = self.kv_blocks_total
        return columns
