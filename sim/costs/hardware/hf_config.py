"""A model's architecture from its Hugging Face `config.json` (`model.config`).

`config_architecture(path)` reads the file and returns the `Architecture` keys it sets, keyed as
`Architecture` names them, for the model classes in `READERS` (`architectures[0]` of the file):
dense Llama, Mistral, Qwen2, Qwen3, Gemma 2 and Gemma 3 (text), and mixture-of-experts Mixtral,
Qwen2-MoE, Qwen3-MoE, GLM-4.5 (`Glm4MoeForCausalLM`), MiniMax-M2, DeepSeek-V2 and V3 (with
multi-head latent attention), DeepSeek-V3.2 and GLM-5 (with sparse attention too) and gpt-oss,
and hybrids of linear and full attention, Qwen3-Next and Qwen3.5. A multimodal class in
`WRAPPERS` (Gemma 3, Mistral Small 3, Qwen3-VL, Kimi K2.5, Qwen3.5) is read as its text model
(`text_config`), which is what serves text: its vision tower is neither costed nor counted in
memory, and a note says so. What the cost model does not read (rotary scaling, logit
soft-capping, a multi-token-prediction module) is left out, and a `quantization_config` is
compared with the scenario's dtype (`checkpoint.py`), not read for it; biases beyond q, k and v,
the per-head query and key norms of Qwen3, Gemma 3, GLM-4.5 and MiniMax-M2, Qwen2-MoE's
shared-expert gate and gpt-oss's attention sinks are left out too (under 0.1% of any model's
parameters). Where a file leaves a key out, the class's transformers defaults fill it as vLLM
loads it (DeepSeek's, GLM-4.5's, Qwen2-MoE's; and Gemma 3's, whose published files leave some
out). Every problem is one ValueError naming `model.config`, the file and what is allowed or
missing.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from ...notes import say_once
from .hf_classes import CLASS_DEFAULTS, READERS, WRAPPERS
from .hf_values import ConfigValues


def config_architecture(path: str, given: dict | None = None) -> dict:
    """The architecture keys (and `name`) of the config.json at `path`; `given`: the keys the
    scenario sets beside it, which replace the file's (a rule between keys is checked here, in
    the file's own names, only where the file alone sets them; `Architecture` checks the rest)."""
    config = read_config(path)
    names, known = config.get("architectures"), [*READERS, *WRAPPERS]
    if not isinstance(names, list) or not names or not isinstance(names[0], str):
        raise ValueError(f"model.config: {path}: no \"architectures\" list naming the model "
                         f"class (one of {', '.join(known)})")
    if names[0] not in known:
        near = [k for k in known if k.lower() == names[0].lower()]
        near = near or difflib.get_close_matches(names[0], known, n=1, cutoff=0.8)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(f"model.config: {path}: architecture {names[0]!r} is not supported "
                         f"({hint}supported: {', '.join(known)}; or define the model with "
                         f"model.n_layers, d_model, ...)")
    if names[0] in WRAPPERS:
        c = _text_model(config, path, names[0], given or {})
    else:
        c = ConfigValues(config, path, names[0], given or {},
                         defaults=CLASS_DEFAULTS.get(names[0]))
    keys = READERS[c.architecture](c)
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


def _text_model(config: dict, path: str, wrapper: str, given: dict) -> ConfigValues:
    """The text model of a multimodal class (`WRAPPERS`): its `text_config`, read as the
    text class its `model_type` names, with the wrapper's `tie_word_embeddings` where the
    text model leaves it out (as transformers passes it down)."""
    classes = WRAPPERS[wrapper]
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ValueError(f"model.config: {path}: a {wrapper} config.json holds its text "
                         f"model's keys in a \"text_config\" object; this one has "
                         f"{'none' if text is None else repr(text)[:60]}")
    kind = text.get("model_type", next(iter(classes)))
    if not isinstance(kind, str) or kind not in classes:
        raise ValueError(f"model.config: {path}: text_config.model_type {kind!r} is not a "
                         f"text model servesim reads in a {wrapper} (one of "
                         f"{', '.join(classes)})")
    tie = config.get("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):
        raise ValueError(f"model.config: {path}: tie_word_embeddings must be true or false, "
                         f"got {repr(tie)[:60]}")
    if text.get("tie_word_embeddings") is None and tie is not None:
        text = text | {"tie_word_embeddings": tie}
    say_once(f"note: model.config: {path}: {wrapper} is costed as its text model "
             f"(text_config, a {classes[kind]}); its vision tower is neither costed nor "
             f"counted in the GPU's memory")
    return ConfigValues(text, path, classes[kind], given, within="text_config",
                        defaults=CLASS_DEFAULTS.get(classes[kind]))


def _check_shape(c: ConfigValues, keys: dict) -> None:
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
