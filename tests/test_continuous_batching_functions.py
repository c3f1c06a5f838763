"""The engine's part 6 functions: capacity, admission, preemption, one scheduling decision, and
continuous batching end to end."""

import numpy as np
import pytest

from engine.block_manager import BlockManager
from engine.continuous_batching import (continuous_batch_step, has_free_capacity,
                                        preempt_sequence, priority_queue_pop, priority_queue_push,
                                        run_continuous_batching, schedule_step, select_admissions)
from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.paged_kv_cache import init_block_allocator
from engine.queues import FcfsQueue, PriorityQueue
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence, SequenceStatus
from engine.sequences import make_request


def fcfs(*seqs):
    q = FcfsQueue()
    for s in seqs:
        q.push(s)
    return q


def test_has_free_capacity_accepts_a_block_manager_or_a_paged_allocator():
    bm = BlockManager(4, 2)
    bm.allocate_block(0)
    assert has_free_capacity(bm, 3) and not has_free_capacity(bm, 4)
    alloc = init_block_allocator(4, 2, 8)
    assert has_free_capacity(alloc, 4) and not has_free_capacity(alloc, 5)


def test_select_admissions_takes_queue_order_until_the_first_misfit():
    bm = BlockManager(5, 4)
    a, big, small = Sequence("a", 8, 1), Sequence("big", 16, 1), Sequence("small", 1, 1)
    waiting = fcfs(a, big, small)
    assert select_admissions(waiting, bm, 4, max_admit=3) == [a]  # big needs 4 of 3 left
    assert list(waiting) == [big, small] and a.status is SequenceStatus.RUNNING
    assert len(bm.block_tables[a.seq_id]) == 2


def test_select_admissions_stops_at_max_admit_and_reads_a_heap():
    heap = []
    seqs = [Sequence(f"p{i}", 2, 1, priority=p) for i, p in enumerate([3, 1, 2])]
    for s in seqs:
        priority_queue_push(heap, s.priority, s)
    admitted = select_admissions(heap, BlockManager(8, 2), 2, max_admit=2)
    assert [s.request_id for s in admitted] == ["p1", "p2"]
    assert priority_queue_pop(heap) is seqs[0] and priority_queue_pop(heap) is None


def test_select_admissions_refuses_a_block_size_that_is_not_the_caches():
    with pytest.raises(ValueError, match="block_size"):
        select_admissions(fcfs(Sequence("a", 2, 1)), BlockManager(4, 2), 4, 1)


def test_preempt_sequence_frees_blocks_and_requeues_at_its_priority():
    bm, heap = BlockManager(4, 2), []
    victim = Sequence("victim", 3, 4, priority=1)
    select_admissions(fcfs(victim), bm, 2, 1)
    victim.num_computed_tokens = 3
    priority_queue_push(heap, 2, Sequence("later", 2, 1, priority=2))
    preempt_sequence(victim, bm, heap)
    assert bm.num_used == 0 and victim.num_computed_tokens == 0 and victim.preemptions == 1
    assert victim.status is SequenceStatus.PREEMPTED and priority_queue_pop(heap) is victim


def test_schedule_step_preempts_the_most_recent_then_admits():
    bm = BlockManager(3, 2)
    a, b, c = Sequence("a", 2, 3), Sequence("b", 2, 3), Sequence("c", 2, 3)
    running = select_admissions(fcfs(a, b), bm, 2, 2)
    for s in running:  # each prefilled its 2 tokens and sampled one: the next needs a new block
        s.num_computed_tokens, s.num_output_tokens = 2, 1
    waiting = fcfs(c)
    out = schedule_step(waiting, running, bm, 2, max_running=2)
    # a takes the last free block; b then needs one, is the last admitted, and preempts itself
    assert out["decodes"] == [a] and out["preempted"] == [b] and out["admitted"] == []
    assert list(waiting) == [b, c] and running == [a]
    out = schedule_step(waiting, running, bm, 2, max_running=1)
    assert out["admitted"] == [] and running == [a]  # no free slot


def test_schedule_step_admits_nothing_in_a_step_that_preempted():
    # a priority queue's head is not the victim and fits the block the victim let go
    bm = BlockManager(3, 2)
    a = Sequence("a", 2, 3, priority=0)
    b = Sequence("b", 2, 3, priority=1)
    running = select_admissions(fcfs(a, b), bm, 2, 3)
    for s in running:  # each prefilled its 2 tokens and sampled one: the next needs a new block
        s.num_computed_tokens, s.num_output_tokens = 2, 1
    waiting = PriorityQueue()
    waiting.push(Sequence("c", 1, 3, priority=0, arrival_s=1.0))
    out = schedule_step(waiting, running, bm, 2, max_running=3)
    assert out["preempted"] == [b] and out["admitted"] == [] and bm.num_free == 1
    out = schedule_step(waiting, running, bm, 2, max_running=3)
    assert [s.request_id for s in out["admitted"]] == ["c"]


def test_schedule_step_preempts_the_most_recently_admitted_while_over_max_running():
    bm = BlockManager(8, 2)
    a, b, c = Sequence("a", 2, 3), Sequence("b", 2, 3), Sequence("c", 2, 3)
    running = select_admissions(fcfs(a, b, c), bm, 2, 3)
    waiting = fcfs()
    out = schedule_step(waiting, running, bm, 2, max_running=1)
    assert out["preempted"] == [c, b] and running == [a]
    assert list(waiting) == [b, c]  # requeued in front, oldest first
    assert bm.block_tables.keys() == {a.seq_id}


def test_continuous_batch_step_admits_while_others_decode(tiny_params):
    bm = BlockManager(32, 4)
    engine = LLMEngine(Scheduler(SchedulerConfig(max_num_seqs=4, max_seq_len=256), bm),
                       NumpyExecutor(tiny_params, bm, rng=np.random.default_rng(0)))
    engine.add_request(Sequence("a", 3, 4, prompt_token_ids=[1, 2, 3]))
    continuous_batch_step(engine)
    engine.add_request(Sequence("b", 2, 2, prompt_token_ids=[4, 5]))
    out = continuous_batch_step(engine)
    assert [s.request_id for s in out.plan.decodes] == ["a"]
    assert [s.request_id for s, _ in out.plan.prefills] == ["b"]
    assert set(out.tokens) == {s.seq_id for s in engine.scheduler.running}


def test_run_continuous_batching_returns_every_request_and_frees_the_cache(tiny_params):
    reqs = [make_request("x", [1, 2, 3], 4, {"greedy": True}), make_request("empty", [5], 0),
            make_request("y", [4], 2)]
    out = run_continuous_batching(tiny_params, reqs, {"rng": np.random.default_rng(1)})
    assert [r["request_id"] for r in out] == ["x", "empty", "y"]
    assert [len(r["output_ids"]) for r in out] == [4, 0, 2]
    assert {r["finish_reason"] for r in out} == {"length"}


def test_run_continuous_batching_rejects_bad_input_before_running(tiny_params):
    with pytest.raises(ValueError, match="unknown config key"):
        run_continuous_batching(tiny_params, [], {"batch": 3})
    with pytest.raises(ValueError, match="max_seq_len"):
        run_continuous_batching(tiny_params, [make_request("long", [1] * 250, 10)])
    with pytest.raises(RuntimeError, match="max_steps"):
        run_continuous_batching(tiny_params, [make_request("a", [1], 5)], max_steps=2)
