"""The machine's jitter: the fit recovers a known process, the simulated process has the
documented statistics whatever the step size, and `cost.jitter` scales a simulation's steps
reproducibly (and only when asked)."""

import json
import math

import numpy as np
import pytest

import scenarios
from scenarios import ScenarioError
from sim.costs.executor import CostModelExecutor
from sim.costs import CostModel, load_profile
from sim.costs.jitter import Jitter, SpeedProcess, fit, lag_covariance
from sim.checks import check_scenario
from sim.runner import run_config

KNOWN = Jitter((0.03, 1.0), (0.15, 0.1), 0.05)


def _series(jitter, dt_s, seconds, seed=0):
    process = SpeedProcess(jitter, np.random.default_rng(seed))
    n = int(seconds / dt_s)
    return np.arange(n) * dt_s, np.array([process.factor(dt_s) for _ in range(n)])


def test_the_process_has_the_stationary_variance_and_autocovariance_it_is_given():
    t, factors = _series(KNOWN, 0.01, 600)
    lags, cov, variance = lag_covariance(t, factors)
    assert variance == pytest.approx(KNOWN.log_std ** 2, rel=0.1)
    near = (lags > 0.02) & (lags < 5)
    assert np.allclose(cov[near], KNOWN.covariance(lags[near]), atol=0.003)
    assert np.median(np.log(factors)) == pytest.approx(0.0, abs=0.02)  # median factor 1


def test_the_process_does_not_depend_on_how_time_is_cut_into_steps():
    """A component advanced exactly: the lag-1 s covariance is the same at 5 ms and 50 ms steps."""
    slow = Jitter((1.0,), (0.2,), 0.0)
    for dt in (0.005, 0.05):
        t, factors = _series(slow, dt, 1500, seed=1)
        y = np.log(factors)
        m = int(round(1.0 / dt))
        assert np.mean(y[m:] * y[:-m]) == pytest.approx(0.04 * math.exp(-1), abs=0.004)


def test_the_fit_recovers_the_variance_split_between_fast_slow_and_per_step_parts():
    t, factors = _series(KNOWN, 0.0075, 60, seed=2)
    got = fit(t, factors)
    assert got.log_std == pytest.approx(KNOWN.log_std, rel=0.1)
    fast = sum(s * s for tau, s in zip(got.timescales_s, got.sigmas) if tau <= 0.1)
    slow = sum(s * s for tau, s in zip(got.timescales_s, got.sigmas) if tau > 0.1)
    assert fast == pytest.approx(0.15 ** 2, rel=0.25)
    assert slow == pytest.approx(0.1 ** 2, rel=0.5)
    assert max(got.timescales_s) <= 60 / 4


def test_a_constant_speed_has_no_jitter_and_a_short_series_is_refused():
    got = fit(np.arange(100) * 0.01, np.full(100, 0.004))
    assert got.log_std == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="at least 16"):
        fit(np.arange(5) * 0.01, np.full(5, 0.004))
    with pytest.raises(ValueError, match="one sigma"):
        Jitter((0.1,), (), 0.0)


def test_a_zero_jitter_process_leaves_every_step_as_the_cost_model_predicts():
    process = SpeedProcess(Jitter((0.1,), (0.0,), 0.0), np.random.default_rng(0))
    assert {process.factor(dt) for dt in (0.0, 0.01, 3.0)} == {1.0}


def _with_jitter(tmp_path, jitter: Jitter):
    """The default profile with a jitter measurement added, as a file."""
    with open(load_profile("default").source) as f:
        data = json.load(f)
    data["cost_model"]["jitter"] = jitter.to_dict()
    path = tmp_path / "jittered.json"
    path.write_text(json.dumps(data))
    return path


def _config(profile, jitter: bool, seed=0):
    base = scenarios.load("static-vs-continuous", [f"seed={seed}"]).runs()[1].config
    return base.updated({"workload.num_requests": 60, "cost.profile": str(profile),
                         "cost.jitter": jitter})


def test_cost_jitter_scales_the_steps_reproducibly_and_only_when_on(tmp_path):
    profile = _with_jitter(tmp_path, KNOWN)
    plain = run_config(_config(profile, False)).step_columns()
    plain_default = run_config(_config("default", False)).step_columns()
    assert plain == plain_default  # a jitter measurement alone changes nothing
    jittered = run_config(_config(profile, True)).step_columns()
    again = run_config(_config(profile, True)).step_columns()
    assert jittered == again  # seeded
    other = run_config(_config(profile, True), jitter_rng=np.random.default_rng(7))
    assert other.step_columns()["end_s"] != jittered["end_s"]
    ratio = np.diff(jittered["end_s"][:5]) / np.diff(plain["end_s"][:5])
    assert not np.allclose(ratio, 1.0)


def test_jitter_factor_multiplies_the_predicted_step_including_the_wake_cost():
    class Cost(CostModel):
        def step_time(self, shape):
            return 0.01

        def wake_cost(self, idle_s):
            return 0.002

    class Fixed:
        def __init__(self):
            self.dts = []

        def factor(self, dt):
            self.dts.append(dt)
            return 2.0

    from engine.step_plan import StepPlan

    speed = Fixed()
    executor = CostModelExecutor(Cost(), speed)
    assert executor.execute(StepPlan(step=0)).duration_s == pytest.approx(0.02)
    executor.after_idle(0.5)
    assert executor.execute(StepPlan(step=1)).duration_s == pytest.approx(0.024)
    assert speed.dts == [0.0, pytest.approx(0.52)]  # previous step's duration + the idle time
    # an engine that wakes, plans nothing and sleeps on is told the longer idle time again:
    # the speed process advances by the idle time once, not by every report of it
    executor.after_idle(0.2)
    executor.after_idle(0.7)
    executor.execute(StepPlan(step=2))
    assert speed.dts[-1] == pytest.approx(0.024 + 0.7)


def test_jitter_without_a_measured_profile_is_a_one_line_scenario_error(tmp_path):
    data = json.loads(open(load_profile("default").source).read())
    del data["cost_model"]["jitter"]
    path = tmp_path / "no-jitter.json"
    path.write_text(json.dumps(data))
    scenario = scenarios.load("static-vs-continuous", ["cost.jitter=true",
                                                       f"cost.profile={json.dumps(str(path))}"])
    with pytest.raises(ScenarioError, match=r"--set: cost.jitter = true needs a profile with a "
                                            r"jitter"):
        check_scenario(scenario)  # the simulator builds the cost model: only it can tell
    with pytest.raises(ScenarioError, match=r"cost.jitter: must be true or false"):
        scenarios.load("static-vs-continuous", ["cost.jitter=1"])
