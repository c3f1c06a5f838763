"""Linear attention (Gated DeltaNet: Qwen3-Next, Qwen3.5): read from a config.json, its layers
keep a state of fixed size for each sequence instead of keys (the KV cache counts the full
layers alone; the memory sets `max_num_seqs` states aside), costed by the step's chunks and
decodes, from the measured Gated DeltaNet kernels where the tables have them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import scenarios
import sim
from helpers.hf_configs import write_config
from helpers.model_scenario import refusal, scenario
from helpers.runs import records
from sim.costs.hardware import hardware_setup, model_architecture
from sim.costs.hardware.attention import DELTA_EFFICIENCY, DELTA_STEP_S
from sim.costs.hardware.cost import HardwareCost, operator_times
from sim.costs.hardware.kernels import data_root
from sim.costs.hardware.memory import NON_TORCH_BYTES
from sim.costs.hardware.operators import elementwise_bytes, embedding_bytes, matmul_shapes
from sim.costs.hardware.timing import elementwise_time
from sim.costs.shape import StepShape
from sim.notes import collected
from sim.runner import run_config

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
    path = scenario(tmp_path, model=f'config = "{QWEN35}"', gpu=gpu, tp=tp,
                    hardware=f'dtype = "fp8"\nep = {tp}\nframework = "{framework}"\n'
                             f'kernels = "{kernels}"', max_seq_len=16384, requests=requests)
    path.write_text(path.read_text().replace(
        "max_num_batched_tokens = 4096\n",
        "max_num_batched_tokens = 4096\nenable_prefix_caching = false\n"))
    return path


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


def test_the_cache_holds_the_full_layers_keys_and_memory_sets_states_aside(tmp_path):
    """A token's keys and values in the 15 full layers alone (an fp8 cache, the 2 key-value
    heads of 256 replicated to one a GPU at TP 8); a sequence's state in the 45 others. Under
    SGLang the plan sets max_num_seqs (64) of them aside before the KV cache; under vLLM each
    running sequence's state takes 98 KV blocks of 16 tokens of 15 KiB (a bf16 cache) while it
    runs; and under vLLM with another capacity policy, set aside, with a note."""
    arch = model_architecture({"config": QWEN35})
    assert arch.kv_bytes_per_token(8, 1) == 15 * 2 * 1 * 256
    assert arch.state_bytes_per_seq(8, 2) == 45 * STATE_PER_LAYER
    pooled = hardware_setup(scenarios.load(qwen35_scenario(tmp_path)).base)
    assert (pooled.plan.states, pooled.state_blocks) == (0, 98)
    assert -(-45 * STATE_PER_LAYER // (16 * 15360)) == 98
    assert pooled.describe()["state_blocks"] == 98
    setup = hardware_setup(scenarios.load(qwen35_scenario(tmp_path, "sglang")).base)
    assert (setup.plan.states, setup.state_blocks) == (64 * 45 * STATE_PER_LAYER, 0)
    assert pooled.kv_blocks > setup.kv_blocks
    policy = ['scheduler.capacity_scheduler_policy = "guaranteed_no_evict"']
    with collected() as said:
        hardware_setup(scenarios.load(qwen35_scenario(tmp_path)).base)
        setup = hardware_setup(scenarios.load(qwen35_scenario(tmp_path), policy).base)
    assert setup.plan.states == 64 * 45 * STATE_PER_LAYER
    assert [note for note in said if "states are set aside" in note] == [
        f"note: hardware: {QWEN35}'s linear-attention states are set aside for "
        f"engine.max_num_seqs = 64 sequences (1.4 GiB a GPU beside "
        f"{setup.kv_blocks * 16 * 15360 / 2**30:.1f} GiB of KV cache); vLLM takes each state "
        f"from its KV blocks only while its request runs, so with fewer running it caches more "
        f"tokens than here (docs/sim/hardware.md, \"KV capacity from memory\")"]
    bf16 = hardware_setup(scenarios.load(qwen35_scenario(tmp_path), [
        'model.state_dtype = "bf16"', *policy]).base)
    assert bf16.plan.states < setup.plan.states and bf16.kv_blocks > setup.kv_blocks
    described = setup.describe()
    assert described["states_gib_per_gpu"] == pytest.approx(setup.plan.states / 2**30)


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
    all-reduces in all 60 (by the roofline, counted independently of `cost._grow`)."""
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


def test_each_memory_rule_sets_the_states_aside(tmp_path):
    """vLLM's rule (the states set aside under a capacity policy not its own; under its own
    they take KV blocks): the KV cache is what the fraction of the memory leaves after the
    weights, activations, the memory outside the allocator and the states; TensorRT-LLM's: the
    fraction of what those leave; SGLang's: the fraction less the weights, the outside and the
    states (the activations beside it)."""
    memory = 141 * 2**30
    for framework in ("vllm", "trtllm", "sglang"):
        plan = hardware_setup(scenarios.load(qwen35_scenario(tmp_path, framework), [
            'scheduler.capacity_scheduler_policy = "guaranteed_no_evict"']).base).plan
        states, fixed = plan.states, plan.weights + NON_TORCH_BYTES
        assert states == 64 * 45 * STATE_PER_LAYER
        expected = {"vllm": 0.9 * memory - fixed - plan.activations - states,
                    "trtllm": 0.9 * (memory - fixed - plan.activations - states),
                    "sglang": 0.9 * memory - fixed - states}[framework]
        assert plan.kv_bytes == pytest.approx(expected, rel=1e-12)
        assert plan.needed == pytest.approx(fixed + plan.activations + states)


