"""Steady decoders counted in bulk (`sim.fastpath.steady`): a simulated sequence that decodes every step
is not visited until it needs a KV block or finishes, or something reads its counts. The plans,
blocks, tokens, preemptions, finishes and times must be those of counting every sequence every
step, to the last bit, alone and with fast forward."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.fastpath.steady
from engine.block_manager import BlockManager
from engine.prefix_cache import PrefixCachingBlockManager
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from engine.swap import SwapSpace
from helpers.cluster import SESSIONS, cluster_text, load_config
from helpers.runs import CASES, LINEAR, config_of, records
from sim.fastpath import SteadyScheduler
from sim.runner import run_config

# (without mixed chunks no decoder is steady: the simulation counts every one every step)
MORE_CASES = {name: text for name, text in CASES.items()
              if "enable_mixed_chunk = false" not in text} | {
    "swap preemption": ("[engine]\nnum_kv_blocks = 32\nswap_blocks = 40\n[scheduler]\n"
                        "preemption = \"swap\"\n" + LINEAR),
    "swap preemption, priority queue": ("[engine]\nnum_kv_blocks = 32\nswap_blocks = 12\n"
                                        "[scheduler]\npreemption = \"swap\"\n"
                                        "queue = \"priority\"\n" + LINEAR),
    "one token a block": "[engine]\nnum_kv_blocks = 400\nblock_size = 1\n" + LINEAR,
    "no prefix caching": "[engine]\nnum_kv_blocks = 32\nenable_prefix_caching = false\n" + LINEAR,
    "guaranteed no evict, priority queue, chunked prefill": (
        "[engine]\nnum_kv_blocks = 40\nmax_num_batched_tokens = 64\n[scheduler]\n"
        "queue = \"priority\"\nchunked_prefill = true\n"
        "capacity_scheduler_policy = \"guaranteed_no_evict\"\n" + LINEAR),
}


@pytest.fixture(params=[(1, 0), (4, 2)], ids=["always engaged", "engaged and let go"])
def engage(request, monkeypatch):
    """Bulk counting engaged from the first running sequence on, or engaged at 4 and let go
    below 2 (every count brought up to date), over and over."""
    monkeypatch.setattr(sim.fastpath.steady, "ENGAGE_AT", request.param[0])
    monkeypatch.setattr(sim.fastpath.steady, "RELEASE_BELOW", request.param[1])
    return request.param


def assert_same_three_ways(config):
    """Eager step by step, steady in bulk step by step, and both shortcuts: one set of records."""
    eager = run_config(config, fast_forward=False)
    steady = run_config(config, fast_forward=False, steady=True)
    both = run_config(config)
    assert records(steady) == records(eager)
    assert records(both) == records(eager)
    return eager


@pytest.mark.parametrize("case", MORE_CASES)
def test_bulk_counting_records_exactly_the_eager_simulation(tmp_path, case, engage):
    process = "constant" if "constant" in case else "poisson"
    recorder = assert_same_three_ways(config_of(tmp_path, MORE_CASES[case], n=80,
                                                process=process, rate=20.0))
    assert recorder.statuses.count("finished") == 80
    if "preemption" in case:
        assert sum(recorder.step_columns()["preemptions"]) > 0  # the case exercises it


def test_bulk_counting_is_exact_in_closed_loops_clusters_and_disaggregation(tmp_path, engage):
    config = config_of(tmp_path, "[engine]\nnum_kv_blocks = 40\n" + LINEAR)
    assert_same_three_ways(config.updated({"workload.arrival": {
        "process": "closed_loop", "concurrency": 5, "think_time_s": 0.03}}))
    extra = "[engine]\nnum_kv_blocks = 96"
    assert_same_three_ways(load_config(tmp_path, cluster_text(extra=extra)))
    assert_same_three_ways(load_config(tmp_path, cluster_text(extra=extra, workload=SESSIONS)))
    disaggregated = "[cluster]\nprefill_replicas = 1\ndecode_replicas = 2\n" + \
        "[engine]\nnum_kv_blocks = 64\n" + SESSIONS
    assert_same_three_ways(load_config(tmp_path, disaggregated))


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blocks=st.integers(24, 120), block_size=st.sampled_from([1, 4, 16]),
       queue=st.sampled_from(["fcfs", "priority"]), chunked=st.booleans(),
       swap=st.sampled_from([0, 8, 64]), budget=st.sampled_from([64, 512]),
       rate=st.floats(0.5, 60.0), seed=st.integers(0, 10**6),
       engage=st.sampled_from([(1, 0), (3, 2), (6, 1)]),
       capacity=st.sampled_from(["max_utilization", "guaranteed_no_evict"]))
def test_bulk_counting_matches_eager_counting_on_random_servers(tmp_path, blocks, block_size,
                                                                queue, chunked, swap, budget,
                                                                rate, seed, engage, capacity):
    config = config_of(tmp_path, LINEAR, n=40, rate=rate).updated({
        "seed": seed, "engine.num_kv_blocks": blocks, "engine.block_size": block_size,
        "engine.max_num_batched_tokens": budget, "engine.max_num_seqs": 8,
        "engine.swap_blocks": swap, "scheduler.queue": queue,
        "scheduler.chunked_prefill": chunked or budget < 300,
        "scheduler.preemption": "swap" if swap else "recompute",
        "scheduler.capacity_scheduler_policy": capacity,
        "workload.prompt_tokens": {"dist": "uniform", "low": 1, "high": 300}})
    eager = run_config(config, fast_forward=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sim.fastpath.steady, "ENGAGE_AT", engage[0])
        patch.setattr(sim.fastpath.steady, "RELEASE_BELOW", engage[1])
        assert records(run_config(config, fast_forward=False, steady=True)) == records(eager)
    assert eager.statuses.count("finished") + eager.statuses.count("rejected") == 40


def bulk_scheduler(blocks: int = 64, outputs=(40, 40, 50)) -> SteadyScheduler:
    scheduler = SteadyScheduler(SchedulerConfig(max_num_seqs=8), BlockManager(blocks, 4))
    scheduler.engage_at, scheduler.release_below = 1, 0  # even for so few
    for i, n in enumerate(outputs):
        scheduler.add(Sequence(i, 6, n, seq_id=100 + i))
    return scheduler


def test_steady_decoders_are_left_alone_until_their_counts_are_read():
    """After a prefill and one eager decode, a sequence is not visited while it decodes: its
    counts lag, and `sync` brings them to what counting every step gives."""
    bulk, eager = bulk_scheduler(), Scheduler(SchedulerConfig(max_num_seqs=8),
                                              BlockManager(64, 4))
    for i, n in enumerate((40, 40, 50)):
        eager.add(Sequence(i, 6, n, seq_id=200 + i))
    for _ in range(20):
        bulk.postprocess(bulk.schedule())
        eager.postprocess(eager.schedule())
    counts = [(s.num_output_tokens, s.num_computed_tokens, s.last_token_step)
              for s in eager.running]
    assert counts == [(20, 25, 19)] * 3
    assert not bulk.counted  # all three steady
    assert [s.num_output_tokens for s in bulk.running] == [2] * 3  # as of the step they settled
    assert bulk.block_manager.block_tables[100] == eager.block_manager.block_tables[200]
    bulk.sync()
    assert [(s.num_output_tokens, s.num_computed_tokens, s.last_token_step)
            for s in bulk.running] == counts
    while bulk.has_unfinished():  # counted eagerly again after a sync, then steady again
        bulk.postprocess(bulk.schedule())
    assert bulk.block_manager.num_used == 0 and bulk.num_steps == 50


def test_bulk_counting_applies_only_where_every_step_decodes_every_running_sequence():
    with pytest.raises(ValueError, match="under continuous batching with mixed chunks only"):
        SteadyScheduler(SchedulerConfig(policy="static"), BlockManager(8, 4))
    with pytest.raises(ValueError, match="a prefill's step decodes none"):
        SteadyScheduler(SchedulerConfig(enable_mixed_chunk=False), BlockManager(8, 4))
    prefill_only = bulk_scheduler()
    prefill_only.prefill_only = True  # its sequences leave after their first token
    prefill_only.postprocess(prefill_only.schedule())
    assert not prefill_only.engaged
    scheduler = bulk_scheduler()
    plan = scheduler.schedule()
    with pytest.raises(ValueError, match="simulated sequences only"):
        scheduler.postprocess(plan, {100: 1, 101: 1, 102: 1})


def _ids(seqs) -> list[int]:
    return [seq.seq_id % 1000 for seq in seqs]


def assert_side_by_side(lengths, blocks: int, queue: str = "fcfs", swap: int = 0,
                        chunked: bool = False, max_num_seqs: int = 6,
                        caching: bool = False, engage=(1, 0), arrivals=None,
                        priorities=None) -> None:
    """A bulk and an eager scheduler side by side, step by step: the same plans, the same
    finishes in the same order, the same block tables and free list (block ids included), the
    same cached blocks, and at the end every block back. Sequence i arrives before step
    `arrivals[i]` (default: all before the first), with priority `priorities[i]` (default:
    i % 3). With `caching`, every other sequence shares its blocks' keys (prompt and output)
    with the one two before it."""
    arrivals = arrivals or [0] * len(lengths)
    priorities = priorities or [i % 3 for i in range(len(lengths))]

    def scheduler(bulk: bool) -> Scheduler:
        manager = PrefixCachingBlockManager if caching else BlockManager
        s = (SteadyScheduler if bulk else Scheduler)(
            SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=48, queue=queue,
                            chunked_prefill=chunked, max_seq_len=128,
                            preemption="swap" if swap else "recompute"),
            manager(blocks, 4), SwapSpace(swap) if swap else None)
        if bulk:
            s.engage_at, s.release_below = engage
        return s

    def arrive(s: Scheduler, offset: int, step: int) -> None:
        for i, (prompt, out) in enumerate(lengths):
            if arrivals[i] == step:
                keys = [(i % 2) * 1000 + j for j in range((prompt + out) // 4)] \
                    if caching else None
                s.add(Sequence(i, prompt, out, seq_id=offset + i, priority=priorities[i],
                               arrival_s=float(step), block_hashes=keys))

    bulk, eager = scheduler(True), scheduler(False)
    step = 0
    while eager.has_unfinished() or step <= max(arrivals):
        arrive(bulk, 1000, step)
        arrive(eager, 2000, step)
        step += 1
        a, b = bulk.schedule(), eager.schedule()
        if b.is_empty:  # idle: the engine loop runs nothing and postprocesses nothing
            assert a.is_empty
            continue
        assert (_ids(a.decodes), [(s.seq_id % 1000, n) for s, n in a.prefills],
                _ids(a.preempted), a.swap_out, a.swap_in) == \
            (_ids(b.decodes), [(s.seq_id % 1000, n) for s, n in b.prefills],
             _ids(b.preempted), b.swap_out, b.swap_in)
        assert _ids(bulk.postprocess(a)) == _ids(eager.postprocess(b))
        assert a.itl_consecutive == b.itl_consecutive and a.itl_from_steps == b.itl_from_steps
        assert bulk.block_manager.free_list() == eager.block_manager.free_list()
        assert {k % 1000: v for k, v in bulk.block_manager.block_tables.items()} == \
            {k % 1000: v for k, v in eager.block_manager.block_tables.items()}
        if caching:
            assert bulk.block_manager._hash_of == eager.block_manager._hash_of
            assert a.cached_tokens == b.cached_tokens
    assert not bulk.has_unfinished()
    bulk.block_manager.check_invariants()
    assert bulk.block_manager.num_used == 0


def test_a_later_more_urgent_request_takes_its_blocks_in_running_order():
    """Priority queue: a request that arrives while a less urgent one is prefilling runs ahead
    of it; when both need a block in the same step, the more urgent one gets it first."""
    assert_side_by_side([(64, 10), (8, 10)], blocks=64, queue="priority", chunked=True,
                        arrivals=[0, 1], priorities=[2, 0])
    assert_side_by_side([(64, 10), (8, 10), (20, 30)], blocks=64, queue="priority",
                        chunked=True, caching=True, arrivals=[0, 1, 3], priorities=[2, 0, 1])


def test_a_prefills_chunk_that_preempts_planned_decodes_is_counted_as_the_engine_counts_it(
        monkeypatch):
    """Priority queue: a long prompt runs ahead of three decoders admitted before it, and its
    chunks find no free block: they preempt decoders already planned in the step, which the
    bulk scheduler counts eagerly, for the engine's plans."""
    unplanned = []
    unplan = Scheduler.unplan_last_decode
    monkeypatch.setattr(Scheduler, "unplan_last_decode",
                        lambda self, plan: unplanned.append(type(self)) or unplan(self, plan))
    for engage in [(1, 0), (3, 2)]:
        assert_side_by_side([(8, 40), (8, 40), (8, 40), (100, 2)], blocks=30, queue="priority",
                            chunked=True, engage=engage, arrivals=[0, 0, 0, 2],
                            priorities=[1, 1, 1, 0])
    assert unplanned.count(SteadyScheduler) == unplanned.count(Scheduler) > 0


