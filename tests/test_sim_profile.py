"""Profiling on the isolated grid (`profile_engine(..., method="grid")`, kept to compare with the
served fit): a quick profile of a tiny model is measured, fitted, written and loadable, and the
simulator runs with it."""

import copy
import json

import numpy as np
import pytest

from engine.block_manager import BlockManager
from sim.costs.jitter import Jitter
from sim.costs import FEATURES, LinearCost, StepShape, load_profile, shape_of
from sim.costs.fitted import ROW_TAILS
from sim.profiling.isolated import executor_cost, predict_profile_points
from sim.profiling.profiler import profile_engine
from sim.profiling.fit import design_matrix, knots_for
from sim.profiling.wake import AFTER_STEPS, AFTER_TOKENS
from sim.profiling.grid import ShapeSpec, build_plan, grid_shapes, held_out_shapes, release
from sim.runner import run_config
from helpers.configs import resolved

TINY = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
        "max_seq_len": 2048}


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "tiny.json"
    data = profile_engine(TINY, path, quick=True, progress=False, repeats=2, jitter_s=1.0,
                          method="grid")
    return path, data


def test_profile_file_holds_model_machine_grid_fit_and_held_out_error(profile):
    path, data = profile
    assert json.loads(path.read_text()) == data
    assert data["model"] == TINY | {"seed": 0} and data["fit"]["quick"] is True
    assert data["machine"]["numpy"] == np.__version__ and data["machine"]["cpu_count"] >= 1
    fit = data["cost_model"]
    report = data["fit"]
    assert set(fit["coefficients"]) == set(FEATURES) == set(report["executor_coefficients"])
    assert all(c >= 0 for c in fit["coefficients"].values())
    assert fit["coefficients"] == pytest.approx({f: report["executor_coefficients"][f] +
                                                 report["loop_coefficients"].get(f, 0.0)
                                                 for f in FEATURES})
    assert fit["rows"]["knots"][0] == 1 and set(fit["rows"]["tails_s"]) == set(ROW_TAILS)
    assert fit["rows"]["knots"][-1] == max(p["prefill_tokens"] + p["decode_seqs"] +
                                           p["padding_seqs"] for p in data["grid"]
                                           if p["split"] == "train")
    extra = fit["wake"]["extra_s"]
    assert len(extra) == len(fit["wake"]["idle_s"]) and extra == sorted(extra) and min(extra) >= 0
    after = fit["after_prefill"]  # lengths past the model's max_seq_len are left out
    assert after["prefill_tokens"] == [n for n in AFTER_TOKENS if n <= TINY["max_seq_len"]]
    assert [len(row) for row in after["extra_s"]] == [AFTER_STEPS] * len(after["prefill_tokens"])
    assert min(min(row) for row in after["extra_s"]) >= 0
    assert load_profile(path).after_extra_s == tuple(map(tuple, after["extra_s"]))
    assert data["fit"]["loop"]["steps"] > 50
    jitter = Jitter.from_dict(fit["jitter"])  # measured over 1 s: timescales up to 0.25 s
    assert all(t <= 0.25 for t in jitter.timescales_s) and jitter.log_std > 0
    assert load_profile(path).jitter == jitter
    splits = [p["split"] for p in data["grid"]]
    assert splits.count("train") == data["fit"]["train"]["points"] > len(FEATURES)
    assert splits.count("held_out") == data["fit"]["held_out"]["points"] > 0
    held = data["fit"]["held_out"]
    assert 0 <= held["median_abs_rel_error"] <= held["p90_abs_rel_error"] <= held["max_abs_rel_error"]


def test_recorded_errors_follow_from_the_coefficients_and_points(profile):
    _, data = profile
    predicted = predict_profile_points(data)
    measured = np.array([p["measured_s"] for p in data["grid"]])
    held = np.array([p["split"] == "held_out" for p in data["grid"]])
    err = np.abs(predicted - measured) / measured
    assert np.median(err[held]) == pytest.approx(data["fit"]["held_out"]["median_abs_rel_error"])
    assert np.median(err[~held]) == pytest.approx(data["fit"]["train"]["median_abs_rel_error"])


def test_simulation_runs_on_a_profile_given_by_path(profile):
    path, _ = profile
    cost = load_profile(str(path))
    assert cost.model["d_model"] == 32
    cfg = {"name": "p", "description": "", "seed": 0, "mode": "simulate", "model": TINY,
           "engine": {"block_size": 16, "num_kv_blocks": 64, "max_num_seqs": 8,
                      "max_num_batched_tokens": 256},
           "scheduler": {"policy": "continuous", "queue": "fcfs", "chunked_prefill": False,
                         "max_batch_size": 8, "batch_timeout_s": 0.0},
           "cost": {"model": "profile", "profile": str(path), "step_overhead_s": 0.0,
                    "prefill_token_s": 0.0, "decode_seq_s": 0.0, "context_token_s": 0.0},
           "workload": {"num_requests": 30, "arrival": {"process": "poisson", "rate": 100.0},
                        "prompt_tokens": {"dist": "uniform", "low": 4, "high": 64},
                        "output_tokens": {"dist": "fixed", "value": 8},
                        "priority": None, "trace": None},
           "slo": {"ttft_s": 1.0, "tpot_s": 0.1}}
    rec = run_config(resolved(cfg))
    assert rec.statuses == ["finished"] * 30
    other = copy.deepcopy(cfg)
    other["model"] = dict(TINY, d_model=64)
    with pytest.raises(ValueError, match="was measured on another model"):
        run_config(resolved(other))


