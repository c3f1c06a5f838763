"""Linear attention (Gated DeltaNet: Qwen3-Next, Qwen3.5) read from a config.json and costed:
its layers' projections in their own layers, their convolution and delta rule by the step's
chunks and decodes, from the measured Gated DeltaNet kernels where the tables have them, else
the roofline's; and the one-line refusals. Its states in memory: `test_linear_state.py`."""

from __future__ import annotations

import numpy as np
import pytest

import scenarios
from helpers.hf_configs import write_config
from helpers.hybrid import QWEN3_NEXT, QWEN35, QWEN35_DENSE, STATE_PER_LAYER, qwen35_cost
from helpers.model_scenario import refusal, scenario
from sim.costs.hardware import hardware_setup, model_architecture
from sim.costs.hardware.cost import HardwareCost
from sim.costs.hardware.row_tables import operator_times
from sim.costs.hardware.linear_attention import DELTA_EFFICIENCY, DELTA_STEP_S
from sim.costs.hardware.operators import elementwise_bytes, embedding_bytes, matmul_shapes
from sim.costs.hardware.timing import elementwise_time
from sim.costs.shape import StepShape


def test_qwen35_and_qwen3_next_read_as_hybrids_of_their_card():
    """Qwen3.5-397B-A17B: 45 of its 60 layers Gated DeltaNet (16 key and 64 value heads of
    128, a convolution of 4, fp32 states), the others gated full attention; 396.3 B parameters
    (its card's 397 B less the vision tower and the multi-token-prediction layer), 17.3 B a
    token ("A17B")."""
    arch = model_architecture({"config": QWEN35})
    assert (arch.linear_layers, arch.attention_layers, arch.full_layers) == (45, 15, 15)
    assert (arch.linear_k_heads, arch.linear_v_heads, arch.linear_k_dim, arch.linear_v_dim,
            arch.linear_conv, arch.state_dtype, arch.attn_gate) == \
        (16, 64, 128, 128, 4, "fp32", True)
    assert (arch.n_experts, arch.experts_per_token, arch.shared_d_ff) == (512, 10, 1024)
    assert arch.parameters() == pytest.approx(397e9, rel=0.005)
    assert arch.active_parameters() == pytest.approx(17e9, rel=0.03)
    # counted one by one: a linear layer's input projection (2 x 2,048 queries and keys,
    # 8,192 values, 8,192 gates, 128 scalars), convolution (4 x 12,288), 128 decays and
    # biases, a norm of 128 and its output projection; an attention layer's gated queries
    linear = 4096 * 20608 + 4 * 12288 + 128 + 128 + 8192 * 4096
    attention = 4096 * (2 * 8192 + 2 * 512) + 8192 * 4096
    experts = 4096 * 512 + 512 * 3 * 4096 * 1024 + 3 * 4096 * 1024 + 2 * 4096
    assert arch.parameters() == 45 * linear + 15 * attention + 60 * experts + \
        2 * 248320 * 4096 + 4096 == 396_346_096_896
    assert arch.active_parameters() == 17_348_787_456
    # a GPU's share at TP 8 x EP 8 in fp8: the linear layers split by their heads, the one
    # key-value head of 256 replicated (two of them over eight GPUs), 64 experts whole, the
    # embedding, LM head and routers in bf16
    assert arch.weight_bytes_per_gpu(8, 1, 8) == 50_057_002_400
    dense = model_architecture({"config": QWEN35_DENSE})
    assert (dense.linear_layers, dense.n_experts) == (48, 0)
    assert dense.parameters() == pytest.approx(27e9, rel=0.005)  # "27B", its tower left out


