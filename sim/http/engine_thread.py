"""The engine loop on its own thread, beside the asyncio event loop that serves HTTP.

The event loop never steps the engine: it hands new requests and cancellations to
`EngineThread` (`submit`, `abort`), which applies them between steps, runs `LLMEngine.step`
while there is work and sleeps on a condition when there is none. After each step it hands
every sampled token to its request's `asyncio.Queue` with one `loop.call_soon_threadsafe`
call. Only this thread touches the scheduler, so the engine needs no locking of its own.

A failure ends as few requests as it can. A request whose sampling raised was aborted by the
engine (`LLMEngine.step`) and gets a `RequestFailed` event. A step that raises fails every
request it touched (all but those still queued untouched, `_recover`), and serving goes on if
the scheduler then holds nothing of theirs. If it still does, or the thread is stopped, the
thread ends for good: every request still open gets a `RequestFailed` (503) at once, `submit`
refuses new ones (`EngineStopped`) and `stopped_reason` says why.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from dataclasses import dataclass

from engine.llm_engine import LLMEngine, StepOutput
from engine.sequence import Sequence, SequenceStatus

from .metrics import ServerMetrics

SHUTTING_DOWN = "the server is shutting down"
_UNTOUCHED = (SequenceStatus.WAITING, SequenceStatus.PREEMPTED)  # queued, holding no KV


class QueueFull(Exception):
    """The waiting queue holds `max_waiting` requests already."""


class EngineStopped(Exception):
    """The engine thread has stopped for good; the message says why."""


@dataclass(frozen=True)
class RequestFailed:
    """The last event of a request the engine could not finish: answered with `status` (500:
    this request failed; 503: the engine stopped) and `message`."""

    status: int
    message: str


@dataclass
class Stream:
    """A request in the engine and the queue its events go to: (token id, finish reason or
    None) per token, or one `RequestFailed`."""

    seq: Sequence
    events: asyncio.Queue
    arrival_wall_s: float
    last_token_wall_s: float | None = None


def describe(exc: BaseException) -> str:
    """The exception's type and message, on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class EngineThread:
    """Steps `engine` on a daemon thread; `loop` is the event loop the tokens go to."""

    def __init__(self, engine: LLMEngine, metrics: ServerMetrics,
                 loop: asyncio.AbstractEventLoop, max_waiting: int | None = None):
        self.engine = engine
        self.metrics = metrics
        self.loop = loop
        self.max_waiting = max_waiting
        self.stopped_reason: str | None = None  # set once, under the lock, when it stops
        self._wake = threading.Condition()
        self._incoming: list[Stream] = []
        self._aborts: list[Sequence] = []
        self._num_waiting = 0  # the scheduler's queue (as of the last step, plus those since)
        self._stopping = False
        self._streams: dict[int, Stream] = {}  # seq_id -> stream; the engine thread's only
        self._wall0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    def now_s(self) -> float:
        """The engine's clock: seconds since the thread was made."""
        return time.perf_counter() - self._wall0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()

    @property
    def alive(self) -> bool:
        return self.stopped_reason is None and self._thread.is_alive()

    def submit(self, seq: Sequence) -> asyncio.Queue:
        """Queue a request (one that fits the engine: see `Scheduler.rejection_reason`); returns
        the queue of its events. Raises QueueFull when `max_waiting` requests wait, and
        EngineStopped once the thread has stopped."""
        stream = Stream(seq, asyncio.Queue(), time.perf_counter())
        with self._wake:  # the thread stops under this lock: a request is queued or refused
            if self.stopped_reason is not None or self._stopping:
                raise EngineStopped(self.stopped_reason or SHUTTING_DOWN)
            waiting = self._num_waiting + len(self._incoming)
            if self.max_waiting is not None and waiting >= self.max_waiting:
                raise QueueFull(f"the server's queue is full ({waiting} requests waiting)")
            self._incoming.append(stream)
            self._wake.notify()
        return stream.events

    def abort(self, seq: Sequence) -> None:
        """Cancel a submitted request (its client went away); its KV blocks are freed before
        the next step."""
        with self._wake:
            self._aborts.append(seq)
            self._wake.notify()

    # --- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
            reason = SHUTTING_DOWN
        except BaseException as exc:  # the thread ends here, whatever it was: say why
            reason = f"the engine stopped: {describe(exc)}"
            print(f"servesim serve: {reason}", file=sys.stderr, flush=True)
        self._stop_for_good(reason)

    def _serve(self) -> None:
        """Step until stopped; a failed step is recovered from (`_recover`) or raises."""
        out = None
        while True:
            with self._wake:
                self._wait_for_work(out)
                if self._stopping:
                    return
                incoming, self._incoming = self._incoming, []
                self._num_waiting += len(incoming)  # queued until the step says otherwise
                aborts, self._aborts = self._aborts, []
            for stream in incoming:  # first: a failure below still finds every request
                self._streams[stream.seq.seq_id] = stream
            try:
                self._apply(incoming, aborts)
                out = self._step()
            except Exception as exc:
                self._recover(exc)
                out = None

    def _wait_for_work(self, out: StepOutput | None) -> None:
        """Under the lock: return once there is news, or a step to run (right away after a
        step that ran; at `idle_until_s` after one that waited for a static batch)."""
        can_run = self.engine.has_unfinished() and (out is None or out.ran)
        deadline = out.plan.idle_until_s if out is not None and not out.ran else None
        while not (self._stopping or self._incoming or self._aborts or can_run):
            left = None if deadline is None else deadline - self.now_s()
            if left is not None and left <= 0:
                return
            self._wake.wait(left)

    def _apply(self, incoming: list[Stream], aborts: list[Sequence]) -> None:
        for stream in incoming:
            accepted = self.engine.add_request(stream.seq)
            assert accepted, "the server checks rejection_reason before submitting"
            self.metrics.count_prompt(stream.seq.prompt_len)
        for seq in aborts:
            if self._streams.pop(seq.seq_id, None) is not None:
                self.engine.abort_request(seq)

    def _step(self) -> StepOutput | None:
        out = self.engine.step(self.now_s()) if self.engine.has_unfinished() else None
        self._publish_state()  # first: a client told it is done finds the gauges so
        if out is not None and out.ran:
            self._deliver(out)
        return out

    def _deliver(self, out: StepOutput) -> None:
        """Hand the step's tokens (and its failed requests' errors) to their queues and
        observe their latencies."""
        now, batch, ttfts, itls = time.perf_counter(), [], [], []
        try:  # whatever raises, the events of the streams already taken out are posted
            for seq_id, token in out.tokens.items():
                stream = self._streams[seq_id]
                if stream.last_token_wall_s is None:
                    ttfts.append(now - stream.arrival_wall_s)
                else:
                    itls.append(now - stream.last_token_wall_s)
                stream.last_token_wall_s = now
                finish_reason = stream.seq.finish_reason if stream.seq.is_finished else None
                if finish_reason is not None:
                    del self._streams[seq_id]
                batch.append((stream.events, (token, finish_reason)))
            for seq_id, exc in out.failed.items():
                stream = self._streams.pop(seq_id)
                batch.append((stream.events, RequestFailed(
                    500, f"the engine failed on this request: {describe(exc)}")))
            self.metrics.observe_step(ttfts, itls, len(out.tokens))  # before a client can look
        finally:
            self._post(batch)

    def _recover(self, exc: Exception) -> None:
        """A step (or handing requests to the engine) raised: fail every request it may have
        touched (all but those queued untouched) and abort those the scheduler still holds.
        Raises, stopping the thread, when the scheduler is left holding KV blocks or a running
        sequence: a state the engine cannot be trusted to go on from."""
        scheduler = self.engine.scheduler
        touched = [stream for stream in self._streams.values()
                   if not (stream.seq.status in _UNTOUCHED and scheduler.queued(stream.seq))]
        for stream in touched:
            del self._streams[stream.seq.seq_id]
        message = f"the engine failed on a step of this request: {describe(exc)}"
        self._post([(stream.events, RequestFailed(500, message)) for stream in touched])
        print(f"servesim serve: a step failed ({describe(exc)}); {len(touched)} request(s) "
              f"failed with it", file=sys.stderr, flush=True)
        for seq in (stream.seq for stream in touched):
            if seq.status is SequenceStatus.RUNNING or scheduler.queued(seq):
                self.engine.abort_request(seq)
        _check_holds_nothing(scheduler)
        self._publish_state()

    def _stop_for_good(self, reason: str) -> None:
        """Refuse new requests and fail every open one with `reason`."""
        with self._wake:
            self.stopped_reason = reason
            streams = list(self._streams.values()) + self._incoming
            self._streams, self._incoming = {}, []
        self._post([(stream.events, RequestFailed(503, reason)) for stream in streams])

    def _publish_state(self) -> None:
        scheduler = self.engine.scheduler
        bm = scheduler.block_manager
        with self._wake:
            self._num_waiting = scheduler.num_queued()
            waiting = self._num_waiting + len(self._incoming)
        self.metrics.set_state(len(scheduler.running), waiting, bm.num_used / bm.num_blocks)

    def _post(self, batch: list) -> None:
        """Put each (queue, event) of `batch` on the event loop, in order, with one call."""
        if not batch:
            return
        try:
            self.loop.call_soon_threadsafe(_put_all, batch)
        except RuntimeError:  # the event loop has closed: nobody waits for these any more
            pass


def _check_holds_nothing(scheduler) -> None:
    """After a failed step's requests were aborted: nothing runs and no block is held."""
    bm, swap = scheduler.block_manager, scheduler.swap
    held = {"running sequences": len(scheduler.running), "KV blocks": bm.num_used,
            "host swap blocks": swap.num_blocks - swap.num_free if swap is not None else 0}
    left = {what: n for what, n in held.items() if n}
    if left:
        raise RuntimeError("after a failed step the scheduler still holds "
                           + ", ".join(f"{n} {what}" for what, n in left.items()))


def _put_all(batch: list) -> None:
    for events, event in batch:
        events.put_nowait(event)
