"""Step-cost models: how long an engine step takes, predicted from the shape of its `StepPlan`.

A step's shape (`StepShape`) counts what its work depends on: the rows pushed through every
weight matrix (prefill tokens + decodes + static batching's padding rows), the sequences that
sample a token (one LM-head row and one `sample_token` call each), the prefill chunks and their
attention work (a chunk of n tokens over c computed ones costs n * (c + n), and gathers c + n
keys from the paged cache when c > 0), the decodes, the keys they attend to, and their span
(decodes x the longest context: decode attention pads every sequence to the longest one) and
the keys it gathers (`decode_gathered`: the engine gathers keys a group of sequences at a time,
each up to its group's longest, `engine.model_runner.decode_groups`), and whether it decodes
at all (`decoding`: decode attention's own fixed cost in every layer, beside a prefill's).

- `LinearCost`: the explicit what-if model of ARCHITECTURE section 5,
  step_overhead_s + prefill_token_s * prefill_tokens + decode_seq_s * decode_seqs
  + context_token_s * decode_context.
- `FittedCost`, measured on the real engine by `sim.profile`:
  step_s = rows_cost(rows) + sum_f coefficients[f] * f (FEATURES),
  where rows_cost is piecewise linear over `row_knots` plus a cost per leftover row block:
  BLAS multiplies one row as a matrix-vector product (its own, cheaper kernel) and processes
  more rows in blocks of 2^k, so rows not a multiple of 2, 4 or 8 go through slower tail code
  and a step of 7 rows costs more than one of 8. The coefficients include the engine loop's
  own cost (scheduling, postprocessing, records), measured through the real server loop, and
  `wake_cost(idle_s)` is added to the first step after the engine was idle that long (its CPU
  slowed down or served other work meanwhile, and its caches went cold), and
  `after_prefill_cost(tokens, k)` to the k-th step after a prefill of that many tokens (the
  prefill evicted what the steps around it keep in cache). A profile may also
  carry its machine's `jitter` (sim.jitter), which the simulator applies when `cost.jitter`.
Both predict in O(number of prefill chunks) per step given the decode sums, which
`CostModelExecutor` keeps as running totals.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, fields
from pathlib import Path

from engine.model_runner import GATHER_GROUP_BYTES, decode_groups

from .jitter import Jitter

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
FORMAT = "servesim-profile/2"

# The fitted model's linear features, in coefficient order; "step" is the per-step constant.
FEATURES = ("step", "sampled_seqs", "prefill_seqs", "prefill_attention", "prefill_context",
            "decode_seqs", "decode_context", "decode_span", "padding_seqs", "decode_gathered",
            "decoding")
# Features a profile may lack, with the value it then has: measured since profiles were first
# written (a profile without one predicts exactly what it did before).
LATER_FEATURES = {"decode_gathered": 0.0, "decoding": 0.0}
KV_ITEMSIZE = 4  # bytes of one stored key element (float32)
ROW_TAILS = ("rows_tail_1", "rows_tail_2", "rows_tail_4")  # rows % 2, rows // 2 % 2, rows // 4 % 2
LINEAR_FIELDS = ("step_overhead_s", "prefill_token_s", "decode_seq_s", "context_token_s")


@dataclass(frozen=True)
class StepShape:
    """The counts a step's cost depends on (`COUNTS` order is `predict`'s argument order)."""

    prefill_tokens: int = 0
    prefill_attention: int = 0  # sum over chunks of n * (tokens before the chunk + n)
    prefill_seqs: int = 0
    decode_seqs: int = 0
    decode_context: int = 0  # sum over decodes of the keys attended (the sequence's num_tokens)
    padding_seqs: int = 0
    sampled_seqs: int = 0  # decodes + prefill chunks that complete their sequence
    prefill_context: int = 0  # sum over chunks after a context (c > 0) of c + n: keys gathered
    decode_span: int = 0  # decodes x the longest decode context
    decode_gathered: int = 0  # keys gathered per layer for decode attention (decode_groups)
    decoding: int = 0  # 1 when the step has decodes (decode attention runs), else 0

    @property
    def rows(self) -> int:
        """Rows through every weight matmul: prefill tokens, decodes and padding rows."""
        return self.prefill_tokens + self.decode_seqs + self.padding_seqs

    def counts(self) -> tuple:
        return tuple(getattr(self, name) for name in COUNTS)

    def vector(self) -> tuple:
        """The linear features' values in FEATURES order ("step" is 1)."""
        return (1,) + tuple(getattr(self, name) for name in FEATURES[1:])


COUNTS = tuple(f.name for f in fields(StepShape))


def prefill_counts(prefills) -> tuple[int, int, int, int]:
    """(tokens, attention work, gathered context, chunks that sample) of a plan's prefills."""
    tokens = attention = context = sampled = 0
    for seq, n in prefills:
        computed = seq.num_computed_tokens
        tokens += n
        attention += n * (computed + n)
        if computed:
            context += computed + n
        if computed + n == seq.num_tokens:
            sampled += 1
    return tokens, attention, context, sampled


