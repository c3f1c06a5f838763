"""KV-block bookkeeping: the free list and each sequence's block table. No tensors live here.

The scheduler asks it whether blocks are free, the executor reads block tables to find where a
token's keys and values go, and the simulator uses the very same object with no KV storage at all.
Blocks are handed out last-freed-first (a stack), which keeps recently used memory warm.
"""

from __future__ import annotations


class OutOfBlocksError(RuntimeError):
    """No free KV block is left."""


class BlockError(ValueError):
    """A block id that is invalid, already free, or not owned by the sequence named."""


def blocks_needed(n_tokens: int, block_size: int) -> int:
    """KV blocks that hold n_tokens tokens: ceil(n_tokens / block_size); 0 for 0."""
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return -(-n_tokens // block_size)


class BlockManager:
    """Free list plus block tables for `num_blocks` blocks of `block_size` token slots.

    Memory grows with the blocks ever used, not with `num_blocks`: the free list is the blocks
    returned so far (a stack: the last freed is handed out first) above the never-used blocks
    `fresh` and up, which are handed out in increasing order and need no entry until then. This
    is exactly a list of every free block, initially n-1 .. 0, popped from the end. Taking and
    freeing cost O(blocks moved) in C list operations; only `free_block`, the part 4 one-block
    free, searches the free list (to refuse a double free).

    `state_blocks` > 0 (a simulated model with linear-attention layers under vLLM, whose hybrid
    cache manager takes each running request's state from the KV blocks' pool): a sequence's
    state takes that many blocks from the time it first holds a block until it frees them all
    (`free_sequence`). They are counted, not handed out (no block id: nothing reads a state's
    slots), so `num_free` and `num_used` count them and the tables hold KV blocks alone."""

    prefix_caching = False  # engine.prefix_cache.PrefixCachingBlockManager: True

    def __init__(self, num_blocks: int, block_size: int, state_blocks: int = 0):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}")
        if state_blocks < 0:
            raise ValueError(f"state_blocks must be >= 0, got {state_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._returned: list[int] = []  # freed blocks, the last freed at the end
        self._fresh = 0  # blocks fresh.. num_blocks - 1 were never handed out
        self.block_tables: dict[int, list[int]] = {}
        self.state_blocks = state_blocks  # blocks a sequence's state takes (class docstring)
        self._states: set[int] = set()  # sequences whose state takes them
        self._state_held = 0  # blocks those states take

    # --- queries ---------------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self._returned) + self.num_blocks - self._fresh - self._state_held

    @property
    def num_used(self) -> int:
        return self._fresh - len(self._returned) + self._state_held

    def state_to_hold(self, seq_id: int) -> int:
        """Blocks the sequence's state takes when it first holds a block (0: it holds them,
        or states take none)."""
        return self.state_blocks if self.state_blocks and seq_id not in self._states else 0

    def can_allocate(self, n_blocks: int) -> bool:
        return n_blocks <= self.num_free

    def blocks_to_hold(self, seq_id: int, n_tokens: int) -> int:
        """How many more blocks `seq_id` needs so that its table holds n_tokens tokens (its
        state's with them, where it takes none yet)."""
        have = len(self.block_tables.get(seq_id, ()))
        return max(0, -(-n_tokens // self.block_size) - have) + self.state_to_hold(seq_id)

    def capacity(self, seq_id: int) -> int:
        """Token slots the sequence's table provides."""
        return len(self.block_tables.get(seq_id, ())) * self.block_size

    def is_free(self, block_id: int) -> bool:
        """O(free blocks returned): for checks, not for the hot path."""
        return block_id >= self._fresh or block_id in self._returned

    # --- mutations -------------------------------------------------------------------------------

    def _take(self, n: int) -> list[int]:
        """The next n free blocks, in the order they are handed out (n <= num_free)."""
        returned = self._returned
        k = min(n, len(returned))
        taken = returned[len(returned) - k:]
        del returned[len(returned) - k:]
        taken.reverse()
        if n > k:
            start = self._fresh
            self._fresh += n - k
            taken.extend(range(start, self._fresh))
        return taken

    def _hold_states(self, seq_ids, blocks: int) -> None:
        """Take the states of the sequences among `seq_ids` that take none yet, beside
        `blocks` KV blocks: all or nothing (OutOfBlocksError)."""
        new = {seq_id for seq_id in seq_ids if seq_id not in self._states}
        if blocks + len(new) * self.state_blocks > self.num_free:
            raise OutOfBlocksError(f"{blocks} KV blocks and {len(new)} states of "
                                   f"{self.state_blocks} blocks asked for, {self.num_free} free")
        self._states |= new
        self._state_held += len(new) * self.state_blocks

    def allocate_block(self, seq_id: int) -> int:
        """Append one free block to the sequence's table and return its id (`_take(1)`,
        inlined: a decoding sequence takes its blocks one at a time)."""
        if self.state_blocks:
            if seq_id not in self._states:
                self._hold_states((seq_id,), 1)
            elif not self.num_free:  # the blocks left are states'
                raise OutOfBlocksError(f"no free KV block for sequence {seq_id} "
                                       f"(all {self.num_blocks} in use or states')")
        returned = self._returned
        if returned:
            block = returned.pop()
        elif self._fresh < self.num_blocks:
            block = self._fresh
            self._fresh += 1
        else:
            raise OutOfBlocksError(f"no free KV block for sequence {seq_id} "
                                   f"(all {self.num_blocks} in use)")
        self.block_tables.setdefault(seq_id, []).append(block)
        return block

    def allocate_blocks(self, seq_ids: list[int]) -> None:
        """One more block for each sequence id in turn (an id may come more than once): the
        blocks `allocate_block` would hand out called in that order, all or nothing."""
        n = len(seq_ids)
        if self.state_blocks:
            self._hold_states(seq_ids, n)
        if n > self.num_free:
            raise OutOfBlocksError(f"{n} KV blocks asked for, {self.num_free} free")
        tables = self.block_tables
        for seq_id, block in zip(seq_ids, self._take(n)):
            tables.setdefault(seq_id, []).append(block)

    def ensure_capacity(self, seq_id: int, n_tokens: int) -> None:
        """Grow the table to hold n_tokens tokens, all or nothing."""
        need = self.blocks_to_hold(seq_id, n_tokens)
        if need > self.num_free:
            raise OutOfBlocksError(f"sequence {seq_id} needs {need} more KV blocks, "
                                   f"{self.num_free} free")
        if self.state_blocks:
            need -= self.state_to_hold(seq_id)
            if need:  # a state is taken with the sequence's first block
                self._hold_states((seq_id,), need)
        if need:
            self.block_tables.setdefault(seq_id, []).extend(self._take(need))

    def free_block(self, block_id: int, seq_id: int | None = None) -> None:
        """Return one block to the free list. Invalid ids and double frees raise `BlockError`."""
        if not (isinstance(block_id, int) and 0 <= block_id < self.num_blocks):
            raise BlockError(f"invalid block id {block_id!r} (cache has {self.num_blocks} blocks)")
        if self.is_free(block_id):
            raise BlockError(f"double free of block {block_id}")
        if seq_id is not None:
            table = self.block_tables.get(seq_id, [])
            if block_id not in table:
                raise BlockError(f"block {block_id} is not held by sequence {seq_id}")
            table.remove(block_id)
        else:
            for table in self.block_tables.values():
                if block_id in table:
                    table.remove(block_id)
                    break
        self._returned.append(block_id)

    def free_sequence(self, seq_id: int) -> int:
        """Free every block the sequence holds (and its state's); returns how many KV blocks.
        Unknown ids free nothing."""
        table = self.block_tables.pop(seq_id, ())
        self._returned.extend(reversed(table))
        if seq_id in self._states:
            self._states.discard(seq_id)
            self._state_held -= self.state_blocks
        return len(table)

    def usage(self) -> dict:
        """{"used", "free", "total"} block counts."""
        return {"used": self.num_used, "free": self.num_free, "total": self.num_blocks}

    def free_list(self) -> list[int]:
        """Every free block, in the order they would be handed out (for tests: O(num_blocks))."""
        return self._returned[::-1] + list(range(self._fresh, self.num_blocks))

    def check_invariants(self) -> None:
        """Every block is either free or in exactly one table (for tests)."""
        held = [b for table in self.block_tables.values() for b in table]
        free = self.free_list()
        assert len(held) == len(set(held)), "a block is held twice"
        assert not set(held) & set(free), "a held block is also free"
        assert len(held) + len(free) == self.num_blocks, "a block leaked"
        assert len(free) == len(set(free)), "a block is free twice"
        assert self._state_held == len(self._states) * self.state_blocks <= len(free), \
            "a state's blocks miscounted"
        assert self._states <= set(self.block_tables), "a state taken without a block"
