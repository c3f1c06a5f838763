"""Arrivals, the scheduler's part that takes requests in and lets them go before they finish
(`Scheduler` mixes it in: it reads `self.config`, `self.block_manager`, `self.waiting`,
`self.running`, `self.kv`, `self.swap`, `self.recv` and `self.new_token_ratio`, and calls the
scheduler's `sync`).

`add` queues a new request, or refuses it where it can never run under the configuration
(`rejection_reason`); with SGLang's receive interval it waits in `recv.inbox` until a step reads
it (`recv_interval.py`). `abort` cancels a queued or running one between steps. docs/scheduler/
scheduler.md gives the rules.
"""

from __future__ import annotations

from .kv_reservation import peak_blocks, promised_blocks
from .sequence import Sequence, SequenceStatus

_RUNNING = SequenceStatus.RUNNING


class Arrivals:
    """The scheduler's arrivals and aborts (a mixin of `Scheduler`)."""

    def add(self, seq: Sequence) -> bool:
        """Queue a new sequence (with a receive interval, hold it until a step reads it);
        reject it (and return False) if it can never run."""
        if seq.status is not SequenceStatus.WAITING:
            raise ValueError(f"request {seq.request_id}: only a new sequence can be added, "
                             f"this one is {seq.status.value}")
        reason = self.rejection_reason(seq)
        if reason:
            seq.reject_reason = reason
            seq.set_status(SequenceStatus.REJECTED)
            return False
        if self.recv is None:
            self.waiting.push(seq)
        else:
            self.recv.inbox.append(seq)
        return True

    def rejection_reason(self, seq: Sequence) -> str | None:
        """Why the sequence can never run under this configuration, or None when it can."""
        cfg, bm = self.config, self.block_manager
        total = seq.prompt_len + seq.max_new_tokens
        if total > cfg.max_seq_len:
            return (f"prompt ({seq.prompt_len}) + max_new_tokens ({seq.max_new_tokens}) "
                    f"exceeds max_seq_len ({cfg.max_seq_len})")
        no_evict = cfg.no_evict  # a promise counts the whole request, on every engine
        peak = (promised_blocks if no_evict else peak_blocks)(seq, bm.block_size) + \
            bm.state_blocks  # and its state's, where the pool holds states
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
        return bool(self.waiting) or bool(self.running) or bool(self.kv.landed) or \
            bool(self.recv is not None and self.recv.inbox)

    def queued(self, seq: Sequence) -> bool:
        """Whether `seq` waits: in the queue, or not yet read (a receive interval)."""
        return seq in self.waiting or (self.recv is not None and seq in self.recv.inbox)

    def num_queued(self) -> int:
        """The sequences waiting: in the queue, or not yet read (a receive interval)."""
        return len(self.waiting) + (len(self.recv.inbox) if self.recv is not None else 0)

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
        elif self.recv is not None and seq in self.recv.inbox:
            self.recv.inbox.remove(seq)
        else:
            raise ValueError(f"request {seq.request_id}: only a queued or running sequence can "
                             f"be aborted, this one is {seq.status.value}")
        seq.finish_reason = "abort"
        seq.set_status(SequenceStatus.ABORTED)
        self.idle_check()

    def idle_check(self) -> None:
        """Under SGLang's capacity policy, start the reserved share over once nothing runs or
        waits in the queue (SGLang resets it when its scheduler idles, and then reads the
        requests a receive interval left unread)."""
        if self.new_token_ratio is not None and \
                not (self.waiting or self.running or self.kv.landed):
            self.new_token_ratio.reset()
