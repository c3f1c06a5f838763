"""The scheduling policy shared by the real engine and the simulator.

`Scheduler.schedule()` turns the waiting queue and the running list into the next `StepPlan`;
`Scheduler.postprocess()` applies the step's sampled tokens. It never reads a clock, never draws
a random number and never touches tensors: the engine and the simulator drive the same object and
differ only in who executes the plan and what time it is.

Policies:
- continuous (Orca / vLLM): every step, running sequences decode one token each, prefills split
  over earlier steps continue (a prefill takes its KV blocks chunk by chunk, as in vLLM v1),
  then, unless a running sequence was preempted for a block (as in vLLM v1), waiting sequences
  are admitted while `max_num_seqs`, the KV blocks and the token budget allow (head-of-line:
  admission stops at the first request that does not fit). With `enable_mixed_chunk = False`
  (SGLang's default) a step runs those prefills alone, with the whole budget, and the running
  sequences decode only in a step that has none.
- static: when idle, take up to `max_batch_size` waiting sequences, prefill them together and
  decode them in lockstep until all finish; finished slots stay empty (padding) until then. One
  whose KV is whole (swapped out, or transferred) decodes in the batch's first step.

Under the guaranteed-no-evict capacity policy (`capacity_scheduler_policy`, TensorRT-LLM's
default), either policy admits a request only where the free blocks hold, beside what every
admitted sequence is still owed to its last token, all the blocks promised to it
(`kv_reservation.PromisedBlocks`): none is ever preempted, and fewer run at once. Admission is
mixed in from `admission.py` (`Admission`).

The running list is kept in victim order (fcfs: admission order; priority: best priority first,
then earlier arrival), so a running sequence that needs a KV block when none is free preempts
the last one. Preemption is by recompute (the default): the victim's blocks are freed and it
goes back to the queue, to prefill prompt + generated tokens again when readmitted. With
`preemption = "swap"` and a host `SwapSpace`, a victim's computed blocks are copied to host
memory instead (`StepPlan.swap_out`) and back when it is readmitted (`StepPlan.swap_in`), and it
resumes where it stopped; a victim whose blocks do not fit in the free swap space is preempted by
recompute.

Prefill/decode disaggregation (`sim.cluster`), as vLLM's KV connectors move KV, is mixed in
from `disaggregation.py` (`KvTransfers`): a prefill-only engine keeps a handed-off sequence's
blocks until its KV is read; a decode engine reserves blocks for a transferred sequence at the
head of its queue before its KV moves, and readmits it, ahead of the queue, once it has come in.

The policy's building blocks on KV blocks (`has_free_capacity`, `admit_sequence`,
`preempt_sequence`, `reserve_decode_blocks`) live in `kv_reservation.py` and are re-exported
here; the engine's part 6 functions in `continuous_batching.py` are built from the same ones.

Every step gets an index; sequences remember the step of their first scheduling, first token,
last token and finish, so the caller turns indices into times with one table of step times.

The decode half of a step is written once, step by step, behind the seams a faster driver may
override in a subclass (the simulator's `sim.fastpath` does, for sequences that stop by length
alone): `reserve_decodes` (give every decoding sequence room for its next KV row),
`unplan_last_decode` (a decode planned in the step was preempted for a prefill's chunk),
`apply_decodes` (count their tokens after the step), `decode_fills` (the blocks they filled,
for prefix caching), `running_added` / `running_removed` (a sequence joins or leaves the
running list) and `sync` (bring every count up to date before something outside reads them).
"""

from __future__ import annotations

from itertools import chain

from .admission import Admission
from .batch_wait import BatchWait, hold_prefills
from .block_manager import BlockManager
from .disaggregation import KvInFlight, KvTransfers
from .kv_reservation import admit_sequence, has_free_capacity, peak_blocks, preempt_sequence, \
    promised_blocks, reserve_decode_blocks
from .prefix_cache import block_hashes, own_keys
from .queues import QUEUES
from .scheduler_config import POLICIES, SchedulerConfig
from .sequence import Sequence, SequenceStatus
from .step_plan import StepPlan
from .swap import SwapSpace

__all__ = ["POLICIES", "SchedulerConfig", "StepPlan", "Scheduler", "has_free_capacity",
           "admit_sequence", "preempt_sequence", "reserve_decode_blocks"]

_RUNNING = SequenceStatus.RUNNING


# --- the policy ----------------------------------------------------------------------------------


