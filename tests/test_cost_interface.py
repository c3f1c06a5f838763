"""The one cost-model interface (`sim.costs.model.CostModel`): every shipped cost model provides
it, a shape of arrays predicts exactly what its steps one by one do, a user's model with
`step_time` alone runs a simulation, and the simulator reads no cost model by getattr."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import scenarios
from engine.step_plan import StepPlan
from helpers.configs import DEFAULT_MODEL as MODEL
from helpers.runs import CASES, config_of, records
from sim.costs import (COUNTS, FEATURES, CostModel, CostModelExecutor, FittedCost, LinearCost,
                       StepShape, load_profile)
from sim.costs.calibrate import ScaledCost
from sim.costs.fitted import feature_vector
from sim.costs.jitter import Jitter
from sim.build import build_cost, swap_block_s
from sim.runner import run_config

ROOT = Path(__file__).resolve().parents[1]
# every feature priced, rows with knots and tails, wake-up and after-prefill costs
FULL = FittedCost(tuple(1e-3 / (i + 1) for i in range(len(FEATURES))), MODEL, "full",
                  row_knots=(1, 8, 64), row_costs=(1e-4, 5e-4, 3e-3),
                  row_tails=(1e-5, 2e-5, 4e-5), wake_idle_s=(0.002, 0.01),
                  wake_extra_s=(2e-4, 7e-4), reference_s=0.004, after_tokens=(64, 256),
                  after_extra_s=((1e-4, 5e-5), (3e-4, 1e-4)))


class Minimal(CostModel):
    """A user's cost model: `step_time` alone, written for numbers and arrays alike; it counts
    the calls that predicted a run of steps at once."""

    def __init__(self):
        self.array_calls = 0

    def step_time(self, shape):
        self.array_calls += isinstance(shape.decode_context, np.ndarray)
        return 2e-3 + 5e-5 * shape.rows


NAMES = ("linear", "profile", "full fitted", "scaled", "hardware", "minimal")


@pytest.fixture(scope="module")
def models() -> dict:
    """Every shipped kind of cost model (and the user's), by name (NAMES)."""
    hardware = build_cost(scenarios.load("llama3-8b-h100").base)
    return {"linear": LinearCost(0.003, 1e-4, 2e-4, 1e-6), "profile": load_profile("default"),
            "full fitted": FULL, "scaled": ScaledCost(FULL, 1.3), "hardware": hardware,
            "minimal": Minimal()}


@pytest.mark.parametrize("name", NAMES)
def test_every_cost_model_provides_the_interface_with_its_defaults(models, name):
    cost = models[name]
    assert isinstance(cost, CostModel) and isinstance(cost.source, str)
    assert isinstance(cost.step_time(StepShape(prefill_tokens=32, prefill_attention=32 * 32,
                                               prefill_seqs=1, sampled_seqs=1)), float)
    assert cost.jitter is None or isinstance(cost.jitter, Jitter)
    assert cost.reference_s is None or cost.reference_s > 0
    assert isinstance(cost.counts_gathered, bool)
    assert cost.counts_gathered is False or cost.model["d_model"] > 0
    assert cost.wake_cost(0.005) >= 0.0 and cost.after_prefill_cost(100, 1) >= 0.0
    assert isinstance(cost.after_prefill_steps, int) and cost.after_prefill_steps >= 0
    swap = cost.swap_block_s(16)
    assert swap is None or swap > 0


def test_the_hooks_default_to_nothing():
    cost = Minimal()
    assert (cost.source, cost.model, cost.jitter, cost.reference_s) == \
        ("the cost model", None, None, None)
    assert (cost.counts_gathered, cost.after_prefill_steps) == (False, 0)
    assert cost.wake_cost(1.0) == cost.after_prefill_cost(500, 1) == 0.0
    assert cost.swap_block_s(16) is None


def test_a_model_without_its_own_swap_time_gets_the_memcpy_and_the_hardware_model_its_link(
        tmp_path, models):
    config = config_of(tmp_path, CASES["continuous, preemptions"])
    memcpy, hardware = swap_block_s(config, Minimal()), models["hardware"]
    assert memcpy == swap_block_s(config, models["linear"]) > 0
    assert swap_block_s(config, hardware) == hardware.swap_block_s(
        config.engine.block_size) != memcpy
    assert swap_block_s(config, ScaledCost(hardware, 2.0)) == swap_block_s(config, hardware)


def test_a_scaled_model_plans_ahead_as_the_model_it_scales(models):
    hardware = models["hardware"]
    assert hardware.async_scheduling and ScaledCost(hardware, 2.0).async_scheduling
    assert not models["linear"].async_scheduling
    assert not ScaledCost(models["linear"], 2.0).async_scheduling


def _decode_run_shape(size: int, seed: int) -> StepShape:
    """A run's shape as `CostModelExecutor.execute_run` builds it: arrays for the counts that
    change from step to step, numbers for the rest."""
    rng = np.random.default_rng(seed)
    decodes = rng.integers(1, 40, size)  # [S]
    context = decodes * rng.integers(10, 900, size)  # [S]
    return StepShape(decode_seqs=decodes, decode_context=context,
                     padding_seqs=rng.integers(0, 3, size), sampled_seqs=decodes,
                     decode_span=decodes * (context // decodes + rng.integers(0, 50, size)),
                     decode_gathered=context + rng.integers(0, 100, size), decoding=1)


def _steps(shape: StepShape) -> list[StepShape]:
    """The shape of every step of a shape of arrays, numbers only."""
    size = max(np.size(v) for v in shape)
    return [StepShape(*(int(np.broadcast_to(v, size)[i]) for v in shape)) for i in range(size)]


@pytest.mark.parametrize("name", NAMES)
def test_a_shape_of_arrays_predicts_bit_for_bit_what_its_steps_do_one_by_one(models, name):
    cost = models[name]
    for seed in range(3):
        shape = _decode_run_shape(50, seed)
        times = cost.step_time(shape)
        assert isinstance(times, np.ndarray) and times.shape == (50,)
        assert times.tolist() == [cost.step_time(step) for step in _steps(shape)]


def _mixed_shape() -> StepShape:
    """Steps with prefill chunks beside their decodes, as arrays."""
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 300, 40)  # [S]
    return _decode_run_shape(40, 5)._replace(
        prefill_tokens=tokens, prefill_attention=tokens * (tokens + rng.integers(0, 500, 40)),
        prefill_seqs=(tokens > 0).astype(np.int64), prefill_square=tokens * tokens)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "hardware"])
