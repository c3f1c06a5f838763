"""The model classes read from a config.json beyond the catalog's: each published file reads
as its model card counts it (Qwen2-MoE, GLM-4.5, MiniMax-M2), the multimodal classes as their
text model (Gemma 3 with transformers' defaults for what its file leaves out, Qwen3-VL with the
wrapper's tied embeddings, Mistral Small 3.1, Kimi K2.5 as DeepSeek-V3), and one-line refusals
naming where in the file the problem is."""

from __future__ import annotations

import json

import pytest

import scenarios
import sim
from helpers.hf_configs import CONFIGS, write_config
from helpers.model_scenario import refusal, scenario, setup_of
from sim.costs.hardware import model_architecture
from sim.costs.hardware.catalog import MODEL_KEYS
from sim.notes import collected

# The keys the readers use, as each model's config.json on Hugging Face publishes them
QWEN15_MOE = {  # Qwen/Qwen1.5-MoE-A2.7B: "14.3B parameters in total and 2.7B activated"
    "architectures": ["Qwen2MoeForCausalLM"], "num_hidden_layers": 24, "hidden_size": 2048,
    "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 5632,
    "vocab_size": 151936, "max_position_embeddings": 8192, "tie_word_embeddings": False,
    "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1,
    "use_sliding_window": False, "max_window_layers": 21}
GLM45_AIR = {  # zai-org/GLM-4.5-Air: "106 billion total parameters and 12 billion active"
    "architectures": ["Glm4MoeForCausalLM"], "num_hidden_layers": 46, "hidden_size": 4096,
    "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 10944, "vocab_size": 151552, "max_position_embeddings": 131072,
    "tie_word_embeddings": False, "attention_bias": True, "n_routed_experts": 128,
    "num_experts_per_tok": 8, "moe_intermediate_size": 1408, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "num_nextn_predict_layers": 1, "use_qk_norm": False}
MINIMAX_M25 = {  # MiniMaxAI/MiniMax-M2.5: 229 B parameters, 10 B activated
    "architectures": ["MiniMaxM2ForCausalLM"], "num_hidden_layers": 62, "hidden_size": 3072,
    "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 1536, "vocab_size": 200064, "max_position_embeddings": 196608,
    "tie_word_embeddings": False, "num_local_experts": 256, "num_experts_per_tok": 8,
    "shared_intermediate_size": 0, "use_qk_norm": True, "rotary_dim": 64}
GEMMA3_27B = {  # google/gemma-3-27b-it: its text_config leaves vocab_size and the context out
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
                    "model_type": "gemma3_text", "num_attention_heads": 32,
                    "num_hidden_layers": 62, "num_key_value_heads": 16,
                    "query_pre_attn_scalar": 168,
                    "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_hidden_layers": 27}}
QWEN3_VL_8B = {  # Qwen/Qwen3-VL-8B-Instruct: untied, as its top level says
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
    "tie_word_embeddings": False,
    "text_config": {"head_dim": 128, "hidden_size": 4096, "intermediate_size": 12288,
                    "max_position_embeddings": 262144, "model_type": "qwen3_vl_text",
                    "num_attention_heads": 32, "num_hidden_layers": 36,
                    "num_key_value_heads": 8, "vocab_size": 151936, "attention_bias": False}}
MISTRAL_SMALL_31 = {  # mistralai/Mistral-Small-3.1-24B-Instruct-2503 (24 B with its vision)
    "architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
    "text_config": {"head_dim": 128, "hidden_size": 5120, "intermediate_size": 32768,
                    "max_position_embeddings": 131072, "model_type": "mistral",
                    "num_attention_heads": 32, "num_hidden_layers": 40,
                    "num_key_value_heads": 8, "sliding_window": None, "vocab_size": 131072}}
KIMI_K25 = {  # moonshotai/Kimi-K2.5: "1T total parameters, 32B activated"
    "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
    "tie_word_embeddings": False,
    "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
                    "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 64,
                    "num_key_value_heads": 64, "intermediate_size": 18432,
                    "vocab_size": 163840, "max_position_embeddings": 262144,
                    "n_routed_experts": 384, "num_experts_per_tok": 8,
                    "moe_intermediate_size": 2048, "n_shared_experts": 1,
                    "first_k_dense_replace": 1, "moe_layer_freq": 1, "q_lora_rank": 1536,
                    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "tie_word_embeddings": False,
                    "rope_scaling": {"factor": 64.0, "original_max_position_embeddings": 4096,
                                     "type": "yarn"}}}


def read(tmp_path, table, name="config.json"):
    return model_architecture({"config": write_config(tmp_path, table, name)})


