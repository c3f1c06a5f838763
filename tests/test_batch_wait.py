"""TensorRT-LLM's batch waiting (`scheduler.batch_wait_timeout_iters`,
`batch_wait_max_tokens_ratio`): while sequences decode, new prefills are held back until they and
the decodes fill the given share of the step's token budget or the given number of steps have
held them; an engine with nothing decoding never holds. A simulation fast-forwarded holds
exactly as step by step."""

from __future__ import annotations

import pytest

import scenarios
from engine.block_manager import BlockManager
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from helpers.runs import records
from scenarios import ScenarioError
from sim.runner import run_config


def make(iters=3, ratio=0.5, budget=64, queue="fcfs"):
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=budget, queue=queue,
                             batch_wait_timeout_iters=iters, batch_wait_max_tokens_ratio=ratio)
    return Scheduler(config, BlockManager(256, 4))


def advance(scheduler, plan):
    scheduler.postprocess(plan)


def decoding(scheduler):
    """Start one sequence and take it into decoding (an idle engine never holds)."""
    scheduler.add(Sequence("a", 8, 100))
    plan = scheduler.schedule()
    assert [n for _, n in plan.prefills] == [8]
    advance(scheduler, plan)


@pytest.mark.parametrize("queue", ["fcfs", "priority"])
def test_prefills_wait_a_few_steps_while_sequences_decode(queue):
    scheduler = make(queue=queue)
    decoding(scheduler)
    scheduler.add(Sequence("b", 10, 5))
    held, prefilled = [], []
    for _ in range(5):
        plan = scheduler.schedule()
        held.append(scheduler.batch_wait.holding)
        prefilled.append([n for _, n in plan.prefills])
        assert plan.decodes[0].request_id == "a"
        advance(scheduler, plan)
    assert held == [True, True, True, False, False]  # three steps held, then admitted
    assert prefilled == [[], [], [], [10], []]


def test_enough_waiting_tokens_end_the_wait_at_once():
    scheduler = make(iters=20, ratio=0.5)
    decoding(scheduler)
    scheduler.add(Sequence("b", 20, 5))
    plan = scheduler.schedule()
    assert not plan.prefills and scheduler.batch_wait.holding  # 20 + 1 < 32
    advance(scheduler, plan)
    scheduler.add(Sequence("c", 12, 5))
    plan = scheduler.schedule()
    assert [n for _, n in plan.prefills] == [20, 12]  # 33 >= 32
    assert not scheduler.batch_wait.holding and scheduler.batch_wait.waited == 0


def test_without_batch_waiting_prefills_join_the_next_step():
    scheduler = make(iters=0, ratio=0.9)
    decoding(scheduler)
    scheduler.add(Sequence("b", 10, 5))
    assert [n for _, n in scheduler.schedule().prefills] == [10]


def test_bad_batch_wait_values_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="scheduler.batch_wait_timeout_iters must be an "
                                         "integer >= 0, got -1"):
        SchedulerConfig(batch_wait_timeout_iters=-1)
    with pytest.raises(ValueError, match="scheduler.batch_wait_max_tokens_ratio must be a "
                                         "number from 0 to 1, got 1.5"):
        SchedulerConfig(batch_wait_max_tokens_ratio=1.5)
    with pytest.raises(ValueError, match="static batching waits by scheduler.batch_timeout_s"):
        SchedulerConfig(policy="static", batch_wait_timeout_iters=4)


SCENARIO = """
[model]
name = "meta-llama/Llama-3.1-8B"
max_seq_len = 4096
[hardware]
gpu = "h100-sxm"
kernels = "roofline"
[cost]
model = "hardware"
[engine]
max_num_seqs = 64
max_num_batched_tokens = 4096
[scheduler]
{scheduler}
[workload]
num_requests = 200
arrival = {{ process = "poisson", rate = 30.0 }}
prompt_tokens = {{ dist = "uniform", low = 200, high = 1200 }}
output_tokens = {{ dist = "uniform", low = 50, high = 300 }}
"""


def load(tmp_path, scheduler):
    path = tmp_path / "s.toml"
    path.write_text(SCENARIO.format(scheduler=scheduler))
    return scenarios.load(path).base


def test_a_held_run_fast_forwarded_is_the_run_step_by_step_and_waits_longer(tmp_path):
    config = load(tmp_path, "batch_wait_timeout_iters = 20\nbatch_wait_max_tokens_ratio = 0.9")
    fast, slow = run_config(config), run_config(config, fast_forward=False)
    assert records(fast) == records(slow)
    plain = run_config(load(tmp_path, ""))
    columns, plain_columns = fast.request_columns(), plain.request_columns()
    ttft = sum(f - a for f, a in zip(columns["first_token_s"], columns["arrival_s"]))
    plain_ttft = sum(f - a for f, a in zip(plain_columns["first_token_s"],
                                           plain_columns["arrival_s"]))
    assert ttft > 1.5 * plain_ttft  # prefills held back behind the decodes


