"""DeepSeek's sparse attention (DeepSeek-V3.2, GLM-5): read from a config.json, a query attends
to at most `index_topk` keys (its latent attention costed as over that many), its indexer scores
every key (by the roofline), and the KV cache holds the indexer's fp8 key beside the latent."""

from __future__ import annotations

import pytest

import scenarios
import sim
from helpers.hf_configs import CONFIGS, write_config
from helpers.runs import records
from helpers.model_scenario import refusal, scenario
from sim.costs.hardware import hardware_setup, model_architecture
from sim.costs.hardware.attention import StepAttention
from sim.costs.hardware.cost import HardwareCost
from sim.costs.shape import StepShape
from sim.runner import run_config

# DeepSeek-V3.2's published config.json: V3's, with its indexer's keys
V32 = CONFIGS["deepseek-ai/DeepSeek-V3"] | {
    "architectures": ["DeepseekV32ForCausalLM"], "index_topk": 2048, "index_n_heads": 64,
    "index_head_dim": 128}
GLM5 = {  # zai-org/GLM-5's
    "architectures": ["GlmMoeDsaForCausalLM"], "num_hidden_layers": 78, "hidden_size": 6144,
    "num_attention_heads": 64, "num_key_value_heads": 64, "head_dim": 64,
    "intermediate_size": 12288, "vocab_size": 154880, "max_position_embeddings": 202752,
    "tie_word_embeddings": False, "n_routed_experts": 256, "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048, "n_shared_experts": 1, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64, "v_head_dim": 256, "index_topk": 2048, "index_n_heads": 32,
    "index_head_dim": 128}


def cost_of(tmp_path, table, name, framework="vllm", kernels="measured"):
    path = write_config(tmp_path, table, name)
    return HardwareCost(hardware_setup(scenarios.load(scenario(
        tmp_path, model=f'config = "{path}"', gpu="h200", tp=8,
        hardware=f'dtype = "fp8"\nactivation_scheme = "block"\nframework = "{framework}"\n'
                 f'kernels = "{kernels}"', max_seq_len=131072)).base))


def test_deepseek_v32_and_glm5_read_with_their_indexers(tmp_path):
    """V3.2 is V3 and an indexer of 64 heads of 128 a layer (0.85 B parameters: 671.9 B, its
    card's 685 B less the 14 B multi-token-prediction module); its cache holds, a token a layer,
    the latent (576 values; in fp8 DeepSeek's 656-byte layout) and the indexer's fp8 key with
    its scale (132 bytes)."""
    v32 = model_architecture({"config": write_config(tmp_path, V32)})
    assert (v32.index_topk, v32.index_n_heads, v32.index_head_dim) == (2048, 64, 128)
    assert v32.parameters() == pytest.approx(671.9e9, rel=0.001)
    v3 = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    indexer = 1536 * 64 * 128 + 7168 * (128 + 64) + 2 * 128
    assert v32.parameters() - v3.parameters() == 61 * indexer
    # whole on every GPU, beside the GPU's share of the rest
    assert v32.weight_bytes_per_gpu(8, 1) - v3.weight_bytes_per_gpu(8, 1) == 61 * indexer
    assert v32.kv_bytes_per_token(8, 2) == 61 * (576 * 2 + 132)
    assert v32.kv_bytes_per_token(8, 1) == 61 * (656 + 132)
    glm = model_architecture({"config": write_config(tmp_path, GLM5, "glm5.json")})
    assert (glm.index_n_heads, glm.n_dense_layers, glm.v_head_dim) == (32, 3, 256)
    assert glm.parameters() == pytest.approx(744e9, rel=0.01)  # "744B"


