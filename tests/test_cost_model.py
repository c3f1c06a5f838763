"""Cost models: the linear formula, the fitted form, the running decode-context sum and the
non-negative relative least-squares fit (profile files: test_profile_files.py)."""

import itertools
from dataclasses import replace

import numpy as np
import pytest

from engine.block_manager import BlockManager
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from engine.step_plan import StepPlan
from sim.costs.executor import CostModelExecutor, DecodeContext
from sim.costs import FEATURES, FittedCost, LinearCost, cost_model, shape_of
from sim.costs.fitted import feature_vector
from sim.costs.shape import gathered_keys
from sim.costs.fitting import error_summary, fit_relative, nnls
from sim.loop import run_loop
from sim.build import sequence_factory
from sim.workloads import build_workload
from helpers.configs import DEFAULT_MODEL as MODEL
from helpers.configs import ONE_REQUEST, resolved


def _seq(seq_id, prompt, outputs=0, computed=0):
    seq = Sequence(seq_id, prompt, 100, seq_id=seq_id)
    for _ in range(outputs):
        seq.append_token(None)
    seq.num_computed_tokens = computed
    return seq


def _plan():
    """A chunk of 30 tokens after 50 computed, a whole 20-token prompt, two decodes."""
    return StepPlan(step=0, prefills=[(_seq(1, 100, computed=50), 30), (_seq(2, 20), 20)],
                    decodes=[_seq(3, 10, outputs=3, computed=12), _seq(4, 40, outputs=1, computed=40)],
                    padding_seqs=2)


def test_step_shape_of_a_plan():
    shape = shape_of(_plan(), 16, 64)
    assert shape.prefill_tokens == 50 and shape.prefill_seqs == 2
    assert shape.prefill_attention == 30 * 80 + 20 * 20
    assert shape.prefill_context == 80  # only the chunk after a context gathers its keys
    assert shape.decode_seqs == 2 and shape.decode_context == 13 + 41
    assert shape.decode_span == 2 * 41
    assert shape.sampled_seqs == 2 + 1  # the decodes and the whole prompt; the chunk stops short
    assert shape.padding_seqs == 2 and shape.rows == 50 + 2 + 2
    assert shape.decode_gathered == 2 * 3 * 16  # one group, both up to the longest's 3 blocks
    assert shape.decoding == 1 and shape_of(StepPlan(step=0), 16, 64).decoding == 0
    # slots so wide that each sequence is its own group: each gathers only its own blocks
    assert shape_of(_plan(), 16, 1 << 20).decode_gathered == (1 + 3) * 16


