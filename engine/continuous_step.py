"""A continuous-batching step's plan, the scheduler's part that composes it (`Scheduler` mixes
it in, as it mixes in `Admission`: it reads `self.config`, `self.block_manager`, `self.running`,
`self.batch_wait`, `self._caching` and `self.new_token_ratio`, and calls the scheduler's
`_admit`, `preempt_last`, `preempt` and `cache_blocks`).

With mixed chunks (the default: vLLM's and TensorRT-LLM's way) a step decodes every running
sequence whose prefill is done (`reserve_decodes`), continues the prefills split over earlier
steps in what is left of the token budget (`_continue_prefills`, a chunk's blocks taken chunk by
chunk, preempting from the end of the running list where too few are free: `_reserve_chunk`),
then admits from the queue. Without (`enable_mixed_chunk = False`, SGLang's default), the
prefills that can run in the free blocks run alone with the whole budget, and the running
sequences decode only in a step without one (`_schedule_unmixed`). docs/scheduler/scheduler.md
(`schedule`) gives the rules.
"""

from __future__ import annotations

from .batch_wait import hold_prefills
from .kv_reservation import needs_new_block, reserve_decode_blocks
from .sequence import Sequence, SequenceStatus
from .step_plan import StepPlan

_RUNNING = SequenceStatus.RUNNING


def unmixed_cut(left: int, n: int, whole_budget: bool) -> int:
    """The tokens of a prefill with `left` to compute that a chunk of at most `n` takes without
    mixed chunks: never all but one, which would be left to a decode (as a mixed step computes
    it) and so wait for a step without prefills (SGLang goes on with its chunked request's
    last token as a prefill); 0 (wait for the next step) where that leaves nothing, unless `n`
    is a whole step's budget of one token."""
    return n - 1 if left - n == 1 and (n > 1 or not whole_budget) else n