def test_a_bad_batch_wait_key_is_one_line(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load(tmp_path, "batch_wait_max_tokens_ratio = 2")
    assert "scheduler.batch_wait_max_tokens_ratio: must be a number from 0 to 1" in \
        str(info.value) and "\n" not in str(info.value)


def test_a_step_that_does_not_ask_leaves_the_count_and_a_timeout_resets_it():
    scheduler = make(iters=2, ratio=0.9)
    decoding(scheduler)
    scheduler.add(Sequence("b", 10, 5))
    plan = scheduler.schedule()  # held: one
    assert scheduler.batch_wait.holding and scheduler.batch_wait.waited == 1
    advance(scheduler, plan)
    # nothing waiting to prefill: the step does not ask, the count stays
    waiting = list(scheduler.waiting)
    scheduler.waiting.remove(waiting[0])
    plan = scheduler.schedule()
    assert not scheduler.batch_wait.holding and scheduler.batch_wait.waited == 1
    advance(scheduler, plan)
    scheduler.waiting.push(waiting[0])
    plan = scheduler.schedule()  # held: two
    assert scheduler.batch_wait.holding and scheduler.batch_wait.waited == 2
    advance(scheduler, plan)
    plan = scheduler.schedule()  # two steps have held: it runs, and the count starts again
    assert [n for _, n in plan.prefills] == [10] and scheduler.batch_wait.waited == 0


def test_a_handed_over_sequence_decodes_and_is_never_held():
    """A sequence a prefill engine handed over has its KV: it joins the decodes at once (it is
    a generation request to TensorRT-LLM), while a new prompt behind it waits."""
    prefill = make(iters=0, ratio=0.0)
    prefill.prefill_only = True
    handed = Sequence("h", 12, 8)
    prefill.add(handed)
    prefill.postprocess(prefill.schedule())
    decode = make(iters=5, ratio=0.9)
    decoding(decode)
    decode.add_transferred(handed)
    decode.add(Sequence("b", 10, 5))
    plan = decode.schedule()  # its blocks reserved, for its KV to come in
    assert decode.batch_wait.holding and not plan.prefills and plan.kv_requested == [handed]
    advance(decode, plan)
    decode.kv_landed(handed)
    prefill.kv_sent(handed)
    plan = decode.schedule()
    assert decode.batch_wait.holding and not plan.prefills
    assert [s.request_id for s in plan.decodes] == ["a", "h"]
    assert prefill.block_manager.num_used == 0  # its KV read, the prefill engine let it go


def test_batch_waiting_is_refused_with_data_parallel_ranks():
    with pytest.raises(ValueError, match="TensorRT-LLM does not hold prefills under attention "
                                         "data parallelism"):
        SchedulerConfig(batch_wait_timeout_iters=4, data_parallel_size=2)


def test_the_preview_leaves_out_a_prompt_the_chunks_under_way_leave_no_blocks_for():
    """A prefill under way takes its next chunk's blocks first: a waiting prompt whose first
    chunk fits the free blocks now, but not after them, is not admitted, so it does not count
    towards ending the wait (it counted, and the step ran without waiting)."""
    from engine.batch_wait import prefill_preview

    config = SchedulerConfig(chunked_prefill=True, max_num_batched_tokens=32, max_num_seqs=8,
                             batch_wait_timeout_iters=100, batch_wait_max_tokens_ratio=0.75)
    scheduler = Scheduler(config, BlockManager(14, 4))
    scheduler.add(Sequence("D", 4, 20))
    advance(scheduler, scheduler.schedule())  # D prefills (waiting for nothing: no decodes)
    scheduler.add(Sequence("A", 27, 5))
    scheduler.add(Sequence("P", 12, 5))
    plan = scheduler.schedule()  # D decodes; A prefills whole, P its first 4 of 12 tokens
    assert [(s.request_id, n) for s, n in plan.prefills] == [("A", 27), ("P", 4)]
    advance(scheduler, plan)
    scheduler.add(Sequence("W", 16, 5))  # its 16 tokens: 4 blocks, all there are free
    prefilling = [s for s in scheduler.running if s.num_computed_tokens < s.prompt_len]
    assert scheduler.block_manager.num_free == 4
    assert prefill_preview(scheduler, prefilling, 32 - 2) == 12  # P alone: its 8 take 2
    plan = scheduler.schedule()  # 12 tokens and 2 decodes fall short of 24: it holds
    assert scheduler.batch_wait.holding and not plan.prefills


def test_a_step_that_preempted_previews_no_admission_and_keeps_the_count():
    """A step whose decodes preempted admits no one from the queue, so the preview does not
    count the queue's head (the victim): the wait's count is left as it is, not reset."""
    config = SchedulerConfig(chunked_prefill=True, max_num_batched_tokens=16, max_num_seqs=8,
                             batch_wait_timeout_iters=50, batch_wait_max_tokens_ratio=0.9)
    scheduler = Scheduler(config, BlockManager(14, 4))
    scheduler.add(Sequence("D1", 4, 40))
    scheduler.add(Sequence("D2", 24, 20))
    for step in range(40):
        if step == 3:
            scheduler.add(Sequence("W", 4, 2))
        waited = scheduler.batch_wait.waited
        plan = scheduler.schedule()
        advance(scheduler, plan)
        if plan.preempted:
            break
    assert [s.request_id for s in plan.preempted] == ["D2"] and not plan.prefills
    assert waited > 0 and scheduler.batch_wait.waited == waited
