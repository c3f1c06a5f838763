"""`hardware.moe_backend = "triton"`: a mixture of experts' routed experts on the Triton fused
MoE kernel (vLLM's with its FlashInfer and DeepGEMM MoE kernels turned off, SGLang's default),
from the rows of the tables that timed it: the run's version's, else the newest older
collection's, where the newest timed other kernels alone. The report and the notes say which;
where no collection timed it, or the model has no experts, one line refuses it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiconfigurator_core")

from helpers.model_scenario import refusal, scenario, setup_of  # noqa: E402
from sim import notes  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.costs.hardware import HardwareCost, layer_op_times  # noqa: E402
from sim.costs.hardware.kernels import KernelTables  # noqa: E402

QWEN = "Qwen/Qwen3-235B-A22B"  # experts of hidden 4096, width 1536, top 8 of 128
SHAPE = {"hidden_size": 4096, "inter_size": 1536, "topk": 8, "num_experts": 128}


def table_rows(gpu: str, version: str, kernel: str, tp: int, ep: int = 1,
               dtype: str = "fp8_block") -> pd.DataFrame:
    """One collection's rows of `kernel` in `dtype` at Qwen3-235B-A22B's experts at moe TP `tp`
    x EP `ep`, read here from the parquet file itself (the model's path is
    `tables.moe_curve`)."""
    path = KernelTables(gpu).root / KernelTables(gpu).system / "moe" / "vllm" / version
    table = pd.read_parquet(path / "moe_perf.parquet")
    table = table[(table["moe_dtype"] == dtype) & (table["moe_tp_size"] == tp)
                  & (table["moe_ep_size"] == ep) & (table["distribution"] == "power_law_1.2")
                  & (table["kernel_source"] == kernel)]
    return table[(table[list(SHAPE)] == list(SHAPE.values())).all(axis=1)]


def experts(gpu: str, tp: int, tokens, backend: str, framework: str = "vllm", ep: int = 1):
    return layer_op_times(QWEN, gpu, tp, tokens, "fp8", ep=ep, activation_scheme="block",
                          framework=framework, moe_backend=backend)["moe_experts"]


def at_points(rows: pd.DataFrame, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(the tokens, the seconds) of `rows` at those token counts, each measured once."""
    points = rows[rows["num_tokens"].isin(tokens)].sort_values("num_tokens")
    assert list(points["num_tokens"]) == tokens
    return points["num_tokens"].to_numpy(dtype=float), points["latency"].to_numpy() * 1e-3


def test_triton_reads_the_newest_collection_that_timed_it_at_the_layout():
    # vLLM 0.24 timed Qwen3-235B-A22B's block-scaled experts on the H200 on Triton's kernel
    # with the experts split by TP (there the default), on FlashInfer's CUTLASS kernel alone
    # with expert parallelism; 0.19 timed Triton's at every layout
    tokens = [1, 64, 1024, 8192]
    at, seconds = at_points(table_rows("h200", "0.24.0", "vllm_fp8moe_triton_tritonexperts", 4),
                            tokens)
    np.testing.assert_allclose(experts("h200", 4, at, "triton"), seconds, rtol=1e-9)
    np.testing.assert_array_equal(experts("h200", 4, at, "triton"), experts("h200", 4, at, "auto"))
    assert table_rows("h200", "0.24.0", "vllm_fp8moe_triton_tritonexperts", 1, 4).empty
    at, seconds = at_points(table_rows("h200", "0.19.0", "vllm_fused_moe", 1, 4), tokens)
    triton = experts("h200", 4, at, "triton", ep=4)
    np.testing.assert_allclose(triton, seconds, rtol=1e-9)
    assert not np.allclose(triton, experts("h200", 4, at, "auto", ep=4), rtol=0.01)


def test_where_the_newest_tables_time_other_kernels_an_older_collection_times_triton(tmp_path,
                                                                                   capsys):
    # vLLM 0.24 timed block-scaled experts on the B200 on FlashInfer's TensorRT-LLM kernels
    # alone; 0.22 timed them on Triton's (`fused_experts`, "vllm_fused_moe")
    assert table_rows("b200", "0.24.0", "vllm_fused_moe", 2).empty
    rows = table_rows("b200", "0.22.0", "vllm_fused_moe", 2)
    at, seconds = at_points(rows, [1, 16, 256, 4096])
    np.testing.assert_allclose(experts("b200", 2, at, "triton"), seconds, rtol=1e-9)
    notes.forget()
    capsys.readouterr()
    setup = setup_of(tmp_path, model=f'name = "{QWEN}"', gpu="b200", tp=4,
                     hardware='dtype = "fp8"\nactivation_scheme = "block"\n'
                              'moe_backend = "triton"')
    HardwareCost(setup)
    said = ("the Triton fused MoE kernel, as vllm 0.22.0's tables timed it (the newest on the "
            "b200 that timed it at these experts' shape and layout)")
    assert setup.describe()["moe_kernel"] == said
    assert setup.describe()["framework_version"] == "0.24.0"  # every other operator's
    assert capsys.readouterr().err.count(f"moe_experts on {said}") == 1