def test_gathered_keys_follow_the_engines_groups_so_the_batch_order_matters():
    """Groups of consecutive sequences, each gathered up to its longest: the same lengths cost
    less sorted than interleaved, and never less than their own blocks nor more than all padded
    to the longest."""
    width = (4 << 20) // (16 * 64 * 4)  # a group: 4 sequences at 64 blocks (1,024 tokens)
    interleaved = [1024, 16, 1024, 16, 1024, 16, 1024, 16]
    assert gathered_keys(interleaved, 16, width) == 8 * 1024
    assert gathered_keys(sorted(interleaved), 16, width) == 4 * 16 + 4 * 1024
    rng = np.random.default_rng(0)
    for _ in range(50):
        lengths = rng.integers(1, 2000, size=rng.integers(1, 40)).tolist()
        padded_own = sum(-(-n // 16) * 16 for n in lengths)
        padded_all = len(lengths) * -(-max(lengths) // 16) * 16
        assert padded_own <= gathered_keys(lengths, 16, width) <= padded_all


def test_linear_cost_is_the_documented_formula():
    cost = LinearCost(step_overhead_s=0.01, prefill_token_s=0.001, decode_seq_s=0.002,
                      context_token_s=1e-5)
    result = CostModelExecutor(cost).execute(_plan())
    assert result.tokens is None
    assert result.duration_s == pytest.approx(0.01 + 0.001 * 50 + 0.002 * 2 + 1e-5 * 54)


def test_fitted_cost_is_the_rows_cost_plus_the_dot_product_of_features_and_coefficients():
    coefficients = (0.003, 4e-5, 1e-4, 1e-8, 2e-7, 5e-4, 1e-6, 3e-7, 3e-4, 2e-8, 1e-4)
    shape = shape_of(_plan(), 16, 64)
    linear = float(np.dot(coefficients, feature_vector(shape)))
    assert FittedCost(coefficients, MODEL).step_time(shape) == pytest.approx(linear)
    rows = FittedCost(coefficients, MODEL, row_knots=(1, 16, 64), row_costs=(1e-3, 2e-3, 5e-3),
                      row_tails=(1e-4, 2e-4, 4e-4))
    # 54 rows: between the knots 16 and 64, and 54 = 0b110110 has bits 1 and 2 set
    expected = 2e-3 + 3e-3 * (54 - 16) / 48 + 2e-4 + 4e-4
    assert rows.rows_cost(54) == pytest.approx(expected)
    assert rows.step_time(shape) == pytest.approx(linear + expected)


def test_rows_cost_hits_every_knot_interpolates_between_and_extends_the_last_segment():
    cost = FittedCost((0.0,) * len(FEATURES), MODEL, row_knots=(1, 8, 32),
                      row_costs=(1.0, 2.0, 5.0), row_tails=(0.5, 0.25, 0.125))
    assert [cost.rows_cost(r) for r in (0, 1, 8, 32)] == [0.0, 1.0, 2.0, 5.0]
    assert cost.rows_cost(16) == pytest.approx(3.0)  # no tail: a multiple of 8
    assert cost.rows_cost(7) == pytest.approx(1 + 6 / 7 + 0.5 + 0.25 + 0.125)
    assert cost.rows_cost(48) == pytest.approx(5.0 + 16 * 3 / 24)  # past the last knot


def test_wake_cost_rises_from_zero_through_the_measured_points_and_stays_flat_after():
    cost = FittedCost((0.0,) * len(FEATURES), MODEL, wake_idle_s=(0.001, 0.01),
                      wake_extra_s=(1e-4, 5e-4))
    assert cost.wake_cost(0.0) == 0.0 and cost.wake_cost(0.0005) == pytest.approx(5e-5)
    assert cost.wake_cost(0.0055) == pytest.approx(3e-4)
    assert cost.wake_cost(1.0) == pytest.approx(5e-4)
    assert FittedCost((0.0,) * len(FEATURES), MODEL).wake_cost(1.0) == 0.0


def test_the_step_after_an_idle_wait_pays_the_wake_cost_once():
    cost = FittedCost((1e-3,) + (0.0,) * (len(FEATURES) - 1), MODEL, wake_idle_s=(0.01,),
                      wake_extra_s=(2e-3,))
    executor = CostModelExecutor(cost)
    executor.after_idle(0.005)
    assert executor.execute(_plan()).duration_s == pytest.approx(1e-3 + 1e-3)
    assert executor.execute(_plan()).duration_s == pytest.approx(1e-3)


def test_simulated_steps_after_idleness_include_the_wake_cost_and_back_to_back_ones_do_not():
    cost = FittedCost((1e-3,) + (0.0,) * (len(FEATURES) - 1), MODEL, wake_idle_s=(0.01,),
                      wake_extra_s=(2e-3,))
    spec = {"num_requests": 3, "arrival": {"process": "constant", "rate": 10.0},
            "prompt_tokens": {"dist": "fixed", "value": 4},
            "output_tokens": {"dist": "fixed", "value": 2}}
    workload = build_workload(resolved({"workload": spec}).workload, np.random.default_rng(0))
    sched = Scheduler(SchedulerConfig(max_seq_len=64), BlockManager(16, 4))
    rec = run_loop(sched, CostModelExecutor(cost), RunRecorder(16), sequence_factory(workload),
                   arrival_s=workload.arrival_s, num_requests=3)
    steps = rec.step_columns()
    durations = np.subtract(steps["end_s"], steps["start_s"])
    # the first request finds a server that never ran: no wake-up; the others find it idle
    # for 0.1 s - 2 ms, past the last measured point: the full 2 ms
    assert durations.tolist() == pytest.approx([1e-3, 1e-3, 3e-3, 1e-3, 3e-3, 1e-3])


def test_after_prefill_cost_is_linear_in_the_prefill_from_zero_flat_after_and_ends():
    cost = FittedCost((0.0,) * len(FEATURES), MODEL, after_tokens=(100, 400),
                      after_extra_s=((1e-4, 5e-5), (4e-4, 1e-4)))
    assert cost.after_prefill_cost(50, 1) == pytest.approx(5e-5)  # half way from (0, 0)
    assert cost.after_prefill_cost(250, 2) == pytest.approx(7.5e-5)
    assert cost.after_prefill_cost(1000, 1) == pytest.approx(4e-4)  # flat past the last
    assert cost.after_prefill_cost(100, 3) == cost.after_prefill_cost(0, 1) == 0.0
    assert FittedCost((0.0,) * len(FEATURES), MODEL).after_prefill_cost(100, 1) == 0.0
    with pytest.raises(ValueError, match="after_prefill needs increasing prefill_tokens"):
        FittedCost((0.0,) * len(FEATURES), MODEL, after_tokens=(100,),
                   after_extra_s=((-1e-4,),))


def test_steps_after_a_prefill_pay_its_after_prefill_cost_until_the_next_prefill_or_idle():
    cost = FittedCost((1e-3,) + (0.0,) * (len(FEATURES) - 1), MODEL, after_tokens=(50,),
                      after_extra_s=((3e-4, 2e-4),))
    executor = CostModelExecutor(cost)
    decode = StepPlan(step=0, decodes=[_seq(3, 10, outputs=3, computed=12)])
    durations = [executor.execute(plan).duration_s for plan in
                 (_plan(), decode, decode, decode, _plan(), _plan(), decode)]
    # _plan() holds 50 prefill tokens; one right after another pays the first one's cost
    assert durations == pytest.approx([1e-3, 1.3e-3, 1.2e-3, 1e-3, 1e-3, 1.3e-3, 1.3e-3])
    executor.execute(_plan())
    executor.after_idle(0.01)
    assert executor.execute(decode).duration_s == pytest.approx(1e-3)


@pytest.mark.parametrize("bad", [{"step_overhead_s": -1.0}, {"context_token_s": "x"}])
def test_linear_coefficients_must_be_non_negative_numbers(bad):
    args = dict(step_overhead_s=0.0, prefill_token_s=0.0, decode_seq_s=0.0, context_token_s=0.0)
    with pytest.raises(ValueError, match=f"cost.{next(iter(bad))} must be a number >= 0"):
        LinearCost(**(args | bad))


# slots so wide that a group holds 1 to 8 sequences of this test's lengths (4-token blocks)
WIDE = dict(MODEL, d_model=1 << 15)


class CheckedExecutor:
    """A cost-model executor that also compares the running decode-context sum, maximum and
    block total, and the keys it counts as gathered, with the direct ones at every step."""

    def __init__(self, cost):
        self.inner, self.context, self.steps = CostModelExecutor(cost, block_size=4), \
            DecodeContext(4), 0
        gathered = FEATURES.index("decode_gathered")
        self.gathered = FittedCost(tuple(float(i == gathered) for i in range(len(FEATURES))),
                                   WIDE)
        self.counter = CostModelExecutor(self.gathered, block_size=4)

    def execute(self, plan):
        shape = shape_of(plan, 4, WIDE["d_model"] * 4)
        assert self.context.update(plan) == shape.decode_context, f"step {plan.step}"
        assert self.context.max_context * shape.decode_seqs == shape.decode_span
        assert self.context.blocks == sum(-(-seq.num_tokens // 4) for seq in plan.decodes)
        assert self.counter.execute(plan).duration_s == shape.decode_gathered
        self.steps += 1
        return self.inner.execute(plan)


@pytest.mark.parametrize("policy, chunked, queue", [("continuous", True, "fcfs"),
                                                     ("continuous", False, "priority"),
                                                     ("static", False, "fcfs")])
def test_running_decode_context_equals_the_direct_sum_and_max_under_preemption(policy, chunked,
                                                                               queue):
    bm = BlockManager(30, 4)
    sched = Scheduler(SchedulerConfig(policy=policy, queue=queue, chunked_prefill=chunked,
                                      max_num_seqs=8, max_num_batched_tokens=24,
                                      max_batch_size=6, max_seq_len=120), bm)
    spec = {"num_requests": 150, "arrival": {"process": "poisson", "rate": 200.0},
            "prompt_tokens": {"dist": "uniform", "low": 1, "high": 60},
            "output_tokens": {"dist": "uniform", "low": 1, "high": 40},
            "priority": {"dist": "choice", "values": [0, 1], "weights": [1, 1]}}
    workload = build_workload(resolved({"workload": spec}).workload, np.random.default_rng(5))
    executor = CheckedExecutor(LinearCost(1e-3, 1e-4, 1e-4, 1e-6))
    run_loop(sched, executor, RunRecorder(30), sequence_factory(workload),
             arrival_s=workload.arrival_s, num_requests=150)
    assert sched.num_preemptions > 0 and executor.steps > 100


def _brute_force_nnls(a, b):
    best, best_x = np.inf, None
    n = a.shape[1]
    for k in range(n + 1):
        for active in itertools.combinations(range(n), k):
            x = np.zeros(n)
            if active:
                x[list(active)] = np.linalg.lstsq(a[:, list(active)], b, rcond=None)[0]
            if x.min() >= 0 and np.linalg.norm(a @ x - b) < best:
                best, best_x = np.linalg.norm(a @ x - b), x
    return best_x


@pytest.mark.parametrize("seed", range(6))
def test_nnls_matches_a_brute_force_search(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(12, 4)), rng.normal(size=12)
    assert np.allclose(nnls(a, b), _brute_force_nnls(a, b), atol=1e-8)


def test_relative_fit_recovers_exact_coefficients_with_zeros_over_scales_of_magnitude():
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(40), rng.integers(0, 2000, 40), rng.integers(0, 10**6, 40),
                         rng.integers(0, 5, 40)]).astype(float)  # [40, 4]
    truth = np.array([2e-3, 4e-4, 0.0, 1e-3])
    fitted = fit_relative(x, x @ truth)
    assert np.allclose(fitted, truth, rtol=1e-6, atol=1e-12)
    assert error_summary(x @ fitted, x @ truth)["max_abs_rel_error"] < 1e-6


def test_relative_fit_weighs_small_steps_like_large_ones():
    # Two regimes that no single line fits: a plain least-squares fit would sacrifice the
    # small steps; the relative fit splits the error evenly.
    x = np.array([[1, 1], [1, 2], [1, 1000], [1, 2000]], dtype=float)
    y = np.array([0.002, 0.003, 1.5, 3.5])
    err = np.abs(x @ fit_relative(x, y) - y) / y
    assert err[:2].max() < 0.6 and err[2:].max() < 0.6


def test_live_cost_model_is_not_a_simulated_one():
    with pytest.raises(ValueError, match="cost.model must be one of profile, linear, live"):
        cost_model(replace(resolved({"workload": ONE_REQUEST}).cost, model="live"), MODEL)
