"""Paged KV storage and the engine's part 4 steps (block allocator, paged append, gather, attention).

Keys and values live in fixed-size blocks shared by all sequences: two float32 arrays
`[n_layers, num_blocks, block_size, n_heads, head_dim]`. Which blocks a sequence owns, and in
which order, is the `BlockManager`'s block table (bookkeeping only, shared with the scheduler and
the simulator); token `i` of a sequence lives in block `table[i // block_size]` at offset
`i % block_size`. `PagedKVStorage` holds the arrays; `PagedAllocator` pairs it with a
`BlockManager` and the number of tokens stored per sequence, and the part 4 functions below are a
thin API over the two. The batched executor uses the storage and the block manager directly.
"""

from __future__ import annotations

import numpy as np

from .block_manager import BlockError, BlockManager, OutOfBlocksError, blocks_needed
from .model import attend

__all__ = [
    "PagedKVStorage", "PagedAllocator", "BlockError", "OutOfBlocksError", "blocks_needed",
    "slot_ids", "init_block_allocator", "allocate_block", "free_block", "append_to_paged_cache",
    "gather_kv_from_blocks", "paged_attention_step", "free_sequence_blocks", "kv_blocks_in_use",
]


def slot_ids(block_table, start: int, stop: int, block_size: int) -> np.ndarray:
    """Flat storage slots (block * block_size + offset) of token positions [start, stop) -> [n]."""
    table = np.asarray(block_table, dtype=np.int64)
    if stop > len(table) * block_size:
        raise ValueError(f"block table of {len(table)} blocks holds {len(table) * block_size} "
                         f"tokens; positions up to {stop - 1} were asked for")
    pos = np.arange(start, stop)  # [n]
    return table[pos // block_size] * block_size + pos % block_size  # [n]


class PagedKVStorage:
    """The key and value blocks of every layer: `k`, `v` [L, num_blocks, block_size, H, hd]."""

    def __init__(self, n_layers: int, num_blocks: int, block_size: int, n_heads: int,
                 head_dim: int):
        for name, value in (("n_layers", n_layers), ("num_blocks", num_blocks),
                            ("block_size", block_size), ("n_heads", n_heads),
                            ("head_dim", head_dim)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"PagedKVStorage: {name} must be a positive integer, "
                                 f"got {value!r}")
        shape = (n_layers, num_blocks, block_size, n_heads, head_dim)
        self.block_size = block_size
        self.k = np.zeros(shape, np.float32)  # [L, NB, BS, H, hd]
        self.v = np.zeros(shape, np.float32)  # [L, NB, BS, H, hd]
        # The same memory seen as one row per token slot, for writes and gathers by slot id.
        self.k_slots = self.k.reshape(n_layers, num_blocks * block_size, n_heads, head_dim)
        self.v_slots = self.v.reshape(n_layers, num_blocks * block_size, n_heads, head_dim)

    @classmethod
    def for_model(cls, params: dict, num_blocks: int, block_size: int) -> "PagedKVStorage":
        """Storage shaped for layered `params` (see `model.normalize_params`)."""
        d_model, n_heads = params["E"].shape[1], params["n_heads"]
        return cls(len(params["layers"]), num_blocks, block_size, n_heads, d_model // n_heads)

    @property
    def shape(self) -> tuple:
        return self.k.shape

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def write(self, layer: int, slots: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
        """Store the keys and values of len(slots) tokens ([n, H, hd] each) of one layer."""
        self.k_slots[layer, slots] = k
        self.v_slots[layer, slots] = v

    def gather(self, layer: int, slots: np.ndarray):
        """Keys and values of the given slots of one layer, contiguous: two [n, H, hd] arrays."""
        return self.k_slots[layer, slots], self.v_slots[layer, slots]


class PagedAllocator:
    """The part 4 allocator: block bookkeeping, block storage and tokens stored per sequence."""

    def __init__(self, block_manager: BlockManager, storage: PagedKVStorage):
        if storage.block_size != block_manager.block_size or \
                storage.k.shape[1] != block_manager.num_blocks:
            raise ValueError("PagedAllocator: storage and block manager disagree on block_size or "
                             "num_blocks")
        self.block_manager = block_manager
        self.storage = storage
        self.seq_lengths: dict = {}  # seq_id -> tokens whose K/V are stored

    @property
    def block_size(self) -> int:
        return self.block_manager.block_size

    @property
    def d_model(self) -> int:
        _, _, _, n_heads, head_dim = self.storage.shape
        return n_heads * head_dim


def init_block_allocator(num_blocks: int, block_size: int, d_model: int, *, n_layers: int = 1,
                         n_heads: int = 1) -> PagedAllocator:
    """A paged KV cache of `num_blocks` blocks of `block_size` tokens, every block free.

    Rows are `d_model` wide (n_heads heads of d_model // n_heads); n_layers stacks one block array
    per layer. Non-positive sizes or a d_model not divisible by n_heads raise ValueError.
    """
    for name, value in (("d_model", d_model), ("n_heads", n_heads)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"init_block_allocator: {name} must be a positive integer, "
                             f"got {value!r}")
    if d_model % n_heads:
        raise ValueError(f"init_block_allocator: d_model ({d_model}) must be divisible by "
                         f"n_heads ({n_heads})")
    storage = PagedKVStorage(n_layers, num_blocks, block_size, n_heads, d_model // n_heads)
    return PagedAllocator(BlockManager(num_blocks, block_size), storage)


def _manager(alloc) -> BlockManager:
    return getattr(alloc, "block_manager", alloc)


def allocate_block(alloc, seq_id) -> int:
    """Append one free block to `seq_id`'s block table and return its id (`alloc` may also be a
    bare BlockManager). No free block: OutOfBlocksError, nothing changes."""
    return _manager(alloc).allocate_block(seq_id)


def free_block(alloc, block_id: int) -> None:
    """Return one block to the free list. An invalid id or a block already free raises BlockError;
    so does a block that still holds stored tokens (free those with `free_sequence_blocks`)."""
    bm = _manager(alloc)
    lengths = getattr(alloc, "seq_lengths", {})
    for seq_id, table in bm.block_tables.items():
        if isinstance(block_id, int) and block_id in table:
            first_token = table.index(block_id) * bm.block_size
            if lengths.get(seq_id, 0) > first_token:
                raise BlockError(f"block {block_id} holds stored tokens of sequence {seq_id}; "
                                 "free the sequence with free_sequence_blocks")
    bm.free_block(block_id)


def _as_layers(name: str, x, alloc: PagedAllocator) -> np.ndarray:
    """New keys or values as [L, T, H, hd]; [T, D] or [T, H, hd] are accepted for one layer."""
    x = np.asarray(x, dtype=np.float32)
    n_layers, _, _, n_heads, head_dim = alloc.storage.shape
    if x.ndim == 2 and n_layers == 1:
        x = x.reshape(1, x.shape[0], n_heads, head_dim) if x.shape[1] == n_heads * head_dim else x
    elif x.ndim == 3 and n_layers == 1:
        x = x[None]
    if x.ndim != 4 or x.shape[0] != n_layers or x.shape[2:] != (n_heads, head_dim):
        raise ValueError(f"append_to_paged_cache: {name} must be [T, {n_heads * head_dim}] or "
                         f"[T, {n_heads}, {head_dim}] (one layer) or "
                         f"[{n_layers}, T, {n_heads}, {head_dim}], got {np.shape(x)}")
    return x


def append_to_paged_cache(alloc: PagedAllocator, seq_id, k_new, v_new) -> int:
    """Store T new tokens' keys and values after the sequence's stored ones, taking new blocks as
    needed; returns the sequence's new token count. Shapes and free blocks are checked before
    anything is written: on OutOfBlocksError or ValueError nothing changes (no partial write)."""
    k_rows, v_rows = _as_layers("k_new", k_new, alloc), _as_layers("v_new", v_new, alloc)
    if k_rows.shape != v_rows.shape:
        raise ValueError(f"append_to_paged_cache: k_new {np.shape(k_new)} and v_new "
                         f"{np.shape(v_new)} differ")
    start, n_new = alloc.seq_lengths.get(seq_id, 0), k_rows.shape[1]
    if not n_new:  # nothing to store: no block is taken
        return start
    bm = alloc.block_manager
    bm.ensure_capacity(seq_id, start + n_new)  # all or nothing: raises before taking any block
    slots = slot_ids(bm.block_tables[seq_id], start, start + n_new, bm.block_size)  # [T]
    for layer in range(k_rows.shape[0]):
        alloc.storage.write(layer, slots, k_rows[layer], v_rows[layer])
    alloc.seq_lengths[seq_id] = start + n_new
    return start + n_new


def gather_kv_from_blocks(alloc: PagedAllocator, seq_id, layer: int = 0):
    """The sequence's stored keys and values of one layer, in token order: two [T, d_model] arrays
    (copies). A sequence with no block table raises ValueError."""
    bm = alloc.block_manager
    if seq_id not in bm.block_tables:
        raise ValueError(f"gather_kv_from_blocks: sequence {seq_id!r} holds no KV blocks")
    n_tokens = alloc.seq_lengths.get(seq_id, 0)
    slots = slot_ids(bm.block_tables[seq_id], 0, n_tokens, bm.block_size)  # [T]
    k, v = alloc.storage.gather(layer, slots)  # [T, H, hd] each
    return k.reshape(n_tokens, -1), v.reshape(n_tokens, -1)  # [T, D] each


def paged_attention_step(q, alloc: PagedAllocator, seq_id, layer: int = 0) -> np.ndarray:
    """Causal attention of Tq queries over the sequence's stored keys and values, read from its
    blocks: q [Tq, d_model] or [Tq, H, hd] -> the same shape. The queries are the last Tq stored
    tokens (bottom-right aligned mask), so Tq must not exceed the stored count (ValueError)."""
    q = np.asarray(q, dtype=np.float32)
    _, _, _, n_heads, head_dim = alloc.storage.shape
    if q.shape[1:] not in ((n_heads * head_dim,), (n_heads, head_dim)):
        raise ValueError(f"paged_attention_step: q must be [Tq, {n_heads * head_dim}] or "
                         f"[Tq, {n_heads}, {head_dim}], got {q.shape}")
    k, v = gather_kv_from_blocks(alloc, seq_id, layer)  # [T, D] each
    if not 1 <= q.shape[0] <= k.shape[0]:
        raise ValueError(f"paged_attention_step: {q.shape[0]} queries over {k.shape[0]} stored "
                         "tokens (need 1 <= Tq <= stored)")
    heads = (-1, n_heads, head_dim)
    out = attend(q.reshape(heads), k.reshape(heads), v.reshape(heads))  # [Tq, H, hd]
    return out.reshape(q.shape)


def free_sequence_blocks(alloc, seq_id) -> int:
    """Free every block of the sequence and forget its stored tokens; returns the blocks freed
    (0 for a sequence that holds none)."""
    getattr(alloc, "seq_lengths", {}).pop(seq_id, None)
    return _manager(alloc).free_sequence(seq_id)


def kv_blocks_in_use(alloc) -> dict:
    """{"used", "free", "total"} block counts of a PagedAllocator or a BlockManager."""
    return _manager(alloc).usage()
