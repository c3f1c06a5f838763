"""Runs of decode-only steps whose plans are known in advance.

After a step in which every running sequence decodes or completes its prefill, with no preemption,
the following steps decode exactly those sequences, each one token further a step, until one of: a
sequence needs a KV block and none is free (that step preempts: not part of the run), a request
arrives (the caller's business: it knows the clock), or a sequence emits its last token. No
admission can happen in between: nothing is waiting, or the step before the run only decoded and
its own admission failed, for reasons (the running count, the token budget, the free blocks; under
guaranteed no evict the free blocks less those owed, which stay as they are: each block a decode
takes is one less owed) that stay or get worse while nothing finishes or arrives (but two,
which `plan_run` refuses to run over: with prefix caching and without chunked prefill, a
recomputation longer than the budget heading the queue is split, and admitted, once evictions
leave it more uncached tokens than the budget; under SGLang's capacity policy the share of the
running requests' future tokens that admission reserves falls in each step of decodes, so a run
is taken only while nothing waits). After a finish the run may go on with the sequences left,
when nothing can take the finished one's place: nothing is waiting (continuous batching), or
the static batch in flight is not done (it pads the finished slot).

The simulator uses this to advance such a run in one go instead of step by step: `plan_run`
finds how many steps the run may take (changing nothing), `apply_run` applies a number of them
(block allocations in the very order the scheduler makes them, block frees at each finish,
token counts) through the scheduler's public methods and returns what the step records need.
Only simulated sequences qualify (they stop by length alone: no sampled token can end one
early). The result is the step-by-step path's, exactly: the same steps, blocks, tokens and
finishes (`tests/test_decode_runs.py`).

Repeats are numbered 1, 2, ... after the step they follow (`DecodeRun.plan`). In the counts of
a sequence before that step is postprocessed (`num_output_tokens` = o), repeat j computes the KV
row prompt_len + o - 1 + j and emits output token o + 1 + j, whether the step decoded it or
completed its prefill.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate

import numpy as np

from engine.block_hashes import own_keys
from engine.scheduler import Scheduler
from engine.sequence import Sequence
from engine.step_plan import StepPlan

from .steady import SteadyScheduler

# With steady decoders counted in bulk, a run that ends at a finish is only taken when it is at
# least this long: bringing every count up to date costs a pass over the batch.
STEADY_MIN_RUN = 16


@dataclass(frozen=True)
class DecodeRun:
    """Up to `max_steps` decode steps after `plan` (scheduled, not yet postprocessed). For each
    running sequence i (`members`, in running order): the repeat in which it emits its last
    token (`finish[i]`; it decodes in repeats 1 .. finish[i]) and the first in which it needs a
    new KV block (`first_block[i]`, then one every block_size repeats)."""

    plan: StepPlan
    members: tuple[Sequence, ...]
    max_steps: int
    finish: tuple[int, ...]
    first_block: tuple[int, ...]
    pads_finished: bool  # static batching: a finished sequence's slot stays as a padding row

    @cached_property
    def first_finish(self) -> int:
        """The first repeat in which a member emits its last token."""
        return min(self.finish)

    @cached_property
    def _finish_sorted(self) -> np.ndarray:
        return np.sort(np.asarray(self.finish, dtype=np.int64))  # [B]

    def finished_before(self, repeats: np.ndarray) -> np.ndarray:
        """How many members finished before each of `repeats` [K] (decoding: B minus that)."""
        return np.searchsorted(self._finish_sorted, repeats, side="left")

    def decoding(self, repeats: np.ndarray) -> np.ndarray:
        """How many members decode in each of `repeats` [K]."""
        return len(self.finish) - self.finished_before(repeats)

    def padding(self, decoding):
        """Padding rows of a repeat in which `decoding` members decode (an int, or an array
        of them)."""
        finished = len(self.finish) - decoding if self.pads_finished else 0 * decoding
        return self.plan.padding_seqs + finished

    def sum_max_by_finished(self, values) -> tuple[np.ndarray, np.ndarray]:
        """(sums [B + 1], maxima [B + 1]) of an integer per member (`values[i]` for member i)
        over the members still decoding when p have finished: index them with
        `finished_before(repeats)`."""
        n = len(values)
        total, most = [0] * (n + 1), [0] * (n + 1)  # index n: nobody left (never read for max)
        for p, i in zip(range(n - 1, -1, -1),  # latest finish first: suffixes in finish order
                        sorted(range(n), key=self.finish.__getitem__, reverse=True)):
            total[p] = total[p + 1] + values[i]
            most[p] = values[i] if p == n - 1 else max(most[p + 1], values[i])
        return np.array(total, dtype=np.int64), np.array(most, dtype=np.int64)

    def segments(self, first: int, last: int):
        """(first repeat, last repeat, indices of the members decoding in them) for each
        stretch of repeats first..last in which the same members decode."""
        for end in sorted({f for f in self.finish if first <= f < last} | {last}):
            yield first, end, [i for i, f in enumerate(self.finish) if f >= end]
            first = end + 1


def plan_run(scheduler: Scheduler, plan: StepPlan, through_finishes: bool = True) -> DecodeRun | None:
    """The run of decode steps after `plan`, or None when the next step cannot start one. Call
    after `plan` is scheduled and before it is postprocessed; changes nothing.
    `through_finishes`: go on after a sequence finishes where nothing can take its place
    (False when a finish triggers something outside, such as a closed-loop user's next
    request)."""
    if scheduler.prefill_only:
        return None  # its sequences leave after their first token
    if scheduler.batch_wait.holding:
        return None  # prefills held back (batch waiting) run within a few steps
    members = scheduler.running
    static = scheduler.config.policy == "static"
    if plan.preempted or not members or \
            len(plan.decodes) + len(plan.prefills) != len(members) or \
            (plan.prefills and not static and (scheduler.waiting or scheduler.kv.landed)):
        return None  # a prefill's budget may admit the queue's head next step
    for seq, n in plan.prefills:
        if seq.num_computed_tokens + n != seq.num_tokens:
            return None  # a chunk of a longer prefill (or one stopping a token short)
    config = scheduler.config
    if scheduler.new_token_ratio is not None and (scheduler.waiting or scheduler.kv.landed):
        return None  # SGLang's reserved share decays each step: the head may be admitted
    if not config.enable_mixed_chunk and (plan.swapped_in or plan.kv_requested):
        # without mixed chunks a step of decodes readmits those whose KV is whole, up to the
        # first that would prefill, which the next step tries first
        return None
    if scheduler.waiting and scheduler.block_manager.prefix_caching and \
            not config.chunked_prefill and \
            scheduler.waiting.peek().num_tokens > config.max_num_batched_tokens:
        # a recomputation longer than the budget waits while its uncached tokens fit in a
        # step, and is split once they do not (`Scheduler.first_chunk`): the decodes'
        # evictions of its cached blocks could admit it within the run
        return None
    steady = _steady(scheduler)
    if steady is not None:  # steady decoders' counts lag (`sim.fastpath.steady`)
        first = steady.next_finish() - plan.step  # repeats to the first steady finish
        if first < 1 or (first < STEADY_MIN_RUN and (scheduler.waiting or scheduler.kv.landed
                                                      or not through_finishes)):
            return None  # a finish in `plan`, or a short run: stepping costs less
        steady.rebase()
    if any(seq.num_output_tokens + 1 >= seq.max_new_tokens for seq in members):
        return None  # `plan` itself finishes a sequence: the next step differs
    bm = scheduler.block_manager
    bs, tables = bm.block_size, bm.block_tables
    finish, first_block, held = [], [], []
    for seq in members:
        if seq.output_token_ids or seq.prompt_token_ids is not None:
            return None  # a real sequence: a sampled token may end it early
        blocks = len(tables[seq.seq_id])
        finish.append(seq.max_new_tokens - seq.num_output_tokens - 1)
        first_block.append(blocks * bs - (seq.prompt_len + seq.num_output_tokens - 1))
        held.append(blocks + bm.state_blocks)  # its state's come back with its KV blocks
    on = through_finishes and (static or not (scheduler.waiting or scheduler.kv.landed))
    max_steps = _fitting_steps(finish, first_block, held, max(finish) if on else min(finish),
                               bs, bm.num_free)
    recv = scheduler.recv
    if recv is not None and recv.inbox:  # the step that reads the requests that came may admit
        max_steps = min(max_steps, recv.steps_unread())
    if not max_steps:
        return None
    return DecodeRun(plan, tuple(members), max_steps, tuple(finish), tuple(first_block), static)


def _allocations(finish, first_block, steps: int, block_size: int) -> list[tuple[int, int]]:
    """(repeat, member index) of each block the first `steps` repeats allocate, in the order
    the scheduler allocates them: repeat by repeat, in running order within one."""
    pairs = [(j, i) for i, (f, first) in enumerate(zip(finish, first_block))
             for j in range(first, min(f, steps) + 1, block_size)]
    pairs.sort()
    return pairs


def _fitting_steps(finish, first_block, held, steps: int, block_size: int, free: int) -> int:
    """How many of the first `steps` repeats find every block they allocate free: the last
    repeat before one that would preempt. Blocks come back when a sequence finishes."""
    if sum((min(f, steps) - first) // block_size + 1
           for f, first in zip(finish, first_block) if first <= min(f, steps)) <= free:
        return steps  # enough even if nothing came back
    allocated_in, returned_after = {}, {}  # repeat -> blocks
    for j, i in _allocations(finish, first_block, steps, block_size):
        allocated_in[j] = allocated_in.get(j, 0) + 1
        if finish[i] < steps:
            returned_after[finish[i]] = returned_after.get(finish[i], 0) + 1
    for i, f in enumerate(finish):
        if f < steps:
            returned_after[f] = returned_after.get(f, 0) + held[i]
    for j in sorted(allocated_in.keys() | returned_after.keys()):
        if allocated_in.get(j, 0) > free:
            return j - 1
        free += returned_after.get(j, 0) - allocated_in.get(j, 0)
    return steps


def apply_run(scheduler: Scheduler, run: DecodeRun, steps: int):
    """Apply the first `steps` repeats of `run` (1 <= steps <= run.max_steps), after its plan
    was postprocessed. Returns (KV blocks used and KV blocks cached after each repeat's
    planning, two lists of `steps`, and the sequences that finished, in the order they did)."""
    assert 1 <= steps <= run.max_steps
    if scheduler.new_token_ratio is not None:  # SGLang's share decays as each repeat is planned,
        scheduler.new_token_ratio.decay(steps)  # before a finish that leaves the engine idle
    steady = _steady(scheduler)
    if steady is not None:  # the run's plan is postprocessed: every count up to date
        steady.rebase()
    bm, members, step0 = scheduler.block_manager, run.members, run.plan.step
    allocations = _allocations(run.finish, run.first_block, steps, bm.block_size)
    change = [0] * steps  # [steps] blocks used at a repeat's planning, minus at the one before
    change[0] = bm.num_used
    for j, _ in allocations:
        change[j - 1] += 1
    finishing = {}  # repeat -> members emitting their last token in it
    for seq, f in zip(members, run.finish):
        if f <= steps:
            finishing.setdefault(f, []).append(seq)
    fills = _fills(run, steps, bm.block_size) if bm.prefix_caching else {}
    # The blocks cached change where a fill caches one or an allocation evicts one: with any
    # cached, each repeat that allocates is applied on its own and the count read around it.
    tracked = bm.prefix_caching and (bm.num_cached > 0 or bool(fills))
    start_cached = bm.num_cached if bm.prefix_caching else 0
    cached_planned, cached_after = {}, {}  # repeat -> blocks cached at its planning, after it
    finished, a = [], 0
    # Repeat by repeat where something happens: its blocks are allocated (with those of the
    # repeats before), then the blocks it filled are cached, then its finishes return blocks.
    for f in sorted(finishing.keys() | fills.keys() |
                    ({j for j, _ in allocations} if tracked else set())):
        start = a
        while a < len(allocations) and allocations[a][0] <= f:
            a += 1
        if a > start:
            bm.allocate_blocks([members[i].seq_id for _, i in allocations[start:a]])
        if tracked:
            cached_planned[f] = bm.num_cached
        for i, block in fills.get(f, ()):
            scheduler.cache_blocks(members[i], block, block + 1)
        if tracked:
            cached_after[f] = bm.num_cached
        done = finishing.get(f)
        if not done:
            continue
        for seq in done:
            _advance(seq, f, step0)
            seq.finish_reason = "length"
        before = bm.num_used
        scheduler.retire(done, step0 + f)
        if f < steps:
            change[f] -= before - bm.num_used
        finished += done
    if a < len(allocations):
        bm.allocate_blocks([members[i].seq_id for _, i in allocations[a:]])
    for seq, f in zip(members, run.finish):
        if f > steps:
            _advance(seq, steps, step0)
    scheduler.num_steps += steps
    if scheduler.recv is not None:
        scheduler.recv.after_decodes(steps)
    if steady is not None:
        steady.after_run(members, steps)
    return list(accumulate(change)), _per_repeat(start_cached, cached_planned, cached_after,
                                                 steps), finished


def _steady(scheduler: Scheduler) -> SteadyScheduler | None:
    """The scheduler while it counts steady decoders in bulk (their counts lag), else None."""
    return scheduler if isinstance(scheduler, SteadyScheduler) and scheduler.engaged else None


def _per_repeat(count: int, planned: dict, after: dict, steps: int) -> list[int]:
    """[steps] a count at each repeat's planning, from `count` before the first and the
    counts read where it changes: at a repeat's planning (`planned`) and after it (`after`)."""
    out = []
    for j in range(1, steps + 1):
        count = planned.get(j, count)
        out.append(count)
        count = after.get(j, count)
    return out


def _fills(run: DecodeRun, steps: int, block_size: int) -> dict:
    """{repeat: [(member index, block index)]}: the blocks each of the first `steps` repeats
    fills, for members whose block hashes are known (prefix caching) and registered as they
    fill (not a request's `own_keys`), in running order."""
    fills: dict = {}
    for i, seq in enumerate(run.members):
        if not seq.block_hashes or own_keys(seq.block_hashes):
            continue
        computed = seq.num_computed_tokens  # after the run's plan
        last = min(run.finish[i], steps, len(seq.block_hashes) * block_size - computed)
        for r in range(-computed % block_size or block_size, last + 1, block_size):
            fills.setdefault(r, []).append((i, (computed + r) // block_size - 1))
    return fills


def _advance(seq, repeats: int, step0: int) -> None:
    seq.num_computed_tokens += repeats
    seq.num_output_tokens += repeats
    seq.last_token_step = step0 + repeats
