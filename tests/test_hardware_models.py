"""The hardware cost model's models and GPUs of 2026: mixture-of-experts, latent-attention and
sliding-window architectures with their published parameter counts, weight and KV bytes by hand,
Blackwell GPUs and nvfp4, the KV cache's dtype and expert parallelism as vLLM allows it (a
model from its config.json: test_hf_config.py; what cannot run: test_hardware_refusals.py)."""

from __future__ import annotations

import numpy as np
import pytest

import scenarios
from helpers.model_scenario import refusal, scenario, setup_of
from sim.costs.hardware import (HardwareCost, gpu_spec, gpus, layer_op_times,
                                model_architecture, models)
from sim.costs.hardware.architecture import expected_experts
from sim.costs.hardware.measured import EXPERT_OPS
from sim.costs.hardware.operators import attention_shapes, expert_counts
from sim.costs.shape import StepShape
from sim.runner import run_config

NEW_MODELS = ("meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-8B",
              "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
              "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x22B-v0.1",
              "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b")
BLACKWELL = ("b200", "gb200", "b300", "gb300", "rtx-pro-6000")
GIB = 2**30


# --- catalogs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW_MODELS)
def test_every_new_catalog_model_has_its_published_total_and_active_parameters(name):
    table, arch = models()[name], model_architecture({"name": name})
    assert arch.parameters() == pytest.approx(table["params"], rel=0.02)
    if "active_params" in table:
        assert arch.is_moe
        assert arch.active_parameters() == pytest.approx(table["active_params"], rel=0.02)
    else:
        assert arch.active_parameters() == arch.parameters()
    assert table["source"].startswith("https://huggingface.co/") and table["params_source"]


def test_the_published_counts_the_brief_names():
    billions = {name: model_architecture({"name": name}).parameters() / 1e9
                for name in ("deepseek-ai/DeepSeek-V3", "mistralai/Mixtral-8x7B-v0.1",
                             "Qwen/Qwen3-30B-A3B", "openai/gpt-oss-120b")}
    assert billions == pytest.approx({"deepseek-ai/DeepSeek-V3": 671,
                                      "mistralai/Mixtral-8x7B-v0.1": 46.7,
                                      "Qwen/Qwen3-30B-A3B": 30.5,
                                      "openai/gpt-oss-120b": 117}, rel=0.01)


def test_blackwell_gpus_have_dense_peaks_nvfp4_and_sources():
    for gpu_id in BLACKWELL:
        gpu, table = gpu_spec(gpu_id), gpus()[gpu_id]
        assert gpu.peak_flops("fp8") == 2 * gpu.peak_flops("bf16")
        assert gpu.peak_flops("nvfp4") >= 2 * gpu.peak_flops("fp8")
        assert table["source"] and table["measured"] in ("a100", "h100")
        assert gpu.memory_gib >= 96 and gpu.bandwidth > 1e12
    assert [g for g, t in gpus().items() if "nvfp4" in t["peak_tflops"]] == list(BLACKWELL)


# --- architectures: bytes by hand -------------------------------------------------------------

