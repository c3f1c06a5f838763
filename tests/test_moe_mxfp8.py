"""`hardware.activation_scheme = "mxfp8"`: mxfp4 experts with their activations quantized to
MXFP8 (vLLM's VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 on Blackwell), costed from the rows of the
kernel the tables time so: at the model's experts' shape where the run's collection timed it
there, else where another framework's timed the same kernel there, else at as many rows an
expert at the nearest shape measured, scaled by the experts' size. The report and the notes say
which; elsewhere (another dtype, Marlin's or Triton's kernel, a GPU without MXFP8 tensor cores
or whose tables lack the kernel) one line refuses it."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiconfigurator_core")

from helpers.model_scenario import refusal, scenario, setup_of  # noqa: E402
from sim import notes  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.costs.hardware import HardwareCost, layer_op_times  # noqa: E402
from sim.costs.hardware.kernels import KernelTables  # noqa: E402

GPT_OSS = "openai/gpt-oss-120b"  # experts of hidden 2880, width 2880, top 4 of 128
MEASURED = (4096, 2048, 6, 256)  # one of the two shapes vLLM 0.24 timed the kernel at (B200)
SHAPE = ("hidden_size", "inter_size", "topk", "num_experts")


def model(hidden: int, width: int, topk: int, experts: int) -> dict:
    """A model whose experts are of this shape (its other parts do not matter here)."""
    return {"n_layers": 2, "d_model": hidden, "n_heads": 32, "n_kv_heads": 8, "d_ff": width,
            "vocab_size": 32000, "max_seq_len": 4096, "n_experts": experts,
            "experts_per_token": topk, "moe_d_ff": width}


def mxfp8_rows(shape: tuple, tp: int = 1, framework: str = "vllm",
               version: str = "0.24.0") -> pd.DataFrame:
    """A B200 collection's rows of MXFP4 experts with MXFP8 activations at `shape` and moe TP
    `tp`, read here from the parquet file itself (the model's path is
    `tables.nearest_moe_curve`)."""
    tables = KernelTables("b200")
    table = pd.read_parquet(tables.root / tables.system / "moe" / framework / version
                            / "moe_perf.parquet")
    table = table[(table["moe_dtype"] == "w4a8_mxfp4_mxfp8") & (table["moe_tp_size"] == tp)
                  & (table["moe_ep_size"] == 1) & (table["distribution"] == "power_law_1.2")]
    return table[(table[list(SHAPE)] == list(shape)).all(axis=1)]


def seconds_at(rows: pd.DataFrame, tokens: list[int]) -> np.ndarray:
    points = rows[rows["num_tokens"].isin(tokens)].sort_values("num_tokens")
    assert list(points["num_tokens"]) == tokens
    return points["latency"].to_numpy() * 1e-3


def experts(of, tp: int, tokens, scheme: str = "mxfp8", gpu: str = "b200"):
    return layer_op_times(of, gpu, tp, tokens, "mxfp4", activation_scheme=scheme,
                          kernels="measured")["moe_experts"]


def test_at_a_measured_shape_the_experts_take_the_tables_time():
    tokens = [1, 48, 1024, 16384]
    for tp in (1, 4):
        np.testing.assert_allclose(experts(model(*MEASURED), tp, np.array(tokens, float)),
                                   seconds_at(mxfp8_rows(MEASURED, tp), tokens), rtol=1e-9)


def test_where_another_framework_timed_the_kernel_at_the_shape_its_rows_are_read():
    # vLLM 0.24 timed gpt-oss's experts with MXFP8 activations at other shapes only; SGLang
    # 0.5.14 timed the same kernel (FlashInfer's TensorRT-LLM) at gpt-oss's, where the two agree
    # within 8% at the shape both timed (benchmarks/moe_transfer.py)
    gpt_oss = (2880, 2880, 4, 128)
    assert mxfp8_rows(gpt_oss).empty
    tokens = [1, 48, 1024, 8192]
    for tp in (1, 8):
        sglang = seconds_at(mxfp8_rows(gpt_oss, tp, "sglang", "0.5.14"), tokens)
        np.testing.assert_allclose(experts(GPT_OSS, tp, np.array(tokens, float)), sglang,
                                   rtol=1e-9)
    # faster than with bf16 activations (the default on the B200: FlashInfer's TensorRT-LLM
    # kernel, timed at gpt-oss's own shape) from a few rows an expert on
    assert np.all(experts(GPT_OSS, 1, np.array(tokens[1:], float))
                  < experts(GPT_OSS, 1, np.array(tokens[1:], float), "static"))


def test_at_a_shape_no_framework_timed_the_nearest_shape_at_as_many_rows_an_expert():
    # 64 experts of 2048 x 1024, top 4: nearest in size to 256 x 4096 x 2048 of vLLM's two
    # shapes; T tokens are T x 4 / 64 rows an expert there as at 8 T / 3 tokens of top 6 of
    # 256: 3 tokens as 8, 384 as 1,024
    small = (2048, 1024, 4, 64)
    assert mxfp8_rows(small).empty and mxfp8_rows(small, 1, "sglang", "0.5.14").empty
    tokens = np.array([3.0, 6.0, 24.0, 384.0, 3072.0])
    size = 64 * 2048 * 1024 / (256 * 4096 * 2048)
    expected = seconds_at(mxfp8_rows(MEASURED), [8, 16, 64, 1024, 8192]) * size
    np.testing.assert_allclose(experts(model(*small), 1, tokens), expected, rtol=1e-9)


def test_the_notes_the_report_and_summary_json_name_the_kernel_and_its_shape(tmp_path, capsys):
    said = ("vllm's MoE kernel with MXFP8 activations (FlashInfer's TensorRT-LLM kernel), as "
            "sglang 0.5.14's tables timed it at this model's shape (vllm's time it at other "
            "shapes only)")
    notes.forget()
    capsys.readouterr()
    setup = setup_of(tmp_path, model=f'name = "{GPT_OSS}"', gpu="b200",
                     hardware='dtype = "mxfp4"\nactivation_scheme = "mxfp8"')
    HardwareCost(setup)
    assert setup.describe()["moe_kernel"] == said
    assert setup.describe()["activation_scheme"] == "mxfp8"
    assert capsys.readouterr().err.count(f"moe_experts on {said} (hardware.activation_scheme)") \
        == 1
    path = scenario(tmp_path, model=f'name = "{GPT_OSS}"', gpu="b200", requests=2,
                    hardware='dtype = "mxfp4"\nactivation_scheme = "mxfp8"')
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    record = json.loads((tmp_path / "out" / "summary.json").read_text())["hardware"]
    assert record["moe_kernel"] == said and record["activation_scheme"] == "mxfp8"
    assert f"`moe_experts` on {said}" in (tmp_path / "out" / "report.md").read_text()


def test_where_the_gpu_or_its_tables_lack_the_kernel_mxfp8_is_refused_in_one_line(tmp_path):
    # Hopper has no MXFP8 tensor cores, whatever costs the run
    for kernels in ("", 'kernels = "roofline"\n'):
        text = refusal(tmp_path, model=f'name = "{GPT_OSS}"', gpu="h200",
                       hardware=f'{kernels}dtype = "mxfp4"\nactivation_scheme = "mxfp8"')
        assert text.endswith('hardware.activation_scheme: "mxfp8" needs a GPU with MXFP8 tensor '
                             'cores; h200 has none (use "static", bf16 activations, or one of '
                             'b200, gb200, b300, gb300, rtx-pro-6000)'), text
    # the RTX PRO 6000 has them, and vLLM 0.24's tables time no such kernel on it
    where = ("vllm 0.24.0 kernels measured on rtx-pro-6000 time no MoE kernel of mxfp4 experts "
             "with MXFP8 activations with the experts at moe TP 1 x EP 1")
    text = refusal(tmp_path, model=f'name = "{GPT_OSS}"', gpu="rtx-pro-6000",
                   hardware='dtype = "mxfp4"\nactivation_scheme = "mxfp8"')
    assert text.endswith(f'hardware.activation_scheme: "mxfp8": {where}; use "static" (bf16 '
                         f'activations)'), text
    with pytest.raises(ValueError,
                       match="^" + re.escape(f'activation_scheme: "mxfp8": {where}')):
        experts(GPT_OSS, 1, 64, gpu="rtx-pro-6000")


@pytest.mark.parametrize("hardware, message", [
    ('dtype = "fp8"\nactivation_scheme = "mxfp8"',
     'hardware.activation_scheme: "mxfp8" quantizes mxfp4 experts\' activations '
     '(hardware.dtype = "mxfp4"), not fp8 weights'),
    ('dtype = "mxfp4"\nactivation_scheme = "mxfp8"\nmoe_backend = "marlin"',
     'hardware.moe_backend: "marlin" computes mxfp4 experts with bf16 activations; '
     'activation_scheme = "mxfp8" runs them on FlashInfer\'s TensorRT-LLM kernel: use "auto"'),
    ('dtype = "mxfp4"\nactivation_scheme = "mxfp8"\nmoe_backend = "triton"',
     'hardware.moe_backend: "triton" computes mxfp4 experts with bf16 activations; '
     'activation_scheme = "mxfp8" runs them on FlashInfer\'s TensorRT-LLM kernel: use "auto"'),
    ('dtype = "mxfp4"\nactivation_scheme = "block"',
     'hardware.activation_scheme: "block" applies to fp8 weights (hardware.dtype = "fp8"), '
     'not mxfp4')])
def test_mxfp8_with_other_weights_or_kernels_is_refused_in_one_line(tmp_path, hardware, message):
    text = refusal(tmp_path, model=f'name = "{GPT_OSS}"', gpu="b200", hardware=hardware)
    assert text.endswith(message), text


def test_under_the_roofline_mxfp8_changes_nothing_and_says_so(tmp_path, capsys):
    notes.forget()
    capsys.readouterr()
    hardware = 'dtype = "mxfp4"\nkernels = "roofline"'
    plain = HardwareCost(setup_of(tmp_path, model=f'name = "{GPT_OSS}"', gpu="b200",
                                  hardware=hardware))
    mxfp8 = HardwareCost(setup_of(tmp_path, model=f'name = "{GPT_OSS}"', gpu="b200",
                                  hardware=hardware + '\nactivation_scheme = "mxfp8"'))
    np.testing.assert_array_equal(plain._rows[:64], mxfp8._rows[:64])
    assert "costs the experts alike with bf16 or MXFP8 activations" in capsys.readouterr().err
