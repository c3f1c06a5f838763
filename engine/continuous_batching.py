"""Continuous batching and scheduling: the engine's part 6 steps, built on the shared scheduler.

Each function is a thin entry to the policy that `Scheduler` runs every step, built from the same
building blocks (`has_free_capacity`, `admit_sequence`, `preempt_sequence`,
`reserve_decode_blocks` in `scheduler.py`), so there is one implementation of admission and
preemption. These steps have no token budget, so no chunks: `select_admissions` reserves blocks
for all of a sequence's tokens, as `Scheduler` does for a prompt prefilled whole. `alloc` may be
a `BlockManager` or anything with a `.block_manager` (such as the paged allocator of
`init_block_allocator`); `waiting` may be a queue from `queues.py` or a plain heap list filled
by `priority_queue_push`. Sequences are `Sequence` objects.
"""

from __future__ import annotations

import numpy as np

from .block_manager import BlockManager, blocks_needed
from .kv_reservation import peak_blocks
from .executor import NumpyExecutor
from .llm_engine import LLMEngine, StepOutput
from .model import normalize_params
from .queues import PriorityQueue, priority_queue_pop, priority_queue_push
from .scheduler import (Scheduler, SchedulerConfig, admit_sequence, preempt_sequence as _preempt,
                        reserve_decode_blocks)
from .scheduler import has_free_capacity as _has_free_capacity
from .sequence import Sequence
from .sequences import DEFAULT_BLOCK_SIZE, SAMPLING_KEYS, sampling_params_from

__all__ = ["has_free_capacity", "continuous_batch_step", "run_continuous_batching",
           "priority_queue_push", "priority_queue_pop", "select_admissions", "preempt_sequence",
           "schedule_step"]

RUN_KEYS = SAMPLING_KEYS + ("rng", "eos_token_id", "block_size", "num_kv_blocks", "max_num_seqs",
                            "max_num_batched_tokens", "chunked_prefill", "queue")


def _manager(alloc) -> BlockManager:
    return getattr(alloc, "block_manager", alloc)


def _queue(waiting):
    return PriorityQueue(waiting) if isinstance(waiting, list) else waiting


def has_free_capacity(alloc, required_blocks: int) -> bool:
    """True when at least `required_blocks` KV blocks are free."""
    return _has_free_capacity(_manager(alloc), required_blocks)


def select_admissions(waiting, alloc, block_size: int, max_admit: int) -> list[Sequence]:
    """Pop up to `max_admit` sequences in queue order, reserving the blocks of each one's tokens
    and marking it running; stop at the first that does not fit (head-of-line: nothing behind it
    jumps the queue). Returns the admitted sequences in admission order."""
    bm, queue = _manager(alloc), _queue(waiting)
    if block_size != bm.block_size:
        raise ValueError(f"select_admissions: block_size {block_size} differs from the cache's "
                         f"{bm.block_size}")
    admitted = []
    while queue and len(admitted) < max_admit:
        seq = queue.peek()
        if not _has_free_capacity(bm, blocks_needed(seq.num_tokens, block_size)
                                  + bm.state_to_hold(seq.seq_id)):
            break
        queue.pop()
        admit_sequence(seq, bm)
        admitted.append(seq)
    return admitted


def preempt_sequence(seq: Sequence, alloc, waiting) -> None:
    """Free the sequence's blocks and requeue it at its original priority (fcfs: at the front),
    to recompute its prompt and generated tokens when readmitted."""
    _preempt(seq, _manager(alloc), _queue(waiting))


def schedule_step(waiting, running: list, alloc, block_size: int, max_running: int) -> dict:
    """One scheduling decision over a running list kept in admission order: preempt the most
    recently admitted while more than `max_running` run or a decoding sequence needs a KV block
    that is not free, then, unless that preempted (as `Scheduler`, and vLLM v1: the blocks
    just freed are the victims' to win back), admit from `waiting` into the free slots.

    Returns {"running": running (updated in place), "decodes": the sequences whose next token
    has a reserved slot, "admitted": the new ones (to prefill), "preempted": the victims}."""
    bm, queue = _manager(alloc), _queue(waiting)
    preempted = []

    def preempt_last():
        victim = running.pop()
        _preempt(victim, bm, queue)
        preempted.append(victim)

    while len(running) > max_running:
        preempt_last()
    decodes = reserve_decode_blocks(running, bm, preempt_last)
    admitted = [] if preempted else select_admissions(queue, bm, block_size,
                                                      max_running - len(running))
    running.extend(admitted)
    return {"running": running, "decodes": decodes, "admitted": admitted, "preempted": preempted}


