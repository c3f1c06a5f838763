"""Qwen3.5 and Qwen3-Next, the hybrids of linear and full attention the tests read: the
package's own config.json copies, Qwen3-Next's published keys, and a small scenario of
Qwen3.5-397B-A17B on eight H200s."""

from __future__ import annotations

import scenarios
from helpers.model_scenario import scenario
from sim.costs.hardware import hardware_setup
from sim.costs.hardware.cost import HardwareCost
from sim.costs.hardware.kernels import data_root

PACKAGE_CONFIGS = data_root().parent.parent / "model_configs"
QWEN35 = str(PACKAGE_CONFIGS / "Qwen--Qwen3.5-397B-A17B_config.json")
QWEN35_DENSE = str(PACKAGE_CONFIGS / "Qwen--Qwen3.5-27B_config.json")
# Qwen/Qwen3-Next-80B-A3B-Instruct's published config.json (the keys the reader uses)
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 48, "hidden_size": 2048,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "intermediate_size": 5120, "vocab_size": 151936, "max_position_embeddings": 262144,
    "tie_word_embeddings": False, "num_experts": 512, "num_experts_per_tok": 10,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "full_attention_interval": 4,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "partial_rotary_factor": 0.25}
# Qwen3.5-397B-A17B at TP 8, a GPU's share: 2 key heads and 8 value heads of 128; its
# convolution runs over 2 x 2 x 128 + 8 x 128 = 1,536 channels
STATE_PER_LAYER = 8 * 128 * 128 * 4 + 3 * 1536 * 2  # fp32 matrices, the bf16 window


def qwen35_cost(tmp_path, framework="vllm", kernels="measured", gpu="h200", tp=8):
    return HardwareCost(hardware_setup(scenarios.load(qwen35_scenario(
        tmp_path, framework, kernels, gpu, tp)).base))


def qwen35_scenario(tmp_path, framework="vllm", kernels="measured", gpu="h200", tp=8,
                    requests=4):
    """Qwen3.5-397B-A17B in fp8 with experts whole on each GPU, prefix caching off (refused
    with linear layers), 64 sequences at most."""
    path = scenario(tmp_path, model=f'config = "{QWEN35}"', gpu=gpu, tp=tp,
                    hardware=f'dtype = "fp8"\nep = {tp}\nframework = "{framework}"\n'
                             f'kernels = "{kernels}"', max_seq_len=16384, requests=requests)
    path.write_text(path.read_text().replace(
        "max_num_batched_tokens = 4096\n",
        "max_num_batched_tokens = 4096\nenable_prefix_caching = false\n"))
    return path
