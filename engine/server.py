"""Serving: the engine's part 7 API on a `Server`, and `serve()`, which replays a workload in real time.

`Server` wraps the engine loop for interactive use: `submit` a prompt (text or token ids), then
`step` / `stream` / `drive_until_complete` produce stream chunks as tokens are sampled, and
`collect_request_output` / `build_completion_response` return the finished request, the latter
as an OpenAI-style completion object.

`serve(scheduler, executor, requests, recorder)` is the real-time mode: it submits each request
at its planned arrival on the wall clock, starts a step the instant there is work (sleeping to
the next arrival when idle, never polling), and records every request and step.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np

from .executor import NumpyExecutor
from .llm_engine import LLMEngine
from .model import normalize_params
from .prefix_cache import make_block_manager
from .records import RunRecorder
from .scheduler import Scheduler, SchedulerConfig
from .sequence import SamplingParams, Sequence
from .sequences import sampling_params_from
from .tokenizer import decode_tokens, encode_prompt

__all__ = ["format_stream_chunk", "Server", "submit_request", "drive_until_complete",
           "collect_request_output", "build_completion_response", "serve", "sleep_until"]


def format_stream_chunk(request_id: str, token_id: int, token_text: str, finished: bool) -> dict:
    """One streamed token: {"request_id", "token_id", "text", "finished"}."""
    return {"request_id": request_id, "token_id": int(token_id), "text": token_text,
            "finished": bool(finished)}


def sleep_until(deadline_s: float, clock) -> None:
    """Sleep until clock() >= deadline_s: OS sleep for all but the last millisecond, then spin,
    so an idle server wakes on time rather than up to a scheduler tick late."""
    while True:
        left = deadline_s - clock()
        if left <= 0:
            return
        if left > 0.002:
            time.sleep(left - 0.001)


class Server:
    """A streaming completion server over the engine (real model, real tokenizer)."""

    def __init__(self, params: dict, vocab: dict, *, scheduler_config: SchedulerConfig | None = None,
                 block_size: int = 16, num_kv_blocks: int = 256,
                 rng: np.random.Generator | None = None, model_name: str = "servesim-numpy",
                 eos_token: str | None = "<eos>", enable_prefix_caching: bool = True):
        p = normalize_params(params)
        if p["E"].shape[0] != len(vocab["id_to_token"]):
            raise ValueError(f"Server: the model's vocab_size ({p['E'].shape[0]}) must equal the "
                             f"vocabulary's size ({len(vocab['id_to_token'])})")
        config = scheduler_config or SchedulerConfig(max_seq_len=p["max_seq_len"])
        if config.max_seq_len > p["max_seq_len"]:
            raise ValueError(f"Server: scheduler max_seq_len ({config.max_seq_len}) exceeds the "
                             f"model's ({p['max_seq_len']})")
        self.vocab = vocab
        self.model_name = model_name
        self.eos_token_id = vocab["token_to_id"].get(eos_token) if eos_token else None
        bm = make_block_manager(num_kv_blocks, block_size, enable_prefix_caching)
        executor = NumpyExecutor(p, bm, rng=np.random.default_rng(0) if rng is None else rng)
        self.recorder = RunRecorder(num_kv_blocks)
        self.engine = LLMEngine(Scheduler(config, bm), executor, self.recorder)
        self.requests: dict[str, Sequence] = {}
        self.chunks: dict[str, list[dict]] = {}
        self._callbacks: dict[str, object] = {}
        self._created: dict[str, int] = {}
        self._next_id = 0
        self._wall0 = time.perf_counter()

    def now_s(self) -> float:
        """Seconds since the server started (the clock of its recorder)."""
        return time.perf_counter() - self._wall0

    def submit(self, prompt, max_new_tokens: int = 16, priority: int = 0,
               sampling: SamplingParams | dict | None = None, *, ignore_eos: bool = False,
               on_chunk=None) -> str:
        """Queue a prompt (text, or a list of token ids) and return its id ("req-0", ...).
        `on_chunk(chunk)` is called for each of its tokens as it is sampled. A request that can
        never fit raises ValueError with the reason."""
        ids = encode_prompt(prompt, self.vocab) if isinstance(prompt, str) else list(prompt)
        vocab_size = len(self.vocab["id_to_token"])
        if any(not 0 <= t < vocab_size for t in ids):
            raise ValueError(f"prompt token ids must be in [0, {vocab_size})")
        request_id = f"req-{self._next_id}"
        seq = Sequence(request_id, len(ids), max_new_tokens, prompt_token_ids=ids,
                       priority=priority, arrival_s=self.now_s(),
                       sampling=sampling_params_from(sampling), ignore_eos=ignore_eos,
                       eos_token_id=self.eos_token_id)
        self._next_id += 1  # a request that reaches the scheduler keeps its id, even rejected
        if not self.engine.add_request(seq):
            raise ValueError(f"request {request_id} rejected: {seq.reject_reason}")
        self.requests[request_id] = seq
        self.chunks[request_id] = []
        self._created[request_id] = int(time.time())
        if on_chunk is not None:
            self._callbacks[request_id] = on_chunk
        return request_id

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished()

    def step(self) -> list[dict]:
        """Run one engine step; return the stream chunks of the tokens it sampled."""
        out = self.engine.step(self.now_s())
        if not out.ran:
            if out.plan.idle_until_s is not None:  # a static batch waiting for its timeout
                sleep_until(out.plan.idle_until_s, self.now_s)
            return []
        plan, chunks = out.plan, []
        sampled = [s for s, _ in plan.prefills if s.last_token_step == plan.step] + plan.decodes
        for seq in sampled:
            token = seq.output_token_ids[-1]
            chunk = format_stream_chunk(seq.request_id, token, decode_tokens([token], self.vocab),
                                        seq.is_finished)
            self.chunks[seq.request_id].append(chunk)
            callback = self._callbacks.get(seq.request_id)
            if callback is not None:
                callback(chunk)
            chunks.append(chunk)
        return chunks

    def stream(self, request_id: str):
        """Yield the request's chunks as they are produced, driving the engine (and every other
        request in the batch) until it finishes."""
        seq, chunks, sent = self._get(request_id), self.chunks[request_id], 0
        while True:
            while sent < len(chunks):
                yield chunks[sent]
                sent += 1
            if seq.is_finished:
                return
            self.step()

    def _get(self, request_id: str) -> Sequence:
        if request_id not in self.requests:
            raise ValueError(f"unknown request id {request_id!r}")
        return self.requests[request_id]


def submit_request(server: Server, prompt, max_new_tokens: int, priority: int, vocab: dict) -> str:
    """Encode `prompt` with `vocab` and queue it on the server; returns "req-0", "req-1", ..."""
    ids = encode_prompt(prompt, vocab) if isinstance(prompt, str) else prompt
    return server.submit(ids, max_new_tokens, priority)


def drive_until_complete(server: Server, max_steps: int | None = None) -> list[dict]:
    """Step the server until every submitted request is done, or `max_steps` steps ran; returns
    the chunks produced, in order (check `server.has_unfinished()` after a step limit)."""
    chunks, steps = [], 0
    while server.has_unfinished() and (max_steps is None or steps < max_steps):
        chunks += server.step()
        steps += 1
    return chunks


def collect_request_output(server: Server, request_id: str) -> dict | None:
    """{"request_id", "prompt_token_ids", "output_ids", "finish_reason", "chunks"} of a finished
    request; None while it is still queued or running."""
    seq = server._get(request_id)
    if not seq.is_finished:
        return None
    return {"request_id": request_id, "prompt_token_ids": list(seq.prompt_token_ids),
            "output_ids": list(seq.output_token_ids), "finish_reason": seq.finish_reason,
            "chunks": list(server.chunks[request_id])}


def build_completion_response(server: Server, request_id: str, vocab: dict | None = None) -> dict | None:
    """An OpenAI-style completion object of a finished request (None until it finishes):
    id, object "text_completion", created, model, choices[0] {text, index, logprobs,
    finish_reason "stop" | "length"}, usage {prompt_tokens, completion_tokens, total_tokens}."""
    output = collect_request_output(server, request_id)
    if output is None:
        return None
    n_prompt, n_out = len(output["prompt_token_ids"]), len(output["output_ids"])
    return {
        "id": request_id, "object": "text_completion", "created": server._created[request_id],
        "model": server.model_name,
        "choices": [{"index": 0, "text": decode_tokens(output["output_ids"], vocab or server.vocab),
                     "logprobs": None, "finish_reason": output["finish_reason"]}],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                  "total_tokens": n_prompt + n_out},
    }


def serve(scheduler: Scheduler, executor, requests: list[Sequence], recorder: RunRecorder,
          time_limit_s: float | None = None, progress=None,
          max_in_flight: int | None = None, send_until_s: float | None = None) -> RunRecorder:
    """Serve `requests` in real time: each is submitted at its `arrival_s` (the run's clock
    starts at the first arrival), steps run back to back while there is work, and the engine
    sleeps to the next arrival when idle. Requests not done `time_limit_s` after the first
    arrival are recorded as "unfinished". Each request's submission lag (how long after its
    planned arrival the scheduler saw it) goes to `recorder.submit_lag_s`.
    `max_in_flight`: at most this many requests submitted and not done; one that arrives
    while the cap is reached waits for a slot, and its `arrival_s` becomes the moment it is
    sent (vLLM's --max-concurrency: latencies start then). A request sent while a step runs
    reaches the scheduler after that step, as it would a server's. `send_until_s` (with
    `max_in_flight`, on the requests' clock): no request is sent later; those arriving after
    it, or still waiting for a slot then, are never sent nor recorded (the simulator's client
    slots under `workload.max_seconds`).
    `progress(done, total, elapsed_s, last_arrival_s)`, when given, is called at the start and
    whenever the count of requests done (finished or rejected) grows; times are seconds from
    the first arrival (a progress bar: work done, and time against the last arrival's)."""
    engine = LLMEngine(scheduler, executor, recorder, timing="wall")
    pending = sorted(requests, key=lambda s: s.arrival_s)
    until_s = math.inf if send_until_s is None or max_in_flight is None else send_until_s
    pending = [seq for seq in pending if seq.arrival_s <= until_s]
    if not pending:
        return recorder
    origin_s, wall0 = pending[0].arrival_s, time.perf_counter()
    last_arrival_s, base = pending[-1].arrival_s - origin_s, recorder.num_requests
    done = base
    client = _ClientSlots(max_in_flight, base, until_s)

    def clock() -> float:
        return origin_s + (time.perf_counter() - wall0)

    if progress is not None:
        progress(0, len(pending), 0.0, last_arrival_s)
    end_s = math.inf if time_limit_s is None else origin_s + time_limit_s
    i = 0
    while i < len(pending) or client.holds_any() or engine.has_unfinished():
        now = clock()
        if now >= end_s:
            break
        if progress is not None and recorder.num_requests != done:  # one int compare a pass
            done = recorder.num_requests
            progress(done - base, len(pending), now - origin_s, last_arrival_s)
        client.deliver(engine)  # what was sent while the last step ran
        while i < len(pending) and pending[i].arrival_s <= now:
            if client.cap is None:
                recorder.record_submit_lag(now - pending[i].arrival_s)
                engine.add_request(pending[i])
            else:
                client.queue(pending[i])
            i += 1
        client.send(engine, recorder, now)
        out = engine.step(now) if engine.has_unfinished() else None
        if out is not None and out.ran:
            continue
        wake = pending[i].arrival_s if i < len(pending) else math.inf
        if out is not None and out.plan.idle_until_s is not None:
            wake = min(wake, out.plan.idle_until_s)
        if wake < math.inf:
            recorder.record_sleep(min(wake, end_s))
            sleep_until(min(wake, end_s), clock)
        else:  # the last requests were rejected, or wait on the client for a slot
            assert client.holds_any() or not engine.has_unfinished(), \
                "requests wait but nothing can run"
    for seq in client.unsent() + pending[i:]:  # never sent before the time limit
        recorder.record_request(seq, "unfinished")
    engine.record_unfinished()
    if progress is not None:
        progress(recorder.num_requests - base, len(pending), clock() - origin_s,
                 last_arrival_s)
    return recorder


class _ClientSlots:
    """`serve`'s client side under a cap on requests in flight: requests that arrived and wait
    for a slot, and those sent while a step ran (the scheduler sees them after it)."""

    def __init__(self, cap: int | None, done_before: int, until_s: float = math.inf):
        self.cap, self.until_s = cap, until_s  # no request is sent after until_s
        self.free_since: float | None = None  # since when a slot has stood free, seen last
        self.waiting: deque[Sequence] = deque()  # arrived, not sent (no slot is free)
        self.mail: list[Sequence] = []  # sent while the engine was busy
        self.sent = 0
        self.done_before = done_before

    def holds_any(self) -> bool:
        return bool(self.waiting or self.mail)

    def queue(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def deliver(self, engine: LLMEngine) -> None:
        for seq in self.mail:
            engine.add_request(seq)
        self.mail = []

    def send(self, engine: LLMEngine, recorder: RunRecorder, now: float) -> None:
        """Send waiting requests into free slots (a request is done when it is recorded); an
        idle engine sees them at once, a busy one after its next step."""
        if self.cap is None:
            return
        busy = engine.has_unfinished()
        in_flight = self.sent - (recorder.num_requests - self.done_before)
        free_since = now if self.free_since is None else self.free_since
        while self.waiting and in_flight < self.cap:
            # due once it arrived and a slot was free (the simulator's client slots): a request
            # that arrived during a step into a free slot was due on time, however late the
            # step ended; one due after until_s is never sent, nor is any after it
            if max(self.waiting[0].arrival_s, free_since) > self.until_s:
                self.waiting.clear()
                break
            seq = self.waiting.popleft()
            recorder.record_submit_lag(0.0)
            seq.arrival_s = now  # its latencies start when it is sent
            (self.mail.append if busy else engine.add_request)(seq)
            self.sent += 1
            in_flight += 1
        self.free_since = free_since if in_flight < self.cap else None

    def unsent(self) -> list[Sequence]:
        return list(self.waiting)
