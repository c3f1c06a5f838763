"""A model's architecture from its Hugging Face `config.json` (`model.config`).

`config_architecture(path)` reads the file and returns the `Architecture` keys it sets, keyed as
`Architecture` names them, for the model classes in `READERS` (`architectures[0]` of the file):
dense Llama, Mistral, Qwen2, Qwen3, Gemma 2 and Gemma 3 (text), and mixture-of-experts Mixtral,
Qwen3-MoE, DeepSeek-V2 and V3 (with multi-head latent attention) and gpt-oss. What the cost model does
not read (rotary scaling, logit soft-capping, a multi-token-prediction module) is left out, and
a `quantization_config` is compared with the scenario's dtype (`checkpoint.py`), not read
for it; biases beyond q, k and v, the per-head query and key norms of Qwen3 and
Gemma 3, and gpt-oss's attention sinks are left out too (under 0.1% of any model's parameters).
Every problem is one ValueError naming `model.config`, the file and what is allowed or missing.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

MAX_INT = 10**9  # no size in a config.json is larger (the longest contexts are 10^7 tokens)


def config_architecture(path: str, given: dict | None = None) -> dict:
    """The architecture keys (and `name`) of the config.json at `path`; `given`: the keys the
    scenario sets beside it, which replace the file's (a rule between keys is checked here, in
    the file's own names, only where the file alone sets them; `Architecture` checks the rest)."""
    config = read_config(path)
    names = config.get("architectures")
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise ValueError(f"model.config: {path}: no \"architectures\" list naming the model "
                         f"class (one of {', '.join(READERS)})")
    reader = READERS.get(names[0])
    if reader is None:
        near = [known for known in READERS if known.lower() == names[0].lower()]
        near = near or difflib.get_close_matches(names[0], READERS, n=1, cutoff=0.8)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(f"model.config: {path}: architecture {names[0]!r} is not supported "
                         f"({hint}supported: {', '.join(READERS)}; or define the model with "
                         f"model.n_layers, d_model, ...)")
    c = _Config(config, path, names[0], given or {})
    keys = reader(c)
    _check_shape(c, keys)
    name = config.get("_name_or_path")
    return keys | {"name": name if isinstance(name, str) and name else str(path)}


def read_config(path: str) -> dict:
    """The JSON object of the config.json at `path` (or in the folder `path`), or one
    ValueError naming `model.config`, the file and what is wrong."""
    file = Path(path).expanduser()
    if file.is_dir():  # a model's folder, as vLLM takes one
        if not (file / "config.json").is_file():
            raise ValueError(f"model.config: {path} is a folder without a config.json; give a "
                             f"Hugging Face config.json or the model's folder holding one")
        file = file / "config.json"
    if not file.is_file():
        raise ValueError(f"model.config: file not found: {path}")
    try:
        config = json.loads(file.read_text(encoding="utf-8-sig"))  # a BOM, as some editors write
    except json.JSONDecodeError as exc:
        raise ValueError(f"model.config: {path} is not JSON ({exc.msg} at line "
                         f"{exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"model.config: {path} must hold a JSON object (a Hugging Face "
                         f"config.json), not arrays or objects nested thousands deep") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"model.config: {path} cannot be read ({exc})") from None
    except ValueError:  # the one other refusal of json: a number of 4,300 digits or more
        raise ValueError(f"model.config: {path} holds a number of thousands of digits, which "
                         f"no model's size is") from None
    if not isinstance(config, dict):
        raise ValueError(f"model.config: {path} must hold a JSON object (a Hugging Face "
                         f"config.json)")
    return config