def test_per_tensor_fp8_experts_on_triton_are_its_rows_not_the_slow_cutlass_rows(tmp_path,
                                                                                 capsys):
    # vLLM 0.24 timed per-tensor fp8 experts on the H200 on FlashInfer's CUTLASS kernel alone
    # (2.2 to 4 times its bf16 rows, a note says so under "auto"); 0.19 on Triton's, which is
    # the faster here: its time is the table's, not floored at the default kernel's
    rows = table_rows("h200", "0.19.0", "vllm_fused_moe", 4, dtype="fp8")
    at, seconds = at_points(rows, [1, 64, 1024, 8192])
    triton = layer_op_times(QWEN, "h200", 4, at, "fp8", moe_backend="triton")["moe_experts"]
    np.testing.assert_allclose(triton, seconds, rtol=1e-9)
    auto = layer_op_times(QWEN, "h200", 4, at, "fp8")["moe_experts"]
    assert np.all(triton < 0.5 * auto), triton / auto
    notes.forget()
    capsys.readouterr()
    HardwareCost(setup_of(tmp_path, model=f'name = "{QWEN}"', gpu="h200", tp=4,
                          hardware='dtype = "fp8"\nmoe_backend = "triton"'))
    said = capsys.readouterr().err
    assert "moe_experts on the Triton fused MoE kernel, as vllm 0.19.0's tables" in said
    assert "FlashInfer's CUTLASS" not in said, said


def test_where_triton_is_the_default_both_backends_agree(tmp_path):
    # SGLang's default fused MoE on the H200 is Triton's
    tokens = np.array([1.0, 64.0, 1024.0, 8192.0])
    np.testing.assert_array_equal(experts("h200", 4, tokens, "triton", "sglang"),
                                  experts("h200", 4, tokens, "auto", "sglang"))
    setup = setup_of(tmp_path, model=f'name = "{QWEN}"', gpu="h200", tp=4,
                     hardware='dtype = "fp8"\nactivation_scheme = "block"\n'
                              'framework = "sglang"\nmoe_backend = "triton"')
    assert setup.describe()["moe_kernel"] == ("the Triton fused MoE kernel, as sglang 0.5.14's "
                                              "tables timed it")


def test_the_report_and_summary_json_name_the_triton_kernel(tmp_path):
    path = scenario(tmp_path, model=f'name = "{QWEN}"', gpu="b200", tp=4, requests=2,
                    hardware='dtype = "fp8"\nactivation_scheme = "block"\n'
                             'moe_backend = "triton"')
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    record = json.loads((tmp_path / "out" / "summary.json").read_text())["hardware"]
    assert record["moe_kernel"].startswith("the Triton fused MoE kernel, as vllm 0.22.0's")
    assert record["kernel_sources"]["moe_experts"] == "measured"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "(`moe_experts` on the Triton fused MoE kernel, as vllm 0.22.0's tables" in report


def test_triton_where_no_collection_timed_it_is_refused_in_one_line(tmp_path):
    # TensorRT-LLM's H200 tables time its own kernels and CUTLASS's; the roofline in Triton's
    # place would make the setting a guess
    where = ("no trtllm collection up to 1.3.0rc20 on the h200 timed a Triton MoE kernel at "
             "this model's experts' shape in fp8_block or fp8 with the experts at moe TP 4 x EP 1")
    text = refusal(tmp_path, model=f'name = "{QWEN}"', gpu="h200", tp=4,
                   hardware='dtype = "fp8"\nactivation_scheme = "block"\nframework = "trtllm"\n'
                            'moe_backend = "triton"')
    assert text.endswith(f'hardware.moe_backend: "triton": {where}; use "auto"'), text
    with pytest.raises(ValueError, match=f'^moe_backend: "triton": {where}'):
        experts("h200", 4, 64, "triton", "trtllm")


def test_triton_without_experts_is_refused_in_one_line(tmp_path):
    text = refusal(tmp_path, gpu="h200", hardware='moe_backend = "triton"')
    assert text.endswith('hardware.moe_backend: "triton" costs a mixture of experts\' routed '
                         'experts; meta-llama/Llama-3.1-8B has none; use "auto"'), text
