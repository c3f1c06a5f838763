"""The continuous-batching policy's building blocks on KV blocks: whether blocks are free, admit a
sequence, preempt one, and reserve every decoding sequence's next KV slot. `Scheduler` plans
with them, and so do the engine's part 6 functions in `continuous_batching.py`: there is one copy
of admission and preemption. `PromisedBlocks` is the guaranteed-no-evict capacity policy's
account of the blocks admitted sequences will still take.
"""

from __future__ import annotations

import itertools

from .block_manager import BlockManager, blocks_needed
from .sequence import Sequence, SequenceStatus
from .swap import SwapSpace

__all__ = ["has_free_capacity", "admit_sequence", "preempt_sequence", "needs_new_block",
           "reserve_decode_blocks", "peak_blocks", "promised_blocks", "PromisedBlocks"]

_RUNNING = SequenceStatus.RUNNING
# Statuses of a waiting sequence whose KV is computed (swapped out, or prefilled by another
# engine): it is readmitted with blocks for its computed tokens and the step's, without
# prefilling them again
RESUMING = (SequenceStatus.SWAPPED, SequenceStatus.TRANSFERRED)
_admission_counter = itertools.count()  # admit_order: only its relative order matters


def has_free_capacity(block_manager: BlockManager, required_blocks: int) -> bool:
    """True when at least `required_blocks` KV blocks are free."""
    return block_manager.num_free >= required_blocks


def admit_sequence(seq: Sequence, block_manager: BlockManager, n_tokens: int | None = None) -> None:
    """Reserve blocks for the first `n_tokens` of the sequence (None: every token it has, its
    prompt plus the generated tokens when it recomputes after a preemption) and mark it running.
    Raises OutOfBlocksError, all or nothing."""
    block_manager.ensure_capacity(seq.seq_id, seq.num_tokens if n_tokens is None else n_tokens)
    seq.set_status(_RUNNING)
    seq.admit_order = next(_admission_counter)


def preempt_sequence(seq: Sequence, block_manager: BlockManager, waiting,
                     swap: SwapSpace | None = None, front: bool = True) -> list[tuple[int, int]]:
    """Preempt the sequence and requeue it (fcfs: at the front, or not `front` at the back;
    priority: at its original priority and arrival). By recompute: free its blocks and forget
    its computed KV. With a `swap` space that has room for the blocks holding its computed KV:
    give them host blocks, free them, keep the computed count; returns the (gpu, host) block
    pairs to copy out."""
    pairs = []
    n = blocks_needed(seq.num_computed_tokens, block_manager.block_size)
    if swap is not None and 0 < n <= swap.num_free:
        pairs = swap.swap_out(seq.seq_id, block_manager.block_tables[seq.seq_id][:n])
    block_manager.free_sequence(seq.seq_id)
    if not pairs:
        seq.num_computed_tokens = 0
    seq.preemptions += 1
    seq.set_status(SequenceStatus.SWAPPED if pairs else SequenceStatus.PREEMPTED)
    (waiting.push_front if front else waiting.push)(seq)
    return pairs


def needs_new_block(seq: Sequence, block_size: int, table: list) -> bool:
    """Whether the decode of a sequence holding the blocks `table` needs one more: the KV row it
    writes (prompt_len + outputs - 1; rows before it are stored) starts a block it lacks."""
    row = seq.prompt_len + seq.num_output_tokens - 1
    return not row % block_size and len(table) * block_size <= row


def reserve_decode_blocks(running: list, block_manager: BlockManager, preempt_last,
                          prefilling: list | None = None) -> list:
    """Give every decoding sequence of `running` room for the KV of its next token. When a block
    is needed and none is free, `preempt_last()` is called; it must preempt `running[-1]` and
    remove it from the list (the victim always comes after the sequence in need, or is that
    sequence itself). Returns the sequences that decode this step, in running order; sequences
    still prefilling are appended to `prefilling` when a list is given."""
    bm, block_size, tables = block_manager, block_manager.block_size, block_manager.block_tables
    decodes = []
    append = decodes.append  # the hot loop of a simulation: one pass, locals only
    for seq in running:  # a victim is popped from the end: the loop stops before it
        row = seq.prompt_len + seq.num_output_tokens - 1  # the KV row this decode writes
        if seq.num_computed_tokens < row:
            if prefilling is not None:
                prefilling.append(seq)
            continue
        # Rows 0 .. row-1 are stored, so only a row at a block boundary can lack room
        # (`needs_new_block`, inlined: the hot loop)
        if not row % block_size and len(tables[seq.seq_id]) * block_size <= row:
            while not bm.num_free and running[-1] is not seq:
                preempt_last()
            if not bm.num_free:  # no one is left behind it: it is the victim itself
                preempt_last()
                break
            bm.allocate_block(seq.seq_id)
        append(seq)
    return decodes


def peak_blocks(seq: Sequence, block_size: int) -> int:
    """The most KV blocks the sequence ever holds: those of its prompt and every output token
    but the last, whose KV is never stored."""
    return blocks_needed(seq.prompt_len + seq.max_new_tokens - 1, block_size)


def promised_blocks(seq: Sequence, block_size: int, prefill_only: bool = False) -> int:
    """The blocks the guaranteed-no-evict policy promises a sequence, counted as TensorRT-LLM
    counts a request's blocks to completion (`KVCacheManager::getRemainingBlocksToCompletion`):
    a slot for its prompt and each of its `max_new_tokens` tokens, the last one's included
    (which servesim, as vLLM, never stores: at most one block more than it ever holds); on a
    prefill-only engine, which hands it off after its first token, its prompt and that
    token."""
    new_tokens = 1 if prefill_only else seq.max_new_tokens
    return blocks_needed(seq.prompt_len + new_tokens, block_size)


class PromisedBlocks:
    """The guaranteed-no-evict capacity policy's room, for one round of admission (TensorRT-LLM's
    GUARANTEED_NO_EVICT, its default: `NoEvictScheduledBlocksManager`): the free blocks less the
    blocks every sequence holding some is still owed (`promised_blocks` less those it holds). A
    sequence is admitted only if all its promised blocks fit in that room, cached blocks it
    would find included (TensorRT-LLM charges a request not yet running for all of them); so no
    admitted sequence ever waits for a block, and none is preempted. Counted when first asked
    (a round that reaches no candidate asks nothing): O(sequences holding blocks)."""

    __slots__ = ("block_manager", "holders", "prefill_only", "room")

    def __init__(self, block_manager: BlockManager, holders, prefill_only: bool = False):
        self.block_manager = block_manager
        self.holders = holders  # the sequences holding blocks that will still grow
        self.prefill_only = prefill_only
        self.room: int | None = None

    def owed(self, seq: Sequence) -> int:
        """The blocks promised to the sequence beyond those it holds."""
        bm = self.block_manager
        promised = promised_blocks(seq, bm.block_size, self.prefill_only)
        return max(promised - len(bm.block_tables.get(seq.seq_id, ())), 0)

    def take(self, seq: Sequence) -> bool:
        """Whether the blocks owed to the sequence fit in the room; if they do, they are
        promised to it (the room shrinks by them)."""
        if self.room is None:
            owed = self.owed
            self.room = self.block_manager.num_free - sum(owed(held) for held in self.holders)
        need = self.owed(seq)
        if need > self.room:
            return False
        self.room -= need
        return True