def slot_bytes(model: dict) -> int:
    """Bytes of one token's keys in one layer of the paged KV cache."""
    return model["d_model"] * KV_ITEMSIZE


def gathered_keys(contexts, block_size: int, slot_bytes: int) -> int:
    """Keys one layer gathers for a decode batch of these contexts, in batch order: each group
    of `engine.model_runner.decode_groups` gathers all its sequences up to its longest."""
    return block_size * sum((g1 - g0) * blocks
                            for g0, g1, blocks in decode_groups(contexts, block_size, slot_bytes))


def one_group(decodes: int, max_context: int, block_size: int, slot_bytes: int) -> bool:
    """Whether a decode batch is gathered as one group (then gathered_keys = decodes x its
    longest context rounded up to blocks, with no need to look at each sequence)."""
    blocks = -(-max_context // block_size)
    return GATHER_GROUP_BYTES // (block_size * slot_bytes * max(blocks, 1)) >= decodes


def shape_of(plan, block_size: int, slot_bytes: int) -> StepShape:
    """A plan's shape, computed directly (O(batch)); the executor keeps the decode sums running.
    `block_size` and `slot_bytes` (the KV cache's) say how decode attention gathers its keys."""
    tokens, attention, context, sampled = prefill_counts(plan.prefills)
    contexts = [seq.num_tokens for seq in plan.decodes]
    decodes = len(contexts)
    return StepShape(tokens, attention, len(plan.prefills), decodes, sum(contexts),
                     plan.padding_seqs, sampled + decodes, context,
                     decodes * max(contexts) if contexts else 0,
                     gathered_keys(contexts, block_size, slot_bytes), int(decodes > 0))


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
                decode_context, padding_seqs, *_) -> float:
        return (self.step_overhead_s + self.prefill_token_s * prefill_tokens
                + self.decode_seq_s * decode_seqs + self.context_token_s * decode_context)

    def predict_shape(self, shape: StepShape) -> float:
        return self.predict(*shape.counts())


