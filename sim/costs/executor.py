"""`CostModelExecutor`: the simulator's executor. It runs no model: it predicts how long a
`StepPlan` would take on the real engine and samples no tokens (`StepResult.tokens` is None, so
the scheduler only counts them).

Its cost per step is O(number of prefill chunks), not O(batch): the decoding sequences' context
sum and maximum are running totals (`DecodeContext`), where every running sequence decodes in
every step once its prefill is done (not so without mixed chunks: then O(batch)). A run of steps
that repeat a decode-only step (`engine.decode_run`) is predicted in one vectorized pass
(`execute_run`): the cost model's `step_time` gets a `StepShape` whose counts that change from step
to step are arrays and evaluates the same expression, operation for operation, so every duration
is the one `execute` would give, to the last bit.
"""

from __future__ import annotations

import numpy as np

from engine.executor import StepResult

from .decode_context import DecodeContext
from .model import CostModel
from .shape import (StepShape, gather_group, gathered_keys, gathered_keys_repeated,
                    prefill_counts, slot_bytes)

RUN_CHUNK = 32  # steps of a run predicted at first (then 4x more each time, while needed)


def check_cost_model(cost_model) -> None:
    """TypeError unless `cost_model` is a `CostModel` (what runs a step's cost)."""
    if not isinstance(cost_model, CostModel):
        raise TypeError(f"a cost model subclasses sim.costs.CostModel (step_time(shape) and "
                        f"optional hooks with defaults), got {type(cost_model).__name__}")


