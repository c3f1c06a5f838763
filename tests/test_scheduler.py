"""The scheduling policies, step by step, with a fake executor (no model)."""

import pytest

from engine.block_manager import BlockManager
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence, SequenceStatus


def seq(rid, prompt, out, *, priority=0, arrival_s=0.0):
    return Sequence(rid, prompt, out, priority=priority, arrival_s=arrival_s)


def make(num_blocks=64, block_size=4, **config):
    bm = BlockManager(num_blocks, block_size)
    config.setdefault("max_num_seqs", 8)
    return Scheduler(SchedulerConfig(**config), bm), bm


def step(scheduler, executor, now_s=0.0):
    plan = scheduler.schedule(now_s)
    if plan.is_empty:
        return plan, []
    result = executor.execute(plan)
    finished = scheduler.postprocess(plan, result.tokens)
    scheduler.block_manager.check_invariants()
    return plan, finished


def run(scheduler, executor, max_steps=10_000):
    plans = []
    while scheduler.has_unfinished():
        assert len(plans) < max_steps, "the run did not finish"
        plan, _ = step(scheduler, executor)
        plans.append(plan)
    return plans


# --- continuous batching -------------------------------------------------------------------------


def test_budget_and_max_num_seqs_are_never_exceeded(fake_executor):
    sched, bm = make(num_blocks=200, max_num_seqs=4, max_num_batched_tokens=24,
                     chunked_prefill=True)
    for i in range(12):
        sched.add(seq(f"r{i}", 5 + 7 * (i % 4), 3 + i % 5))
    plans = run(sched, fake_executor(bm))
    assert max(p.num_prefill_tokens + len(p.decodes) for p in plans) == 24  # budget is filled
    assert all(p.num_prefill_tokens + len(p.decodes) <= 24 for p in plans)
    assert all(p.num_running <= 4 for p in plans)
    assert max(p.num_running for p in plans) == 4


def test_new_prefill_runs_in_the_same_step_as_decodes(fake_executor):
    sched, bm = make()
    ex = fake_executor(bm)
    sched.add(seq("a", 4, 5))
    step(sched, ex)
    sched.add(seq("b", 6, 2))
    plan, _ = step(sched, ex)
    assert [s.request_id for s in plan.decodes] == ["a"]
    assert [(s.request_id, n) for s, n in plan.prefills] == [("b", 6)]


def test_fcfs_admits_in_arrival_order(fake_executor):
    sched, bm = make(max_num_seqs=2)
    for i in range(5):
        sched.add(seq(f"r{i}", 3, 2))
    plans = run(sched, fake_executor(bm))
    assert [s.request_id for p in plans for s, _ in p.prefills] == ["r0", "r1", "r2", "r3", "r4"]


def test_priority_admits_lower_value_first_and_ties_in_arrival_order(fake_executor):
    sched, bm = make(max_num_seqs=1, queue="priority")
    for rid, priority in [("low", 5), ("high-1", 0), ("mid", 2), ("high-2", 0)]:
        sched.add(seq(rid, 3, 1, priority=priority))
    plans = run(sched, fake_executor(bm))
    assert [s.request_id for p in plans for s, _ in p.prefills] == ["high-1", "high-2", "mid", "low"]


def test_head_of_line_blocks_smaller_requests_behind_it(fake_executor):
    sched, bm = make(num_blocks=6, block_size=4)
    ex = fake_executor(bm)
    sched.add(seq("a", 12, 4))  # 3 blocks
    step(sched, ex)
    sched.add(seq("big", 16, 1))  # 4 blocks: does not fit in the 3 free
    sched.add(seq("small", 2, 1))  # 1 block: would fit, but waits behind "big"
    plan, _ = step(sched, ex)
    assert plan.prefills == [] and [s.request_id for s in sched.waiting] == ["big", "small"]


def test_prompt_waits_for_budget_without_chunked_prefill(fake_executor):
    sched, bm = make(max_num_batched_tokens=10)
    ex = fake_executor(bm)
    sched.add(seq("a", 6, 3))
    sched.add(seq("b", 6, 3))
    plan, _ = step(sched, ex)
    assert [(s.request_id, n) for s, n in plan.prefills] == [("a", 6)]  # b's 6 > 4 left
    plan, _ = step(sched, ex)
    assert [(s.request_id, n) for s, n in plan.prefills] == [("b", 6)]