@dataclass(frozen=True)
class FittedCost:
    """rows_cost(rows) + sum_i coefficients[i] * feature_i (seconds, FEATURES order). Without
    row knots the rows cost is 0 (a purely linear model). `model` is the model config the
    profile was measured on."""

    coefficients: tuple
    model: dict
    source: str = "profile"
    row_knots: tuple = ()  # increasing row counts >= 1
    row_costs: tuple = ()  # seconds at each knot
    row_tails: tuple = (0.0, 0.0, 0.0)  # seconds per leftover block of 1, 2, 4 rows (ROW_TAILS)
    wake_idle_s: tuple = ()  # increasing idle durations (seconds) ...
    wake_extra_s: tuple = ()  # ... and the seconds added to the step after each
    jitter: Jitter | None = None  # the machine's speed from moment to moment (sim.jitter)
    reference_s: float | None = None  # the profile's reference step, median seconds (calibrate)
    after_tokens: tuple = ()  # increasing prefill lengths ...
    after_extra_s: tuple = ()  # ... and, for each, the seconds added to each step after it

    def __post_init__(self):
        if len(self.coefficients) != len(FEATURES):
            raise ValueError(f"{self.source}: cost_model.coefficients needs {len(FEATURES)} "
                             f"values ({', '.join(FEATURES)}), got {len(self.coefficients)}")
        values = list(self.coefficients) + list(self.row_costs) + list(self.row_tails)
        if any(not c >= 0 for c in values):
            raise ValueError(f"{self.source}: cost_model coefficients and row costs must be "
                             f">= 0, got {values}")
        knots = list(self.row_knots)
        if len(knots) != len(self.row_costs) or len(self.row_tails) != len(ROW_TAILS) or \
                any(k < 1 for k in knots) or knots != sorted(set(knots)):
            raise ValueError(f"{self.source}: cost_model.rows needs increasing knots >= 1, one "
                             f"cost per knot and {len(ROW_TAILS)} tail costs")
        idle = list(self.wake_idle_s)
        if len(idle) != len(self.wake_extra_s) or any(not x > 0 for x in idle) or \
                idle != sorted(set(idle)) or any(not x >= 0 for x in self.wake_extra_s):
            raise ValueError(f"{self.source}: wake needs increasing idle_s > 0 and one "
                             f"extra_s >= 0 for each")
        after = list(self.after_tokens)
        if len(after) != len(self.after_extra_s) or any(not n > 0 for n in after) or \
                after != sorted(set(after)) or \
                len({len(row) for row in self.after_extra_s}) > 1 or \
                any(not x >= 0 for row in self.after_extra_s for x in row):
            raise ValueError(f"{self.source}: after_prefill needs increasing prefill_tokens > 0 "
                             f"and, for each, one list of extra_s >= 0 of the same length")

    def after_prefill_cost(self, tokens: int, k: int) -> float:
        """Seconds added to the k-th step (k >= 1) after one whose prefill chunks held `tokens`
        tokens: linear in tokens from (0, 0) through the measured lengths, flat past the last;
        0 past the steps measured."""
        lengths, extra = self.after_tokens, self.after_extra_s
        if not lengths or tokens <= 0 or not 1 <= k <= len(extra[0]):
            return 0.0
        i = bisect_left(lengths, tokens)
        if i == len(lengths):
            return extra[-1][k - 1]
        x0, y0 = (lengths[i - 1], extra[i - 1][k - 1]) if i else (0, 0.0)
        return y0 + (extra[i][k - 1] - y0) * (tokens - x0) / (lengths[i] - x0)

    def wake_cost(self, idle_s: float) -> float:
        """Seconds added to a step that starts after `idle_s` seconds of idleness: linear from
        (0, 0) through the measured points, flat past the last."""
        idle, extra = self.wake_idle_s, self.wake_extra_s
        if not idle or idle_s <= 0:
            return 0.0
        i = bisect_left(idle, idle_s)
        if i == len(idle):
            return extra[-1]
        x0, y0 = (idle[i - 1], extra[i - 1]) if i else (0.0, 0.0)
        return y0 + (extra[i] - y0) * (idle_s - x0) / (idle[i] - x0)

    def rows_cost(self, rows: int) -> float:
        """Seconds for `rows` rows: linear between knots (extended along the last segment past
        the last knot), plus the tails of rows >= 2 that are not a multiple of 2, 4, 8."""
        knots, costs = self.row_knots, self.row_costs
        if rows <= 0 or not knots:
            return 0.0
        i = bisect_left(knots, rows)
        if i < len(knots) and knots[i] == rows:
            base = costs[i]
        else:
            lo = max(min(i, len(knots) - 1) - 1, 0)  # segment [lo, lo + 1], the last past the end
            hi = min(lo + 1, len(knots) - 1)
            slope = (costs[hi] - costs[lo]) / (knots[hi] - knots[lo]) if hi > lo \
                else costs[lo] / knots[lo]
            base = costs[lo] + slope * (rows - knots[lo])
        if rows >= 2:
            t1, t2, t4 = self.row_tails
            base += t1 * (rows & 1) + t2 * (rows >> 1 & 1) + t4 * (rows >> 2 & 1)
        return base

    @property
    def counts_gathered(self) -> bool:
        """Whether predictions depend on decode_gathered (a profile that lacks it: no)."""
        return self.coefficients[FEATURES.index("decode_gathered")] > 0

    def predict(self, prefill_tokens, prefill_attention, prefill_seqs, decode_seqs,
                decode_context, padding_seqs, sampled_seqs, prefill_context,
                decode_span, decode_gathered, decoding) -> float:
        c0, c_sampled, c_chunk, c_att, c_pctx, c_dec, c_ctx, c_span, c_pad, c_gath, c_decoding = \
            self.coefficients
        return (self.rows_cost(prefill_tokens + decode_seqs + padding_seqs)
                + c0 + c_sampled * sampled_seqs + c_chunk * prefill_seqs
                + c_att * prefill_attention + c_pctx * prefill_context + c_dec * decode_seqs
                + c_ctx * decode_context + c_span * decode_span + c_pad * padding_seqs
                + c_gath * decode_gathered + c_decoding * decoding)

    def predict_shape(self, shape: StepShape) -> float:
        return self.predict(*shape.counts())


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
        if data.get("format") != FORMAT:
            raise ValueError(f"{path}: profile format {data.get('format')!r}, this servesim "
                             f"reads {FORMAT!r}; profile again with `servesim profile`")
        fit = data["cost_model"]
        given = LATER_FEATURES | fit["coefficients"]
        coefficients = tuple(float(given[name]) for name in FEATURES)
        rows, wake = fit["rows"], fit["wake"]
        after = fit.get("after_prefill", {"prefill_tokens": [], "extra_s": []})
        try:
            jitter = Jitter.from_dict(fit["jitter"]) if "jitter" in fit else None
        except ValueError as exc:
            raise ValueError(f"{path}: cost_model.{exc}") from None
        return FittedCost(coefficients, dict(data["model"]), str(path),
                          tuple(int(k) for k in rows["knots"]),
                          tuple(float(c) for c in rows["costs_s"]),
                          tuple(float(rows["tails_s"][name]) for name in ROW_TAILS),
                          tuple(float(x) for x in wake["idle_s"]),
                          tuple(float(x) for x in wake["extra_s"]), jitter,
                          float(fit["reference_s"]) if "reference_s" in fit else None,
                          tuple(int(n) for n in after["prefill_tokens"]),
                          tuple(tuple(float(x) for x in row) for row in after["extra_s"]))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
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
