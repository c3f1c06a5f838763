"""The engine's part 3: embeddings, projections, causal attention, and generation with a contiguous
KV cache (`model_prefill`, `model_decode_step`), plus `forward_full`, the full-recomputation
reference every cached path is checked against.

All of them run the shared per-layer maths of `engine.model`; they differ only in where keys and
values come from (recomputed here, the contiguous cache of `engine.kv_cache` in the cached paths).
`params` is either the flat single-layer dict (E or embedding, Wq, Wk, Wv, Wo, W_out,
max_seq_len) or the layered dict of `model.init_params`.
"""

from __future__ import annotations

import numpy as np

from engine import kv_cache
from engine.model import (attend, attention_input, attention_output, embed, final_logits,
                          normalize_params)


def _token_ids(ids, vocab_size: int) -> np.ndarray:
    """Token ids as a 1-D int64 array, each checked to lie in [0, vocab_size)."""
    arr = np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"token ids must be a 1-D sequence of integers, got shape {arr.shape} "
                         f"dtype {arr.dtype}")
    bad = arr[(arr < 0) | (arr >= vocab_size)]
    if bad.size:
        raise ValueError(f"token id {int(bad[0])} is outside the vocabulary [0, {vocab_size})")
    return arr.astype(np.int64)


def embed_tokens(ids, E: np.ndarray) -> np.ndarray:
    """Embedding rows of the token ids: [T] ints, E [V, D] -> [T, D] (same dtype as E).

    An id outside [0, V) raises ValueError (a negative id would otherwise wrap around silently).
    """
    return E[_token_ids(ids, E.shape[0])]  # [T, D]


