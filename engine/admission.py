"""Admission, the scheduler's part that takes waiting sequences into the running list
(`Scheduler` mixes it in, as it mixes in `KvTransfers`: it reads `self.config`,
`self.block_manager`, `self.waiting`, `self.running` and its order `self.running_key`,
`self.kv`, `self.swap`, `self._caching` and `self.new_token_ratio`, and calls the scheduler's
`_prefill`, `_reserve_remote` and `running_added`).

`_admit` takes, in queue order and head-of-line, first the sequences whose KV came in from a
prefill engine, then the queue: a sequence whose KV is at the engine that prefilled it has its
blocks reserved (`_reserve_remote`); a swapped-out one is readmitted (`_swap_in`); a new one, or
one recomputing after a preemption, takes its cached prefix's blocks and its first chunk's
(`first_chunk`). Each stops at the first that does not fit the running slots, the token budget,
the free blocks and, under the guaranteed-no-evict capacity policy, the room for the blocks
promised to it (`promised`, `kv_reservation.PromisedBlocks`), and under SGLang's the tokens
left beside those reserved (`reserved_tokens`, `new_token_ratio.ReservedTokens`).
docs/scheduler/scheduler.md (`schedule`, step 3) gives the rules.
"""

from __future__ import annotations

import bisect
from itertools import chain

from .block_hashes import block_hashes
from .block_manager import blocks_needed
from .continuous_step import unmixed_cut
from .kv_reservation import RESUMING, PromisedBlocks, admit_sequence, has_free_capacity
from .new_token_ratio import ReservedTokens
from .sequence import Sequence, SequenceStatus
from .step_plan import StepPlan

_SWAPPED = SequenceStatus.SWAPPED


