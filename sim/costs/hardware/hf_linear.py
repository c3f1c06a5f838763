"""The linear-attention layers of a hybrid's config.json (Gated DeltaNet: Qwen3-Next's and
Qwen3.5's, `hf_classes._qwen3_next`, `_qwen3_5`): which layers, their heads and widths, the
convolution, the state's dtype and the full layers' output gate."""

from __future__ import annotations

from .hf_values import ConfigValues

# What `layer_types` may name in a hybrid of full and linear attention
HYBRID_LAYER_TYPES = ("full_attention", "linear_attention")
# The state dtypes `mamba_ssm_dtype` may name
SSM_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}


def linear_attention(c: ConfigValues, n_layers: int) -> dict:
    """The Gated DeltaNet layers of a hybrid: those `layer_types` marks "linear_attention",
    else all but every `full_attention_interval`-th (transformers' rule, 4 by default); their
    heads, the convolution's width, the state's dtype (`mamba_ssm_dtype`; where the file names
    none, the framework's: `dtypes.FRAMEWORK_STATE_DTYPES`) and the full layers' output gate."""
    types = c.list("layer_types", lambda t: t in HYBRID_LAYER_TYPES,
                   " or ".join(f'"{t}"' for t in HYBRID_LAYER_TYPES))
    if types is not None:
        if len(types) != n_layers:
            raise c.error(f"layer_types has {len(types)} entries; it needs one per layer "
                          f"(num_hidden_layers is {n_layers})")
        linear = types.count("linear_attention")
    else:
        linear = n_layers - n_layers // c.int("full_attention_interval", 4)
    if linear >= n_layers and c.alone("linear_layers"):
        rule = "layer_types" if types is not None else \
            f"full_attention_interval ({c.get('full_attention_interval')})"
        raise c.error(f"{rule} leaves no full-attention layer of the {n_layers}; servesim "
                      f"costs hybrids, whose other layers attend")
    state = c.get("mamba_ssm_dtype")
    if state is not None and (not isinstance(state, str) or state not in SSM_DTYPES):
        raise c.error(f"mamba_ssm_dtype must be one of {', '.join(SSM_DTYPES)}, got "
                      f"{repr(state)[:60]}")
    k_heads, v_heads = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    if v_heads % k_heads and c.alone("linear_k_heads", "linear_v_heads"):
        raise c.error(f"linear_num_key_heads ({k_heads}) must divide linear_num_value_heads "
                      f"({v_heads})")
    keys = {"linear_layers": linear, "linear_k_heads": k_heads, "linear_v_heads": v_heads,
            "linear_k_dim": c.int("linear_key_head_dim"),
            "linear_v_dim": c.int("linear_value_head_dim"),
            "linear_conv": c.int("linear_conv_kernel_dim"),
            "state_dtype": SSM_DTYPES.get(state, ""),
            "attn_gate": c.bool("attn_output_gate", True)}
    return keys if linear else {"attn_gate": keys["attn_gate"]}
