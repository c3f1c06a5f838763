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

A mixture-of-experts layer replaces the MLP by `moe_router` (a matmul d -> n_experts, whole on
every GPU), the routed experts `moe_up_proj`, `moe_act`, `moe_down_proj` and the shared experts
`shared_up_proj`, `shared_act`, `shared_down_proj` (an MLP of their total width, split by tp).
The T tokens make T k token-expert pairs (k = experts_per_token); a GPU computes its share of
them (all of them on a 1/tp slice of each expert with ep = 1; those of its n_experts / ep whole
experts with ep = tp) and reads the weights of the experts the pairs touch: of E experts, T
tokens each picking k at random touch E (1 - (1 - k / E)^T) on average (`expected_experts`),
so a decode of few tokens reads few experts and a long prefill all of them. Its matmuls run at
the compute efficiency of their rows per expert. The model's leading dense layers keep the
`mlp_*` operators.

Multi-head latent attention replaces `attn_pre_proj` by `mla_down_proj` (d -> q_lora_rank +
kv_lora_rank + rope, whole on every GPU, as vLLM replicates it), `mla_q_up_proj` (-> the GPU's
heads x (nope + rope)) and `mla_kv_up_proj` (kv_lora_rank -> heads x (nope + v): the keys and
values of prefill tokens; in decode vLLM absorbs these weights into the query and the output,
the same FLOPs and weights), with the two latent RMSNorms `mla_norm` and rotary embedding on the
rope part only. Sparse attention adds its indexer's projections, whole on every GPU:
`indexer_q_proj` (q_lora_rank -> index_n_heads x index_head_dim) and `indexer_k_proj` (d ->
index_head_dim + index_n_heads: its key and its heads' weights). Prefill attention runs on the
up-projected heads (2 (nope + rope) + 2 v FLOPs a head a query-key pair), decode attention on
the latent (2 (kv_lora_rank + rope) + 2 kv_lora_rank), both reading kv_lora_rank + rope cached
values a key.

A linear-attention layer (Gated DeltaNet) replaces the attention projections by `linear_in_proj`
(d -> the GPU's share of its queries, keys, values, output gate and two scalars a value head)
and `linear_out_proj` (its values -> d), with `linear_norm`, the gated RMSNorm of its output
(reading the output and the gate, writing one). Its convolution and the delta rule over the
state are a step's, by its chunks and decodes (`attention.py`). With `attn_gate` the query
projection of an attention layer also makes the gate of its output: 2 q outputs.
"""

from __future__ import annotations

import numpy as np

from .architecture import Architecture, expected_experts

MATMULS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
LAYER_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
ADDS_PER_LAYER = 2  # the residual adds after attention and after the MLP
# Operators of the dense-MLP layers only, and of the mixture-of-experts layers only; of the
# attention layers only, and of the linear-attention layers only (`layers_of`); every other
# operator runs in every layer.
DENSE_OPS = ("mlp_up_proj", "mlp_act", "mlp_down_proj")
# (`moe_experts`: the measured fused kernel in place of the routed experts' three, measured.py)
MOE_OPS = ("moe_router", "moe_up_proj", "moe_down_proj", "moe_experts", "shared_up_proj",
           "shared_down_proj", "moe_act", "shared_act")
ATTENTION_OPS = ("attn_pre_proj", "attn_rope", "attn_post_proj")
LINEAR_OPS = ("linear_in_proj", "linear_out_proj", "linear_norm")
# The measured elementwise operator (ELEMENTWISE) whose efficiency an unmeasured one takes.
TIMED_AS = {"mla_norm": "input_layernorm", "moe_act": "mlp_act", "shared_act": "mlp_act",
            "linear_norm": "input_layernorm"}


def matmul_shapes(arch: Architecture, tp: int) -> dict:
    """{matmul: (inputs read per row, weight elements, outputs written per row)} on one GPU:
    every matmul of T rows but the routed experts (`expert_counts`)."""
    d = arch.d_model
    shapes = _attention_matmuls(arch, tp)
    o = arch.o_dim // tp
    shapes["attn_post_proj"] = (o, o * d, d)
    if arch.dense_layers:
        shapes |= _mlp_matmuls(arch, "mlp", arch.d_ff // tp)
    if arch.is_moe:
        shapes["moe_router"] = (d, d * arch.n_experts, arch.n_experts)
        if arch.shared_ff:
            shapes |= _mlp_matmuls(arch, "shared", arch.shared_ff // tp)
    if arch.linear_layers:
        inputs = (2 * arch.linear_qk + 2 * arch.linear_values + 2 * arch.linear_v_heads) // tp
        values = arch.linear_values // tp
        shapes["linear_in_proj"] = (d, d * inputs, inputs)
        shapes["linear_out_proj"] = (values, values * d, d)
    return shapes


def _attention_matmuls(arch: Architecture, tp: int) -> dict:
    d = arch.d_model
    if arch.is_mla:
        heads = arch.n_heads // tp
        down = arch.q_lora_rank + arch.latent_dim
        q_in, q_out = arch.q_lora_rank or d, heads * arch.hd
        kv_up = heads * (arch.qk_nope_head_dim + arch.v_head_dim)
        shapes = {"mla_down_proj": (d, d * down, down),
                  "mla_q_up_proj": (q_in, q_in * q_out, q_out),
                  "mla_kv_up_proj": (arch.kv_lora_rank, arch.kv_lora_rank * kv_up, kv_up)}
        if arch.is_sparse:  # the indexer's, whole on every GPU
            queries, keys = arch.index_n_heads * arch.index_head_dim, arch.index_head_dim
            shapes["indexer_q_proj"] = (q_in, q_in * queries, queries)
            shapes["indexer_k_proj"] = (d, d * (keys + arch.index_n_heads),
                                        keys + arch.index_n_heads)
        return shapes
    q = arch.q_proj_dim // tp
    kv = arch.kv_heads_per_gpu(tp) * arch.hd
    qkv = q + 2 * kv
    return {"attn_pre_proj": (d * (1 if arch.fused_qkv else 3), d * qkv, qkv)}


def _mlp_matmuls(arch: Architecture, prefix: str, ff: int) -> dict:
    """An MLP of width `ff` on one GPU: `<prefix>_up_proj` and `<prefix>_down_proj`."""
    d, up = arch.d_model, (2 if arch.gated_mlp else 1) * ff
    return {f"{prefix}_up_proj": (d, d * up, up), f"{prefix}_down_proj": (ff, ff * d, d)}


def matmul_counts(arch: Architecture, tp: int, tokens, weight_bytes: float,
                  act_bytes: float) -> dict:
    """{matmul: (FLOPs, weight bytes, activation bytes)} for `tokens` rows (a number or an
    array of them)."""
    out = {}
    for name, (read, weights, written) in matmul_shapes(arch, tp).items():
        out[name] = (2 * tokens * weights, weights * weight_bytes,
                     tokens * (read + written) * act_bytes)
    return out


def expert_split(arch: Architecture, tp: int, ep: int, tokens) -> tuple:
    """(token-expert pairs one GPU computes, experts of its own they touch, an expert's width
    on it) for `tokens` rows: the most loaded GPU's share, routing spread evenly."""
    local = arch.experts_per_gpu(ep) if ep > 1 else arch.n_experts
    share = local / arch.n_experts
    pairs = tokens * arch.experts_per_token * share
    touched = expected_experts(arch.n_experts, arch.experts_per_token, tokens) * share
    return pairs, touched, arch.moe_d_ff // (1 if ep > 1 else tp)


def expert_counts(arch: Architecture, tp: int, ep: int, tokens, weight_bytes: float,
                  act_bytes: float) -> dict:
    """{routed-expert matmul: (FLOPs, weight bytes, activation bytes, rows per expert)} for
    `tokens` rows (a number or an array); empty for a dense model."""
    if not arch.is_moe:
        return {}
    pairs, touched, ff = expert_split(arch, tp, ep, tokens)
    rows = pairs / np.where(touched > 0, touched, 1)
    out = {}
    for name, (read, weights, written) in _mlp_matmuls(arch, "moe", ff).items():
        out[name] = (2 * pairs * weights, touched * weights * weight_bytes,
                     pairs * (read + written) * act_bytes, rows)
    return out


def elementwise_bytes(arch: Architecture, tp: int, tokens, act_bytes: float,
                      ep: int = 1) -> dict:
    """{elementwise operator: bytes read and written} for `tokens` rows."""
    d = arch.d_model
    norm = 2 * tokens * d * act_bytes + d * act_bytes
    moved = {"input_layernorm": norm,
             "post_attention_layernorm": 0 * norm if arch.parallel_attn_mlp else norm,
             "attn_rope": _rope_bytes(arch, tp, tokens, act_bytes) if arch.rope else 0 * norm}
    gated = 3 if arch.gated_mlp else 2
    if arch.dense_layers:
        moved["mlp_act"] = gated * tokens * (arch.d_ff // tp) * act_bytes
    moved["add"] = 3 * tokens * d * act_bytes
    if arch.is_mla:
        latents = arch.q_lora_rank + arch.kv_lora_rank
        moved["mla_norm"] = 2 * tokens * latents * act_bytes + latents * act_bytes
    if arch.linear_layers:  # read the output and its gate, write the gated norm
        values = arch.linear_values // tp
        moved["linear_norm"] = 3 * tokens * values * act_bytes + arch.linear_v_dim * act_bytes
    if arch.is_moe:
        pairs, _, ff = expert_split(arch, tp, ep, tokens)
        moved["moe_act"] = gated * pairs * ff * act_bytes
        if arch.shared_ff:
            moved["shared_act"] = gated * tokens * (arch.shared_ff // tp) * act_bytes
    return moved


def _rope_bytes(arch: Architecture, tp: int, tokens, act_bytes: float):
    """Rotary embedding reads and writes the queries and keys (latent attention: their rope
    part, the key's shared by every head)."""
    if arch.is_mla:
        return 2 * tokens * (arch.n_heads // tp + 1) * arch.qk_rope_head_dim * act_bytes
    q = arch.q_dim // tp
    kv = arch.kv_heads_per_gpu(tp) * arch.hd
    return 2 * tokens * (q + kv) * act_bytes


def layers_of(op: str, hybrid: bool = False) -> tuple:
    """The kinds of layer an operator runs in: by their MLP ("dense", "moe"), or in a
    `hybrid` model (with linear attention) by their attention ("attention", "linear"); an
    operator of every layer, both MLP kinds."""
    if op in DENSE_OPS:
        return ("dense",)
    if op in MOE_OPS:
        return ("moe",)
    if hybrid and op in ATTENTION_OPS:
        return ("attention",)
    if op in LINEAR_OPS:
        return ("linear",)
    return ("dense", "moe")


def layer_counts(arch: Architecture) -> dict:
    """{kind of layer (`layers_of`): how many the model has}, the kinds it has."""
    counts = {"dense": arch.dense_layers, "moe": arch.moe_layers}
    if arch.linear_layers:
        counts |= {"attention": arch.attention_layers, "linear": arch.linear_layers}
    return {kind: n for kind, n in counts.items() if n}


def lm_head_counts(arch: Architecture, tp: int, rows, weight_bytes: float,
                   act_bytes: float) -> tuple:
    """(FLOPs, weight bytes, activation bytes) of the LM head for `rows` sampled rows."""
    vocab = -(-arch.vocab_size // tp)
    return (2 * rows * arch.d_model * vocab, arch.d_model * vocab * weight_bytes,
            rows * (arch.d_model + vocab) * act_bytes)


def embedding_bytes(arch: Architecture, tokens, act_bytes: float):
    """Bytes of the embedding lookup: one row read and written per token."""
    return 2 * tokens * arch.d_model * act_bytes


def attention_shapes(arch: Architecture, tp: int) -> dict:
    """{"prefill", "decode": (FLOPs a query-key pair, activation elements a query reads and
    writes, cache elements a key)} of one layer's attention on one GPU."""
    if arch.is_mla:
        heads, latent = arch.n_heads // tp, arch.latent_dim
        v, rank = arch.v_head_dim, arch.kv_lora_rank
        return {"prefill": (heads * (2 * arch.hd + 2 * v), heads * (arch.hd + v), latent),
                "decode": (heads * (2 * latent + 2 * rank), heads * (latent + rank), latent)}
    q = arch.q_dim // tp
    kv = arch.kv_heads_per_gpu(tp) * arch.hd
    return {"prefill": (4 * q, 2 * q, 2 * kv), "decode": (4 * q, 2 * q, 2 * kv)}


def attention_counts(arch: Architecture, tp: int, prefill_tokens, prefill_attention,
                     prefill_square, prefill_context, decode_seqs, decode_context,
                     kv_bytes: float, act_bytes: float) -> tuple:
    """((prefill FLOPs, prefill bytes), (decode FLOPs, decode bytes)) of one full-attention
    layer on one GPU. Prefill: causal work n c + n (n + 1) / 2 per chunk (`prefill_attention`
    counts n (c + n), `prefill_square` n n), its queries and outputs, and the keys and values
    of its context; decode: every key and value attended, read once."""
    shapes = attention_shapes(arch, tp)
    causal = prefill_attention - (prefill_square - prefill_tokens) / 2 \
        if arch.flash_attention else prefill_attention
    flops, queries, keys = shapes["prefill"]
    prefill = (flops * causal, prefill_tokens * queries * act_bytes
               + keys * (prefill_context + prefill_tokens) * kv_bytes)
    flops, queries, keys = shapes["decode"]
    decode = (flops * decode_context, decode_seqs * queries * act_bytes
              + keys * decode_context * kv_bytes)
    return prefill, decode
