"""Sampling primitives (part 1): softmax, temperature, top-k, top-p, sampling, greedy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engine.sampling import (MIN_TEMPERATURE, apply_temperature, greedy_select,
                             sample_from_probs, sample_token, stable_softmax, top_k_filter,
                             top_p_filter)
from engine.sequence import SamplingParams

finite_logits = arrays(np.float64, st.integers(1, 40),
                       elements=st.floats(-50, 50, allow_nan=False, allow_infinity=False))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def entropy(probs):
    nz = probs[probs > 0]
    return float(-(nz * np.log(nz)).sum())


# --- stable_softmax ---------------------------------------------------------------------------


@given(finite_logits)
def test_softmax_is_a_distribution(logits):
    probs = stable_softmax(logits)
    assert probs.shape == logits.shape
    assert (probs >= 0).all() and probs.sum() == pytest.approx(1.0)


@given(finite_logits, st.floats(-1e6, 1e6))
def test_softmax_is_shift_invariant(logits, shift):
    np.testing.assert_allclose(stable_softmax(logits + shift), stable_softmax(logits), atol=1e-6)


def test_softmax_of_huge_logits_does_not_overflow():
    with np.errstate(over="raise", invalid="raise"):  # an overflow or a NaN fails the test
        probs = stable_softmax(np.array([1e30, 1e30, -1e30, 0.0]))
        probs32 = stable_softmax(np.array([3e38, 3e38, -3e38], np.float32))
    np.testing.assert_array_equal(probs, [0.5, 0.5, 0.0, 0.0])
    np.testing.assert_array_equal(probs32, [0.5, 0.5, 0.0])
    assert probs32.dtype == np.float32


def test_softmax_works_per_row_of_a_batch():
    logits = np.array([[0.0, np.log(3.0)], [5.0, 5.0]])
    np.testing.assert_allclose(stable_softmax(logits), [[0.25, 0.75], [0.5, 0.5]])


def test_softmax_gives_masked_tokens_zero_probability():
    probs = stable_softmax(np.array([1.0, -np.inf, 1.0]))
    np.testing.assert_array_equal(probs, [0.5, 0.0, 0.5])


@pytest.mark.parametrize("logits", [
    np.full(4, -np.inf),
    np.array([[0.0, 1.0], [-np.inf, -np.inf]]),
])
def test_softmax_of_an_all_masked_row_raises(logits):
    with pytest.raises(ValueError, match="entirely -inf"):
        stable_softmax(logits)


@pytest.mark.parametrize("bad", [np.array([0.0, np.nan]), np.array([0.0, np.inf]), np.array([])])
def test_softmax_rejects_nan_posinf_and_empty(bad):
    with pytest.raises(ValueError):
        stable_softmax(bad)


# --- apply_temperature ------------------------------------------------------------------------


def test_temperature_divides_logits():
    np.testing.assert_allclose(apply_temperature(np.array([2.0, -1.0]), 0.5), [4.0, -2.0])


@given(finite_logits.filter(lambda x: np.ptp(x) > 1e-3))
def test_low_temperature_sharpens_and_high_temperature_flattens(logits):
    base = entropy(stable_softmax(logits))
    assert entropy(stable_softmax(apply_temperature(logits, 0.5))) < base + 1e-9
    assert entropy(stable_softmax(apply_temperature(logits, 2.0))) > base - 1e-9
    assert stable_softmax(apply_temperature(logits, 0.5)).max() >= stable_softmax(logits).max() - 1e-12


def test_very_high_temperature_approaches_uniform():
    probs = stable_softmax(apply_temperature(np.array([3.0, 1.0, -2.0]), 1e6))
    np.testing.assert_allclose(probs, 1 / 3, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_temperature_past_the_dtype_is_uniform_over_the_unmasked_tokens(dtype):
    with np.errstate(over="raise", invalid="raise"):
        probs = stable_softmax(apply_temperature(np.array([3.0, 1.0, -np.inf], dtype), 1e308))
    np.testing.assert_allclose(probs, [0.5, 0.5, 0.0])


def test_temperature_zero_is_the_greedy_limit_with_ties_to_the_lowest_index():
    scaled = apply_temperature(np.array([1.0, 7.0, 3.0, 7.0]), 0)
    np.testing.assert_array_equal(stable_softmax(scaled), [0.0, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("temperature", [-0.1, -1.0, np.nan, np.inf])
def test_negative_or_non_finite_temperature_raises(temperature):
    with pytest.raises(ValueError, match="temperature"):
        apply_temperature(np.array([1.0, 2.0]), temperature)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("temperature", [1e-308, 5e-324, 1e-40, 1e-10, MIN_TEMPERATURE / 2])
def test_a_temperature_below_the_minimum_is_greedy(dtype, temperature):
    logits = np.array([[1.0, 7.0, 3.0, 7.0], [-2.0, 5.0, 5.5, -np.inf]], dtype)
    with np.errstate(over="raise", invalid="raise"):  # no overflow, no NaN on the way
        probs = stable_softmax(apply_temperature(logits, temperature))
    np.testing.assert_array_equal(probs, [[0, 1, 0, 0], [0, 0, 1, 0]])
    assert probs.dtype == dtype


@pytest.mark.parametrize("dtype, big", [(np.float32, 3e38), (np.float64, 1e308)])
def test_a_temperature_that_would_overflow_the_dtype_keeps_the_distribution(dtype, big):
    logits = np.array([big, big - big / 1e6, -big, -np.inf], dtype)
    with np.errstate(over="raise", invalid="raise"):
        scaled = apply_temperature(logits, MIN_TEMPERATURE)
        probs = stable_softmax(scaled)
    assert not np.isposinf(scaled).any() and not np.isnan(scaled).any()
    np.testing.assert_array_equal(probs, [1, 0, 0, 0])
    # shifted by the row's maximum: top-k and top-p see the same order and masses
    np.testing.assert_array_equal(np.argsort(-scaled, kind="stable"), [0, 1, 2, 3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_minimum_temperature_itself_still_samples_by_the_logits(dtype):
    logits = np.array([0.0, 1e-5, -1.0], dtype)  # a gap of 1e-5 at T = 1e-5: e^-1 apart
    probs = stable_softmax(apply_temperature(logits, MIN_TEMPERATURE))
    np.testing.assert_allclose(probs[:2] / probs[:2].sum(), [1 / (1 + np.e), np.e / (1 + np.e)],
                               rtol=1e-3)
    assert probs[2] == 0.0


def test_temperature_does_not_modify_its_input():
    logits = np.array([1.0, 2.0])
    apply_temperature(logits, 0.5)
    apply_temperature(logits, 0)
    np.testing.assert_array_equal(logits, [1.0, 2.0])


# --- top_k_filter -----------------------------------------------------------------------------


@given(finite_logits, st.integers(1, 45))
def test_top_k_keeps_the_largest_and_at_least_k(logits, k):
    out = top_k_filter(logits, k)
    kept = np.isfinite(out)
    assert kept.sum() >= min(k, logits.size)
    if (~kept).any():
        assert logits[kept].min() > logits[~kept].max()  # all kept beat all dropped
    np.testing.assert_array_equal(out[kept], logits[kept])


def test_top_k_keeps_exactly_k_distinct_values():
    out = top_k_filter(np.array([0.1, 3.0, -2.0, 2.0, 1.0]), 2)
    np.testing.assert_array_equal(out, [-np.inf, 3.0, -np.inf, 2.0, -np.inf])


def test_top_k_keeps_every_tie_at_the_kth_value():
    out = top_k_filter(np.array([5.0, 2.0, 2.0, 1.0]), 2)
    np.testing.assert_array_equal(out, [5.0, 2.0, 2.0, -np.inf])


@pytest.mark.parametrize("k", [0, -3, 4, 100])
def test_top_k_off_or_at_least_vocab_is_a_no_op(k):
    logits = np.array([1.0, 4.0, 2.0, 3.0])
    out = top_k_filter(logits, k)
    np.testing.assert_array_equal(out, logits)
    assert out is not logits


def test_top_k_works_per_row():
    out = top_k_filter(np.array([[1.0, 2.0, 3.0], [9.0, 8.0, 7.0]]), 1)
    np.testing.assert_array_equal(np.isfinite(out), [[False, False, True], [True, False, False]])


@pytest.mark.parametrize("k", [1.5, "2", True])
def test_top_k_rejects_non_integer_k(k):
    with pytest.raises(ValueError, match="top_k"):
        top_k_filter(np.array([1.0, 2.0]), k)


# --- top_p_filter -----------------------------------------------------------------------------


@settings(max_examples=200)
@given(finite_logits, st.floats(0.01, 0.99))
def test_top_p_keeps_the_smallest_prefix_reaching_p(logits, p):
    probs = stable_softmax(logits)
    kept = np.isfinite(top_p_filter(logits, p))
    assert kept[np.argmax(logits)]  # the top token always survives
    assert probs[kept].sum() >= p - 1e-9
    if (~kept).any():
        assert probs[kept].min() >= probs[~kept].max()  # a prefix by descending probability
    # minimal: dropping the least probable kept token falls below p
    assert probs[kept].sum() - probs[kept].min() < p + 1e-9


def test_top_p_example():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    assert np.isfinite(top_p_filter(logits, 0.5)).tolist() == [True, False, False, False]
    assert np.isfinite(top_p_filter(logits, 0.8)).tolist() == [True, True, False, False]
    assert np.isfinite(top_p_filter(logits, 0.81)).tolist() == [True, True, True, False]


def test_top_p_keeps_the_top_token_for_tiny_p():
    out = top_p_filter(np.array([0.0, 0.1, 0.2]), 1e-9)
    np.testing.assert_array_equal(np.isfinite(out), [False, False, True])


def test_top_p_of_one_is_a_no_op():
    logits = np.array([1.0, -np.inf, 2.0])
    np.testing.assert_array_equal(top_p_filter(logits, 1.0), logits)


@pytest.mark.parametrize("p", [0.0, -0.5, 1.0001, 2.0])
def test_top_p_outside_zero_one_raises(p):
    with pytest.raises(ValueError, match="top_p"):
        top_p_filter(np.array([1.0, 2.0]), p)


def test_top_p_works_per_row():
    logits = np.log(np.array([[0.9, 0.05, 0.05], [0.4, 0.35, 0.25]]))
    kept = np.isfinite(top_p_filter(logits, 0.7))
    np.testing.assert_array_equal(kept, [[True, False, False], [True, True, False]])


# --- sample_from_probs ------------------------------------------------------------------------


def test_sampling_is_reproducible_with_the_same_seed():
    probs = stable_softmax(np.linspace(0, 2, 10))
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    seq_a = [sample_from_probs(probs, rng_a) for _ in range(50)]
    seq_b = [sample_from_probs(probs, rng_b) for _ in range(50)]
    assert seq_a == seq_b
    assert len(set(seq_a)) > 1  # and it does draw different tokens


def test_sampling_matches_the_distribution(rng):
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    draws = np.array([sample_from_probs(probs, rng) for _ in range(20000)])
    freq = np.bincount(draws, minlength=4) / draws.size
    assert freq[1] == 0  # a zero-probability token is never drawn
    np.testing.assert_allclose(freq, probs, atol=0.015)


def test_sampling_returns_a_python_int(rng):
    assert type(sample_from_probs(np.array([0.0, 1.0]), rng)) is int


def test_sampling_requires_a_generator():
    with pytest.raises(TypeError, match="Generator"):
        sample_from_probs(np.array([0.5, 0.5]), np.random.RandomState(0))


@pytest.mark.parametrize("probs", [[0.5, 0.6], [1.2, -0.2], [np.nan, 1.0], [], [[0.5, 0.5]]])
def test_sampling_rejects_invalid_probabilities(probs, rng):
    with pytest.raises(ValueError):
        sample_from_probs(np.array(probs), rng)


# --- greedy_select ----------------------------------------------------------------------------


def test_greedy_picks_the_argmax_with_ties_to_the_lowest_index():
    assert greedy_select(np.array([0.0, 3.0, -1.0, 3.0])) == 1
    assert type(greedy_select([1, 2])) is int


def test_greedy_works_per_row():
    np.testing.assert_array_equal(greedy_select(np.array([[0.0, 1.0], [2.0, 2.0]])), [1, 0])


def test_greedy_of_an_all_masked_row_raises():
    with pytest.raises(ValueError, match="entirely -inf"):
        greedy_select(np.full(3, -np.inf))


# --- sample_token: the pipeline ---------------------------------------------------------------


def test_sample_token_at_temperature_zero_is_greedy_and_draws_nothing(rng):
    state = rng.bit_generator.state
    logits = np.array([0.3, 2.0, 2.0, -1.0])
    assert sample_token(logits, SamplingParams(temperature=0.0), rng) == 1
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("temperature", [1e-308, 1e-40, 0.0])
def test_sample_token_at_a_tiny_temperature_is_greedy_and_draws_nothing(dtype, temperature):
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    logits = np.array([0.5, 2.0, 1.9999, -np.inf], dtype)
    params = SamplingParams(temperature=temperature, top_k=2, top_p=0.5)
    assert sample_token(logits, params, rng) == 1
    assert rng.bit_generator.state == before


def test_sample_token_with_top_k_one_is_greedy(rng):
    logits = np.random.default_rng(0).normal(size=64)
    params = SamplingParams(temperature=5.0, top_k=1)
    assert {sample_token(logits, params, rng) for _ in range(50)} == {int(np.argmax(logits))}


def test_sample_token_applies_temperature_before_top_p(rng):
    logits = np.log(np.array([0.6, 0.3, 0.1]))  # at T=1, top_p 0.5 keeps token 0 only
    cold = {sample_token(logits, SamplingParams(1.0, 0, 0.5), rng) for _ in range(200)}
    hot = {sample_token(logits, SamplingParams(50.0, 0, 0.5), rng) for _ in range(200)}
    assert cold == {0} and hot == {0, 1}  # flattened first, the nucleus grows


def test_sample_token_is_reproducible_and_respects_the_filters():
    logits = np.random.default_rng(3).normal(size=100)
    params = SamplingParams(temperature=1.5, top_k=5, top_p=0.9)
    rng_a, rng_b = np.random.default_rng(11), np.random.default_rng(11)
    seq_a = [sample_token(logits, params, rng_a) for _ in range(200)]
    assert seq_a == [sample_token(logits, params, rng_b) for _ in range(200)]
    assert set(seq_a) <= set(np.argsort(logits)[-5:].tolist())


def test_sample_token_takes_one_row_only(rng):
    with pytest.raises(ValueError, match="one row"):
        sample_token(np.zeros((2, 3)), SamplingParams(), rng)
