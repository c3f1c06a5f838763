"""What each weight dtype stores and computes in: bytes an element (`DTYPE_BYTES`, a routed
expert's `expert_bytes`), the tensor-core dtype (`compute_dtype`) and the activations'
(`activation_dtype`), for the hardware cost model's weights, KV cache and kernels.
"""

from __future__ import annotations

# Bytes of an element of the weights quantized checkpoints keep 16-bit (embedding, LM head,
# routers)
KEPT_BYTES = 2
# Bytes of a weight (or KV-cache) element. NVFP4 stores 4-bit values with one fp8 scale per 16
# of them (and one fp32 scale per tensor, negligible): 0.5 + 1/16 bytes.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "nvfp4": 0.5625, "mxfp4": 2}
# mxfp4, as gpt-oss ships: the routed experts in MXFP4 (4 bits and an 8-bit scale per 32
# weights), every other weight in bf16, computed in bf16 (the kernels dequantize: w4a16)
EXPERT_BYTES = {"mxfp4": 4.25 / 8}
COMPUTE_DTYPES = {"mxfp4": "bf16"}
# Dtypes whose activations (and KV cache, by default) are the weights' own; the others (fp8,
# nvfp4, mxfp4 weights) run with bf16 activations
NATIVE_DTYPES = ("fp32", "fp16", "bf16")
# A linear-attention layer's state matrices (`model.state_dtype`): bytes an element; and each
# framework's where neither the model's config.json nor the scenario names one: SGLang's
# `--mamba-ssm-dtype` (float32), vLLM's and TensorRT-LLM's "auto" (the weights' dtype: vLLM's
# `mamba_utils` keeps the state as the convolution's, bf16, unless the model's config asks)
STATE_DTYPES = {"fp32": 4, "bf16": 2}
FRAMEWORK_STATE_DTYPES = {"vllm": "bf16", "sglang": "fp32", "trtllm": "bf16"}


def expert_bytes(dtype: str) -> float:
    """Bytes of a routed expert's weight in `dtype` (its other weights' are DTYPE_BYTES')."""
    return EXPERT_BYTES.get(dtype, DTYPE_BYTES[dtype])


def compute_dtype(dtype: str) -> str:
    """The tensor-core dtype a model of weights in `dtype` computes in."""
    return COMPUTE_DTYPES.get(dtype, dtype)


def activation_dtype(dtype: str) -> str:
    """The dtype of the activations of a model of weights in `dtype`: the weights' own for
    fp32, fp16 and bf16 (`NATIVE_DTYPES`), else bf16 (a quantized checkpoint's). Attention
    computes in it, and a quantized checkpoint keeps its LM head and routers in it
    (`KEPT_BYTES`)."""
    return dtype if dtype in NATIVE_DTYPES else "bf16"
