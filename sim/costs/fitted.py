"""`FittedCost`: the step-cost model measured on the real engine by `sim.profiling`,

    step_s = rows_cost(rows) + sum_f coefficients[f] * f   (f in FEATURES, `sim.costs.shape`),

where rows_cost is piecewise linear over `row_knots` plus a cost per leftover row block: BLAS
multiplies one row as a matrix-vector product (its own, cheaper kernel) and processes more rows
in blocks of 2^k, so rows not a multiple of 2, 4 or 8 go through slower tail code and a step of
7 rows costs more than one of 8; past the last knot (the largest step measured) it extends the
last segment, and a run with steps past twice that says so once. The coefficients include the
engine loop's own cost (scheduling, postprocessing, records): the served method times steps
inside the serving loop, the isolated grid adds the loop's cost measured apart;
`wake_cost(idle_s)` is added to the first step after the engine was idle that long (its CPU
slowed down or served other work meanwhile, and its caches went cold), and
`after_prefill_cost(tokens, k)` to the k-th step after a prefill of that many tokens (the
prefill evicted what the steps around it keep in cache). A profile may also carry its machine's
`jitter` (`sim.costs.jitter`), which the simulator applies when `cost.jitter`.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from ..notes import say_once
from .jitter import Jitter
from .model import CostModel
from .shape import StepShape

# The fitted model's linear features, in coefficient order; "step" is the per-step constant.
FEATURES = ("step", "sampled_seqs", "prefill_seqs", "prefill_attention", "prefill_context",
            "decode_seqs", "decode_context", "decode_span", "padding_seqs", "decode_gathered",
            "decoding")
# Features a profile may lack, with the value it then has: measured since profiles were first
# written (a profile without one predicts exactly what it did before).
LATER_FEATURES = {"decode_gathered": 0.0, "decoding": 0.0}
ROW_TAILS = ("rows_tail_1", "rows_tail_2", "rows_tail_4")  # rows % 2, rows // 2 % 2, rows // 4 % 2
MAX_COST_S = 3600.0  # no coefficient, row cost or extra cost of a step is an hour or more
PROFILED_BLOCK_SIZE = 16  # the KV block size the profiler measures with (`sim.profiling`)


_SHAPE_FEATURES = attrgetter(*FEATURES[1:])  # a shape's fields FEATURES[1:], as a tuple


def feature_vector(shape: StepShape) -> tuple:
    """A shape's linear features in FEATURES order ("step" is 1)."""
    return (1,) + _SHAPE_FEATURES(shape)