def test_prefill_counts_may_be_arrays_too(models, name):
    cost, shape = models[name], _mixed_shape()
    assert cost.step_time(shape).tolist() == [cost.step_time(s) for s in _steps(shape)]


def test_the_hardware_model_takes_arrays_of_decode_only_steps_alone(models):
    with pytest.raises(ValueError, match="arrays of decode-only steps"):
        models["hardware"].step_time(_mixed_shape())


def test_the_fitted_model_prices_each_feature_with_its_own_coefficient():
    """`FittedCost.step_time` is written out, not looped over FEATURES: each one-hot
    coefficient prices exactly its feature (`feature_vector`, FEATURES order)."""
    shape = StepShape(*range(3, 3 + len(COUNTS)))  # every count distinct and non-zero
    for i, name in enumerate(FEATURES):
        cost = FittedCost(tuple(float(j == i) for j in range(len(FEATURES))), MODEL)
        assert cost.step_time(shape) == feature_vector(shape)[i] == \
            (1 if name == "step" else getattr(shape, name)), name


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_users_model_with_step_time_alone_runs_a_simulation(tmp_path, fast_forward):
    config = config_of(tmp_path, CASES["continuous, preemptions"], n=80, rate=40.0)
    cost = Minimal()
    recorder = run_config(config, cost=cost, fast_forward=fast_forward)
    requests = recorder.request_columns()
    assert recorder.num_steps > 100 and len(requests["status"]) == 80
    assert all(s == "finished" for s in requests["status"])
    steps = recorder.step_columns()
    durations = np.asarray(steps["end_s"]) - np.asarray(steps["start_s"])
    rows = sum(np.asarray(steps[f"num_{name}"])
               for name in ("prefill_tokens", "decode_seqs", "padding_seqs"))  # [S]
    assert durations == pytest.approx(2e-3 + 5e-5 * rows)
    if fast_forward:
        assert cost.array_calls > 0  # runs of decode steps were predicted at once
        assert records(recorder) == records(run_config(config, cost=Minimal(),
                                                       fast_forward=False))


def test_the_executor_refuses_what_is_not_a_cost_model():
    class Predicts:
        def predict(self, *counts):
            return 0.01

    with pytest.raises(TypeError, match="a cost model subclasses sim.costs.CostModel"):
        CostModelExecutor(Predicts())
    config = scenarios.load("kv-pressure", ["workload.num_requests=20"]).runs()[0].config
    with pytest.raises(TypeError, match="a cost model subclasses sim.costs.CostModel"):
        run_config(config, cost=Predicts())  # as docs/sim/cost_models.md says
    with pytest.raises(TypeError, match="abstract"):
        CostModel()
    assert CostModelExecutor(Minimal()).execute(StepPlan(step=0)).duration_s == 2e-3


def test_the_simulator_reads_no_cost_model_by_getattr_or_hasattr():
    lookup = re.compile(r"\b(getattr|hasattr)\((cost|cost_model)\b")
    found = [f"{path.relative_to(ROOT)}:{n}" for folder in ("sim", "benchmarks", "reports")
             for path in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if lookup.search(line)]
    assert found == []
