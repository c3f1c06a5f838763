"""The capacity policy (`scheduler.capacity_scheduler_policy`): under "max_utilization" (the
default, vLLM's way) a request is admitted while its first chunk's KV blocks are free, and a
running sequence that finds none preempts; under "guaranteed_no_evict" (TensorRT-LLM's default)
a request is admitted only where the free blocks hold, beside what every admitted sequence is
still owed to its last token, every block promised to it, so no sequence is ever preempted.
Fast-forwarded and bulk-counted runs under it are the step-by-step run's (tests/test_steady.py,
tests/test_decode_runs.py); on random servers every request ends and every block comes back
(tests/test_sim_loop.py)."""

from __future__ import annotations

import pytest

import scenarios
from engine.block_manager import BlockManager
from engine.kv_reservation import PromisedBlocks, peak_blocks, promised_blocks
from engine.prefix_cache import PrefixCachingBlockManager
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from helpers.runs import LINEAR, drain, preemptions, scheduler
from scenarios import ScenarioError
from sim.runner import run_config

NO_EVICT = "guaranteed_no_evict"
WORKLOAD = """
[workload]
num_requests = 60
arrival = { process = "poisson", rate = 20.0 }
prompt_tokens = { dist = "uniform", low = 20, high = 120 }
output_tokens = { dist = "uniform", low = 100, high = 250 }
"""


def test_a_request_is_promised_a_slot_for_its_prompt_and_every_token_it_may_sample():
    """As TensorRT-LLM counts a request's blocks to completion: prompt + max_new_tokens, a row
    more than it ever stores (vLLM's peak); on a prefill-only engine, prompt + its first."""
    assert peak_blocks(Sequence("a", 8, 9), 4) == 4  # 16 rows stored: 8 prompt + 8 outputs
    assert promised_blocks(Sequence("a", 8, 9), 4) == 5  # 17 slots
    assert promised_blocks(Sequence("a", 8, 8), 4) == peak_blocks(Sequence("a", 8, 8), 4) == 4
    assert promised_blocks(Sequence("a", 8, 9), 4, prefill_only=True) == 3


@pytest.mark.parametrize("policy", ["max_utilization", NO_EVICT])
def test_the_second_request_waits_for_the_whole_length_only_under_no_evict(policy):
    """Two requests of 8 prompt tokens and 13 outputs (6 blocks of 4 promised each) in a cache
    of 8 blocks: both fit at first (2 blocks each). Admitted together they run out of blocks
    and one is preempted; under no evict the second waits until the first has finished."""
    s = scheduler(policy, blocks=8)
    s.add(Sequence("a", 8, 13))
    s.add(Sequence("b", 8, 13))
    steps = drain(s)
    if policy == NO_EVICT:
        assert steps[0] == ["a"] and s.num_preemptions == 0
        assert steps.index(["b"]) == 13  # a's 13 outputs take steps 0-12
    else:
        assert steps[0] == ["a", "b"] and s.num_preemptions > 0
    assert s.block_manager.num_used == 0


def test_a_sequence_is_admitted_beside_what_the_running_ones_are_still_owed():
    """a (8 + 9: 5 blocks promised) decodes into its third block; 9 of 12 are free, 7 once a's
    last 2 are promised. b's 5 fit; c's 6 (8 + 13) do not fit in the 2 left, though its first
    2 blocks are free."""
    s = scheduler(NO_EVICT, blocks=12)
    s.add(Sequence("a", 8, 9))
    s.postprocess(s.schedule())
    s.add(Sequence("b", 8, 9))
    s.add(Sequence("c", 8, 13))
    plan = s.schedule()
    assert [seq.request_id for seq, _ in plan.prefills] == ["b"]
    assert s.block_manager.num_free == 7 and [q.request_id for q in s.waiting] == ["c"]


def test_the_room_is_the_free_blocks_less_the_blocks_owed():
    bm = BlockManager(12, 4)
    running = Sequence("a", 8, 9, seq_id=1)  # 5 blocks promised, holds 2
    bm.ensure_capacity(1, 8)
    assert PromisedBlocks(bm, [running]).owed(running) == 3
    room = PromisedBlocks(bm, [running])
    assert not room.take(Sequence("b", 8, 21))  # 8 blocks: more than 10 free - 3 owed
    assert room.take(Sequence("b", 8, 20))  # 7 blocks: just fit
    assert room.room == 0 and not room.take(Sequence("c", 1, 1))
    assert bm.num_free == 10  # promising takes no block