@pytest.mark.parametrize("table, total, active", [
    (QWEN15_MOE, 14.3e9, 2.7e9),
    (GLM45_AIR, 106e9, None),  # its 12 B active leave the 1.2 B of embeddings out
    (MINIMAX_M25, 229e9, None),  # and its 10 B
    (KIMI_K25, 1.0e12, 32e9),
    (MISTRAL_SMALL_31, 24e9, None),
])
def test_a_published_config_reads_as_its_model_card_counts_it(tmp_path, table, total, active):
    arch = read(tmp_path, table)
    assert arch.parameters() == pytest.approx(total, rel=0.03)
    if active is not None:
        assert arch.active_parameters() == pytest.approx(active, rel=0.03)


def test_each_mixture_of_experts_class_places_its_dense_and_shared_experts(tmp_path):
    qwen, glm, minimax = (read(tmp_path, t, f"{i}.json")
                          for i, t in enumerate((QWEN15_MOE, GLM45_AIR, MINIMAX_M25)))
    # Qwen2-MoE: every layer routed, one shared expert as wide as its own key says
    assert (qwen.n_dense_layers, qwen.n_shared_experts, qwen.shared_d_ff, qwen.qkv_bias) == \
        (0, 1, 5632, True)
    # GLM-4.5: the first first_k_dense_replace layers dense, q/k/v biased
    assert (glm.n_dense_layers, glm.n_shared_experts, glm.moe_d_ff, glm.qkv_bias) == \
        (1, 1, 1408, True)
    # MiniMax-M2: every layer routed experts of intermediate_size, none shared
    assert (minimax.n_dense_layers, minimax.n_shared_experts, minimax.moe_d_ff,
            minimax.n_experts, minimax.experts_per_token, minimax.qkv_bias) == \
        (0, 0, 1536, 256, 8, False)
    glm0 = read(tmp_path, GLM45_AIR | {"first_k_dense_replace": 0}, "glm0.json")
    assert glm0.n_dense_layers == 0
    silent = read(tmp_path, {k: v for k, v in GLM45_AIR.items()
                             if k not in ("first_k_dense_replace", "n_shared_experts")},
                  "silent.json")
    assert (silent.n_dense_layers, silent.n_shared_experts) == (1, 1)  # Glm4MoeConfig's
    # vLLM builds MiniMax-M2 no shared expert whatever shared_intermediate_size says, and
    # biases q, k and v where attention_bias says so
    other = read(tmp_path, MINIMAX_M25 | {"shared_intermediate_size": 768,
                                          "attention_bias": True}, "other.json")
    assert (other.n_shared_experts, other.qkv_bias) == (0, True)
    # Qwen2MoeConfig's shared expert where the file is silent: 5,632 wide
    assert read(tmp_path, {k: v for k, v in QWEN15_MOE.items()
                           if k != "shared_expert_intermediate_size"},
                "qwen.json").shared_d_ff == 5632


def test_gemma3s_multimodal_file_reads_its_text_model_with_transformers_defaults(tmp_path):
    """gemma-3-27b-it's text_config has no vocab_size or max_position_embeddings: transformers'
    Gemma3TextConfig gives 262,208 and 131,072 (its rotary scaling already in them, as vLLM
    leaves Gemma 3's); five of every six layers slide over 1,024 tokens; the embeddings tie."""
    arch = read(tmp_path, GEMMA3_27B)
    assert (arch.vocab_size, arch.max_seq_len, arch.n_layers, arch.sliding_window,
            arch.sliding_layers, arch.tie_embeddings, arch.head_dim) == \
        (262208, 131072, 62, 1024, 52, True, 128)
    assert arch.parameters() == pytest.approx(27.0e9, rel=0.01)  # its 27 B less SigLIP's 0.4
    # and the text model's own class, where its file leaves the same keys out
    text = GEMMA3_27B["text_config"] | {"architectures": ["Gemma3ForCausalLM"]}
    assert {k: getattr(read(tmp_path, text, "text.json"), k) for k in MODEL_KEYS} == \
        {k: getattr(arch, k) for k in MODEL_KEYS}


