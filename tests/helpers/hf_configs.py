"""Published Hugging Face config.json files (the keys servesim reads), and writing one."""

from __future__ import annotations

import json

# The keys of each model's published config.json that the reader uses (values as published).
CONFIGS = {
    "deepseek-ai/DeepSeek-V3": {
        "architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61,
        "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
        "intermediate_size": 18432, "vocab_size": 129280, "max_position_embeddings": 163840,
        "tie_word_embeddings": False, "n_routed_experts": 256, "num_experts_per_tok": 8,
        "moe_intermediate_size": 2048, "n_shared_experts": 1, "first_k_dense_replace": 3,
        "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1,
        "head_dim": 64,  # as recent transformers write it (= qk_rope_head_dim)
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                         "type": "yarn"}},
    "openai/gpt-oss-120b": {
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 36, "hidden_size": 2880,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "intermediate_size": 2880, "vocab_size": 201088, "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "attention_bias": True, "num_local_experts": 128,
        "num_experts_per_tok": 4, "experts_per_token": 4, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn",
                         "truncate": False}},
    "Qwen/Qwen3-30B-A3B": {
        "architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 48, "hidden_size": 2048,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "intermediate_size": 6144, "vocab_size": 151936, "max_position_embeddings": 40960,
        "tie_word_embeddings": False, "attention_bias": False, "num_experts": 128,
        "num_experts_per_tok": 8, "moe_intermediate_size": 768, "mlp_only_layers": [],
        "decoder_sparse_step": 1, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 48},
    "mistralai/Mixtral-8x7B-v0.1": {
        "architectures": ["MixtralForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 32000, "max_position_embeddings": 32768, "tie_word_embeddings": False,
        "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": None},
    "meta-llama/Llama-3.1-405B": {
        "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 126, "hidden_size": 16384,
        "num_attention_heads": 128, "num_key_value_heads": 8, "intermediate_size": 53248,
        "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    "Qwen/Qwen3-32B": {
        "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 64, "hidden_size": 5120,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
        "intermediate_size": 25600, "vocab_size": 151936, "max_position_embeddings": 40960,
        "tie_word_embeddings": False, "attention_bias": False, "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": 64},
    "mistralai/Mistral-7B-v0.1": {
        "architectures": ["MistralForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 32000, "max_position_embeddings": 32768, "tie_word_embeddings": False,
        "sliding_window": 4096},
}


def write_config(tmp_path, table, name="config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(table))
    return str(path)
