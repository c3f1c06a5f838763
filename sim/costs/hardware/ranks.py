"""Attention data parallelism's share of a step: the ranks step together (the routed experts
need every rank's tokens), so a step lasts as long as its most loaded rank takes through every
operator but the routed experts (`cost.py`, its tables by rows `row_tables.py`). The pool's
scheduler does not say which rank a sequence is on; a rank is taken to hold a ceiling share of
the step's sequences.
"""

from __future__ import annotations

import math

import numpy as np

from ..shape import StepShape


def rank_shape(shape: StepShape, dp: int) -> StepShape:
    """The most loaded of `dp` data-parallel ranks' share of a step (numbers, or arrays of a
    decode-only run): ceil(n / dp) of its n decodes, with their share of the keys attended;
    ceil(m / dp) of its m prefill chunks, with that share of the tokens (rounded up), of the
    attention work and of the context, but at least the step's token-weighted mean chunk
    (sum n^2 / sum n, at most its longest: a chunk is one sequence's, never split over
    ranks); its padding and sampled rows likewise."""
    decodes = shape.decode_seqs
    ranks_decodes = -(-decodes // dp)
    if isinstance(decodes, np.ndarray):
        context = np.where(decodes > 0, shape.decode_context * ranks_decodes
                           / np.maximum(decodes, 1), 0)
        span = np.where(decodes > 0, shape.decode_span * ranks_decodes
                        / np.maximum(decodes, 1), 0)
    else:
        context = shape.decode_context * ranks_decodes / decodes if decodes else 0
        span = shape.decode_span * ranks_decodes / decodes if decodes else 0
    chunks, tokens = shape.prefill_seqs, shape.prefill_tokens
    share = max(-(-chunks // dp) / chunks, shape.prefill_square / tokens ** 2) if chunks else 0.0
    return StepShape(prefill_tokens=math.ceil(tokens * share),
                     prefill_attention=shape.prefill_attention * share,
                     prefill_seqs=-(-chunks // dp),
                     decode_seqs=ranks_decodes, decode_context=context,
                     padding_seqs=-(-shape.padding_seqs // dp),
                     sampled_seqs=-(-shape.sampled_seqs // dp),
                     prefill_context=shape.prefill_context * share,
                     decode_span=span, decode_gathered=shape.decode_gathered,
                     decoding=shape.decoding,
                     prefill_square=shape.prefill_square * share)