def test_vllms_measured_sparse_layer_costs_its_steps_indexer_and_all(tmp_path):
    """Under vLLM on the H200 the package measured DeepSeek-V3.2's sparse layer whole
    (h200_sxm/sparse_attention/vllm/0.24.0, 16 heads a GPU, a bf16 cache, block-scaled GEMMs):
    32 sequences of 2,048 and 131,072 keys take 0.2407 and 0.4062 ms a layer, a fresh prompt of
    8,192 tokens 6.750 ms; its indexer and projections are within. A chunk after cached keys
    adds its indexer's pairs with them (the roofline's), which the fresh prompts lack."""
    cost = cost_of(tmp_path, V32, "v32.json")
    latent, indexer = cost.attention.decode_groups
    assert cost.measured.sparse_block and indexer.indexer and latent.sparse == 2048
    assert {"indexer_q_proj", "indexer_k_proj", "mla_down_proj"} <= set(cost.measured.block_ops)
    assert cost.attention.plus_decode(0.0, 32, 32 * 2048) == pytest.approx(61 * 0.2407e-3,
                                                                           rel=1e-3)
    assert cost.attention.plus_decode(0.0, 32, 32 * 131072) == pytest.approx(61 * 0.4062e-3,
                                                                             rel=1e-3)
    fresh = StepShape(prefill_tokens=8192, prefill_attention=8192 * 8192, prefill_seqs=1,
                      prefill_square=8192 * 8192)
    assert cost.attention.plus_prefill(0.0, fresh) == pytest.approx(61 * 6.750e-3, rel=1e-3)
    after = StepShape(prefill_tokens=8192, prefill_attention=8192 * (100_000 + 8192),
                      prefill_seqs=1, prefill_context=108_192, prefill_square=8192 * 8192)
    extra = cost.attention.plus_prefill(0.0, after) - cost.attention.plus_prefill(0.0, fresh)
    pairs = 8192 * 100_000
    assert indexer.flop_s * pairs / cost.compute_at(8192) <= extra <= \
        indexer.launch_s + indexer.flop_s * pairs / cost.compute_at(8192) \
        + indexer.query_s * 8192 + indexer.key_s * 108_192
    assert extra == pytest.approx(indexer.launch_s + max(
        indexer.flop_s * pairs / cost.compute_at(8192),
        indexer.query_s * 8192 + indexer.key_s * 108_192), rel=1e-9)
    assert cost.measured.sources()["indexer_q_proj"] == "measured"
    assert "indexer_q_proj" not in cost.measured._gemm_dtype  # within the block alone
    # GLM-5's layer (8 heads a GPU) and TensorRT-LLM's are measured too
    assert cost_of(tmp_path, GLM5, "glm5.json").measured.sparse_block
    trtllm = cost_of(tmp_path, V32, "t.json", "trtllm")
    assert trtllm.measured.sparse_block and trtllm.attention.plus_prefill(0.0, fresh) == \
        pytest.approx(61 * 13.59e-3, rel=1e-3)


def test_unmeasured_a_query_attends_to_its_topk_keys_and_the_indexer_to_every_key(tmp_path):
    """Where the sparse layer is not measured (SGLang's tables mix its kernels by length), its
    latent attention is the dense block's over at most 2,048 keys a query, and its indexer
    (every key) the roofline's, growing with every key."""
    v32 = cost_of(tmp_path, V32, "v32.json", "sglang")
    v3 = cost_of(tmp_path, CONFIGS["deepseek-ai/DeepSeek-V3"], "v3.json", "sglang")
    assert not v32.measured.sparse_block
    latent, indexer = v32.attention.decode_groups
    dense = v3.attention.decode_groups[0]
    for decodes, keys in ((1, 1000), (32, 2048)):
        assert v32.attention._decode(latent, decodes, decodes * keys) == \
            v3.attention._decode(dense, decodes, decodes * keys)
    for keys in (4096, 65536, 131072):
        assert v32.attention._decode(latent, 32, 32 * keys) == \
            v32.attention._decode(latent, 32, 32 * 2048)
    grows = [v32.attention._decode(indexer, 32, 32 * keys) for keys in (8192, 65536, 131072)]
    assert 0 < grows[0] < grows[1] < grows[2]
    # its decode: every key's logits and fp8 key read, nothing else (no block projections)
    assert v32.attention._decode(indexer, 32, 32 * 8192) == indexer.launch_s + max(
        indexer.flop_s * 32 * 8192 / v32.attention.top_compute,
        indexer.query_s * 32 + indexer.key_s * 32 * 8192)
    # its fp8 key a key read, 132 bytes, and fp8 logits at the GPU's fp8 peak
    assert indexer.key_s == pytest.approx(61 * 132 / (v32.bandwidth * v32.eff.memory))
    assert indexer.flop_s == pytest.approx(61 * 2 * 64 * 128 / (v32.gpu.peak_flops("fp8")))
    assert v32.measured.sources()["sparse_indexer"] == "roofline"
    # prefill: a chunk of 8,192 after 100,000 cached does 8,192 x 2,048 pairs of latent
    # attention, where V3 does 8,192 x 104,096 on average; a fresh one of 2,048 as V3 does
    n, c = 8192, 100_000
    long = StepShape(prefill_tokens=n, prefill_attention=n * (c + n), prefill_seqs=1,
                     prefill_context=c + n, prefill_square=n * n)
    short = StepShape(prefill_tokens=2048, prefill_attention=2048 * 2048, prefill_seqs=1,
                      prefill_square=2048 * 2048)
    latent_only = StepAttention(tuple(g for g in v32.attention.prefill_groups
                                      if not g.indexer), (), v32.measured, v32,
                                v32.attention.top_compute, True, "v32")
    assert latent_only.plus_prefill(0.0, short) == v3.attention.plus_prefill(0.0, short)
    assert latent_only.plus_prefill(0.0, long) < 0.2 * v3.attention.plus_prefill(0.0, long)
    # the indexer's prefill: its causal pairs' logits and every key read, nothing else
    indexer_only = StepAttention((v32.attention.prefill_groups[-1],), (), v32.measured, v32,
                                 v32.attention.top_compute, True, "v32")
    pairs, compute = 2048 * 2049 / 2, v32.compute_at(2048)
    assert indexer_only.plus_prefill(0.0, short) == indexer.launch_s + max(
        indexer.flop_s * pairs / compute, indexer.query_s * 2048 + indexer.key_s * 2048)
    # by the roofline, one token after 100,000 cached reads its 2,048 keys, not 100,001
    roof = cost_of(tmp_path, V32, "roof.json", kernels="roofline")
    one = StepShape(prefill_tokens=1, prefill_attention=100_001, prefill_seqs=1,
                    prefill_context=100_001, prefill_square=1)
    group = roof.attention.prefill_groups[0]
    alone = StepAttention((group,), (), None, roof, roof.attention.top_compute, True, "v32")
    assert alone.plus_prefill(0.0, one) == group.launch_s + max(
        group.flop_s * 2048 / roof.compute_at(1), group.query_s + group.key_s * 2048)


