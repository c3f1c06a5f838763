"""`hardware.moe_backend = "marlin"`: a mixture of experts' mxfp4 experts on Marlin's weight-only
kernel (vLLM's `VLLM_MXFP4_USE_MARLIN=1`), from the tables' Marlin rows. Where Marlin was
measured at another shape, its time at as many rows an expert is scaled by the experts' size
and never taken below the default kernel's; at the model's own shape it is the table's own.
A setting that cannot apply is refused in one line; the report says where the time came
from."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("aiconfigurator_core")

from helpers.model_scenario import refusal, scenario, setup_of  # noqa: E402
from sim import notes  # noqa: E402
from sim.costs.hardware import HardwareCost, layer_op_times  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.costs.hardware.kernels import KernelTables  # noqa: E402

OSS = "openai/gpt-oss-120b"
SHAPE = {"hidden_size": 2880, "inter_size": 2880, "topk": 4, "num_experts": 128}  # gpt-oss-120b


def marlin_rows(gpu: str, tp: int) -> pd.DataFrame:
    """vLLM 0.24.0's Marlin rows in MXFP4 on `gpu` at moe TP `tp`, read here from the parquet
    file itself (the model's path is `tables.nearest_moe_curve`)."""
    path = KernelTables(gpu).table_path("moe", "moe_perf.parquet")
    table = pd.read_parquet(path)
    return table[(table["moe_dtype"] == "w4a16_mxfp4") & (table["moe_tp_size"] == tp)
                 & (table["moe_ep_size"] == 1) & (table["distribution"] == "power_law_1.2")
                 & table["kernel_source"].str.contains("marlin")]


def experts(gpu: str, tp: int, tokens, backend: str):
    return layer_op_times(OSS, gpu, tp, tokens, "mxfp4", moe_backend=backend)["moe_experts"]


@pytest.mark.parametrize("tp", [1, 4])
def test_marlin_measured_at_another_shape_is_its_time_at_as_many_rows_an_expert_scaled(tp):
    # On the H200 vLLM measured Marlin's MXFP4 kernel at one shape only (hidden 3584,
    # intermediate 3072, 896 experts, top 16). At the tokens that give gpt-oss's experts as many
    # rows as a measured point gave that shape's, its time is that point's, scaled by the
    # experts' size; at prefill sizes that is 1.4 to 2 times the default (Triton) kernel's
    rows = marlin_rows("h200", tp)
    assert set(rows["num_experts"]) == {896}
    their = rows[rows["num_tokens"].isin([2048, 4096, 8192])].sort_values("num_tokens")
    hidden, inter, topk, count = (int(their[k].iloc[0]) for k in SHAPE)
    tokens = their["num_tokens"].to_numpy() * topk / count * SHAPE["num_experts"] / SHAPE["topk"]
    size = SHAPE["num_experts"] * SHAPE["hidden_size"] * SHAPE["inter_size"] / (
        count * hidden * inter)
    marlin, shape = KernelTables("h200").moe_marlin(tokens, *SHAPE.values(), tp, 1,
                                                    "w4a16_mxfp4")
    assert shape == (hidden, inter, topk, count)
    np.testing.assert_allclose(marlin, their["latency"].to_numpy() * 1e-3 * size, rtol=1e-9)
    prefills = [2048, 4096, 8192]
    ratio = experts("h200", tp, prefills, "marlin") / experts("h200", tp, prefills, "auto")
    assert np.all((1.3 < ratio) & (ratio < 2.1)), ratio


def test_at_a_few_rows_an_expert_marlin_scaled_is_never_below_the_default_kernel():
    # one token: Marlin's time at that shape is mostly fixed cost, which scaling by the
    # experts' size would shrink below what any kernel takes; the default's time stands
    tokens = np.array([1.0, 2.0, 4.0, 8.0])
    auto, marlin = (experts("h200", 1, tokens, backend) for backend in ("auto", "marlin"))
    assert np.all(marlin >= auto) and marlin[0] == auto[0]


def test_past_marlins_measured_reach_it_is_still_never_below_the_default_kernel():
    # on the GB200 at EP 8 Marlin's rows end at 18,724 tokens, the default kernel's at 32,768:
    # past Marlin's reach the roofline, scaled to meet its last point, grows slower than the
    # default's measured time, which then stands
    tokens = np.array([8192.0, 18444.0, 23413.0, 33927.0, 2.0 ** 20])
    auto, marlin = (layer_op_times(OSS, "gb200", 8, tokens, "mxfp4", ep=8,
                                   moe_backend=backend)["moe_experts"]
                    for backend in ("auto", "marlin"))
    assert np.all(marlin >= auto), marlin / auto
    assert marlin[0] > 1.1 * auto[0]  # within both reaches Marlin's own, slower time


def test_where_marlin_is_the_default_at_the_models_shape_both_backends_agree():
    # the L40S has no Triton MXFP4 kernel: vLLM measured gpt-oss's experts on Marlin itself
    assert set(marlin_rows("l40s", 1)["num_experts"]) == {32, 128}
    tokens = np.array([1.0, 64.0, 1024.0, 8192.0])
    np.testing.assert_array_equal(experts("l40s", 1, tokens, "marlin"),
                                  experts("l40s", 1, tokens, "auto"))


def test_a_run_on_marlin_says_where_its_time_came_from(tmp_path, capsys):
    notes.forget()
    setup = setup_of(tmp_path, model=f'name = "{OSS}"', gpu="h200",
                     hardware='dtype = "mxfp4"\nmoe_backend = "marlin"')
    HardwareCost(setup)
    described = setup.describe()["moe_kernel"]
    assert described.startswith("Marlin's kernel, as measured at hidden 3584, intermediate "
                                "3072, 896 experts, top 16: scaled to this model's experts")
    assert capsys.readouterr().err.count("moe_experts on Marlin's kernel") == 1
    assert setup_of(tmp_path, model=f'name = "{OSS}"', gpu="h200",
                    hardware='dtype = "mxfp4"').describe()["moe_kernel"] is None


def test_the_report_and_summary_json_name_the_marlin_kernel(tmp_path):
    path = scenario(tmp_path, model=f'name = "{OSS}"', gpu="h200", requests=2,
                    hardware='dtype = "mxfp4"\nmoe_backend = "marlin"')
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    record = json.loads((tmp_path / "out" / "summary.json").read_text())["hardware"]
    assert record["moe_kernel"].startswith("Marlin's kernel, as measured at hidden 3584")
    assert record["kernel_sources"]["moe_experts"] == "measured"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "(`moe_experts` on Marlin's kernel, as measured at hidden 3584" in report


@pytest.mark.parametrize("model, hardware, why", [
    (f'name = "{OSS}"', 'dtype = "bf16"\ngpu_memory_utilization = 0.95',
     'hardware.moe_backend: "marlin" costs mxfp4 experts (Marlin\'s weight-only kernel, as '
     'the tables measured it), not bf16 weights; use "auto"'),
    ('name = "meta-llama/Llama-3.1-8B"', "", 'hardware.moe_backend: "marlin" costs mxfp4 '
     "experts (Marlin's weight-only kernel, as the tables measured it), not "
     'meta-llama/Llama-3.1-8B, without experts; use "auto"'),
])
def test_marlin_where_it_cannot_apply_is_refused_in_one_line(tmp_path, model, hardware, why):
    text = refusal(tmp_path, model=model, gpu="h200", tp=2,
                   hardware=hardware + '\nmoe_backend = "marlin"')
    assert text.endswith(why), text


@pytest.mark.parametrize("gpu, tp, hardware, where", [
    ("h200", 2, 'framework = "sglang"\nep = 2', "sglang 0.5.14 kernels measured on h200 have no "
     "Marlin MoE kernel in w4a16_mxfp4 with the experts at moe TP 1 x EP 2; they have it at "
     "moe TP x EP 1 x 1, 2 x 1, 4 x 1, 8 x 1"),  # and at 16 and 32 GPUs, past a run's 8
    ("h100-sxm", 2, 'framework = "sglang"\nep = 2', "sglang 0.5.14 kernels measured on h100-sxm "
     "have no Marlin MoE kernel in w4a16_mxfp4 with the experts at moe TP 1 x EP 2; they have it "
     "at moe TP x EP 1 x 1, 2 x 1, 4 x 1, 8 x 1"),  # not 1 x 128, 4 x 32, 16 x 2 ...
    ("h200", 8, 'framework = "trtllm"\nep = 8', "trtllm 1.3.0rc20 kernels measured on h200 have "
     "no Marlin MoE kernel in w4a16_mxfp4 with the experts at moe TP 1 x EP 8"),
])
def test_marlin_where_the_tables_lack_it_but_not_the_default_is_refused(tmp_path, gpu, tp,
                                                                        hardware, where):
    # the default kernel is measured there; the roofline in Marlin's place would cost the
    # experts at a fraction of it (0.14-0.8), the slower kernel making the run faster
    text = refusal(tmp_path, model=f'name = "{OSS}"', gpu=gpu, tp=tp,
                   hardware=f'dtype = "mxfp4"\nmoe_backend = "marlin"\n{hardware}')
    assert text.endswith(f'hardware.moe_backend: "marlin": {where}; use "auto"'), text
    with pytest.raises(ValueError, match=f'^moe_backend: "marlin": {where}'):
        layer_op_times(OSS, gpu, tp, 64, "mxfp4", ep=tp,
                       framework=hardware.split('"')[1], moe_backend="marlin")


def test_an_unknown_backend_is_refused_naming_the_allowed_ones(tmp_path):
    text = refusal(tmp_path, model=f'name = "{OSS}"', gpu="h200",
                   hardware='dtype = "mxfp4"\nmoe_backend = "cutlass"')
    assert "hardware.moe_backend" in text and "auto, marlin, triton" in text, text


def test_under_the_roofline_the_backend_changes_nothing_and_says_so(tmp_path, capsys):
    notes.forget()
    setup = setup_of(tmp_path, model=f'name = "{OSS}"', gpu="h200",
                     hardware='dtype = "mxfp4"\nkernels = "roofline"\nmoe_backend = "marlin"')
    assert setup.kernels is None
    assert 'hardware.moe_backend = "marlin" picks among measured MoE kernels' in \
        capsys.readouterr().err
    with pytest.raises(ValueError, match="moe_backend must be one of auto, marlin, triton"):
        layer_op_times(OSS, "h200", 1, 8, "mxfp4", moe_backend="cutlass")
