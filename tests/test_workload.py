"""Workload generation: arrival processes and length/priority distributions match their stated
statistics, respect their bounds, truncate by redrawing, and are deterministic per seed; a bad
table is refused naming its key (each class's own table and checks)."""

import math

import numpy as np
import pytest

from helpers.configs import resolved
from scenarios.specs import check_table
from scenarios.arrival import ARRIVAL_SCHEMA, ClosedLoop, Constant, Gamma, Poisson, arrival_of
from scenarios.lengths import (LENGTH_SCHEMA, PRIORITY_SCHEMA, Choice, Fixed, LogNormal, Uniform,
                              length_of, priority_of)
from sim.workloads import build_workload, seeded_streams

N = 200_000


def rng(seed=0):
    return np.random.default_rng(seed)


def arrival_process(table: dict):
    check_table(table, ARRIVAL_SCHEMA, "workload.arrival")
    return arrival_of(table)


def length_dist(table: dict, key: str):
    check_table(table, LENGTH_SCHEMA, key)
    return length_of(table, key)


def priority_dist(table: dict):
    check_table(table, PRIORITY_SCHEMA, "workload.priority")
    return priority_of(table)


def gaps(times):
    return np.diff(np.concatenate([[0.0], times]))


# --- arrival processes ---------------------------------------------------------------------------


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    g = gaps(Poisson(rate=4.0).times(rng(), N))
    assert g.mean() == pytest.approx(0.25, rel=0.01)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.01)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_gaps_have_the_requested_mean_and_cv(cv):
    g = gaps(Gamma(rate=2.0, cv=cv).times(rng(), N))
    assert g.mean() == pytest.approx(0.5, rel=0.02)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.03)


def test_constant_arrivals_are_exactly_evenly_spaced():
    times = Constant(rate=8.0).times(rng(), 1000)
    assert times[0] == 0.125 and times[-1] == 125.0
    assert np.allclose(np.diff(times), 0.125, rtol=0, atol=1e-12)


def test_a_burst_sends_every_request_at_time_zero():
    assert arrival_process({"process": "burst"}).times(rng(), 5).tolist() == [0.0] * 5


def test_arrival_times_are_non_decreasing():
    for process in (Poisson(3.0), Gamma(3.0, 4.0), Constant(3.0)):
        assert np.all(np.diff(process.times(rng(), 10_000)) >= 0)


@pytest.mark.parametrize("spec, message", [
    ({"process": "poisson", "rate": 0}, "workload.arrival.rate: must be a positive number"),
    ({"process": "gamma", "rate": 1.0}, "workload.arrival.cv: required"),
    ({"process": "constant", "rate": 1, "cv": 2}, "workload.arrival.cv: unknown key"),
    ({"process": "closed_loop", "concurrency": 0}, "concurrency: must be a positive integer"),
    ({"process": "closed_loop", "concurrency": 2, "think_time_s": -1}, "think_time_s: must be"),
    ({"process": "bursty"}, "workload.arrival.process: must be one of poisson, gamma"),
    ({"process": "burst", "rate": 2}, "workload.arrival.rate: unknown key"),
])
def test_bad_arrival_tables_are_refused_naming_the_key(spec, message):
    with pytest.raises(ValueError, match=message):
        arrival_process(spec)


def test_closed_loop_table_builds_a_closed_loop_with_its_defaults():
    loop = arrival_process({"process": "closed_loop", "concurrency": 4, "think_time_s": 0.5})
    assert loop == ClosedLoop(4, 0.5)
    assert arrival_process({"process": "closed_loop", "concurrency": 4}).think_time_s == 0.0


def test_each_process_describes_itself_and_its_span_in_one_line():
    assert Gamma(2.0, 3.0).describe() == "gamma at 2 req/s (cv 3)"
    assert Poisson(4.0).span(100) == (25.0, "rate", "at 4/s")
    assert ClosedLoop(4, 2.0).span(100)[0] == 50.0
    assert Gamma(2.0, 0.5).traffic() == (2.0, 4.0, None)  # vLLM's burstiness is the shape
    assert Constant(1.0).at(3.0) == Constant(3.0)


