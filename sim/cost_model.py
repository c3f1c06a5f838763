"""Step-cost models: how long an engine step takes, predicted from the shape of its `StepPlan`.

A step's shape is a handful of counts (`StepShape`): tokens prefilled, the attention work of the
prefill chunks (each chunk of n tokens over a context of c + n keys costs n * (c + n)), prefill
chunks, decoding sequences, the context tokens the decodes attend to, and padding rows.

- `LinearCost`: the explicit what-if model of ARCHITECTURE section 5,
  step_overhead_s + prefill_token_s * prefill_tokens + decode_seq_s * decode_seqs
  + context_token_s * decode_context (padding rows are free in it).
- `FittedCost`: one coefficient per shape feature, fitted to the real engine by `sim.profile`
  and loaded from a JSON profile (`load_profile`).
Both predict in O(number of prefill chunks) per step: the decode context sum is kept as a
running total by `CostModelExecutor`, not recomputed per step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"

# The fitted model's features, in coefficient order; "step" is the constant per-step overhead.
FEATURES = ("step", "prefill_tokens", "prefill_attention", "prefill_seqs", "decode_seqs",
            "decode_context", "padding_seqs")
LINEAR_FIELDS = ("step_overhead_s", "prefill_token_s", "decode_seq_s", "context_token_s")


@dataclass(frozen=True)
class StepShape:
    """The counts a step's cost depends on."""

    prefill_tokens: int = 0
    prefill_attention: int = 0  # sum over chunks of n * (tokens before the chunk + n)
    prefill_seqs: int = 0
    decode_seqs: int = 0
    decode_context: int = 0  # sum over decodes of the keys attended (the sequence's num_tokens)
    padding_seqs: int = 0

    def vector(self) -> tuple:
        """The feature values in FEATURES order."""
        return (1, self.prefill_tokens, self.prefill_attention, self.prefill_seqs,
                self.decode_seqs, self.decode_context, self.padding_seqs)


def prefill_counts(prefills) -> tuple[int, int]:
    """(prefill tokens, prefill attention work) of a plan's `prefills` [(seq, n), ...]."""
    tokens = attention = 0
    for seq, n in prefills:
        tokens += n
        attention += n * (seq.num_computed_tokens + n)
    return tokens, attention


def shape_of(plan) -> StepShape:
    """A plan's shape, computed directly (O(batch)); the executor keeps the decode sum running."""
    tokens, attention = prefill_counts(plan.prefills)
    return StepShape(tokens, attention, len(plan.prefills), len(plan.decodes),
                     sum(seq.num_tokens for seq in plan.decodes), plan.padding_seqs)


@dataclass(frozen=True)
class LinearCost:
    step_overhead_s: float
    prefill_token_s: float
    decode_seq_s: float
    context_token_s: float

    def __post_init__(self):
        for name in LINEAR_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"cost.{name} must be a number >= 0, got {value!r}")

    def predict(self, prefill_tokens, prefill_attention, prefill_seqs, decode_seqs,
                decode_context, padding_seqs) -> float:
        return (self.step_overhead_s + self.prefill_token_s * prefill_tokens
                + self.decode_seq_s * decode_seqs + self.context_token_s * decode_context)


@dataclass(frozen=True)
class FittedCost:
    """sum_i coefficients[i] * feature_i (seconds), FEATURES order; `model` is the model config
    the profile was measured on."""

    coefficients: tuple
    model: dict
    source: str = "profile"

    def __post_init__(self):
        if len(self.coefficients) != len(FEATURES):
            raise ValueError(f"{self.source}: cost_model.coefficients needs {len(FEATURES)} "
                             f"values ({', '.join(FEATURES)}), got {len(self.coefficients)}")
        if any(not c >= 0 for c in self.coefficients):
            raise ValueError(f"{self.source}: cost_model.coefficients must be >= 0, "
                             f"got {list(self.coefficients)}")

    def predict(self, prefill_tokens, prefill_attention, prefill_seqs, decode_seqs,
                decode_context, padding_seqs) -> float:
        c0, c1, c2, c3, c4, c5, c6 = self.coefficients
        return (c0 + c1 * prefill_tokens + c2 * prefill_attention + c3 * prefill_seqs
                + c4 * decode_seqs + c5 * decode_context + c6 * padding_seqs)

    def predict_shape(self, shape: StepShape) -> float:
        return self.predict(*shape.vector()[1:])


def profile_path(name_or_path) -> Path:
    """A shipped profile name ("default" -> sim/profiles/default.json) or a file path."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith(".json"):
        path = PROFILE_DIR / f"{text}.json"
        if not path.is_file():
            shipped = ", ".join(sorted(p.stem for p in PROFILE_DIR.glob("*.json"))) or "none"
            raise FileNotFoundError(f"cost.profile: no shipped profile {text!r} "
                                    f"(shipped: {shipped}; or give a path to a .json profile)")
        return path
    path = Path(text)
    if not path.is_file():
        raise FileNotFoundError(f"cost.profile: file not found: {text}")
    return path


def load_profile(name_or_path) -> FittedCost:
    path = profile_path(name_or_path)
    try:
        data = json.loads(path.read_text())
        fit = data["cost_model"]
        coefficients = tuple(float(fit["coefficients"][name]) for name in FEATURES)
        return FittedCost(coefficients, dict(data["model"]), source=str(path))
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a servesim profile ({type(exc).__name__}: {exc}); "
                         f"write one with `servesim profile`") from None


def check_profile_model(cost: FittedCost, model: dict) -> None:
    """A profile predicts the costs of the model it was measured on; refuse any other shape
    (max_seq_len and seed do not change a step's cost)."""
    keys = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff")
    diff = [f"{k} {cost.model.get(k)} vs {model.get(k)}" for k in keys
            if cost.model.get(k) != model.get(k)]
    if diff:
        raise ValueError(f"cost.profile: {cost.source} was measured on another model "
                         f"({'; '.join(diff)}, profile vs scenario); profile this model with "
                         f"`servesim profile` or use cost.model = 'linear'")


def cost_model(cost: dict, model: dict):
    """The cost model a resolved `cost` table selects ("profile" or "linear")."""
    kind = cost.get("model")
    if kind == "linear":
        return LinearCost(**{name: cost.get(name) for name in LINEAR_FIELDS})
    if kind == "profile":
        fitted = load_profile(cost.get("profile", "default"))
        check_profile_model(fitted, model)
        return fitted
    raise ValueError(f"cost.model must be one of profile, linear, live (live runs the real "
                     f"engine: mode cosimulate), got {kind!r}")