class _Config:
    """A config.json's values, each checked as it is read."""

    def __init__(self, table: dict, path: str, architecture: str, given: dict):
        self.table, self.path, self.architecture = table, path, architecture
        self.given = given  # the scenario's keys beside the file, which replace its own

    def alone(self, *keys: str) -> bool:
        """Whether the file alone sets these `Architecture` keys (the scenario sets none)."""
        return not any(key in self.given for key in keys)

    def error(self, text: str) -> ValueError:
        """The one-line error of a problem in this file."""
        return ValueError(f"model.config: {self.path}: {text}")

    def int(self, key: str, default=None, minimum: int = 1) -> int:
        """An integer from `minimum` to `MAX_INT`; `default` when the key is absent or null
        (None: the key is required)."""
        value = self.table.get(key)
        if value is None:
            if default is None:
                nested = " at its top level; this file nests its text model's keys in " \
                    "text_config: give them as a config.json of their own, naming the text " \
                    "model's class in architectures" \
                    if isinstance(self.table.get("text_config"), dict) else ""
                raise self.error(f"missing {key!r} (a {self.architecture} config.json has "
                                 f"it{nested})")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{key} must be an integer >= {minimum}, got {value!r}")
        if value > MAX_INT:
            raise self.error(f"{key} must be at most {MAX_INT:,}, got {len(str(value))} digits")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.table.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(f"{key} must be true or false, got {value!r}")
        return value

    def list(self, key: str, item=None, allowed: str = "") -> list | None:
        """A list (None when absent), each entry passing `item` (described by `allowed`)."""
        value = self.table.get(key)
        if value is not None and not isinstance(value, list):
            raise self.error(f"{key} must be a list, got {value!r}")
        for entry in value or ():
            if item is not None and not item(entry):
                raise self.error(f"{key} holds {entry!r}; its entries must be {allowed}")
        return value


def _dense(c: _Config, tie: bool = False) -> dict:
    """The keys every model class shares (a gated MLP, RMSNorm, rotary embedding)."""
    n_heads = c.int("num_attention_heads")
    keys = {"n_layers": c.int("num_hidden_layers"), "d_model": c.int("hidden_size"),
            "n_heads": n_heads, "n_kv_heads": c.int("num_key_value_heads", n_heads),
            "d_ff": c.int("intermediate_size"), "vocab_size": c.int("vocab_size"),
            "max_seq_len": _context(c),
            "tie_embeddings": c.bool("tie_word_embeddings", tie), "gated_mlp": True,
            "norm": "rmsnorm"}
    if c.table.get("head_dim") is not None:
        keys["head_dim"] = c.int("head_dim")
    return keys


# Rotary scalings whose max_position_embeddings is the context already (vLLM leaves them as is)
UNSCALED_ROPE = ("su", "longrope", "llama3")
# and those that stretch it by their factor (mrope: none, unless it gives one)
SCALED_ROPE = ("default", "linear", "dynamic", "yarn", "mrope")


def _context(c: _Config) -> int:
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


def _window(c: _Config, n_layers: int, default_sliding) -> dict:
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


def _llama(c: _Config) -> dict:
    return _dense(c) | {"qkv_bias": c.bool("attention_bias", False)}


def _mistral(c: _Config) -> dict:
    keys = _dense(c)
    return keys | _window(c, keys["n_layers"], lambda n: n)  # every layer slides


def _qwen_window(c: _Config, n_layers: int) -> dict:
    """Qwen2/Qwen3: with use_sliding_window, the layers from max_window_layers on slide."""
    if not c.bool("use_sliding_window", False):
        return {}
    first = c.int("max_window_layers", n_layers, minimum=0)
    return _window(c, n_layers, lambda n: max(n - first, 0))


def _qwen2(c: _Config) -> dict:
    keys = _dense(c) | {"qkv_bias": True}  # Qwen2's q, k and v projections carry biases
    return keys | _qwen_window(c, keys["n_layers"])


def _qwen3(c: _Config) -> dict:
    keys = _dense(c) | {"qkv_bias": c.bool("attention_bias", False)}
    return keys | _qwen_window(c, keys["n_layers"])


