"""The model classes `model.config` reads (`hf_config.py`): for each Hugging Face class, by
`architectures[0]` of its config.json, a reader (`READERS`) that takes the file's keys, each
checked as it is read (`hf_values.ConfigValues`), to the `Architecture` keys; the multimodal classes read
as their text model (`WRAPPERS`); and the transformers defaults of the keys a class's published
files leave out (`CLASS_DEFAULTS`). A reader says where vLLM builds its class otherwise.
"""

from __future__ import annotations

from .hf_linear import linear_attention
from .hf_values import MAX_INT, ConfigValues


def _dense(c: ConfigValues, tie: bool = False, d_ff: int | None = None) -> dict:
    """The keys every model class shares (a gated MLP, RMSNorm, rotary embedding); `d_ff`:
    the MLP width where the file gives no `intermediate_size` (None: it must)."""
    n_heads = c.int("num_attention_heads")
    keys = {"n_layers": c.int("num_hidden_layers"), "d_model": c.int("hidden_size"),
            "n_heads": n_heads, "n_kv_heads": c.int("num_key_value_heads", n_heads),
            "d_ff": c.int("intermediate_size", d_ff), "vocab_size": c.int("vocab_size"),
            "max_seq_len": _context(c),
            "tie_embeddings": c.bool("tie_word_embeddings", tie), "gated_mlp": True,
            "norm": "rmsnorm"}
    if c.get("head_dim") is not None:
        keys["head_dim"] = c.int("head_dim")
    return keys


# Rotary scalings whose max_position_embeddings is the context already (vLLM leaves them as is)
UNSCALED_ROPE = ("su", "longrope", "llama3")
# and those that stretch it by their factor (mrope: none, unless it gives one)
SCALED_ROPE = ("default", "linear", "dynamic", "yarn", "mrope")