def test_a_request_is_charged_the_cached_blocks_it_would_share():
    """TensorRT-LLM charges a request not yet running for all its blocks, those its prompt
    would find cached (and share with a running sequence) included; once it runs, what it holds,
    shared or not, is no longer owed."""
    bm = PrefixCachingBlockManager(16, 4)
    s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=NO_EVICT), bm)
    s.add(Sequence("a", 12, 5, block_hashes=[1, 2, 3]))  # 17 slots: 5 blocks promised
    s.postprocess(s.schedule())  # a holds its 3 prompt blocks, cached
    again = Sequence("b", 12, 5, block_hashes=[1, 2, 3])
    assert len(s._cached_prefix(again)) == 2  # blocks it would share with a
    room = s.promised()
    assert room.owed(again) == 5
    assert room.take(again) and room.room == bm.num_free - 2 - 5  # a still owed 2
    s.add(again)
    s.postprocess(s.schedule())
    assert s.promised().owed(again) == 5 - len(bm.block_tables[again.seq_id])


def test_admission_charges_the_cached_blocks_a_running_sequence_shares():
    """a (12 + 5: 5 blocks promised) holds its 3 prompt blocks and is owed 2; of 9 blocks 6
    are free, a room of 4. b, the same prompt, would share 2 of a's blocks, but is charged
    all 5 of its own: it waits (crediting the shared 2 would admit it)."""
    bm = PrefixCachingBlockManager(9, 4)
    s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=NO_EVICT), bm)
    s.add(Sequence("a", 12, 5, block_hashes=[1, 2, 3]))
    s.postprocess(s.schedule())
    s.add(Sequence("b", 12, 5, block_hashes=[1, 2, 3]))
    plan = s.schedule()
    assert not plan.prefills and [q.request_id for q in s.waiting] == ["b"]


def test_a_prefill_only_engine_promises_the_prompt_and_first_token_alone():
    """Three requests of 8 prompt tokens and 12 outputs (5 blocks promised each) in 10 blocks:
    two run at a time on an engine that decodes them, all three on one that hands each off
    after its first token (3 blocks each)."""
    for prefill_only, first_step in ((False, ["a", "b"]), (True, ["a", "b", "c"])):
        s = scheduler(NO_EVICT, blocks=10)
        s.prefill_only = prefill_only
        for name in "abc":
            s.add(Sequence(name, 8, 12))
        assert [q.request_id for q, _ in s.schedule().prefills] == first_step


def test_a_request_the_promise_could_never_hold_is_rejected_not_left_waiting():
    """4 prompt tokens and 13 outputs store 16 rows (4 blocks of 4, the whole cache): vLLM's
    way runs it; guaranteed no evict would promise it 5 blocks, so it is rejected at once,
    saying why, rather than waiting for ever."""
    for policy, runs in (("max_utilization", True), (NO_EVICT, False)):
        s = scheduler(policy, blocks=4)
        seq = Sequence("a", 4, 13)
        assert s.add(seq) is runs
        if not runs:
            assert seq.reject_reason == ("needs 5 KV blocks (promised to its last token, "
                                         "guaranteed_no_evict), the cache has 4")


def test_a_data_parallel_rank_must_hold_the_promise_alone():
    """Two ranks of 4 blocks pooled: 4 prompt tokens and 13 outputs are promised 5 blocks,
    more than a rank holds though fewer than the pool's 8."""
    s = Scheduler(SchedulerConfig(max_num_seqs=8, data_parallel_size=2,
                                  capacity_scheduler_policy=NO_EVICT), BlockManager(8, 4))
    seq = Sequence("a", 4, 13)
    assert not s.add(seq)
    assert seq.reject_reason == ("needs 5 KV blocks (promised to its last token, "
                                 "guaranteed_no_evict), a data-parallel rank's cache has 4")


