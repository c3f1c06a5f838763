"""The capacity policy (`scheduler.capacity_scheduler_policy`): under "max_utilization" (the
default, vLLM's way) a request is admitted while its next chunk's KV blocks are free, and a
running sequence that finds none preempts; under "guaranteed_no_evict" (TensorRT-LLM's default)
a request is admitted only where the free blocks hold, beside what every admitted sequence will
still take to its last token, every block it will take, so no sequence is ever preempted.
Fast-forwarded and bulk-counted runs under it are the step-by-step run's (tests/test_steady.py,
tests/test_decode_runs.py); on random servers every request ends and every block comes back
(tests/test_sim_loop.py)."""

from __future__ import annotations

import pytest

import scenarios
from engine.block_manager import BlockManager
from engine.kv_reservation import PromisedBlocks, peak_blocks
from engine.prefix_cache import PrefixCachingBlockManager
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from helpers.runs import LINEAR
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


def scheduler(policy: str, blocks: int = 10, block_size: int = 4, **config) -> Scheduler:
    return Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=policy, **config),
                     BlockManager(blocks, block_size))


def drain(s: Scheduler, limit: int = 1000) -> list[list[str]]:
    """Run `s` until every sequence is done; the request ids prefilled in each step."""
    steps = []
    for _ in range(limit):
        if not s.has_unfinished():
            return steps
        plan = s.schedule()
        steps.append([seq.request_id for seq, _ in plan.prefills])
        s.postprocess(plan)
    raise AssertionError("the run did not end")


def test_the_peak_is_the_prompt_and_every_output_but_the_last():
    assert peak_blocks(Sequence("a", 8, 9), 4) == 4  # 16 rows: 8 prompt + 8 outputs
    assert peak_blocks(Sequence("a", 8, 10), 4) == 5
    assert peak_blocks(Sequence("a", 8, 10), 4, prefill_only=True) == 2


@pytest.mark.parametrize("policy", ["max_utilization", NO_EVICT])
def test_the_second_request_waits_for_the_whole_length_only_under_no_evict(policy):
    """Two requests of 8 prompt tokens and 13 outputs (5 blocks of 4 at their peak) in a cache
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


def test_a_sequence_is_admitted_beside_what_the_running_ones_will_still_take():
    """a (8 + 9 tokens: 4 blocks at its peak) decodes into its third block; 9 of 12 are free,
    8 once a's last is promised. b needs 4 blocks to its peak, so it joins; c's 5 do not fit
    in the 4 left, though its first 2 are free."""
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
    running = Sequence("a", 8, 9, seq_id=1)  # 4 blocks at its peak, holds 2
    bm.ensure_capacity(1, 8)
    assert PromisedBlocks(bm, [running]).owed(running) == 2
    room = PromisedBlocks(bm, [running])
    assert not room.take(Sequence("b", 8, 29))  # 9 blocks: more than 10 free - 2 owed
    assert room.take(Sequence("b", 8, 25))  # 8 blocks: just fit
    assert room.room == 0 and not room.take(Sequence("c", 1, 1))
    assert bm.num_free == 10  # promising takes no block


def test_cached_blocks_a_request_finds_are_not_asked_for_again():
    """A request whose prompt's first blocks are cached owes only the rest, and those of its
    hits that are free (evictable) besides."""
    bm = PrefixCachingBlockManager(8, 4)
    s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=NO_EVICT), bm)
    first = Sequence("a", 12, 3, block_hashes=[1, 2, 3])  # 12 + 2 rows: 4 blocks at its peak
    s.add(first)
    steps = drain(s)
    assert steps[0] == ["a"] and bm.num_cached == 3 and bm.num_free == 8  # all evictable
    again = Sequence("b", 12, 3, block_hashes=[1, 2, 3])
    room = s.promised()
    hits = s._cached_prefix(again)
    assert len(hits) == 2  # the last prompt token is always computed
    assert room.owed(again, hits) == 4 - 2 + 2  # its 2 hits are free blocks it takes up


@pytest.mark.parametrize("policy", ["max_utilization", NO_EVICT])
def test_batch_waiting_counts_only_the_prompts_the_policy_would_admit(policy):
    """A held step's preview of its prefills counts a queued prompt only where admission would
    take it: under no evict, one whose blocks to its last token do not fit does not end the
    wait. a decodes (3 of its 6 blocks held); c (2 blocks at its peak) is held back; then b
    (8 at its peak) queues behind it: with b, 16 prompt tokens would end the wait."""
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
    if policy == NO_EVICT:  # room: 9 free - 3 owed by a - 2 for c < 8 for b
        assert s.batch_wait.holding and s.batch_wait.waited == 2 and not prefilled
    else:
        assert not s.batch_wait.holding and prefilled == ["c", "b"]


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


def preemptions(recorder) -> int:
    return sum(recorder.step_columns()["preemptions"])


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