@pytest.mark.parametrize("framework, kernels", [("vllm", "measured"), ("sglang", "measured"),
                                               ("vllm", "roofline")])
def test_fast_forward_is_step_by_step_for_a_sparse_model(tmp_path, framework, kernels):
    """Decodes past 2,048 keys (prompts of 2,000 to 4,000 tokens) run step by step and in runs
    alike."""
    write_config(tmp_path, V32, "v32.json")
    path = scenario(tmp_path, model='config = "v32.json"', gpu="h200", tp=8,
                    hardware=f'dtype = "fp8"\nframework = "{framework}"\n'
                             f'kernels = "{kernels}"', max_seq_len=8192, requests=12)
    path.write_text(path.read_text().replace("low = 100, high = 1500", "low = 2000, high = 4000"))
    config = scenarios.load(path).base
    fast, slow = run_config(config), run_config(config, fast_forward=False)
    assert records(fast) == records(slow)


def test_a_sparse_model_runs_and_its_report_names_its_attention(tmp_path):
    write_config(tmp_path, V32 | {"_name_or_path": "deepseek-ai/DeepSeek-V3.2"}, "v32.json")
    [(spec, recorder)] = sim.simulate(scenarios.load(scenario(
        tmp_path, model='config = "v32.json"', gpu="h200", tp=8, hardware='dtype = "fp8"',
        max_seq_len=8192, requests=10)))
    assert spec.config.model.index_topk == 2048
    assert len(recorder.request_columns()["finish_s"]) == 10
    from reports.section_text import model_text
    assert "sparse attention (2048 keys a query)" in model_text(spec.config.model)


@pytest.mark.parametrize("model, message", [
    ('name = "meta-llama/Llama-3.1-8B"\nindex_topk = 2048',
     "model.index_topk (2048): sparse attention is DeepSeek's, over latent attention"),
    ('name = "deepseek-ai/DeepSeek-V3"\nindex_n_heads = 64',
     "model.index_n_heads (64) is a sparse attention key and model.index_topk is 0"),
    ('name = "deepseek-ai/DeepSeek-V3"\nindex_topk = 2048\nindex_n_heads = 64',
     "model.index_head_dim (of the indexer) must be a positive integer with model.index_topk"),
])
def test_a_sparse_attention_key_without_its_others_is_one_line(tmp_path, model, message):
    assert message in refusal(tmp_path, model=model)
