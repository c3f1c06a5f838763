"""What a model's config.json says its weights are (`quantization_config`), in servesim's
keys, for the note that says where the scenario's dtype differs (`setup.say_checkpoint`): the
scenario's dtype is costed, not the file's (docs/sim/hardware.md, "A model from its
config.json").
"""

from __future__ import annotations

from .hf_config import read_config


def checkpoint_dtype(path: str):
    """What the config.json's `quantization_config` makes the weights, in servesim's keys:
    (`hardware.dtype`, `hardware.activation_scheme`); its method's name where servesim costs
    no such weights (AWQ, GPTQ, ...); None without one (the weights are what the scenario says).
    """
    config = read_config(path).get("quantization_config")
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
        return (algo.lower(), "static") if algo in ("FP8", "NVFP4") else f"modelopt {algo}"
    return "no quant_method" if method is None else str(method)


def _compressed_tensors(config: dict):
    """`checkpoint_dtype` of llm-compressor's format: fp8 where every group's weights are 8-bit
    floats (block-scaled, or with activations scaled dynamically or statically)."""
    groups = [g for g in (config.get("config_groups") or {}).values() if isinstance(g, dict)]
    weights = [g.get("weights") or {} for g in groups]
    if not groups or not all(w.get("type") == "float" and w.get("num_bits") == 8
                             for w in weights):
        return "compressed-tensors"
    if all(w.get("strategy") == "block" for w in weights):
        return "fp8", "block"
    dynamic = all((g.get("input_activations") or {}).get("dynamic") for g in groups)
    return "fp8", "dynamic" if dynamic else "static"
