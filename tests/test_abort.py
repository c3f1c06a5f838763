"""`Scheduler.abort` / `LLMEngine.abort_request`: a request cancelled between steps leaves the
queue or the running list, its KV blocks (and host swap blocks) are freed, and the others go on."""

from __future__ import annotations

import pytest

from engine.block_manager import BlockManager
from engine.llm_engine import LLMEngine
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence, SequenceStatus
from engine.swap import SwapSpace


def make(**config) -> Scheduler:
    return Scheduler(SchedulerConfig(max_seq_len=256, **config), BlockManager(32, 4),
                     SwapSpace(32) if config.get("preemption") == "swap" else None)


def seq(request_id: str, prompt: int = 10, out: int = 20) -> Sequence:
    return Sequence(request_id, prompt, out)


def test_abort_running_frees_its_blocks_and_the_rest_run_on():
    scheduler = make()
    a, b = seq("a"), seq("b")
    scheduler.add(a)
    scheduler.add(b)
    scheduler.postprocess(scheduler.schedule())
    used = scheduler.block_manager.num_used
    scheduler.abort(a)
    assert a.status is SequenceStatus.ABORTED and a.finish_reason == "abort" and a.is_finished
    assert scheduler.running == [b]
    assert scheduler.block_manager.num_used == used - 3  # a's 10 prompt tokens: 3 blocks of 4
    while scheduler.has_unfinished():
        scheduler.postprocess(scheduler.schedule())
    assert b.finish_reason == "length" and scheduler.block_manager.num_used == 0


def test_abort_waiting_leaves_the_queue():
    scheduler = make(max_num_seqs=1)
    a, b = seq("a"), seq("b")
    scheduler.add(a)
    scheduler.add(b)
    scheduler.postprocess(scheduler.schedule())
    scheduler.abort(b)
    assert list(scheduler.waiting) == [] and b.status is SequenceStatus.ABORTED


def test_abort_swapped_out_releases_its_host_blocks():
    scheduler = make(preemption="swap")
    a = seq("a")
    scheduler.add(a)
    plan = scheduler.schedule()
    scheduler.postprocess(plan)
    scheduler._preempt_last(plan)  # swap it out as a block shortage would
    assert a.status is SequenceStatus.SWAPPED and scheduler.swap.num_free < 32
    scheduler.abort(a)
    assert scheduler.swap.num_free == 32 and not scheduler.has_unfinished()
    scheduler.swap.check_invariants()


def test_only_a_queued_or_running_request_can_be_aborted():
    scheduler = make()
    engine = LLMEngine(scheduler, executor=None)
    done = seq("done", out=1)
    engine.add_request(done)
    scheduler.postprocess(scheduler.schedule())
    assert done.is_finished
    with pytest.raises(ValueError, match="only a queued or running sequence"):
        engine.abort_request(done)
    with pytest.raises(ValueError, match="only a queued or running sequence"):
        engine.abort_request(seq("never-added"))