def _gemma2(c: _Config) -> dict:
    keys = _dense(c, tie=True)  # even layers slide, odd ones attend to every token
    return keys | _window(c, keys["n_layers"], lambda n: (n + 1) // 2)


def _gemma3(c: _Config) -> dict:
    keys = _dense(c, tie=True) | {"max_seq_len": c.int("max_position_embeddings")}  # scaled
    # every `sliding_window_pattern`-th layer attends to all
    pattern = c.int("sliding_window_pattern", 6)
    return keys | _window(c, keys["n_layers"], lambda n: n - n // pattern)


def _experts(c: _Config, n_experts: str, width: str) -> dict:
    experts, top_k = c.int(n_experts), c.int("num_experts_per_tok")
    if top_k > experts and c.alone("n_experts", "experts_per_token"):
        raise c.error(f"num_experts_per_tok ({top_k}) must be at most {n_experts} ({experts})")
    return {"n_experts": experts, "experts_per_token": top_k, "moe_d_ff": c.int(width)}


def _sparse_layers(c: _Config, keys: dict, sparse: int, rule: str) -> dict:
    """`n_dense_layers` of a model with `sparse` mixture-of-experts layers of its
    n_layers, which `rule` (the file's keys) chose: at least one."""
    if not sparse and c.alone("n_dense_layers"):
        raise c.error(f"{rule} leave no mixture-of-experts layer of the "
                      f"{keys['n_layers']} (num_hidden_layers)")
    return {"n_dense_layers": keys["n_layers"] - sparse}


def _mixtral(c: _Config) -> dict:
    keys = _mistral(c)
    return keys | _experts(c, "num_local_experts", "intermediate_size")


def _qwen3_moe(c: _Config) -> dict:
    keys = _qwen3(c) | _experts(c, "num_experts", "moe_intermediate_size")
    layers = keys["n_layers"]
    dense_only = c.list("mlp_only_layers", lambda i: type(i) is int and 0 <= i < layers,
                        f"layer indices from 0 to {layers - 1}") or []
    step = c.int("decoder_sparse_step", 1)
    # the layers i with (i + 1) a multiple of step, but those mlp_only_layers names
    sparse = layers // step - sum(1 for i in set(dense_only) if (i + 1) % step == 0)
    return keys | _sparse_layers(c, keys, sparse, "mlp_only_layers and decoder_sparse_step")


def _deepseek_v2(c: _Config) -> dict:
    return _deepseek(c, first_dense=0, shared=2)


def _deepseek_v3(c: _Config) -> dict:
    return _deepseek(c, first_dense=3, shared=1)


def _deepseek(c: _Config, first_dense: int, shared: int) -> dict:
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


def _gpt_oss(c: _Config) -> dict:
    keys = _dense(c) | {"qkv_bias": c.bool("attention_bias", True)}
    keys |= _experts(c, "num_local_experts", "intermediate_size")
    return keys | _window(c, keys["n_layers"], lambda n: (n + 1) // 2)  # alternating


def _check_shape(c: _Config, keys: dict) -> None:
    """The heads' shape, in the file's own key names, where the file alone sets it
    (`Architecture` checks it again, in its own names, with the scenario's keys)."""
    heads, kv_heads = keys["n_heads"], keys["n_kv_heads"]
    if "kv_lora_rank" in keys or not c.alone("n_heads", "kv_lora_rank"):
        return
    if heads % kv_heads and c.alone("n_kv_heads"):
        raise c.error(f"num_key_value_heads ({kv_heads}) must divide num_attention_heads "
                      f"({heads})")
    if not keys.get("head_dim") and keys["d_model"] % heads and c.alone("d_model", "head_dim"):
        raise c.error(f"hidden_size ({keys['d_model']}) must be a multiple of "
                      f"num_attention_heads ({heads}), or give head_dim")


# What `layer_types` may name (Hugging Face's attention kinds of the classes read).
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
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "DeepseekV2ForCausalLM": _deepseek_v2,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "GptOssForCausalLM": _gpt_oss,
}
