"""When steady decoders are due: the bookkeeping of `SteadyScheduler` (`steady.py`) that notes,
for each sequence it counts in bulk, the step in which it next needs a KV block, the step whose
decode fills its last block (prefix caching) and the step of its last token, and brings a
sequence up to date there. A mixin: it reads the scheduler's `since`, `block_due`,
`finish_due`, `finish_steps`, `fill_due`, `fills_running`, `fills_swapped`, `position`,
`block_manager`, `block_size` and `_caching`.
"""

from __future__ import annotations

import heapq

from engine.block_hashes import own_keys
from engine.sequence import SequenceStatus

_RUNNING = SequenceStatus.RUNNING


class DueSteps:
    """The steps at which steady decoders are due (a mixin of `SteadyScheduler`)."""

    def _filled(self, k: int) -> list:
        """(sequence, block index) of every block step k's decodes filled, in plan order (for
        prefix caching; after `_apply`)."""
        fills, self.fills_running = self.fills_running, []
        due = self.fill_due.pop(k, None)
        if due:
            tables = self.block_manager.block_tables
            fills += [(seq, len(tables[seq.seq_id]) - 1) for seq in due.values()
                      if seq.status is _RUNNING]  # the last block: the next row needs a new one
            if len(fills) > 1:
                position = self.position
                fills.sort(key=lambda fill: position(fill[0]))
        if self.fills_swapped:
            fills += self.fills_swapped
            self.fills_swapped = []
        return fills

    def _finishing(self, k: int) -> list:
        """The steady sequences whose last token step k emits, counted up to date."""
        due = self.finish_due.pop(k, None)
        if not due:
            return []
        ended, since = [], self.since
        for seq in due.values():
            s = since.pop(seq.seq_id, None)
            if s is None:
                continue
            advance(seq, k - s, s)
            seq.num_computed_tokens += 1
            seq.num_output_tokens += 1
            seq.last_token_step = k
            assert seq.should_stop(None), "a steady sequence must end by length"
            ended.append(seq)
        return ended

    def _steady_from(self, seq, s: int) -> None:
        """Count the sequence in bulk from step s on (its counts are up to date before s)."""
        self.since[seq.seq_id] = s
        last = self._last_step(seq)
        self._due(self.finish_due, last, seq, last)
        heapq.heappush(self.finish_steps, last)
        self._blocks_due(seq, s, last)

    def _blocks_due(self, seq, s: int, last: int) -> None:
        """Note the step from s on in which a steady sequence (counts up to date before s) next
        needs a block and, with prefix caching, the one before, whose decode fills its last."""
        row = seq.prompt_len + seq.num_output_tokens - 1  # the KV row step s writes
        capacity = len(self.block_manager.block_tables[seq.seq_id]) * self.block_size
        self._due(self.block_due, s + capacity - row, seq, last)
        if self._caching and capacity > row:  # else step s - 1 filled its last block
            self._fill_due(seq, s + capacity - row - 1, last)

    def _fill_due(self, seq, step: int, last: int) -> None:
        """Note the step whose decode fills the sequence's last block, if its hash is known."""
        hashes = seq.block_hashes  # a request's own keys are cached when preempted
        if hashes and not own_keys(hashes) and \
                len(self.block_manager.block_tables[seq.seq_id]) <= len(hashes):
            self._due(self.fill_due, step, seq, last)

    def _last_step(self, seq) -> int:
        """The step of a steady sequence's last token."""
        return self.since[seq.seq_id] + seq.max_new_tokens - seq.num_output_tokens - 1

    @staticmethod
    def _due(table: dict, step: int, seq, last: int) -> None:
        if step <= last:
            bucket = table.get(step)
            if bucket is None:
                table[step] = {seq.seq_id: seq}
            else:
                bucket[seq.seq_id] = seq


def advance(seq, steps: int, since: int) -> None:
    """`steps` more decodes of a sequence steady since step `since`, one token each."""
    if steps:
        seq.num_computed_tokens += steps
        seq.num_output_tokens += steps
        seq.last_token_step = since + steps - 1