def test_a_wrapper_reads_as_its_text_model_and_says_its_vision_tower_is_left_out(tmp_path):
    path = write_config(tmp_path, QWEN3_VL_8B)
    with collected() as notes:
        arch = model_architecture({"config": path})
    assert notes == [f"note: model.config: {path}: Qwen3VLForConditionalGeneration is costed "
                     f"as its text model (text_config, a Qwen3ForCausalLM); its vision tower "
                     f"is neither costed nor counted in the GPU's memory"]
    qwen3_8b = model_architecture({"name": "Qwen/Qwen3-8B"})
    same = [k for k in MODEL_KEYS if k != "max_seq_len"]
    assert {k: getattr(arch, k) for k in same} == {k: getattr(qwen3_8b, k) for k in same}
    assert arch.max_seq_len == 262144 and not arch.tie_embeddings
    # the wrapper's tie_word_embeddings where the text model leaves it out (Qwen3-VL-2B's),
    # the text model's own where it has one
    assert read(tmp_path, QWEN3_VL_8B | {"tie_word_embeddings": True}, "tied.json") \
        .tie_embeddings
    own = QWEN3_VL_8B["text_config"] | {"tie_word_embeddings": False}
    assert not read(tmp_path, QWEN3_VL_8B | {"tie_word_embeddings": True, "text_config": own},
                    "own.json").tie_embeddings
    # a text_config that names no model_type is its wrapper's text model
    unnamed = {k: v for k, v in QWEN3_VL_8B["text_config"].items() if k != "model_type"}
    assert read(tmp_path, QWEN3_VL_8B | {"text_config": unnamed}, "unnamed.json") \
        .max_seq_len == 262144
    # Qwen3-VL's mixture of experts reads as Qwen3-MoE (Qwen3-VL-30B-A3B's text_config)
    moe = read(tmp_path, {"architectures": ["Qwen3VLMoeForConditionalGeneration"],
                          "text_config": {**QWEN3_VL_8B["text_config"],
                                          "model_type": "qwen3_vl_moe_text",
                                          "hidden_size": 2048, "intermediate_size": 6144,
                                          "num_hidden_layers": 48, "num_key_value_heads": 4,
                                          "num_experts": 128, "num_experts_per_tok": 8,
                                          "moe_intermediate_size": 768,
                                          "decoder_sparse_step": 1}}, "vlmoe.json")
    assert (moe.n_experts, moe.n_dense_layers, moe.moe_d_ff) == (128, 0, 768)
    mistral = read(tmp_path, MISTRAL_SMALL_31, "mistral.json")
    assert (mistral.sliding_window, mistral.tie_embeddings, mistral.d_ff) == (0, False, 32768)
    kimi = read(tmp_path, KIMI_K25, "kimi.json")
    deepseek = read(tmp_path, CONFIGS["deepseek-ai/DeepSeek-V3"], "deepseek.json")
    assert (kimi.kv_lora_rank, kimi.n_experts, kimi.max_seq_len) == (512, 384, 262144)
    assert kimi.kv_bytes_per_token(8, 2) == deepseek.kv_bytes_per_token(8, 2)


def test_a_wrapper_model_runs_with_a_key_beside_it(tmp_path):
    write_config(tmp_path, KIMI_K25 | {"_name_or_path": "moonshotai/Kimi-K2.5"}, "kimi.json")
    [(spec, recorder)] = sim.simulate(scenarios.load(scenario(
        tmp_path, model='config = "kimi.json"', gpu="h200", tp=8, hardware='dtype = "fp8"',
        max_seq_len=8192, requests=10)))
    assert spec.config.model.name == "moonshotai/Kimi-K2.5"
    assert spec.config.model.max_seq_len == 8192 and spec.config.model.n_experts == 384
    assert len(recorder.request_columns()["finish_s"]) == 10


@pytest.mark.parametrize("table, message", [
    ({"architectures": ["Gemma3ForConditionalGeneration"]},
     'a Gemma3ForConditionalGeneration config.json holds its text model\'s keys in a '
     '"text_config" object; this one has none'),
    (QWEN3_VL_8B | {"text_config": QWEN3_VL_8B["text_config"] | {"model_type": "qwen3_5_text"}},
     "text_config.model_type 'qwen3_5_text' is not a text model servesim reads in a "
     "Qwen3VLForConditionalGeneration (one of qwen3_vl_text)"),
    (QWEN3_VL_8B | {"text_config": QWEN3_VL_8B["text_config"] | {"model_type": ["x"]}},
     "text_config.model_type ['x'] is not a text model"),
    (QWEN3_VL_8B | {"text_config": {"model_type": "qwen3_vl_text"}},
     "text_config: missing 'num_attention_heads' (a Qwen3ForCausalLM config.json has it)"),
    (KIMI_K25 | {"text_config": KIMI_K25["text_config"] | {"num_experts_per_tok": 400}},
     "text_config: num_experts_per_tok (400) must be at most n_routed_experts (384)"),
    (MINIMAX_M25 | {"attn_type_list": [0, 1] * 31},
     "attn_type_list marks 31 of its layers 0 (linear attention), which servesim does not "
     "cost"),
    (MINIMAX_M25 | {"attn_type_list": [1] * 61 + [2]},
     "attn_type_list holds 2; its entries must be 0 (linear) or 1 (softmax)"),
    (MINIMAX_M25 | {"attn_type_list": [True] * 62},
     "attn_type_list holds True; its entries must be 0 (linear) or 1 (softmax)"),
    (MINIMAX_M25 | {"attn_type_list": [1, 1, 1]},
     "attn_type_list has 3 entries; it needs one per layer (num_hidden_layers is 62)"),
    (QWEN3_VL_8B | {"tie_word_embeddings": "yes"},
     "bad.json: tie_word_embeddings must be true or false, got 'yes'"),
    (GLM45_AIR | {"first_k_dense_replace": 46},
     "first_k_dense_replace and num_hidden_layers leave no mixture-of-experts layer of the 46"),
])
def test_a_bad_file_of_these_classes_is_one_line(tmp_path, table, message):
    write_config(tmp_path, table, "bad.json")
    text = refusal(tmp_path, model='config = "bad.json"')
    assert "model.config: " in text and message in text and "Traceback" not in text