@dataclass(frozen=True)
class FittedCost(CostModel):
    """rows_cost(rows) + sum_i coefficients[i] * feature_i (seconds, FEATURES order). Without
    row knots the rows cost is 0 (a purely linear model). `model` is the model config the
    profile was measured on."""

    coefficients: tuple
    model: dict = field()  # required (`CostModel.model`'s None is no default here)
    source: str = "profile"
    row_knots: tuple = ()  # increasing row counts >= 1
    row_costs: tuple = ()  # seconds at each knot
    row_tails: tuple = (0.0, 0.0, 0.0)  # seconds per leftover block of 1, 2, 4 rows (ROW_TAILS)
    wake_idle_s: tuple = ()  # increasing idle durations (seconds) ...
    wake_extra_s: tuple = ()  # ... and the seconds added to the step after each
    jitter: Jitter | None = None  # the machine's speed from moment to moment (sim.costs.jitter)
    reference_s: float | None = None  # the profile's reference step, median seconds (calibrate)
    after_tokens: tuple = ()  # increasing prefill lengths ...
    after_extra_s: tuple = ()  # ... and, for each, the seconds added to each step after it
    block_size: int = PROFILED_BLOCK_SIZE  # the KV block size it was measured with (tokens)

    def __post_init__(self):
        if len(self.coefficients) != len(FEATURES):
            raise ValueError(f"{self.source}: cost_model.coefficients needs {len(FEATURES)} "
                             f"values ({', '.join(FEATURES)}), got {len(self.coefficients)}")
        values = list(self.coefficients) + list(self.row_costs) + list(self.row_tails)
        if any(not 0 <= c <= MAX_COST_S for c in values):
            raise ValueError(f"{self.source}: cost_model coefficients and row costs must be "
                             f"from 0 to {MAX_COST_S:g} s, got {values}")
        knots = list(self.row_knots)
        if len(knots) != len(self.row_costs) or len(self.row_tails) != len(ROW_TAILS) or \
                any(k < 1 for k in knots) or knots != sorted(set(knots)):
            raise ValueError(f"{self.source}: cost_model.rows needs increasing knots >= 1, one "
                             f"cost per knot and {len(ROW_TAILS)} tail costs")
        if self.reference_s is not None and not 0 < self.reference_s <= MAX_COST_S:
            raise ValueError(f"{self.source}: cost_model.reference_s must be above 0 and at "
                             f"most {MAX_COST_S:g} s, got {self.reference_s}")
        idle = list(self.wake_idle_s)
        if len(idle) != len(self.wake_extra_s) or any(not x > 0 for x in idle) or \
                idle != sorted(set(idle)) or \
                any(not 0 <= x <= MAX_COST_S for x in self.wake_extra_s):
            raise ValueError(f"{self.source}: wake needs increasing idle_s > 0 and one "
                             f"extra_s >= 0 for each")
        after = list(self.after_tokens)
        if len(after) != len(self.after_extra_s) or any(not n > 0 for n in after) or \
                after != sorted(set(after)) or \
                len({len(row) for row in self.after_extra_s}) > 1 or \
                any(not 0 <= x <= MAX_COST_S for row in self.after_extra_s for x in row):
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

    @property
    def after_prefill_steps(self) -> int:
        """How many steps after a prefill pay `after_prefill_cost` (0 past them)."""
        return len(self.after_extra_s[0]) if self.after_extra_s else 0

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

    def rows_cost(self, rows):
        """Seconds for `rows` rows (an int, or an array of them for the steps of a run): linear
        between knots (extended along the last segment past the last knot), plus the tails of
        rows >= 2 that are not a multiple of 2, 4, 8."""
        if isinstance(rows, np.ndarray):  # each distinct count once, exactly as for an int
            counts, index = np.unique(rows, return_inverse=True)
            return np.array([self._rows_cost(int(r)) for r in counts])[index]
        return self._rows_cost(rows)

    def _rows_cost(self, rows: int) -> float:
        knots, costs = self.row_knots, self.row_costs
        if rows <= 0 or not knots:
            return 0.0
        i = bisect_left(knots, rows)
        if i < len(knots) and knots[i] == rows:
            base = costs[i]
        else:
            if rows > 2 * knots[-1]:
                self._say_past_reach()
            lo = max(min(i, len(knots) - 1) - 1, 0)  # segment [lo, lo + 1], the last past the end
            hi = min(lo + 1, len(knots) - 1)
            slope = (costs[hi] - costs[lo]) / (knots[hi] - knots[lo]) if hi > lo \
                else costs[lo] / knots[lo]
            base = costs[lo] + slope * (rows - knots[lo])
        if rows >= 2:
            t1, t2, t4 = self.row_tails
            base += t1 * (rows & 1) + t2 * (rows >> 1 & 1) + t4 * (rows >> 2 & 1)
        return base

    def _say_past_reach(self) -> None:
        say_once(f"note: cost.profile: {self.source} measured steps of up to "
                 f"{self.row_knots[-1]:,} rows; steps of more than twice that are costed by "
                 f"extending its last segment (scheduler.chunked_prefill with a smaller "
                 f"engine.max_num_batched_tokens keeps steps within it)")

    @property
    def counts_gathered(self) -> bool:
        """Whether predictions depend on decode_gathered (a profile that lacks it: no)."""
        return self.coefficients[FEATURES.index("decode_gathered")] > 0

    def step_time(self, shape: StepShape):
        """rows_cost(rows) + "step", then each feature's term added in FEATURES order (always
        this order: the sum, rounding included, is the one every profile was checked with).
        Written out rather than looped over FEATURES: it runs every simulated step, and the
        loop takes half as long again; `feature_vector` is the loop, and a test checks both
        give the same."""
        c0, c_sampled, c_chunk, c_att, c_pctx, c_dec, c_ctx, c_span, c_pad, c_gath, c_decoding = \
            self.coefficients  # FEATURES order
        s = shape
        return (self.rows_cost(s.rows) + c0 + c_sampled * s.sampled_seqs + c_chunk * s.prefill_seqs
                + c_att * s.prefill_attention + c_pctx * s.prefill_context
                + c_dec * s.decode_seqs + c_ctx * s.decode_context + c_span * s.decode_span
                + c_pad * s.padding_seqs + c_gath * s.decode_gathered + c_decoding * s.decoding)
