"""fp8 GEMMs by activation scheme (`hardware.activation_scheme`): a static checkpoint's and a
dynamic one's time from tables measured under the other scheme (TensorRT-LLM's dynamic, vLLM's
static), block-scaled GEMMs where they are measured and floored at the per-tensor time where
they are not, and the scheme refused in one line where it does not apply."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core")

from helpers.hardware import kernel_scenario  # noqa: E402
from scenarios import ScenarioError  # noqa: E402
from sim.build import build_cost  # noqa: E402
from sim.costs.hardware import layer_op_times  # noqa: E402
from sim.costs.hardware.kernels import KernelTables  # noqa: E402
from sim.costs.shape import StepShape  # noqa: E402

H200 = KernelTables("h200")


def test_static_activation_scales_take_off_the_scale_computation_the_tables_measured():
    """TensorRT-LLM's fp8 GEMMs were measured quantizing their activations dynamically (its
    Linear got no input scale), vLLM's with static scales: a static checkpoint's GEMM is the
    TensorRT-LLM time less its own measured scale computation, a dynamic one the vLLM time plus
    vLLM's; SGLang measured no difference."""
    m = np.array([4.0, 64.0, 1024.0])
    trtllm, vllm, sglang = (KernelTables("h200", fw) for fw in ("trtllm", "vllm", "sglang"))
    for tables in (trtllm, vllm):
        extra = tables.activation_scale_time(m, 8192)
        static = tables.gemm(m, 12288, 8192, "fp8", "static")
        dynamic = tables.gemm(m, 12288, 8192, "fp8", "dynamic")
        np.testing.assert_allclose(dynamic - static, extra, rtol=1e-12)
        assert np.all(extra > 0)
    # TensorRT-LLM's dynamic time is its table's own; vLLM's static time is its table's own
    measured_trt = np.exp(trtllm._gemm_shapes("fp8")[2][(12288, 8192)].log_at(np.log(m))) * 1e-3
    np.testing.assert_allclose(trtllm.gemm(m, 12288, 8192, "fp8", "dynamic"), measured_trt)
    np.testing.assert_allclose(vllm.gemm(m, 12288, 8192, "fp8"), vllm.gemm(m, 12288, 8192, "fp8",
                                                                          "static"))
    # at a few tokens the two frameworks' static GEMMs agree (the same cuBLAS-class kernels),
    # where the tables as measured differ by TensorRT-LLM's scale computation (~7 us)
    np.testing.assert_allclose(trtllm.gemm(4.0, 12288, 8192, "fp8"),
                               vllm.gemm(4.0, 12288, 8192, "fp8"), rtol=0.05)
    assert trtllm.gemm(4.0, 12288, 8192, "fp8", "dynamic") > 1.2 * vllm.gemm(4.0, 12288, 8192,
                                                                             "fp8")
    np.testing.assert_array_equal(sglang.gemm(m, 12288, 8192, "fp8", "static"),
                                  sglang.gemm(m, 12288, 8192, "fp8", "dynamic"))
    # block-scaled and 16-bit GEMMs have no such choice
    assert trtllm.gemm(64.0, 12288, 8192, "bf16", "static") == \
        trtllm.gemm(64.0, 12288, 8192, "bf16", "dynamic")


def test_every_measured_static_fp8_gemm_stays_positive():
    """Taking the scale computation off never leaves a GEMM of no time, on any GPU's tables."""
    for gpu in ("h100-sxm", "h200", "b200", "gb200", "b300", "gb300", "l40s", "rtx-pro-6000"):
        tables = KernelTables(gpu, "trtllm")
        shapes = tables._gemm_shapes("fp8")
        if shapes is None:
            continue
        for (n, k), curve in shapes[2].items():
            m = np.exp(curve.x)
            static = tables.gemm(m, n, k, "fp8", "static")
            assert np.all(static > 0), (gpu, n, k)