def continuous_batch_step(engine: LLMEngine, now_s: float = 0.0) -> StepOutput:
    """One iteration: admit and preempt (the engine's scheduler), run the batch's prefills and
    decodes in one forward pass, append each sampled token and retire finished sequences."""
    return engine.step(now_s)


def run_continuous_batching(params: dict, requests, config: dict | None = None, *,
                            max_steps: int | None = None) -> list[dict]:
    """Generate every request with continuous batching; returns [{"request_id", "output_ids",
    "finish_reason", "preemptions"}] in request order, and every KV block is free at the end.

    requests: dicts from `make_request` (an optional "priority" key is honoured) or Sequences.
    config: temperature / top_k / top_p / greedy, rng (default: seeded with 0), eos_token_id
    (default: none, run to length), block_size (16), num_kv_blocks (default: enough for every
    request at its longest), max_num_seqs (32), max_num_batched_tokens (2048), chunked_prefill
    (False), queue ("fcfs" or "priority"). A request that can never fit raises ValueError before
    anything runs; `max_steps` reached with requests unfinished raises RuntimeError.
    """
    config = dict(config or {})
    unknown = sorted(set(config) - set(RUN_KEYS))
    if unknown:
        raise ValueError(f"run_continuous_batching: unknown config key(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(RUN_KEYS)}")
    p = normalize_params(params)
    seqs = [_as_sequence(r, config) for r in requests]
    live = [s for s in seqs if s is not None]
    block_size = config.get("block_size", DEFAULT_BLOCK_SIZE)
    num_blocks = config.get("num_kv_blocks") or max(1, sum(
        peak_blocks(s, block_size) for s in live))
    bm = BlockManager(num_blocks, block_size)
    max_num_seqs = config.get("max_num_seqs", 32)
    scheduler = Scheduler(SchedulerConfig(
        policy="continuous", queue=config.get("queue", "fcfs"), max_num_seqs=max_num_seqs,
        max_num_batched_tokens=config.get("max_num_batched_tokens", max(2048, max_num_seqs)),
        chunked_prefill=config.get("chunked_prefill", False), max_seq_len=p["max_seq_len"]), bm)
    for seq in live:
        if not scheduler.add(seq):
            raise ValueError(f"request {seq.request_id}: {seq.reject_reason}")
    rng = config.get("rng")
    engine = LLMEngine(scheduler, NumpyExecutor(p, bm, rng=np.random.default_rng(0) if rng is None else rng))
    steps = 0
    while engine.has_unfinished():
        if max_steps is not None and steps >= max_steps:
            left = engine.unfinished_sequences()
            for seq in left:
                bm.free_sequence(seq.seq_id)
            raise RuntimeError(f"run_continuous_batching: {len(left)} requests unfinished "
                               f"after max_steps={max_steps}")
        continuous_batch_step(engine)
        steps += 1
    assert bm.num_used == 0, "a finished run must leave every block free"
    return [_result(r, s) for r, s in zip(requests, seqs)]


def _as_sequence(request, config: dict) -> Sequence | None:
    if isinstance(request, Sequence):
        return request
    if request["max_new_tokens"] == 0:
        return None
    base = {k: config[k] for k in SAMPLING_KEYS if k in config}
    eos = config.get("eos_token_id")
    return Sequence(request["request_id"], len(request["prompt_token_ids"]),
                    request["max_new_tokens"], prompt_token_ids=list(request["prompt_token_ids"]),
                    priority=request.get("priority", 0),
                    sampling=sampling_params_from({**base, **(request.get("sampling_params") or {})}),
                    ignore_eos=eos is None, eos_token_id=eos)


def _result(request, seq: Sequence | None) -> dict:
    rid = request.request_id if isinstance(request, Sequence) else request["request_id"]
    if seq is None:
        return {"request_id": rid, "output_ids": [], "finish_reason": "length", "preemptions": 0}
    return {"request_id": rid, "output_ids": [int(t) for t in seq.output_token_ids],
            "finish_reason": seq.finish_reason, "preemptions": seq.preemptions}