class CostModelExecutor:
    """Executor protocol (`execute(plan) -> StepResult`) backed by a cost model (a
    `sim.costs.model.CostModel`). The simulation loop calls `after_idle(idle_s)` when the
    engine wakes up from an idle wait; the next step then also pays the cost model's
    `wake_cost(idle_s)`. The steps after one with prefill chunks pay its
    `after_prefill_cost(tokens, k)` (the k-th after it, up to its `after_prefill_steps`, until
    the next prefill or idle wait). With a
    `speed` (`sim.costs.jitter.SpeedProcess`) every step's time is multiplied by the machine's speed
    factor at its start (the time since the previous step's start is its duration plus the
    idle time reported in between). `block_size` is the KV cache's: with it the keys decode
    attention gathers are counted (O(1) when the batch is gathered as one group, else O(batch)),
    for a cost model that depends on them. `swap_block_s`: the time to copy one KV block
    between GPU and host memory; a step pays it for every block it swaps out or in.
    `every_step_decodes`: False where a running sequence may sit out a step (a scheduler
    without mixed chunks runs prefills alone): the decode context is then counted afresh
    each step (O(batch))."""

    samples_tokens = False  # its sequences stop by length alone

    def __init__(self, cost_model: CostModel, speed=None, block_size: int = 16,
                 swap_block_s: float = 0.0, every_step_decodes: bool = True):
        check_cost_model(cost_model)
        self.cost_model = cost_model
        self.async_scheduling = cost_model.async_scheduling  # for the simulation loop
        self.speed = speed
        self.block_size = block_size
        self.swap_block_s = swap_block_s
        self._slot_bytes = slot_bytes(cost_model.model) if cost_model.counts_gathered else 0
        self._context = DecodeContext(block_size, every_step_decodes)
        self._step_time = cost_model.step_time
        self._wake_cost = cost_model.wake_cost
        self._wake_s = 0.0
        self._after_cost = cost_model.after_prefill_cost
        self._after_steps = cost_model.after_prefill_steps  # how many steps pay it (0: none)
        self._after_tokens = 0  # prefill tokens of the last step with prefill chunks
        self._after_k = 0  # steps since it
        self._since_start_s = 0.0  # the previous step's duration (since its start, less idle)
        self._idle_s = 0.0  # idle since then, before the step about to be planned

    def after_idle(self, idle_s: float) -> None:
        """The engine has been idle for `idle_s` seconds since its last step, before the one it
        is about to plan (told again, with the longer time, if it planned nothing and slept
        on)."""
        self._wake_s = self._wake_cost(idle_s)
        self._after_tokens = 0  # the wake-up cost is measured from a settled, idle engine
        self._idle_s = idle_s

    def execute(self, plan) -> StepResult:
        tokens, attention, context, sampled, square = prefill_counts(plan.prefills)
        decodes, running = len(plan.decodes), self._context
        decode_context = running.update(plan)
        gathered = self._gathered(plan, running.max_context) if decodes else 0
        # StepShape's fields in their order (positional: half the time of keywords, every step)
        shape = StepShape(tokens, attention, len(plan.prefills), decodes, decode_context,
                          plan.padding_seqs, sampled + decodes, context,
                          decodes * running.max_context, gathered, int(decodes > 0), square)
        duration = self._step_time(shape) + self._wake_s
        self._wake_s = 0.0
        if plan.swap_out or plan.swap_in:
            duration += (len(plan.swap_out) + len(plan.swap_in)) * self.swap_block_s
        if self._after_tokens:
            self._after_k += 1
            duration += self._after_cost(self._after_tokens, self._after_k)
        if tokens and self._after_steps:
            self._after_tokens, self._after_k = tokens, 0
        if self.speed is not None:
            duration *= self.speed.factor(self._since_start_s + self._idle_s)
            self._since_start_s = duration
        self._idle_s = 0.0
        return StepResult(None, duration)

    def execute_run(self, run, start_s: float, until_s: float) -> np.ndarray:
        """End times [K] of the steps of `run` (an `engine.decode_run.DecodeRun`: decode-only
        steps after `run.plan`), the first starting at `start_s` and each at the end of the one
        before, as a clock adds their durations: all `run.max_steps` of them, or as many as
        start before `until_s` (the next event that could change the plan). Call right after
        `execute(run.plan)`; the executor's state then stands after the K-th of them. The
        steps are predicted in chunks of growing size, so a run cut short by an arrival costs
        little more than its steps."""
        offsets = run.sum_max_by_finished([self._context.offset(seq) for seq in run.members])
        # [B + 1] each: members' context offsets summed and maximised, by finished count
        ends, first, size = [], 1, RUN_CHUNK
        while first <= run.max_steps and start_s < until_s:
            last = min(first + size - 1, run.max_steps)
            duration = self._run_durations(run, offsets, first, last, start_s, until_s)
            clock = np.add.accumulate(np.concatenate(([start_s], duration)))  # [S + 1]
            taken = int(np.searchsorted(clock[:-1], until_s, side="left"))  # start before it
            ends.append(clock[1:taken + 1])
            start_s, first, size = clock[taken], last + 1, 4 * size
        ends = np.concatenate(ends) if len(ends) > 1 else ends[0] if ends else np.empty(0)
        self._context.skip(len(ends))
        if self._after_tokens:
            self._after_k += len(ends)
        return ends

    def _run_durations(self, run, offsets, first: int, last: int, start_s: float,
                       until_s: float) -> np.ndarray:
        """Durations of repeats first..last of `run` (the speed factor applied to those that
        start before `until_s`), each exactly what `execute` would give for its plan.
        `offsets`: `run.sum_max_by_finished` of the members' context offsets."""
        repeats = np.arange(first, last + 1)  # [S]
        steps = run.plan.step + repeats  # [S]
        if run.first_finish >= last:  # the same members decode throughout: counts are numbers
            gone = 0
        else:
            gone = run.finished_before(repeats)  # [S]
        decoding = len(run.members) - gone  # [S] or a number
        duration = np.empty(len(repeats))  # [S]
        duration[:] = self._step_time(StepShape(
            decode_seqs=decoding, decode_context=offsets[0][gone] + steps * decoding,
            padding_seqs=run.padding(decoding), sampled_seqs=decoding,
            decode_span=decoding * (offsets[1][gone] + steps),
            decode_gathered=self._gathered_run(run, first, last), decoding=1))
        self._add_after_prefill(duration, first)
        if self.speed is not None:
            self._scale_by_speed(duration, start_s, until_s)
        return duration

    def _add_after_prefill(self, duration: np.ndarray, first: int) -> None:
        """Add the after-prefill cost to a run's repeats first, first + 1, ... (repeat j is the
        (after_k + j)-th step after the last prefill), while there is one."""
        if not self._after_tokens:
            return
        k0 = self._after_k + first
        for j in range(max(min(len(duration), self._after_steps - k0 + 1), 0)):
            duration[j] += self._after_cost(self._after_tokens, k0 + j)

    def _scale_by_speed(self, duration: np.ndarray, start_s: float, until_s: float) -> None:
        """Multiply the durations by the speed factor step by step (the speed process is
        sequential), for the steps that start before `until_s`; the rest are left alone, and
        so is the process (they are not taken)."""
        start = start_s
        for j in range(len(duration)):
            if not start < until_s:
                break
            duration[j] *= self.speed.factor(self._since_start_s)
            self._since_start_s = duration[j]
            start += duration[j]

    def _gathered_run(self, run, first: int, last: int):
        """Keys gathered in each of a run's repeats first..last (`_gathered` for each); 0 for a
        cost model that does not count them."""
        if not self._slot_bytes:
            return 0
        gathered = np.empty(last - first + 1, dtype=np.int64)  # [S]
        for a, b, active in run.segments(first, last):
            contexts = [run.members[i].num_tokens for i in active]
            gathered[a - first:b - first + 1] = gathered_keys_repeated(
                contexts, np.arange(a, b + 1), self.block_size, self._slot_bytes)
        return gathered

    def _gathered(self, plan, max_context: int) -> int:
        """Keys decode attention gathers (`shape.gathered_keys`); 0 for a cost model that
        does not count them. O(1) when the batch is one group or every sequence is a group of
        its own (then each gathers its own blocks: the running block total), else O(batch)."""
        bs, width = self.block_size, self._slot_bytes
        if not width:
            return 0
        decodes = len(plan.decodes)
        group = gather_group(max_context, bs, width)
        if group >= decodes:
            return decodes * -(-max_context // bs) * bs
        if group == 1:
            return self._context.blocks * bs
        return gathered_keys(self._context.contexts(plan.decodes), bs, width)
