"""Runs of repeated decode steps: the steps after a decode-only step that repeat it exactly.

After a step whose plan only decodes (no prefill chunk, no preemption, every running sequence
decoding), the following steps plan the same thing, each sequence one token further, until one
of three things: a sequence emits its last token (that step still repeats; the next admits or
shrinks), a sequence needs a KV block and none is free (that step preempts: not a repeat), or a
request arrives (the caller's business: it knows the clock). Nothing else can change the plan:
admission failed in the step itself (or nothing waited), and the reasons it fails (the running
count, the token budget, the free blocks) stay or get worse while nothing finishes or arrives.

The simulator uses this to advance such a run in one go instead of step by step: `plan_run`
finds how many steps can repeat and where their KV blocks are allocated, without changing
anything; `apply_run` then applies a number of them (block allocations in the very order the
scheduler makes them, token counts, finishes) and returns what the step records need. Only
simulated sequences qualify (they stop by length alone: no sampled token can end one early).
The result is the step-by-step path's, exactly: same steps, blocks, tokens and finishes
(`tests/test_decode_runs.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scheduler import Scheduler
from .step_plan import StepPlan


@dataclass(frozen=True)
class DecodeRun:
    """Up to `max_steps` steps after `plan` (not yet postprocessed) that repeat it. For each
    decoding sequence i (in running order): the first repeat at which it needs a new KV block
    (`first_block[i]`, then one every block_size repeats)."""

    plan: StepPlan
    max_steps: int
    first_block: np.ndarray  # [B] int64, repeat index (1-based) of each sequence's next block

    def allocations(self, steps: int, block_size: int) -> list[tuple[int, int]]:
        """(repeat, sequence index) of every block allocated in the first `steps` repeats, in the
        order the scheduler allocates them: step by step, in running order within a step."""
        pairs = [(j, i) for i, first in enumerate(self.first_block.tolist())
                 for j in range(first, steps + 1, block_size)]
        pairs.sort()
        return pairs


def plan_run(scheduler: Scheduler, plan: StepPlan) -> DecodeRun | None:
    """The run of steps after `plan` that repeat it, or None when the next step cannot be a
    repeat. Call after `plan` is scheduled and before it is postprocessed; changes nothing."""
    decodes = plan.decodes
    if plan.prefills or plan.preempted or not decodes or len(decodes) != len(scheduler.running):
        return None
    bm = scheduler.block_manager
    bs, tables = bm.block_size, bm.block_tables
    # Repeat j writes the KV row prompt_len + num_output_tokens - 1 + j and emits output token
    # num_output_tokens + 1 + j (counts before `plan` is postprocessed).
    finish, first_block = [], []
    for seq in decodes:
        if seq.output_token_ids or seq.prompt_token_ids is not None:
            return None  # a real sequence: a sampled token may end it early
        row = seq.prompt_len + seq.num_output_tokens - 1
        finish.append(seq.max_new_tokens - seq.num_output_tokens - 1)
        first_block.append(len(tables[seq.seq_id]) * bs - row)
    max_steps = min(finish)
    if max_steps < 1:
        return None  # `plan` itself finishes a sequence: the next step differs
    first = np.array(first_block, dtype=np.int64)  # [B] >= 1
    free = bm.num_free
    if _blocks_by(first, max_steps, bs) > free:
        # The repeat whose allocations run out of free blocks preempts: stop before it.
        lo, hi = 0, max_steps  # blocks by lo fit, by hi do not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if _blocks_by(first, mid, bs) <= free else (lo, mid)
        max_steps = lo
    return DecodeRun(plan, max_steps, first) if max_steps else None


def _blocks_by(first: np.ndarray, steps: int, block_size: int) -> int:
    """KV blocks the first `steps` repeats allocate."""
    return int(np.maximum((steps - first) // block_size + 1, 0).sum())


def apply_run(scheduler: Scheduler, run: DecodeRun, steps: int):
    """Apply the first `steps` repeats of `run` (1 <= steps <= run.max_steps), after its plan
    was postprocessed. Returns (kv_blocks_used [steps] after each repeat's planning, the
    sequences that finished in the last one)."""
    assert 1 <= steps <= run.max_steps
    bm, decodes = scheduler.block_manager, run.plan.decodes
    allocations = run.allocations(steps, bm.block_size)
    for _, i in allocations:
        bm.allocate_block(decodes[i].seq_id)
    per_step = np.bincount([j for j, _ in allocations], minlength=steps + 1)[1:]  # [steps]
    used = bm.num_used - len(allocations) + np.cumsum(per_step)  # [steps]
    last_step = run.plan.step + steps
    finished = []
    for seq in decodes:
        seq.num_computed_tokens += steps
        seq.num_output_tokens += steps
        seq.last_token_step = last_step
        if seq.num_output_tokens == seq.max_new_tokens:
            seq.finish_reason = "length"
            finished.append(seq)
    scheduler.num_steps += steps
    if finished:
        scheduler.retire(finished, last_step)
    return used, finished
