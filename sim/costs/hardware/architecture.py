"""A transformer's architecture as the hardware cost model needs it: its shapes, its parameter
count, and its bytes per GPU under tensor parallelism.

`Architecture` holds the keys of a Hugging Face `config.json` that set the cost of serving
(layers, widths, heads and key-value heads for grouped-query attention, the MLP's width and
whether it is gated) and the engine's own `ModelConfig` keys where they exist. Tensor
parallelism (`tp` GPUs) splits the query heads, the MLP's columns and the vocabulary across the
GPUs; key-value heads are split too, or replicated when there are fewer of them than GPUs (as
vLLM does), so a GPU always holds at least one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
NORMS = ("rmsnorm", "layernorm")


@dataclass(frozen=True)
class Architecture:
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    max_seq_len: int
    gated_mlp: bool = True  # SwiGLU: gate, up and down matrices; else up and down
    head_dim: int = 0  # 0: d_model / n_heads
    tie_embeddings: bool = False  # the LM head is the embedding matrix
    norm: str = "rmsnorm"
    qkv_bias: bool = False
    parallel_attn_mlp: bool = False  # attention and MLP read the same normed input (phi-2)
    fused_qkv: bool = True  # one QKV matmul reading its input once (else three, as the engine)
    rope: bool = True  # rotary position embedding applied to queries and keys
    flash_attention: bool = True  # prefill attention skips the masked half (else computes it)
    name: str = ""

    def __post_init__(self):
        for f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size",
                  "max_seq_len"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"model.{f} must be a positive integer, got {value!r}")
        if not self.head_dim and self.d_model % self.n_heads:
            raise ValueError(f"model.d_model ({self.d_model}) must be divisible by "
                             f"model.n_heads ({self.n_heads}), or give model.head_dim")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_kv_heads ({self.n_kv_heads}) must divide model.n_heads "
                             f"({self.n_heads})")
        if self.norm not in NORMS:
            raise ValueError(f"model.norm must be one of {', '.join(NORMS)}, got {self.norm!r}")

    @property
    def hd(self) -> int:
        """Head dimension."""
        return self.head_dim or self.d_model // self.n_heads

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.hd

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.hd

    def splits(self, tp: int) -> bool:
        """Whether tensor parallelism of degree `tp` splits the query heads evenly and the
        key-value heads evenly or replicates them whole (tp a multiple of them)."""
        return not self.n_heads % tp and not (self.n_kv_heads % tp and tp % self.n_kv_heads)

    def check_tp(self, tp: int) -> None:
        """ValueError naming the valid degrees unless `splits(tp)`."""
        if self.splits(tp):
            return
        if self.n_heads % tp:
            raise ValueError(f"hardware.tp = {tp} does not divide the model's {self.n_heads} "
                             f"attention heads; use one of "
                             f"{', '.join(str(t) for t in valid_tps(self))}")
        if self.n_kv_heads % tp and tp % self.n_kv_heads:
            raise ValueError(f"hardware.tp = {tp} neither divides the model's "
                             f"{self.n_kv_heads} key-value heads nor is a multiple of them; use "
                             f"one of {', '.join(str(t) for t in valid_tps(self))}")

    def kv_heads_per_gpu(self, tp: int) -> int:
        return max(self.n_kv_heads // tp, 1)

    def layer_parameters(self) -> int:
        """Parameters of one transformer layer (weights, biases, norms)."""
        d = self.d_model
        attention = d * (self.q_dim + 2 * self.kv_dim) + self.q_dim * d
        if self.qkv_bias:
            attention += self.q_dim + 2 * self.kv_dim
        mlp = (3 if self.gated_mlp else 2) * d * self.d_ff
        if not self.gated_mlp:  # plain MLPs (phi-2) carry biases
            mlp += self.d_ff + d
        norms = (1 if self.parallel_attn_mlp else 2) * d * (2 if self.norm == "layernorm" else 1)
        return attention + mlp + norms

    def parameters(self) -> int:
        """Every parameter: embedding, layers, final norm, LM head (unless tied)."""
        embedding = self.vocab_size * self.d_model
        head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        final_norm = self.d_model * (2 if self.norm == "layernorm" else 1)
        return embedding + self.n_layers * self.layer_parameters() + final_norm + head

    def weight_bytes_per_gpu(self, tp: int, dtype_bytes: float) -> float:
        """Weight bytes one GPU holds: its shard of every layer and of the vocabulary (embedding
        and LM head are split by vocabulary, as vLLM does), the norms whole."""
        d, kv_local = self.d_model, self.kv_heads_per_gpu(tp) * self.hd
        layer = (d * (self.q_dim // tp + 2 * kv_local) + self.q_dim // tp * d
                 + (3 if self.gated_mlp else 2) * d * self.d_ff / tp)
        vocab = self.vocab_size * d * (1 if self.tie_embeddings else 2) / tp
        return (self.n_layers * layer + vocab) * dtype_bytes

    def kv_bytes_per_token(self, tp: int, dtype_bytes: float) -> float:
        """KV-cache bytes one token takes on one GPU: keys and values in every layer, for the
        GPU's key-value heads (2 x layers x kv_heads x head_dim x bytes / tp)."""
        return 2 * self.n_layers * self.kv_heads_per_gpu(tp) * self.hd * dtype_bytes


def valid_tps(arch: Architecture, limit: int = 8) -> list[int]:
    """The tensor-parallel degrees from 1 to `limit` that `check_tp` accepts."""
    return [tp for tp in range(1, limit + 1) if arch.splits(tp)]


ARCHITECTURE_KEYS = tuple(f.name for f in fields(Architecture))


def engine_architecture(model) -> Architecture:
    """The NumPy engine's transformer (`engine.model.ModelConfig` or its dict) as an
    architecture: multi-head attention (as many key-value heads as heads) through three
    separate projections, a plain two-matrix MLP, LayerNorm, sinusoidal positions (no rotary
    embedding), an LM head of its own, and attention that computes every score of a prefill
    chunk and masks the future (no kernel skips the masked half)."""
    get = model.get if isinstance(model, dict) else lambda k, d=None: getattr(model, k, d)
    return Architecture(n_layers=get("n_layers"), d_model=get("d_model"), n_heads=get("n_heads"),
                        n_kv_heads=get("n_heads"), d_ff=get("d_ff"), vocab_size=get("vocab_size"),
                        max_seq_len=get("max_seq_len"), gated_mlp=False, norm="layernorm",
                        fused_qkv=False, rope=False, flash_attention=False,
                        name="servesim NumPy engine")
