"""The hardware cost model refuses what cannot run in one line naming the key and what is
allowed: a layout, a dtype or a framework a GPU cannot take, a version the tables lack, a near
miss of a name, a KV block longer than the model, a step needing more memory than the weights
leave, a GPU defined by a table without what it needs, model keys without the hardware model.
(What runs: test_hardware_models.py.)"""

from __future__ import annotations

import json

import pytest

import scenarios
from helpers.hf_configs import CONFIGS, write_config
from helpers.model_scenario import refusal, scenario
from scenarios import ScenarioError
from sim.checks import check_scenario
from sim.costs.hardware import gpu_spec, gpus, hardware_setup, model_architecture


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


def test_a_gpu_defined_without_its_measured_says_what_that_is():
    table = {"name": "x", "memory_gib": 80, "memory_bandwidth_gbs": 3000,
             "peak_tflops": {"bf16": 900}, "interconnect_bandwidth_gbs": 450,
             "interconnect_latency_us": 10}
    with pytest.raises(ValueError, match=r"needs measured \(whose fitted kernel efficiencies "
                                         r"it takes: one of a100"):
        gpu_spec(table)