def test_a_block_scaled_checkpoint_reads_the_block_scaled_gemms_where_they_are_measured():
    # DeepSeek-V3's own fp8 weights are scaled in 128 x 128 blocks: under TensorRT-LLM its
    # shared experts' GEMMs from the fp8_block table (per-tensor fp8 first otherwise, as a
    # ModelOpt checkpoint's)
    from sim.costs.hardware import model_architecture
    from sim.costs.hardware.measured import MeasuredOps

    arch = model_architecture({"name": "deepseek-ai/DeepSeek-V3"})
    trtllm = KernelTables("h200", "trtllm")
    per_tensor = MeasuredOps(arch, 8, "fp8", "bf16", trtllm)
    block = MeasuredOps(arch, 8, "fp8", "bf16", trtllm, activations="block")
    assert per_tensor._gemm_dtype["shared_up_proj"] == "fp8"
    assert block._gemm_dtype["shared_up_proj"] == "fp8_block"
    n, k = block.gemms["shared_up_proj"]
    rows = np.array([1.0, 8.0, 17.0, 24.0, 64.0, 1024.0])
    times, beyond = block.layer_times({"shared_up_proj": np.ones(6)}, rows)
    assert not beyond
    np.testing.assert_array_equal(times["shared_up_proj"], trtllm.gemm(rows, n, k, "fp8_block"))
    assert times["shared_up_proj"][0] < 30e-6
    # vLLM 0.24's block-scaled rows hold a floor (FlashInfer's up to 17 rows: 50-70 us at
    # one row, where its per-tensor GEMM takes under 20 us): under vLLM a block-scaled
    # checkpoint reads the per-tensor rows, its activations scaled at every call
    floored = MeasuredOps(arch, 8, "fp8", "bf16", H200, activations="block")
    assert 50e-6 < H200.gemm(rows[:1], n, k, "fp8_block")[0] < 70e-6
    assert floored._gemm_dtype["shared_up_proj"] == "fp8"
    times, _ = floored.layer_times({"shared_up_proj": np.ones(6)}, rows)
    np.testing.assert_array_equal(times["shared_up_proj"],
                                  H200.gemm(rows, n, k, "fp8", "dynamic"))
    assert times["shared_up_proj"][0] < 20e-6
    assert floored._moe_dtype == "fp8_block"  # the experts' rows hold no such floor
    # and a model whose experts were measured per-tensor too keeps the block-scaled ones
    # (Qwen3-30B-A3B's: vLLM's per-tensor fp8 MoE on Hopper is FlashInfer's slower kernel)
    qwen = model_architecture({"name": "Qwen/Qwen3-30B-A3B"})
    assert MeasuredOps(qwen, 1, "fp8", "bf16", H200)._moe_dtype == "fp8"
    assert MeasuredOps(qwen, 1, "fp8", "bf16", H200, activations="block")._moe_dtype == \
        "fp8_block"
    # a latent-attention block not measured (vLLM's tables on the L40S with an fp8 cache): its
    # projections are GEMMs, read per-tensor as every other (its block-scaled rows of them
    # take 0.29-0.34 ms at one row)
    l40s = MeasuredOps(arch, 8, "fp8", "fp8", KernelTables("l40s"), activations="block")
    assert not l40s.mla_block and l40s._gemm_dtype["mla_down_proj"] == "fp8"
    # a shape the block-scaled tables lack: per-tensor, its activations scaled at every call
    # (SGLang's tables on the RTX PRO 6000 have no block-scaled GEMM of Llama-2-7B's shapes)
    rtx = KernelTables("rtx-pro-6000", "sglang")
    llama = MeasuredOps(model_architecture({"name": "meta-llama/Llama-2-7b-hf"}), 1, "fp8",
                        "fp8", rtx, activations="block")
    assert llama._gemm_dtype["mlp_up_proj"] == "fp8"
    n, k = llama.gemms["mlp_up_proj"]
    times, _ = llama.layer_times({"mlp_up_proj": np.ones(2)}, rows[-2:])
    np.testing.assert_array_equal(times["mlp_up_proj"], rtx.gemm(rows[-2:], n, k, "fp8", "dynamic"))
    with pytest.raises(ValueError, match='^hardware.activation_scheme: "block" applies to fp8 '
                                         'weights'):
        layer_op_times("deepseek-ai/DeepSeek-V3", "h200", 8, 64, dtype="bf16",
                       activation_scheme="block")


def test_the_activation_scheme_reaches_the_step_and_dynamic_needs_fp8(tmp_path):
    from sim.build import hardware_of

    def step(scheme):
        config = kernel_scenario(tmp_path, "h200", f'framework = "trtllm"\ndtype = "fp8"\n'
                                         f'activation_scheme = "{scheme}"')
        return build_cost(config.base).step_time(StepShape(decode_seqs=4, sampled_seqs=4,
                                                           decode_context=4096, decoding=1))

    assert step("static") < step("dynamic")
    with pytest.raises(ScenarioError, match="hardware.activation_scheme: must be one of static, "
                                            "dynamic, block, mxfp8, got 'dynamc' \\(did you mean "
                                            "'dynamic'"):
        kernel_scenario(tmp_path, extra='activation_scheme = "dynamc"')
    with pytest.raises(ValueError, match='^hardware.activation_scheme: "dynamic" applies to fp8 '
                                         'weights \\(hardware.dtype = "fp8"\\), not bf16$'):
        hardware_of(kernel_scenario(tmp_path, extra='dtype = "bf16"\n'
                                                    'activation_scheme = "dynamic"').base)
