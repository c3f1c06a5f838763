"""The engine's part 4 (engine.paged_kv_cache): block allocator, paged append and gather, paged
attention."""

import numpy as np
import pytest

from engine.block_manager import BlockManager
from engine.model import attend
from engine.paged_kv_cache import (BlockError, OutOfBlocksError, PagedKVStorage, allocate_block,
                                   append_to_paged_cache, blocks_needed, free_block,
                                   free_sequence_blocks, gather_kv_from_blocks,
                                   init_block_allocator, kv_blocks_in_use, paged_attention_step,
                                   slot_ids)
from engine.transformer import causal_attention


def rows(rng, n, d=8):
    return rng.standard_normal((n, d)).astype(np.float32)


def test_blocks_needed_is_the_ceiling():
    assert [blocks_needed(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_init_block_allocator_shapes_storage_per_layer_block_slot_head():
    alloc = init_block_allocator(6, 4, 8, n_layers=3, n_heads=2)
    assert alloc.storage.k.shape == (3, 6, 4, 2, 4) == alloc.storage.v.shape
    assert alloc.storage.k.dtype == np.float32
    assert alloc.block_manager.num_blocks == 6 and alloc.d_model == 8
    assert kv_blocks_in_use(alloc) == {"used": 0, "free": 6, "total": 6}


@pytest.mark.parametrize("bad", [{"d_model": 0}, {"d_model": 9, "n_heads": 2}, {"n_heads": 0}])
def test_init_block_allocator_rejects_bad_sizes(bad):
    args = {"d_model": 8, "n_heads": 1, **bad}
    with pytest.raises(ValueError, match="d_model|n_heads"):
        init_block_allocator(4, 2, args["d_model"], n_heads=args["n_heads"])


def test_allocate_block_until_exhausted_raises_out_of_blocks():
    alloc = init_block_allocator(2, 4, 8)
    got = {allocate_block(alloc, "a"), allocate_block(alloc, "b")}
    assert got == {0, 1}
    with pytest.raises(OutOfBlocksError):
        allocate_block(alloc, "a")
    assert kv_blocks_in_use(alloc) == {"used": 2, "free": 0, "total": 2}


def test_free_block_double_free_and_invalid_id_raise():
    alloc = init_block_allocator(3, 4, 8)
    block = allocate_block(alloc, "a")
    free_block(alloc, block)
    with pytest.raises(BlockError, match="double free"):
        free_block(alloc, block)
    for bad in (-1, 3, "x"):
        with pytest.raises(BlockError, match="invalid block id"):
            free_block(alloc, bad)
    assert kv_blocks_in_use(alloc)["free"] == 3


def test_free_block_refuses_a_block_holding_stored_tokens():
    alloc = init_block_allocator(3, 2, 8)
    rng = np.random.default_rng(0)
    append_to_paged_cache(alloc, "a", rows(rng, 3), rows(rng, 3))
    with pytest.raises(BlockError, match="free_sequence_blocks"):
        free_block(alloc, alloc.block_manager.block_tables["a"][1])


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_append_then_gather_round_trips_across_block_boundaries(block_size):
    rng = np.random.default_rng(block_size)
    alloc = init_block_allocator(64, block_size, 8, n_heads=2)
    k_ref, v_ref = {"a": [], "b": []}, {"a": [], "b": []}
    for n in (5, 1, 7, 2, 1, 11):  # two sequences interleaved: their blocks alternate
        for seq in ("a", "b"):
            k, v = rows(rng, n), rows(rng, n)
            append_to_paged_cache(alloc, seq, k, v)
            k_ref[seq].append(k), v_ref[seq].append(v)
    for seq in ("a", "b"):
        k, v = gather_kv_from_blocks(alloc, seq)
        np.testing.assert_array_equal(k, np.concatenate(k_ref[seq]))
        np.testing.assert_array_equal(v, np.concatenate(v_ref[seq]))
        assert len(alloc.block_manager.block_tables[seq]) == blocks_needed(27, block_size)


def test_append_accepts_every_layer_at_once():
    rng = np.random.default_rng(0)
    alloc = init_block_allocator(8, 3, 8, n_layers=2, n_heads=2)
    k = rng.standard_normal((2, 5, 2, 4)).astype(np.float32)  # [L, T, H, hd]
    assert append_to_paged_cache(alloc, 7, k, -k) == 5
    for layer in (0, 1):
        got_k, got_v = gather_kv_from_blocks(alloc, 7, layer)
        np.testing.assert_array_equal(got_k, k[layer].reshape(5, 8))
        np.testing.assert_array_equal(got_v, -k[layer].reshape(5, 8))


def test_append_overflow_writes_nothing():
    rng = np.random.default_rng(0)
    alloc = init_block_allocator(3, 4, 8)
    append_to_paged_cache(alloc, "a", rows(rng, 6), rows(rng, 6))  # 2 blocks, 2 slots left
    before_k, before_v = alloc.storage.k.copy(), alloc.storage.v.copy()
    table = list(alloc.block_manager.block_tables["a"])
    with pytest.raises(OutOfBlocksError):
        append_to_paged_cache(alloc, "a", rows(rng, 7), rows(rng, 7))  # needs 2 more blocks
    np.testing.assert_array_equal(alloc.storage.k, before_k)
    np.testing.assert_array_equal(alloc.storage.v, before_v)
    assert alloc.block_manager.block_tables["a"] == table
    assert alloc.seq_lengths["a"] == 6 and kv_blocks_in_use(alloc)["free"] == 1
    alloc.block_manager.check_invariants()


def test_appending_no_rows_stores_nothing_and_takes_no_block():
    rng = np.random.default_rng(0)
    alloc = init_block_allocator(3, 4, 8)
    assert append_to_paged_cache(alloc, "new", np.zeros((0, 8)), np.zeros((0, 8))) == 0
    append_to_paged_cache(alloc, "a", rows(rng, 4), rows(rng, 4))  # one full block
    assert append_to_paged_cache(alloc, "a", np.zeros((0, 8)), np.zeros((0, 8))) == 4
    assert kv_blocks_in_use(alloc)["used"] == 1 and "new" not in alloc.block_manager.block_tables


def test_append_with_a_bad_shape_raises_and_changes_nothing():
    alloc = init_block_allocator(3, 4, 8)
    with pytest.raises(ValueError, match="k_new"):
        append_to_paged_cache(alloc, "a", np.zeros((2, 5)), np.zeros((2, 5)))
    with pytest.raises(ValueError, match="differ"):
        append_to_paged_cache(alloc, "a", np.zeros((2, 8)), np.zeros((3, 8)))
    assert kv_blocks_in_use(alloc)["used"] == 0 and "a" not in alloc.seq_lengths


@pytest.mark.parametrize("n_heads, block_size, n_tokens, n_queries",
                         [(1, 1, 9, 1), (2, 3, 10, 4), (4, 16, 37, 37), (2, 4, 33, 1)])
def test_paged_attention_equals_contiguous_attention(n_heads, block_size, n_tokens, n_queries):
    rng = np.random.default_rng(n_tokens)
    alloc = init_block_allocator(64, block_size, 16, n_heads=n_heads)
    allocate_block(alloc, "other")  # the sequence's blocks do not start at block 0
    k, v = rows(rng, n_tokens, 16), rows(rng, n_tokens, 16)
    append_to_paged_cache(alloc, "s", k, v)
    q = rows(rng, n_queries, 16)
    heads = (-1, n_heads, 16 // n_heads)
    expected = attend(q.reshape(heads), k.reshape(heads), v.reshape(heads)).reshape(q.shape)
    np.testing.assert_allclose(paged_attention_step(q, alloc, "s"), expected, rtol=1e-6, atol=1e-6)
    if n_heads == 1:
        np.testing.assert_allclose(paged_attention_step(q, alloc, "s"), causal_attention(q, k, v),
                                   rtol=1e-6, atol=1e-6)
    by_head = paged_attention_step(q.reshape(heads), alloc, "s")  # [Tq, H, hd] in, same out
    assert by_head.shape == (n_queries, n_heads, 16 // n_heads)


def test_paged_attention_rejects_more_queries_than_stored_tokens():
    alloc = init_block_allocator(4, 2, 8)
    append_to_paged_cache(alloc, "s", np.ones((2, 8)), np.ones((2, 8)))
    with pytest.raises(ValueError, match="queries"):
        paged_attention_step(np.ones((3, 8)), alloc, "s")
    with pytest.raises(ValueError, match="no KV blocks"):
        paged_attention_step(np.ones((1, 8)), alloc, "unknown")


def test_free_sequence_blocks_returns_every_block_and_forgets_the_tokens():
    alloc = init_block_allocator(5, 2, 8)
    append_to_paged_cache(alloc, "a", np.ones((5, 8)), np.ones((5, 8)))
    assert kv_blocks_in_use(alloc) == {"used": 3, "free": 2, "total": 5}
    assert free_sequence_blocks(alloc, "a") == 3
    assert kv_blocks_in_use(alloc) == {"used": 0, "free": 5, "total": 5}
    assert free_sequence_blocks(alloc, "a") == 0
    assert "a" not in alloc.seq_lengths


def test_functions_accept_a_bare_block_manager():
    bm = BlockManager(4, 2)
    block = allocate_block(bm, 1)
    assert kv_blocks_in_use(bm) == {"used": 1, "free": 3, "total": 4}
    free_block(bm, block)
    assert free_sequence_blocks(bm, 1) == 0 and kv_blocks_in_use(bm)["used"] == 0


def test_slot_ids_follow_the_block_table():
    np.testing.assert_array_equal(slot_ids([5, 2], 1, 6, 3), [16, 17, 6, 7, 8])
    with pytest.raises(ValueError, match="holds 6 tokens"):
        slot_ids([5, 2], 0, 7, 3)


def test_storage_write_and_gather_address_the_same_slots():
    storage = PagedKVStorage(2, 4, 3, 2, 2)
    k = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    storage.write(1, np.array([10, 4]), k, -k)
    np.testing.assert_array_equal(storage.k[1, 3, 1], k[0])  # slot 10 = block 3, offset 1
    np.testing.assert_array_equal(storage.v[1, 1, 1], -k[1])  # slot 4 = block 1, offset 1
    got_k, got_v = storage.gather(1, np.array([10, 4]))
    np.testing.assert_array_equal(got_k, k)
    assert not storage.k[0].any()
