"""Turning logits into a next token: the engine's part 1 (sampling primitives).

Every function works over the last axis of a float array (one row of vocabulary logits, or a batch
of rows) and returns a new array; inputs are never modified. The order used everywhere is
temperature, top-k, top-p, softmax, sample (`sample_token`), and a temperature below
MIN_TEMPERATURE (0 included) is greedy.

Masked-out tokens are -inf logits. A NaN or +inf logit is a caller's bug and raises ValueError,
as does a row in which every token is masked out.
"""

from __future__ import annotations

import numpy as np

from engine.sequence import SamplingParams

PROBS_SUM_TOLERANCE = 1e-4  # float32 softmax rows over ~1e5 tokens still sum within 1e-5 of 1
TOP_P_ROUNDING = 1e-9  # a prefix whose mass is p up to float64 rounding (0.5 + 0.3) reaches p
# Below this temperature sampling is greedy (vLLM's threshold): logits / T for a tiny T overflows
# the engine's float32 logits (T = 1e-40 does; 1e-308 overflows float64 too), and at T = 1e-5 a
# logit gap of 0.001 already puts the runner-up e^-100 below the top token: greedy is the limit.
MIN_TEMPERATURE = 1e-5


def _as_logits(logits, name: str = "logits") -> np.ndarray:
    """A float view of `logits` (ints become float64), checked for shape and bad values."""
    x = np.asarray(logits)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) axis, got shape {x.shape}")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"{name} must be finite or -inf (masked), found NaN or +inf")
    return x


def stable_softmax(logits) -> np.ndarray:
    """Probabilities over the last axis: exp(x - max) / sum, so 1e30-scale logits cannot overflow.

    Accepts any shape with a non-empty last axis; -inf entries get probability exactly 0. Returns
    an array of the same shape (float32 in, float32 out; ints become float64). Raises ValueError
    when a row is entirely -inf (no token is allowed, so there is no distribution) or holds NaN/+inf.
    """
    x = _as_logits(logits)
    row_max = x.max(axis=-1, keepdims=True)  # [..., 1]
    if np.isneginf(row_max).any():
        raise ValueError("stable_softmax: a row of logits is entirely -inf (every token masked)")
    with np.errstate(over="ignore"):  # float32 -3e38 - 3e38 is -inf, whose exp is the right 0
        weights = np.exp(x - row_max)  # [..., V], the max entry is exactly 1
    return weights / weights.sum(axis=-1, keepdims=True)


def apply_temperature(logits, temperature: float) -> np.ndarray:
    """Divide logits by the temperature: T < 1 sharpens the distribution, T > 1 flattens it.

    T < MIN_TEMPERATURE (0 included) is the greedy limit (T -> 0+): every entry of a row except
    its argmax (ties to the lowest index, as `greedy_select`) becomes -inf, so softmax and
    sampling after it pick the greedy token with probability 1. When logits / T would overflow
    the logits' dtype, each row is shifted by its maximum first ((x - max) / T): the same
    softmax, top-k and top-p, every value finite or -inf. T < 0 (or NaN, inf) raises ValueError.
    """
    x = _as_logits(logits)
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature}")
    if temperature < MIN_TEMPERATURE:
        best = np.argmax(x, axis=-1)[..., None]  # [..., 1]
        out = np.full_like(x, -np.inf)
        np.put_along_axis(out, best, np.take_along_axis(x, best, axis=-1), axis=-1)
        return out
    t = np.asarray(min(temperature, float(np.finfo(x.dtype).max)), dtype=x.dtype)  # 1e308: float32
    with np.errstate(over="ignore"):
        scaled = x / t
    if not np.isposinf(scaled).any():
        return scaled
    row_max = x.max(axis=-1, keepdims=True)  # [..., 1]
    row_max = np.where(np.isneginf(row_max), 0, row_max)  # an all-masked row stays all -inf
    with np.errstate(over="ignore"):  # float32 -3e38 - 3e38 is -inf: probability 0, as it is
        return (x - row_max) / t  # [..., V], at most 0


