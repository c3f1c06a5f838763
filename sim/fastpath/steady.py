"""Steady decoders: a scheduler that counts simulated sequences' decodes in bulk.

A simulated sequence samples no token, so it stops by length alone. Under continuous batching a
running sequence whose prefill is done decodes in every step until its last token, unless a
preemption takes it out. While it does, its counts follow from the step index: from the step
`s` it became steady, before step k it has emitted k - s tokens more than it had at s. So
`SteadyScheduler` need not visit it every step. It notes the step in which it next needs a KV
block (its KV row reaches the end of its last block), with prefix caching the step before (its
decode fills that block, which is then registered by its hash), and the step of its last token,
and brings its counts up to date only when it needs a block, finishes, or something outside
reads them (fast forward, an abort, the end of a run: `sync`); `steady_due.py` keeps those
steps. A step then costs O(sequences that join, need a block or finish), not O(batch). The
bookkeeping pays only for large batches: it is engaged while ENGAGE_AT sequences or more run,
and let go (every count brought up to date) below RELEASE_BELOW.

It is the engine's `Scheduler` with its decode seams overridden (`reserve_decodes`,
`unplan_last_decode`, `apply_decodes`, `decode_fills`, `running_added`, `running_removed`,
`sync`): everything else, admission, preemption, prefix caching, swapping, is the engine's own
code. Everything but the steady decoders is counted as the engine counts it, eagerly: new and
prefilling sequences, and the first decode after a prefill, a swap-in or a preemption (then the
sequence becomes steady). A step that might run out of free blocks (fewer free than the
sequences that could ask for one, plus the blocks the prefills under way could take for their
chunks) is counted eagerly for every sequence, so preemption keeps its exact order. The plans,
blocks, tokens, finishes and their order are the engine's, exactly (`tests/test_steady.py`).
"""

from __future__ import annotations

import heapq
from bisect import insort
from operator import attrgetter

from engine.scheduler import Scheduler
from engine.sequence import SequenceStatus

from .steady_due import DueSteps, advance

_RUNNING = SequenceStatus.RUNNING

ENGAGE_AT = 32
RELEASE_BELOW = 16


