"""A transformer's architecture as the hardware cost model needs it: its shapes and how tensor
and expert parallelism split it; what it weighs (its parameters, its bytes per GPU) is the
`Sizes` mixin's (`sizes.py`).

`Architecture` holds the keys of a Hugging Face `config.json` that set the cost of serving
(layers, widths, heads and key-value heads for grouped-query attention, the MLP's width and
whether it is gated) and the engine's own `ModelConfig` keys where they exist, and three
optional parts, each off at its zero default:

- **Mixture of experts** (`n_experts` > 0): the MLP of a layer is `n_experts` routed experts of
  width `moe_d_ff`, of which a router picks `experts_per_token` for each token, beside
  `n_shared_experts` experts of width `shared_d_ff` (default `moe_d_ff`) that every token
  goes through; `n_dense_layers` layers keep a dense MLP of width `d_ff` instead (DeepSeek's
  `first_k_dense_replace`; their place in the stack does not change the cost).
- **Multi-head latent attention** (`kv_lora_rank` > 0, DeepSeek-V2/V3): keys and values are
  projected down to one latent of `kv_lora_rank` values per token (and queries to
  `q_lora_rank`, 0: no query compression), then up per head: `qk_nope_head_dim` +
  `qk_rope_head_dim` for queries and keys, `v_head_dim` for values. The KV cache holds the
  latent and the shared rotary key, `kv_lora_rank + qk_rope_head_dim` values a token a layer.
- **Sparse attention** (`index_topk` > 0, DeepSeek-V3.2 and GLM-5, over latent attention): a
  lightning indexer of `index_n_heads` heads of `index_head_dim` scores every cached key for
  each query (in fp8), and the query attends to the `index_topk` it scores highest. Its
  projections (from the query latent and the input) are whole on every GPU, and the cache
  holds its key for every token, fp8 with a scale per 128 values, beside the latent.
- **Sliding-window attention** (`sliding_window` > 0): `sliding_layers` of the `n_layers` layers
  attend to at most the last `sliding_window` tokens (gpt-oss: 18 of 36 layers, 128 tokens;
  Mistral-7B-v0.1: all 32, 4,096), the others to every token. A window of `max_seq_len` tokens
  or more never binds, so the model is costed as attending to every token.
- **Linear attention** (`linear_layers` > 0: Gated DeltaNet, Qwen3-Next's and Qwen3.5's):
  `linear_layers` of the layers keep no keys; each sequence carries a state of fixed size
  instead, `linear_v_heads` matrices of `linear_k_dim` x `linear_v_dim` values in
  `state_dtype`, and a short convolution's last `linear_conv` - 1 inputs. Such a layer projects
  its input to `linear_k_heads` query and key heads of `linear_k_dim`, `linear_v_heads` value
  heads of `linear_v_dim`, an output gate as wide as the values and two scalars a value head;
  convolves the queries, keys and values; updates the state by the gated delta rule token by
  token (a chunked form in prefill); and projects the gated, normed output back. The other
  layers attend to every token.

`attn_gate` (Qwen3-Next's and Qwen3.5's attention layers) makes the query projection twice as
wide: the queries and a gate on the attention's output.

Tensor parallelism (`tp` GPUs) splits the query heads, the MLP's columns and the vocabulary
across the GPUs; key-value heads are split too, or replicated when there are fewer of them than
GPUs (as vLLM does), so a GPU always holds at least one. Multi-head latent attention splits the
heads but not the latent: every GPU holds the down projections and caches the whole latent, as
vLLM does. Experts are split by columns across the `tp` GPUs (expert parallelism `ep` = 1) or,
with `ep` = tp, whole experts across the GPUs (vLLM's expert parallelism with one data-parallel
rank); the router and the shared experts are replicated and tensor-parallel respectively.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .architecture_checks import LINEAR_KEYS, MLA_KEYS, MOE_KEYS, NORMS, SPARSE_KEYS, Checks
from .sizes import Sizes

OPTIONAL_INTS = ("head_dim", "n_experts", *MOE_KEYS, "kv_lora_rank", *MLA_KEYS, "index_topk",
                 *SPARSE_KEYS, "sliding_window", "sliding_layers", "linear_layers",
                 *LINEAR_KEYS)

FLAGS = ("gated_mlp", "tie_embeddings", "qkv_bias", "parallel_attn_mlp", "attn_gate",
         "fused_qkv", "rope", "flash_attention")


@dataclass(frozen=True)
class Architecture(Checks, Sizes):
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
    # mixture of experts (n_experts = 0: a dense model)
    n_experts: int = 0  # routed experts a layer
    experts_per_token: int = 0  # top-k
    moe_d_ff: int = 0  # a routed expert's MLP width
    n_shared_experts: int = 0  # experts every token goes through
    shared_d_ff: int = 0  # a shared expert's width (0: moe_d_ff)
    n_dense_layers: int = 0  # layers with a dense MLP of width d_ff instead of experts
    # multi-head latent attention (kv_lora_rank = 0: grouped-query attention)
    q_lora_rank: int = 0  # 0: queries projected directly from d_model
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek's sparse attention (index_topk = 0: a query attends to every key)
    index_topk: int = 0  # keys a query attends to at most, the indexer's choice
    index_n_heads: int = 0  # the indexer's heads
    index_head_dim: int = 0  # and their width
    # sliding-window attention (sliding_window = 0: every layer attends to every token)
    sliding_window: int = 0  # tokens a sliding layer attends to
    sliding_layers: int = 0  # how many of the layers slide
    # linear attention, Gated DeltaNet (linear_layers = 0: every layer attends to every token)
    linear_layers: int = 0  # how many of the layers
    linear_k_heads: int = 0  # query and key heads
    linear_v_heads: int = 0  # value heads (a state matrix each)
    linear_k_dim: int = 0  # their widths
    linear_v_dim: int = 0
    linear_conv: int = 0  # the short convolution's width
    state_dtype: str = ""  # the state's elements, fp32 or bf16 ("": the framework's, setup.py)
    attn_gate: bool = False  # the query projection also makes a gate on attention's output
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
        for f in OPTIONAL_INTS:
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"model.{f} must be an integer >= 0, got {value!r}")
        for f in FLAGS:
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"model.{f} must be true or false, got {getattr(self, f)!r}")
        if not self.head_dim and not self.is_mla and self.d_model % self.n_heads:
            raise ValueError(f"model.d_model ({self.d_model}) must be divisible by "
                             f"model.n_heads ({self.n_heads}), or give model.head_dim")
        if not self.is_mla and self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_kv_heads ({self.n_kv_heads}) must divide model.n_heads "
                             f"({self.n_heads})")
        if self.norm not in NORMS:
            raise ValueError(f"model.norm must be one of {', '.join(NORMS)}, got {self.norm!r}")
        self._check_experts()
        self._check_latent_attention()
        self._check_sparse_attention()
        self._check_window()
        self._check_linear_attention()
        if self.sliding_window >= self.max_seq_len:  # a window no sequence reaches: none
            object.__setattr__(self, "sliding_window", 0)
            object.__setattr__(self, "sliding_layers", 0)

    # --- shapes -------------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_sparse(self) -> bool:
        """DeepSeek's sparse attention: a query attends to the `index_topk` keys an indexer
        picks among all of them."""
        return self.index_topk > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is experts."""
        return self.n_layers - self.n_dense_layers if self.is_moe else 0

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP of width d_ff."""
        return self.n_layers - self.moe_layers

    @property
    def full_layers(self) -> int:
        """Layers that attend to every token (neither sliding nor linear)."""
        return self.n_layers - self.sliding_layers - self.linear_layers

    @property
    def attention_layers(self) -> int:
        """Layers that attend (full or sliding): all but the linear ones."""
        return self.n_layers - self.linear_layers

    @property
    def linear_qk(self) -> int:
        """Width of a linear-attention layer's queries (and of its keys)."""
        return self.linear_k_heads * self.linear_k_dim

    @property
    def linear_values(self) -> int:
        """Width of a linear-attention layer's values (and of its output gate)."""
        return self.linear_v_heads * self.linear_v_dim

    @property
    def shared_ff(self) -> int:
        """The shared experts' total width (one MLP of it, as vLLM runs them)."""
        return self.n_shared_experts * (self.shared_d_ff or self.moe_d_ff)

    @property
    def hd(self) -> int:
        """Head dimension (multi-head latent attention: of queries and keys)."""
        if self.is_mla:
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim or self.d_model // self.n_heads

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.hd

    @property
    def q_proj_dim(self) -> int:
        """Outputs of the query projection: the queries, and as many gates with attn_gate."""
        return self.q_dim * (2 if self.attn_gate else 1)

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.hd

    @property
    def o_dim(self) -> int:
        """Width of the attention output (what the output projection reads)."""
        return self.n_heads * (self.v_head_dim if self.is_mla else self.hd)

    @property
    def latent_dim(self) -> int:
        """Values a token caches per layer with multi-head latent attention."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def splits(self, tp: int) -> bool:
        """Whether tensor parallelism of degree `tp` splits the query heads evenly, the
        key-value heads evenly or replicates them whole (tp a multiple of them), and the MLP
        widths evenly (as vLLM's column-parallel layers require)."""
        if self.n_heads % tp or any(width % tp for _, width in self._mlp_widths()):
            return False
        if self.linear_layers and self.linear_k_heads % tp:
            return False
        return self.is_mla or not (self.n_kv_heads % tp and tp % self.n_kv_heads)

    def _mlp_widths(self) -> list[tuple[str, int]]:
        """(what, width) of the MLPs tensor parallelism splits in every layout: the dense
        MLP where a layer has one, and the shared experts."""
        widths = [] if self.is_moe and not self.n_dense_layers else [("MLP width", self.d_ff)]
        if self.n_shared_experts:
            widths.append(("shared experts' width", self.shared_ff))
        return widths

    def check_tp(self, tp: int) -> None:
        """ValueError naming the valid degrees unless `splits(tp)`."""
        if self.splits(tp):
            return
        valid = ", ".join(str(t) for t in valid_tps(self))
        if self.n_heads % tp:
            raise ValueError(f"hardware.tp = {tp} does not divide the model's {self.n_heads} "
                             f"attention heads; use one of {valid}")
        for what, width in self._mlp_widths():
            if width % tp:
                raise ValueError(f"hardware.tp = {tp} does not divide the model's {what} "
                                 f"({width}); use one of {valid}")
        if self.linear_layers and self.linear_k_heads % tp:
            raise ValueError(f"hardware.tp = {tp} does not divide the model's "
                             f"{self.linear_k_heads} linear-attention key heads; use one of "
                             f"{valid}")
        raise ValueError(f"hardware.tp = {tp} neither divides the model's "
                         f"{self.n_kv_heads} key-value heads nor is a multiple of them; use "
                         f"one of {valid}")

    def check_ep(self, ep: int, tp: int, dp: int = 1) -> None:
        """ValueError unless expert parallelism `ep` is 1, or every GPU (`tp` x `dp`) on a
        model with experts; and unless attention data parallelism `dp` is 1 or on a model with
        experts (a dense model's ranks would be independent replicas)."""
        if dp > 1 and not self.is_moe:
            raise ValueError(f"hardware.dp = {dp}: {self.name or 'the model'} has no experts, "
                             f"so its data-parallel ranks would never meet; run them as "
                             f"replicas (cluster.replicas) with hardware.dp = 1")
        if ep == 1:
            if self.is_moe and self.moe_d_ff % (tp * dp):
                every = (f"hardware.tp = {tp}" if dp == 1
                         else f"hardware.tp x hardware.dp = {tp * dp}")
                raise ValueError(f"hardware.ep = 1 splits each expert over {every} GPUs, "
                                 f"which does not divide its width ({self.moe_d_ff}); use "
                                 f"hardware.ep = {tp * dp} (whole experts)")
            return
        if not self.is_moe:
            raise ValueError(f"hardware.ep = {ep}: {self.name or 'the model'} has no experts; "
                             f"use hardware.ep = 1")
        if ep != tp * dp:
            every = (f"hardware.tp = {tp}" if dp == 1
                     else f"hardware.tp x hardware.dp = {tp * dp}")
            raise ValueError(f"hardware.ep: must be 1 (experts split by tensor parallelism) or "
                             f"{every} (whole experts across the GPUs), got {ep}")

    def kv_heads_per_gpu(self, tp: int) -> int:
        return max(self.n_kv_heads // tp, 1)

    def experts_per_gpu(self, ep: int) -> int:
        """Routed experts the most loaded GPU holds whole (all of them with ep = 1)."""
        return -(-self.n_experts // ep)


def valid_tps(arch: Architecture, limit: int = 8) -> list[int]:
    """The tensor-parallel degrees from 1 to `limit` that `check_tp` accepts."""
    return [tp for tp in range(1, limit + 1) if arch.splits(tp)]


def expected_experts(n_experts: int, top_k: int, tokens):
    """Expected distinct experts `tokens` tokens route to, each picking `top_k` of `n_experts`
    uniformly: n_experts x (1 - (1 - top_k / n_experts) ^ tokens) (a number or an array)."""
    return n_experts * (1 - (1 - top_k / n_experts) ** tokens)


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
