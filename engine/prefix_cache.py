"""Automatic prefix caching, as vLLM does it: a full KV block is known by a hash of its tokens
chained with its parent block's hash, and a new sequence starts from the blocks of its longest
cached prefix instead of computing them again.

`PrefixCachingBlockManager` is a `BlockManager` whose blocks are reference counted: a block held
by several sequences (a shared system prompt, the earlier turns of a conversation) is stored
once and read by all of them; nobody writes into it, since only full blocks are shared and a
sequence writes its keys and values after its cached prefix. When the last holder lets a block
go it stays cached (its hash still finds it) and joins the evictable blocks, least recently
freed first; a block is taken from there, and its hash forgotten, only when no never-used block
is left. Two blocks may hold the same content (a prompt of exactly k cached blocks computes its
last block again, into one of its own): both stay cached, as in vLLM, and a lookup finds the
one registered first, then the next once that one is evicted. `num_free` counts never-used
and evictable blocks alike, `num_used` the blocks held.
Free blocks that no hash finds and that were freed before every cached one are kept apart, in
no order (none of them changes what a hash finds), and until a hash finds a block no reference
count is kept (nothing is shared then: a block is shared only once a hash found it, and it
stays cached while held); the counts are set from the block tables when the first block is
registered, and kept from then on (counting them again each time the cache emptied and filled,
as every preemption under memory pressure does, took a pass over every held block). A run of
requests that share nothing frees and takes blocks as plainly as a `BlockManager` does.

Blocks are known by their hashes (`block_hashes.py`). The scheduler asks `match_prefix` at
admission, takes the blocks with `take_prefix`, and registers each block that its step fills
with `cache_block` (and forgets those of a step that failed before it ran, `uncache`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import repeat

from .block_manager import BlockError, BlockManager, OutOfBlocksError


def consume(iterator) -> None:
    """Run `iterator` to its end at C speed (a reference count set for many blocks at once)."""
    deque(iterator, maxlen=0)


class PrefixCachingBlockManager(BlockManager):
    """A block manager with reference-counted, hash-addressed full blocks (see the module)."""

    prefix_caching = True

    def __init__(self, num_blocks: int, block_size: int):
        super().__init__(num_blocks, block_size)
        # [fresh]: holders of each block handed out; kept once `_counted` (until the first block
        # is cached, every block handed out and not loose has one holder)
        self._refs: list[int] = []
        self._counted = False
        # The free blocks handed out before, least recently freed first: `_loose`, none of
        # them cached and all freed before any of `_evictable` (so their order matters to no
        # eviction, and they are taken as a stack), then `_evictable`, in order
        self._loose: list[int] = []
        self._evictable: OrderedDict = OrderedDict()
        self._cached_free = 0  # blocks of `_evictable` that a hash finds
        self._hash_of: dict[int, int] = {}  # block -> hash, for every cached block
        self._block_of: dict[int, int] = {}  # hash -> the cached block a lookup finds
        # hash -> later copies of that block's content, registered after it, oldest first
        # (as vLLM keeps them: one found when the first is evicted)
        self._copies: dict[int, list[int]] = {}
        self.evictions = 0

    # --- queries ---------------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self._loose) + len(self._evictable) + self.num_blocks - self._fresh

    @property
    def num_used(self) -> int:
        return self._fresh - len(self._loose) - len(self._evictable)

    @property
    def num_cached(self) -> int:
        """Blocks registered under a hash (held or evictable; a later copy of a block's
        content included)."""
        return len(self._hash_of)

    def is_free(self, block_id: int) -> bool:
        if block_id >= self._fresh:
            return True
        return not self._refs[block_id] if self._counted else block_id in self._loose

    def ref_count(self, block_id: int) -> int:
        if self._counted:
            return 0 if block_id >= self._fresh else self._refs[block_id]
        return 0 if self.is_free(block_id) else 1

    def match_prefix(self, hashes, max_blocks: int) -> list[int]:
        """The cached blocks of the longest prefix of `hashes` (at most `max_blocks`)."""
        found, block_of = [], self._block_of
        for h in hashes[:max_blocks]:
            block = block_of.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def evictable_among(self, blocks) -> int:
        """How many of `blocks` nobody holds (taking them uses up free blocks)."""
        refs = self._refs
        return sum(1 for b in blocks if not refs[b])

    # --- mutations -------------------------------------------------------------------------------

    def _take(self, n: int) -> list[int]:
        """The next n free blocks: never-used ones first, then the least recently freed ones
        (a cached one's hash forgotten)."""
        fresh = min(n, self.num_blocks - self._fresh)
        taken = list(range(self._fresh, self._fresh + fresh))
        self._fresh += fresh
        refs, loose, counted = self._refs, self._loose, self._counted
        if counted:
            refs.extend([1] * fresh)
        if n > fresh and loose:  # the oldest: none cached, in no order that matters
            k = min(n - fresh, len(loose))
            some = loose[:-k - 1:-1]  # top first, as `allocate_block` takes them one by one
            del loose[-k:]
            if counted:
                consume(map(refs.__setitem__, some, repeat(1, k)))
            taken += some
        if n == len(taken):
            return taken
        evictable, hash_of = self._evictable, self._hash_of
        pop, forget, evicted = evictable.popitem, hash_of.pop, 0
        for _ in range(n - len(taken)):
            block = pop(last=False)[0]
            h = forget(block, None)
            if h is not None:
                self._unfind(block, h)
                evicted += 1
            refs[block] = 1
            taken.append(block)
        self.evictions += evicted
        self._cached_free -= evicted
        self._loosen()
        return taken

    def _unfind(self, block: int, h: int) -> None:
        """The evicted `block` no longer holds the content of hash `h`: its next copy, if
        any, is what a lookup finds."""
        copies = self._copies.get(h)
        if self._block_of[h] == block:
            if copies:
                self._block_of[h] = copies.pop(0)
            else:
                del self._block_of[h]
                return
        else:
            copies.remove(block)
        if not copies:
            del self._copies[h]

    def _loosen(self) -> None:
        """With no cached block left among the ordered free ones, their order no longer
        matters: they join the loose ones."""
        if not self._cached_free and self._evictable:
            self._loose.extend(self._evictable)
            self._evictable.clear()

    def _freed(self, block: int) -> None:
        """A block nobody holds any more joins the free ones, behind every earlier one."""
        if block in self._hash_of:
            self._evictable[block] = None
            self._cached_free += 1
        elif self._evictable:
            self._evictable[block] = None
        else:
            self._loose.append(block)

    def allocate_block(self, seq_id: int) -> int:
        """Append one free block (a never-used one, else the least recently freed cached one)
        to the sequence's table and return its id."""
        if self._loose and self._fresh == self.num_blocks:  # the common case, inlined
            block = self._loose.pop()
            if self._counted:
                self._refs[block] = 1
        elif not self.num_free:
            raise OutOfBlocksError(f"no free KV block for sequence {seq_id} "
                                   f"(all {self.num_blocks} in use)")
        else:
            block = self._take(1)[0]
        self.block_tables.setdefault(seq_id, []).append(block)
        return block

    def take_prefix(self, seq_id: int, blocks: list[int]) -> None:
        """Give a sequence (with no blocks yet) the cached blocks of its prefix."""
        refs, evictable = self._refs, self._evictable
        for block in blocks:
            if not refs[block]:  # free and cached: among the ordered ones
                del evictable[block]
                self._cached_free -= 1
            refs[block] += 1
        self.block_tables[seq_id] = list(blocks)
        self._loosen()

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Register a block its holder just filled: its hash finds it from now on, or, where
        a block of the same content is cached already, once those registered before it are
        evicted (vLLM keeps such copies too)."""
        self.cache_filled([block_id], [block_hash])

    def cache_filled(self, blocks, hashes) -> None:
        """`cache_block` for each (block, hash) pair of two equal-length sequences (held
        blocks: a free one's place among the free ones would no longer say when it goes)."""
        if not blocks:
            return
        if not self._counted:
            self._count_refs()
        block_of, hash_of, refs, fresh = self._block_of, self._hash_of, self._refs, self._fresh
        for block_id, block_hash in zip(blocks, hashes):
            if block_id >= fresh or not refs[block_id]:
                raise BlockError(f"block {block_id} is free: only a held block is cached")
            if block_id in hash_of:
                continue  # registered already (a block holds one content while cached)
            hash_of[block_id] = block_hash
            if block_of.setdefault(block_hash, block_id) != block_id:
                self._copies.setdefault(block_hash, []).append(block_id)

    def uncache(self, blocks) -> None:
        """Forget the hashes of held `blocks` (registered for a step that failed before it
        wrote them, `Scheduler.forget_planned`): no lookup finds them from now on."""
        hash_of, refs = self._hash_of, self._refs
        for block in blocks:
            block_hash = hash_of.pop(block, None)
            if block_hash is not None:
                assert refs[block], f"block {block} is free: only a held block is uncached"
                self._unfind(block, block_hash)

    def _count_refs(self) -> None:
        """Set the reference counts, kept from now on, from the block tables (nothing is
        cached yet, so no block is shared)."""
        refs = self._refs = [0] * self._fresh
        for table in self.block_tables.values():
            consume(map(refs.__setitem__, table, repeat(1, len(table))))
        self._counted = True

    def free_block(self, block_id: int, seq_id: int | None = None) -> None:
        """Drop one holder's reference to a block (the block leaves that holder's table)."""
        if not (isinstance(block_id, int) and 0 <= block_id < self.num_blocks):
            raise BlockError(f"invalid block id {block_id!r} (cache has {self.num_blocks} blocks)")
        if self.is_free(block_id):
            raise BlockError(f"double free of block {block_id}")
        tables = [self.block_tables.get(seq_id, [])] if seq_id is not None else \
            [t for t in self.block_tables.values() if block_id in t][:1]
        if not tables or block_id not in tables[0]:
            raise BlockError(f"block {block_id} is not held by sequence {seq_id}")
        tables[0].remove(block_id)
        self._release(block_id)

    def free_sequence(self, seq_id: int) -> int:
        """Drop the sequence's references, its last block first (so that, among its blocks, the
        last is evicted first, as vLLM does); returns how many it held."""
        table = self.block_tables.pop(seq_id, ())
        refs, hash_of, evictable, loose = self._refs, self._hash_of, self._evictable, self._loose
        if not self._counted:  # nothing cached yet: each block was its alone
            loose.extend(reversed(table))
            return len(table)
        for block in reversed(table):  # `_release`, inlined: a long prompt has many blocks
            assert refs[block] > 0, f"block {block} released more often than taken"
            refs[block] -= 1
            if refs[block]:
                continue
            if block in hash_of:  # `_freed`, inlined
                evictable[block] = None
                self._cached_free += 1
            elif evictable:
                evictable[block] = None
            else:
                loose.append(block)
        return len(table)

    def _release(self, block: int) -> None:
        if not self._counted:
            self._loose.append(block)
            return
        refs = self._refs
        assert refs[block] > 0, f"block {block} released more often than taken"
        refs[block] -= 1
        if not refs[block]:
            self._freed(block)

    def free_list(self) -> list[int]:
        """Every free block, in the order they would be handed out (for tests)."""
        return list(range(self._fresh, self.num_blocks)) + self._loose[::-1] + \
            list(self._evictable)

    def check_invariants(self) -> None:
        """Each block's reference count is the number of tables holding it; free blocks are
        exactly the unreferenced ones; hashes and blocks map one to one (for tests)."""
        counts: dict[int, int] = {}
        for table in self.block_tables.values():
            for b in table:
                counts[b] = counts.get(b, 0) + 1
        if self._counted:
            for b in range(self._fresh):
                assert self._refs[b] == counts.get(b, 0), f"block {b}: refs {self._refs[b]}, " \
                                                          f"held {counts.get(b, 0)} times"
        else:
            assert set(counts.values()) <= {1}, "a block is shared with nothing cached"
        free = self.free_list()
        assert len(free) == len(set(free)), "a block is free twice"
        assert not set(free) & set(counts), "a held block is also free"
        assert len(counts) + len(free) == self.num_blocks, "a block leaked"
        found = [(h, b) for h, b in self._block_of.items()]
        found += [(h, b) for h, copies in self._copies.items() for b in copies]
        assert sorted((b, h) for h, b in found) == sorted(self._hash_of.items()), \
            "hash map broken"
        assert all(self._copies.values()) and set(self._copies) <= set(self._block_of), \
            "copies kept of a content no lookup finds"
        assert not set(self._loose) & set(self._hash_of), "a loose free block is cached"
        assert self._cached_free == sum(b in self._hash_of for b in self._evictable), \
            "cached free blocks miscounted"


def make_block_manager(num_blocks: int, block_size: int, prefix_caching: bool = False,
                       state_blocks: int = 0) -> BlockManager:
    """A block manager, with automatic prefix caching or without; `state_blocks`: those a
    sequence's linear-attention state takes from the pool (`BlockManager`; not with prefix
    caching, which the hardware model refuses with linear attention)."""
    if prefix_caching:
        if state_blocks:
            raise ValueError("a state's blocks are not counted with prefix caching")
        return PrefixCachingBlockManager(num_blocks, block_size)
    return BlockManager(num_blocks, block_size, state_blocks)


__all__ = ["PrefixCachingBlockManager", "make_block_manager", "OutOfBlocksError"]
