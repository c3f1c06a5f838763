"""A model from its Hugging Face config.json (`model.config`): every catalog model's file reads
as the catalog's model, sliding layers, rotary scaling and DeepSeek's defaults as vLLM derives
them, quantization compared with the scenario's dtype, overrides and sweeps of the model, and
one-line refusals of a bad file."""

from __future__ import annotations

import json

import pytest

import scenarios
import sim
from helpers.hf_configs import CONFIGS, write_config
from helpers.model_scenario import refusal, scenario, setup_of
from scenarios import ScenarioError
from sim.costs.hardware import model_architecture
from sim.costs.hardware.catalog import MODEL_KEYS


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
    (json.dumps({"architectures": ["LlamaForCausalLM"], "text_config": {
        k: v for k, v in CONFIGS["meta-llama/Llama-3.1-405B"].items() if k != "architectures"}}),
     "missing 'num_attention_heads' (a LlamaForCausalLM config.json has it at its top level; "
     "this file nests its text model's keys in text_config: give them as a config.json of "
     "their own, naming the text model's class in architectures)"),
    (json.dumps(CONFIGS["Qwen/Qwen3-32B"] | {"head_dim": 0}),
     "head_dim must be an integer >= 1, got 0"),
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


def test_deepseek_v2_lite_reads_with_its_own_classs_defaults(tmp_path):
    """DeepSeek-V2-Lite's published config.json (DeepseekV2ForCausalLM): 15.7 B parameters, a
    latent KV cache of 27 x (512 + 64) x 2 bytes a token; where a V2 file is silent, V2's
    defaults (no dense layer first, two shared experts), not V3's."""
    lite = {"architectures": ["DeepseekV2ForCausalLM"], "num_hidden_layers": 27,
            "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
            "intermediate_size": 10944, "moe_intermediate_size": 1408, "vocab_size": 102400,
            "max_position_embeddings": 163840, "tie_word_embeddings": False,
            "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
            "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": None,
            "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
            "v_head_dim": 128}
    arch = model_architecture({"config": write_config(tmp_path, lite)})
    assert arch.parameters() == pytest.approx(15.7e9, rel=0.01)
    assert arch.kv_bytes_per_token(1, 2) == 27 * (512 + 64) * 2
    silent = {k: v for k, v in lite.items() if k not in ("first_k_dense_replace",
                                                          "n_shared_experts")}
    arch = model_architecture({"config": write_config(tmp_path, silent, "silent.json")})
    assert (arch.n_dense_layers, arch.n_shared_experts) == (0, 2)


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
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": "fp8"}}},
     "compressed-tensors (another scheme than fp8 or nvfp4 weights and activations)"),
    ({"quant_method": "compressed-tensors", "config_groups": [{"weights": {"num_bits": 8}}]},
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
