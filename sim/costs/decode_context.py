"""`DecodeContext`: the sum and the maximum of the decoding sequences' context lengths, and the sum
of their lengths in KV blocks, kept as running totals so that a simulated step costs O(number of
prefill chunks), not O(batch).

A sequence decodes in every step from the one after its prefill completes until its last token
or its preemption, and its context grows by one token a step, so the total at step k is
sum over members of (context at joining - step at joining) + k * members, and the longest
context is the largest such offset + k (a heap of offsets, stale entries dropped lazily). A
member's length in blocks, ceil((offset + k) / block_size), grows by one in the steps where
offset + k - 1 is a multiple of the block size, so the block total grows by the number of
members whose offset has that residue (a count per residue).
Members join in the step after a prefill chunk that completes their sequence (or stops one token
short of it: a decode then computes the last prompt token), or in the step that swaps them back
in from host memory (swap preemption) or admits them with their KV computed by another engine
(prefill/decode disaggregation) with nothing left to prefill; they leave at the step of their
last token (known when they join: simulated sequences stop by length only), when a plan
preempts them, or after their first token on a prefill-only engine. A run of decode-only
plans (`engine.decode_run`) is predicted from the members' offsets (`offset`) and passed over
with `skip`. Where a running sequence may sit out a step (a scheduler without mixed chunks runs
prefills alone: `incremental=False`), every plan is counted directly instead.
"""

from __future__ import annotations

import heapq

from engine.sequence import SequenceStatus


class DecodeContext:
    """Running sum and maximum of the context lengths (num_tokens) of the sequences a plan
    decodes; `max_context` is the maximum after the last `update` (0 without decodes) and
    `blocks` the sum of the lengths in blocks of `block_size` tokens. `incremental`: False
    counts every plan directly (O(batch)), for schedulers whose running sequences may sit out
    a step."""

    def __init__(self, block_size: int = 16, incremental: bool = True):
        self.block_size = block_size
        self.incremental = incremental
        self._residues = [0] * block_size  # members by offset % block_size
        self.blocks = 0  # sum over members of ceil(context / block_size), at the last plan
        self._members: dict[int, tuple[int, int]] = {}  # seq_id -> (offset, last decode step)
        self._offsets = 0  # sum of members' offsets (context at joining - step at joining)
        self._joining: list = []  # sequences whose prefill ended in the previous plan
        self._previous = None  # that plan (a prefill-only engine lists who left in it)
        self._leaving: dict[int, list[int]] = {}  # step -> seq_ids whose last decode it is
        self._step: int | None = None  # the previous plan's step
        self._heap: list[tuple[int, int]] = []  # (-offset, seq_id), possibly stale
        self.max_context = 0

    def update(self, plan) -> int:
        """Advance to `plan` and return its decode context sum. Plans from one scheduler, in step
        order, cost O(changes); the first plan, or one that does not follow the previous, is
        counted directly (O(batch)), and so is every plan unless `incremental`."""
        k = plan.step
        if self._step is None or k != self._step + 1 or not self.incremental:
            self._restart(plan)
        else:
            self._step = k
            self.blocks += self._residues[(1 - k) % self.block_size]  # members one step on
            self._advance(plan)
        self._joining = [seq for seq, n in plan.prefills if _decodes_next(seq, n)]
        self._previous = plan
        assert len(self._members) == len(plan.decodes), "decode set out of step with the plan"
        self.max_context = self._max_offset() + k if self._members else 0
        return self._offsets + k * len(self._members)

    def contexts(self, seqs) -> list[int]:
        """The context lengths of `seqs`, members all, at the last plan's step (their own counts
        may lag: the scheduler may advance steady decoders in bulk)."""
        members, k = self._members, self._step
        return [members[seq.seq_id][0] + k for seq in seqs]

    def offset(self, seq):
        """A sequence's context at step k is its offset + k: a member's, or, for one that joins
        after the last plan (its prefill completed in it), from its counts before that plan is
        postprocessed."""
        member = self._members.get(seq.seq_id)
        return seq.num_tokens - self._step if member is None else member[0]

    def skip(self, steps: int) -> None:
        """Advance past `steps` decode-only plans after the last one (`engine.decode_run`):
        who joins after it joins, members leave after their last step. Call right after
        `update` of that plan, before the plan is postprocessed."""
        if not steps:
            return  # the next `update` takes the joiners in
        k = self._step
        for seq in self._joining:  # counts before the plan: join at k + 1 with one more token
            self._add(seq.seq_id, seq.num_tokens - k, k + seq.max_new_tokens
                      - seq.num_output_tokens - 1)
        for step in range(k, k + steps):
            for seq_id in self._leaving.pop(step, ()):
                member = self._members.get(seq_id)
                if member is not None and member[1] == step:
                    self._drop(seq_id)
        self._step += steps
        self._joining = []
        self._recount_blocks()

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
        left = self._previous.handed_off  # disaggregation: gone to decode elsewhere
        for seq in (*plan.preempted, *left):
            if seq.seq_id in self._members:
                self._drop(seq.seq_id)
        for seq in self._joining:
            if seq.status is SequenceStatus.RUNNING and not seq.is_prefilling and \
                    seq not in left:
                self._join(seq, k)
        for seq in plan.swapped_in:  # back from swap space: decoding at once, unless prefilling
            if not seq.is_prefilling:
                self._join(seq, k)

    def _restart(self, plan) -> None:
        # Reads the decoding sequences' own counts: only for the first plan of a run (plans of
        # one scheduler follow each other, and a run of them is passed over with `skip`), where
        # no count lags yet (`engine.steady`).
        self._members.clear()
        self._leaving.clear()
        self._offsets = 0
        self._heap.clear()
        self._step = plan.step
        self._recount_blocks()
        for seq in plan.decodes:
            self._join(seq, plan.step)

    def _recount_blocks(self) -> None:
        """The block total and residue counts of the members at `_step`, counted directly."""
        bs, k = self.block_size, self._step
        self._residues = residues = [0] * bs
        total = 0
        for offset, _ in self._members.values():
            residues[offset % bs] += 1
            total -= (offset + k) // -bs
        self.blocks = total

    def _join(self, seq, k: int) -> None:
        self._add(seq.seq_id, seq.num_tokens - k, k + seq.max_new_tokens - seq.num_output_tokens - 1)

    def _add(self, seq_id: int, offset: int, last: int) -> None:
        self._members[seq_id] = (offset, last)
        self._offsets += offset
        self._leaving.setdefault(last, []).append(seq_id)
        heapq.heappush(self._heap, (-offset, seq_id))
        bs = self.block_size
        self._residues[offset % bs] += 1
        self.blocks -= (offset + self._step) // -bs

    def _drop(self, seq_id: int) -> None:
        offset, _ = self._members.pop(seq_id)
        self._offsets -= offset
        bs = self.block_size
        self._residues[offset % bs] -= 1
        self.blocks += (offset + self._step) // -bs


def _decodes_next(seq, n: int) -> bool:
    """Whether a prefill chunk of n tokens leaves the sequence decoding in the next step: it
    completes the sequence and samples a token that is not its last, or it stops one token short
    (the last prompt token is then computed by a decode)."""
    left = seq.num_tokens - seq.num_computed_tokens - n
    return left == 1 or (left == 0 and seq.num_output_tokens + 1 < seq.max_new_tokens)
