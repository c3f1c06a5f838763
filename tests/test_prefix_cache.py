"""Automatic prefix caching (engine.prefix_cache): blocks found by the hash of their prefix,
shared read-only and reference counted, kept cached when freed and evicted least recently freed
first; the scheduler admits on the uncached tokens; greedy outputs and every sequence's KV rows
are the same with caching on and off, with and without preemptions; random workloads never
leak, double free or wrongly share a block."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.block_hashes import ROOT_HASH, block_hashes, hash_block
from engine.block_manager import BlockManager, BlockError
from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.model import init_params
from engine.paged_kv_cache import kv_blocks_in_use
from engine.prefix_cache import PrefixCachingBlockManager, make_block_manager
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import GREEDY, Sequence
from helpers.real_engine import MODEL, assert_same_outputs_and_kv, serve_greedy


# --- the block manager ------------------------------------------------------------------------

def test_a_sequence_hashes_its_blocks_chained_from_its_token_ids():
    seq = Sequence("a", 10, 4, prompt_token_ids=list(range(10)))
    first = hash_block(ROOT_HASH, [0, 1, 2, 3])
    assert block_hashes(seq, 4, 5) == [first, hash_block(first, [4, 5, 6, 7])]  # 2 full blocks
    other = Sequence("b", 10, 4, prompt_token_ids=[9] + list(range(1, 10)))
    assert block_hashes(other, 4, 2)[1] != block_hashes(seq, 4, 2)[1]  # a different parent
    assert block_hashes(Sequence("c", 10, 4), 4, 2) is None  # no tokens, no given hashes


def test_a_block_hash_is_a_sha256_no_prompt_can_collide_on_purpose():
    # 128 bits of SHA-256(parent as 16 little-endian bytes, the tokens as int64s), as vLLM keys
    # blocks; Python's hash would give blocks [0] and [2**61 - 1] one key (ints hash mod 2**61-1)
    data = ROOT_HASH.to_bytes(16, "little") + np.array([5, 7], dtype="<i8").tobytes()
    assert hash_block(ROOT_HASH, [5, 7]) == int.from_bytes(
        hashlib.sha256(data).digest()[:16], "little")
    assert hash((ROOT_HASH, (0,))) == hash((ROOT_HASH, (2**61 - 1,)))
    assert hash_block(ROOT_HASH, [0]) != hash_block(ROOT_HASH, [2**61 - 1])


def test_freed_cached_blocks_are_found_again_and_evicted_least_recently_freed_first():
    bm = PrefixCachingBlockManager(4, 2)
    bm.ensure_capacity(1, 4)  # blocks 0, 1
    bm.cache_block(0, 100)
    bm.cache_block(1, 101)
    bm.ensure_capacity(2, 2)  # block 2
    bm.cache_block(2, 200)
    assert bm.match_prefix([100, 101, 102], 3) == [0, 1]
    bm.free_sequence(1)  # its last block first: 1 then 0 join the evictable blocks
    bm.free_sequence(2)
    assert bm.num_free == 4 and bm.num_used == 0 and bm.num_cached == 3
    assert bm.free_list() == [3, 1, 0, 2]  # never-used first, then least recently freed
    bm.take_prefix(3, [0])  # a hit takes block 0 back from the evictable ones
    assert bm.num_free == 3 and bm.ref_count(0) == 1
    bm.ensure_capacity(4, 4)  # blocks 3 (never used) and 1 (evicted: hash 101 forgotten)
    assert bm.block_tables[4] == [3, 1]
    assert bm.match_prefix([100, 101], 2) == [0] and bm.evictions == 1
    bm.check_invariants()


def test_uncached_free_blocks_are_taken_as_one_by_one_and_only_held_blocks_are_cached():
    # the free blocks no hash finds, freed before every cached one, are kept as a stack: taken
    # together they are the blocks taken one at a time, in that order
    def manager():
        bm = PrefixCachingBlockManager(6, 2)
        bm.allocate_blocks([1, 1, 1, 1])  # blocks 0-3
        bm.free_sequence(1)
        return bm

    together, one_by_one = manager(), manager()
    together.allocate_blocks([2, 3, 4])
    for seq_id in (2, 3, 4):
        one_by_one.allocate_block(seq_id)
    assert together.block_tables == one_by_one.block_tables
    assert together.free_list() == one_by_one.free_list()
    for free in together.free_list():
        with pytest.raises(BlockError, match=f"block {free} is free"):
            together.cache_block(free, 99)
    together.check_invariants()


def test_a_second_copy_of_a_cached_block_is_found_once_the_first_is_evicted():
    # a prompt of exactly two cached blocks reuses one and computes the second again, into a
    # block of its own: both copies are kept (as vLLM keeps them), the first found first
    bm = PrefixCachingBlockManager(4, 2)
    bm.ensure_capacity(1, 4)  # blocks 0, 1
    bm.cache_filled(bm.block_tables[1], [10, 11])
    bm.take_prefix(2, bm.match_prefix([10, 11], 1))
    bm.ensure_capacity(2, 4)  # block 2: the content of block 1 again
    bm.cache_block(2, 11)
    assert bm.num_cached == 3 and bm.match_prefix([10, 11], 2) == [0, 1]
    bm.free_sequence(1)  # block 1 is the least recently freed: the first evicted
    bm.free_sequence(2)
    bm.allocate_blocks([3, 3])  # the never-used block 3, then block 1 evicted
    assert bm.evictions == 1 and bm.match_prefix([10, 11], 2) == [0, 2]
    bm.check_invariants()


def test_a_shared_block_is_freed_only_when_its_last_holder_lets_go():
    bm = PrefixCachingBlockManager(4, 2)
    bm.ensure_capacity(1, 2)
    bm.cache_block(0, 7)
    bm.take_prefix(2, bm.match_prefix([7], 1))
    assert bm.ref_count(0) == 2 and bm.num_used == 1
    bm.free_sequence(1)
    assert bm.ref_count(0) == 1 and not bm.is_free(0)
    bm.free_block(0, 2)
    assert bm.is_free(0) and bm.match_prefix([7], 1) == [0]  # free, still cached
    with pytest.raises(BlockError, match="double free"):
        bm.free_block(0)
    bm.check_invariants()


op_st = st.one_of(
    st.tuples(st.just("allocate"), st.integers(0, 5), st.integers(1, 4)),
    st.tuples(st.just("free"), st.integers(0, 5)),
    st.tuples(st.just("cache"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("share"), st.integers(6, 9), st.integers(1, 3)))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(op_st, min_size=1, max_size=40))
def test_counts_kept_from_the_first_cached_block_are_the_holders_at_every_step(ops):
    # no reference count is kept until a hash finds a block; the counts set from the tables
    # when a first block is cached must be the holders from then on, through evictions back to
    # none cached and caching again, and are counted from the tables only that once
    bm = PrefixCachingBlockManager(8, 2)
    counts = []
    count_refs = bm._count_refs
    bm._count_refs = lambda: counts.append(1) or count_refs()
    next_hash = iter(range(100, 10_000))
    for op in ops:
        if op[0] == "allocate" and op[2] <= bm.num_free:
            bm.allocate_blocks([op[1]] * op[2])
        elif op[0] == "free":
            bm.free_sequence(op[1])
        elif op[0] == "cache" and op[2] < len(bm.block_tables.get(op[1], [])):
            bm.cache_block(bm.block_tables[op[1]][op[2]], next(next_hash))
        elif op[0] == "share" and op[1] not in bm.block_tables and bm.num_cached:
            hits = sorted(bm._hash_of)[:op[2]]
            if bm.evictable_among(hits) <= bm.num_free:
                bm.take_prefix(op[1], hits)
        bm.check_invariants()
        held = [b for table in bm.block_tables.values() for b in table]
        for block in range(bm.num_blocks):
            assert bm.ref_count(block) == held.count(block)
            assert bm.is_free(block) == (block not in held)
    assert len(counts) <= 1


def test_kv_blocks_in_use_counts_referenced_blocks():
    bm = make_block_manager(8, 4, prefix_caching=True)
    bm.ensure_capacity(1, 8)
    bm.cache_block(bm.block_tables[1][0], 11)
    bm.take_prefix(2, bm.match_prefix([11], 1))
    assert kv_blocks_in_use(bm) == {"used": 2, "free": 6, "total": 8}
    assert isinstance(make_block_manager(8, 4), BlockManager) and \
        not make_block_manager(8, 4).prefix_caching


# --- the scheduler --------------------------------------------------------------------------

def test_admission_charges_only_uncached_tokens_and_the_last_token_is_always_computed(
        fake_executor):
    bm = PrefixCachingBlockManager(32, 4)
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=16, max_seq_len=64,
                             chunked_prefill=True)
    scheduler = Scheduler(config, bm)
    engine = LLMEngine(scheduler, fake_executor(bm), timing="executor")
    prompt = list(range(12))
    first = Sequence("a", 12, 2, prompt_token_ids=prompt)
    engine.add_request(first)
    while engine.has_unfinished():
        engine.step()
    assert first.num_cached_tokens == 0
    again = Sequence("b", 12, 2, prompt_token_ids=prompt)  # the same prompt: a full hit
    suffix = Sequence("c", 14, 2, prompt_token_ids=prompt + [40, 41])
    engine.add_request(again)
    engine.add_request(suffix)
    plan, _ = engine.start_step(0.0)
    # 12 tokens: 3 full blocks, but the last token is computed: 2 blocks (8 tokens) cached
    assert again.num_cached_tokens == 8 and suffix.num_cached_tokens == 12
    assert [(s.request_id, n) for s, n in plan.prefills] == [("b", 4), ("c", 2)]
    assert plan.cached_tokens == 20
    assert bm.block_tables[again.seq_id][:2] == bm.block_tables[suffix.seq_id][:2]
    bm.check_invariants()


def test_evictable_cached_blocks_count_as_free_for_admission(fake_executor):
    bm = PrefixCachingBlockManager(4, 4)  # 16 token slots
    config = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=32, max_seq_len=16)
    scheduler = Scheduler(config, bm)
    engine = LLMEngine(scheduler, fake_executor(bm), timing="executor")
    engine.add_request(Sequence("a", 12, 1, prompt_token_ids=list(range(12))))
    while engine.has_unfinished():
        engine.step()
    assert bm.num_cached == 3 and bm.num_free == 4  # all cached, all free
    other = Sequence("b", 13, 1, prompt_token_ids=list(range(100, 113)))
    engine.add_request(other)
    plan, _ = engine.start_step(0.0)
    assert plan.prefills == [(other, 13)]  # admitted by evicting the cached blocks
    # a's blocks evicted; cached now are b's own three full blocks, registered as planned
    assert bm.evictions == 3 and bm.num_cached == 3


# --- the real engine: the same outputs and KV with caching on and off -----------------------


def shared_prompts(rng, n: int, system: int) -> list:
    prefix = rng.integers(0, 64, size=system).tolist()
    return [prefix + rng.integers(0, 64, size=int(rng.integers(1, 14))).tolist()
            for _ in range(n)]


@pytest.mark.parametrize("num_blocks", [64, 12])  # 12: preemptions
def test_greedy_outputs_and_kv_rows_are_the_same_with_caching_on_and_off(num_blocks):
    prompts = shared_prompts(np.random.default_rng(3), 8, 17)
    prompts += [prompts[0] + [5, 6, 7, 8, 9]]  # a later turn that extends an earlier prompt
    on = serve_greedy(prompts, num_blocks, caching=True)
    off = serve_greedy(prompts, num_blocks, caching=False)
    assert_same_outputs_and_kv(on, off)
    assert sum(s.num_cached_tokens for s in on.seqs) > 0  # the cache did serve prefixes
    if num_blocks == 12:
        assert on.scheduler.num_preemptions > 0 and off.scheduler.num_preemptions > 0


def test_requests_admitted_in_one_step_share_the_prefix_the_first_of_them_fills():
    # as vLLM registers a block when it schedules it: four prompts sharing 16 tokens, sent at
    # once, prefill them once in their first step, and compute what caching off computes
    prompts = shared_prompts(np.random.default_rng(5), 4, 16)
    on = serve_greedy(prompts, 64, caching=True, max_num_seqs=4, per_step=4,
                      max_num_batched_tokens=128)
    first = on.plans[0]
    assert len(first.prefills) == 4 and first.cached_tokens == 3 * 16
    assert [s.num_cached_tokens for s in on.seqs] == [0, 16, 16, 16]
    assert_same_outputs_and_kv(on, serve_greedy(prompts, 64, max_num_seqs=4, per_step=4,
                                                max_num_batched_tokens=128))


def failing_step(engine, seq) -> None:
    """Run the engine's next step with its executor raising, then abort `seq`, as the HTTP
    server aborts the requests of a step that failed."""
    execute = engine.executor.execute
    engine.executor.execute = lambda plan, **kw: (_ for _ in ()).throw(MemoryError("injected"))
    with pytest.raises(MemoryError):
        engine.step()
    engine.executor.execute = execute
    engine.abort_request(seq)


def test_a_step_that_raises_leaves_none_of_the_blocks_it_was_to_fill_findable():
    # a prefill's blocks are registered when planned; when its step fails before it runs (the
    # server fails that step's requests and goes on), they hold no KV, so the same prompt
    # sent again computes them, and its greedy output is the engine's without the failure
    prompt = list(range(1, 10))  # two full blocks of 4, then one token

    def engine():
        bm = PrefixCachingBlockManager(32, 4)
        executor = NumpyExecutor(init_params(MODEL), bm, rng=np.random.default_rng(0))
        return LLMEngine(Scheduler(SchedulerConfig(max_seq_len=64), bm), executor)

    def served(engine):
        seq = Sequence("again", len(prompt), 4, prompt_token_ids=prompt, sampling=GREEDY)
        engine.add_request(seq)
        while engine.has_unfinished():
            engine.step()
        return seq

    failing = engine()
    first = Sequence("failed", len(prompt), 4, prompt_token_ids=prompt, sampling=GREEDY)
    failing.add_request(first)
    failing_step(failing, first)
    assert failing.scheduler.block_manager.num_cached == 0
    again, reference = served(failing), served(engine())
    assert again.num_cached_tokens == 0
    assert again.output_token_ids == reference.output_token_ids


def test_a_failed_step_forgets_the_partly_filled_block_its_chunk_was_to_complete(fake_executor):
    bm = PrefixCachingBlockManager(16, 4)
    config = SchedulerConfig(max_seq_len=64, chunked_prefill=True, max_num_batched_tokens=6,
                             max_num_seqs=2)
    engine = LLMEngine(Scheduler(config, bm), fake_executor(bm))
    prompt = list(range(1, 14))  # 13 tokens: blocks of 4
    seq = Sequence("a", 13, 2, prompt_token_ids=prompt)
    engine.add_request(seq)
    engine.step()  # tokens 0-5: block 0 full and cached, block 1 half written
    failing_step(engine, seq)  # tokens 6-11: blocks 1 and 2 registered, never written
    hashes = block_hashes(Sequence("b", 13, 2, prompt_token_ids=prompt), 4, 3)
    assert len(bm.match_prefix(hashes, 3)) == 1  # block 0 alone


def test_a_failed_step_keeps_the_cached_prefix_a_request_found(fake_executor):
    bm = PrefixCachingBlockManager(16, 4)
    engine = LLMEngine(Scheduler(SchedulerConfig(max_seq_len=64), bm), fake_executor(bm))
    system = list(range(1, 9))  # two full blocks, shared
    engine.add_request(Sequence("a", 9, 1, prompt_token_ids=system + [20]))
    engine.step()  # a's prompt computed and its two blocks cached; a finishes
    b = Sequence("b", 13, 1, prompt_token_ids=system + [30, 31, 32, 33, 34])
    engine.add_request(b)
    failing_step(engine, b)  # b took the two blocks, registered its third; the step failed
    assert bm.num_cached == 2 and b.num_cached_tokens == 8


# --- random workloads: no leaked, double freed or wrongly shared block ----------------------

workload_st = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 20), st.integers(1, 10)),
                       min_size=1, max_size=16)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workload_st, block_size=st.sampled_from([1, 2, 4]),
       cache_tokens=st.integers(12, 80), chunked=st.booleans(),
       policy=st.sampled_from(["continuous", "static"]))
def test_random_shared_prefix_workloads_never_leak_double_free_or_share_wrongly(
        workload, block_size, cache_tokens, chunked, policy, fake_executor):
    bm = PrefixCachingBlockManager(max(2, cache_tokens // block_size), block_size)
    config = SchedulerConfig(policy=policy, max_num_seqs=3, max_num_batched_tokens=24,
                             max_seq_len=40, chunked_prefill=chunked and policy == "continuous",
                             max_batch_size=3)
    scheduler = Scheduler(config, bm)
    executor = fake_executor(bm)
    engine = LLMEngine(scheduler, executor, RunRecorder(bm.num_blocks), timing="executor")
    prefixes = [[1] * 9, [2] * 5, list(range(12)), []]
    seqs = [Sequence(f"r{i}", len(prefixes[p]) + extra, out,
                     prompt_token_ids=prefixes[p] + [30 + i] * extra)
            for i, (p, extra, out) in enumerate(workload)]
    for seq in seqs:
        engine.add_request(seq)
    for _ in range(2000):
        if not engine.has_unfinished():
            break
        engine.step()
        bm.check_invariants()
        for seq in scheduler.running:  # every shared block holds what its hash says
            hashes = block_hashes(seq, block_size, seq.num_computed_tokens // block_size)
            for i, block in enumerate(bm.block_tables[seq.seq_id][:len(hashes)]):
                cached = bm._hash_of.get(block)
                assert cached is None or cached == hashes[i]
    assert not engine.has_unfinished()
    assert all(s.is_finished for s in seqs)
    assert bm.num_used == 0 and not bm.block_tables