def test_latent_attention_caches_the_latent_whole_on_every_gpu():
    v3 = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    for tp in (1, 8):
        assert v3.kv_bytes_per_token(tp, 2) == 61 * (512 + 64) * 2  # not split across GPUs
    llama = model_architecture({"name": "meta-llama/Llama-3.1-70B"})
    assert llama.kv_bytes_per_token(2, 2) == 2 * 80 * (8 // 2) * 128 * 2
    oss = model_architecture({"name": "openai/gpt-oss-120b"})
    assert oss.kv_bytes_per_token(8, 1) == 2 * 36 * 1 * 64  # one of the 8 KV heads a GPU


def test_expert_weights_split_by_tp_or_whole_by_ep_and_the_rest_as_dense():
    mixtral = model_architecture({"name": "mistralai/Mixtral-8x7B-v0.1"})
    d, ff, experts = 4096, 14336, 8
    attention = d * (4096 // 2 + 2 * 4 * 128) + 4096 // 2 * d
    moe = d * experts + experts * 3 * d * ff / 2
    vocab = 32000 * d * 2 / 2
    assert mixtral.weight_bytes_per_gpu(2, 2) == pytest.approx(
        (32 * (attention + moe) + vocab) * 2, rel=1e-12)
    # in fp8 the embedding, the LM head and the routers stay 16-bit
    router = 32 * d * experts
    assert mixtral.weight_bytes_per_gpu(2, 1) == pytest.approx(
        32 * (attention + moe) - router + (vocab + router) * 2, rel=1e-12)
    assert mixtral.weight_bytes_per_gpu(2, 2, ep=2) == mixtral.weight_bytes_per_gpu(2, 2)
    assert mixtral.experts_per_gpu(8) == 1 and mixtral.experts_per_gpu(3) == 3  # uneven: most
    v3 = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    assert v3.moe_layers == 58 and v3.dense_layers == 3 and v3.shared_ff == 2048
    # fp8 weights over 8 GPUs: about 671 GB, an eighth each (the latent down projections and the
    # router are whole on every GPU)
    assert v3.weight_bytes_per_gpu(8, 1) == pytest.approx(671e9 / 8, rel=0.02)


def test_dense_models_keep_their_architecture():
    llama = model_architecture({"name": "meta-llama/Llama-3.1-8B"})
    assert not llama.is_moe and not llama.is_mla and llama.full_layers == 32
    assert llama.dense_layers == 32 and llama.moe_layers == 0


# --- the roofline operators -------------------------------------------------------------------

def test_routed_experts_read_the_experts_a_batch_touches():
    mixtral = model_architecture({"name": "mistralai/Mixtral-8x7B-v0.1"})
    expert_up = 4096 * 2 * 14336 // 2  # a 1/tp slice of one expert's gate and up matrices
    one = expert_counts(mixtral, 2, 1, np.array([1.0, 4.0, 1e4]), 2, 2)["moe_up_proj"]
    flops, weight_bytes, _, rows = one
    assert weight_bytes[0] == pytest.approx(2 * expert_up * 2)  # one token: its 2 experts
    assert weight_bytes[1] == pytest.approx(expected_experts(8, 2, 4) * expert_up * 2)
    assert weight_bytes[2] == pytest.approx(8 * expert_up * 2)  # many tokens: every expert
    assert np.all(flops == 2 * np.array([1.0, 4.0, 1e4]) * 2 * expert_up)
    whole = expert_counts(mixtral, 2, 2, np.array([1.0, 4.0, 1e4]), 2, 2)["moe_up_proj"]
    assert np.allclose(whole[0], flops) and np.allclose(whole[1], weight_bytes)  # same share
    assert rows[2] == pytest.approx(1e4 * 2 / 8)  # token-expert pairs per expert


def test_layer_op_times_name_the_expert_and_latent_operators():
    mixtral = layer_op_times("mistralai/Mixtral-8x7B-v0.1", "h100-sxm", 2, 64, "bf16",
                             kernels="roofline")
    assert {"moe_router", "moe_up_proj", "moe_act", "moe_down_proj"} <= set(mixtral)
    assert not {"mlp_up_proj", "shared_up_proj"} & set(mixtral)  # no dense layer, no shared
    measured = layer_op_times("mistralai/Mixtral-8x7B-v0.1", "h100-sxm", 2, 64, "bf16")
    assert "moe_experts" in measured and "moe_up_proj" not in measured  # the fused kernel
    v3 = layer_op_times("deepseek-ai/DeepSeek-V3", "h200", 8, 64, "fp8", ep=8,
                        kernels="roofline")
    assert {"mla_down_proj", "mla_q_up_proj", "mla_kv_up_proj", "mla_norm", "attn_post_proj",
            "mlp_up_proj", "shared_up_proj", "shared_act", "moe_up_proj"} <= set(v3)
    assert "attn_pre_proj" not in v3
    assert all(isinstance(t, float) and t > 0 for t in v3.values())
    with pytest.raises(ValueError, match="hardware.ep = 2: meta-llama/Llama-3.1-8B has no "
                                         "experts"):
        layer_op_times("meta-llama/Llama-3.1-8B", "h100-sxm", 2, 8, ep=2)


def test_latent_attention_decodes_over_the_latent_and_prefills_over_the_heads():
    v3 = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    shapes = attention_shapes(v3, 8)
    assert shapes["decode"] == (16 * (2 * 576 + 2 * 512), 16 * (576 + 512), 576)
    assert shapes["prefill"] == (16 * (2 * 192 + 2 * 128), 16 * (192 + 128), 576)


def test_a_sliding_window_caps_the_keys_a_decode_attends(tmp_path):
    roofline = 'dtype = "fp8"\nkernels = "roofline"'  # the roofline's window (tables: their own)
    windowed = HardwareCost(setup_of(tmp_path, model='name = "openai/gpt-oss-120b"', tp=2,
                                     hardware=roofline, max_seq_len=131072))
    full = HardwareCost(setup_of(tmp_path, model='name = "openai/gpt-oss-120b"\n'
                                                 'sliding_window = 0\nsliding_layers = 0',
                                 tp=2, hardware=roofline, max_seq_len=131072))

    def decode(cost, context):
        return cost.step_time(StepShape(decode_seqs=8, decode_context=8 * context,
                                        sampled_seqs=8, decoding=1))

    assert decode(windowed, 100) == pytest.approx(decode(full, 100), rel=1e-12)  # in the window
    long_w, long_f = decode(windowed, 100_000), decode(full, 100_000)
    assert long_w < long_f
    # half the layers read 128 keys a sequence instead of 100,000: about half the attention
    attention_f = long_f - decode(full, 1)
    attention_w = long_w - decode(windowed, 1)
    assert attention_w == pytest.approx(attention_f / 2, rel=0.01)


def test_an_expert_run_with_windows_decodes_bit_for_bit_in_runs(tmp_path):
    config = scenarios.load(scenario(tmp_path, model='name = "openai/gpt-oss-120b"', tp=2,
                                     hardware='ep = 2\ndtype = "fp8"', requests=60)).base
    fast = run_config(config)
    slow = run_config(config, fast_forward=False)
    assert fast.request_columns() == slow.request_columns()
    assert fast.step_columns() == slow.step_columns()


# --- dtypes and memory ------------------------------------------------------------------------

def test_the_kv_cache_dtype_defaults_to_the_activations_and_fp8_doubles_the_blocks(tmp_path):
    def setup(hardware):
        return setup_of(tmp_path, model='name = "meta-llama/Llama-3.1-70B"', tp=2,
                        hardware=hardware)

    bf16, fp8 = setup('dtype = "bf16"'), setup('dtype = "bf16"\nkv_dtype = "fp8"')
    assert bf16.plan.kv_bytes_per_token == 2 * fp8.plan.kv_bytes_per_token == 163840
    assert fp8.kv_blocks in (2 * bf16.kv_blocks, 2 * bf16.kv_blocks + 1)
    auto = setup('dtype = "fp8"')  # vLLM's auto: the checkpoint's bf16, not the weights' fp8
    assert auto.kv_bytes == 2 and auto.describe()["kv_dtype"] == "bf16"
    vocab = 2 * 128256 * 8192 // 2 * 2  # embedding and LM head, half each GPU, 16-bit in both
    assert auto.plan.weights == pytest.approx((bf16.plan.weights - vocab) / 2 + vocab)


def test_nvfp4_weights_take_half_a_byte_and_a_scale_per_16(tmp_path):
    nvfp4 = setup_of(tmp_path, model='name = "meta-llama/Llama-3.1-70B"', gpu="b200",
                     hardware='dtype = "nvfp4"')
    bf16 = setup_of(tmp_path, model='name = "meta-llama/Llama-3.1-70B"', gpu="b200",
                    hardware='dtype = "bf16"')
    vocab = 2 * 128256 * 8192 * 2  # embedding and LM head stay 16-bit
    assert nvfp4.plan.weights == pytest.approx((bf16.plan.weights - vocab) * (0.5 + 1 / 16) / 2
                                               + vocab)
    assert nvfp4.kv_bytes == 2 and HardwareCost(nvfp4).peak == 9000e12


def test_deepseek_v3_fits_eight_h200_in_fp8_and_not_eight_h100_in_fp16(tmp_path):
    v3 = 'name = "deepseek-ai/DeepSeek-V3"'
    h200 = setup_of(tmp_path, model=v3, gpu="h200", tp=8, hardware='dtype = "fp8"')
    assert 8 * h200.plan.weights == pytest.approx(671e9, rel=0.02)
    assert h200.kv_blocks > 0 and h200.plan.kv_bytes_per_token == 61 * 576 * 2
    assert "does not fit on h100-sxm at tp = 8 (fp16)" in refusal(
        tmp_path, model=v3, tp=8, hardware='dtype = "fp16"')
    assert "no tensor parallelism up to 8 fits" in refusal(tmp_path, model=v3, tp=8)


def test_expert_parallelism_changes_no_weight_but_the_activations(tmp_path):
    def setup(ep):
        return setup_of(tmp_path, model='name = "Qwen/Qwen3-30B-A3B"', tp=2,
                        hardware=f"ep = {ep}")

    split, whole = setup(1), setup(2)
    assert split.plan.weights == whole.plan.weights
    assert whole.plan.activations > split.plan.activations  # k whole-width experts a token
    assert whole.describe()["ep"] == 2


def test_a_gpu_defined_by_a_table_all_reduces_over_its_own_interconnect_whatever_its_name():
    h100 = gpus()["h100-sxm"]
    table = {key: h100[key] for key in ("memory_gib", "memory_bandwidth_gbs", "measured",
                                        "peak_tflops")}
    slow = table | {"interconnect_bandwidth_gbs": 1.0, "interconnect_latency_us": 10.0}
    catalog = gpu_spec("h100-sxm").all_reduce(8)
    for name in ("h100-sxm", "mine"):
        ring = gpu_spec(slow | {"name": name}).all_reduce(8)
        assert ring.latency_s == pytest.approx(10e-6)
        assert ring.bus_bandwidth == pytest.approx(
            catalog.bus_bandwidth / h100["interconnect_bandwidth_gbs"])


def test_the_roofline_costs_what_quantized_checkpoints_keep_16_bit_in_16_bits(tmp_path):
    """Under fp8 weights the LM head and the routers stay bf16 (as the memory plan and the
    measured kernels have them) and attention computes in the bf16 activations: on a GPU
    without tables they cost what they cost under bf16 weights, not at the fp8 peak."""
    fp8, bf16 = (HardwareCost(setup_of(tmp_path, gpu="h100-pcie", hardware=f'dtype = "{d}"'))
                 for d in ("fp8", "bf16"))
    assert fp8.measured is None and fp8.peak == 2 * bf16.peak
    np.testing.assert_array_equal(fp8._head, bf16._head)
    assert [a.flop_s for a in fp8.attention.prefill_groups] == \
        [a.flop_s for a in bf16.attention.prefill_groups]
    mixtral = "mistralai/Mixtral-8x7B-v0.1"
    routers = [layer_op_times(mixtral, "h100-pcie", 2, 256, dtype=d,
                              kernels="roofline")["moe_router"] for d in ("fp8", "bf16")]
    assert routers[0] == routers[1]


def test_fp32_weights_keep_fp32_activations_on_a_gpu_of_fp32_peaks_alone():
    """As benchmarks/hardware_accuracy.py costs the NumPy engine on a CPU: attention, the LM
    head and everything else at the fp32 peak, no 16-bit peak needed."""
    cpu = {"name": "cpu", "memory_gib": 64.0, "memory_bandwidth_gbs": 25.0,
           "peak_tflops": {"fp32": 0.1}, "interconnect_bandwidth_gbs": 1.0,
           "interconnect_latency_us": 0.0, "measured": "a100"}
    times = layer_op_times("meta-llama/Llama-3.1-8B", cpu, 1, 16, dtype="fp32")
    assert times["attn_pre_proj"] > 0
    model = {"vocab_size": 512, "d_model": 512, "n_layers": 4, "n_heads": 8, "n_kv_heads": 8,
             "d_ff": 2048, "max_seq_len": 1024}
    assert layer_op_times(model, cpu, 1, 16, dtype="fp32")["attn_post_proj"] > 0


def test_a_sliding_window_no_sequence_reaches_is_costed_as_full_attention(tmp_path):
    """Mistral-7B-v0.1's 4,096-token window at max_seq_len 4,096 never binds: its attention is
    the measured full attention, as Llama-2-7B's shape without a window; at 8,192 it slides."""
    mistral = 'name = "mistralai/Mistral-7B-v0.1"'
    at_4k = setup_of(tmp_path, model=mistral)
    assert at_4k.arch.sliding_window == 0 and at_4k.arch.full_layers == 32
    cost = HardwareCost(at_4k)
    assert cost.measured.sources()["prefill_attention"] == \
        cost.measured.sources()["decode_attention"] == "measured"
    at_8k = setup_of(tmp_path, model=mistral, max_seq_len=8192)
    assert at_8k.arch.sliding_window == 4096 and at_8k.arch.sliding_layers == 32


def test_gpt_oss_in_mxfp4_fits_one_80_gb_gpu_and_reads_the_mxfp4_expert_tables(tmp_path):
    """gpt-oss ships its routed experts in MXFP4 (4.25 bits a weight) and the rest in bf16:
    about 65 GB, which one 80 GB GPU holds; the experts are costed from the fused MoE kernel
    measured with MXFP4 weights and bf16 activations, the other matmuls in bf16."""
    oss = 'name = "openai/gpt-oss-120b"'
    setup = setup_of(tmp_path, model=oss, hardware='dtype = "mxfp4"')
    assert setup.plan.weights == pytest.approx(65.2e9, rel=0.01) and setup.kv_blocks > 0
    assert setup.expert_bytes == 4.25 / 8 and setup.weight_bytes == 2
    assert "does not fit on h100-sxm at tp = 1 (bf16)" in refusal(
        tmp_path, model=oss, hardware='dtype = "bf16"')
    cost = HardwareCost(setup)
    assert cost.measured._moe_dtype == "w4a16_mxfp4"
    assert cost.measured.sources()["moe_experts"] == "measured"
    assert cost.peak == gpu_spec("h100-sxm").peak_flops("bf16")
    roofline = {d: layer_op_times("openai/gpt-oss-120b", "h100-sxm", 1, [8, 64, 256, 16384],
                                  d, kernels="roofline")["moe_up_proj"] for d in ("mxfp4", "bf16")}
    ratio = roofline["mxfp4"] / roofline["bf16"]
    assert all(ratio[:3] < 0.4) and 0.6 < ratio[3] < 0.9  # a few rows: a quarter of the bytes
    assert "hardware.dtype: mxfp4 quantizes a mixture of experts' routed experts" in refusal(
        tmp_path, hardware='dtype = "mxfp4"')


def test_the_roofline_of_mxfp4_experts_is_near_the_measured_kernel_at_every_size():
    """The roofline's efficiency curve, fitted on 16-bit weights, is read at the FLOPs a byte
    of 4-bit weights feeds: on the H100 the experts' roofline is within a factor 1.7 of vLLM's
    measured MXFP4 kernel at every power of two from 16 to 16,384 tokens (where reading them at
    16-bit rows made it up to 3.8 times the kernel's time, at 128 tokens)."""
    tokens = [2 ** k for k in range(4, 15)]
    measured, roofline = (layer_op_times("openai/gpt-oss-120b", "h100-sxm", 1, tokens, "mxfp4",
                                         kernels=kernels) for kernels in ("measured", "roofline"))
    experts = sum(roofline[op] for op in EXPERT_OPS)  # what the fused kernel runs
    ratio = experts / measured["moe_experts"]
    assert all((1 / 1.7 < ratio) & (ratio < 1.7)), ratio
