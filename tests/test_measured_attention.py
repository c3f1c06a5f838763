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
from sim.costs.hardware.cost import HardwareCost  # noqa: E402
from sim.costs.hardware.interpolation import Curve, Grid  # noqa: E402
from sim.costs.shape import StepShape  # noqa: E402


def test_the_nearest_point_reached_is_the_batch_then_the_length_brought_into_reach():
    # batch 1 measured to length 100 (reached to 200), batch 4 to 50 (reached to 100)
    grid = Grid([1.0, 4.0], [Curve([1, 10, 100], [1.0, 2.0, 4.0]),
                             Curve([1, 10, 50], [2.0, 4.0, 6.0])])

    def nearest(batch, length):
        seconds, b, n = grid.nearest(batch, length)
        b, n = round(b, 9), round(n, 9)
        inside = grid.at_one(b * (1 - 1e-12) if b > 4 else b, n * (1 - 1e-12))  # not rounded out
        assert seconds == pytest.approx(inside, rel=1e-9)
        return b, n

    assert nearest(1, 150) == (1, 150)  # reached: itself
    assert grid.nearest(1, 150)[0] == grid.at_one(1, 150)
    assert nearest(1, 500) == (1, 200)
    assert nearest(4, 500) == (4, 100)
    assert nearest(2, 500) == (2, 100)  # between the two: what both reach
    assert math.isnan(grid.at_one(2, 150))
    assert nearest(100, 10) == (8, 10)  # the batch to 2x the largest, the length reached there
    assert nearest(100, 500) == (8, 100)


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
    # a sliding window's decode is measured at 4 to 15 times the roofline's
    ('name = "openai/gpt-oss-120b"', "h200", 2, 'dtype = "fp8"'),
])
def test_a_step_one_key_past_the_reach_costs_what_the_last_one_reached_does(
        tmp_path, capsys, model, gpu, tp, hardware):
    cost = HardwareCost(setup_of(tmp_path, model=model, gpu=gpu, tp=tp, hardware=hardware,
                                 max_seq_len=32768))
    ops, windows = cost.measured, [group.window for group in cost.attention.decode_groups]
    capsys.readouterr()
    seqs = 256  # measured to 2,048 keys at most: reached to 4,096
    edge = first_past(lambda n: all(not math.isnan(ops.decode_attention(w, seqs, seqs * n))
                                    for w in windows), 64)
    inside, past = decode(cost, seqs, edge - 1), decode(cost, seqs, edge)
    assert past == pytest.approx(inside, rel=1e-3)
    assert decode(cost, seqs, 2 * edge) > past  # and grows from there as the roofline does
    err = capsys.readouterr().err
    assert err.count("decode attention of some steps is past the measured tables' reach") == 1
    assert "costed there by the roofline, scaled to meet the tables where they end" in err
    # one prompt: measured to 16,384 tokens, reached to 32,768
    tokens = first_past(lambda n: all(not math.isnan(ops.prefill_attention(
        w, 1, n * (n + 1) / 2, n)) for w in windows), 1024)
    assert prefill(cost, tokens) == pytest.approx(prefill(cost, tokens - 1), rel=1e-3)


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
