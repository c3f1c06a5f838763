"""Attention from the measured tables: past their reach, a step takes their time at the nearest
(batch, length) they reach, times the roofline's growth from there, so that a step's time does
not jump where the tables end (the roofline may be several times off them), and the run says so
once; a model whose full layers' attention is measured and whose sliding layers' is not says
which is which."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core")

from helpers.model_scenario import setup_of  # noqa: E402
from sim import notes  # noqa: E402
from sim.costs.hardware.cost import HardwareCost  # noqa: E402
from sim.costs.hardware.interpolation import Curve, Grid  # noqa: E402
from sim.costs.shape import StepShape  # noqa: E402


def test_past_the_reach_each_curve_is_taken_where_it_ends_and_carried_by_the_growth():
    # batch 1 measured to length 100 (reached to 200), batch 4 to 50 (reached to 100)
    one, four = Curve([1, 10, 100], [1.0, 2.0, 4.0]), Curve([1, 10, 50], [2.0, 4.0, 6.0])
    grid = Grid([1.0, 4.0], [one, four])
    flat = lambda b, n: 1.0  # noqa: E731  (no growth: each curve's time where it ends)

    def at(curve, length=None):  # seconds, by default where the curve ends (2x its last)
        x = curve.high if length is None else math.log(length)
        return math.exp(curve.log_at_one(x)) * 1e-3

    assert grid.anchored(1, 150, flat) == grid.at_one(1, 150)  # reached: itself
    assert grid.anchored(1, 500, flat) == pytest.approx(at(one), rel=1e-12)
    assert grid.anchored(4, 500, flat) == pytest.approx(at(four), rel=1e-12)
    # batch 2 blends the two, each where it ends (the grid's lookup: NaN past 100)
    assert math.isnan(grid.at_one(2, 150))
    assert grid.anchored(2, 150, flat) == pytest.approx(
        math.sqrt(at(one, 150) * at(four)), rel=1e-12)
    # the batch brought to 2x the largest measured (extrapolated from the two), the length kept
    assert grid.anchored(100, 10, flat) == pytest.approx(grid.at_one(8 * (1 - 1e-12), 10),
                                                         rel=1e-9)
    # carried by the growth from where each curve is taken: here linear in the length
    linear = lambda b, n: 400 / n  # noqa: E731
    assert grid.anchored(1, 400, linear) == pytest.approx(2 * at(one), rel=1e-12)
    assert grid.anchored(2, 400, linear) == pytest.approx(
        math.sqrt(2 * at(one) * 4 * at(four)), rel=1e-12)


def decode(cost, seqs, length):
    return cost.step_time(StepShape(decode_seqs=seqs, decode_context=seqs * length,
                                    sampled_seqs=seqs, decoding=1))


def prefill(cost, tokens):
    return cost.step_time(StepShape(prefill_tokens=tokens, prefill_attention=tokens * tokens,
                                    prefill_seqs=1, sampled_seqs=1, prefill_square=tokens ** 2))


def first_past(reached, low: int) -> int:
    """The fewest of a length past the reach, by bisection from a `low` that is reached."""
    high = low
    while reached(high):
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if reached(mid) else (low, mid)
    return high


@pytest.mark.parametrize("model, gpu, tp, hardware", [
    ('name = "meta-llama/Llama-3.1-8B"', "b200", 1, 'framework = "trtllm"'),
    # a sliding window's decode is timed at 3.5 to 8.6 times the roofline's where it ends
    ('name = "openai/gpt-oss-120b"', "h200", 2, 'dtype = "fp8"'),
    # latent attention measured as a whole block, its projections in it
    ('name = "deepseek-ai/DeepSeek-V3"', "h200", 8, 'dtype = "fp8"\nframework = "sglang"'),
])
def test_a_step_one_key_past_the_reach_costs_what_the_last_one_reached_does(
        tmp_path, capsys, model, gpu, tp, hardware):
    cost = HardwareCost(setup_of(tmp_path, model=model, gpu=gpu, tp=tp, hardware=hardware,
                                 max_seq_len=32768))
    ops, windows = cost.measured, [group.window for group in cost.attention.decode_groups]
    notes.forget()
    capsys.readouterr()
    seqs = 256  # measured to 2,048 keys at most: reached to 4,096
    edge = first_past(lambda n: all(not math.isnan(ops.decode_attention(w, seqs, seqs * n))
                                    for w in windows), 64)
    inside, past = decode(cost, seqs, edge - 1), decode(cost, seqs, edge)
    assert past == pytest.approx(inside, rel=1e-3)
    assert decode(cost, seqs, 2 * edge) > past  # and grows from there as the roofline does
    for length in (700, 3000):  # one sequence more than a measured batch, past its reach
        attention = [cost.attention.plus_decode(0.0, n, n * length) for n in (1024, 1025)]
        assert attention[1] == pytest.approx(attention[0], rel=1e-2)
    err = capsys.readouterr().err
    assert err.count("decode attention of some steps is past the measured tables' reach") == 1
    assert "costed there by the roofline, scaled to meet the tables where they end" in err
    # one prompt: measured to 16,384 tokens, reached to 32,768
    tokens = first_past(lambda n: all(not math.isnan(ops.prefill_attention(
        w, 1, n * (n + 1) / 2, n)) for w in windows), 1024)
    assert prefill(cost, tokens) == pytest.approx(prefill(cost, tokens - 1), rel=1e-3)


def test_past_the_reach_attention_grows_as_the_rooflines_does(tmp_path):
    """Past the reach in length (one prompt longer than 2x the longest measured) and in batch
    (more sequences than 2x the most measured), attention grows from where the tables end by
    the roofline's own ratio (the roofline's attention: the same model with kernels =
    "roofline")."""
    model, hardware = 'name = "meta-llama/Llama-3.1-8B"', 'framework = "trtllm"\n'
    measured, roofline = (HardwareCost(setup_of(tmp_path, model=model, gpu="b200",
                                                hardware=hardware + f'kernels = "{kernels}"',
                                                max_seq_len=131072))
                          for kernels in ("measured", "roofline"))

    def prefill_attention(cost, tokens):
        return cost.attention.plus_prefill(0.0, StepShape(
            prefill_tokens=tokens, prefill_attention=tokens * tokens, prefill_seqs=1,
            sampled_seqs=1, prefill_square=tokens ** 2))

    def decode_attention(cost, seqs, length):
        return cost.attention.plus_decode(0.0, seqs, seqs * length)

    edge = 32768  # one prompt: measured to 16,384 tokens
    assert not math.isnan(measured.measured.prefill_attention(0, 1, edge * (edge + 1) / 2, edge))
    grown = prefill_attention(measured, 2 * edge) / prefill_attention(measured, edge)
    assert grown == pytest.approx(prefill_attention(roofline, 2 * edge)
                                  / prefill_attention(roofline, edge), rel=1e-9)
    assert grown > 3  # a quadratic's growth, not the tables' last segment's or a jump
    edge = 4096  # sequences of 100 keys: measured up to 2,048 sequences
    grown = decode_attention(measured, 3 * edge, 100) / decode_attention(measured, edge, 100)
    assert grown == pytest.approx(decode_attention(roofline, 3 * edge, 100)
                                  / decode_attention(roofline, edge, 100), rel=1e-9)


def test_a_run_of_decode_steps_past_the_reach_costs_what_its_steps_do_one_by_one(tmp_path):
    cost = HardwareCost(setup_of(tmp_path, model='name = "openai/gpt-oss-120b"', gpu="h200",
                                 tp=2, hardware='dtype = "fp8"', max_seq_len=32768))
    seqs = np.array([1, 256, 256, 600, 3000])
    length = np.array([100, 1000, 20000, 5000, 30])
    shape = lambda d, n: StepShape(decode_seqs=d, decode_context=d * n, sampled_seqs=d,
                                   decoding=1)
    together = cost.step_time(shape(seqs, length))
    assert together.tolist() == [cost.step_time(shape(int(d), int(n)))
                                 for d, n in zip(seqs, length)]


def test_full_and_sliding_layers_measured_apart_are_named_apart(tmp_path, capsys):
    # the tables time gpt-oss's window of 128 keys, not one of 1,024
    sources = {window: setup_of(tmp_path, model='name = "openai/gpt-oss-120b"' + window,
                                gpu="h200", tp=2, hardware='dtype = "fp8"').kernels.sources()
               for window in ("", "\nsliding_window = 1024")}
    assert sources[""]["prefill_attention"] == sources[""]["decode_attention"] == "measured"
    mixed = sources["\nsliding_window = 1024"]
    HardwareCost(setup_of(tmp_path, model='name = "openai/gpt-oss-120b"\nsliding_window = 1024',
                          gpu="h200", tp=2, hardware='dtype = "fp8"'))
    assert "prefill_attention" not in mixed and "decode_attention" not in mixed
    for op in ("prefill_attention", "decode_attention"):
        assert mixed[f"{op} (full layers)"] == "measured"
        assert mixed[f"{op} (sliding layers)"] == "roofline"
    assert "prefill_attention (sliding layers), decode_attention (sliding layers) of this " \
        "model and GPU; costed by the roofline" in capsys.readouterr().err
    # every layer sliding (Mistral-7B's window of 4,096, which no table times): no full layers
    # to call measured
    mistral = setup_of(tmp_path, model='name = "mistralai/Mistral-7B-v0.1"', gpu="h100-sxm",
                       max_seq_len=32768).kernels.sources()
    assert {op: where for op, where in mistral.items() if "attention" in op} == \
        {"prefill_attention": "roofline", "decode_attention": "roofline"}
