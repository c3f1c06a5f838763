"""The step shapes the profiler measures, and how each becomes a real `StepPlan`.

A `ShapeSpec` lists prefill chunks as (tokens already computed, tokens in the chunk), decode
context lengths, and padding rows. `grid_shapes` is the structured training grid: pure prefills,
chunked prefills over a context, decode batches over a range of context lengths (equal and
mixed), mixed prefill + decode steps and static batching's padding rows. `held_out_shapes`
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
    prefills: tuple = ()  # ((tokens already computed, chunk tokens), ...)
    decodes: tuple = ()  # context length (tokens attended, itself included) of each decode
    padding: int = 0

    @property
    def kv_tokens(self) -> int:
        return sum(c + n for c, n in self.prefills) + sum(self.decodes)


def grid_shapes(quick: bool = False, max_tokens: int = 16384) -> list[ShapeSpec]:
    """The training grid; `quick` keeps a small subset for a fast, rougher profile."""
    prefill_n = (1, 16, 64, 256) if quick else (1, 8, 32, 96, 256, 512, 1024)
    chunks = ((128, 128), (512, 64)) if quick else \
        ((128, 128), (512, 64), (768, 256), (1536, 512), (2048, 128), (256, 16))
    batches = (1, 8, 32) if quick else (1, 4, 16, 48, 128)
    contexts = (32, 512) if quick else (16, 128, 512, 1536)
    shapes = [ShapeSpec(prefills=((0, n),)) for n in prefill_n]
    shapes += [ShapeSpec(prefills=(chunk,)) for chunk in chunks]
    shapes += [ShapeSpec(decodes=(ctx,) * b) for b in batches for ctx in contexts]
    shapes += [ShapeSpec(decodes=tuple(np.linspace(16, ctx, b).astype(int).tolist()))
               for b, ctx in ((8, 1024), (32, 512))]  # mixed context lengths
    shapes += [ShapeSpec(prefills=((0, 64),), decodes=(256,) * 16),
               ShapeSpec(prefills=((256, 128), (0, 32)), decodes=(128,) * 32),
               ShapeSpec(prefills=((0, 16),) * 4, decodes=(64,) * 8)]
    if not quick:
        shapes += [ShapeSpec(prefills=((512, 256),), decodes=(512,) * 8),
                   ShapeSpec(prefills=((0, 8),) * 16),
                   ShapeSpec(prefills=((0, 256),), decodes=(1024,) * 4)]
    shapes += [ShapeSpec(decodes=(128,) * b, padding=p) for b, p in ((2, 14), (8, 24))]
    return [s for s in shapes if s.kv_tokens <= max_tokens]


def held_out_shapes(rng: np.random.Generator, count: int, quick: bool = False,
                    max_tokens: int = 16384) -> list[ShapeSpec]:
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
        if (prefills or decodes) and shape.kv_tokens <= max_tokens:
            shapes.append(shape)
    return shapes


def build_plan(shape: ShapeSpec, block_manager: BlockManager, rng: np.random.Generator,
               vocab_size: int) -> StepPlan:
    """A plan with fresh sequences in the state `shape` describes (blocks reserved)."""
    plan = StepPlan(step=0, padding_seqs=shape.padding)
    for computed, n in shape.prefills:
        seq = _sequence(block_manager, rng, vocab_size, computed + n, computed + n)
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