def test_chunked_prefill_splits_a_long_prompt_to_fill_the_budget(fake_executor):
    sched, bm = make(max_num_batched_tokens=32, chunked_prefill=True)
    ex = fake_executor(bm)
    sched.add(seq("long", 100, 2))
    chunks = []
    for _ in range(4):
        plan, _ = step(sched, ex)
        chunks += [n for _, n in plan.prefills]
        first_token_step = sched.running[0].first_token_step
    assert chunks == [32, 32, 32, 4]
    assert first_token_step == 3  # sampled at the end of the last chunk only


def test_chunked_prefill_shares_the_budget_with_decodes(fake_executor):
    sched, bm = make(max_num_batched_tokens=16, chunked_prefill=True)
    ex = fake_executor(bm)
    sched.add(seq("a", 3, 10))
    step(sched, ex)
    sched.add(seq("long", 40, 1))
    plan, _ = step(sched, ex)
    assert len(plan.decodes) == 1 and [n for _, n in plan.prefills] == [15]


def test_chunked_prefill_takes_its_blocks_chunk_by_chunk(fake_executor):
    # as vLLM v1 allocates them: a 100-token prompt in chunks of 32 holds 8, 16, 24, then 25
    # blocks of 4
    sched, bm = make(max_num_batched_tokens=32, chunked_prefill=True)
    ex = fake_executor(bm)
    sched.add(seq("long", 100, 2))
    held = []
    for _ in range(4):
        step(sched, ex)
        held.append(len(bm.block_tables[sched.running[0].seq_id]))
    assert held == [8, 16, 24, 25]


def test_a_prompt_is_admitted_when_its_first_chunk_fits(fake_executor):
    # 16 blocks of 4; "a" holds 5, so the 48-token prompt (12 blocks) does not fit whole, but
    # its first chunk of 15 tokens (4 blocks) does, and it starts beside a's decode
    sched, bm = make(num_blocks=16, block_size=4, max_num_batched_tokens=16,
                     chunked_prefill=True)
    ex = fake_executor(bm)
    sched.add(seq("a", 16, 30))
    step(sched, ex)
    step(sched, ex)  # a's first decode takes its 5th block
    sched.add(seq("long", 48, 1))
    plan, _ = step(sched, ex)
    assert [(s.request_id, n) for s, n in plan.prefills] == [("long", 15)]
    assert bm.num_free == 16 - 5 - 4


def test_a_prefills_chunk_preempts_the_last_running_and_unplans_its_decode(fake_executor):
    # priority: "long" (priority 0) runs ahead of "b" (1), admitted before it. long's last
    # chunk needs 2 blocks with 1 free: b, planned to decode in the step, is preempted instead
    sched, bm = make(num_blocks=12, block_size=4, queue="priority", max_num_batched_tokens=16,
                     chunked_prefill=True)
    ex = fake_executor(bm)
    sched.add(seq("b", 8, 30, priority=1))
    step(sched, ex)
    sched.add(seq("long", 40, 2, priority=0, arrival_s=1.0))
    plan, _ = step(sched, ex)  # b's decode takes its 3rd block; long's first 15 tokens, 4
    assert [(s.request_id, n) for s, n in plan.prefills] == [("long", 15)]
    plan, _ = step(sched, ex)  # long's next 15 tokens: 4 blocks more, 1 left free
    assert bm.num_free == 1 and [s.request_id for s in sched.running] == ["long", "b"]
    plan, _ = step(sched, ex)
    assert [s.request_id for s in plan.preempted] == ["b"]
    assert plan.decodes == [] and [(s.request_id, n) for s, n in plan.prefills] == [("long", 10)]
    assert len(bm.block_tables[sched.running[0].seq_id]) == 10
    while sched.has_unfinished():  # b is readmitted and finishes: nothing leaks
        step(sched, ex)
    assert bm.num_free == 12


def test_a_prefill_with_no_victim_behind_it_preempts_itself(fake_executor):
    # two prompts of 24 tokens share 10 blocks of 4 in chunks of 8: the second's third chunk
    # finds none free and, last in the running list, preempts itself; both finish
    sched, bm = make(num_blocks=10, block_size=4, max_num_batched_tokens=8, chunked_prefill=True,
                     max_num_seqs=2)
    ex = fake_executor(bm)
    sched.add(seq("a", 24, 4))
    sched.add(seq("b", 20, 4))
    plans = run(sched, ex)
    preempted = [s.request_id for p in plans for s in p.preempted]
    assert preempted and set(preempted) == {"b"}
    assert bm.num_free == 10