def linear_projection(x: np.ndarray, W: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """`x @ W (+ bias)`: [..., D_in] @ [D_in, D_out] (+ [D_out]) -> [..., D_out].

    Leading axes broadcast; mismatched inner or bias sizes raise ValueError naming the shapes.
    """
    x, W = np.asarray(x), np.asarray(W)
    if W.ndim != 2 or x.shape[-1] != W.shape[0]:
        raise ValueError(f"linear_projection: x {x.shape} does not match W {W.shape} "
                         "([D_in, D_out])")
    y = x @ W  # [..., D_out]
    if bias is not None:
        bias = np.asarray(bias)
        if bias.shape != (W.shape[1],):
            raise ValueError(f"linear_projection: bias must have shape ({W.shape[1]},), "
                             f"got {bias.shape}")
        y = y + bias
    return y


def causal_attention(q, k, v, is_causal: bool = True) -> np.ndarray:
    """Scaled dot-product attention softmax(q k^T / sqrt(head_dim)) v of Tq queries over Tk keys.

    Single head: q [Tq, d], k [Tk, d], v [Tk, dv] -> [Tq, dv]; several heads: [Tq, H, hd],
    [Tk, H, hd], [Tk, H, hdv] -> [Tq, H, hdv]. With is_causal the mask is bottom-right aligned
    (query i sees keys 0 .. Tk - Tq + i), so one decode query sees the whole cache; it needs
    Tk >= Tq. Shape mismatches raise ValueError.
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if not q.ndim == k.ndim == v.ndim or q.ndim not in (2, 3):
        raise ValueError(f"causal_attention: q, k, v must all be [T, d] or all [T, H, hd], got "
                         f"{q.shape}, {k.shape}, {v.shape}")
    if q.shape[1:] != k.shape[1:] or k.shape[:-1] != v.shape[:-1] or k.shape[0] == 0:
        raise ValueError(f"causal_attention: q {q.shape}, k {k.shape}, v {v.shape} do not match "
                         "(q and k share heads and width; k and v share tokens and heads; Tk >= 1)")
    if is_causal and k.shape[0] < q.shape[0]:
        raise ValueError(f"causal_attention: {q.shape[0]} queries need at least as many keys, "
                         f"got {k.shape[0]}")
    if q.ndim == 2:  # one head: [T, d] -> [T, 1, d] and back
        return attend(q[:, None], k[:, None], v[:, None], causal=is_causal)[:, 0]
    return attend(q, k, v, causal=is_causal)


def forward_full(ids, params: dict) -> np.ndarray:
    """Logits at every position by full recomputation (no cache): [T] ids -> [T, V].

    The reference the cached and paged paths must match. T must be in [1, max_seq_len].
    """
    p = normalize_params(params)
    ids = _token_ids(ids, p["E"].shape[0])
    _check_positions(0, len(ids), p["max_seq_len"])
    x = embed(ids, np.arange(len(ids)), p)  # [T, D]
    for layer in p["layers"]:
        q, k, v = attention_input(x, layer, p["n_heads"])  # [T, H, hd] each
        x = attention_output(x, attend(q, k, v), layer)  # [T, D]
    return final_logits(x, p)  # [T, V]


def _check_positions(start: int, n_tokens: int, max_seq_len: int) -> None:
    if n_tokens < 1:
        raise ValueError("at least one token id is needed")
    if start + n_tokens > max_seq_len:
        raise ValueError(f"position {start + n_tokens - 1} is beyond the model's max_seq_len "
                         f"{max_seq_len} (positions run 0 .. {max_seq_len - 1})")


def new_cache(params: dict) -> dict:
    """An empty contiguous cache sized for `params`: the single-layer [max_seq_len, d_model] buffers for
    the flat single-layer dict, [n_layers, max_seq_len, d_model] for layered params."""
    p = normalize_params(params)
    n_layers = len(p["layers"]) if "layers" in params else None
    return kv_cache.init_kv_cache(p["max_seq_len"], p["E"].shape[1], n_layers)


def extend_cached(ids, cache: dict, params: dict) -> np.ndarray:
    """Run T new tokens at positions [length, length + T) against the cache: their keys and values
    are appended (every layer, then `length` advances by T) and their logits [T, V] returned.

    Positions beyond max_seq_len, a full cache or a cache with the wrong number of layers raise
    ValueError before anything is written.
    """
    p = normalize_params(params)
    ids = _token_ids(ids, p["E"].shape[0])
    start, n_heads = cache["length"], p["n_heads"]
    end = start + len(ids)
    _check_positions(start, len(ids), p["max_seq_len"])
    if end > kv_cache.capacity(cache) or kv_cache.num_layers(cache) != len(p["layers"]):
        raise ValueError(f"cache of {kv_cache.num_layers(cache)} layer(s) holding {start} of "
                         f"{kv_cache.capacity(cache)} tokens cannot take {len(ids)} more for a "
                         f"{len(p['layers'])}-layer model")
    x = embed(ids, np.arange(start, end), p)  # [T, D]
    for index, layer in enumerate(p["layers"]):
        q, k, v = attention_input(x, layer, n_heads)  # [T, H, hd] each
        view = kv_cache.append_kv(kv_cache.layer_view(cache, index), k, v)
        keys = view["K"][:end].reshape(end, n_heads, -1)  # [start + T, H, hd]
        values = view["V"][:end].reshape(end, n_heads, -1)  # [start + T, H, hd]
        x = attention_output(x, attend(q, keys, values), layer)  # [T, D]
    cache["length"] = end
    return final_logits(x, p)  # [T, V]


def model_prefill(ids, params: dict):
    """Process a whole prompt in one pass: [T] ids -> (logits [V] of the last position, cache).

    The returned cache holds the keys and values of all T tokens (length T) and has room for
    max_seq_len tokens. An empty prompt, a prompt longer than max_seq_len or an id outside the
    vocabulary raises ValueError.
    """
    cache = new_cache(params)
    logits = extend_cached(ids, cache, params)  # [T, V]
    return logits[-1], cache


def model_decode_step(token_id: int, cache: dict, params: dict):
    """Generate one step: the new token attends over the cache plus itself -> (logits [V], cache).

    Appends the token's keys and values (the cache is mutated in place and returned). Raises
    ValueError when the token's position would be max_seq_len or beyond, or the id is invalid.
    """
    if isinstance(token_id, bool) or not isinstance(token_id, (int, np.integer)):
        raise ValueError(f"model_decode_step: token_id must be an int, got {token_id!r}")
    return extend_cached([int(token_id)], cache, params)[0], cache