def test_layer_op_times_takes_a_config_jsons_path_or_its_folder(tmp_path):
    """`sim.layer_op_times` reads a model from the path of its config.json, or of the folder
    holding one, as `model.config` does; a catalog id is read first."""
    path = write_config(tmp_path, MINIMAX_M25)
    by_path = sim.layer_op_times(path, "h100-sxm", 4, 64, kernels="roofline")
    assert by_path == sim.layer_op_times({"config": path}, "h100-sxm", 4, 64,
                                         kernels="roofline")
    assert sim.layer_op_times(tmp_path, "h100-sxm", 4, 64, kernels="roofline") == by_path
    assert "moe_up_proj" in by_path and "mlp_up_proj" not in by_path  # every layer experts
    with pytest.raises(ValueError, match="model.name: unknown model 'missing.json'"):
        sim.layer_op_times("missing.json", "h100-sxm", 4, 64)


def test_a_wrappers_quantization_config_in_its_text_config_is_read(tmp_path):
    """Kimi-K2.5's config.json keeps its quantization_config in text_config: compared with the
    scenario's dtype as a flat file's is."""
    from sim.costs.hardware.checkpoint import checkpoint_dtype
    quantized = KIMI_K25["text_config"] | {"quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 128]}}
    path = write_config(tmp_path, KIMI_K25 | {"text_config": quantized})
    assert checkpoint_dtype(path) == ("fp8", "block")
    # the wrapper's own, where it has one, as vLLM reads it
    both = write_config(tmp_path, KIMI_K25 | {"text_config": quantized, "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "NVFP4"}}, "both.json")
    assert checkpoint_dtype(both) == ("nvfp4", "static")


def test_minimax_m2s_experts_are_costed_from_the_tables_measured_for_them(tmp_path):
    """aiconfigurator-core measured MiniMax-M2.5's fused MoE kernel (256 experts of 1,536,
    8 a token) in block-scaled fp8 on the H200: read from its config.json, the model's
    experts are costed from those points, not the roofline."""
    pytest.importorskip("aiconfigurator_core")
    from sim.costs.hardware.cost import HardwareCost
    write_config(tmp_path, MINIMAX_M25, "minimax.json")
    setup = setup_of(tmp_path, model='config = "minimax.json"', gpu="h200", tp=4,
                     hardware='dtype = "fp8"\nactivation_scheme = "block"')
    sources = HardwareCost(setup).measured.sources()
    assert sources["moe_experts"] == sources["attn_pre_proj"] == "measured"


def test_every_config_json_aiconfigurator_ships_reads_or_is_refused_in_one_line():
    """The model configs aiconfigurator-core ships beside its tables (current releases): each
    reads, or is refused in one line naming its class; those of the classes servesim reads
    (MiniMax-M2.5, Qwen3-VL, Kimi K2.5 among them) all read."""
    package = pytest.importorskip("aiconfigurator_core")
    from pathlib import Path

    from sim.costs.hardware.hf_classes import READERS, WRAPPERS
    files = sorted((Path(package.__file__).parent / "model_configs").glob("*_config.json"))
    read, refused = set(), set()
    for path in files:
        if path.name.endswith("quant_config.json"):
            continue
        name = json.loads(path.read_text())["architectures"][0]
        try:
            model_architecture({"config": str(path)})
            read.add(name)
        except ValueError as exc:
            assert "\n" not in str(exc) and f"architecture {name!r} is not supported" in str(exc)
            refused.add(name)
    assert not refused & {*READERS, *WRAPPERS}  # no file of a class read is refused
    assert {"MiniMaxM2ForCausalLM", "Qwen3VLForConditionalGeneration",
            "Qwen3VLMoeForConditionalGeneration", "KimiK25ForConditionalGeneration"} <= read
