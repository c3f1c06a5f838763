"""The engine loop on its own thread, beside the asyncio event loop that serves HTTP.

The event loop never steps the engine: it hands new requests and cancellations to
`EngineThread` (`submit`, `abort`), which applies them between steps, runs `LLMEngine.step`
while there is work and sleeps on a condition when there is none. After each step it hands
every sampled token to its request's `asyncio.Queue` with one `loop.call_soon_threadsafe`
call. Only this thread touches the scheduler, so the engine needs no locking of its own.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

from engine.llm_engine import LLMEngine, StepOutput
from engine.sequence import Sequence

from .metrics import ServerMetrics


class QueueFull(Exception):
    """The waiting queue holds `max_waiting` requests already."""


@dataclass
class Stream:
    """A request in the engine and the queue its events go to: (token id, finish reason or
    None) per token; (None, "error") when the engine thread failed."""

    seq: Sequence
    events: asyncio.Queue
    arrival_wall_s: float
    last_token_wall_s: float | None = None


class EngineThread:
    """Steps `engine` on a daemon thread; `loop` is the event loop the tokens go to."""

    def __init__(self, engine: LLMEngine, metrics: ServerMetrics,
                 loop: asyncio.AbstractEventLoop, max_waiting: int | None = None):
        self.engine = engine
        self.metrics = metrics
        self.loop = loop
        self.max_waiting = max_waiting
        self.failure: BaseException | None = None
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
        return self._thread.is_alive() and self.failure is None

    def submit(self, seq: Sequence) -> asyncio.Queue:
        """Queue a request (one that fits the engine: see `Scheduler.rejection_reason`); returns
        the queue of its token events. Raises QueueFull when `max_waiting` requests wait."""
        stream = Stream(seq, asyncio.Queue(), time.perf_counter())
        with self._wake:
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

    def _run(self) -> None:
        out = None
        try:
            while True:
                with self._wake:
                    self._wait_for_work(out)
                    if self._stopping:
                        return
                    incoming, self._incoming = self._incoming, []
                    self._num_waiting += len(incoming)  # queued until the step says otherwise
                    aborts, self._aborts = self._aborts, []
                self._apply(incoming, aborts)
                out = self.engine.step(self.now_s()) if self.engine.has_unfinished() else None
                self._publish_state()  # first: a client told it is done finds the gauges so
                if out is not None and out.ran:
                    self._deliver(out)
        except BaseException as exc:  # every request still open is told, then it is reported
            self.failure = exc
            with self._wake:
                streams = list(self._streams.values()) + self._incoming
            self.loop.call_soon_threadsafe(_put_all, [(s.events, (None, "error")) for s in streams])
            raise

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
            self._streams[stream.seq.seq_id] = stream
            self.metrics.count_prompt(stream.seq.prompt_len)
        for seq in aborts:
            if self._streams.pop(seq.seq_id, None) is not None:
                self.engine.abort_request(seq)

    def _deliver(self, out: StepOutput) -> None:
        """Hand the step's tokens to their queues and observe their latencies."""
        now, batch, ttfts, itls = time.perf_counter(), [], [], []
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
        self.metrics.observe_step(ttfts, itls, len(batch))
        self.loop.call_soon_threadsafe(_put_all, batch)

    def _publish_state(self) -> None:
        scheduler = self.engine.scheduler
        bm = scheduler.block_manager
        with self._wake:
            self._num_waiting = len(scheduler.waiting)
            waiting = self._num_waiting + len(self._incoming)
        self.metrics.set_state(len(scheduler.running), waiting, bm.num_used / bm.num_blocks)


def _put_all(batch: list) -> None:
    for events, event in batch:
        events.put_nowait(event)
