"""What a transformer weighs: its parameters (all of them, and those a token goes through),
and what one GPU holds under tensor, expert and attention data parallelism: its weight bytes
(the embedding, the LM head and the routers kept 16-bit under quantized weights), a token's
KV-cache bytes and a sequence's linear-attention state. A mixin of `Architecture`
(architecture.py), whose fields and shapes it reads.
"""

from __future__ import annotations

from .dtypes import KEPT_BYTES, STATE_DTYPES


class Sizes:
    """Parameter counts and bytes per GPU of an `Architecture` (module docstring)."""

    # --- parameters ---------------------------------------------------------------------------
    def attention_parameters(self) -> int:
        """Parameters of one layer's attention (projections, biases, latent norms)."""
        d = self.d_model
        if self.is_mla:
            q_in = self.q_lora_rank or d
            return (d * (self.q_lora_rank + self.latent_dim) + q_in * self.q_dim
                    + self.kv_lora_rank * self.n_heads * (self.qk_nope_head_dim
                                                          + self.v_head_dim)
                    + self.o_dim * d + self.q_lora_rank + self.kv_lora_rank
                    + self.indexer_parameters())
        attention = d * (self.q_proj_dim + 2 * self.kv_dim) + self.q_dim * d
        if self.qkv_bias:
            attention += self.q_proj_dim + 2 * self.kv_dim
        return attention

    def linear_parameters(self) -> int:
        """Parameters of one linear-attention layer (0 without): its input projection (queries,
        keys, values, the output gate, and two scalars a value head), the convolution over
        the queries, keys and values, a decay and a bias a value head, the output's norm and
        the output projection."""
        if not self.linear_layers:
            return 0
        convolved = 2 * self.linear_qk + self.linear_values
        inputs = convolved + self.linear_values + 2 * self.linear_v_heads
        return (self.d_model * inputs + self.linear_conv * convolved + 2 * self.linear_v_heads
                + self.linear_v_dim + self.linear_values * self.d_model)

    def mixer_parameters(self) -> int:
        """Parameters of every layer's attention or linear attention."""
        return (self.attention_layers * self.attention_parameters()
                + self.linear_layers * self.linear_parameters())

    def indexer_parameters(self) -> int:
        """Parameters of one layer's sparse-attention indexer (0 without one): its query
        projection from the query latent, its key projection and head weights from the input,
        and its key's LayerNorm."""
        if not self.is_sparse:
            return 0
        q_in, keys = self.q_lora_rank or self.d_model, self.index_head_dim
        return (q_in * self.index_n_heads * keys + self.d_model * (keys + self.index_n_heads)
                + 2 * keys)

    def mlp_parameters(self, width: int) -> int:
        """Parameters of one MLP of `width` (a plain MLP carries biases, as phi-2's)."""
        mlp = (3 if self.gated_mlp else 2) * self.d_model * width
        if not self.gated_mlp:
            mlp += width + self.d_model
        return mlp

    def norm_parameters(self) -> int:
        """Parameters of one layer's norms."""
        return (1 if self.parallel_attn_mlp else 2) * self.d_model * \
            (2 if self.norm == "layernorm" else 1)

    def dense_mlp_parameters(self) -> int:
        """Parameters of one dense layer but its attention (MLP, norms)."""
        return self.mlp_parameters(self.d_ff) + self.norm_parameters()

    def moe_mlp_parameters(self) -> int:
        """Parameters of one mixture-of-experts layer but its attention: router, routed and
        shared experts, norms."""
        return (self.d_model * self.n_experts
                + self.n_experts * self.mlp_parameters(self.moe_d_ff)
                + (self.mlp_parameters(self.shared_ff) if self.shared_ff else 0)
                + self.norm_parameters())

    def parameters(self) -> int:
        """Every parameter: embedding, layers, final norm, LM head (unless tied)."""
        embedding = self.vocab_size * self.d_model
        head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        final_norm = self.d_model * (2 if self.norm == "layernorm" else 1)
        layers = self.mixer_parameters() + self.dense_layers * self.dense_mlp_parameters()
        if self.is_moe:
            layers += self.moe_layers * self.moe_mlp_parameters()
        return embedding + layers + final_norm + head

    def active_parameters(self) -> int:
        """Parameters a token goes through: all but the routed experts it is not sent to."""
        idle = self.n_experts - self.experts_per_token
        return self.parameters() - self.moe_layers * idle * self.mlp_parameters(self.moe_d_ff)

    # --- bytes per GPU ------------------------------------------------------------------------
    def _attention_weights_per_gpu(self, tp: int) -> int:
        d = self.d_model
        if self.is_mla:
            heads = self.n_heads // tp
            q_in = self.q_lora_rank or d
            return (d * (self.q_lora_rank + self.latent_dim)  # down projections, replicated
                    + q_in * heads * self.hd
                    + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
                    + heads * self.v_head_dim * d
                    + self.indexer_parameters())  # replicated too
        kv_local = self.kv_heads_per_gpu(tp) * self.hd
        return d * (self.q_proj_dim // tp + 2 * kv_local) + self.q_dim // tp * d

    def _mixer_weights_per_gpu(self, tp: int) -> float:
        """Every layer's attention or linear attention on one GPU (linear attention split by
        its heads, as vLLM splits it)."""
        return (self.attention_layers * self._attention_weights_per_gpu(tp)
                + self.linear_layers * self.linear_parameters() / tp)

    def _moe_weights_per_gpu(self, tp: int, ep: int, dp: int = 1,
                             expert_scale: float = 1.0) -> float:
        """A mixture-of-experts layer's MLP on one GPU but its router: its share of the routed
        experts (whole experts with ep > 1, else a 1/(tp x dp) slice of every one:
        the experts span every GPU) and a 1/tp slice of the shared experts (a data-parallel
        rank's); the routed experts count `expert_scale` times (their bytes over the others')."""
        expert = (3 if self.gated_mlp else 2) * self.d_model * self.moe_d_ff
        routed = self.experts_per_gpu(ep) * expert if ep > 1 else \
            self.n_experts * expert / (tp * dp)
        routed *= expert_scale
        shared = (3 if self.gated_mlp else 2) * self.d_model * self.shared_ff / tp
        return routed + shared

    def weight_bytes_per_gpu(self, tp: int, dtype_bytes: float, ep: int = 1,
                             dp: int = 1, expert_bytes: float | None = None) -> float:
        """Weight bytes one GPU holds: its shard of every layer and of the vocabulary (embedding
        and LM head are split by vocabulary, as vLLM does), the norms whole; with attention
        data parallelism every rank holds the non-expert weights and the experts span all
        `tp` x `dp` GPUs; the routed experts take `expert_bytes` an element (default
        `dtype_bytes`). The embedding, the LM head and the routers stay 16-bit under fp8 or
        4-bit weights, as quantized checkpoints keep them (NVIDIA ModelOpt's, DeepSeek's fp8,
        gpt-oss's MXFP4)."""
        layers = self._mixer_weights_per_gpu(tp) + self.dense_layers * (
            (3 if self.gated_mlp else 2) * self.d_model * self.d_ff / tp)
        kept = self.vocab_size * self.d_model * (1 if self.tie_embeddings else 2) / tp
        if self.is_moe:
            scale = 1.0 if expert_bytes is None else expert_bytes / dtype_bytes
            layers += self.moe_layers * self._moe_weights_per_gpu(tp, ep, dp, scale)
            kept += self.moe_layers * self.d_model * self.n_experts  # the routers, replicated
        return layers * dtype_bytes + kept * max(dtype_bytes, KEPT_BYTES)

    def kv_bytes_per_token(self, tp: int, dtype_bytes: float) -> float:
        """KV-cache bytes one token takes on one GPU in every layer: keys and values of the
        GPU's key-value heads (2 x layers x kv_heads x head_dim x bytes / tp), or with
        multi-head latent attention the latent and rotary key, whole on every GPU (layers x
        (kv_lora_rank + qk_rope_head_dim) x bytes); with sparse attention also the indexer's
        key (index_head_dim fp8 values and a float32 scale per 128), and an fp8 latent in
        DeepSeek's sparse layout (kv_lora_rank fp8 values, a float32 scale per 128 and the
        rotary key in bf16: 656 bytes, as vLLM's and SGLang's FlashMLA caches hold it)."""
        if self.is_sparse:  # and the indexer's key: fp8, a float32 scale per 128 values
            indexer = self.index_head_dim + 4 * -(-self.index_head_dim // 128)
            latent = self.latent_dim * dtype_bytes if dtype_bytes > 1 else \
                self.kv_lora_rank + 4 * -(-self.kv_lora_rank // 128) + 2 * self.qk_rope_head_dim
            return self.n_layers * (latent + indexer)
        if self.is_mla:
            return self.n_layers * self.latent_dim * dtype_bytes
        return 2 * self.attention_layers * self.kv_heads_per_gpu(tp) * self.hd * dtype_bytes

    def state_bytes_per_seq(self, tp: int, act_bytes: float) -> float:
        """Bytes of one sequence's linear-attention state on one GPU, in every linear layer
        (0 without): its value heads' k x v matrices in `state_dtype`, and the convolution's
        last `linear_conv` - 1 inputs (queries, keys, values) in the activations' dtype,
        split by tensor parallelism."""
        if not self.linear_layers:
            return 0.0
        if self.state_dtype not in STATE_DTYPES:  # "": the framework's, which setup.py sets
            raise ValueError("model.state_dtype: the framework's default is set by the "
                             "hardware setup; give fp32 or bf16 to size a state without one")
        matrices = self.linear_v_heads * self.linear_k_dim * self.linear_v_dim * \
            STATE_DTYPES[self.state_dtype]
        window = (self.linear_conv - 1) * (2 * self.linear_qk + self.linear_values) * act_bytes
        return self.linear_layers * (matrices + window) / tp