def top_k_filter(logits, k: int) -> np.ndarray:
    """Keep the k largest logits of each row and set the rest to -inf.

    k <= 0 means "off" and k >= V keeps everything (both return an unchanged copy). Ties at the
    k-th largest value are all kept, so a row may keep more than k tokens; which of equal logits
    to drop would otherwise be arbitrary.
    """
    x = _as_logits(logits)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(f"top_k must be an integer (<= 0 is off), got {k!r}")
    vocab = x.shape[-1]
    if k <= 0 or k >= vocab:
        return x.copy()
    kth = np.partition(x, vocab - k, axis=-1)[..., vocab - k : vocab - k + 1]  # [..., 1]
    return np.where(x >= kth, x, -np.inf).astype(x.dtype, copy=False)


def top_p_filter(logits, p: float) -> np.ndarray:
    """Nucleus filter: keep the smallest set of most probable tokens whose mass is >= p.

    Tokens are ranked by descending probability (equal ones by lower index first) and a token is
    kept when the mass ranked strictly before it is < p (by more than TOP_P_ROUNDING, so a prefix
    whose mass equals p up to rounding is not extended), so the top token always survives.
    p == 1 keeps everything (unchanged copy); p <= 0 or p > 1 raises ValueError.
    """
    x = _as_logits(logits)
    if not 0 < p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1 is off), got {p}")
    if p == 1:
        return x.copy()
    probs = stable_softmax(x.astype(np.float64))  # [..., V], float64 so the cumsum is exact enough
    # rank by logit, not by probability: equal probabilities may come from unequal logits
    order = np.argsort(-x, axis=-1, kind="stable")  # [..., V] most probable first
    sorted_probs = np.take_along_axis(probs, order, axis=-1)  # [..., V]
    mass_before = np.cumsum(sorted_probs, axis=-1) - sorted_probs  # [..., V]
    keep_sorted = mass_before < p - TOP_P_ROUNDING  # [..., V]
    keep_sorted[..., 0] = True  # even for p below the rounding allowance
    keep = np.empty_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return np.where(keep, x, -np.inf).astype(x.dtype, copy=False)


def sample_from_probs(probs, rng: np.random.Generator) -> int:
    """Draw one token id from a probability vector [V] with the caller's seeded generator.

    `probs` must be 1-D, finite, non-negative and sum to 1 within PROBS_SUM_TOLERANCE; a token of
    probability 0 is never drawn. Inverse-CDF on one uniform draw, so a given generator state
    always yields the same token. Raises TypeError for anything but an `np.random.Generator`.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"probs must be a non-empty 1-D array, got shape {p.shape}")
    if not np.isfinite(p).all() or (p < 0).any():
        raise ValueError("probs must be finite and non-negative")
    total = p.sum()
    if abs(total - 1.0) > PROBS_SUM_TOLERANCE:
        raise ValueError(f"probs must sum to 1 (within {PROBS_SUM_TOLERANCE}), got {total}")
    cdf = np.cumsum(p)  # [V]
    index = int(np.searchsorted(cdf, rng.random() * total, side="right"))
    return min(index, int(np.flatnonzero(p)[-1]))  # u * total may round up to total


def greedy_select(logits):
    """The most likely token: argmax over the last axis, ties to the lowest index.

    A 1-D row returns a Python int; a batch [..., V] returns an int array of shape [...]. A row
    that is entirely -inf raises ValueError (no token is allowed).
    """
    x = _as_logits(logits)
    if np.isneginf(x.max(axis=-1)).any():
        raise ValueError("greedy_select: a row of logits is entirely -inf (every token masked)")
    best = np.argmax(x, axis=-1)
    return int(best) if x.ndim == 1 else best


def sample_token(logits, params: SamplingParams, rng: np.random.Generator) -> int:
    """The next token of one sequence from its logits [V]: temperature, top-k, top-p, softmax,
    sample; greedy (argmax, no random draw) when params.temperature < MIN_TEMPERATURE."""
    x = _as_logits(logits)
    if x.ndim != 1:
        raise ValueError(f"sample_token takes one row of logits [V], got shape {x.shape}")
    if params.temperature < MIN_TEMPERATURE:
        return greedy_select(x)
    x = apply_temperature(x, params.temperature)
    x = top_k_filter(x, params.top_k)
    x = top_p_filter(x, params.top_p)
    return sample_from_probs(stable_softmax(x), rng)
