"""The checks of an `Architecture`'s optional parts (architecture.py): each off at its key's
zero, and then none of its keys given; on, with every key it needs. A mixin of
`Architecture`, whose fields and shapes it reads; each check raises one ValueError naming the
scenario's key."""

from __future__ import annotations

from .dtypes import STATE_DTYPES

NORMS = ("rmsnorm", "layernorm")
MOE_KEYS = ("experts_per_token", "moe_d_ff", "n_shared_experts", "shared_d_ff",
            "n_dense_layers")
MLA_KEYS = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
SPARSE_KEYS = ("index_n_heads", "index_head_dim")
LINEAR_KEYS = ("linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim",
               "linear_conv")


class Checks:
    """The optional parts' checks of an `Architecture` (module docstring)."""

    def _check_off(self, key: str, keys: tuple, part: str, off: str) -> bool:
        """Whether the optional `part` is off (`key` 0); ValueError where it is off and one of
        its `keys` is given anyway."""
        if getattr(self, key):
            return False
        given = [k for k in keys if getattr(self, k)]
        if given:
            raise ValueError(f"model.{given[0]} ({getattr(self, given[0])}) is a {part} key "
                             f"and model.{key} is 0 ({off}): give model.{key}, or set "
                             f"{', '.join(given)} to 0 too")
        return True

    def _check_experts(self) -> None:
        if self._check_off("n_experts", MOE_KEYS, "mixture-of-experts", "no experts"):
            return
        if not self.experts_per_token:
            raise ValueError("model.experts_per_token (the experts each token is routed to) "
                             "must be given with model.n_experts")
        if not 1 <= self.experts_per_token <= self.n_experts:
            raise ValueError(f"model.experts_per_token must be from 1 to model.n_experts "
                             f"({self.n_experts}), got {self.experts_per_token}")
        if not self.moe_d_ff:
            raise ValueError("model.moe_d_ff (an expert's MLP width) must be a positive "
                             "integer with model.n_experts")
        if self.shared_d_ff and not self.n_shared_experts:
            raise ValueError("model.shared_d_ff is the shared experts' width: give "
                             "model.n_shared_experts too")
        if self.n_dense_layers >= self.n_layers:
            raise ValueError(f"model.n_dense_layers must be below model.n_layers "
                             f"({self.n_layers}), got {self.n_dense_layers}")

    def _check_sparse_attention(self) -> None:
        if self._check_off("index_topk", SPARSE_KEYS, "sparse attention", "every key attended"):
            return
        if not self.is_mla:
            raise ValueError(f"model.index_topk ({self.index_topk}): sparse attention is "
                             f"DeepSeek's, over latent attention; give model.kv_lora_rank "
                             f"and its keys, or set model.index_topk to 0")
        for f in SPARSE_KEYS:
            if not getattr(self, f):
                raise ValueError(f"model.{f} (of the indexer) must be a positive integer "
                                 f"with model.index_topk")

    def _check_latent_attention(self) -> None:
        if self._check_off("kv_lora_rank", MLA_KEYS, "multi-head latent attention",
                           "no latent attention"):
            return
        for f in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if not getattr(self, f):
                raise ValueError(f"model.{f} must be a positive integer with "
                                 f"model.kv_lora_rank")
        if self.head_dim:
            raise ValueError("model.head_dim is not used with latent attention (its heads are "
                             "qk_nope_head_dim + qk_rope_head_dim wide): leave it out")

    def _check_window(self) -> None:
        if bool(self.sliding_window) != bool(self.sliding_layers):
            raise ValueError("model.sliding_window and model.sliding_layers come together "
                             "(tokens a sliding layer attends to, and how many layers slide)")
        if self.sliding_layers > self.n_layers:
            raise ValueError(f"model.sliding_layers must be at most model.n_layers "
                             f"({self.n_layers}), got {self.sliding_layers}")

    def _check_linear_attention(self) -> None:
        if not isinstance(self.state_dtype, str) or \
                self.state_dtype not in ("", *STATE_DTYPES):  # "": the framework's
            raise ValueError(f"model.state_dtype must be one of {', '.join(STATE_DTYPES)}, "
                             f"got {repr(self.state_dtype)[:60]}")
        if self.state_dtype and not self.linear_layers:
            raise ValueError(f"model.state_dtype ({self.state_dtype}) is the linear-attention "
                             f"layers' state and model.linear_layers is 0 (no linear "
                             f"attention): leave it out, or give model.linear_layers")
        if self._check_off("linear_layers", LINEAR_KEYS, "linear-attention",
                           "no linear attention"):
            return
        for f in LINEAR_KEYS:
            if not getattr(self, f):
                raise ValueError(f"model.{f} must be a positive integer with "
                                 f"model.linear_layers")
        if self.linear_layers >= self.n_layers:
            raise ValueError(f"model.linear_layers must be below model.n_layers "
                             f"({self.n_layers}): servesim costs hybrids, whose other layers "
                             f"attend; got {self.linear_layers}")
        if self.linear_v_heads % self.linear_k_heads:
            raise ValueError(f"model.linear_k_heads ({self.linear_k_heads}) must divide "
                             f"model.linear_v_heads ({self.linear_v_heads})")
        if self.is_mla or self.sliding_layers:
            other = "latent" if self.is_mla else "sliding-window"
            raise ValueError(f"model.linear_layers ({self.linear_layers}): linear attention "
                             f"is costed beside full grouped-query attention, not {other} "
                             f"attention; set model.linear_layers to 0")
