"""`CostModelExecutor`: the simulator's executor. It runs no model: it predicts how long a
`StepPlan` would take on the real engine and samples no tokens (`StepResult.tokens` is None, so
the scheduler only counts them).

Its cost per step is O(number of prefill chunks), not O(batch): the decoding sequences' context
sum and maximum are running totals (`DecodeContext`). A run of steps that repeat a decode-only
step (`engine.decode_run`) is predicted in one vectorized pass (`execute_run`): each cost model's
`predict` takes arrays for the counts that change from step to step and evaluates the same
expression, operation for operation, so every duration is the one `execute` would give, to the
last bit.
"""

from __future__ import annotations

import numpy as np

from engine.executor import StepResult

from .decode_context import DecodeContext
from .shape import gathered_keys, gathered_keys_repeated, one_group, prefill_counts, slot_bytes


class CostModelExecutor:
    """Executor protocol (`execute(plan) -> StepResult`) backed by a cost model. The simulation
    loop calls `after_idle(idle_s)` when the engine wakes up from an idle wait; the next step
    then also pays the cost model's `wake_cost(idle_s)` (a model without one: nothing). The steps
    after one with prefill chunks pay its `after_prefill_cost(tokens, k)` (the k-th after it,
    until the next prefill or idle wait; a model without one: nothing). With a
    `speed` (`sim.costs.jitter.SpeedProcess`) every step's time is multiplied by the machine's speed
    factor at its start (the time since the previous step's start is its duration plus the
    idle time reported in between). `block_size` is the KV cache's: with it the keys decode
    attention gathers are counted (O(1) when the batch is gathered as one group, else O(batch)),
    for a cost model that depends on them."""

    def __init__(self, cost_model, speed=None, block_size: int = 16):
        self.cost_model = cost_model
        self.speed = speed
        self.block_size = block_size
        self._slot_bytes = slot_bytes(cost_model.model) \
            if getattr(cost_model, "counts_gathered", False) else 0
        self._context = DecodeContext()
        self._predict = cost_model.predict
        self._wake_cost = getattr(cost_model, "wake_cost", None)
        self._wake_s = 0.0
        self._after_cost = getattr(cost_model, "after_prefill_cost", None)
        self._after_steps = getattr(cost_model, "after_prefill_steps", 0)  # how many pay it
        self._after_tokens = 0  # prefill tokens of the last step with prefill chunks
        self._after_k = 0  # steps since it
        self._since_start_s = 0.0  # since the previous step's start (duration + idle)

    def after_idle(self, idle_s: float) -> None:
        """The engine was idle for `idle_s` seconds before the step it is about to plan."""
        self._wake_s = self._wake_cost(idle_s) if self._wake_cost is not None else 0.0
        self._after_tokens = 0  # the wake-up cost is measured from a settled, idle engine
        self._since_start_s += idle_s

    def execute(self, plan) -> StepResult:
        tokens, attention, context, sampled = prefill_counts(plan.prefills)
        decodes, running = len(plan.decodes), self._context
        decode_context = running.update(plan)
        gathered = self._gathered(plan, running.max_context) if decodes else 0
        duration = self._predict(tokens, attention, len(plan.prefills), decodes, decode_context,
                                 plan.padding_seqs, sampled + decodes, context,
                                 decodes * running.max_context, gathered,
                                 int(decodes > 0)) + self._wake_s
        self._wake_s = 0.0
        if self._after_tokens:
            self._after_k += 1
            duration += self._after_cost(self._after_tokens, self._after_k)
        if tokens and self._after_cost is not None:
            self._after_tokens, self._after_k = tokens, 0
        if self.speed is not None:
            duration *= self.speed.factor(self._since_start_s)
            self._since_start_s = duration
        return StepResult(None, duration)

    def execute_run(self, plan, start_s: float, max_steps: int, until_s: float) -> np.ndarray:
        """Durations [K] of the steps after `plan` that repeat it (`engine.decode_run`), the
        first starting at `start_s`: the first `max_steps` of them, or fewer, as many as start
        before `until_s` (the next event that could change the plan). Call right after
        `execute(plan)`; the executor's state then stands after the K-th of them."""
        running, n = self._context, len(plan.decodes)
        repeats = np.arange(1, max_steps + 1)  # [K]
        decode_context, longest = running.repeats(plan.step + repeats)
        gathered = self._gathered_repeated(plan, repeats)
        duration = np.empty(max_steps)  # [K]
        duration[:] = self._predict(0, 0, 0, n, decode_context, plan.padding_seqs, n, 0,
                                    n * longest, gathered, 1)
        if self._after_tokens:
            horizon = min(max_steps, self._after_steps - self._after_k)
            for j in range(max(horizon, 0)):
                duration[j] += self._after_cost(self._after_tokens, self._after_k + j + 1)
        if self.speed is None:
            starts = np.cumsum(np.concatenate(([start_s], duration[:-1])))  # [K]
            steps = int(np.searchsorted(starts, until_s, side="left"))
        else:
            steps = self._jitter_run(duration, start_s, until_s)
        running.skip(steps)
        if self._after_tokens:
            self._after_k += steps
        return duration[:steps]

    def _jitter_run(self, duration: np.ndarray, start_s: float, until_s: float) -> int:
        """Scale the run's durations by the speed factor step by step (the speed process is
        sequential) while the steps start before `until_s`; how many do."""
        start, steps = start_s, 0
        for j in range(len(duration)):
            if not start < until_s:
                break
            duration[j] *= self.speed.factor(self._since_start_s)
            self._since_start_s = duration[j]
            start += duration[j]
            steps += 1
        return steps

    def _gathered_repeated(self, plan, repeats: np.ndarray):
        """Keys gathered by each repeat of a decode plan (`_gathered` for each); 0 for a cost
        model that does not count them."""
        if not self._slot_bytes:
            return 0
        contexts = [seq.num_tokens for seq in plan.decodes]
        return gathered_keys_repeated(contexts, repeats, self.block_size, self._slot_bytes)

    def _gathered(self, plan, max_context: int) -> int:
        """Keys decode attention gathers (`cost_model.gathered_keys`); 0 for a cost model that
        does not count them."""
        bs, width = self.block_size, self._slot_bytes
        if not width:
            return 0
        decodes = len(plan.decodes)
        if one_group(decodes, max_context, bs, width):
            return decodes * -(-max_context // bs) * bs
        return gathered_keys([seq.num_tokens for seq in plan.decodes], bs, width)
