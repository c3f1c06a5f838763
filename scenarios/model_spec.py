"""`ModelSpec`, the `[model]` table of a hardware cost model as a resolved config holds it:
a catalog model or a config.json, and the keys given beside it (docs/scenarios/format.md)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .defaults import HARDWARE_MODEL_KEYS


@dataclass(frozen=True)
class ModelSpec:
    """The model of a hardware cost model: a catalog model (`name`) or a config.json
    (`config`) and the keys that define or change its shape (None: the catalog's or the
    file's value)."""

    name: str | None = None
    config: str | None = None  # a Hugging Face config.json (absolute once resolved)
    n_layers: int | None = None
    d_model: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    d_ff: int | None = None
    gated_mlp: bool | None = None
    vocab_size: int | None = None
    max_seq_len: int | None = None
    head_dim: int | None = None
    tie_embeddings: bool | None = None
    norm: str | None = None
    qkv_bias: bool | None = None
    parallel_attn_mlp: bool | None = None
    attn_gate: bool | None = None
    n_experts: int | None = None
    experts_per_token: int | None = None
    moe_d_ff: int | None = None
    n_shared_experts: int | None = None
    shared_d_ff: int | None = None
    n_dense_layers: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    index_topk: int | None = None
    index_n_heads: int | None = None
    index_head_dim: int | None = None
    sliding_window: int | None = None
    sliding_layers: int | None = None
    linear_layers: int | None = None
    linear_k_heads: int | None = None
    linear_v_heads: int | None = None
    linear_k_dim: int | None = None
    linear_v_dim: int | None = None
    linear_conv: int | None = None
    state_dtype: str | None = None

    def given(self) -> dict:
        """The keys the scenario gave (what the catalog's model is changed by)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


assert tuple(f.name for f in fields(ModelSpec)) == HARDWARE_MODEL_KEYS