class Scheduler(Admission, KvTransfers):
    """Waiting queue, running list and block manager, advanced one step at a time."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager,
                 swap: SwapSpace | None = None):
        if config.preemption == "swap" and (swap is None or not swap.num_blocks):
            raise ValueError("scheduler.preemption = 'swap' needs a host swap space: set "
                             "engine.swap_blocks to a positive number of blocks")
        self.config = config
        self.block_manager = block_manager
        self.swap = swap if config.preemption == "swap" else None  # host blocks for victims
        self.waiting = QUEUES[config.queue]()
        self.running: list[Sequence] = []  # victim order: the last one is preempted first
        self.num_steps = 0
        self.num_preemptions = 0
        self._batch_slots = 0  # static: size of the batch in flight
        # The running list's order (victim order): admission order, or for the priority queue
        # best priority first, then earlier arrival, then admission.
        self.running_key = (
            (lambda s: (s.priority, s.arrival_s, s.admit_order))
            if config.queue == "priority" else None
        )
        self._caching = block_manager.prefix_caching  # engine.prefix_cache
        self.kv = KvInFlight()  # disaggregation: this engine's role, its KV on its way
        self.batch_wait = BatchWait()  # TensorRT-LLM's batch waiting (`batch_wait.py`)

    def sync(self) -> None:
        """Bring every running sequence's counts up to date before something outside the
        scheduler reads them: here they always are; a subclass that counts lazily
        (`reserve_decodes`, `apply_decodes`) brings them up to date."""

    # --- arrivals --------------------------------------------------------------------------------

    def add(self, seq: Sequence) -> bool:
        """Queue a new sequence; reject it (and return False) if it can never run."""
        if seq.status is not SequenceStatus.WAITING:
            raise ValueError(f"request {seq.request_id}: only a new sequence can be added, "
                             f"this one is {seq.status.value}")
        reason = self.rejection_reason(seq)
        if reason:
            seq.reject_reason = reason
            seq.set_status(SequenceStatus.REJECTED)
            return False
        self.waiting.push(seq)
        return True

    def rejection_reason(self, seq: Sequence) -> str | None:
        """Why the sequence can never run under this configuration, or None when it can."""
        cfg, bm = self.config, self.block_manager
        total = seq.prompt_len + seq.max_new_tokens
        if total > cfg.max_seq_len:
            return (f"prompt ({seq.prompt_len}) + max_new_tokens ({seq.max_new_tokens}) "
                    f"exceeds max_seq_len ({cfg.max_seq_len})")
        no_evict = cfg.no_evict  # a promise counts the whole request, on every engine
        peak = (promised_blocks if no_evict else peak_blocks)(seq, bm.block_size)
        ranks = cfg.data_parallel_size
        if peak > bm.num_blocks // ranks:
            cache = "the cache" if ranks == 1 else "a data-parallel rank's cache"
            counted = " (promised to its last token, guaranteed_no_evict)" if no_evict else ""
            return f"needs {peak} KV blocks{counted}, {cache} has {bm.num_blocks // ranks}"
        if (cfg.policy == "continuous" and not cfg.chunked_prefill
                and seq.prompt_len > cfg.max_num_batched_tokens):
            return (f"prompt ({seq.prompt_len}) exceeds max_num_batched_tokens "
                    f"({cfg.max_num_batched_tokens}) without chunked_prefill")
        return None

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or bool(self.running) or bool(self.kv.landed)

    def abort(self, seq: Sequence) -> None:
        """Cancel a queued or running sequence between steps (its client went away): it leaves
        the queue or the running list, its KV blocks (and host swap blocks) are freed, and it
        ends with status aborted and finish_reason "abort"."""
        self.sync()
        if seq.status is _RUNNING:
            self.running.remove(seq)
            self.block_manager.free_sequence(seq.seq_id)
        elif seq in self.waiting:
            self.waiting.remove(seq)
            if self.swap is not None and self.swap.holds(seq.seq_id):
                self.swap.swap_in(seq.seq_id)  # releases its host blocks; nothing is copied
        else:
            raise ValueError(f"request {seq.request_id}: only a queued or running sequence can "
                             f"be aborted, this one is {seq.status.value}")
        seq.finish_reason = "abort"
        seq.set_status(SequenceStatus.ABORTED)

    # --- planning --------------------------------------------------------------------------------

    def schedule(self, now_s: float = 0.0) -> StepPlan:
        """The next step's plan (empty when there is nothing to run). `now_s` is only read by the
        static policy's batch timeout."""
        plan = StepPlan()
        if self.kv.uncached:  # disaggregation: KV that came in, to cache before planning
            self.cache_landed()
        if self.config.policy == "continuous":
            self._schedule_continuous(plan)
        else:
            self._schedule_static(plan, now_s)
        if plan.prefills or plan.decodes or plan.preempted:  # a step that only preempted
            plan.step = self.num_steps                       # is one: vLLM's zero-token step
            self.num_steps += 1
            for seq, _ in plan.prefills:
                if seq.first_scheduled_step is None:
                    seq.first_scheduled_step = plan.step
        plan.num_running = len(self.running)
        kv = self.kv  # a request whose KV comes in or came in waits, as vLLM counts it
        plan.num_waiting = len(self.waiting) + len(kv.receiving) + len(kv.landed)
        plan.kv_blocks_used = self.block_manager.num_used
        if self._caching:
            plan.kv_blocks_cached = self.block_manager.num_cached
        return plan

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
        budget; only a step with none decodes the running sequences (where admission failed
        with the whole budget and the blocks before any decode took one, it fails again while
        they decode)."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens * cfg.data_parallel_size
        prefilling = [seq for seq in self.running
                      if seq.num_computed_tokens < seq.prompt_len + seq.num_output_tokens - 1]
        budget = self._continue_prefills(plan, prefilling, budget, preempting=False)
        self._admit(plan, budget, cfg.max_num_seqs * cfg.data_parallel_size)
        if not (plan.prefills or plan.decodes):  # a swapped-in sequence decodes as it joins
            plan.decodes = self.reserve_decodes(plan, [])

    def _continue_prefills(self, plan: StepPlan, prefilling: list, budget: int,
                           preempting: bool = True) -> int:
        """Plan the next chunk of each prefill split over earlier steps (`prefilling`, in
        running order) while the budget lasts; returns the budget left. Not `preempting`
        (prefills alone, without mixed chunks): a chunk takes only free blocks, cut to what
        they hold, as SGLang cuts it; with none, the step goes on without it (the running
        sequences then decode, preempting where they must, so prefills never starve them)."""
        cfg = self.config
        for seq in prefilling:
            if budget == 0:
                break
            if seq.status is not _RUNNING:  # preempted for an earlier one's chunk
                continue
            n = min(seq.num_tokens - seq.num_computed_tokens, budget, cfg.max_num_batched_tokens)
            if not preempting:
                bm = self.block_manager
                n = min(n, (len(bm.block_tables[seq.seq_id]) + bm.num_free) * bm.block_size
                        - seq.num_computed_tokens)
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

    def forget_planned(self, plan: StepPlan) -> None:
        """The step planned as `plan` failed before it ran (its executor raised): the blocks
        its prefills were to fill, registered when planned (`_prefill`), hold no KV, so no
        lookup may find them."""
        if not self._caching:
            return
        bm = self.block_manager
        bs = bm.block_size
        for seq, n in plan.prefills:
            table, computed = bm.block_tables.get(seq.seq_id, ()), seq.num_computed_tokens
            bm.uncache(table[computed // bs:(computed + n) // bs])

    def reserve_decodes(self, plan: StepPlan, prefilling: list) -> list[Sequence]:
        """The running sequences that decode in the step being planned, in running order, each
        given room for its next KV row (a sequence in need preempts from the back of the
        running list, `preempt_last`); those still prefilling are appended to `prefilling`."""
        return reserve_decode_blocks(self.running, self.block_manager,
                                     lambda: self.preempt_last(plan), prefilling)

    def _schedule_static(self, plan: StepPlan, now_s: float) -> None:
        if self.running:  # lockstep decode of the batch in flight
            plan.decodes = reserve_decode_blocks(self.running, self.block_manager,
                                                 lambda: self.preempt_last(plan))
            if not plan.decodes:  # every one preempted: a step of no tokens, the batch over
                self._batch_slots = 0
            plan.padding_seqs = self._batch_slots - len(plan.decodes)
            return
        cfg, landed = self.config, self.kv.landed
        if not self.waiting and not landed:
            return
        if cfg.batch_timeout_s > 0 and len(self.waiting) + len(landed) < cfg.max_batch_size:
            # fewer than max_batch_size waiting, so this scan is short
            deadline = min(seq.arrival_s for seq in chain(self.waiting, landed)) \
                + cfg.batch_timeout_s
            if now_s < deadline:
                plan.idle_until_s = deadline
                return
        self._admit(plan, None, cfg.max_batch_size)
        self._batch_slots = len(self.running)

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

    def cache_blocks(self, seq: Sequence, first: int, last: int) -> None:
        """Register the sequence's filled blocks first .. last - 1 whose hashes are known, but
        keys of its own (`own_keys`), which wait for its preemption (`preempt_last`)."""
        bm = self.block_manager
        hashes = block_hashes(seq, bm.block_size, last)
        if not hashes or own_keys(hashes):
            return
        last = min(last, len(hashes))
        bm.cache_filled(bm.block_tables[seq.seq_id][first:last], hashes[first:last])

    def running_added(self, seq: Sequence) -> None:
        """`seq` joined the running list (admitted, or readmitted): nothing to do here."""

    def running_removed(self, seq: Sequence) -> None:
        """`seq` was preempted off the running list: nothing to do here."""

    def preempt_last(self, plan: StepPlan) -> None:
        """Preempt the last sequence of the running list (the victim order's last) in the step
        being planned."""
        seq = self.running.pop()
        self.running_removed(seq)
        if self._caching and own_keys(seq.block_hashes):  # found again on readmission
            bm, first = self.block_manager, seq.filled_from
            n = seq.num_computed_tokens // bm.block_size
            bm.cache_filled(bm.block_tables[seq.seq_id][first:n], seq.block_hashes[first:n])
            seq.filled_from = 0  # readmitted, it fills (or finds) them from the first
        plan.swap_out += preempt_sequence(seq, self.block_manager, self.waiting, self.swap)
        plan.preempted.append(seq)
        self.num_preemptions += 1

    # --- after the step --------------------------------------------------------------------------

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
        finished and drop them from the running list."""
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
