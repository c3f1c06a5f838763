"""A step's prefill overhead (`hardware.prefill_overhead_s`): what a step with a prefill takes
beyond its kernels, the GPU waiting on the host; part of the step's GPU time, so async
scheduling does not hide it, and nothing in a step that only decodes."""

from __future__ import annotations

import numpy as np
import pytest

import scenarios
from helpers.model_scenario import scenario
from helpers.runs import records
from reports.section_text import step_costs
from scenarios import ScenarioError
from sim.build import build_cost
from sim.costs.hardware import HardwareCost, hardware_setup
from sim.costs.shape import StepShape
from sim.runner import run_config


def config(tmp_path, overhead: float, requests: int = 30):
    """Llama-3.1-8B on one H100, requests arriving 4 a second (`helpers.model_scenario`)."""
    path = scenario(tmp_path, hardware=f"prefill_overhead_s = {overhead}", requests=requests)
    return scenarios.load(path).base


@pytest.mark.parametrize("planned_ahead", [True, False])
def test_a_step_with_a_prefill_takes_the_overhead_more_and_a_decode_step_nothing(
        tmp_path, planned_ahead):
    setup = hardware_setup(config(tmp_path, 0.0))
    plain = HardwareCost(setup, 1e-3, 10e-6, async_scheduling=planned_ahead)
    slow = HardwareCost(setup, 1e-3, 10e-6, async_scheduling=planned_ahead,
                        prefill_overhead_s=0.04)
    mixed = StepShape(prefill_tokens=900, prefill_attention=900 * 901 // 2, prefill_seqs=1,
                      decode_seqs=8, decode_context=8 * 1500, sampled_seqs=9, decoding=1)
    assert slow.step_time(mixed) == pytest.approx(plain.step_time(mixed) + 0.04, rel=1e-12)
    decode = StepShape(decode_seqs=8, decode_context=8 * 1500, sampled_seqs=8, decoding=1)
    assert slow.step_time(decode) == plain.step_time(decode)
    arrays = StepShape(decode_seqs=np.array([8, 8]), decode_context=np.array([12000, 12008]),
                       sampled_seqs=np.array([8, 8]), decoding=1)
    assert slow.step_time(arrays).tolist() == plain.step_time(arrays).tolist()


@pytest.mark.parametrize("tp, layout", [(8, 'dtype = "fp8"'),
                                        (2, 'dp = 4\nep = 8\ndtype = "fp8"')])
def test_once_a_step_however_many_prefills_and_ranks(tmp_path, tp, layout):
    """Three prompts in one step, on one rank or four attention data-parallel ranks stepping
    together (DeepSeek-V3 on eight H200s): the overhead once."""
    base = scenarios.load(scenario(tmp_path, model='name = "deepseek-ai/DeepSeek-V3"',
                                   gpu="h200", tp=tp, hardware=layout)).base
    plain = build_cost(base)
    slow = build_cost(base.updated({"hardware.prefill_overhead_s": 0.03}))
    three = StepShape(prefill_tokens=900, prefill_attention=3 * 300 * 301 // 2, prefill_seqs=3,
                      decode_seqs=8, decode_context=8 * 1500, sampled_seqs=11, decoding=1,
                      prefill_square=3 * 300 * 300)
    assert slow.step_time(three) == pytest.approx(plain.step_time(three) + 0.03, rel=1e-12)


def test_async_scheduling_does_not_hide_it(tmp_path):
    """The server's own time overlaps the GPU's; the overhead is the GPU's to wait out:
    a step is the larger of its kernels and overhead, and the server's time."""
    setup = hardware_setup(config(tmp_path, 0.0))
    shape = StepShape(prefill_tokens=900, prefill_attention=900 * 901 // 2, prefill_seqs=1,
                      sampled_seqs=1)
    kernels = HardwareCost(setup, 0.0, 0.0).step_time(shape)
    for host in (kernels / 2, kernels + 0.01, kernels + 0.1):
        cost = HardwareCost(setup, host, 0.0, prefill_overhead_s=0.02)
        assert cost.step_time(shape) == pytest.approx(max(kernels + 0.02, host), rel=1e-12)


def test_a_first_token_comes_the_overhead_later_and_runs_fast_forward_exactly(tmp_path):
    runs = {}
    for overhead in (0.0, 0.025):
        cfg = config(tmp_path, overhead)
        fast = run_config(cfg)
        assert records(fast) == records(run_config(cfg, fast_forward=False))
        runs[overhead] = fast
    first = {k: np.asarray(r.request_columns()["first_token_s"]) for k, r in runs.items()}
    arrival = np.asarray(runs[0.0].request_columns()["arrival_s"])
    # the first request finds the server idle: its prefill's step is its first token
    assert first[0.025][0] - arrival[0] == pytest.approx(first[0.0][0] - arrival[0] + 0.025,
                                                         abs=1e-9)
    ttft = {k: float(np.mean(v - arrival)) for k, v in first.items()}
    assert ttft[0.025] > ttft[0.0] + 0.025  # and later ones wait behind others' prefills too
    steps = runs[0.025].step_columns()
    prefill = np.asarray(steps["num_prefill_tokens"]) > 0
    assert prefill.any() and (~prefill).any()


def test_a_negative_overhead_is_refused_in_one_line(tmp_path):
    with pytest.raises(ScenarioError) as err:
        config(tmp_path, -0.01)
    text = str(err.value)
    assert "hardware.prefill_overhead_s" in text and "\n" not in text


def test_the_report_says_the_overhead(tmp_path):
    assert "plus 25 ms each step with a prefill" in step_costs(config(tmp_path, 0.025))
    assert "each step with a prefill" not in step_costs(config(tmp_path, 0.0))
