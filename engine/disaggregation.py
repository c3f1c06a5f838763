"""Prefill/decode disaggregation's part of the scheduler (`Scheduler` mixes it in), as vLLM's KV
connectors move KV: a `prefill_only` engine releases every sequence that sampled its first token
(`StepPlan.handed_off`, status transferred), keeping its blocks until its KV has been read
(`kv_sent`); a decode engine queues it (`add_transferred`), reserves blocks for all its tokens
when it reaches the head of the queue (`StepPlan.kv_requested`: the caller moves its KV) and
holds them while the KV comes in; once it has (`kv_landed`) the sequence is readmitted, ahead of
the queue, as a swapped-out one is (`Scheduler._swap_in`). The state lives in one `KvInFlight`
per engine (`Scheduler.kv`).

With prefix caching, as vLLM's NIXL connector does, a decode engine takes the blocks of the
prompt's longest prefix it has cached itself (a shared system prompt, an earlier turn it
received) and asks only for the rest (`tokens_to_move`); the blocks that come in are cached
when it next plans a step (`cache_landed`), as vLLM caches them when it next schedules.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import blocks_needed
from .kv_reservation import PromisedBlocks, has_free_capacity
from .sequence import Sequence, SequenceStatus
from .step_plan import StepPlan


@dataclass(slots=True)
class KvInFlight:
    """Prefill/decode disaggregation at one engine: its role and its KV on its way (one
    object: the scheduler keeps few attributes, docs/sim/speed.md)."""

    prefill_only: bool = False  # release sequences after their first token
    # queued transferred sequences (seq_id) whose KV is still at the engine that prefilled them
    remote: set = field(default_factory=set)
    # seq_id -> sequence whose blocks are reserved here while its KV comes in
    receiving: dict = field(default_factory=dict)
    # prefill-only: seq_id -> handed-off sequence whose blocks are kept until its KV is read
    sending: dict = field(default_factory=dict)
    # transferred sequences whose KV came in, holding their blocks: readmitted before the
    # queue (behind a head that waits for the blocks they hold, they could never run)
    landed: deque = field(default_factory=deque)
    # seq_id -> the prompt tokens of a sequence whose KV comes in that were cached here (its
    # blocks taken at once: only the rest is moved)
    found: dict = field(default_factory=dict)
    # landed sequences whose blocks that came in are cached when the next step is planned
    uncached: list = field(default_factory=list)


class KvTransfers:
    """The scheduler's disaggregation seams (a mixin of `Scheduler`: it reads `self.kv`,
    `self.waiting`, `self.running` and `self.block_manager`)."""

    @property
    def prefill_only(self) -> bool:
        """Disaggregation: a prefill engine, releasing each sequence after its first token."""
        return self.kv.prefill_only

    @prefill_only.setter
    def prefill_only(self, value: bool) -> None:
        self.kv.prefill_only = value

    def add_transferred(self, seq: Sequence) -> None:
        """Queue a sequence another engine prefilled (disaggregation), its KV still there: at
        the head of the queue, once its blocks fit, they are reserved and it is listed in the
        plan's `kv_requested`; `kv_landed` readmits it. Its engine's limits are this one's, so
        it fits."""
        if seq.status is not SequenceStatus.TRANSFERRED:
            raise ValueError(f"request {seq.request_id}: only a transferred sequence can be "
                             f"added with its KV, this one is {seq.status.value}")
        assert self.rejection_reason(seq) is None, "a transferred sequence must fit"
        assert seq.num_tokens - seq.num_computed_tokens == 1, "its KV is whole but the last"
        self.kv.remote.add(seq.seq_id)
        self.waiting.push(seq)

    def kv_landed(self, seq: Sequence) -> None:
        """The KV of a sequence whose blocks `kv_requested` reserved has come in: it is
        readmitted as a swapped-out one is, ahead of the queue (it stood at its head, and
        holds its blocks). With prefix caching the full blocks that came in are cached when
        the next step is planned (`cache_landed`; keys of its own, `own_keys`, when it is
        preempted: `filled_from`)."""
        del self.kv.receiving[seq.seq_id]
        seq.filled_from = self.kv.found.pop(seq.seq_id, 0) // self.block_manager.block_size
        if self._caching:
            self.kv.uncached.append(seq)
        self.kv.landed.append(seq)

    def cache_landed(self) -> None:
        """Register the full blocks that came in for the sequences landed since the last step
        was planned (as vLLM caches them when it next schedules such a request): between
        steps, so that a simulator that plans several steps at once counts what step by step
        planning counts."""
        bs = self.block_manager.block_size
        for seq in self.kv.uncached:
            self.cache_blocks(seq, seq.filled_from, seq.num_computed_tokens // bs)
        self.kv.uncached.clear()

    def tokens_to_move(self, seq: Sequence) -> int:
        """The computed tokens of a sequence whose blocks `kv_requested` reserved whose KV must
        come in: all but those it found cached here."""
        return seq.num_computed_tokens - self.kv.found.get(seq.seq_id, 0)

    def kv_sent(self, seq: Sequence) -> None:
        """Prefill-only: the KV of a handed-off sequence has been read; its blocks are freed."""
        del self.kv.sending[seq.seq_id]
        self.block_manager.free_sequence(seq.seq_id)

    def awaiting_kv(self) -> bool:
        """Whether blocks are held for KV in flight (sent or coming in): progress that a
        transfer's end, not a step, brings."""
        return bool(self.kv.receiving or self.kv.sending)

    def _reserve_remote(self, plan: StepPlan, seq: Sequence,
                        promised: PromisedBlocks | None = None) -> bool:
        """Reserve blocks for all the tokens of the transferred sequence at the head of the
        queue (the cached blocks of its prompt's longest cached prefix, with prefix caching,
        and new ones for the rest) and list it in `plan.kv_requested` (it waits for its KV,
        neither queued nor running, taking no slot or token budget: vLLM's
        WAITING_FOR_REMOTE_KVS); False when they do not fit, or under the guaranteed-no-evict
        capacity policy when the blocks promised to it do not fit in `promised`'s room (then
        nothing changes)."""
        bm = self.block_manager
        # at most the blocks of its first prompt_len - 1 tokens, as vLLM's decode instance,
        # whose request is the prompt alone, finds them (its last token is always computed)
        hits = self._cached_prefix(seq)[:(seq.prompt_len - 1) // bm.block_size] \
            if self._caching else ()
        need = blocks_needed(seq.num_tokens, bm.block_size) - len(hits) + \
            bm.state_to_hold(seq.seq_id)  # and its state's, where the pool holds states
        if hits:
            need += bm.evictable_among(hits)  # free blocks that its hits take up
        if not has_free_capacity(bm, need) or \
                (promised is not None and not promised.take(seq)):
            return False
        self.waiting.pop()
        self.kv.remote.discard(seq.seq_id)
        if hits:
            bm.take_prefix(seq.seq_id, hits)
            self.kv.found[seq.seq_id] = len(hits) * bm.block_size
        bm.ensure_capacity(seq.seq_id, seq.num_tokens)
        self.kv.receiving[seq.seq_id] = seq
        plan.kv_requested.append(seq)
        return True

    def _hand_off(self, plan: StepPlan) -> None:
        """Prefill-only: release every running sequence that has sampled its first token (it
        goes on at a decode engine) and list it in `plan.handed_off`; its blocks stay held
        until its KV has been read (`kv_sent`)."""
        leaving = [seq for seq in self.running if seq.num_output_tokens]
        for seq in leaving:
            self.kv.sending[seq.seq_id] = seq
            seq.set_status(SequenceStatus.TRANSFERRED)
        self.running = [s for s in self.running if s.status is SequenceStatus.RUNNING]
        plan.handed_off = leaving
        if leaving and not self.running:
            self.idle_check()
