"""`LinearCost`: the explicit what-if cost model (docs/sim/cost_models.md, "`linear`"),

    step_s = step_overhead_s + prefill_token_s * prefill_tokens + decode_seq_s * decode_seqs
             + context_token_s * decode_context,

for analytic checks and questions of the form "what if a decode cost twice as much".
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import CostModel
from .shape import StepShape

LINEAR_FIELDS = ("step_overhead_s", "prefill_token_s", "decode_seq_s", "context_token_s")


@dataclass(frozen=True)
class LinearCost(CostModel):
    """The four coefficients (seconds, and seconds per unit of each count); no optional hook."""

    source = "the linear cost model"

    step_overhead_s: float
    prefill_token_s: float
    decode_seq_s: float
    context_token_s: float

    def __post_init__(self):
        for name in LINEAR_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"cost.{name} must be a number >= 0, got {value!r}")

    def step_time(self, shape: StepShape):
        return (self.step_overhead_s + self.prefill_token_s * shape.prefill_tokens
                + self.decode_seq_s * shape.decode_seqs
                + self.context_token_s * shape.decode_context)