@pytest.mark.parametrize("table", [{"process": "poisson", "rate": 4.0},
                                   {"process": "gamma", "rate": 4.0, "cv": 3.0}])
def test_a_fixed_span_rescales_the_same_draws_to_end_at_n_over_the_rate(table):
    # vLLM's bench serve: the last of 100 requests at 4/s goes out at exactly 25 s
    plain = arrival_process(table).times(rng(), 100)
    fixed = arrival_process(table | {"fixed_span": True})
    times = fixed.times(rng(), 100)
    assert times[-1] == 25.0 and plain[-1] != 25.0
    np.testing.assert_allclose(times / plain, 25.0 / plain[-1], rtol=1e-12)  # one scale
    assert fixed.describe().endswith("gaps rescaled to end at the number of arrivals / rate "
                                     "(vLLM's)")
    with pytest.raises(ValueError, match="workload.arrival.fixed_span: must be true or false"):
        arrival_process(table | {"fixed_span": "yes"})


# --- lengths -------------------------------------------------------------------------------------


def test_fixed_lengths_are_all_the_value():
    assert np.all(Fixed(7).sample(rng(), 100) == 7)


def test_uniform_lengths_cover_both_ends_with_equal_mass():
    x = Uniform(3, 7).sample(rng(), N)
    assert x.min() == 3 and x.max() == 7
    counts = np.bincount(x)[3:]
    assert np.allclose(counts / N, 0.2, atol=0.005)
    assert x.mean() == pytest.approx(5.0, rel=0.005)


def test_lognormal_without_truncation_has_its_median_and_mean():
    dist = LogNormal(median=200, sigma=0.5, min=1, max=100_000)
    x = dist.sample(rng(), N)
    assert np.median(x) == pytest.approx(200, rel=0.01)
    assert x.mean() == pytest.approx(200 * math.exp(0.5**2 / 2), rel=0.01)


def test_a_truncated_lognormals_mean_is_that_of_its_draws():
    for dist in (LogNormal(median=4, sigma=1.0, min=2, max=40),
                 LogNormal(median=300, sigma=0.8, max=5000)):
        assert dist.mean == pytest.approx(dist.sample(rng(), N).mean(), rel=0.01)
        assert (dist.lowest, dist.highest) == (dist.min, dist.max)


def test_lognormal_truncates_by_redrawing_not_clipping():
    dist = LogNormal(median=100, sigma=1.0, min=50, max=150)
    x = dist.sample(rng(), N)
    assert x.min() >= 50 and x.max() <= 150
    # Clipping would pile ~25% of the mass on each bound; redrawing leaves the bound's own mass.
    mu, s = math.log(100), 1.0
    cdf = lambda v: 0.5 * (1 + math.erf((math.log(v) - mu) / (s * math.sqrt(2))))
    expected_at_max = (cdf(150.5) - cdf(149.5)) / dist.acceptance
    assert np.mean(x == 150) == pytest.approx(expected_at_max, rel=0.1)
    assert np.mean(x == 50) == pytest.approx((cdf(50.5) - cdf(49.5)) / dist.acceptance, rel=0.1)


