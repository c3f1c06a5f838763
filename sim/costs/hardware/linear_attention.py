"""A step's linear attention (Gated DeltaNet: Qwen3-Next's and Qwen3.5's linear layers), a group
of layers of its own in `attention.StepAttention`: its convolution and delta rule cost a step
by its chunks and decodes, never its keys, from the measured kernels where the tables have them
(`MeasuredAttention.linear_prefill`, `linear_decode`), else by the roofline of
`attention.linear_group`, whose constants are here (docs/sim/hardware.md, "Linear attention");
past the tables' reach, their time where they end times the roofline's growth, as for
attention.
"""

from __future__ import annotations

import math
from typing import Protocol

from .reach import growth

# Tokens a chunk of the delta rule's chunked form (its prefill kernels': 64)
DELTA_CHUNK = 64
# The roofline's prefill of the chunked form (docs/sim/hardware.md, "Linear attention"): its
# kernels (FLA's, which vLLM, SGLang and TensorRT-LLM run or follow: the gates' cumulative sum,
# the chunk's key products, their triangular inverse, the WY representation, the chunks'
# states, the output); the seconds it takes a chunk at least (a sequence's chunks run one after
# another, each from the state the one before leaves; its heads and the other sequences beside
# them); and the share of the GPU's peak its FLOPs reach (its matmuls are 64 x 128). The last
# two fitted to the package's measured tables (`benchmarks/linear_attention_accuracy.py`): the
# per-chunk time of one prompt at few heads (2 to 3.3 us on the H100 to the GB300) and the
# throughput of 4 and 16 prompts at once
DELTA_KERNELS = 6
DELTA_STEP_S = 3.0e-6
DELTA_EFFICIENCY = 0.08


class LinearGroup(Protocol):
    """What the linear layers' `attention.Attention` holds (`attention.linear_group`): seconds
    of their launches, of a token's FLOPs at the peak and activations, of a sequence's state
    read and written, and in prefill of a chunk at least, all layers; and how many layers."""

    launch_s: float
    flop_s: float
    query_s: float
    key_s: float
    step_s: float
    layers: int


class LinearSteps:
    """The linear-attention part of `attention.StepAttention` (module docstring): a mixin that
    reads its `measured`, `tables` and `top_compute` and calls its `_past_reach`."""

    def _linear_prefill(self, group: LinearGroup, chunks: float, tokens: float,
                        square: float) -> float:
        """Seconds of the linear-attention layers' prefill of `chunks` chunks of `tokens` in
        all whose squared lengths add up to `square`: as tokens / L prompts of L tokens, L
        the chunks' length weighted by their tokens (square / tokens: a step's longest chunk,
        whose chunks run one after another, weighs as much as its tokens)."""
        length = square / tokens
        batch = tokens / length
        measured = math.nan if self.measured is None else \
            self.measured.linear_prefill(batch, length)
        if measured == measured:
            return group.layers * measured
        here = self._linear_prefill_roofline(group, chunks, tokens, length)
        if self.measured is None or not self.measured.linear_measured(decode=False):
            return here
        seconds = self.measured.linear_anchored(
            False, batch, length, lambda b, n: growth(here, (
                self._linear_prefill_roofline(group, b, b * n, n))))
        return self._past_reach("prefill linear", group, seconds)

    def _linear_prefill_roofline(self, group: LinearGroup, chunks: float, tokens: float,
                                 length: float) -> float:
        """The roofline's seconds of `chunks` chunks of `tokens` in all, their chunks of 64
        running one after another for `length` tokens."""
        return group.launch_s + max(group.flop_s * tokens / DELTA_EFFICIENCY,
                                    group.query_s * tokens + group.key_s * chunks,
                                    group.step_s * math.ceil(length / DELTA_CHUNK))

    def _linear_decode(self, group: LinearGroup, decodes: float) -> float:
        """Seconds of the linear-attention layers' decode of `decodes` sequences."""
        measured = math.nan if self.measured is None else self.measured.linear_decode(decodes)
        if measured == measured:
            return group.layers * measured
        here = self._linear_decode_roofline(group, decodes)
        if self.measured is None or not self.measured.linear_measured(decode=True):
            return here
        seconds = self.measured.linear_anchored(
            True, decodes, 1.0, lambda b, n: growth(here, self._linear_decode_roofline(group, b)))
        return self._past_reach("decode linear", group, seconds)

    def _linear_decode_roofline(self, group: LinearGroup, decodes: float) -> float:
        return group.launch_s + max(group.flop_s * decodes / self.top_compute,
                                    (group.query_s + group.key_s) * decodes)
