"""The contiguous per-sequence KV cache: the engine's part 3 steps `init_kv_cache` and `append_kv`.

A cache is a plain dict `{"K": buffer, "V": buffer, "length": n}` with float32 buffers
preallocated to `max_seq_len` rows; rows `[0, length)` hold the keys and values of the tokens seen
so far and rows past `length` are never read. A single-layer cache has buffers
[max_seq_len, d_model]; a cache for a model of several layers has a leading layer axis,
[n_layers, max_seq_len, d_model]. Heads are stored side by side in d_model (head h is columns
h * head_dim .. (h + 1) * head_dim), the layout `model.attention_input` produces.
"""

from __future__ import annotations

import numpy as np


def init_kv_cache(max_seq_len: int, d_model: int, n_layers: int | None = None) -> dict:
    """An empty cache with room for `max_seq_len` tokens of width `d_model`.

    n_layers None gives the single-layer buffers [max_seq_len, d_model]; an int gives
    [n_layers, max_seq_len, d_model]. Buffers are float32 zeros and `length` starts at 0.
    Non-positive sizes raise ValueError.
    """
    sizes = {"max_seq_len": max_seq_len, "d_model": d_model}
    if n_layers is not None:
        sizes["n_layers"] = n_layers
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"init_kv_cache: {name} must be a positive integer, got {value!r}")
    shape = (max_seq_len, d_model) if n_layers is None else (n_layers, max_seq_len, d_model)
    return {"K": np.zeros(shape, np.float32), "V": np.zeros(shape, np.float32), "length": 0}


def capacity(cache: dict) -> int:
    """How many tokens the cache can hold in all (its max_seq_len)."""
    return cache["K"].shape[-2]


def _as_rows(name: str, x, cache: dict) -> np.ndarray:
    """New keys or values as [..., T, D] matching the cache's leading (layer) axes; a trailing
    [H, hd] pair is flattened to D."""
    x = np.asarray(x)
    layer_axes, d_model = cache["K"].shape[:-2], cache["K"].shape[-1]
    if x.ndim == len(layer_axes) + 3:  # [..., T, H, hd]
        x = x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])
    n_axes = len(layer_axes)
    if x.ndim != n_axes + 2 or x.shape[:n_axes] != layer_axes or x.shape[-1] != d_model:
        raise ValueError(f"append_kv: {name} must have shape {(*layer_axes, 'T', d_model)} "
                         f"(or with d_model split into heads), got {x.shape}")
    return x


def append_kv(cache: dict, k_new, v_new) -> dict:
    """Write T new key and value rows at rows [length, length + T) and advance `length` by T.

    `k_new`/`v_new` are [T, d_model] (or [T, H, head_dim]) for a single-layer cache and
    [n_layers, T, ...] for a layered one; values are stored as float32. Mutates the cache in place
    and returns it. The capacity is checked before anything is written: a cache that cannot take
    all T rows raises ValueError and is left unchanged (one row into a full cache fails).
    """
    k_rows, v_rows = _as_rows("k_new", k_new, cache), _as_rows("v_new", v_new, cache)
    if k_rows.shape != v_rows.shape:
        raise ValueError(f"append_kv: k_new {k_rows.shape} and v_new {v_rows.shape} differ")
    start, n_new = cache["length"], k_rows.shape[-2]
    if start + n_new > capacity(cache):
        raise ValueError(f"append_kv: {n_new} new rows do not fit a cache holding {start} of "
                         f"{capacity(cache)} (max_seq_len)")
    cache["K"][..., start:start + n_new, :] = k_rows  # [..., T, D]
    cache["V"][..., start:start + n_new, :] = v_rows  # [..., T, D]
    cache["length"] = start + n_new
    return cache


def layer_view(cache: dict, layer: int) -> dict:
    """One layer of a cache as a single-layer cache dict sharing its buffers.

    Appending to the view writes into the parent's buffers but advances only the view's length,
    which lets a forward pass fill layer after layer and advance the parent once at the end.
    A single-layer (seed) cache has only layer 0.
    """
    k_buf, v_buf = cache["K"], cache["V"]
    n_layers = 1 if k_buf.ndim == 2 else k_buf.shape[0]
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer_view: layer must be in [0, {n_layers}), got {layer}")
    if k_buf.ndim == 3:
        k_buf, v_buf = k_buf[layer], v_buf[layer]  # [S, D] views
    return {"K": k_buf, "V": v_buf, "length": cache["length"]}


def num_layers(cache: dict) -> int:
    """1 for the single-layer cache, else the size of the leading layer axis."""
    return 1 if cache["K"].ndim == 2 else cache["K"].shape[0]
