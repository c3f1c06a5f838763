"""The transformer and its contiguous KV cache (part 3): cached decoding equals full
recomputation, the attention mask, the cache's capacity rules and the step functions' errors."""

import numpy as np
import pytest

from engine.kv_cache import append_kv, init_kv_cache, layer_view
from engine.model import ModelConfig, init_params
from engine.transformer import (causal_attention, embed_tokens, extend_cached, forward_full,
                                linear_projection, model_decode_step, model_prefill)

TOL = dict(rtol=1e-4, atol=1e-4)  # float32 arithmetic, different matmul shapes


def flat_params(vocab=24, d_model=32, max_seq_len=64, seed=0):
    """The flat single-layer dict (random weights, not the identity, so attention matters)."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    return {"E": w(vocab, d_model) * 4, "Wq": w(d_model, d_model), "Wk": w(d_model, d_model),
            "Wv": w(d_model, d_model), "Wo": w(d_model, d_model), "W_out": w(d_model, vocab),
            "max_seq_len": max_seq_len}


CONFIGS = {
    "flat-dict": None,
    "1-layer-1-head-no-mlp": ModelConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=1,
                                         d_ff=0, max_seq_len=64, seed=1),
    "3-layers-4-heads-mlp": ModelConfig(vocab_size=64, d_model=48, n_layers=3, n_heads=4,
                                        d_ff=96, max_seq_len=64, seed=2),
    "2-layers-8-heads-mlp": ModelConfig(vocab_size=64, d_model=64, n_layers=2, n_heads=8,
                                        d_ff=128, max_seq_len=64, seed=3),
}


@pytest.fixture(params=list(CONFIGS))
def params(request):
    config = CONFIGS[request.param]
    return flat_params() if config is None else init_params(config)


def random_ids(params, n, seed=5):
    return np.random.default_rng(seed).integers(0, params["E"].shape[0], n).tolist()


def decode_all(ids, n_prefill, params):
    """Logits at positions n_prefill - 1 .. len(ids) - 1 by prefill + one-token decode steps."""
    logits, cache = model_prefill(ids[:n_prefill], params)
    rows = [logits]
    for token in ids[n_prefill:]:
        logits, cache = model_decode_step(token, cache, params)
        rows.append(logits)
    return np.stack(rows), cache  # [T - n_prefill + 1, V]


# --- cached decoding == full recomputation ----------------------------------------------------


def test_cached_decoding_matches_full_recompute(params):
    ids = random_ids(params, 40)
    rows, cache = decode_all(ids, 7, params)
    np.testing.assert_allclose(rows, forward_full(ids, params)[6:], **TOL)
    assert cache["length"] == 40


def test_decoding_from_a_one_token_prompt_matches(params):
    ids = random_ids(params, 12, seed=9)
    rows, _ = decode_all(ids, 1, params)
    np.testing.assert_allclose(rows, forward_full(ids, params), **TOL)


def test_chunked_extension_matches_full_recompute(params):
    ids = random_ids(params, 30, seed=4)
    _, cache = model_prefill(ids[:5], params)
    chunks = [extend_cached(ids[a:b], cache, params) for a, b in [(5, 6), (6, 19), (19, 30)]]
    np.testing.assert_allclose(np.concatenate(chunks), forward_full(ids, params)[5:], **TOL)


def test_long_sequences_match_full_recompute():
    config = ModelConfig(vocab_size=96, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                         max_seq_len=512, seed=7)
    params = init_params(config)
    ids = random_ids(params, 512, seed=1)
    rows, cache = decode_all(ids, 100, params)
    np.testing.assert_allclose(rows, forward_full(ids, params)[99:], **TOL)
    assert cache["length"] == 512


def test_the_flat_dict_matches_a_hand_written_single_head_model():
    params = flat_params()
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    x = params["E"][ids].astype(np.float64)  # [T, D]
    q, k, v = x @ params["Wq"], x @ params["Wk"], x @ params["Wv"]
    scores = q @ k.T / np.sqrt(x.shape[1])  # [T, T]
    scores[np.triu_indices(len(ids), 1)] = -np.inf
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    attn = weights / weights.sum(axis=1, keepdims=True) @ v  # [T, D]
    expected = (attn @ params["Wo"]) @ params["W_out"]  # the single-layer toy block: no residual, norms or MLP
    np.testing.assert_allclose(forward_full(ids, params), expected, **TOL)
    np.testing.assert_allclose(model_prefill(ids, params)[0], expected[-1], **TOL)


def test_the_flat_dict_embedding_alias_gives_the_same_logits():
    params = flat_params()
    aliased = {("embedding" if k == "E" else k): v for k, v in params.items()}
    np.testing.assert_array_equal(model_prefill([1, 2, 3], aliased)[0],
                                  model_prefill([1, 2, 3], params)[0])


def test_the_flat_dict_gets_the_single_layer_cache_layout():
    logits, cache = model_prefill([1, 2, 3], flat_params(vocab=24, d_model=32, max_seq_len=64))
    assert logits.shape == (24,)
    assert cache["K"].shape == cache["V"].shape == (64, 32) and cache["length"] == 3


def test_layered_params_get_a_layer_axis():
    params = init_params(CONFIGS["3-layers-4-heads-mlp"])
    _, cache = model_prefill([1, 2], params)
    assert cache["K"].shape == (3, 64, 48) and cache["K"].dtype == np.float32


# --- errors of the step functions -------------------------------------------------------------


def test_a_prompt_longer_than_max_seq_len_raises():
    with pytest.raises(ValueError, match="beyond the model's max_seq_len 64"):
        model_prefill(list(range(20)) * 4, flat_params(max_seq_len=64))
    with pytest.raises(ValueError, match="max_seq_len"):
        forward_full([0] * 65, flat_params(max_seq_len=64))


def test_decoding_past_max_seq_len_raises_and_leaves_the_cache_alone():
    params = flat_params(max_seq_len=8)
    _, cache = model_prefill([1] * 8, params)
    before = cache["K"].copy()
    with pytest.raises(ValueError, match="position 8 is beyond"):
        model_decode_step(2, cache, params)
    assert cache["length"] == 8
    np.testing.assert_array_equal(cache["K"], before)


@pytest.mark.parametrize("ids", [[], [0, 24], [-1], [[1, 2]], [1.5]])
def test_invalid_prompts_raise(ids):
    with pytest.raises(ValueError):
        model_prefill(ids, flat_params(vocab=24))


@pytest.mark.parametrize("token", [24, -1, 2.0, None])
def test_invalid_decode_tokens_raise(token):
    params = flat_params(vocab=24)
    _, cache = model_prefill([1, 2], params)
    with pytest.raises(ValueError):
        model_decode_step(token, cache, params)
    assert cache["length"] == 2


def test_a_cache_of_another_model_is_refused():
    _, cache = model_prefill([1, 2], flat_params())
    with pytest.raises(ValueError, match="1 layer"):
        model_decode_step(1, cache, init_params(CONFIGS["3-layers-4-heads-mlp"]))


# --- embed_tokens, linear_projection ----------------------------------------------------------


def test_embed_tokens_returns_the_rows():
    E = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(embed_tokens([2, 0, 2], E), E[[2, 0, 2]])


@pytest.mark.parametrize("ids", [[4], [-1]])
def test_embed_tokens_rejects_ids_outside_the_vocabulary(ids):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        embed_tokens(ids, np.zeros((4, 3)))


def test_linear_projection_adds_the_bias_over_leading_axes():
    x, W, b = np.ones((2, 5, 3)), np.arange(6.0).reshape(3, 2), np.array([10.0, 20.0])
    y = linear_projection(x, W, b)
    assert y.shape == (2, 5, 2)
    np.testing.assert_array_equal(y[1, 4], [6 + 10, 9 + 20])
    np.testing.assert_array_equal(linear_projection(x, W), y - b)


@pytest.mark.parametrize("W, b", [(np.ones((4, 2)), None), (np.ones((3, 2)), np.ones(3))])
def test_linear_projection_rejects_mismatched_shapes(W, b):
    with pytest.raises(ValueError, match="linear_projection"):
        linear_projection(np.ones((5, 3)), W, b)


# --- causal_attention -------------------------------------------------------------------------


def reference_attention(q, k, v, causal):
    scores = q @ k.T / np.sqrt(q.shape[-1])  # [Tq, Tk]
    if causal:
        offset = k.shape[0] - q.shape[0]
        scores = np.where(np.tril(np.ones(scores.shape, bool), offset), scores, -np.inf)
    w = np.exp(scores - scores.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True) @ v


@pytest.mark.parametrize("tq, tk", [(6, 6), (1, 6), (3, 8)])
@pytest.mark.parametrize("causal", [True, False])
def test_single_head_attention_matches_the_formula(tq, tk, causal):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(tq, 8)), rng.normal(size=(tk, 8)), rng.normal(size=(tk, 5))
    np.testing.assert_allclose(causal_attention(q, k, v, is_causal=causal),
                               reference_attention(q, k, v, causal), rtol=1e-6)


def test_the_mask_is_bottom_right_aligned():
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(7, 4)) for _ in range(3))
    full = causal_attention(q, k, v)
    np.testing.assert_allclose(full[0], v[0])  # the first query sees only the first key
    np.testing.assert_allclose(causal_attention(q[-1:], k, v), full[-1:])  # a decode query
    np.testing.assert_allclose(causal_attention(q[4:], k, v), full[4:])  # a chunk after a cache


def test_multi_head_attention_is_single_head_attention_per_head():
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(5, 3, 4)) for _ in range(3))
    out = causal_attention(q, k, v)
    for h in range(3):
        np.testing.assert_allclose(out[:, h], causal_attention(q[:, h], k[:, h], v[:, h]))


def test_causal_attention_rejects_bad_shapes():
    with pytest.raises(ValueError, match="at least as many keys"):
        causal_attention(np.ones((3, 4)), np.ones((2, 4)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="do not match"):
        causal_attention(np.ones((3, 4)), np.ones((3, 5)), np.ones((3, 5)))
    with pytest.raises(ValueError, match="all be"):
        causal_attention(np.ones((3, 4)), np.ones((3, 1, 4)), np.ones((3, 1, 4)))


# --- the contiguous cache ---------------------------------------------------------------------


def test_init_kv_cache_preallocates_empty_float32_buffers():
    cache = init_kv_cache(16, 8)
    assert cache["K"].shape == cache["V"].shape == (16, 8)
    assert cache["K"].dtype == np.float32 and cache["length"] == 0
    assert init_kv_cache(16, 8, n_layers=3)["V"].shape == (3, 16, 8)


@pytest.mark.parametrize("args", [(0, 8), (16, -1), (16, 8, 0), (2.5, 8)])
def test_init_kv_cache_rejects_bad_sizes(args):
    with pytest.raises(ValueError, match="positive integer"):
        init_kv_cache(*args)


def test_append_kv_writes_rows_in_order_and_advances():
    cache = init_kv_cache(6, 4)
    k1, v1 = np.ones((2, 4)), np.full((2, 4), 2.0)
    k2, v2 = np.full((1, 2, 2), 3.0), np.full((1, 2, 2), 4.0)  # [T, H, hd] is flattened
    assert append_kv(append_kv(cache, k1, v1), k2, v2) is cache
    assert cache["length"] == 3
    np.testing.assert_array_equal(cache["K"][:3, 0], [1, 1, 3])
    np.testing.assert_array_equal(cache["V"][:3, 0], [2, 2, 4])
    assert not cache["K"][3:].any()


def test_one_row_into_a_full_cache_raises_and_writes_nothing():
    cache = append_kv(init_kv_cache(3, 2), np.ones((3, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="do not fit"):
        append_kv(cache, np.full((1, 2), 9.0), np.full((1, 2), 9.0))
    partial = append_kv(init_kv_cache(3, 2), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="do not fit"):
        append_kv(partial, np.full((2, 2), 9.0), np.full((2, 2), 9.0))
    assert cache["length"] == 3 and partial["length"] == 2
    assert (partial["K"] != 9).all()  # no partial write


@pytest.mark.parametrize("k, v", [(np.ones((1, 5)), np.ones((1, 5))),
                                  (np.ones((2, 4)), np.ones((1, 4))),
                                  (np.ones(4), np.ones(4))])
def test_append_kv_rejects_mismatched_rows(k, v):
    with pytest.raises(ValueError, match="append_kv"):
        append_kv(init_kv_cache(6, 4), k, v)


def test_a_layered_cache_takes_rows_for_every_layer():
    cache = init_kv_cache(5, 4, n_layers=2)
    append_kv(cache, np.stack([np.ones((2, 4)), np.zeros((2, 4))]), np.ones((2, 2, 4)))
    assert cache["length"] == 2 and cache["K"][0, :2].all() and not cache["K"][1].any()
    with pytest.raises(ValueError, match="shape"):
        append_kv(cache, np.ones((1, 4)), np.ones((1, 4)))


def test_a_layer_view_shares_buffers_but_not_length():
    cache = init_kv_cache(5, 4, n_layers=2)
    view = append_kv(layer_view(cache, 1), np.ones((2, 4)), np.ones((2, 4)))
    assert view["length"] == 2 and cache["length"] == 0
    assert cache["K"][1, :2].all() and not cache["K"][0].any()
    with pytest.raises(ValueError, match="layer"):
        layer_view(cache, 2)
