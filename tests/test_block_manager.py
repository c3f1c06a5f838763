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
