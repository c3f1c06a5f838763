"""The step shapes the profiler measures, and how each becomes a real `StepPlan`.

A `ShapeSpec` lists prefill chunks as (tokens already computed, tokens in the chunk), decode
context lengths, and padding rows. `grid_shapes` is the structured training grid: decode batches
of every size up to 16 and a spread beyond, over short, long and mixed context lengths; pure
prefills of every length up to 12 and a spread beyond; chunked prefills over a context, several
prompts at once (static batching), mixed prefill + decode steps and padding rows. `held_out_shapes`
draws random mixed steps from the same ranges, which the fit never sees: its error on them is
the profile's reported accuracy.

`build_plan` makes real sequences (random token ids, block tables reserved in a `BlockManager`)
in the exact state the scheduler would hand them over in, so the executor runs the step as in
serving; `release` frees their blocks afterwards.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from engine.block_manager import BlockManager
from engine.sequence import SamplingParams, Sequence
from engine.step_plan import StepPlan

SAMPLING = SamplingParams(temperature=1.0)  # what real runs sample with (sim.runner)


@dataclass(frozen=True)
class ShapeSpec:
    # ((tokens already computed, chunk tokens[, prompt tokens after the chunk]), ...): a chunk
    # followed by more prompt tokens does not complete its sequence and samples nothing
    prefills: tuple = ()
    decodes: tuple = ()  # context length (tokens attended, itself included) of each decode
    padding: int = 0

    @property
    def kv_tokens(self) -> int:
        return sum(c + n for c, n, *_ in self.prefills) + sum(self.decodes)


# Decode batch sizes and prefill lengths: every count up to 16 (one row is a matrix-vector
# product; BLAS handles rows in blocks, so 7 rows can cost more than 8), then a spread of odd and
# even counts, so the fit sees every kind of leftover rows.
DECODE_BATCHES = (*range(1, 17), 20, 24, 27, 32, 37, 48, 53, 64, 75, 96, 111, 128, 192, 256)
PREFILL_TOKENS = (*range(1, 13), 16, 20, 24, 31, 37, 48, 57, 64, 77, 96, 113, 128, 150, 192,
                  222, 256, 300, 384, 450, 512, 640, 768, 1024, 1536, 2048)
QUICK_BATCHES = (1, 2, 3, 4, 5, 7, 8, 12, 16, 27, 32)
QUICK_PREFILL = (1, 2, 3, 5, 8, 16, 31, 64, 128, 256)


def grid_shapes(quick: bool = False, max_tokens: int = 16384,
                max_seq_len: int = 4096) -> list[ShapeSpec]:
    """The training grid (`quick`: a small subset for a fast, rougher profile). Shapes that hold
    more than `max_tokens` KV tokens or reach past `max_seq_len` are left out."""
    batches, prefill_n = (QUICK_BATCHES, QUICK_PREFILL) if quick else (DECODE_BATCHES,
                                                                       PREFILL_TOKENS)
    shapes = []
    for b in batches:
        contexts = [(32,) * b, (256,) * b, (1024,) * b]
        if b > 1:  # mixed lengths: decode attention pads every sequence to the longest
            contexts += [arrival_order(np.linspace(16, 1008, b).astype(int), b),
                         arrival_order([32] * (b - 1) + [768], b)]
        shapes += [ShapeSpec(decodes=c) for c in contexts[: 2 if quick else None]]
    shapes += [ShapeSpec(prefills=((0, n),)) for n in prefill_n]
    chunks = ((128, 128), (512, 64), (100, 1), (300, 7)) if quick else \
        ((128, 128), (512, 64), (768, 256), (1536, 512), (2048, 128), (256, 16), (100, 1),
         (300, 7), (1000, 255))
    shapes += [ShapeSpec(prefills=(chunk,)) for chunk in chunks]
    several = ((2, 100), (4, 64), (16, 30)) if quick else \
        ((2, 100), (4, 64), (8, 128), (16, 128), (16, 30), (3, 250), (6, 200))
    shapes += [ShapeSpec(prefills=((0, n),) * k) for k, n in several]
    mixed = ((1, 100, 0), (4, 64, 0), (8, 200, 300)) if quick else \
        ((1, 100, 0), (4, 64, 0), (16, 256, 0), (8, 200, 300), (32, 100, 0), (3, 37, 0),
         (12, 244, 500), (64, 192, 0), (2, 500, 0))
    shapes += [ShapeSpec(prefills=((c, n),),
                         decodes=arrival_order(np.linspace(16, 800, b).astype(int), b))
               for b, n, c in mixed]
    # Rows that are not decodes (padding, prefill tokens) beside decodes, and chunks that sample
    # nothing: without them a decode's own cost (attention, sampling) and its row's share of
    # the matmuls could not be told apart, nor a chunk's sampling from its attention.
    padded = ((1, 7), (2, 6), (3, 5), (5, 3), (1, 15), (4, 12), (8, 8), (12, 4), (2, 30), (9, 23),
              (16, 16), (24, 8))
    shapes += [ShapeSpec(decodes=(200,) * b, padding=p)
               for b, p in (padded[::3] if quick else padded)]
    with_prefill = ((8, (1, 4, 16)), (32, (2, 8, 32)), (128, (1, 6, 24))) if not quick else \
        ((32, (2, 8)),)
    shapes += [ShapeSpec(prefills=((0, n),), decodes=(200,) * b)
               for n, batches in with_prefill for b in batches]
    partial = ((0, 16, 32), (0, 64, 64), (0, 256, 128), (128, 128, 64)) if not quick else \
        ((0, 64, 64),)
    shapes += [ShapeSpec(prefills=(chunk,)) for chunk in partial]
    shapes += [ShapeSpec(prefills=(chunk,), decodes=(200,) * 8) for chunk in partial[1:2]]
    return [s for s in shapes if fits(s, max_tokens, max_seq_len)]


def arrival_order(contexts, seed: int) -> tuple:
    """The context lengths in a fixed random order. A server's decode batch comes in admission
    order, not sorted by length, and the order matters: the engine gathers keys a group of
    sequences at a time, padded to the group's longest (`engine.model_runner`), so a batch
    sorted by length costs less than the same lengths as a server lists them."""
    return tuple(int(c) for c in np.random.default_rng(seed).permutation(np.asarray(contexts)))


def fits(shape: ShapeSpec, max_tokens: int, max_seq_len: int) -> bool:
    """Whether the shape holds at most max_tokens KV tokens and every position < max_seq_len."""
    return shape.kv_tokens <= max_tokens and longest(shape) <= max_seq_len


def longest(shape: ShapeSpec) -> int:
    """The most tokens one of the shape's sequences holds (the model's max_seq_len must be at
    least this)."""
    return max([c + n + sum(rest) for c, n, *rest in shape.prefills] + list(shape.decodes),
               default=0)


def held_out_shapes(rng: np.random.Generator, count: int, quick: bool = False,
                    max_tokens: int = 16384, max_seq_len: int = 4096) -> list[ShapeSpec]:
    """Random steps mixing a few prefill chunks, a decode batch and sometimes padding."""
    max_chunk = 256 if quick else 768
    shapes = []
    while len(shapes) < count:
        prefills = tuple((int(rng.choice([0, 0, rng.integers(16, 1024)])),
                          int(rng.integers(1, max_chunk + 1))) for _ in range(rng.integers(0, 3)))
        b = int(rng.integers(0, 65 if quick else 129))
        decodes = tuple(int(c) for c in rng.integers(8, 1025, size=b))
        padding = int(rng.integers(1, 17)) if not prefills and b and rng.random() < 0.2 else 0
        shape = ShapeSpec(prefills, decodes, padding)
        if (prefills or decodes) and fits(shape, max_tokens, max_seq_len):
            shapes.append(shape)
    return shapes


def build_plan(shape: ShapeSpec, block_manager: BlockManager, rng: np.random.Generator,
               vocab_size: int) -> StepPlan:
    """A plan with fresh sequences in the state `shape` describes (blocks reserved)."""
    plan = StepPlan(step=0, padding_seqs=shape.padding)
    for computed, n, *rest in shape.prefills:
        seq = _sequence(block_manager, rng, vocab_size, computed + n + sum(rest), computed + n)
        seq.num_computed_tokens = computed
        plan.prefills.append((seq, n))
    for context in shape.decodes:
        # context - 1 prompt tokens and one sampled token whose KV this step computes
        seq = _sequence(block_manager, rng, vocab_size, context - 1, context)
        seq.append_token(int(rng.integers(vocab_size)))
        seq.num_computed_tokens = context - 1
        plan.decodes.append(seq)
    return plan


def release(plan: StepPlan, block_manager: BlockManager) -> None:
    for seq in [s for s, _ in plan.prefills] + plan.decodes:
        block_manager.free_sequence(seq.seq_id)


_next_id = itertools.count()


def _sequence(bm: BlockManager, rng, vocab_size: int, prompt_len: int, kv_tokens: int):
    seq_id = next(_next_id)
    ids = rng.integers(0, vocab_size, size=prompt_len).tolist()
    seq = Sequence(f"profile-{seq_id}", prompt_len, 16, prompt_token_ids=ids, seq_id=seq_id,
                   sampling=SAMPLING)
    bm.ensure_capacity(seq_id, kv_tokens)
    return seq