class ContinuousSteps:
    """The continuous-batching step's composition (a mixin of `Scheduler`)."""

    def _schedule_continuous(self, plan: StepPlan) -> None:
        cfg = self.config
        if not cfg.enable_mixed_chunk:
            self._schedule_unmixed(plan)
            return
        prefilling: list[Sequence] = []
        plan.decodes = self.reserve_decodes(plan, prefilling)
        budget = cfg.max_num_batched_tokens * cfg.data_parallel_size - len(plan.decodes)
        # a step that preempted admits no waiting sequence (vLLM: the blocks just freed are
        # the victims' to win back, not a newcomer's), unless it would run nothing: vLLM would
        # run that step of no tokens, then admit in the next; here the two are one (blocks held
        # outside the running list, KV coming in or come in under disaggregation, can leave a
        # preempting step with nothing to run)
        if cfg.batch_wait_timeout_iters and hold_prefills(self, plan.decodes, prefilling, budget,
                                                          admitting=not plan.preempted):
            if not plan.preempted or not (plan.decodes or prefilling):
                # those whose KV is computed still join, to decode
                self._admit(plan, budget, cfg.max_num_seqs * cfg.data_parallel_size,
                            decoders=True)
            return
        budget = self._continue_prefills(plan, prefilling, budget)
        if not plan.preempted or not (plan.decodes or plan.prefills):
            self._admit(plan, budget, cfg.max_num_seqs * cfg.data_parallel_size)

    def _schedule_unmixed(self, plan: StepPlan) -> None:
        """Without mixed chunks (SGLang's default): the prefills that can run in the free
        blocks, those under way first, then the queue's, run alone, with the whole token
        budget; only a step with none decodes the running sequences, and readmits those whose
        KV is computed but for the last token, to decode too. A step that would run nothing
        while prefills under way hold the blocks (none decoding to free any) lets the first
        of them go on as a mixed step's chunk does, preempting from the end, unless it is its
        own victim."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens * cfg.data_parallel_size
        prefilling = [seq for seq in self.running if seq.is_prefilling]
        max_running = cfg.max_num_seqs * cfg.data_parallel_size
        budget = self._continue_prefills(plan, prefilling, budget, preempting=False)
        self._admit(plan, budget, max_running, prefills=True)
        if plan.prefills:
            return
        plan.decodes = self.reserve_decodes(plan, [])
        if not plan.preempted or not plan.decodes:  # as a mixed step's admission
            # those whose KV is computed but for the last token (swapped out, transferred)
            self._admit(plan, budget - len(plan.decodes), max_running, decoders=True)
        if prefilling and not (plan.decodes or plan.preempted or plan.kv_requested):
            # partial prefills hold the blocks the next chunk of each needs (SGLang, which
            # reserves a request's tokens when it admits it, never gets here); not where the
            # first is the last running, its own victim (it would free only what it takes back:
            # the blocks are held by KV on its way, which frees nothing but lands)
            first = next((seq for seq in prefilling if seq.status is _RUNNING), None)
            if first is not None and first is not self.running[-1]:
                self._continue_prefills(plan, [first], budget)

    def _continue_prefills(self, plan: StepPlan, prefilling: list, budget: int,
                           preempting: bool = True) -> int:
        """Plan the next chunk of each prefill split over earlier steps (`prefilling`, in
        running order) while the budget lasts; returns the budget left. Not `preempting`
        (prefills alone, without mixed chunks): a chunk takes only free blocks, cut to what
        they hold; with none, the step goes on without it (the running
        sequences then decode, preempting where they must, so prefills never starve them),
        never one token short of the whole (`unmixed_cut`)."""
        cfg = self.config
        for seq in prefilling:
            if budget == 0:
                break
            if seq.status is not _RUNNING:  # preempted for an earlier one's chunk
                continue
            left = seq.num_tokens - seq.num_computed_tokens
            n = min(left, budget, cfg.max_num_batched_tokens)
            if not cfg.enable_mixed_chunk:
                n = unmixed_cut(left, n, budget >= cfg.max_num_batched_tokens)
                if not n:
                    continue
            if not preempting:
                bm = self.block_manager
                room = (len(bm.block_tables[seq.seq_id]) + bm.num_free) * bm.block_size \
                    - seq.num_computed_tokens
                if room < n:  # cut to the free blocks, never one token short of the whole
                    n = unmixed_cut(left, room, whole_budget=False)
                if n:
                    bm.ensure_capacity(seq.seq_id, seq.num_computed_tokens + n)
                    self._prefill(plan, seq, n)
                    budget -= n
                continue
            unplanned = self._reserve_chunk(plan, seq, n)
            if unplanned is None:  # it was the victim itself: no one is left behind it
                break
            self._prefill(plan, seq, n)
            budget += unplanned - n
        return budget

    def _reserve_chunk(self, plan: StepPlan, seq: Sequence, n: int) -> int | None:
        """Room for the KV of the next `n` prompt tokens of a sequence whose prefill goes on
        (a prefill's blocks are taken chunk by chunk, as vLLM v1 allocates them): while too few
        are free, the last running sequence is preempted, the sequence itself last. Returns the
        decodes planned in this step that were preempted (their budget is given back); None
        when the sequence itself was."""
        bm, unplanned = self.block_manager, 0
        need = bm.blocks_to_hold(seq.seq_id, seq.num_computed_tokens + n)
        while need > bm.num_free:
            victim = self.running[-1]
            self.preempt_last(plan)
            if victim is seq:
                return None
            if plan.decodes and plan.decodes[-1] is victim:  # decodes are in running order
                self.unplan_last_decode(plan)
                unplanned += 1
        bm.ensure_capacity(seq.seq_id, seq.num_computed_tokens + n)
        return unplanned

    def unplan_last_decode(self, plan: StepPlan) -> None:
        """The last decode planned in this step was preempted (for a prefill's chunk): it does
        not run."""
        plan.decodes.pop()

    def _prefill(self, plan: StepPlan, seq: Sequence, n: int) -> None:
        """Plan `n` prompt tokens of the sequence in this step. With prefix caching, the blocks
        they fill are registered now, as vLLM registers them when it schedules them: a sequence
        admitted later in this step finds them (the step writes every layer's keys and values
        before any attention reads them)."""
        plan.prefills.append((seq, n))
        if self._caching:
            bs, computed = self.block_manager.block_size, seq.num_computed_tokens
            if (computed + n) // bs > computed // bs:
                self.cache_blocks(seq, computed // bs, (computed + n) // bs)

    def reserve_decodes(self, plan: StepPlan, prefilling: list) -> list[Sequence]:
        """The running sequences that decode in the step being planned, in running order, each
        given room for its next KV row (a sequence in need preempts from the back of the
        running list, `preempt_last`; under SGLang's capacity policy `_retract` takes back
        first); those still prefilling are appended to `prefilling`."""
        if self.new_token_ratio is not None:
            self._retract(plan)
        return reserve_decode_blocks(self.running, self.block_manager,
                                     lambda: self.preempt_last(plan), prefilling)

    def _retract(self, plan: StepPlan) -> None:
        """SGLang's retraction (`ScheduleBatch.retract_decode`, its default `length` order):
        while the free blocks do not hold the new block each decode of the step needs, take
        back the decoding sequence with the fewest outputs (of those, the longest prompt; of
        those, the last in running order), leaving at least one (which, if it still finds no
        block, preempts from the end as `reserve_decode_blocks` does)."""
        bm = self.block_manager
        if bm.num_free >= len(self.running):
            return  # every decode's block is free (the common case: no pass over the batch)
        bs, tables = bm.block_size, bm.block_tables

        def needs_block(seq: Sequence) -> bool:
            return needs_new_block(seq, bs, tables[seq.seq_id])

        decoding = [seq for seq in self.running if not seq.is_prefilling]
        need = sum(map(needs_block, decoding))
        if need <= bm.num_free:
            return
        decoding.sort(key=lambda seq: (seq.num_output_tokens, -seq.prompt_len), reverse=True)
        while need > bm.num_free and len(decoding) > 1:
            victim = decoding.pop()
            need -= needs_block(victim)
            self.running.remove(victim)
            self.preempt(plan, victim)
