"""Property tests of the block bookkeeping and the paged allocator built on it.

Random sequences of allocate / append / free / free-sequence operations are checked against a
plain model: no block is ever handed out twice, none leaks, every stored token reads back as
written, and exhaustion or a double free raises a clear error that leaves everything unchanged.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from engine.block_manager import BlockError, BlockManager, OutOfBlocksError, blocks_needed
from engine.paged_kv_cache import (allocate_block, append_to_paged_cache, free_block,
                                   free_sequence_blocks, gather_kv_from_blocks,
                                   init_block_allocator, kv_blocks_in_use)

SEQS = st.integers(0, 3)
D_MODEL = 4


class PagedAllocatorMachine(RuleBasedStateMachine):
    """The allocator against a model: per sequence, the rows stored and the blocks held."""

    def __init__(self):
        super().__init__()
        self.num_blocks, self.block_size = 7, 3
        self.alloc = init_block_allocator(self.num_blocks, self.block_size, D_MODEL)
        self.stored = {}  # seq -> list of stored rows (the model)
        self.counter = 0.0

    def _rows(self, n):
        start = self.counter
        self.counter += n
        return np.arange(start, start + n, dtype=np.float32)[:, None].repeat(D_MODEL, 1)

    @rule(seq=SEQS, n=st.integers(1, 8))
    def append(self, seq, n):
        bm = self.alloc.block_manager
        stored = self.stored.get(seq, [])
        need = bm.blocks_to_hold(seq, len(stored) + n)
        free_before, rows = bm.num_free, self._rows(n)
        if need > free_before:
            with pytest.raises(OutOfBlocksError):
                append_to_paged_cache(self.alloc, seq, rows, -rows)
            assert bm.num_free == free_before  # all or nothing
        else:
            append_to_paged_cache(self.alloc, seq, rows, -rows)
            self.stored[seq] = stored + list(rows)

    @rule(seq=SEQS)
    def allocate(self, seq):
        bm = self.alloc.block_manager
        if bm.num_free == 0:
            with pytest.raises(OutOfBlocksError):
                allocate_block(self.alloc, seq)
        else:
            block = allocate_block(self.alloc, seq)
            assert bm.block_tables[seq][-1] == block
            self.stored.setdefault(seq, [])

    @rule(seq=SEQS)
    def free_sequence(self, seq):
        held = len(self.alloc.block_manager.block_tables.get(seq, []))
        assert free_sequence_blocks(self.alloc, seq) == held
        self.stored.pop(seq, None)

    @rule(data=st.data())
    def free_one_block(self, data):
        block = data.draw(st.integers(0, self.num_blocks - 1))
        bm = self.alloc.block_manager
        owner = next((s for s, t in bm.block_tables.items() if block in t), None)
        holds_tokens = owner is not None and \
            len(self.stored.get(owner, [])) > bm.block_tables[owner].index(block) * self.block_size
        if owner is None or holds_tokens:  # free already (double free) or holding data
            with pytest.raises(BlockError):
                free_block(self.alloc, block)
        else:
            free_block(self.alloc, block)
            assert block not in bm.block_tables[owner]

    @invariant()
    def no_block_twice_and_none_leaked(self):
        bm = self.alloc.block_manager
        bm.check_invariants()
        usage = kv_blocks_in_use(self.alloc)
        assert usage["used"] + usage["free"] == usage["total"] == self.num_blocks

    @invariant()
    def every_stored_token_reads_back(self):
        for seq, stored in self.stored.items():
            if stored:
                k, v = gather_kv_from_blocks(self.alloc, seq)
                np.testing.assert_array_equal(k, np.array(stored))
                np.testing.assert_array_equal(v, -np.array(stored))

    @invariant()
    def tables_hold_the_stored_tokens(self):
        bm = self.alloc.block_manager
        for seq, stored in self.stored.items():
            assert bm.capacity(seq) >= len(stored)


TestPagedAllocatorMachine = PagedAllocatorMachine.TestCase
TestPagedAllocatorMachine.settings = settings(max_examples=60, stateful_step_count=40,
                                              deadline=None)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(SEQS, st.integers(0, 12)), max_size=30))
def test_ensure_capacity_is_all_or_nothing(requests):
    bm = BlockManager(9, 4)
    for seq, n_tokens in requests:
        need, free = bm.blocks_to_hold(seq, n_tokens), bm.num_free
        held = list(bm.block_tables.get(seq, []))
        if need > free:
            with pytest.raises(OutOfBlocksError):
                bm.ensure_capacity(seq, n_tokens)
            assert bm.block_tables.get(seq, []) == held and bm.num_free == free
        else:
            bm.ensure_capacity(seq, n_tokens)
            assert bm.capacity(seq) >= n_tokens
            assert len(bm.block_tables.get(seq, [])) == max(len(held), blocks_needed(n_tokens, 4))
        bm.check_invariants()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=12))
def test_freed_blocks_are_handed_out_again_and_never_twice(sizes):
    bm = BlockManager(10, 2)
    live = {}
    for seq, n in enumerate(sizes):
        while bm.num_free < blocks_needed(n, 2):
            victim = next(iter(live))
            assert bm.free_sequence(victim) == len(live.pop(victim))
        bm.ensure_capacity(seq, n)
        live[seq] = list(bm.block_tables[seq])
        held = [b for table in live.values() for b in table]
        assert len(held) == len(set(held))
    for seq in list(live):
        bm.free_sequence(seq)
    assert bm.num_free == 10 and not bm.block_tables


def test_double_free_through_the_manager_names_the_block():
    bm = BlockManager(2, 2)
    block = bm.allocate_block(0)
    bm.free_block(block)
    with pytest.raises(BlockError, match=f"double free of block {block}"):
        bm.free_block(block)
    with pytest.raises(BlockError, match="not held by sequence"):
        bm.free_block(bm.allocate_block(1), seq_id=0)


class ListFreeList:
    """The block manager's free list as a plain list of every free block (n-1 .. 0, popped from
    the end; freed blocks pushed on top): what `BlockManager` must behave as, without holding it."""

    def __init__(self, n: int):
        self.free = list(range(n - 1, -1, -1))

    def take(self, k: int) -> list[int]:
        taken = self.free[len(self.free) - k:]
        del self.free[len(self.free) - k:]
        return taken[::-1]

    def give(self, blocks: list[int]) -> None:
        self.free.extend(reversed(blocks))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["one", "many", "ensure", "free"]),
                          st.integers(0, 5), st.integers(1, 6)), max_size=60))
def test_blocks_are_handed_out_as_a_list_of_every_free_block_would(ops):
    bm, ref = BlockManager(24, 4), ListFreeList(24)
    for op, seq, n in ops:
        if op == "free":
            ref.give(bm.block_tables.get(seq, []))
            bm.free_sequence(seq)
        elif op == "one" and bm.num_free:
            assert bm.allocate_block(seq) == ref.take(1)[0]
        elif op == "many" and n <= bm.num_free:
            before = {s: list(t) for s, t in bm.block_tables.items()}
            bm.allocate_blocks([seq] * n)
            assert bm.block_tables[seq] == before.get(seq, []) + ref.take(n)
        elif op == "ensure":
            need = bm.blocks_to_hold(seq, n * 4 + len(bm.block_tables.get(seq, [])) * 4)
            if need <= bm.num_free:
                before = list(bm.block_tables.get(seq, []))
                bm.ensure_capacity(seq, n * 4 + len(before) * 4)
                assert bm.block_tables.get(seq, []) == before + ref.take(need)
        assert bm.free_list() == ref.free[::-1]
        bm.check_invariants()


def test_a_huge_cache_costs_memory_only_for_the_blocks_used():
    bm = BlockManager(10**12, 16)  # a trillion blocks: nothing is allocated per free block
    bm.ensure_capacity(0, 16 * 1000)
    assert bm.num_used == 1000 and bm.num_free == 10**12 - 1000
    bm.free_sequence(0)
    assert bm.num_free == 10**12 and len(bm._returned) == 1000  # what it keeps: blocks used
    assert bm.is_free(999) and bm.is_free(10**12 - 1)
