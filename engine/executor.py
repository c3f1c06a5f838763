"""Executors run a `StepPlan`; `NumpyExecutor` runs it for real on paged KV storage.

The engine loop is `plan = scheduler.schedule(now); result = executor.execute(plan);
scheduler.postprocess(plan, result.tokens)`. An executor returns the sampled tokens (None when
nothing real is computed, as in the simulator's cost-model executor) and the step's duration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .block_manager import BlockManager
from .model import normalize_params
from .model_runner import Workspace, build_batch_step_input, forward_step, sample_tokens
from .paged_kv_cache import PagedKVStorage
from .step_plan import StepPlan


@dataclass(frozen=True)
class StepResult:
    """What a step produced: tokens {seq_id: token id} (None in simulation), its duration in
    seconds and, when asked for, the logits [V] each sampled token was drawn from. `failed`:
    {seq_id: exception} for the sequences whose sampling raised (they have no token; the step's
    other sequences are unaffected, see `LLMEngine.step`)."""

    tokens: dict[int, int] | None
    duration_s: float
    logits: dict[int, np.ndarray] | None = None
    failed: dict[int, Exception] = field(default_factory=dict)


class NumpyExecutor:
    """The real engine: one batched forward pass per step over paged KV storage it owns
    (K and V [n_layers, num_blocks, block_size, n_heads, head_dim] float32, sized from the block
    manager). `rng` draws every sampled token; it is a public attribute and may be replaced.
    `swap_blocks`: host blocks for swap preemption (`host`, the same layout), which a step's
    `swap_out` and `swap_in` block pairs are copied to and from before its forward pass."""

    def __init__(self, params: dict, block_manager: BlockManager, *, rng: np.random.Generator,
                 swap_blocks: int = 0):
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"NumpyExecutor: rng must be a numpy.random.Generator, "
                            f"got {type(rng).__name__}")
        self.params = normalize_params(params)
        self.block_manager = block_manager
        self.rng = rng
        self.storage = PagedKVStorage.for_model(self.params, block_manager.num_blocks,
                                                block_manager.block_size)
        self.host = PagedKVStorage.for_model(self.params, swap_blocks, block_manager.block_size) \
            if swap_blocks else None
        self.workspace = Workspace()

    def execute(self, plan: StepPlan, *, return_logits: bool = False) -> StepResult:
        """Compute the plan's tokens' K/V, sample one token per sampling sequence (a sequence
        whose sampling raises is listed in `failed` instead); the whole step is timed with
        time.perf_counter()."""
        t0 = time.perf_counter()
        if plan.swap_out:
            copy_blocks(self.storage, self.host, plan.swap_out)
        if plan.swap_in:
            copy_blocks(self.host, self.storage, plan.swap_in)
        if not (plan.prefills or plan.decodes):
            return StepResult({}, time.perf_counter() - t0, {} if return_logits else None)
        inp = build_batch_step_input(plan.decodes, self.block_manager, prefills=plan.prefills,
                                     padding_seqs=plan.padding_seqs)
        logits = forward_step(self.params, self.storage, inp, self.workspace)  # [S, V]
        tokens, failed = sample_tokens(inp.sample_seqs, logits, self.rng)
        duration_s = time.perf_counter() - t0
        rows = {seq.seq_id: row for seq, row in zip(inp.sample_seqs, logits)} \
            if return_logits else None
        return StepResult(tokens, duration_s, rows, failed)


def copy_blocks(source: PagedKVStorage, target: PagedKVStorage, pairs) -> None:
    """Copy whole KV blocks, every layer's keys and values: (source block, target block)
    pairs."""
    src, dst = np.array(pairs, dtype=np.int64).T  # [n] each
    target.k[:, dst] = source.k[:, src]
    target.v[:, dst] = source.v[:, src]
