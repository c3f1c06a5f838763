"""The hardware cost model's models and GPUs of 2026: mixture-of-experts, latent-attention and
sliding-window architectures with their published parameter counts, weight and KV bytes by hand,
Blackwell GPUs and nvfp4, the KV cache's dtype, expert parallelism as vLLM allows it, a model
read from its config.json, and one-line refusals of what cannot run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import scenarios
import sim
from helpers.hf_configs import CONFIGS, write_config
from scenarios import ScenarioError
from sim.checks import check_scenario
from sim.costs.hardware import (HardwareCost, gpu_spec, gpus, hardware_setup, layer_op_times,
                                model_architecture, models)
from sim.costs.hardware.architecture import expected_experts
from sim.costs.hardware.catalog import MODEL_KEYS
from sim.costs.hardware.operators import attention_shapes, expert_counts
from sim.costs.shape import StepShape
from sim.runner import run_config

NEW_MODELS = ("meta-llama/Llama-3.1-405B", "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-8B",
              "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B",
              "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x22B-v0.1",
              "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b")
BLACKWELL = ("b200", "gb200", "b300", "gb300", "rtx-pro-6000")
GIB = 2**30


def scenario(tmp_path, model='name = "meta-llama/Llama-3.1-8B"', gpu="h100-sxm", tp=1,
             hardware="", max_seq_len=4096, requests=4):
    path = tmp_path / "s.toml"
    path.write_text(f'[model]\n{model}\nmax_seq_len = {max_seq_len}\n[hardware]\ngpu = "{gpu}"\n'
                    f'tp = {tp}\n{hardware}\n[cost]\nmodel = "hardware"\n[engine]\n'
                    f'max_num_seqs = 64\nmax_num_batched_tokens = 4096\n[workload]\n'
                    f'num_requests = {requests}\narrival = {{ process = "poisson", rate = 4.0 }}\n'
                    f'prompt_tokens = {{ dist = "uniform", low = 100, high = 1500 }}\n'
                    f'output_tokens = {{ dist = "uniform", low = 10, high = 100 }}\n')
    return path


def setup_of(tmp_path, **kwargs):
    return hardware_setup(scenarios.load(scenario(tmp_path, **kwargs)).base)


def refusal(tmp_path, **kwargs) -> str:
    """The one-line error loading and checking the scenario gives."""
    path = scenario(tmp_path, **kwargs)
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path))
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{path}: ")
    return text


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


# --- refusals: one line naming the key --------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"model": 'name = "Qwen/Qwen3-30B-A3B"', "tp": 4, "hardware": "ep = 2"},
     "hardware.ep: must be 1 (experts split by tensor parallelism) or hardware.tp = 4"),
    ({"tp": 2, "hardware": "ep = 2"},
     "hardware.ep = 2: meta-llama/Llama-3.1-8B has no experts; use hardware.ep = 1"),
    ({"tp": 1, "hardware": "ep = 2"},  # a dense model's first problem, whatever its TP
     "hardware.ep = 2: meta-llama/Llama-3.1-8B has no experts; use hardware.ep = 1"),
    ({"hardware": 'dtype = "nvfp4"'},
     "hardware.dtype: h100-sxm has no nvfp4 tensor cores (it has fp16, bf16, fp8; nvfp4 runs "
     "on b200, gb200, b300, gb300, rtx-pro-6000)"),
    ({"gpu": "a100-80gb-sxm", "hardware": 'kv_dtype = "fp8"'},
     "hardware.kv_dtype: an fp8 KV cache needs a GPU with fp8 support; a100-80gb-sxm has none "
     "(use fp16 or bf16, or one of h100-sxm"),
    ({"hardware": 'kv_dtype = "int8"'}, "hardware.kv_dtype: must be one of auto, fp16, bf16, "
                                        "fp8"),
    ({"hardware": 'dtype = "fp4"'}, "hardware.dtype: must be one of fp16, bf16, fp8, nvfp4"),
    ({"model": 'name = "meta-llama/Llama-3.1-8B"\nconfig = "c.json"'},
     "model.config: give model.name (a catalog id) or model.config (a config.json), not both"),
    ({"model": 'name = "Qwen/Qwen3-30B-A3B"\nexperts_per_token = 200'},
     "model.experts_per_token must be from 1 to model.n_experts (128), got 200"),
    ({"model": 'name = "meta-llama/Llama-3.1-8B"\nmoe_d_ff = 1024'},
     "model.moe_d_ff (1024) is a mixture-of-experts key and model.n_experts is 0 (no experts): "
     "give model.n_experts, or set moe_d_ff to 0 too"),
    ({"model": 'name = "deepseek-ai/DeepSeek-V3"\nn_experts = 0', "tp": 8,
      "hardware": 'dtype = "fp8"', "gpu": "h200"},  # turning the experts off names every key
     "give model.n_experts, or set experts_per_token, moe_d_ff, n_shared_experts, "
     "n_dense_layers to 0 too"),
    ({"model": 'name = "meta-llama/Llama-3.1-8B"\nn_experts = 8'},
     "model.experts_per_token (the experts each token is routed to) must be given with "
     "model.n_experts"),
    ({"model": 'name = "deepseek-ai/DeepSeek-V3"\nn_heads = 12', "tp": 4,
      "hardware": 'dtype = "fp8"', "gpu": "h200"},  # latent attention: any head count
     "does not fit on h200"),
    ({"model": 'name = "meta-llama/Llama-3.1-8B"\nsliding_window = 4096'},
     "model.sliding_window and model.sliding_layers come together"),
    ({"model": 'name = "Qwen/Qwen3-30B-A3B"\nshared_d_ff = 1024'},
     "model.shared_d_ff is the shared experts' width: give model.n_shared_experts too"),
    ({"model": 'name = "deepseek-ai/DeepSeek-V3"\nhead_dim = 128', "tp": 8,
      "hardware": 'dtype = "fp8"', "gpu": "h200"},
     "model.head_dim is not used with latent attention"),
])
def test_what_cannot_run_is_refused_in_one_line(tmp_path, kwargs, message):
    assert message in refusal(tmp_path, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"model": 'name = "meta-llama/Llama-2-7b-hf"', "max_seq_len": 8192},
     "model.max_seq_len: meta-llama/Llama-2-7b-hf takes at most 4,096 tokens (its "
     "context: max_position_embeddings, or as a rope_scaling stretches it), got 8,192"),
    ({"hardware": "framework_version = 0.24"},
     'hardware.framework_version: must be a version in quotes, e.g. "0.24.0"'),
    ({"hardware": 'kv_dtype = "fp8_e4m3"'}, "(did you mean 'fp8'?)"),
    ({"hardware": 'framework = "vLLM"'}, "(did you mean 'vllm'?)"),
    ({"gpu": "a100"}, "unknown GPU 'a100' (nearest: a100-40gb-sxm, a100-80gb-sxm, "
                      "a100-80gb-pcie;"),
])
def test_lengths_versions_and_near_misses_are_refused_naming_the_key(tmp_path, kwargs, message):
    assert message in refusal(tmp_path, **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"hardware": 'framework_version = "9.9"\nkernels = "roofline"'},
     "hardware.framework_version: vllm tables for h100-sxm exist for version 0.24.0, not '9.9'"),
    ({"gpu": "a40", "hardware": 'framework_version = "0.24.0"'},
     "hardware.framework_version: no measured kernel tables for GPU 'a40'"),
])
def test_a_framework_version_the_tables_lack_is_refused_even_for_the_roofline(tmp_path, kwargs,
                                                                            message):
    pytest.importorskip("aiconfigurator_core")
    assert message in refusal(tmp_path, **kwargs)


def test_without_the_tables_a_version_is_refused_unless_the_roofline_is_asked(
        tmp_path, monkeypatch, capsys):
    from sim import notes
    from sim.costs.hardware import kernels, setup

    notes.forget()
    monkeypatch.setattr(kernels, "data_root", lambda: None)  # servesim[gpu] not installed
    monkeypatch.setattr(setup, "data_root", lambda: None)
    # the key the user set is named, not hardware.kernels, which it left unset
    assert "hardware.framework_version: measured kernel tables need the optional extra " \
        "servesim[gpu]" in refusal(tmp_path, hardware='framework_version = "0.24.0"')
    assert "hardware.kernels: measured kernel tables need the optional extra servesim[gpu]" in \
        refusal(tmp_path, hardware='framework_version = "0.24.0"\nkernels = "measured"')
    path = scenario(tmp_path, hardware='framework_version = "0.24.0"\nkernels = "roofline"')
    check_scenario(scenarios.load(path))
    assert "note: hardware.framework_version = '0.24.0' is not checked" in capsys.readouterr().err


def test_keys_beside_a_config_json_replace_the_files_before_its_rules_apply(tmp_path):
    path = write_config(tmp_path, CONFIGS["meta-llama/Llama-3.1-405B"] | {
        "num_key_value_heads": 7, "num_experts_per_tok": 2}, "odd.json")
    arch = model_architecture({"config": path, "n_kv_heads": 8})
    assert (arch.n_heads, arch.n_kv_heads) == (128, 8)
    mixtral = write_config(tmp_path, CONFIGS["mistralai/Mixtral-8x7B-v0.1"] | {
        "num_experts_per_tok": 16}, "mixtral.json")
    assert model_architecture({"config": mixtral, "experts_per_token": 2}).experts_per_token == 2


def test_a_kv_block_longer_than_the_model_takes_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match="engine.block_size: must be at most "
                                            r"model.max_seq_len \(4,096\), got 8,192"):
        check_scenario(scenarios.load(scenario(tmp_path), ["engine.block_size=8192"]))


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
    assert [a.flop_s for a in fp8._prefill] == [a.flop_s for a in bf16._prefill]
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
    assert cost.measured.is_measured("prefill_attention") and \
        cost.measured.is_measured("decode_attention")
    at_8k = setup_of(tmp_path, model=mistral, max_seq_len=8192)
    assert at_8k.arch.sliding_window == 4096 and at_8k.arch.sliding_layers == 32


def test_a_model_whose_steps_need_more_memory_than_its_weights_names_the_step_keys(tmp_path):
    path = scenario(tmp_path)
    path.write_text(path.read_text().replace("max_num_batched_tokens = 4096",
                                             "max_num_batched_tokens = 100000000"))
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path))
    assert "GiB of activations" in str(info.value) and str(info.value).endswith(
        "use a smaller engine.max_num_batched_tokens or engine.max_num_seqs (the activations) "
        "or a GPU with more memory")


def test_a_gpu_defined_in_the_scenario_has_no_measured_tables_whatever_its_name(tmp_path):
    h100 = gpus()["h100-sxm"]
    table = ", ".join(f"{key} = {json.dumps(h100[key])}" for key in (
        "memory_gib", "memory_bandwidth_gbs", "interconnect_bandwidth_gbs",
        "interconnect_latency_us", "measured"))
    peaks = ", ".join(f"{k} = {v}" for k, v in h100["peak_tflops"].items())
    gpu = f'{{ name = "h100-sxm", {table}, peak_tflops = {{ {peaks} }} }}'
    path = scenario(tmp_path)
    text = path.read_text().replace('gpu = "h100-sxm"', f"gpu = {gpu}")
    path.write_text(text)
    assert hardware_setup(scenarios.load(path).base).kernels is None  # the roofline's
    path.write_text(text.replace("tp = 1", 'tp = 1\nkernels = "measured"'))
    with pytest.raises(ScenarioError, match="hardware.kernels: no measured kernel tables for a "
                                            "GPU defined by a table"):
        check_scenario(scenarios.load(path))
    path.write_text(text.replace("fp8 = ", "int8 = 1.0, fp8 = "))
    with pytest.raises(ScenarioError, match="hardware.gpu.peak_tflops.int8: not a dtype "
                                            "servesim costs on tensor cores"):
        check_scenario(scenarios.load(path))


def test_model_keys_of_experts_are_refused_without_the_hardware_model(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[model]\nn_experts = 8\n[workload]\nnum_requests = 4\narrival = { process '
                    '= "poisson", rate = 1.0 }\nprompt_tokens = { dist = "fixed", value = 8 }\n'
                    'output_tokens = { dist = "fixed", value = 8 }\n')
    with pytest.raises(ScenarioError, match="model.n_experts: only with cost.model = "
                                            "'hardware'"):
        scenarios.load(path)


# --- a model from its config.json -------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_config_json_reads_as_the_catalog_model(tmp_path, name):
    arch = model_architecture({"config": write_config(tmp_path, CONFIGS[name])})
    catalog = model_architecture({"name": name})
    assert {k: getattr(arch, k) for k in MODEL_KEYS} == \
        {k: getattr(catalog, k) for k in MODEL_KEYS}


@pytest.mark.parametrize("table, window, sliding", [
    ({"architectures": ["Gemma2ForCausalLM"], "sliding_window": 4096}, 4096, 21),
    ({"architectures": ["Gemma3ForCausalLM"], "sliding_window": 1024}, 1024, 35),
    ({"architectures": ["Gemma3ForCausalLM"], "sliding_window": 512,
      "layer_types": ["sliding_attention"] * 40 + ["full_attention"] * 2}, 512, 40),
    ({"architectures": ["Qwen2ForCausalLM"], "use_sliding_window": True, "sliding_window": 4096,
      "max_window_layers": 28}, 4096, 14),
    ({"architectures": ["Qwen2ForCausalLM"], "sliding_window": 4096}, 0, 0),  # not in use
])
def test_sliding_layers_from_a_config(tmp_path, table, window, sliding):
    shape = {"num_hidden_layers": 42, "hidden_size": 2304, "num_attention_heads": 8,
             "num_key_value_heads": 4, "head_dim": 256, "intermediate_size": 9216,
             "vocab_size": 256000, "max_position_embeddings": 8192}
    arch = model_architecture({"config": write_config(tmp_path, shape | table)})
    assert (arch.sliding_window, arch.sliding_layers) == (window, sliding)
    assert arch.tie_embeddings == table["architectures"][0].startswith("Gemma")
    assert arch.qkv_bias == table["architectures"][0].startswith("Qwen2")


@pytest.mark.parametrize("scaling, context", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131_072),
    ({"type": "linear", "factor": 2}, 81_920),
    ({"rope_type": "dynamic", "factor": 1.5}, 61_440),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40_960),
    ({"rope_type": "longrope", "factor": 4.0}, 40_960),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768.0}, 131_072),
    ({"rope_type": "default"}, 40_960),
    (None, 40_960),
])
def test_a_rotary_scaling_stretches_the_context_as_vllm_derives_it(tmp_path, scaling, context):
    # Qwen's model card: add YaRN with factor 4 to serve 131,072 tokens of Qwen3
    table = CONFIGS["Qwen/Qwen3-32B"] | {"rope_scaling": scaling}
    assert model_architecture({"config": write_config(tmp_path, table)}).max_seq_len == context


def test_a_config_json_model_runs_and_keys_beside_it_change_it(tmp_path):
    write_config(tmp_path, CONFIGS["Qwen/Qwen3-30B-A3B"] | {
        "_name_or_path": "Qwen/Qwen3-30B-A3B"}, "qwen.json")
    setup = setup_of(tmp_path, model='config = "qwen.json"', tp=2, max_seq_len=8192)
    assert setup.arch.name == "Qwen/Qwen3-30B-A3B" and setup.arch.max_seq_len == 8192
    assert setup.arch.n_experts == 128
    [(spec, recorder)] = sim.simulate(scenarios.load(
        scenario(tmp_path, model='config = "qwen.json"', tp=2, hardware="ep = 2",
                 requests=20)))
    model = spec.config.model  # as run: the file (absolute) and the shape it read
    assert model.n_experts == 128 and model.config == str(tmp_path / "qwen.json")
    assert len(recorder.request_columns()["finish_s"]) == 20


def test_a_models_folder_a_bom_and_the_home_folder_find_its_config_json(tmp_path, monkeypatch):
    # vLLM takes a model's folder; some editors start a file with a byte-order mark
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIGS["Qwen/Qwen3-30B-A3B"]),
                                        encoding="utf-8-sig")
    monkeypatch.setenv("HOME", str(tmp_path))
    for given in ("Qwen3-30B-A3B", str(folder), "~/Qwen3-30B-A3B/config.json"):
        assert setup_of(tmp_path, model=f'config = "{given}"', tp=2).arch.n_experts == 128
    assert model_architecture({"config": str(folder)}).n_experts == 128  # from Python too
    (tmp_path / "empty").mkdir()
    assert "model.config: " in refusal(tmp_path, model='config = "empty"') and \
        "is a folder without a config.json" in refusal(tmp_path, model='config = "empty"')


@pytest.mark.parametrize("content, message", [
    (None, "model.config: file not found: missing.json"),
    ("{not json", "is not JSON (Expecting property name enclosed in double quotes at line 1)"),
    ("[1, 2]", "must hold a JSON object (a Hugging Face config.json)"),
    ('{"hidden_size": 8}', 'no "architectures" list naming the model class (one of '
                           'LlamaForCausalLM, MistralForCausalLM'),
    (json.dumps(CONFIGS["Qwen/Qwen3-32B"] | {"rope_scaling": {"type": "yarn", "factor": 4}}),
     "rope_scaling.original_max_position_embeddings must be a positive integer under YaRN, "
     "got None"),
    (json.dumps(CONFIGS["Qwen/Qwen3-32B"] | {"rope_scaling": {"type": "linear", "factor": -1}}),
     "rope_scaling.factor must be a positive number, got -1"),
    ('{"architectures": ["BertModel"]}', "architecture 'BertModel' is not supported "
                                         "(supported: LlamaForCausalLM"),
    ('{"architectures": ["LlamaForCausalLm"]}', "architecture 'LlamaForCausalLm' is not "
                                                "supported (did you mean 'LlamaForCausalLM'? "),
    ('{"architectures": ["Qwen3MOEForCausalLM"]}', "(did you mean 'Qwen3MoeForCausalLM'? "),
    (json.dumps({k: v for k, v in CONFIGS["mistralai/Mixtral-8x7B-v0.1"].items()
                 if k != "num_local_experts"}),
     "missing 'num_local_experts' (a MixtralForCausalLM config.json has it)"),
    (json.dumps(CONFIGS["meta-llama/Llama-3.1-405B"] | {"hidden_size": "16384"}),
     "hidden_size must be an integer >= 1, got '16384'"),
    (json.dumps(CONFIGS["meta-llama/Llama-3.1-405B"] | {"num_key_value_heads": 7}),
     "num_key_value_heads (7) must divide num_attention_heads (128)"),
    (json.dumps(CONFIGS["meta-llama/Llama-3.1-405B"] | {"hidden_size": 16390}),
     "hidden_size (16390) must be a multiple of num_attention_heads (128), or give head_dim"),
    (json.dumps(CONFIGS["mistralai/Mixtral-8x7B-v0.1"] | {"num_experts_per_tok": 16}),
     "num_experts_per_tok (16) must be at most num_local_experts (8)"),
    (json.dumps(CONFIGS["Qwen/Qwen3-30B-A3B"] | {"decoder_sparse_step": 100}),
     "mlp_only_layers and decoder_sparse_step leave no mixture-of-experts layer of the 48"),
    (json.dumps(CONFIGS["Qwen/Qwen3-30B-A3B"] | {"mlp_only_layers": [0, "a"]}),
     "mlp_only_layers holds 'a'; its entries must be layer indices from 0 to 47"),
    (json.dumps(CONFIGS["deepseek-ai/DeepSeek-V3"] | {"first_k_dense_replace": 61}),
     "first_k_dense_replace and moe_layer_freq leave no mixture-of-experts layer of the 61"),
    (json.dumps(CONFIGS["mistralai/Mixtral-8x7B-v0.1"] | {"sliding_window": 4096,
                                                         "layer_types": ["sliding", None]}),
     "layer_types holds 'sliding'; its entries must be \"full_attention\" or "
     "\"sliding_attention\""),
    (json.dumps(CONFIGS["mistralai/Mixtral-8x7B-v0.1"] | {
        "sliding_window": 4096, "layer_types": ["sliding_attention"] * 33}),
     "layer_types has 33 entries; it needs one per layer (num_hidden_layers is 32)"),
    ("[" * 100_000 + "]" * 100_000, "must hold a JSON object (a Hugging Face config.json), not "
                                    "arrays or objects nested thousands deep"),
    # JSON reads it as an exact integer, which no float holds
    (json.dumps(CONFIGS["meta-llama/Llama-3.1-405B"]).replace('"hidden_size": 16384',
                                                              '"hidden_size": 1' + "0" * 400),
     "hidden_size must be at most 1,000,000,000, got 401 digits"),
    # past the 4,300 digits Python reads an integer of
    (json.dumps(CONFIGS["meta-llama/Llama-3.1-405B"]).replace('"hidden_size": 16384',
                                                              '"hidden_size": 1' + "0" * 5000),
     "holds a number of thousands of digits, which no model's size is"),
    (json.dumps(CONFIGS["Qwen/Qwen3-32B"] | {"rope_scaling": {"rope_type": "foobar",
                                                              "factor": 4}}),
     "rope_scaling's rope_type must be one of default, linear, dynamic, yarn, mrope, su, "
     "longrope, llama3, got 'foobar'"),
    (json.dumps(CONFIGS["Qwen/Qwen3-32B"] | {"rope_scaling": {"type": "linear",
                                                              "factor": 1e-6}}),
     "rope_scaling.factor (1e-06) leaves a context of less than one token (40,960 positions)"),
    (json.dumps({k: v for k, v in CONFIGS["openai/gpt-oss-120b"].items()
                 if k != "sliding_window"}),
     "layer_types marks sliding layers, but there is no sliding_window"),
])
def test_a_bad_config_json_is_one_line_naming_model_config(tmp_path, content, message):
    name = "missing.json" if content is None else "bad.json"
    if content is not None:
        (tmp_path / name).write_text(content)
    text = refusal(tmp_path, model=f'config = "{name}"')
    assert "model.config: " in text and message in text and "Traceback" not in text


def test_deepseeks_keys_a_config_leaves_out_are_transformers_defaults(tmp_path):
    """vLLM loads a DeepSeek-V3 config.json through transformers, whose defaults fill what the
    file leaves out (3 dense layers first, one shared expert, a query rank of 1,536); a null
    query rank is none (DeepSeek-V2-Lite's)."""
    full = CONFIGS["deepseek-ai/DeepSeek-V3"]
    silent = {k: v for k, v in full.items()
              if k not in ("first_k_dense_replace", "n_shared_experts", "q_lora_rank")}
    arch = model_architecture({"config": write_config(tmp_path, silent)})
    assert (arch.n_dense_layers, arch.n_shared_experts, arch.q_lora_rank) == (3, 1, 1536)
    lite = model_architecture({"config": write_config(
        tmp_path, full | {"q_lora_rank": None, "n_shared_experts": None}, "lite.json")})
    assert (lite.q_lora_rank, lite.n_shared_experts) == (0, 0)


@pytest.mark.parametrize("first, every", [(0, 1), (3, 1), (3, 2), (0, 3), (1, 4), (50, 7)])
def test_deepseeks_sparse_layers_are_counted_as_vllm_places_them(tmp_path, first, every):
    # vLLM: layer i has experts when i >= first_k_dense_replace and i % moe_layer_freq == 0
    sparse = sum(1 for i in range(61) if i >= first and i % every == 0)
    table = CONFIGS["deepseek-ai/DeepSeek-V3"] | {"first_k_dense_replace": first,
                                                    "moe_layer_freq": every}
    assert model_architecture({"config": write_config(tmp_path, table)}).n_dense_layers == \
        61 - sparse


def test_qwen3_moes_dense_layers_are_counted_as_vllm_places_them(tmp_path):
    # vLLM: layer i has experts unless mlp_only_layers names it or (i + 1) % step != 0
    table = CONFIGS["Qwen/Qwen3-30B-A3B"] | {"decoder_sparse_step": 2,
                                               "mlp_only_layers": [1, 1, 2, 5, 47]}
    arch = model_architecture({"config": write_config(tmp_path, table)})
    sparse = sum(1 for i in range(48) if i not in (1, 2, 5, 47) and (i + 1) % 2 == 0)
    assert arch.n_dense_layers == 48 - sparse


def test_a_model_config_from_the_command_line_replaces_the_scenarios_model_name(tmp_path):
    path = write_config(tmp_path, CONFIGS["Qwen/Qwen3-32B"], "qwen.json")

    def model(*overrides):
        [spec] = scenarios.load("llama3-8b-h100", list(overrides), variant="continuous").runs()
        return sim.build.resolved_spec(spec).config.model

    assert model(f'model.config="{path}"').n_layers == 64
    assert model(f'model={{config="{path}"}}').n_layers == 64  # a table, merged
    assert model(f'model.config="{path}"', 'model.name="meta-llama/Llama-3.1-8B"').n_layers \
        == 32  # and back


def test_a_sweep_of_model_name_may_not_drop_a_variants_config(tmp_path):
    """A model's name and config replace each other: a sweep of one over a variant that sets
    the other would run that variant as every other, and is refused."""
    write_config(tmp_path, CONFIGS["Qwen/Qwen3-32B"], "qwen.json")
    path = scenario(tmp_path)
    path.write_text(path.read_text() + '[[variants]]\nname = "a"\n[[variants]]\nname = "b"\n'
                    'set = { "model.config" = "qwen.json" }\n')
    with pytest.raises(ScenarioError, match="differ"):
        scenarios.load(path, sweep={"model.name": ["meta-llama/Llama-3.1-8B",
                                                   "mistralai/Mistral-7B-v0.1"]})


def test_a_config_json_that_is_not_utf_8_cannot_be_read(tmp_path):
    (tmp_path / "bad.json").write_bytes(b'{"a": "\xff\xfe"}')
    text = refusal(tmp_path, model='config = "bad.json"')
    assert "bad.json cannot be read" in text and "digits" not in text


@pytest.mark.parametrize("quantization, read", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, ("fp8", "block")),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, ("fp8", "dynamic")),
    ({"quant_method": "fp8", "activation_scheme": "static"}, ("fp8", "static")),
    ({"quant_method": "fbgemm_fp8"}, ("fp8", "dynamic")),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}},
     ("fp8", "dynamic")),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "block"},
        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}},
     ("fp8", "block")),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group"},
        "input_activations": {"num_bits": 4, "type": "float"}}}}, ("nvfp4", "static")),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float"}, "input_activations": None}}},
     "compressed-tensors (another scheme than fp8 or nvfp4 weights and activations)"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int"}}}},
     "compressed-tensors (another scheme than fp8 or nvfp4 weights and activations)"),
    ({"quant_method": "modelopt"}, "modelopt"),
    ({"quant_method": "mxfp4"}, ("mxfp4", "static")),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, ("nvfp4", "static")),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "modelopt W4A8_AWQ"),
    ({"quant_method": "awq", "bits": 4}, "awq"),
    ({"bits": 4}, "no quant_method"),
])
def test_a_config_jsons_quantization_is_read_in_servesims_keys(tmp_path, quantization, read):
    from sim.costs.hardware.checkpoint import checkpoint_dtype

    path = write_config(tmp_path, CONFIGS["Qwen/Qwen3-32B"] | {
        "quantization_config": quantization})
    assert checkpoint_dtype(path) == read


