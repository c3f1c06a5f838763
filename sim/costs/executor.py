"""`CostModelExecutor`: the simulator's executor. It runs no model: it predicts how long a
`StepPlan` would take on the real engine and samples no tokens (`StepResult.tokens` is None, so
the scheduler only counts them).

Its cost per step is O(number of prefill chunks), not O(batch): the sum of the decoding
sequences' context lengths is kept by `DecodeContext` as a running total. A sequence decodes in
every step from the one after its prefill completes until its last token or its preemption, and
its context grows by one token a step, so the total at step k is
sum over members of (context at joining - step at joining) + k * members, and the longest
context is the largest such offset + k (a heap of offsets, stale entries dropped lazily).
Members join in the step after a prefill chunk that completes their sequence (or stops one token
short of it: a decode then computes the last prompt token), leave at
the step of their last token (known when they join: simulated sequences stop by length only) or
when a plan preempts them.
"""

from __future__ import annotations

import heapq

from engine.executor import StepResult
from engine.sequence import SequenceStatus

from .shape import gathered_keys, one_group, prefill_counts, slot_bytes


class DecodeContext:
    """Running sum and maximum of the context lengths (num_tokens) of the sequences a plan
    decodes; `max_context` is the maximum after the last `update` (0 without decodes)."""

    def __init__(self):
        self._members: dict[int, tuple[int, int]] = {}  # seq_id -> (offset, last decode step)
        self._offsets = 0  # sum of members' offsets (context at joining - step at joining)
        self._joining: list = []  # sequences whose prefill ended in the previous plan
        self._leaving: dict[int, list[int]] = {}  # step -> seq_ids whose last decode it is
        self._step: int | None = None  # the previous plan's step
        self._heap: list[tuple[int, int]] = []  # (-offset, seq_id), possibly stale
        self.max_context = 0

    def update(self, plan) -> int:
        """Advance to `plan` and return its decode context sum. Plans from one scheduler, in step
        order, cost O(changes); the first plan, or one that does not follow the previous, is
        counted directly (O(batch))."""
        k = plan.step
        if self._step is None or k != self._step + 1:
            self._restart(plan)
        else:
            self._advance(plan)
        self._step = k
        self._joining = [seq for seq, n in plan.prefills if _decodes_next(seq, n)]
        assert len(self._members) == len(plan.decodes), "decode set out of step with the plan"
        self.max_context = self._max_offset() + k if self._members else 0
        return self._offsets + k * len(self._members)

    def _max_offset(self) -> int:
        heap, members = self._heap, self._members
        if len(heap) > 2 * len(members) + 64:  # mostly stale: rebuild (amortised O(1))
            heap[:] = [(-offset, seq_id) for seq_id, (offset, _) in members.items()]
            heapq.heapify(heap)
        while True:
            neg, seq_id = heap[0]
            member = members.get(seq_id)
            if member is not None and member[0] == -neg:
                return -neg
            heapq.heappop(heap)  # it left, or rejoined with another offset

    def _advance(self, plan) -> None:
        k = plan.step
        for seq_id in self._leaving.pop(k - 1, ()):
            member = self._members.get(seq_id)
            if member is not None and member[1] == k - 1:
                self._drop(seq_id)
        for seq in plan.preempted:
            if seq.seq_id in self._members:
                self._drop(seq.seq_id)
        for seq in self._joining:
            if seq.status is SequenceStatus.RUNNING and not seq.is_prefilling:
                self._join(seq, k)

    def _restart(self, plan) -> None:
        self._members.clear()
        self._leaving.clear()
        self._offsets = 0
        self._heap.clear()
        for seq in plan.decodes:
            self._join(seq, plan.step)

    def _join(self, seq, k: int) -> None:
        last = k + seq.max_new_tokens - seq.num_output_tokens - 1
        offset = seq.num_tokens - k
        self._members[seq.seq_id] = (offset, last)
        self._offsets += offset
        self._leaving.setdefault(last, []).append(seq.seq_id)
        heapq.heappush(self._heap, (-offset, seq.seq_id))

    def _drop(self, seq_id: int) -> None:
        offset, _ = self._members.pop(seq_id)
        self._offsets -= offset


def _decodes_next(seq, n: int) -> bool:
    """Whether a prefill chunk of n tokens leaves the sequence decoding in the next step: it
    completes the sequence and samples a token that is not its last, or it stops one token short
    (the last prompt token is then computed by a decode)."""
    left = seq.num_tokens - seq.num_computed_tokens - n
    return left == 1 or (left == 0 and seq.num_output_tokens + 1 < seq.max_new_tokens)


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