def test_qwen3_next_reads_by_its_interval(tmp_path):
    """Without layer_types, every full_attention_interval-th layer attends (transformers'
    rule); a file naming no state dtype leaves it to the framework: bf16 under vLLM (its
    "auto", the weights' dtype), fp32 under SGLang (its --mamba-ssm-dtype's default)."""
    path = write_config(tmp_path, QWEN3_NEXT)
    arch = model_architecture({"config": path})
    assert (arch.linear_layers, arch.linear_v_heads, arch.state_dtype) == (36, 32, "")
    for framework, dtype in (("vllm", "bf16"), ("sglang", "fp32"), ("trtllm", "bf16")):
        setup = hardware_setup(scenarios.load(scenario(
            tmp_path, model=f'config = "{path}"', gpu="h200", tp=2,
            hardware=f'framework = "{framework}"'), ["engine.enable_prefix_caching = false"]).base)
        assert setup.arch.state_dtype == dtype
        state = 36 * (16 * 128 * 128 * (4 if dtype == "fp32" else 2)
                      + 3 * (2 * 8 * 128 + 16 * 128) * 2)
        if framework == "vllm":  # from the KV blocks: 16 tokens of 12 layers' 2 x 256 in bf16
            assert (setup.plan.states, setup.state_blocks) == (0, -(-state // (16 * 12288)))
        else:
            assert (setup.plan.states, setup.state_blocks) == (64 * state, 0)
    assert arch.parameters() == pytest.approx(80e9, rel=0.005)  # "80B"
    typed = QWEN3_NEXT | {"layer_types": ["linear_attention", "full_attention"] * 24,
                          "mamba_ssm_dtype": "bfloat16"}
    arch = model_architecture({"config": write_config(tmp_path, typed, "typed.json")})
    assert (arch.linear_layers, arch.state_dtype) == (24, "bf16")
    given = model_architecture({"name": "meta-llama/Llama-3.1-8B", "linear_layers": 8,
                                "linear_k_heads": 4, "linear_v_heads": 8, "linear_k_dim": 128,
                                "linear_v_dim": 128, "linear_conv": 4})
    assert given.state_dtype == ""  # the framework's


def test_measured_gated_deltanet_kernels_cost_the_linear_layers(tmp_path):
    """Under vLLM 0.24 on the H200 (h200_sxm/linear_attention/vllm/0.24.0), 2 key and 8 value
    heads a GPU: a decode of 64 sequences takes 2.237 + 16.406 us a layer (the convolution's
    update and the recurrent rule, the mean of the two models measured with these heads), a
    fresh prompt of 1,024 tokens 5.0215 + 59.1635 us; whatever the sequences' lengths."""
    cost = qwen35_cost(tmp_path)
    linear = cost.attention.decode_groups[-1]
    assert linear.linear and linear.layers == 45
    sources = cost.measured.sources()
    assert sources["decode_linear_attention"] == sources["prefill_linear_attention"] == \
        "measured"
    assert cost.attention._decode(linear, 64, 64 * 100) == pytest.approx(45 * 18.643e-6,
                                                                         rel=1e-4)
    assert cost.attention._decode(linear, 64, 64 * 10_000) == \
        cost.attention._decode(linear, 64, 64 * 100)
    fresh = StepShape(prefill_tokens=1024, prefill_attention=1024 * 1024, prefill_seqs=1,
                      prefill_square=1024 * 1024)
    group = cost.attention.prefill_groups[-1]
    assert cost.attention._linear_prefill(group, 1, 1024, 1024 * 1024) == pytest.approx(
        45 * 64.185e-6, rel=1e-4)
    # the step adds it beside the full layers' attention
    full_only = cost.attention.plus_prefill(0.0, fresh) - cost.attention._linear_prefill(
        group, 1, 1024, 1024 * 1024)
    assert full_only == pytest.approx(cost.measured.prefill_attention(0, 1, 1024 * 1025 / 2,
                                                                      1024) * 15)


def test_each_operator_runs_in_its_own_layers(tmp_path):
    """The part of a step that depends on its rows: the attention projections in the 15
    attention layers, the linear ones in the 45 linear layers, the experts, norms and two
    all-reduces in all 60 (by the roofline, counted independently of `row_tables.py`)."""
    cost = qwen35_cost(tmp_path, kernels="roofline")
    arch, setup = cost.arch, cost.setup
    assert matmul_shapes(arch, 8)["linear_in_proj"] == (4096, 4096 * 2576, 2576)
    assert matmul_shapes(arch, 8)["attn_pre_proj"] == (4096, 4096 * 2560, 2560)
    t = np.array([1.0, 7.0, 100.0, 1000.0])
    assert elementwise_bytes(arch, 8, t, 2)["linear_norm"] == \
        pytest.approx(3 * t * 1024 * 2 + 128 * 2)
    times = operator_times(arch, 8, setup.ep, t, setup.weight_bytes, setup.act_bytes,
                           cost.peak, cost.bandwidth, cost.eff, setup.expert_bytes,
                           cost.kept_peak)
    layers = {"attn_pre_proj": 15, "attn_rope": 15, "attn_post_proj": 15,
              "linear_in_proj": 45, "linear_out_proj": 45, "linear_norm": 45, "add": 120}
    expected = sum(layers.get(op, 60) * seconds for op, seconds in times.items())
    expected += 2 * 60 * cost.all_reduce.time(t * 4096 * setup.act_bytes, 8)
    expected += elementwise_time("emb", embedding_bytes(arch, t, setup.act_bytes),
                                 cost.bandwidth, cost.eff)
    cost._fit(1000, 0)
    assert cost._rows[t.astype(int)] == pytest.approx(expected, rel=1e-12)


def test_the_roofline_charges_a_state_not_keys(tmp_path):
    """By the roofline a decode's linear attention reads and writes each sequence's state
    (8 x 128 x 128 fp32 values and the convolution's window, 45 layers) whatever its length:
    memory-bound, its time grows with the decodes and not the context; where the tables have
    no prefill kernel (SGLang's A100 tables: the convolution alone), prefill is the roofline's
    and decode the tables'."""
    cost = qwen35_cost(tmp_path, kernels="roofline")
    linear = cost.attention.decode_groups[-1]
    state_s = 45 * 2 * STATE_PER_LAYER / (cost.bandwidth * cost.eff.memory)
    assert linear.key_s == pytest.approx(state_s)
    one, many = (cost.attention._decode(linear, 32, 32 * n) for n in (100, 100_000))
    assert one == many == pytest.approx(linear.launch_s + 32 * (linear.query_s + linear.key_s))
    path = scenario(tmp_path, model=f'config = "{QWEN35_DENSE}"', gpu="a100-80gb-sxm",
                    hardware='dtype = "bf16"\nframework = "sglang"')
    a100 = HardwareCost(hardware_setup(scenarios.load(
        path, ["engine.enable_prefix_caching = false"]).base))
    assert a100.measured.sources()["prefill_linear_attention"] == "roofline"
    assert a100.measured.sources()["decode_linear_attention"] == "measured"


def test_the_roofline_prefill_holds_the_chunked_forms_bounds(tmp_path):
    """A linear layer's prefill by the roofline: seven kernels (the convolution and the chunked
    form's six), a token's 1,060,864 FLOPs at DELTA_EFFICIENCY of the peak (the convolution's
    2 x 1,536 x 4, the state's 6 x 128 x 128 and the chunk's 2 x 64 x 256 a value head, 8 of
    them), its activations and each chunk's state written and read back, a state read and
    written a sequence, and a sequence's 64-token chunks one after another at DELTA_STEP_S."""
    cost = qwen35_cost(tmp_path, kernels="roofline")
    group = cost.attention.prefill_groups[-1]
    assert group.launch_s == pytest.approx(45 * 7 * cost.eff.launch_s)
    assert group.flop_s * cost.kept_peak == pytest.approx(45 * 1_060_864)
    memory = cost.bandwidth * cost.eff.memory
    token = (3 * 1536 + 2 * 8 + 8 * 128) * 2 + 2 * 8 * 128 * 128 * 2 / 64
    assert group.query_s == pytest.approx(45 * token / memory)
    assert group.key_s == pytest.approx(45 * 2 * STATE_PER_LAYER / memory)
    assert group.step_s == 45 * DELTA_STEP_S
    for chunks, tokens in ((1, 100), (1, 8192), (3, 3000), (16, 8192)):
        steps = -(-tokens // chunks // 64)
        assert cost.attention._linear_prefill(group, chunks, tokens, tokens**2 / chunks) == \
            pytest.approx(group.launch_s + max(group.flop_s * tokens / DELTA_EFFICIENCY,
                                               group.query_s * tokens + group.key_s * chunks,
                                               group.step_s * steps))
    # on the H200: one prompt of 8,192 tokens bound by its 128 chunks one after another (3 us
    # each), 16 prompts of 512 by their FLOPs at 8% of the peak
    assert cost.attention._linear_prefill(group, 1, 8192, 8192**2) == pytest.approx(
        45 * (7 * 3.178e-6 + 128 * 3e-6), rel=1e-3)
    assert cost.attention._linear_prefill(group, 16, 8192, 16 * 512**2) == pytest.approx(
        45 * (7 * 3.178e-6 + 1_060_864 * 8192 / (989e12 * 0.08)), rel=1e-3)
    # a step's chunks of unequal lengths run as long as their longest, weighted by its tokens:
    # a one-token chunk beside 8,192 tokens costs more, not half
    alone = cost.attention._linear_prefill(group, 1, 8192, 8192**2)
    assert cost.attention._linear_prefill(group, 2, 8193, 8192**2 + 1) >= alone
    decode = cost.attention.decode_groups[-1]
    assert decode.launch_s == pytest.approx(45 * 2 * cost.eff.launch_s) and not decode.step_s


def test_a_measured_prefill_of_several_chunks_and_past_the_tables(tmp_path):
    """Four chunks of 2,048 tokens are looked up as four sequences of 2,048 (24.82 + 106.94 us
    a layer), and a one-token chunk beside 8,192 tokens as about one sequence of 8,192; decodes
    past the tables' reach (4,096 sequences, 2x past their 1,024), and a prompt past it
    (131,072 tokens, 2x past 32,768), take the tables' time where they end times the
    roofline's growth from there."""
    cost = qwen35_cost(tmp_path)
    group, linear = cost.attention.prefill_groups[-1], cost.attention.decode_groups[-1]
    assert cost.attention._linear_prefill(group, 4, 4 * 2048, 4 * 2048**2) == pytest.approx(
        45 * 131.7576e-6, rel=1e-5)
    alone = cost.attention._linear_prefill(group, 1, 8192, 8192**2)
    assert cost.attention._linear_prefill(group, 2, 8193, 8192**2 + 1) == pytest.approx(
        alone, rel=0.001)  # not a half: two sequences of 4,096
    end = cost.measured.linear_prefill(1, 65536)
    assert end == end and cost.measured.linear_prefill(1, 131072) != \
        cost.measured.linear_prefill(1, 131072)
    for prompts in (1, 2):  # each prompt's chunks one after another, the prompts side by side
        end = cost.measured.linear_prefill(prompts, 65536)
        rise = cost.attention._linear_prefill_roofline(group, prompts, prompts * 131072,
                                                       131072) / \
            cost.attention._linear_prefill_roofline(group, prompts, prompts * 65536, 65536)
        assert cost.attention._linear_prefill(group, prompts, prompts * 131072,
                                              prompts * 131072**2) == \
            pytest.approx(45 * end * rise)
    edge = cost.measured.linear_decode(2048)
    assert edge == edge and cost.measured.linear_decode(4096) != \
        cost.measured.linear_decode(4096)  # NaN past the reach
    growth = cost.attention._linear_decode_roofline(linear, 4096) / \
        cost.attention._linear_decode_roofline(linear, 2048)
    assert cost.attention._decode(linear, 4096, 4096) == pytest.approx(45 * edge * growth)


@pytest.mark.parametrize("model, message", [
    ('name = "meta-llama/Llama-3.1-8B"\nlinear_k_heads = 16',
     "model.linear_k_heads (16) is a linear-attention key and model.linear_layers is 0"),
    ('name = "meta-llama/Llama-3.1-8B"\nlinear_layers = 8',
     "model.linear_k_heads must be a positive integer with model.linear_layers"),
    ('name = "mistralai/Mistral-7B-v0.1"\nlinear_layers = 8\nlinear_k_heads = 4\n'
     'linear_v_heads = 8\nlinear_k_dim = 128\nlinear_v_dim = 128\nlinear_conv = 4',
     "linear attention is costed beside full grouped-query attention, not sliding-window"),
    ('name = "meta-llama/Llama-3.1-8B"\nstate_dtype = "fp8"',
     "model.state_dtype: must be one of fp32, bf16"),
    ('name = "meta-llama/Llama-3.1-8B"\nstate_dtype = "fp32"',
     "model.state_dtype (fp32) is the linear-attention layers' state and model.linear_layers "
     "is 0"),
    ('name = "meta-llama/Llama-3.1-8B"\nlinear_layers = 8\nlinear_k_heads = 3\n'
     'linear_v_heads = 8\nlinear_k_dim = 128\nlinear_v_dim = 128\nlinear_conv = 4',
     "model.linear_k_heads (3) must divide model.linear_v_heads (8)"),
    ('name = "meta-llama/Llama-3.1-8B"\nlinear_layers = 32\nlinear_k_heads = 4\n'
     'linear_v_heads = 8\nlinear_k_dim = 128\nlinear_v_dim = 128\nlinear_conv = 4',
     "model.linear_layers must be below model.n_layers (32)"),
    ('name = "deepseek-ai/DeepSeek-V3"\nlinear_layers = 8\nlinear_k_heads = 4\n'
     'linear_v_heads = 8\nlinear_k_dim = 128\nlinear_v_dim = 128\nlinear_conv = 4',
     "linear attention is costed beside full grouped-query attention, not latent"),
])
def test_a_linear_attention_key_without_its_others_is_one_line(tmp_path, model, message):
    assert message in refusal(tmp_path, model=model)


def test_tp_must_divide_the_linear_key_heads(tmp_path):
    model = ('name = "meta-llama/Llama-3.1-8B"\nlinear_layers = 24\nlinear_k_heads = 2\n'
             'linear_v_heads = 8\nlinear_k_dim = 128\nlinear_v_dim = 128\nlinear_conv = 4')
    assert "hardware.tp = 4 does not divide the model's 2 linear-attention key heads; use " \
        "one of 1, 2" in refusal(tmp_path, model=model, tp=4)


@pytest.mark.parametrize("change, message", [
    ({"layer_types": ["linear_attention"] * 47}, "layer_types has 47 entries"),
    ({"layer_types": ["linear_attention", "sliding_attention"] * 24},
     'its entries must be "full_attention" or "linear_attention"'),
    ({"layer_types": ["linear_attention"] * 48}, "leaves no full-attention layer of the 48"),
    ({"mamba_ssm_dtype": "float16"}, "mamba_ssm_dtype must be one of float32, bfloat16"),
    ({"mamba_ssm_dtype": []}, "mamba_ssm_dtype must be one of float32, bfloat16, got []"),
    ({"linear_num_value_heads": None}, "missing 'linear_num_value_heads'"),
    ({"linear_num_value_heads": 24}, "linear_num_key_heads (16) must divide "
                                     "linear_num_value_heads (24)"),
    ({"full_attention_interval": 100}, "full_attention_interval (100) leaves no "
                                       "full-attention layer of the 48"),
    ({"intermediate_size": None, "mlp_only_layers": [0, 1]},
     "missing 'intermediate_size': mlp_only_layers and decoder_sparse_step leave 2 dense"),
])
def test_a_bad_hybrid_config_is_one_line(tmp_path, change, message):
    table = {k: v for k, v in (QWEN3_NEXT | change).items() if v is not None}
    path = write_config(tmp_path, table)
    with pytest.raises(ValueError) as info:
        model_architecture({"config": path})
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("model.config: ")