def test_layer_op_times_refuses_a_config_that_is_not_a_path():
    for config in (5, "", ["a"], {}):
        with pytest.raises(ValueError, match="model.config must be a non-empty string"):
            sim.layer_op_times({"config": config}, "h100-sxm", 1, 8)


def test_a_gpu_defined_without_its_measured_says_what_that_is():
    from sim.costs.hardware.catalog import gpu_spec

    table = {"name": "x", "memory_gib": 80, "memory_bandwidth_gbs": 3000,
             "peak_tflops": {"bf16": 900}, "interconnect_bandwidth_gbs": 450,
             "interconnect_latency_us": 10}
    with pytest.raises(ValueError, match=r"needs measured \(whose fitted kernel efficiencies "
                                         r"it takes: one of a100"):
        gpu_spec(table)


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
    assert cost.measured._moe_dtype == "w4a16_mxfp4" and cost.measured.is_measured("moe_experts")
    assert cost.peak == gpu_spec("h100-sxm").peak_flops("bf16")
    roofline = {d: layer_op_times("openai/gpt-oss-120b", "h100-sxm", 1, 8, d,
                                  kernels="roofline")["moe_up_proj"] for d in ("mxfp4", "bf16")}
    assert roofline["mxfp4"] < 0.7 * roofline["bf16"]  # a few rows: a quarter of the bytes
    assert "hardware.dtype: mxfp4 quantizes a mixture of experts' routed experts" in refusal(
        tmp_path, hardware='dtype = "mxfp4"')