@pytest.mark.parametrize("policy", ["max_utilization", NO_EVICT])
def test_batch_waiting_counts_only_the_prompts_the_policy_would_admit(policy):
    """A held step's preview of its prefills counts a queued prompt only where admission would
    take it: under no evict, one whose promised blocks do not fit does not end the wait. a
    decodes (3 of its 7 promised blocks held); c (2 promised) is held back; then b (8 promised)
    queues behind it: with b, 16 prompt tokens would end the wait."""
    s = scheduler(policy, blocks=12, max_num_batched_tokens=32, batch_wait_timeout_iters=5,
                  batch_wait_max_tokens_ratio=0.5)
    s.add(Sequence("a", 8, 17))
    s.postprocess(s.schedule())
    s.add(Sequence("c", 4, 2))
    plan = s.schedule()
    assert s.batch_wait.holding and not plan.prefills  # 4 prompt tokens + 1 decode < 16
    s.postprocess(plan)
    s.add(Sequence("b", 12, 20))
    plan = s.schedule()
    prefilled = [q.request_id for q, _ in plan.prefills]
    if policy == NO_EVICT:  # room: 9 free - 4 owed to a - 2 for c < 8 for b
        assert s.batch_wait.holding and s.batch_wait.waited == 2 and not prefilled
    else:
        assert not s.batch_wait.holding and prefilled == ["c", "b"]


def test_batch_waitings_count_and_admission_agree_on_a_prompt_with_cached_blocks():
    """a (8 + 17: 7 blocks promised) holds 3: of 12 blocks 9 are free, a room of 5. b's first
    2 blocks are cached, shared with a; charged all 7 of its own, b does not fit (credited
    with the 2 it would), so the step neither holds for it nor admits it."""
    bm = PrefixCachingBlockManager(12, 4)
    s = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=32,
                                  batch_wait_timeout_iters=5, batch_wait_max_tokens_ratio=0.9,
                                  capacity_scheduler_policy=NO_EVICT), bm)
    s.add(Sequence("a", 8, 17, block_hashes=[1, 2]))
    s.postprocess(s.schedule())
    s.add(Sequence("b", 12, 14, block_hashes=[1, 2, 3]))
    plan = s.schedule()
    assert not s.batch_wait.holding and not plan.prefills
    assert [q.request_id for q in s.waiting] == ["b"]


def test_the_report_says_when_nothing_is_preempted(tmp_path):
    from reports.section_text import scheduler_text

    path = tmp_path / "s.toml"
    path.write_text('[workload]\nnum_requests = 1\narrival = { process = "burst" }\n'
                    'prompt_tokens = { dist = "fixed", value = 8 }\n'
                    'output_tokens = { dist = "fixed", value = 8 }\n')
    base = scenarios.load(path).base
    assert "no evict" not in scheduler_text(base.scheduler)
    guarded = base.updated({"scheduler.capacity_scheduler_policy": NO_EVICT}).scheduler
    assert scheduler_text(guarded).endswith(
        "first-come-first-served queue; guaranteed no evict (a request is admitted only where "
        "the KV cache holds it to its last token beside every running one; nothing is "
        "preempted)")


@pytest.mark.parametrize("policy, steps, preemptions", [("max_utilization", 12, 2),
                                                        (NO_EVICT, 18, 0)])
def test_the_worked_example_of_preemption_md(policy, steps, preemptions):
    """docs/scheduler/preemption.md: a, b, c (4 prompt tokens, 6 outputs) in 4 blocks of 4."""
    s = scheduler(policy, blocks=4)
    for name in "abc":
        s.add(Sequence(name, 4, 6))
    assert len(drain(s)) == steps and s.num_preemptions == preemptions


def test_a_bad_policy_is_one_line(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[scheduler]\ncapacity_scheduler_policy = "no_evict"\n'
                    '[workload]\nnum_requests = 1\n')
    with pytest.raises(ScenarioError) as info:
        scenarios.load(path)
    message = str(info.value)
    assert "scheduler.capacity_scheduler_policy" in message and "guaranteed_no_evict" in message
    assert "\n" not in message
    with pytest.raises(ValueError, match="capacity_scheduler_policy must be one of "
                                         "max_utilization, guaranteed_no_evict"):
        SchedulerConfig(capacity_scheduler_policy="GUARANTEED_NO_EVICT")


def test_a_disaggregated_decode_engine_never_preempts_under_no_evict(tmp_path):
    from helpers.cluster import load_config

    def text(policy):
        return ("[cluster]\nprefill_replicas = 1\ndecode_replicas = 2\n[engine]\n"
                f"num_kv_blocks = 40\n[scheduler]\ncapacity_scheduler_policy = \"{policy}\"\n"
                + LINEAR + WORKLOAD)

    evicting = run_config(load_config(tmp_path, text("max_utilization")))
    assert preemptions(evicting) > 0  # the case puts the cache under pressure
    guarded = run_config(load_config(tmp_path, text(NO_EVICT)))
    assert preemptions(guarded) == 0
    assert guarded.request_columns()["status"] == evicting.request_columns()["status"] \
        == ["finished"] * 60