def test_sequences_finishing_together_finish_in_running_order():
    """The first (steady) and the third (admitted when the second left, two tokens long)
    emit their last token in the same step: the first finishes first, as counted eagerly."""
    assert_side_by_side([(4, 10), (4, 8), (4, 2)], blocks=40, max_num_seqs=2)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 40), st.integers(1, 60)), min_size=1,
                        max_size=14),
       blocks=st.integers(12, 60), queue=st.sampled_from(["fcfs", "priority"]),
       swap=st.sampled_from([0, 16]), chunked=st.booleans(), max_num_seqs=st.integers(1, 6),
       caching=st.booleans(), engage=st.sampled_from([(1, 0), (3, 2), (5, 4)]),
       data=st.data())
def test_bulk_and_eager_schedulers_make_the_same_plans_blocks_and_finishes(
        lengths, blocks, queue, swap, chunked, max_num_seqs, caching, engage, data):
    arrivals = data.draw(st.lists(st.integers(0, 30), min_size=len(lengths),
                                  max_size=len(lengths)))
    priorities = data.draw(st.lists(st.integers(0, 2), min_size=len(lengths),
                                    max_size=len(lengths)))
    assert_side_by_side(lengths, blocks, queue, swap, chunked, max_num_seqs, caching, engage,
                        arrivals, priorities)


def test_the_steady_scheduler_keeps_its_attributes_within_cpythons_shared_key_table():
    """CPython 3.11 loads an object's attributes fast while its keys fit the class's shared key
    table (about 29); past it the simulation's hottest object reads 10% slower
    (docs/sim/speed.md, "Few attributes on the scheduler")."""
    from engine.block_manager import BlockManager
    from engine.scheduler_config import SchedulerConfig
    from sim.fastpath import SteadyScheduler

    scheduler = SteadyScheduler(SchedulerConfig(), BlockManager(64, 16))
    assert len(vars(scheduler)) <= 28
