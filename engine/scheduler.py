"""The scheduling policy shared by the real engine and the simulator.

`Scheduler.schedule()` turns the waiting queue and the running set into the next `StepPlan`;
`Scheduler.postprocess()` applies the step's sampled tokens. It never reads a clock, never draws
a random number and never touches tensors: the engine and the simulator drive the same object and
differ only in who executes the plan and what time it is.

Policies:
- continuous (Orca / vLLM): every step, running sequences decode one token each, ongoing prefill
  chunks continue, then waiting sequences are admitted while `max_num_seqs`, the KV blocks and the
  token budget allow (head-of-line: admission stops at the first request that does not fit).
- static: when idle, take up to `max_batch_size` waiting sequences, prefill them together and
  decode them in lockstep until all finish; finished slots stay empty (padding) until then.

A running sequence that needs a new KV block when none is free preempts a victim (the last of the
running list, which is kept in victim order) by recompute: its blocks are freed and it goes back
to the queue, to prefill prompt + generated tokens again when readmitted.

Every step gets an index; sequences remember the step of their first scheduling, first token,
last token and finish, so the caller turns indices into times with one table of step times.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .block_manager import BlockManager, blocks_needed
from .queues import QUEUES
from .sequence import Sequence, SequenceStatus

POLICIES = ("static", "continuous")


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling knobs; names follow vLLM where vLLM has the same knob."""

    policy: str = "continuous"
    queue: str = "fcfs"
    chunked_prefill: bool = False
    max_num_seqs: int = 32  # most sequences running at once (continuous)
    max_num_batched_tokens: int = 2048  # per-step token budget (continuous)
    max_batch_size: int = 16  # static batch size
    batch_timeout_s: float = 0.0  # static: wait this long for a full batch (0: start at once)
    max_seq_len: int = 4096  # prompt + output limit, from the model

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"scheduler.policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.queue not in QUEUES:
            raise ValueError(f"scheduler.queue must be one of {', '.join(QUEUES)}, got {self.queue!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_batch_size", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.batch_timeout_s < 0:
            raise ValueError(f"scheduler.batch_timeout_s must be >= 0, got {self.batch_timeout_s}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"engine.max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"engine.max_num_seqs ({self.max_num_seqs}) so every running sequence can decode"
            )


@dataclass
class StepPlan:
    """What one engine step computes. `prefills` pairs a sequence with the number of its tokens
    to compute this step (a whole prompt, a chunk, or a recomputation); a prefill that reaches the
    sequence's last known token samples one new token. Each decode computes and samples one."""

    step: int = -1
    prefills: list[tuple[Sequence, int]] = field(default_factory=list)
    decodes: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    padding_seqs: int = 0  # static batching: finished slots still in the batch
    idle_until_s: float | None = None  # static with a timeout: nothing to run before this time
    num_running: int = 0
    num_waiting: int = 0
    kv_blocks_used: int = 0
    # Filled by postprocess, for exact inter-token latencies without per-token timestamps:
    itl_consecutive: int = 0  # tokens whose previous token came from the previous step
    itl_from_steps: list[int] = field(default_factory=list)  # previous-token step of the others

    @property
    def num_prefill_tokens(self) -> int:
        return sum(n for _, n in self.prefills)

    @property
    def num_decode_seqs(self) -> int:
        return len(self.decodes)

    @property
    def is_empty(self) -> bool:
        return not self.prefills and not self.decodes


class Scheduler:
    """Waiting queue, running list and block manager, advanced one step at a time."""

    def __init__(self, config: SchedulerConfig, block_manager: BlockManager):
        self.config = config
        self.block_manager = block_manager
        self.waiting = QUEUES[config.queue]()
        self.running: list[Sequence] = []  # victim order: the last one is preempted first
        self.num_steps = 0
        self.num_preemptions = 0
        self._admissions = 0
        self._batch_slots = 0  # static: size of the batch in flight
        self._victim_key = (
            (lambda s: (s.priority, s.arrival_s, s.admit_order))
            if config.queue == "priority" else (lambda s: s.admit_order)
        )

    # --- arrivals --------------------------------------------------------------------------------

    def add(self, seq: Sequence) -> bool:
        """Queue a new sequence; reject it (and return False) if it can never run."""
        reason = self.rejection_reason(seq)
        if reason:
            seq.reject_reason = reason
            seq.set_status(SequenceStatus.REJECTED)
            return False
        self.waiting.push(seq)
        return True

    def rejection_reason(self, seq: Sequence) -> str | None:
        cfg, bm = self.config, self.block_manager
        total = seq.prompt_len + seq.max_new_tokens
        if total > cfg.max_seq_len:
            return (f"prompt ({seq.prompt_len}) + max_new_tokens ({seq.max_new_tokens}) "
                    f"exceeds max_seq_len ({cfg.max_seq_len})")
        peak_blocks = blocks_needed(total - 1, bm.block_size)  # the last token's KV is never stored
        if peak_blocks > bm.num_blocks:
            return f"needs {peak_blocks} KV blocks, the cache has {bm.num_blocks}"
        if (cfg.policy == "continuous" and not cfg.chunked_prefill
                and seq.prompt_len > cfg.max_num_batched_tokens):
            return (f"prompt ({seq.prompt_len}) exceeds max_num_batched_tokens "
                    f"({cfg.max_num_batched_tokens}) without chunked_prefill")
        return None

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    # --- planning --------------------------------------------------------------------------------

    def schedule(self, now_s: float = 0.0) -> StepPlan:
        """The next step's plan (empty when there is nothing to run). `now_s` is only read by the
        static policy's batch timeout."""
        if self.config.policy == "continuous":
            plan = self._schedule_continuous()
        else:
            plan = self._schedule_static(now_s)
        if not plan.is_empty:
            plan.step = self.num_steps
            self.num_steps += 1
            for seq, _ in plan.prefills:
                if seq.first_scheduled_step is None:
                    seq.first_scheduled_step = plan.step
        plan.num_running = len(self.running)
        plan.num_waiting = len(self.waiting)
        plan.kv_blocks_used = self.block_manager.num_used
        return plan

    def _schedule_continuous(self) -> StepPlan:
        plan = StepPlan()
        budget = self.config.max_num_batched_tokens
        self._schedule_decodes(plan)
        budget -= len(plan.decodes)
        for seq in self.running:  # prefill chunks already under way (their blocks are reserved)
            if budget == 0:
                break
            if seq.is_prefilling:
                n = min(seq.num_tokens - seq.num_computed_tokens, budget)
                plan.prefills.append((seq, n))
                budget -= n
        self._admit(plan, budget, self.config.max_num_seqs)
        return plan

    def _schedule_static(self, now_s: float) -> StepPlan:
        plan = StepPlan()
        if self.running:  # lockstep decode of the batch in flight
            self._schedule_decodes(plan)
            plan.padding_seqs = self._batch_slots - len(plan.decodes)
            return plan
        cfg = self.config
        if not self.waiting:
            return plan
        if cfg.batch_timeout_s > 0 and len(self.waiting) < cfg.max_batch_size:
            deadline = self.waiting.peek().arrival_s + cfg.batch_timeout_s
            if now_s < deadline:
                plan.idle_until_s = deadline
                return plan
        self._admit(plan, budget=None, max_running=cfg.max_batch_size)
        self._batch_slots = len(self.running)
        return plan

    def _schedule_decodes(self, plan: StepPlan) -> None:
        """Every running sequence past its prefill decodes one token; make room for its KV."""
        bm = self.block_manager
        running = self.running
        i = 0
        while i < len(running):
            seq = running[i]
            if not seq.is_prefilling:
                if bm.blocks_to_hold(seq.seq_id, seq.num_tokens):
                    while not bm.num_free and running[-1] is not seq:
                        self._preempt(running[-1], plan)
                    if not bm.num_free:  # it is the last one itself
                        self._preempt(seq, plan)
                        break
                    bm.allocate_block(seq.seq_id)
                plan.decodes.append(seq)
            i += 1

    def _admit(self, plan: StepPlan, budget: int | None, max_running: int) -> None:
        """Admit waiting sequences in queue order while slots, KV blocks and budget allow.
        budget None: no token budget (static batching prefills its whole batch at once)."""
        bm, cfg = self.block_manager, self.config
        while self.waiting and len(self.running) < max_running and budget != 0:
            seq = self.waiting.peek()
            n = seq.num_tokens  # prompt, plus generated tokens when recomputing
            if budget is not None and n > budget:
                # Prompts are split only with chunked prefill; a recomputation longer than the
                # budget is always split, or it could never run again.
                if not (cfg.chunked_prefill or seq.num_output_tokens > 0):
                    break
            if not bm.can_allocate(blocks_needed(n, bm.block_size)):
                break  # head-of-line: nothing behind it jumps the queue
            self.waiting.pop()
            bm.ensure_capacity(seq.seq_id, n)
            seq.set_status(SequenceStatus.RUNNING)
            seq.admit_order = self._admissions
            self._admissions += 1
            self._insert_running(seq)
            chunk = n if budget is None else min(n, budget)
            plan.prefills.append((seq, chunk))
            if budget is not None:
                budget -= chunk

    def _insert_running(self, seq: Sequence) -> None:
        if self.config.queue == "fcfs":
            self.running.append(seq)  # admission order is victim order
        else:
            bisect.insort(self.running, seq, key=self._victim_key)

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        """Free the sequence's blocks and requeue it to recompute its tokens later."""
        self.running.remove(seq)
        if seq in plan.decodes:
            plan.decodes.remove(seq)
        self.block_manager.free_sequence(seq.seq_id)
        seq.num_computed_tokens = 0
        seq.preemptions += 1
        seq.set_status(SequenceStatus.PREEMPTED)
        self.waiting.push_front(seq)
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
                if self._emit(plan, seq, None if tokens is None else tokens[seq.seq_id]):
                    finished.append(seq)
        for seq in plan.decodes:
            seq.num_computed_tokens += 1
            if self._emit(plan, seq, None if tokens is None else tokens[seq.seq_id]):
                finished.append(seq)
        if finished:
            bm = self.block_manager
            for seq in finished:
                bm.free_sequence(seq.seq_id)
                seq.finish_step = plan.step
                seq.set_status(SequenceStatus.FINISHED)
            self.running = [s for s in self.running if s.status is SequenceStatus.RUNNING]
        return finished

    @staticmethod
    def _emit(plan: StepPlan, seq: Sequence, token: int | None) -> bool:
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