def _context(c: ConfigValues) -> int:
    """The longest sequence vLLM serves of the model (its `_get_and_verify_max_len`):
    `max_position_embeddings`, times the factor of a rotary scaling that stretches it (linear,
    dynamic), or for YaRN `original_max_position_embeddings` times the factor."""
    length = c.int("max_position_embeddings")
    scaling = c.table.get("rope_scaling") or c.table.get("rope_parameters")
    if scaling is None:
        return length
    if not isinstance(scaling, dict):
        raise c.error(f"rope_scaling must be an object, got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in UNSCALED_ROPE:
        return length
    if kind not in SCALED_ROPE:
        raise c.error(f"rope_scaling's rope_type must be one of "
                      f"{', '.join(SCALED_ROPE + UNSCALED_ROPE)}, got {kind!r}")
    factor = scaling.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or \
            not 0 < factor <= MAX_INT:
        raise c.error(f"rope_scaling.factor must be a positive number, got {factor!r}")
    if kind == "yarn":
        original = scaling.get("original_max_position_embeddings")
        if isinstance(original, float) and original.is_integer():  # 32768.0, as JSON may hold
            original = int(original)
        if isinstance(original, bool) or not isinstance(original, int) or \
                not 1 <= original <= MAX_INT:
            raise c.error(f"rope_scaling.original_max_position_embeddings must be a positive "
                          f"integer under YaRN, got {original!r}")
        length = original
    if length * factor < 1:
        raise c.error(f"rope_scaling.factor ({factor!r}) leaves a context of less than one "
                      f"token ({length:,} positions)")
    return min(int(length * factor), MAX_INT)


def _window(c: ConfigValues, n_layers: int, default_sliding) -> dict:
    """`sliding_window` and `sliding_layers`: the layers `layer_types` marks
    "sliding_attention", else `default_sliding(n_layers)` of them, when the config has a
    window."""
    window = c.int("sliding_window", 0, minimum=0)
    types = c.list("layer_types", lambda t: t in LAYER_TYPES,
                   " or ".join(f'"{t}"' for t in LAYER_TYPES))
    if not window:
        if types is not None and "sliding_attention" in types:
            raise c.error("layer_types marks sliding layers, but there is no sliding_window "
                          "(give the window those layers attend over)")
        return {}
    if types is not None and len(types) != n_layers:
        raise c.error(f"layer_types has {len(types)} entries; it needs one per layer "
                      f"(num_hidden_layers is {n_layers})")
    sliding = types.count("sliding_attention") if types is not None else \
        default_sliding(n_layers)
    return {"sliding_window": window, "sliding_layers": sliding} if sliding else {}


def _llama(c: ConfigValues) -> dict:
    return _dense(c) | {"qkv_bias": c.bool("attention_bias", False)}


def _mistral(c: ConfigValues) -> dict:
    keys = _dense(c)
    return keys | _window(c, keys["n_layers"], lambda n: n)  # every layer slides


def _qwen_window(c: ConfigValues, n_layers: int) -> dict:
    """Qwen2/Qwen3: with use_sliding_window, the layers from max_window_layers on slide."""
    if not c.bool("use_sliding_window", False):
        return {}
    first = c.int("max_window_layers", n_layers, minimum=0)
    return _window(c, n_layers, lambda n: max(n - first, 0))


def _qwen2(c: ConfigValues) -> dict:
    keys = _dense(c) | {"qkv_bias": True}  # Qwen2's q, k and v projections carry biases
    return keys | _qwen_window(c, keys["n_layers"])


def _qwen3(c: ConfigValues) -> dict:
    keys = _dense(c) | {"qkv_bias": c.bool("attention_bias", False)}
    return keys | _qwen_window(c, keys["n_layers"])


def _gemma2(c: ConfigValues) -> dict:
    keys = _dense(c, tie=True)  # even layers slide, odd ones attend to every token
    return keys | _window(c, keys["n_layers"], lambda n: (n + 1) // 2)


def _gemma3(c: ConfigValues) -> dict:
    keys = _dense(c, tie=True) | {"max_seq_len": c.int("max_position_embeddings")}  # scaled
    # every `sliding_window_pattern`-th layer attends to all
    pattern = c.int("sliding_window_pattern", 6)
    return keys | _window(c, keys["n_layers"], lambda n: n - n // pattern)


def _experts(c: ConfigValues, n_experts: str, width: str) -> dict:
    experts, top_k = c.int(n_experts), c.int("num_experts_per_tok")
    if top_k > experts and c.alone("n_experts", "experts_per_token"):
        raise c.error(f"num_experts_per_tok ({top_k}) must be at most {n_experts} ({experts})")
    return {"n_experts": experts, "experts_per_token": top_k, "moe_d_ff": c.int(width)}


def _sparse_layers(c: ConfigValues, keys: dict, sparse: int, rule: str) -> dict:
    """`n_dense_layers` of a model with `sparse` mixture-of-experts layers of its
    n_layers, which `rule` (the file's keys) chose: at least one."""
    if not sparse and c.alone("n_dense_layers"):
        raise c.error(f"{rule} leave no mixture-of-experts layer of the "
                      f"{keys['n_layers']} (num_hidden_layers)")
    return {"n_dense_layers": keys["n_layers"] - sparse}


def _mixtral(c: ConfigValues) -> dict:
    keys = _mistral(c)
    return keys | _experts(c, "num_local_experts", "intermediate_size")


def _qwen3_moe(c: ConfigValues) -> dict:
    return _moe_layers(c, _qwen3(c) | _experts(c, "num_experts", "moe_intermediate_size"))


def _moe_layers(c: ConfigValues, keys: dict) -> dict:
    """Qwen2-MoE's and Qwen3-MoE's dense layers: those `mlp_only_layers` names, and those
    `decoder_sparse_step` skips."""
    layers = keys["n_layers"]
    dense_only = c.list("mlp_only_layers", lambda i: type(i) is int and 0 <= i < layers,
                        f"layer indices from 0 to {layers - 1}") or []
    step = c.int("decoder_sparse_step", 1)
    # the layers i with (i + 1) a multiple of step, but those mlp_only_layers names
    sparse = layers // step - sum(1 for i in set(dense_only) if (i + 1) % step == 0)
    return keys | _sparse_layers(c, keys, sparse, "mlp_only_layers and decoder_sparse_step")


def _deepseek_v2(c: ConfigValues) -> dict:
    return _deepseek(c, first_dense=0, shared=2)


def _deepseek_v3(c: ConfigValues) -> dict:
    return _deepseek(c, first_dense=3, shared=1)


def _deepseek_v32(c: ConfigValues) -> dict:
    """DeepSeek-V3.2's (and GLM-5's, `GlmMoeDsaForCausalLM`): V3's, with sparse attention."""
    return _deepseek(c, first_dense=3, shared=1) | {
        "index_topk": c.int("index_topk"), "index_n_heads": c.int("index_n_heads"),
        "index_head_dim": c.int("index_head_dim")}


def _deepseek(c: ConfigValues, first_dense: int, shared: int) -> dict:
    """DeepSeek-V2's and V3's keys (multi-head latent attention, shared and routed experts);
    `first_dense`, `shared`: the defaults of transformers' config class of the file's model
    class, which differ (as vLLM loads it without --trust-remote-code)."""
    keys = _dense(c) | _experts(c, "n_routed_experts", "moe_intermediate_size")
    keys.pop("head_dim", None)  # some copies write qk_rope_head_dim there; the heads are MLA's
    # q_lora_rank null: no low-rank query (DeepSeek-V2-Lite's)
    first = c.int("first_k_dense_replace", first_dense, minimum=0)
    every = c.int("moe_layer_freq", 1)
    layers = keys["n_layers"]  # the layers i >= first with i a multiple of every
    sparse = max((layers - 1) // every - (first - 1) // every, 0) if first else \
        (layers - 1) // every + 1
    keys |= _sparse_layers(c, keys, sparse, "first_k_dense_replace and moe_layer_freq")
    q_lora_rank = 0 if "q_lora_rank" in c.table and c.table["q_lora_rank"] is None else \
        c.int("q_lora_rank", 1536, minimum=0)
    shared = 0 if "n_shared_experts" in c.table and c.table["n_shared_experts"] is None else \
        c.int("n_shared_experts", shared, minimum=0)  # null: none, as vLLM builds it
    return keys | {"n_shared_experts": shared,
                   "q_lora_rank": q_lora_rank,
                   "kv_lora_rank": c.int("kv_lora_rank"),
                   "qk_nope_head_dim": c.int("qk_nope_head_dim"),
                   "qk_rope_head_dim": c.int("qk_rope_head_dim"),
                   "v_head_dim": c.int("v_head_dim")}


def _gpt_oss(c: ConfigValues) -> dict:
    keys = _dense(c) | {"qkv_bias": c.bool("attention_bias", True)}
    keys |= _experts(c, "num_local_experts", "intermediate_size")
    return keys | _window(c, keys["n_layers"], lambda n: (n + 1) // 2)  # alternating


def _qwen2_moe(c: ConfigValues) -> dict:
    keys = _moe_layers(c, _qwen2(c) | _experts(c, "num_experts", "moe_intermediate_size"))
    # one shared expert, gated (the gate left out); Qwen2MoeConfig's default width, 5,632
    width = c.int("shared_expert_intermediate_size", 5632, minimum=0)
    return keys | ({"n_shared_experts": 1, "shared_d_ff": width} if width else {})


def _glm4_moe(c: ConfigValues) -> dict:
    """GLM-4.5, 4.6 and 4.7: grouped-query attention, the first `first_k_dense_replace`
    layers dense and the others routed and shared experts (vLLM: layer i has experts where
    i >= first_k_dense_replace)."""
    keys = _dense(c) | {"qkv_bias": c.bool("attention_bias", False)}
    keys |= _experts(c, "n_routed_experts", "moe_intermediate_size")
    first = c.int("first_k_dense_replace", 1, minimum=0)
    keys |= _sparse_layers(c, keys, max(keys["n_layers"] - first, 0),
                           "first_k_dense_replace and num_hidden_layers")
    return keys | {"n_shared_experts": c.int("n_shared_experts", 1, minimum=0)}


def _minimax_m2(c: ConfigValues) -> dict:
    """MiniMax-M2: every layer routed experts of `intermediate_size` and no shared expert (vLLM
    builds none, whatever `shared_intermediate_size` says), each attending to every token; a
    layer of linear ("lightning") attention, `attn_type_list` 0 (MiniMax-Text-01's), is not
    modelled."""
    keys = _dense(c) | {"qkv_bias": c.bool("attention_bias", False)}
    keys |= _experts(c, "num_local_experts", "intermediate_size")
    kinds = c.list("attn_type_list", lambda t: type(t) is int and t in (0, 1),
                   "0 (linear) or 1 (softmax)")
    if kinds is not None and len(kinds) != keys["n_layers"]:
        raise c.error(f"attn_type_list has {len(kinds)} entries; it needs one per layer "
                      f"(num_hidden_layers is {keys['n_layers']})")
    if kinds is not None and 0 in kinds:
        raise c.error(f"attn_type_list marks {kinds.count(0)} of its layers 0 (linear "
                      f"attention), which servesim does not cost; it costs MiniMax-M2's "
                      f"softmax attention (1) in every layer")
    return keys


def _qwen3_next(c: ConfigValues) -> dict:
    """Qwen3-Next (and Qwen3.5's mixture-of-experts text model): Gated DeltaNet layers beside
    gated full attention, every MLP routed experts and one shared expert (Qwen2-MoE's rule of
    dense layers); the MLP width of a dense layer is `intermediate_size`, or the experts' where
    there is none (Qwen3.5's, all of whose layers have experts)."""
    width = c.int("moe_intermediate_size")
    keys = _dense(c, d_ff=width) | {"qkv_bias": c.bool("attention_bias", False)}
    keys = _moe_layers(c, keys | _experts(c, "num_experts", "moe_intermediate_size"))
    if c.get("intermediate_size") is None and keys["n_dense_layers"] and c.alone("d_ff"):
        dense = keys["n_dense_layers"]
        raise c.error(f"missing 'intermediate_size': mlp_only_layers and decoder_sparse_step "
                      f"leave {dense} dense layer{'s' * (dense > 1)}, whose MLP width it is")
    shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
    keys |= {"n_shared_experts": 1, "shared_d_ff": shared} if shared else {}
    return keys | linear_attention(c, keys["n_layers"])


def _qwen3_5(c: ConfigValues) -> dict:
    """Qwen3.5's dense text model: Gated DeltaNet layers beside gated full attention."""
    keys = _dense(c) | {"qkv_bias": c.bool("attention_bias", False)}
    return keys | linear_attention(c, keys["n_layers"])


# What `layer_types` may name in a model with sliding windows (Hugging Face's attention kinds;
# a hybrid's: `hf_linear.HYBRID_LAYER_TYPES`)
LAYER_TYPES = ("full_attention", "sliding_attention")

# The model classes read, by `architectures[0]`.
READERS = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _mistral,
    "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _qwen3,
    "Gemma2ForCausalLM": _gemma2,
    "Gemma3ForCausalLM": _gemma3,
    "MixtralForCausalLM": _mixtral,
    "Qwen2MoeForCausalLM": _qwen2_moe,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "Glm4MoeForCausalLM": _glm4_moe,
    "MiniMaxM2ForCausalLM": _minimax_m2,
    "DeepseekV2ForCausalLM": _deepseek_v2,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "DeepseekV32ForCausalLM": _deepseek_v32,
    "GlmMoeDsaForCausalLM": _deepseek_v32,
    "GptOssForCausalLM": _gpt_oss,
    "Qwen3NextForCausalLM": _qwen3_next,
    "Qwen3_5ForCausalLM": _qwen3_5,
    "Qwen3_5MoeForCausalLM": _qwen3_next,
}

# Multimodal classes, read as their text model: text_config's model_type -> its class (the
# first where text_config names none)
WRAPPERS = {
    "Gemma3ForConditionalGeneration": {"gemma3_text": "Gemma3ForCausalLM"},
    "Mistral3ForConditionalGeneration": {"mistral": "MistralForCausalLM"},
    "Qwen3VLForConditionalGeneration": {"qwen3_vl_text": "Qwen3ForCausalLM"},
    "Qwen3VLMoeForConditionalGeneration": {"qwen3_vl_moe_text": "Qwen3MoeForCausalLM"},
    "KimiK25ForConditionalGeneration": {"kimi_k2": "DeepseekV3ForCausalLM",
                                        "deepseek_v3": "DeepseekV3ForCausalLM"},
    "Qwen3_5ForConditionalGeneration": {"qwen3_5_text": "Qwen3_5ForCausalLM"},
    "Qwen3_5MoeForConditionalGeneration": {"qwen3_5_moe_text": "Qwen3_5MoeForCausalLM"},
}

# transformers' defaults of the keys a class's published files leave out (Gemma3TextConfig:
# google/gemma-3-27b-it's text_config has no vocab_size or max_position_embeddings)
CLASS_DEFAULTS = {
    "Gemma3ForCausalLM": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                          "num_hidden_layers": 26, "num_attention_heads": 8,
                          "num_key_value_heads": 4, "head_dim": 256,
                          "max_position_embeddings": 131072, "sliding_window": 4096,
                          "sliding_window_pattern": 6},
}