def test_fcfs_preempts_the_most_recently_admitted(fake_executor):
    # 4 blocks of 4 tokens; three 4-token prompts hold 3; the first decode takes the 4th block,
    # the next decode finds none free and preempts "c", the last admitted.
    sched, bm = make(num_blocks=4, block_size=4)
    ex = fake_executor(bm)
    for rid in "abc":
        sched.add(seq(rid, 4, 6))
    step(sched, ex)
    plan, _ = step(sched, ex)
    assert [s.request_id for s in plan.preempted] == ["c"]
    assert [s.request_id for s in plan.decodes] == ["a", "b"]
    c = plan.preempted[0]
    assert c.status is SequenceStatus.PREEMPTED and c.num_computed_tokens == 0
    assert c.preemptions == 1 and sched.num_preemptions == 1
    assert sched.waiting.peek() is c


def test_own_block_keys_on_an_engine_without_prefix_caching_are_ignored(fake_executor):
    # in a cluster where another pool caches prefixes, every simulated request carries block
    # keys; a replica that does not cache preempts such a request as any other
    sched, bm = make(num_blocks=4, block_size=4)
    ex = fake_executor(bm)
    for i in range(3):
        sched.add(Sequence(f"r{i}", 4, 6, block_hashes=range(-10 * i - 1, -10 * i - 4, -1)))
    plans = run(sched, ex)
    assert sum(len(plan.preempted) for plan in plans) >= 1
    assert bm.num_free == 4


def test_priority_preempts_the_lowest_priority_latest_arrival(fake_executor):
    sched, bm = make(num_blocks=4, block_size=4, queue="priority")
    ex = fake_executor(bm)
    sched.add(seq("p1-early", 4, 6, priority=1, arrival_s=0.0))
    sched.add(seq("p1-late", 4, 6, priority=1, arrival_s=1.0))
    sched.add(seq("p0", 4, 6, priority=0, arrival_s=2.0))
    step(sched, ex)
    assert [s.request_id for s in sched.running] == ["p0", "p1-early", "p1-late"]
    plan, _ = step(sched, ex)
    assert [s.request_id for s in plan.preempted] == ["p1-late"]


def test_a_step_that_preempts_admits_nothing_from_the_queue(fake_executor):
    # as vLLM v1: with a priority queue the head is not the victim and would fit in the blocks
    # the victim let go, but it waits for the next step
    sched, bm = make(num_blocks=6, block_size=4, queue="priority", max_num_batched_tokens=64)
    ex = fake_executor(bm)
    assert sched.add(seq("urgent", 8, 12, priority=0)) and sched.add(seq("batch", 12, 4,
                                                                         priority=1))
    step(sched, ex)  # both prefill: 5 of 6 blocks held
    assert sched.add(seq("newcomer", 3, 5, priority=0, arrival_s=1.0))
    plan, _ = step(sched, ex)  # "urgent" needs a block: "batch" is preempted
    assert [s.request_id for s in plan.preempted] == ["batch"]
    assert not plan.prefills and bm.num_free >= 1
    plan, _ = step(sched, ex)
    assert [s.request_id for s, _ in plan.prefills] == ["newcomer"]


def test_a_sequence_with_no_victim_behind_it_preempts_itself(fake_executor):
    sched, bm = make(num_blocks=2, block_size=4)
    ex = fake_executor(bm)
    assert sched.add(seq("a", 4, 5)) and sched.add(seq("b", 4, 5))
    step(sched, ex)
    plan, _ = step(sched, ex)  # a needs a block: preempts b, the last admitted
    assert [s.request_id for s in plan.preempted] == ["b"]
    assert [s.request_id for s in plan.decodes] == ["a"]
    sched, bm = make(num_blocks=3, block_size=4, queue="priority")
    ex = fake_executor(bm)
    assert sched.add(seq("low", 4, 5, priority=1)) and sched.add(seq("high", 6, 3))
    step(sched, ex)  # all 3 blocks held: "high" 2 (room for 8 tokens), "low" 1
    assert [s.request_id for s in sched.running] == ["high", "low"]
    plan, _ = step(sched, ex)  # only "low" needs a block, and it is the last: it preempts itself
    assert [s.request_id for s in plan.preempted] == ["low"]
    assert [s.request_id for s in plan.decodes] == ["high"]


def test_recompute_prefills_prompt_and_generated_tokens_then_continues(fake_executor):
    sched, bm = make(num_blocks=4, block_size=4)
    ex = fake_executor(bm)
    for rid in "abc":
        sched.add(seq(rid, 4, 6))
    step(sched, ex)
    plan, _ = step(sched, ex)
    victim = plan.preempted[0]
    out_before = list(victim.output_token_ids)
    plans = run(sched, ex)
    recompute = next((s, n) for p in plans for s, n in p.prefills if s is victim)
    assert recompute[1] == 4 + len(out_before)
    assert victim.output_token_ids[: len(out_before)] == out_before
    assert victim.status is SequenceStatus.FINISHED and victim.num_output_tokens == 6
    assert bm.num_used == 0


