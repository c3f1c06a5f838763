"""What a model's config.json says its weights are (`quantization_config`), in servesim's
keys, for the note that says where the scenario's dtype differs (`say_checkpoint`): the
scenario's dtype is costed, not the file's (docs/sim/hardware.md, "A model from its
config.json").
"""

from __future__ import annotations

from ...notes import say_once
from .hf_config import read_config


# Parts of a layer a quantized checkpoint may leave in bf16 (`quantization_config.ignore` or
# `modules_to_not_convert`: module names or patterns), by what their names hold
KEPT_PARTS = (("attention", ("self_attn", ".attn.", "*.attn")),
              ("linear attention", ("linear_attn",)),
              ("shared experts", ("shared_expert",)))


def kept_parts(path: str) -> list[str]:
    """The parts of a layer (`KEPT_PARTS`) the config.json's quantization_config leaves
    unquantized, in order; empty where it leaves none of them (norms, routers and the LM head
    servesim keeps in bf16 anyway)."""
    config = _quantization_config(read_config(path))
    if not isinstance(config, dict):
        return []
    names = config.get("ignore") or config.get("modules_to_not_convert") or []
    names = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
    return [part for part, marks in KEPT_PARTS
            if any(mark in name for name in names for mark in marks)]


def _quantization_config(table: dict):
    """The config.json's `quantization_config`, or its text model's in a multimodal wrapper
    (Kimi-K2.5's); None without one."""
    config = table.get("quantization_config")
    text = table.get("text_config")
    if config is None and isinstance(text, dict):
        config = text.get("quantization_config")
    return config


def checkpoint_dtype(path: str):
    """What the config.json's `quantization_config` (or, in a multimodal wrapper, its
    `text_config`'s) makes the weights, in servesim's keys:
    (`hardware.dtype`, `hardware.activation_scheme`); its method's name where servesim costs
    no such weights (AWQ, GPTQ, ...); None without one (the weights are what the scenario says).
    """
    config = _quantization_config(read_config(path))
    if config is None:
        return None
    if not isinstance(config, dict):
        return repr(config)
    method = config.get("quant_method")
    if method == "fp8":
        scheme = "block" if config.get("weight_block_size") else \
            "dynamic" if config.get("activation_scheme") == "dynamic" else "static"
        return "fp8", scheme
    if method == "fbgemm_fp8":  # Meta's: per-row weights, activations scaled at each call
        return "fp8", "dynamic"
    if method == "compressed-tensors":
        return _compressed_tensors(config)
    if method == "mxfp4":
        return "mxfp4", "static"
    if method == "modelopt":
        algo = config.get("quant_algo")
        return (algo.lower(), "static") if algo in ("FP8", "NVFP4") else \
            " ".join(("modelopt", *([str(algo)] if algo else [])))
    return "no quant_method" if method is None else str(method)


def _compressed_tensors(config: dict):
    """`checkpoint_dtype` of llm-compressor's format: fp8 where every group's weights and
    activations are 8-bit floats (block-scaled, or activations scaled dynamically or
    statically), nvfp4 where both are 4-bit floats; another scheme (weights alone, integers)
    by name."""
    groups = config.get("config_groups") or {}
    groups = [g for g in groups.values() if isinstance(g, dict)] if isinstance(groups, dict) \
        else []
    pairs = [(_table(g.get("weights")), _table(g.get("input_activations"))) for g in groups]

    def floats_of(bits: int) -> bool:
        return bool(pairs) and all(w.get("type") == a.get("type") == "float"
                                   and w.get("num_bits") == a.get("num_bits") == bits
                                   for w, a in pairs)

    if floats_of(4):
        return "nvfp4", "static"
    if not floats_of(8):
        return "compressed-tensors (another scheme than fp8 or nvfp4 weights and activations)"
    if all(w.get("strategy") == "block" for w, _ in pairs):
        return "fp8", "block"
    return "fp8", "dynamic" if all(a.get("dynamic") for _, a in pairs) else "static"


def _table(value) -> dict:
    """A group's `weights` or `input_activations` as its table (any other value: none)."""
    return value if isinstance(value, dict) else {}


def say_checkpoint(path: str, dtype: str, scheme: str) -> None:
    """A note, once, where the config.json's quantization_config makes the weights other than
    `hardware.dtype` (and, in fp8, `activation_scheme`) says: the scenario's are costed."""
    checkpoint = checkpoint_dtype(path)
    if checkpoint == (dtype, scheme if dtype == "fp8" else "static"):
        kept = kept_parts(path) if dtype in ("fp8", "nvfp4") else []
        if kept:  # its quantized weights are the scenario's, but not every matrix is
            parts = " and the ".join((", the ".join(kept[:-1]), kept[-1])) if kept[1:] \
                else kept[0]
            say_once(f"note: model.config: {path}: its quantization_config leaves the {parts} "
                     f"in bf16 (its ignore list); servesim costs them in {dtype} with the "
                     f"rest: their bytes and times come out below the checkpoint's")
        return
    if checkpoint is None:
        return
    costed = f'hardware.dtype = "{dtype}"' + \
        (f', activation_scheme = "{scheme}"' if dtype == "fp8" else "")
    if isinstance(checkpoint, tuple):
        said = f'hardware.dtype = "{checkpoint[0]}"' + \
            (f', activation_scheme = "{checkpoint[1]}"' if checkpoint[0] == "fp8" else "")
        say_once(f"note: model.config: {path}: its quantization_config makes the weights "
                 f"{said}; costed as the scenario's {costed}")
    else:
        say_once(f"note: model.config: {path}: its quantization_config ({checkpoint}) is a "
                 f"format servesim does not cost; the weights are costed as {costed}")
