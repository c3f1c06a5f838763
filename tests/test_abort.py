"""`Scheduler.abort` / `LLMEngine.abort_request`: a request cancelled between steps leaves the
queue or the running list, its KV blocks (and host swap blocks) are freed, and the others go on.
A sequence whose sampling fails inside a step is aborted the same way (`LLMEngine.step`)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import SamplingParams, Sequence, SequenceStatus
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
    scheduler.preempt_last(plan)  # swap it out as a block shortage would
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


# --- a sequence whose sampling fails -------------------------------------------------------------


def real_engine(params: dict, recorder=None) -> LLMEngine:
    bm = BlockManager(32, 4)
    scheduler = Scheduler(SchedulerConfig(max_seq_len=64), bm)
    return LLMEngine(scheduler, NumpyExecutor(params, bm, rng=np.random.default_rng(0)),
                     recorder)


def sampled(request_id: str) -> Sequence:
    return Sequence(request_id, 6, 5, prompt_token_ids=[1, 2, 3, 4, 5, 6],
                    sampling=SamplingParams(temperature=1.0))


class BrokenGenerator:
    """A request's generator that is not one: its sampling raises TypeError."""


def test_a_sequence_whose_sampling_fails_is_aborted_and_the_step_stands_for_the_rest(
        tiny_params):
    engine = real_engine(tiny_params)
    good, bad, late = sampled("good"), sampled("bad"), sampled("late")
    bad.generator = BrokenGenerator()
    for seq_ in (good, bad, late):
        engine.add_request(seq_)
    out = engine.step()
    assert set(out.failed) == {bad.seq_id} and isinstance(out.failed[bad.seq_id], TypeError)
    assert set(out.tokens) == {good.seq_id, late.seq_id}
    assert bad.status is SequenceStatus.ABORTED and bad.finish_reason == "error"
    assert bad not in engine.scheduler.running
    late.generator = BrokenGenerator()  # fails at a decode step this time
    out = engine.step()
    assert set(out.failed) == {late.seq_id} and late.finish_reason == "error"
    while engine.has_unfinished():
        assert not engine.step().failed
    assert good.finish_reason == "length" and len(good.output_token_ids) == 5
    assert engine.scheduler.block_manager.num_used == 0
    engine.scheduler.block_manager.check_invariants()


def test_a_step_whose_every_sequence_failed_still_ran(tiny_params):
    engine = real_engine(tiny_params)
    bad = sampled("bad")
    bad.generator = BrokenGenerator()
    engine.add_request(bad)
    out = engine.step()
    assert out.plan.is_empty and out.ran and set(out.failed) == {bad.seq_id}
    assert not engine.has_unfinished() and engine.scheduler.block_manager.num_used == 0


def test_a_recorded_run_raises_on_a_sampling_failure_rather_than_lose_the_request(tiny_params):
    engine = real_engine(tiny_params, RunRecorder(32))
    bad = sampled("bad")
    bad.generator = BrokenGenerator()
    engine.add_request(bad)
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        engine.step()