def test_a_wide_lognormal_draws_without_a_numpy_warning():
    # exp() of its widest draws overflows to inf, which the range throws away, quietly
    import warnings

    dist = LogNormal(median=100, sigma=300.0, max=2000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = dist.sample(rng(), 200)
    assert x.min() >= 1 and x.max() <= 2000


def test_lognormal_refuses_a_range_that_would_take_forever_to_redraw():
    with pytest.raises(ValueError, match=r"workload.prompt_tokens: lognormal.*widen the range"):
        LogNormal(median=10, sigma=0.1, min=1000, max=2000).check("workload.prompt_tokens")
    # The median inside [min, max] is not enough: a wide sigma over a tiny range also fails.
    with pytest.raises(ValueError, match=r"k: lognormal\(median=100, sigma=5.0\) puts only"):
        LogNormal(median=100, sigma=5.0, min=100, max=100).check("k")


def test_lognormal_acceptance_matches_the_sampled_fraction():
    dist = LogNormal(median=64, sigma=1.2, min=16, max=128)
    draws = np.rint(np.exp(rng(3).normal(math.log(64), 1.2, size=N)))
    assert np.mean((draws >= 16) & (draws <= 128)) == pytest.approx(dist.acceptance, rel=0.01)


@pytest.mark.parametrize("spec, message", [
    ({"dist": "uniform", "low": 5, "high": 4}, r"x.low \(5\) must be <= x.high \(4\)"),
    ({"dist": "fixed", "value": 0}, "x.value: must be a whole number from 1"),
    ({"dist": "lognormal", "median": 10, "sigma": 1}, "x.max: required"),
    ({"dist": "normal", "mean": 3}, "x.dist: must be one of fixed, uniform, lognormal"),
    ({"dist": "fixed", "value": 3, "low": 1}, "x.low: unknown key for dist = 'fixed'"),
])
def test_bad_length_tables_are_refused_naming_the_key(spec, message):
    with pytest.raises(ValueError, match=message):
        length_dist(spec, "x")


# --- priorities ----------------------------------------------------------------------------------


def test_priority_choice_follows_the_weights():
    x = Choice((0, 1, 5), (0.2, 0.3, 0.5)).sample(rng(), N)
    assert set(np.unique(x)) == {0, 1, 5}
    assert [np.mean(x == v) for v in (0, 1, 5)] == pytest.approx([0.2, 0.3, 0.5], abs=0.005)


def test_priority_weights_default_to_equal():
    x = priority_dist({"dist": "choice", "values": [2, 9]}).sample(rng(), N)
    assert np.mean(x == 2) == pytest.approx(0.5, abs=0.005)


def test_priority_weights_must_match_the_values():
    with pytest.raises(ValueError, match="workload.priority.weights: must have one weight per"):
        priority_dist({"dist": "choice", "values": [0, 1], "weights": [1.0]})


# --- whole workloads -----------------------------------------------------------------------------

SPEC = {"num_requests": 500, "arrival": {"process": "gamma", "rate": 3.0, "cv": 2.0},
        "prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.8, "min": 4, "max": 900},
        "output_tokens": {"dist": "uniform", "low": 1, "high": 64},
        "priority": {"dist": "choice", "values": [0, 1], "weights": [1, 3]}}


def settings(workload: dict):
    return resolved({"workload": workload}).workload


def test_same_seed_gives_the_same_workload():
    a = build_workload(settings(SPEC), seeded_streams(7)["workload"])
    b = build_workload(settings(SPEC), seeded_streams(7)["workload"])
    for name in ("arrival_s", "prompt_tokens", "output_tokens", "priority"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    c = build_workload(settings(SPEC), seeded_streams(8)["workload"])
    assert not np.array_equal(a.prompt_tokens, c.prompt_tokens)


def test_draw_order_is_arrivals_then_prompts_then_outputs_then_priorities():
    w = build_workload(settings(SPEC), rng(11))
    r = rng(11)
    assert np.array_equal(w.arrival_s, Gamma(3.0, 2.0).times(r, 500))
    assert np.array_equal(w.prompt_tokens, LogNormal(100, 0.8, min=4, max=900).sample(r, 500))
    assert np.array_equal(w.output_tokens, Uniform(1, 64).sample(r, 500))
    assert np.array_equal(w.priority, Choice((0, 1), (1, 3)).sample(r, 500))


def test_token_and_sampling_streams_are_independent_of_the_workload_stream():
    streams = seeded_streams(3)
    streams["tokens"].integers(0, 100, size=10_000)  # a cosimulation draws token ids ...
    w = build_workload(settings(SPEC), streams["workload"])  # ... and the workload does not change
    assert np.array_equal(w.prompt_tokens, build_workload(settings(SPEC), seeded_streams(3)["workload"]).prompt_tokens)


def test_closed_loop_workload_has_lengths_but_no_arrival_times():
    spec = dict(SPEC, arrival={"process": "closed_loop", "concurrency": 8})
    w = build_workload(settings(spec), rng())
    assert w.arrival_s is None and w.closed_loop.concurrency == 8 and len(w) == 500


def test_missing_lengths_without_a_trace_are_an_error():
    spec = dict(SPEC, output_tokens=None)
    with pytest.raises(ValueError, match="workload.output_tokens: required .* unless workload.trace"):
        settings(spec)
