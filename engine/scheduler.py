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
  sequences decode only in a step that has none. A continuous step's composition is mixed in
  from `continuous_step.py` (`ContinuousSteps`).
- static: when idle, take up to `max_batch_size` waiting sequences, prefill them together and
  decode them in lockstep until all finish; finished slots stay empty (padding) until then. One
  whose KV is whole (swapped out, or transferred) decodes in the batch's first step.

Under the guaranteed-no-evict capacity policy (`capacity_scheduler_policy`, TensorRT-LLM's
default), either policy admits a request only where the free blocks hold, beside what every
admitted sequence is still owed to its last token, all the blocks promised to it
(`kv_reservation.PromisedBlocks`): none is ever preempted, and fewer run at once. Under SGLang's
(`new_token_ratio`, continuous batching), a request is admitted only where the free tokens hold
it beside a share of the running requests' future tokens, a share that decays in each step that
only decodes, is set again by a preemption and starts over when the engine idles
(`new_token_ratio.py`). Admission is mixed in from `admission.py` (`Admission`), the finished
step's results from `step_results.py` (`StepResults`), new requests and aborts from
`arrivals.py` (`Arrivals`). With SGLang's receive interval (`scheduler_recv_interval` > 1) a
new request waits outside the queue until a step reads it: every that many steps of decodes,
the step after one with a prefill, or at once when nothing runs (`recv_interval.py`).

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
from .arrivals import Arrivals
from .batch_wait import BatchWait
from .block_hashes import block_hashes, own_keys
from .block_manager import BlockManager
from .continuous_step import ContinuousSteps
from .disaggregation import KvInFlight, KvTransfers
from .kv_reservation import admit_sequence, has_free_capacity, preempt_sequence, \
    reserve_decode_blocks
from .new_token_ratio import NewTokenRatio
from .queues import QUEUES
from .recv_interval import RecvInterval
from .scheduler_config import POLICIES, SchedulerConfig
from .sequence import Sequence
from .step_plan import StepPlan
from .step_results import StepResults
from .swap import SwapSpace

__all__ = ["POLICIES", "SchedulerConfig", "StepPlan", "Scheduler", "has_free_capacity",
           "admit_sequence", "preempt_sequence", "reserve_decode_blocks"]


# --- the policy ----------------------------------------------------------------------------------


class Scheduler(Arrivals, ContinuousSteps, Admission, StepResults, KvTransfers):
    """Waiting queue, running list and block manager, advanced one step at a time."""

    # Under SGLang's capacity policy, the share of the running requests' future tokens that
    # admission reserves (an instance's own only then: few attributes keep the hot object fast)
    new_token_ratio: NewTokenRatio | None = None
    # With SGLang's receive interval above 1, the requests not yet read and the steps since the
    # last read (`recv_interval.py`; likewise an instance's own only then)
    recv: RecvInterval | None = None

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
        if config.reserves_new_tokens:
            self.new_token_ratio = NewTokenRatio()
        if config.scheduler_recv_interval > 1:
            self.recv = RecvInterval(config.scheduler_recv_interval)

    def sync(self) -> None:
        """Bring every running sequence's counts up to date before something outside the
        scheduler reads them: here they always are; a subclass that counts lazily
        (`reserve_decodes`, `apply_decodes`) brings them up to date."""

    # --- planning --------------------------------------------------------------------------------

    def schedule(self, now_s: float = 0.0) -> StepPlan:
        """The next step's plan (empty when there is nothing to run). `now_s` is only read by the
        static policy's batch timeout."""
        plan = StepPlan()
        recv = self.recv
        if recv is not None and recv.due(bool(self.running)):
            for seq in recv.read():
                self.waiting.push(seq)
        if self.kv.uncached:  # disaggregation: KV that came in, to cache before planning
            self.cache_landed()
        if self.config.policy == "continuous":
            self._schedule_continuous(plan)
        else:
            self._schedule_static(plan, now_s)
        ratio = self.new_token_ratio
        if ratio is not None:
            if plan.preempted:  # SGLang retracted requests: it estimates again
                ratio.after_preemption(self.running)
            elif plan.decodes and not plan.prefills:
                ratio.decay()
        if recv is not None:
            recv.planned(plan)
        if plan.prefills or plan.decodes or plan.preempted:  # a step that only preempted
            plan.step = self.num_steps                       # is one: vLLM's zero-token step
            self.num_steps += 1
            for seq, _ in plan.prefills:
                if seq.first_scheduled_step is None:
                    seq.first_scheduled_step = plan.step
        plan.num_running = len(self.running)
        kv = self.kv  # a request whose KV comes in or came in waits, as vLLM counts it
        plan.num_waiting = len(self.waiting) + len(kv.receiving) + len(kv.landed)
        if recv is not None:  # those not yet read wait too
            plan.num_waiting += len(recv.inbox)
        plan.kv_blocks_used = self.block_manager.num_used
        if self._caching:
            plan.kv_blocks_cached = self.block_manager.num_cached
        return plan

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

    def cache_blocks(self, seq: Sequence, first: int, last: int) -> None:
        """Register the sequence's filled blocks first .. last - 1 whose hashes are known, but
        keys of its own (`own_keys`), which wait for its preemption (`preempt`)."""
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
        self.preempt(plan, self.running.pop())

    def preempt(self, plan: StepPlan, seq: Sequence) -> None:
        """Preempt a running sequence, already taken off the running list, in the step being
        planned. It goes back to the head of the queue (vLLM's way), under SGLang's capacity
        policy to its end (SGLang queues the requests it takes back behind those waiting)."""
        self.running_removed(seq)
        if self._caching and own_keys(seq.block_hashes):  # found again on readmission
            bm, first = self.block_manager, seq.filled_from
            n = seq.num_computed_tokens // bm.block_size
            bm.cache_filled(bm.block_tables[seq.seq_id][first:n], seq.block_hashes[first:n])
            seq.filled_from = 0  # readmitted, it fills (or finds) them from the first
        plan.swap_out += preempt_sequence(seq, self.block_manager, self.waiting, self.swap,
                                          front=self.new_token_ratio is None)
        plan.preempted.append(seq)
        self.num_preemptions += 1
