"""The measured kernel tables (servesim[gpu]): a measured point is returned as measured, points
between are interpolated as power laws, nothing is extrapolated past 2x the measured range, a
run of steps is costed as its steps one by one, and what the tables lack falls back to the
roofline with one note; the scenario keys are refused in one line when wrong. fp8 GEMMs by
activation scheme: test_fp8_gemms.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core")

from helpers.configs import resolved  # noqa: E402
from helpers.hardware import kernel_scenario  # noqa: E402
from scenarios import ScenarioError  # noqa: E402
from sim.costs.hardware import layer_op_times  # noqa: E402
from sim.costs.hardware import kernels as K  # noqa: E402
from sim.costs.hardware.interpolation import Curve  # noqa: E402
from sim.costs.hardware.kernels import KernelTables, TablesMiss  # noqa: E402
from sim.build import build_cost  # noqa: E402
from sim.runner import run_config  # noqa: E402

H200 = KernelTables("h200")


def test_a_measured_point_is_the_tables_own_value():
    # the rows of h200_sxm/.../vllm/0.24.0: GEMM 256 x 4096 x 4096 bf16, decode attention of 64
    # sequences of 1,024 keys (32 heads, 8 KV heads, head dim 128), prefill of 4,096 tokens,
    # the 8-GPU graph all-reduce of 256 x 4096 elements
    assert H200.gemm(256, 4096, 4096, "bf16") == pytest.approx(0.017475555340449016e-3, rel=1e-12)
    assert H200.decode_grid(32, 8, 128, "bf16").at_one(64, 1024) == \
        pytest.approx(0.08070399860541026e-3, rel=1e-12)
    assert H200.prefill_grid(32, 8, 128, "bf16").at_one(1, 4096) == \
        pytest.approx(0.267685333887736e-3, rel=1e-12)
    assert float(H200.all_reduce(256, 4096, 8)) == pytest.approx(0.018106e-3, rel=1e-3)
    assert float(H200.moe(256, 2048, 768, 8, 128, 1, 1, "bf16", "power_law_1.01")) == \
        pytest.approx(0.35790719985961916e-3, rel=1e-12)


def test_between_points_a_power_law_and_beyond_twice_the_range_nothing():
    curve = Curve([10.0, 100.0, 1000.0], [1.0, 4.0, 64.0])  # slopes 0.602 and 1.204 per decade
    at = lambda x: math.exp(curve.log_at_one(math.log(x)))
    assert at(100.0) == pytest.approx(4.0) and at(math.sqrt(10 * 100)) == pytest.approx(2.0)
    assert at(2000.0) == pytest.approx(64.0 * 2 ** (math.log(16) / math.log(10)))  # extended
    assert math.isnan(curve.log_at_one(math.log(2001.0)))  # past 2x: not extrapolated
    assert math.isnan(curve.log_at_one(math.log(4.9)))
    values = np.exp(curve.log_at(np.log([10.0, 31.6227766, 2001.0])))
    assert values[0] == pytest.approx(1.0) and math.isnan(values[2])


def test_a_point_measured_twice_is_their_geometric_mean_and_the_ends_still_extend():
    # vLLM 0.14's A100 prefill-attention table and SGLang's MoE tables on the GB200, B300 and
    # GB300 hold some points twice: a segment between them divided by zero
    curve = Curve([10.0, 100.0, 100.0, 1000.0, 1000.0], [1.0, 2.0, 8.0, 64.0, 64.0])
    at = lambda x: math.exp(curve.log_at_one(math.log(x)))
    assert at(100.0) == pytest.approx(4.0) and at(1500.0) == pytest.approx(
        float(np.exp(curve.log_at(math.log(1500.0)))))
    assert math.isfinite(at(1500.0)) and math.isfinite(at(6.0))
    a100 = KernelTables("a100-80gb-sxm").prefill_grid(8, 8, 128, "bf16")  # its twice-measured
    assert all(0 < a100.at_one(batch, length) < math.inf for batch in (1, 4)
               for length in (16, 3000))
    assert not any(math.isinf(a100.at_one(batch, 40_000)) for batch in (1, 4, 64))  # NaN past
    b300 = KernelTables("b300", "sglang")
    experts = b300.moe([16384, 24576, 32768], 7168, 2048, 8, 256, 1, 8, "fp8_block",
                      "power_law_1.01")
    assert experts is not None and np.all(np.isfinite(experts) & (experts > 0))


def test_a_gemm_between_measured_shapes_lies_between_its_neighbours():
    low, high = H200.gemm(512, 16384, 4096, "bf16"), H200.gemm(512, 51200, 4096, "bf16")
    assert low < H200.gemm(512, 28672, 4096, "bf16") < high
    assert H200.gemm(512, 300_000, 4096, "bf16") is None  # n past 2x the largest measured


def test_a_run_of_decode_steps_costs_what_its_steps_do_one_by_one_bit_for_bit(tmp_path):
    """Arrays of decode-only steps (a fast-forwarded run) against the same steps alone, some
    within the tables' reach and some past it (5,000 sequences: the roofline's there)."""
    from sim.costs.shape import StepShape

    cost = build_cost(kernel_scenario(tmp_path, "h200").base)
    decodes = np.array([1, 3, 64, 100, 700, 5000])
    context = decodes * np.array([17, 2000, 1024, 1500, 333, 50])
    shape = lambda d, c: StepShape(decode_seqs=d, decode_context=c, sampled_seqs=d, decoding=1,
                                   decode_span=c, decode_gathered=0)
    together = cost.step_time(shape(decodes, context))
    one_by_one = [cost.step_time(shape(int(d), int(c))) for d, c in zip(decodes, context)]
    assert together.tolist() == one_by_one


def test_framework_and_version_choose_the_tables_and_a_wrong_one_is_one_line():
    assert KernelTables("h100-sxm", "trtllm").version == "1.3.0rc20"
    assert KernelTables("a100-80gb-sxm").version == "0.14.0"
    with pytest.raises(TablesMiss, match="exist for version 0.24.0, not '0.9'"):
        KernelTables("h100-sxm", "vllm", "0.9")
    with pytest.raises(TablesMiss, match="no measured kernel tables for GPU 'a40'"):
        KernelTables("a40")
    assert K.version_key("1.3.0rc20") < K.version_key("1.3.0rc23") < K.version_key("1.3.0")
    assert K.version_key("0.5.6.post2") < K.version_key("0.5.10")


@pytest.mark.parametrize("extra, message", [
    ('framework = "vlm"', "hardware.framework: must be one of vllm, sglang, trtllm, got 'vlm' "
                          "(did you mean 'vllm'?)"),
    ('kernels = "measure"', "hardware.kernels: must be one of measured, roofline, got "
                            "'measure' (did you mean 'measured'?)"),
])
def test_a_bad_kernel_key_is_one_line_naming_the_nearest_value(tmp_path, extra, message):
    with pytest.raises(ScenarioError) as info:
        kernel_scenario(tmp_path, extra=extra)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_version_or_gpu_without_tables_is_refused_when_measured_is_asked_for(tmp_path):
    from sim.build import hardware_of

    with pytest.raises(ValueError, match="^hardware.framework_version: vllm tables for "
                                         "h100-sxm exist for version 0.24.0, not '0.1'$"):
        hardware_of(kernel_scenario(tmp_path, extra='framework_version = "0.1"').base)
    with pytest.raises(ValueError, match="hardware.kernels: no measured kernel tables for GPU "
                                         "'a40'"):
        hardware_of(kernel_scenario(tmp_path, "a40", 'kernels = "measured"').base)


def test_a_gpu_without_tables_is_the_roofline_and_says_so_once(tmp_path, capsys):
    from sim import notes

    notes.forget()
    config = kernel_scenario(tmp_path, "a40").base
    run_config(config)
    run_config(config)
    err = capsys.readouterr().err
    assert err.count("no measured kernel tables for GPU 'a40'") == 1
    assert "roofline" in build_cost(config).source


def test_measured_kernels_change_the_steps_and_roofline_restores_them(tmp_path):
    measured = build_cost(kernel_scenario(tmp_path).base)
    roofline = build_cost(kernel_scenario(tmp_path, extra='kernels = "roofline"').base)
    assert "vllm 0.24.0 kernels measured on h100-sxm" in measured.source
    sources = measured.setup.kernels.sources()
    assert set(sources.values()) == {"measured"} and "decode_attention" in sources
    assert roofline.setup.kernels is None
    fast = layer_op_times("meta-llama/Llama-3.1-8B", "h100-sxm", 1, 512)["mlp_up_proj"]
    slow = layer_op_times("meta-llama/Llama-3.1-8B", "h100-sxm", 1, 512,
                          kernels="roofline")["mlp_up_proj"]
    assert fast < 0.8 * slow  # measured H100 GEMMs run well ahead of the 2023 roofline


def test_a_measured_run_fast_forwarded_is_the_run_step_by_step(tmp_path):
    from helpers.runs import records

    config = kernel_scenario(tmp_path, "h200").base
    assert records(run_config(config)) == records(run_config(config, fast_forward=False))


def test_the_report_names_the_kernels_and_which_operators_were_measured(tmp_path):
    from reports.describe import config_rows
    from sim.build import resolved_spec

    spec = resolved_spec(kernel_scenario(tmp_path).runs()[0])
    rows = config_rows(spec.config)
    assert "vllm 0.24.0 kernels measured on h100-sxm: `attn_pre_proj`" in rows["kernels"]
    assert "the other elementwise kernels (norms, rotary embedding, activation, residual adds, " \
        "embedding) by the roofline" in rows["kernels"]
    assert "measured kernels where the tables have them" in rows["step costs"]


def test_without_the_tables_the_unset_default_is_the_roofline(tmp_path, monkeypatch):
    monkeypatch.setattr(K, "data_root", lambda: None)
    config = resolved({"model": {"name": "meta-llama/Llama-3.1-8B", "max_seq_len": 4096},
                       "hardware": {"gpu": "h100-sxm"}, "cost": {"model": "hardware"},
                       "workload": {"num_requests": 2, "arrival": {"process": "burst"},
                                    "prompt_tokens": {"dist": "fixed", "value": 8},
                                    "output_tokens": {"dist": "fixed", "value": 2}}})
    assert build_cost(config).setup.kernels is None


def test_a_gemm_wider_than_any_measured_is_the_widest_scaled_in_proportion():
    # Llama-3's LM head at TP 1 (n = 128,256; the widest measured n is 65,536): up to 2x
    # wider, the widest measured times the ratio, as its work and weights grow (a power law
    # through n = 51,200 and 65,536, far past them, swung with their noise: on the B200 it
    # fell from 2,048 rows to 4,096)
    b200 = KernelTables("b200")
    m = np.array([8.0, 16.0, 2048.0, 4096.0])
    wide = b200.gemm(m, 128256, 4096, "bf16")
    assert wide == pytest.approx(b200.gemm(m, 65536, 4096, "bf16") * 128256 / 65536, rel=1e-12)
    assert np.all(np.diff(wide) > 0)
    assert b200.gemm(m, 131073, 4096, "bf16") is None  # past 2x: the roofline's


def test_deepseeks_latent_attention_is_measured_as_one_block():
    from sim.costs.hardware import model_architecture
    from sim.costs.hardware.measured import EXPERT_OPS, MLA_BLOCK_OPS, MeasuredOps

    arch = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    ops = MeasuredOps(arch, 8, "fp8", "bf16", H200)
    assert ops.mla_block and ops.sources()["decode_attention"] == "measured"
    roofline = {op: np.ones(4) for op in (*MLA_BLOCK_OPS, *EXPERT_OPS, "mlp_up_proj")}
    times, _ = ops.layer_times(roofline, np.arange(4.0))
    assert set(times) == {"mlp_up_proj", "moe_experts"}  # the block: in its step time
    assert ops.distribution == "power_law_1.01"  # the package's skew for DeepSeek's experts
    # the vLLM 0.24 table's rows: 64 sequences of 2,048 keys; one prompt of 4,096 tokens
    assert ops.decode_attention(0, 64, 64 * 2048) == pytest.approx(
        H200.mla_grid(arch.name, 16, "bf16", "fp8_block", True).at_one(64, 2048))
    assert 0 < ops.prefill_attention(0, 1, 4096 * 4097 / 2, 4096) < 1e-2


def test_without_a_measured_block_deepseeks_attention_is_the_latent_kernel_measured_alone():
    # SGLang's tables time no whole block of bf16 weights: its projections are GEMMs and its
    # attention the rows of h200_sxm/mla/sglang/0.5.14 (16 heads a GPU at TP 8, a bf16
    # cache): one prompt of 8,192 tokens, and 32 sequences of 2,048 keys
    from sim.costs.hardware import model_architecture
    from sim.costs.hardware.measured import MeasuredOps

    sglang = KernelTables("h200", "sglang")
    arch = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    ops = MeasuredOps(arch, 8, "bf16", "bf16", sglang)
    assert not ops.mla_block and ops.sources()["mla_kv_up_proj"] == "measured"
    assert ops.sources()["prefill_attention"] == ops.sources()["decode_attention"] == "measured"
    assert ops.prefill_attention(0, 1, 8192 * 8193 / 2, 8192) == \
        pytest.approx(1.9864112854003906e-3, rel=1e-12)
    assert ops.decode_attention(0, 32, 32 * 2048) == \
        pytest.approx(0.03768160045146942e-3, rel=1e-12)
    # so are TensorRT-LLM's on the A100 (1.0.0), whose tables time no block either
    a100 = MeasuredOps(arch, 8, "bf16", "bf16", KernelTables("a100-80gb-sxm", "trtllm"), ep=8)
    assert not a100.mla_block and a100.sources()["prefill_attention"] == "measured"
    other = model_architecture({"name": "deepseek-ai/DeepSeek-V3", "qk_rope_head_dim": 32})
    assert MeasuredOps(other, 8, "fp8", "bf16", sglang).sources()["prefill_attention"] == \
        "roofline"  # another head shape than the kernel measured


def test_sglangs_block_of_fp8_weights_is_measured_whole_but_its_down_projection():
    # SGLang's tables time DeepSeek-V3's whole block with block-scaled GEMMs
    # (h200_sxm/mla/sglang/0.5.10/wideep_*: FA3, its default on Hopper, and FlashInfer;
    # 16 heads a GPU), under SGLang's default bf16 cache whatever the rows say: one prompt of
    # 8,192 tokens; 32 sequences over 2,048 cached keys and their own under FA3. Its
    # collector stubbed the fused down projection, which stays a GEMM.
    from sim.costs.hardware import model_architecture
    from sim.costs.hardware.measured import MeasuredOps

    sglang = KernelTables("h200", "sglang")
    arch = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    rows = np.array([1.0, 64.0, 8192.0])
    for activations, kv_dtype in (("block", "bf16"), ("static", "bf16"), ("block", "fp8")):
        ops = MeasuredOps(arch, 8, "fp8", kv_dtype, sglang, activations=activations)
        assert ops.mla_block and ops.sources()["mla_kv_up_proj"] == "measured"
        assert ops.prefill_attention(0, 1, 8192 * 8193 / 2, 8192) == \
            pytest.approx(1.1843e-3, rel=1e-12)
        assert ops.decode_attention(0, 32, 32 * 2049) == pytest.approx(0.0665e-3, rel=1e-12)
        assert "mla_down_proj" not in ops.block_ops
        times, _ = ops.layer_times({"mla_down_proj": np.ones(3), "mla_q_up_proj": np.ones(3)},
                                   rows)
        assert set(times) == {"mla_down_proj"}  # q_b within the block, q_a + kv_a a GEMM
        gemm = ("fp8_block", "dynamic") if activations == "block" else ("fp8", activations)
        assert times["mla_down_proj"] == pytest.approx(
            sglang.gemm(rows, 1536 + 512 + 64, 7168, *gemm), rel=1e-12)
    assert not MeasuredOps(arch, 8, "bf16", "bf16", sglang).mla_block  # measured in fp8 alone
    # Blackwell's rows are its default kernel's, TensorRT-LLM's MLA (b200_sxm/.../0.5.10)
    b200 = KernelTables("b200", "sglang").mla_grid(arch.name, 16, "bf16", "fp8_block", False)
    assert b200.at_one(1, 8192) == pytest.approx(0.8157e-3, rel=1e-12)


def test_sglangs_prefill_attention_with_an_fp8_cache_is_its_default_kernels_in_fp8():
    # SGLang's default kernel (FA3 on the H200) with an fp8 cache computes in fp8 and was
    # measured only so; h200_sxm/attention/sglang/0.5.14: 8 heads, 1 KV head, one prompt of
    # 1,024 tokens
    grid = KernelTables("h200", "sglang").prefill_grid(8, 1, 128, "fp8")
    assert grid.at_one(1, 1024) == pytest.approx(0.02468799948692322e-3, rel=1e-12)


def test_a_config_json_of_deepseeks_shape_is_measured_as_deepseeks_block(tmp_path):
    # DeepSeek-R1's config.json names no model (no _name_or_path): its block is V3's all the same
    from helpers.hf_configs import CONFIGS, write_config

    from sim.costs.hardware import model_architecture
    from sim.costs.hardware.measured import MeasuredOps

    r1 = model_architecture({"config": write_config(tmp_path, CONFIGS["deepseek-ai/DeepSeek-V3"])})
    assert r1.name != "deepseek-ai/DeepSeek-V3"
    ops = MeasuredOps(r1, 8, "fp8", "bf16", H200)
    assert ops.mla_block and ops.sources()["decode_attention"] == "measured"
    wider = model_architecture({"config": write_config(tmp_path, CONFIGS[
        "deepseek-ai/DeepSeek-V3"] | {"kv_lora_rank": 1024}, "wider.json")})
    assert not MeasuredOps(wider, 8, "fp8", "bf16", H200).mla_block  # another shape
    renamed = model_architecture({"name": "deepseek-ai/DeepSeek-V3", "kv_lora_rank": 1024})
    assert not MeasuredOps(renamed, 8, "fp8", "bf16", H200).mla_block  # V3's name, not shape


def test_the_router_and_lm_head_are_bf16_and_a_window_caps_a_chunks_work():
    from sim.costs.hardware import model_architecture
    from sim.costs.hardware.measured import MeasuredOps
    from sim.costs.hardware.measured_attention import prompt_length

    ops = MeasuredOps(model_architecture({"name": "Qwen/Qwen3-30B-A3B"}), 1, "fp8", "bf16",
                      H200)
    assert ops._gemm_dtype["moe_router"] == "bfloat16" and ops._gemm_dtype["lm_head"] is None
    assert ops._gemm_dtype["attn_pre_proj"] == "fp8" and ops.distribution == "power_law_1.2"
    llama = MeasuredOps(model_architecture({"name": "meta-llama/Llama-3.1-8B"}), 1, "fp8",
                        "bf16", H200)
    assert llama._gemm_dtype["lm_head"] == "bfloat16"  # Qwen's 151,936-row head: past reach
    assert prompt_length(10 * 11 / 2) == pytest.approx(10.0)
    assert prompt_length(128 * 129 / 2 + 100 * 128, window=128) == pytest.approx(228.0)