class Admission:
    """The scheduler's admission (a mixin of `Scheduler`)."""

    def _admit(self, plan: StepPlan, budget: int | None, max_running: int,
               decoders: bool = False, prefills: bool = False) -> None:
        """Admit waiting sequences in queue order while slots, KV blocks and budget allow, and
        under guaranteed no evict the room for the blocks promised to them (`promised`).
        budget None: no token budget (static batching prefills its whole batch at once).
        `decoders`: only those whose KV is computed but for the last token (they decode), up to
        the first that would prefill (batch waiting holds those). `prefills`: only those that
        prefill, up to the first that would decode (without mixed chunks those wait for a
        step of decodes)."""
        bm, waiting, landed = self.block_manager, self.waiting, self.kv.landed
        promised = self.promised()  # None unless guaranteed_no_evict
        reserved = self.reserved_tokens(plan)  # None unless new_token_ratio
        while not prefills and landed and len(self.running) < max_running and budget != 0:
            n = self._swap_in(plan, landed[0], budget)
            if not n:
                break
            landed.popleft()
            if budget is not None:
                budget -= n
        while waiting and len(self.running) < max_running and budget != 0:
            seq = waiting.peek()
            if (decoders or prefills) and decoders != (
                    seq.status in RESUMING and seq.num_tokens - seq.num_computed_tokens == 1):
                break  # (one whose KV is at the engine that prefilled it is such a one)
            if seq.seq_id in self.kv.remote:  # its KV is at the engine that prefilled it
                if not self._reserve_remote(plan, seq, promised):
                    break
                continue
            if seq.status in RESUMING:
                if promised is not None and not promised.take(seq):
                    break
                n = self._swap_in(plan, seq, budget)
                if not n:
                    break
                waiting.pop()
                if budget is not None:
                    budget -= n
                continue
            hits = self._cached_prefix(seq) if self._caching else ()
            cached = len(hits) * bm.block_size
            chunk = self.first_chunk(seq.num_tokens - cached, budget)
            need = blocks_needed(cached + chunk, bm.block_size) - len(hits) + \
                bm.state_to_hold(seq.seq_id)  # its first chunk's, and its state's
            pinned = bm.evictable_among(hits) if hits else 0  # free blocks its hits take up
            if not chunk or not has_free_capacity(bm, need + pinned) or \
                    (promised is not None and not promised.take(seq)) or \
                    (reserved is not None and
                     not reserved.take(seq, seq.num_tokens - cached, chunk, pinned)):
                break  # head-of-line: nothing behind it jumps the queue
            waiting.pop()
            if hits:
                bm.take_prefix(seq.seq_id, hits)
                seq.num_computed_tokens = cached
            admit_sequence(seq, bm, cached + chunk)
            if seq.num_cached_tokens is None:
                seq.num_cached_tokens = cached
            plan.cached_tokens += cached
            self._insert_running(seq)
            self._prefill(plan, seq, chunk)
            if budget is not None:
                budget -= chunk

    def promised(self) -> PromisedBlocks | None:
        """Under the guaranteed-no-evict capacity policy, the room for this round of admission
        (`PromisedBlocks`): the sequences holding blocks that will still take more are the
        running ones and, under disaggregation, those whose KV comes in or came in."""
        if not self.config.no_evict:
            return None
        kv = self.kv
        return PromisedBlocks(self.block_manager,
                              chain(self.running, kv.receiving.values(), kv.landed),
                              kv.prefill_only)

    def reserved_tokens(self, plan: StepPlan) -> ReservedTokens | None:
        """Under SGLang's capacity policy, this round of admission's account of the tokens
        reserved (`new_token_ratio.ReservedTokens`), over the running sequences and the
        prefills `plan` continues (planned before admission)."""
        if self.new_token_ratio is None:
            return None
        return ReservedTokens(self.block_manager, self.running, list(plan.prefills),
                              self.new_token_ratio.current, self._caching)

    def _swap_in(self, plan: StepPlan, seq: Sequence, budget: int | None) -> int:
        """Readmit a sequence whose KV is computed (swapped out, or transferred from the engine
        that prefilled it), at the head of its queue (the caller takes it off): blocks for its
        computed tokens and this step's, a swapped-out one's KV copied back from the swap space,
        and it decodes (or goes on with its prefill) in this step. Returns the tokens it
        computes; 0 when it does not fit (then nothing changes)."""
        bm = self.block_manager
        left = seq.num_tokens - seq.num_computed_tokens
        n = 1 if left == 1 else self.first_chunk(left, budget)
        # blocks it holds already (reserved while its KV came in) are not asked for again
        if not n or not has_free_capacity(bm, bm.blocks_to_hold(seq.seq_id,
                                                               seq.num_computed_tokens + n)):
            return 0
        host = ()
        if seq.status is _SWAPPED:  # its blocks were registered where they were filled first
            host = self.swap.swap_in(seq.seq_id)
            seq.filled_from = seq.num_computed_tokens // bm.block_size
        admit_sequence(seq, bm, seq.num_computed_tokens + n)
        plan.swap_in += zip(host, bm.block_tables[seq.seq_id])
        plan.swapped_in.append(seq)
        self._insert_running(seq)
        if left == 1:  # its last token's KV is all it lacks: a decode, as for the running
            plan.decodes.append(seq)
        else:
            self._prefill(plan, seq, n)
        return n

    def _cached_prefix(self, seq: Sequence) -> list:
        """The cached blocks of the sequence's longest cached prefix. The last token is always
        computed (its logits sample the next token), so a full hit stops a block short."""
        bm = self.block_manager
        most = (seq.num_tokens - 1) // bm.block_size
        hashes = block_hashes(seq, bm.block_size, most)
        return bm.match_prefix(hashes, most) if hashes else []

    def first_chunk(self, n_tokens: int, budget: int | None) -> int:
        """Tokens to prefill in the admission step; 0: wait for a step with more budget. A
        sequence prefills at most one data-parallel rank's budget in a step."""
        cfg = self.config
        if budget is not None and cfg.data_parallel_size > 1:
            budget = min(budget, cfg.max_num_batched_tokens)
        if budget is None or n_tokens <= budget:
            return n_tokens
        # Prompts longer than the budget were rejected unless chunked prefill is on; a
        # recomputation longer than the whole budget is always split, or it could never run.
        if cfg.chunked_prefill or n_tokens > cfg.max_num_batched_tokens:
            return budget if cfg.enable_mixed_chunk else \
                unmixed_cut(n_tokens, budget, budget >= cfg.max_num_batched_tokens)
        return 0

    def _insert_running(self, seq: Sequence) -> None:
        if self.running_key is None:
            self.running.append(seq)  # admission order is victim order
        else:
            bisect.insort(self.running, seq, key=self.running_key)
        self.running_added(seq)