def test_built_plans_have_the_shape_they_were_built_from():
    bm = BlockManager(200, 16)
    shape = ShapeSpec(prefills=((100, 28), (0, 5)), decodes=(17, 40, 3), padding=2)
    plan = build_plan(shape, bm, np.random.default_rng(0), 64)
    s = shape_of(plan, 16, 256)
    assert (s.prefill_tokens, s.prefill_attention, s.prefill_seqs) == (33, 28 * 128 + 25, 2)
    assert (s.decode_seqs, s.decode_context, s.padding_seqs) == (3, 60, 2)
    assert (s.sampled_seqs, s.prefill_context, s.decode_span) == (3 + 2, 128, 3 * 40)
    assert s.decode_gathered == 3 * 48  # one group: three sequences up to 40 tokens' 3 blocks
    assert all(seq.num_computed_tokens == seq.num_tokens - 1 for seq in plan.decodes)
    release(plan, bm)
    assert bm.num_used == 0


def test_grids_stay_within_the_kv_budget_and_held_out_points_are_seeded():
    assert all(s.kv_tokens <= 4096 for s in grid_shapes(max_tokens=4096))
    assert all(max([c + n for c, n, *_ in s.prefills] + list(s.decodes)) <= 512
               for s in grid_shapes(max_seq_len=512) + held_out_shapes(
                   np.random.default_rng(0), 20, max_seq_len=512))
    rows = {len(s.decodes) for s in grid_shapes()} | {n for s in grid_shapes()
                                                       for _, n, *_ in s.prefills}
    assert set(range(1, 17)) <= rows  # every small row count: each has its own BLAS tail
    a = held_out_shapes(np.random.default_rng(1), 12)
    assert a == held_out_shapes(np.random.default_rng(1), 12) and len(a) == 12


def test_the_design_matrix_is_what_the_fitted_cost_computes():
    shapes = [StepShape(prefill_tokens=n, prefill_attention=n * n, prefill_seqs=1,
                        sampled_seqs=1) for n in (1, 3, 8, 20, 64, 100)]
    shapes += [StepShape(decode_seqs=b, decode_context=b * 40, sampled_seqs=b,
                         decode_span=b * 50, padding_seqs=p) for b, p in ((1, 0), (7, 2), (30, 5))]
    knots = knots_for(s.rows for s in shapes)
    assert knots == (1, 8, 64, 100)  # the candidate knots that were measured, and the largest
    rng = np.random.default_rng(0)
    cost = executor_cost({"model": TINY, "cost_model": {
        "executor_coefficients": dict(zip(FEATURES, [0.0, *rng.random(len(FEATURES) - 1)])),
        "rows": {"knots": list(knots), "costs_s": rng.random(len(knots)).tolist(),
                 "tails_s": dict(zip(ROW_TAILS, rng.random(3)))}}})
    params = np.concatenate([cost.row_costs, cost.row_tails, cost.coefficients[1:]])
    assert design_matrix(shapes, knots) @ params == pytest.approx(
        [cost.step_time(s) for s in shapes])


def test_a_chunk_followed_by_more_prompt_samples_nothing():
    bm = BlockManager(50, 16)
    plan = build_plan(ShapeSpec(prefills=((0, 20, 12), (16, 4))), bm, np.random.default_rng(0), 64)
    first, second = plan.prefills
    assert first[0].prompt_len == 32 and first[1] == 20 and bm.capacity(first[0].seq_id) >= 20
    assert shape_of(plan, 16, 256).sampled_seqs == 1  # only the chunk that completes its prompt
    release(plan, bm)
    assert bm.num_used == 0


def test_profile_records_its_reference_time_and_calibration_compares_the_machine_with_it(profile):
    """The profile records the reference step's time on this machine (the same step in the
    same units: the load of a shared machine moves it, but not by orders of magnitude), a
    machine's speed is its time now over that, and the calibrated cost is the profile's
    scaled by the speed."""
    from engine.model import ModelConfig, init_params
    from sim.costs.calibrate import ScaledCost, reference_of
    from sim.profiling.reference import measure_speed

    path, data = profile
    cost = load_profile(path)
    assert reference_of(cost) == data["cost_model"]["reference_s"] > 0
    params = init_params(ModelConfig(**TINY))
    now_s = measure_speed(params, TINY["vocab_size"], 1.0, seconds=0.3)  # over 1 s: seconds
    assert 0.02 < now_s / reference_of(cost) < 50  # the profiled step, in seconds
    # a moment later, against the time just measured: about the same speed
    assert 0.2 < measure_speed(params, TINY["vocab_size"], now_s, seconds=0.3) < 5
    speed = now_s / reference_of(cost)
    shape = StepShape(prefill_tokens=32, prefill_seqs=1, decode_seqs=8, decode_context=1024)
    assert ScaledCost(cost, speed).step_time(shape) == pytest.approx(
        speed * cost.step_time(shape))
    assert reference_of(load_profile("default")) > 0  # the shipped profile records one too
    with pytest.raises(ValueError, match="records no reference step time"):
        reference_of(LinearCost(0.003, 1e-4, 1e-4, 1e-6))