def test_requests_that_can_never_fit_are_rejected_with_a_reason(fake_executor):
    sched, bm = make(num_blocks=8, block_size=4, max_seq_len=40, max_num_batched_tokens=16)
    too_long = seq("too-long", 30, 20)
    too_big = seq("too-big", 15, 19)  # 33 KV rows = 9 blocks > 8
    over_budget = seq("over-budget", 17, 1)
    ok = seq("ok", 8, 5)
    assert [sched.add(s) for s in (too_long, too_big, over_budget, ok)] == [False] * 3 + [True]
    assert "max_seq_len" in too_long.reject_reason
    assert "9 KV blocks" in too_big.reject_reason
    assert "max_num_batched_tokens" in over_budget.reject_reason
    assert too_big.status is SequenceStatus.REJECTED
    run(sched, fake_executor(bm))
    assert ok.status is SequenceStatus.FINISHED


def test_a_request_that_exactly_fills_the_cache_runs(fake_executor):
    sched, bm = make(num_blocks=4, block_size=4)
    s = seq("exact", 10, 7)  # 16 KV rows (the last sampled token's KV is never stored)
    assert sched.add(s)
    run(sched, fake_executor(bm))
    assert s.num_output_tokens == 7 and bm.num_used == 0


def test_adding_a_sequence_twice_is_refused():
    sched, _ = make()
    s = seq("a", 3, 1)
    sched.add(s)
    sched.schedule()
    with pytest.raises(ValueError, match="only a new sequence"):
        sched.add(s)


# --- static batching -----------------------------------------------------------------------------


def test_static_batches_decode_in_lockstep_with_padding(fake_executor):
    sched, bm = make(policy="static", max_batch_size=3)
    for rid, out in [("a", 1), ("b", 3), ("c", 4), ("d", 2)]:
        sched.add(seq(rid, 3, out))
    plans = run(sched, fake_executor(bm))
    shape = [([s.request_id for s, _ in p.prefills], [s.request_id for s in p.decodes],
              p.padding_seqs) for p in plans]
    assert shape == [
        (["a", "b", "c"], [], 0),  # prefill samples each first token; "a" is done
        ([], ["b", "c"], 1),
        ([], ["b", "c"], 1),  # "b" done
        ([], ["c"], 2),  # "c" done: the batch is over
        (["d"], [], 0),
        ([], ["d"], 0),
    ]


def test_static_batch_timeout_waits_for_a_full_batch():
    sched, _ = make(policy="static", max_batch_size=2, batch_timeout_s=0.5)
    sched.add(seq("a", 3, 1, arrival_s=1.0))
    plan = sched.schedule(now_s=1.2)
    assert plan.is_empty and plan.idle_until_s == pytest.approx(1.5)
    assert [s.request_id for s, _ in sched.schedule(now_s=1.5).prefills] == ["a"]
    sched2, _ = make(policy="static", max_batch_size=2, batch_timeout_s=0.5)
    sched2.add(seq("a", 3, 1, arrival_s=1.0))
    sched2.add(seq("b", 3, 1, arrival_s=1.1))
    assert len(sched2.schedule(now_s=1.1).prefills) == 2  # full: no waiting


def test_simulation_without_token_ids_counts_tokens(fake_executor):
    sched, bm = make()
    ex = fake_executor(bm, with_tokens=False)
    s = seq("a", 5, 4)
    sched.add(s)
    run(sched, ex)
    assert s.num_output_tokens == 4 and s.output_token_ids == [] and s.finish_reason == "length"


def test_config_rejects_bad_values_naming_the_field():
    with pytest.raises(ValueError, match="scheduler.enable_mixed_chunk must be true or false"):
        SchedulerConfig(enable_mixed_chunk="no")
    with pytest.raises(ValueError, match="scheduler.batch_wait_max_tokens_ratio: .*set "
                                         "enable_mixed_chunk = true, or"):
        SchedulerConfig(enable_mixed_chunk=False, batch_wait_max_tokens_ratio=0.5)
    with pytest.raises(ValueError, match="scheduler.policy"):
        SchedulerConfig(policy="round-robin")
    with pytest.raises(ValueError, match="scheduler.queue"):
        SchedulerConfig(queue="lifo")
    with pytest.raises(ValueError, match="max_num_seqs"):
        SchedulerConfig(max_num_seqs=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=32)
    with pytest.raises(ValueError, match="batch_timeout_s"):
        SchedulerConfig(batch_timeout_s=-1)