@pytest.mark.parametrize("framework, kernels, blocks", [
    ("vllm", "measured", "auto"), ("sglang", "measured", "auto"), ("vllm", "roofline", "auto"),
    ("vllm", "measured", 1200)])  # at most about 6 sequences, each state 98 blocks: preemptions
def test_fast_forward_is_step_by_step_for_a_hybrid(tmp_path, framework, kernels, blocks):
    path = qwen35_scenario(tmp_path, framework, kernels, requests=40)
    if blocks != "auto":  # outputs that outgrow the blocks left: decodes preempt
        path.write_text(path.read_text().replace("low = 10, high = 100", "low = 800, "
                                                 "high = 1600"))
    config = scenarios.load(path, [f"engine.num_kv_blocks = {blocks!r}".replace("'", '"')]).base
    fast, slow = run_config(config), run_config(config, fast_forward=False)
    assert records(fast) == records(slow)
    if blocks != "auto":
        assert sum(fast.request_columns()["preemptions"]) > 0


def test_a_hybrid_runs_and_its_report_names_its_layers_and_states(tmp_path):
    [(spec, recorder)] = sim.simulate(scenarios.load(qwen35_scenario(tmp_path, requests=10)))
    assert spec.config.model.linear_layers == 45 and spec.config.model.state_dtype == "fp32"
    assert len(recorder.request_columns()["finish_s"]) == 10
    from reports.section_text import hardware_text, model_text
    assert "45 linear-attention layers (64 state matrices of 128 x 128)" in \
        model_text(spec.config.model)
    assert "a running sequence's linear-attention state taking 98 of its blocks" in \
        hardware_text(spec.config.hardware.derived)
    [(spec, _)] = sim.simulate(scenarios.load(qwen35_scenario(tmp_path, "sglang", requests=4)))
    assert "GiB of linear-attention states" in hardware_text(spec.config.hardware.derived)


def test_prefix_caching_with_linear_layers_is_refused_in_one_line(tmp_path):
    assert ("engine.enable_prefix_caching: " in refusal(tmp_path, model=f'config = "{QWEN35}"',
                                                         gpu="h200", tp=8,
                                                         hardware='dtype = "fp8"\nep = 8'))


def test_states_that_do_not_fit_name_max_num_seqs(tmp_path):
    """Qwen3.5-27B in bf16 on one H100 with 256 sequences: under TensorRT-LLM their fp32
    states (147 MiB each), set aside, leave no room for a KV block, and the refusal names them
    and engine.max_num_seqs; under vLLM, whose running sequences take their states from the KV
    blocks, it runs, 256 sequences held back by the blocks their states take."""
    path = scenario(tmp_path, model=f'config = "{QWEN35_DENSE}"', gpu="h100-sxm",
                    hardware='dtype = "bf16"', requests=40)
    text = path.read_text().replace("max_num_seqs = 64\n", "max_num_seqs = 256\n"
                                    "enable_prefix_caching = false\n")
    Path(path).write_text(text.replace("rate = 4.0", "rate = 400.0"))
    with pytest.raises(ValueError) as info:
        hardware_setup(scenarios.load(path, ['hardware.framework = "trtllm"']).base)
    message = str(info.value)
    assert "GiB of linear-attention states for engine.max_num_seqs = 256 sequences" in message
    assert "or use a smaller engine.max_num_seqs (the linear-attention states)" in message
    config = scenarios.load(path).base
    setup = hardware_setup(config)
    assert setup.plan.states == 0 and setup.state_blocks == -(-48 * (
        48 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 48 * 128) * 2) // (16 * 16 * 2 * 4 * 256 * 2))
    recorder = run_config(config)
    assert len(recorder.request_columns()["finish_s"]) == 40


def test_a_state_takes_its_blocks_while_its_sequence_holds_any():
    """The block manager of a pool that holds states: a sequence's state takes its blocks with
    its first KV block (all or nothing) and gives them back with its last."""
    from engine.block_manager import BlockManager, OutOfBlocksError

    bm = BlockManager(20, 4, state_blocks=3)
    assert bm.blocks_to_hold(7, 9) == 3 + 3
    bm.ensure_capacity(7, 9)
    assert (len(bm.block_tables[7]), bm.num_free, bm.num_used) == (3, 14, 6)
    bm.allocate_block(7)
    assert (bm.num_free, bm.blocks_to_hold(7, 17)) == (13, 1)
    bm.allocate_blocks([8, 8, 9])
    assert (bm.num_free, bm.num_used) == (4, 16)
    with pytest.raises(OutOfBlocksError):
        bm.ensure_capacity(10, 5)  # two blocks and a state of 3: 5 asked, 4 free
    with pytest.raises(OutOfBlocksError):
        bm.allocate_blocks([10, 11])  # two blocks and two states
    assert bm.num_free == 4 and 10 not in bm.block_tables  # all or nothing
    bm.ensure_capacity(10, 4)  # one block and its state: the last 4
    assert bm.num_free == 0
    with pytest.raises(OutOfBlocksError):
        bm.allocate_block(7)
    bm.check_invariants()
    bm.free_sequence(10)
    bm.free_sequence(7)
    assert (bm.num_free, bm.num_used) == (11, 9)
    bm.free_sequence(8)
    bm.free_sequence(9)
    assert bm.num_free == 20
    bm.check_invariants()


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