class SteadyScheduler(DueSteps, Scheduler):
    """The engine's scheduler, counting steady decoders in bulk while enough run (continuous
    batching; never on a prefill-only engine, whose sequences leave after their first token).
    For simulated sequences only: a sampled token could end a sequence early."""

    def __init__(self, config, block_manager, swap=None):
        super().__init__(config, block_manager, swap)
        if config.policy != "continuous" or not config.enable_mixed_chunk:
            raise ValueError("steady decoders are counted in bulk under continuous batching "
                             "with mixed chunks only (without, a prefill's step decodes none)")
        if config.reserves_new_tokens:
            raise ValueError("steady decoders are not counted in bulk under SGLang's capacity "
                             "policy: its admission reads every running request's count")
        self.block_size = block_manager.block_size
        self.position = self.running_key or attrgetter("admit_order")  # running order
        self.since: dict[int, int] = {}  # seq_id -> the step it is steady from (counts lag)
        self.counted: list = []  # running sequences counted eagerly (not steady)
        self.plain: list = []  # the step's eagerly counted decodes from the running list
        self.reserved = 0  # decodes `reserve_decodes` gave (swapped-in ones come after)
        self.block_due: dict[int, dict] = {}  # step -> {seq_id: steady sequence needing a block}
        self.finish_due: dict[int, dict] = {}  # step -> {seq_id: steady sequence finishing}
        self.finish_steps: list[int] = []  # heap of finish_due's steps (with repeats)
        # Prefix caching: steady sequences whose decode fills a block whose hash is known, and
        # the step's eagerly counted decodes that fill one, (sequence, block index) in order.
        self.fill_due: dict[int, dict] = {}  # step -> {seq_id: steady sequence filling a block}
        self.fills_running: list = []
        self.fills_swapped: list = []
        self.applied = 0  # steps applied: steady counts are brought up to before this one
        self.engaged = False  # counting in bulk for the step being planned and applied
        self.engage_at, self.release_below = ENGAGE_AT, RELEASE_BELOW

    # --- the engine's seams ----------------------------------------------------------------------

    def reserve_decodes(self, plan, prefilling: list) -> list:
        if not self._engaged_for_step():
            return super().reserve_decodes(plan, prefilling)
        decodes = self._reserve(plan, prefilling)
        self.reserved = len(decodes)
        return decodes

    def apply_decodes(self, plan, tokens, finished: list) -> None:
        if tokens is not None:
            raise ValueError("steady decoders are counted in bulk for simulated sequences "
                             "only (no sampled tokens)")
        if self.engaged:
            self._apply(plan, finished)
        else:
            super().apply_decodes(plan, tokens, finished)

    def decode_fills(self, plan):
        return self._filled(plan.step) if self.engaged else super().decode_fills(plan)

    def unplan_last_decode(self, plan) -> None:
        super().unplan_last_decode(plan)
        if self.engaged:  # only after `_reserve` counted the step eagerly (`_chunk_blocks`)
            assert not self.since, "a steady decoder preempted for a prefill's chunk"
            self.plain.pop()
            self.reserved -= 1

    def running_added(self, seq) -> None:
        if self.engaged:  # counted eagerly, in running order
            if self.running_key is None:
                self.counted.append(seq)
            else:
                insort(self.counted, seq, key=self.running_key)

    def running_removed(self, seq) -> None:
        if self.engaged:  # counted eagerly now; it may be readmitted at once
            self.counted.remove(seq)

    def sync(self) -> None:
        if self.engaged:
            self.reset()

    # --- engaging --------------------------------------------------------------------------------

    def _engaged_for_step(self) -> bool:
        """Whether the step about to be planned counts in bulk: engage or let go by the number
        of running sequences (letting go brings every count up to date)."""
        running = self.running
        if self.engaged:
            if len(running) < self.release_below:
                self.reset()
                self.engaged = False
        elif len(running) >= self.engage_at and not self.prefill_only:
            self.engaged = True
            self.counted = list(running)
            self.applied = self.num_steps
        return self.engaged

    # --- bringing counts up to date --------------------------------------------------------------

    def rebase(self) -> None:
        """Bring every steady sequence's counts up to date (before step `applied`); they stay
        steady."""
        k, since = self.applied, self.since
        for seq in self.running:
            s = since.get(seq.seq_id)
            if s is not None and s < k:
                advance(seq, k - s, s)
                since[seq.seq_id] = k

    def reset(self) -> None:
        """Bring every count up to date and count every running sequence eagerly again."""
        self.rebase()
        self.since.clear()
        self.counted = list(self.running)
        self.block_due.clear()
        self.finish_due.clear()
        self.finish_steps.clear()
        self.fill_due.clear()

    def after_run(self, members, steps: int) -> None:
        """A run of `steps` decode steps (`sim.fastpath.decode_run.apply_run`) advanced
        `members` (steady ones brought up to date before it) by `steps` tokens each,
        allocating the blocks they needed and retiring those that finished: they are steady
        from the step after it, and what was due in its steps is done."""
        end = self.applied + steps
        for table in (self.block_due, self.fill_due, self.finish_due):
            for step in [step for step in table if step < end]:
                del table[step]
        since = self.since
        for seq in members:
            if seq.seq_id not in since:
                continue
            if seq.status is not _RUNNING:  # it finished in the run
                del since[seq.seq_id]
                continue
            since[seq.seq_id] = end
            self._blocks_due(seq, end, self._last_step(seq))
        self.applied = end

    def next_finish(self) -> float:
        """The first step, from `applied` on, in which a steady sequence emits its last token."""
        heap, due, k = self.finish_steps, self.finish_due, self.applied
        while heap and (heap[0] < k or heap[0] not in due):
            heapq.heappop(heap)
        return heap[0] if heap else float("inf")

    # --- planning --------------------------------------------------------------------------------

    def _reserve(self, plan, prefilling: list) -> list:
        """The engine's `reserve_decodes` for the step being planned (the same blocks in the
        same order, the same decodes and prefilling sequences), visiting only the eagerly
        counted sequences and the steady ones that need a block in it."""
        k, running, bm, since = self.applied, self.running, self.block_manager, self.since
        assert k == self.num_steps, "steady counts out of step with the scheduler"
        visit = [seq for seq in self.counted if seq.status is _RUNNING]
        due = self.block_due.pop(k, None)
        needing = [seq for seq in due.values() if seq.seq_id in since] if due else []
        if bm.num_free < len(visit) + len(needing) + self._chunk_blocks(visit):
            # it might preempt (for a decode's block or a prefill's chunk): count it all eagerly
            self.reset()
            decodes = super().reserve_decodes(plan, prefilling)
            self.plain = list(decodes)
            return decodes
        self.counted = visit
        if needing:
            visit = visit + needing
            visit.sort(key=self.position)
        bs, tables, plain = self.block_size, bm.block_tables, []
        for seq in visit:  # in running order, as the engine's loop allocates
            if seq.seq_id in since:
                bm.allocate_block(seq.seq_id)
                last = self._last_step(seq)
                self._due(self.block_due, k + bs, seq, last)
                if self._caching:
                    self._fill_due(seq, k + bs - 1, last)
                continue
            row = seq.prompt_len + seq.num_output_tokens - 1
            if seq.num_computed_tokens < row:
                prefilling.append(seq)
                continue
            if not row % bs and len(tables[seq.seq_id]) * bs <= row:
                bm.allocate_block(seq.seq_id)
            plain.append(seq)
        self.plain = plain
        if not prefilling:
            return running[:]
        n = len(running) - len(prefilling)
        if running[n:] == prefilling:  # the usual case: the newest are still prefilling
            return running[:n]
        skip = set(map(id, prefilling))
        return [seq for seq in running if id(seq) not in skip]

    def _chunk_blocks(self, visit: list) -> int:
        """At most how many blocks the prefills under way among `visit` (the eagerly counted)
        take for their chunks in the step being planned."""
        bm, most, blocks = self.block_manager, self.config.max_num_batched_tokens, 0
        for seq in visit:
            if seq.num_computed_tokens < seq.prompt_len + seq.num_output_tokens - 1:
                blocks += bm.blocks_to_hold(seq.seq_id,
                                            min(seq.num_tokens, seq.num_computed_tokens + most))
        return blocks

    # --- after the step --------------------------------------------------------------------------

    def _apply(self, plan, finished: list) -> None:
        """The engine's `apply_decodes`: the eagerly counted decodes one by one (those from the
        running list, then the swapped-in ones), then the steady sequences whose last token
        this step emits; appends the finished ones to `finished` in plan order (the running
        list's order, then the swapped-in ones)."""
        k, emit = plan.step, self.emit
        plain = self.plain + plan.decodes[self.reserved:]  # then the swapped-in decodes
        from_running = len(self.plain)
        ended, swapped = [], []
        fills, bs = (self.fills_running, self.fills_swapped) if self._caching else None, \
            self.block_size
        consecutive = len(plan.decodes) - len(plain)  # the steady ones: one token each
        for i, seq in enumerate(plain):  # the engine's decode loop
            seq.num_computed_tokens += 1
            if seq.last_token_step == k - 1:
                consecutive += 1
                seq.last_token_step = k
                seq.num_output_tokens += 1
                done = seq.should_stop(None)
            else:
                done = emit(plan, seq, None)
            if fills is not None and not seq.num_computed_tokens % bs:
                fills[i >= from_running].append((seq, seq.num_computed_tokens // bs - 1))
            if done:
                (ended if i < from_running else swapped).append(seq)
            else:
                self._steady_from(seq, k + 1)
        ended += self._finishing(k)
        if len(ended) > 1:
            ended.sort(key=self.position)
        finished += ended
        finished += swapped
        plan.itl_consecutive += consecutive
        self.applied = k + 1
        since = self.since
        self.counted = [seq for seq in self.counted
                        if seq.seq_id not in since and seq.status is _RUNNING]
