"""The transformer's shape, its weights and the per-layer maths shared by every execution path.

Full recomputation (`transformer.py`), contiguous-cache decoding (`kv_cache.py`) and the batched
paged executor (`model_runner.py`) differ only in where keys and values come from; everything
else (embedding, projections, norms, MLP, logits) is the functions below, so the three paths
cannot drift apart.

Parameter layout (all float32):
    E      [V, D]            token embedding ("embedding" is accepted as an alias)
    P      [max_seq_len, D]  sinusoidal position table (absent for the single-layer toy model)
    layers list of dicts:
           ln1_g, ln1_b [D]  pre-attention LayerNorm (absent: no norm)
           Wq, Wk, Wv, Wo [D, D]
           ln2_g, ln2_b [D]  pre-MLP LayerNorm (absent: no norm)
           W1 [D, F], b1 [F], W2 [F, D], b2 [D]   MLP (absent: no MLP, as in the seed)
           residual  bool, default True (False: the single-layer toy block, which has no skip connection)
    lnf_g, lnf_b [D]         final LayerNorm (absent: no norm)
    W_out  [D, V]            unembedding
    n_heads, max_seq_len     ints
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAYER_NORM_EPS = 1e-5


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the decoder-only transformer. The defaults give ~13 M parameters: big enough that
    a step's time is matrix work, small enough that a laptop serves it in real time."""

    vocab_size: int = 512
    d_model: int = 512
    n_layers: int = 4
    n_heads: int = 8
    d_ff: int = 2048  # 4 x d_model, the usual MLP expansion
    max_seq_len: int = 4096  # long enough for the Azure traces' typical prompts
    seed: int = 0  # weights are random (no checkpoint can be downloaded here) but reproducible

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or \
                not 0 <= self.seed < 2**32:
            raise ValueError(f"model.seed must be an integer from 0 to 2^32 - 1, got {self.seed!r}")
        if not isinstance(self.d_ff, int) or isinstance(self.d_ff, bool) or self.d_ff < 0:
            raise ValueError(f"model.d_ff must be a non-negative integer (0: no MLP), got {self.d_ff!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads ({self.n_heads})"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def num_parameters(self) -> int:
        d, f = self.d_model, self.d_ff
        per_layer = 4 * d * d + 2 * d + (2 * d * f + f + 3 * d if f else 0)  # ln2 only with an MLP
        return 2 * self.vocab_size * d + self.n_layers * per_layer + 2 * d


def sinusoidal_positions(max_seq_len: int, d_model: int) -> np.ndarray:
    """The Transformer paper's fixed position table, [max_seq_len, d_model] float32."""
    pos = np.arange(max_seq_len, dtype=np.float64)[:, None]  # [S, 1]
    freq = np.exp(-np.log(10000.0) * np.arange(0, d_model, 2) / d_model)  # [ceil(D/2)]
    table = np.zeros((max_seq_len, d_model))
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq[: d_model // 2])
    return table.astype(np.float32)


def init_params(config: ModelConfig) -> dict:
    """Seeded random weights, scaled so activations stay O(1) through the layers."""
    rng = np.random.default_rng(config.seed)
    d, f, v = config.d_model, config.d_ff, config.vocab_size

    def normal(shape, fan_in):
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    layers = []
    for _ in range(config.n_layers):
        layer = {
            "ln1_g": np.ones(d, np.float32), "ln1_b": np.zeros(d, np.float32),
            "Wq": normal((d, d), d), "Wk": normal((d, d), d),
            "Wv": normal((d, d), d), "Wo": normal((d, d), d),
        }
        if f:
            layer.update({
                "ln2_g": np.ones(d, np.float32), "ln2_b": np.zeros(d, np.float32),
                "W1": normal((d, f), d), "b1": np.zeros(f, np.float32),
                "W2": normal((f, d), f), "b2": np.zeros(d, np.float32),
            })
        layers.append(layer)
    return {
        "E": normal((v, d), 1.0) * np.float32(0.5),
        "P": sinusoidal_positions(config.max_seq_len, d) * np.float32(0.1),
        "layers": layers,
        "lnf_g": np.ones(d, np.float32), "lnf_b": np.zeros(d, np.float32),
        "W_out": normal((d, v), d),
        "n_heads": config.n_heads,
        "max_seq_len": config.max_seq_len,
    }


def normalize_params(params: dict) -> dict:
    """Accept the flat single-layer dict (E/embedding, Wq, Wk, Wv, Wo, W_out, max_seq_len)
    as well as the layered layout; return the layered layout. Arrays are shared, not copied."""
    if "layers" in params:
        return params
    embedding = params["E"] if "E" in params else params["embedding"]
    layer = {name: params[name] for name in ("Wq", "Wk", "Wv", "Wo")}
    layer["residual"] = False  # the single-layer toy block: logits = (attention(x) @ Wo) @ W_out
    return {
        "E": embedding,
        "layers": [layer],
        "W_out": params["W_out"],
        "n_heads": int(params.get("n_heads", 1)),
        "max_seq_len": int(params["max_seq_len"]),
    }


def save_params(path, params: dict) -> None:
    """Write layered params to an `.npz` checkpoint (flat keys such as `layers.0.Wq`)."""
    params = normalize_params(params)
    arrays = {k: v for k, v in params.items() if isinstance(v, np.ndarray)}
    for i, layer in enumerate(params["layers"]):
        arrays.update({f"layers.{i}.{k}": np.asarray(v) for k, v in layer.items()})
    arrays["n_heads"] = np.array(params["n_heads"])
    arrays["max_seq_len"] = np.array(params["max_seq_len"])
    np.savez(path, **arrays)


def load_params(path) -> dict:
    """Read an `.npz` checkpoint written by `save_params` (or any file with the same keys)."""
    with np.load(path) as data:
        flat = {k: data[k] for k in data.files}
    missing = [k for k in ("E", "W_out", "n_heads", "max_seq_len") if k not in flat]
    if missing:
        raise ValueError(f"{path}: checkpoint lacks {', '.join(missing)}")
    n_layers = 1 + max((int(k.split(".")[1]) for k in flat if k.startswith("layers.")), default=-1)
    layers = [{} for _ in range(n_layers)]
    params = {"layers": layers}
    for key, value in flat.items():
        if key.startswith("layers."):
            _, index, name = key.split(".", 2)
            layers[int(index)][name] = (bool(value) if name == "residual"
                                        else value.astype(np.float32))
        elif key in ("n_heads", "max_seq_len"):
            params[key] = int(value)
        else:
            params[key] = value.astype(np.float32)
    return params


# --- the per-layer maths, shared by every execution path ----------------------------------------


def layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPS) * g + b


def gelu(x: np.ndarray) -> np.ndarray:
    # tanh approximation (GPT-2's): cheap and within 1e-3 of the exact erf form
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def embed(ids: np.ndarray, positions: np.ndarray, params: dict) -> np.ndarray:
    """Token embeddings plus position encodings: [T] ids, [T] positions -> [T, D]."""
    x = params["E"][ids]  # [T, D]
    if "P" in params:
        x = x + params["P"][positions]
    return x


def attention_input(x: np.ndarray, layer: dict, n_heads: int):
    """Queries, keys and values of T tokens: [T, D] -> three [T, H, hd] arrays."""
    h = layer_norm(x, layer["ln1_g"], layer["ln1_b"]) if "ln1_g" in layer else x
    t, d = h.shape
    q = (h @ layer["Wq"]).reshape(t, n_heads, d // n_heads)
    k = (h @ layer["Wk"]).reshape(t, n_heads, d // n_heads)
    v = (h @ layer["Wv"]).reshape(t, n_heads, d // n_heads)
    return q, k, v


def attention_output(x: np.ndarray, attn: np.ndarray, layer: dict) -> np.ndarray:
    """Output projection, residual and MLP: x [T, D], attn [T, H, hd] -> new x [T, D].
    A layer with `residual: False` (the single-layer toy block) returns the projection alone."""
    out = attn.reshape(x.shape) @ layer["Wo"]
    x = x + out if layer.get("residual", True) else out
    if "W1" in layer:
        h = layer_norm(x, layer["ln2_g"], layer["ln2_b"])
        x = x + gelu(h @ layer["W1"] + layer["b1"]) @ layer["W2"] + layer["b2"]
    return x


def final_logits(x: np.ndarray, params: dict) -> np.ndarray:
    """[T, D] hidden states -> [T, V] logits."""
    if "lnf_g" in params:
        x = layer_norm(x, params["lnf_g"], params["lnf_b"])
    return x @ params["W_out"]


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = True) -> np.ndarray:
    """Causal attention of Tq queries over Tk >= Tq keys, bottom-right aligned (query i sees keys
    0 .. Tk - Tq + i), so one decode query sees the whole cache. [Tq,H,hd],[Tk,H,hd] -> [Tq,H,hd].
    causal=False lets every query see every key (the `is_causal=False` of the part 3 API)."""
    tq, tk, hd = q.shape[0], k.shape[0], q.shape[2]
    # Batched matmuls over heads (BLAS) rather than einsum, which does not use BLAS here.
    qh = q.transpose(1, 0, 2)  # [H, Tq, hd]
    kt = k.transpose(1, 2, 0)  # [H, hd, Tk]
    scores = np.matmul(qh, kt) * np.float32(1.0 / np.sqrt(hd))  # [H, Tq, Tk]
    if causal and tq > 1:
        visible = np.arange(tk)[None, :] <= np.arange(tk - tq, tk)[:, None]  # [Tq, Tk]
        scores = np.where(visible, scores, np.float32(-np.inf))
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores, out=scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.matmul(weights, v.transpose(1, 0, 2)).transpose(1, 0, 2)  # [Tq, H, hd]
