"""After a step, the scheduler's part that applies it (`Scheduler` mixes it in: it reads
`self.block_manager`, `self.running`, `self._caching` and `self.prefill_only`, and calls the
scheduler's `cache_blocks`, `_hand_off` and `idle_check`): prefill chunks and decodes advance
their sequences' computed tokens, the tokens sampled (or, in simulation, only counted) are
appended, the blocks filled are registered for prefix caching, and finished sequences free
their blocks and leave the running list. `apply_decodes` and `decode_fills` are seams the
simulator's bulk counting overrides (`sim.fastpath.SteadyScheduler`).
"""

from __future__ import annotations

from .sequence import Sequence, SequenceStatus
from .step_plan import StepPlan

_RUNNING = SequenceStatus.RUNNING


class StepResults:
    """A finished step applied to its sequences (a mixin of `Scheduler`)."""

    def postprocess(self, plan: StepPlan, tokens: dict[int, int] | None = None) -> list[Sequence]:
        """Apply a finished step: advance computed tokens, append sampled tokens (`tokens` maps
        seq_id to token id; None in simulation), retire finished sequences. Returns them."""
        finished = []
        for seq, n in plan.prefills:
            seq.num_computed_tokens += n
            if seq.num_computed_tokens == seq.num_tokens:
                if self.emit(plan, seq, None if tokens is None else tokens[seq.seq_id]):
                    finished.append(seq)
        self.apply_decodes(plan, tokens, finished)
        if self._caching:
            self._cache_filled(plan)
        if finished:
            self.retire(finished, plan.step)
        if self.prefill_only:
            self._hand_off(plan)
        return finished

    def apply_decodes(self, plan: StepPlan, tokens, finished: list) -> None:
        """Count the step's decodes, one token each (`tokens`: seq_id -> sampled id, None in
        simulation); append the finished ones to `finished`. The hot loop of a simulation:
        `emit`'s common case (a token right after the previous step's), inlined."""
        step, previous_step, consecutive = plan.step, plan.step - 1, 0
        for seq in plan.decodes:
            seq.num_computed_tokens += 1
            token = None if tokens is None else tokens[seq.seq_id]
            if seq.last_token_step != previous_step:
                if self.emit(plan, seq, token):
                    finished.append(seq)
                continue
            consecutive += 1
            seq.last_token_step = step
            seq.num_output_tokens += 1
            if token is not None:
                seq.output_token_ids.append(token)
            elif seq.num_output_tokens < seq.max_new_tokens:
                continue
            if seq.should_stop(token):
                finished.append(seq)
        plan.itl_consecutive += consecutive

    def retire(self, finished: list[Sequence], step: int) -> None:
        """Sequences that emitted their last token in `step`: free their blocks, mark them
        finished and drop them from the running list (then, if the engine idles, `idle_check`)."""
        bm = self.block_manager
        for seq in finished:
            bm.free_sequence(seq.seq_id)
            seq.finish_step = step
            seq.set_status(SequenceStatus.FINISHED)
        if len(finished) <= 8:  # a scan in C for each beats rebuilding a long list
            for seq in finished:
                self.running.remove(seq)
        else:
            self.running = [s for s in self.running if s.status is _RUNNING]
        if not self.running:
            self.idle_check()

    @staticmethod
    def emit(plan: StepPlan, seq: Sequence, token: int | None) -> bool:
        """Record one sampled token and where its inter-token gap starts; True when done."""
        step, previous = plan.step, seq.last_token_step
        if previous is None:
            seq.first_token_step = step
        elif previous == step - 1:
            plan.itl_consecutive += 1
        else:  # resumed after a preemption
            plan.itl_from_steps.append(previous)
        seq.last_token_step = step
        seq.append_token(token)
        return seq.should_stop(token)

    def _cache_filled(self, plan: StepPlan) -> None:
        """Register every block this step's decodes filled (prefix caching), before any holder
        lets go (a prefill's were registered when it was planned, `_prefill`)."""
        for seq, block in self.decode_fills(plan):
            self.cache_blocks(seq, block, block + 1)

    def decode_fills(self, plan: StepPlan):
        """(sequence, block index) of every block the step's decodes filled, in plan order
        (after `apply_decodes`)."""
        bs = self.block_manager.block_size
        return [(seq, seq.num_computed_tokens // bs - 1) for seq in plan.decodes
                if not seq.num_computed_tokens % bs]
