"""FLOPs and bytes of every operator of a step, from its exact shape.

One layer, on one GPU holding a 1/tp shard, for a batch of `T` tokens (prefill chunk tokens,
decodes and padding rows: every row goes through every weight matrix):

| operator | kind | FLOPs | bytes moved |
|---|---|---|---|
| `input_layernorm`, `post_attention_layernorm` | elementwise | 0 (counted as bytes) | read and write T x d |
| `attn_pre_proj` | matmul d -> q + 2 kv | 2 T d (q + 2 kv) | input, weights, output |
| `attn_rope` | elementwise | 0 | read and write the queries and keys |
| `attn_post_proj` | matmul q -> d | 2 T q d | input, weights, output |
| `mlp_up_proj` | matmul d -> 2 ff (gated) or ff | 2 T d (2) ff | input, weights, output |
| `mlp_act` | elementwise | 0 | gated: read 2 T ff, write T ff; else read and write T ff |
| `mlp_down_proj` | matmul ff -> d | 2 T ff d | input, weights, output |
| `add` | elementwise | 0 | read 2 T d, write T d (two of them a layer) |

where d is the model width, q = heads x head_dim / tp, kv = the GPU's key-value heads x head_dim
and ff = d_ff / tp. Weights are `weight_bytes` an element (the dtype's), activations
`act_bytes`. Attention, per layer, from the step's counts (`sim.costs.shape.StepShape`):
prefill attention does 4 q x (causal work) FLOPs, the causal work of a chunk of n tokens after c
being n c + n (n + 1) / 2 (a kernel that skips masked blocks, as FlashAttention; n (c + n) for
one that computes every score and masks, as the NumPy engine); decode attention 4 q x (keys attended) FLOPs and reads every key and
value it attends to. Once a step: the embedding lookup (`emb`), the LM head (a matmul d -> V / tp
for the rows that sample), and, with tp > 1, two all-reduces of T x d activations a layer.
"""

from __future__ import annotations

from .architecture import Architecture

MATMULS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
ADDS_PER_LAYER = 2  # the residual adds after attention and after the MLP


def matmul_shapes(arch: Architecture, tp: int) -> dict:
    """{matmul: (inputs read per row, weight elements, outputs written per row)} on one GPU."""
    d, q = arch.d_model, arch.q_dim // tp
    kv = arch.kv_heads_per_gpu(tp) * arch.hd
    ff = arch.d_ff // tp
    up = (2 if arch.gated_mlp else 1) * ff
    qkv = q + 2 * kv
    return {"attn_pre_proj": (d * (1 if arch.fused_qkv else 3), d * qkv, qkv),
            "attn_post_proj": (q, q * d, d),
            "mlp_up_proj": (d, d * up, up),
            "mlp_down_proj": (ff, ff * d, d)}


def matmul_counts(arch: Architecture, tp: int, tokens, weight_bytes: float,
                  act_bytes: float) -> dict:
    """{matmul: (FLOPs, weight bytes, activation bytes)} for `tokens` rows (a number or an
    array of them)."""
    out = {}
    for name, (read, weights, written) in matmul_shapes(arch, tp).items():
        out[name] = (2 * tokens * weights, weights * weight_bytes,
                     tokens * (read + written) * act_bytes)
    return out


def elementwise_bytes(arch: Architecture, tp: int, tokens, act_bytes: float) -> dict:
    """{elementwise operator: bytes read and written} for `tokens` rows."""
    d, q = arch.d_model, arch.q_dim // tp
    kv = arch.kv_heads_per_gpu(tp) * arch.hd
    ff = arch.d_ff // tp
    norm = 2 * tokens * d * act_bytes + d * act_bytes
    return {"input_layernorm": norm,
            "post_attention_layernorm": 0 * norm if arch.parallel_attn_mlp else norm,
            "attn_rope": 2 * tokens * (q + kv) * act_bytes if arch.rope else 0 * norm,
            "mlp_act": (3 if arch.gated_mlp else 2) * tokens * ff * act_bytes,
            "add": 3 * tokens * d * act_bytes}


def lm_head_counts(arch: Architecture, tp: int, rows, weight_bytes: float,
                   act_bytes: float) -> tuple:
    """(FLOPs, weight bytes, activation bytes) of the LM head for `rows` sampled rows."""
    vocab = -(-arch.vocab_size // tp)
    return (2 * rows * arch.d_model * vocab, arch.d_model * vocab * weight_bytes,
            rows * (arch.d_model + vocab) * act_bytes)


def embedding_bytes(arch: Architecture, tokens, act_bytes: float):
    """Bytes of the embedding lookup: one row read and written per token."""
    return 2 * tokens * arch.d_model * act_bytes


def attention_counts(arch: Architecture, tp: int, prefill_tokens, prefill_attention,
                     prefill_square, prefill_context, decode_seqs, decode_context,
                     kv_bytes: float, act_bytes: float) -> tuple:
    """((prefill FLOPs, prefill bytes), (decode FLOPs, decode bytes)) of one layer's attention on
    one GPU. Prefill: causal work n c + n (n + 1) / 2 per chunk (`prefill_attention` counts
    n (c + n), `prefill_square` n n), its queries and outputs, and the keys and values of its
    context; decode: every key and value attended, read once."""
    q = arch.q_dim // tp
    kv = arch.kv_heads_per_gpu(tp) * arch.hd
    causal = prefill_attention - (prefill_square - prefill_tokens) / 2 \
        if arch.flash_attention else prefill_attention
    prefill = (4 * q * causal,
               2 * prefill_tokens * q * act_bytes
               + 2 * kv * (prefill_context + prefill_tokens) * kv_bytes)
    decode = (4 * q * decode_context,
              2 * decode_seqs * q * act_bytes + 2 * kv * decode_context * kv_bytes)
    return prefill, decode
