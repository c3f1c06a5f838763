"""What a replica reports to the router: its requests outstanding and its KV blocks in use,
kept as step functions of simulated time so the router can read them as they were
`cluster.report_delay_s` ago.

Outstanding requests change when the router sends one (+1) and when one finishes or is
rejected (-1). The KV blocks in use change when a step is planned (its allocations) and when
it ends (the blocks of finished sequences come back), and under disaggregation between steps
(`kv_changed`: a prefill replica's blocks freed once their KV is read, a decode replica's
reserved by a plan that runs nothing). A run of decode steps advanced in one go
(`sim.fastpath.start_run`) is applied only at its end, but an arrival may read a replica in the
middle of it: the run's KV use at each of its steps is logged when it starts, from the blocks
each step allocates (a run in a cluster stops at its first finish, so none come back before
its end). The log then reads the same as the step-by-step simulation's at every instant.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

import numpy as np

from .routers import Load


class LoadLog:
    """One replica's reported load over time (`at(time_s)`)."""

    def __init__(self, kv_blocks_total: int):
        self.kv_blocks_total = kv_blocks_total
        self.outstanding = 0
        self._outstanding_s, self._outstanding = array("d"), array("q")
        self._kv_s, self._kv_used = array("d"), array("q")

    def sent(self, now_s: float) -> None:
        self.outstanding += 1
        self._outstanding_s.append(now_s)
        self._outstanding.append(self.outstanding)

    def done(self, now_s: float) -> None:
        self.outstanding -= 1
        self._outstanding_s.append(now_s)
        self._outstanding.append(self.outstanding)

    def step_started(self, start_s: float, kv_blocks_used: int) -> None:
        self._kv_s.append(start_s)
        self._kv_used.append(kv_blocks_used)

    def step_ended(self, end_s: float, kv_blocks_used: int) -> None:
        self.step_started(end_s, kv_blocks_used)

    def kv_changed(self, now_s: float, kv_blocks_used: int) -> None:
        """KV use that changed between steps (disaggregation: blocks freed once their KV was
        read, or reserved by a plan that runs nothing)."""
        self.step_started(now_s, kv_blocks_used)

    def run_started(self, timed, block_manager) -> None:
        """Log the KV use of each step of `timed` (a `sim.fastpath.start_run` result whose plan
        was just scheduled) at its start: the blocks in use now plus those the run's steps
        allocate up to it (each member one every block_size steps from its `first_block`)."""
        run, steps, size = timed.run, timed.num_steps, block_manager.block_size
        assert run.first_finish >= steps, "a cluster's run stops at its first finish"
        allocated = np.zeros(steps + 1, dtype=np.int64)  # [K + 1] blocks allocated in repeat j
        for first in run.first_block:
            assert first >= 1
            allocated[first:steps + 1:size] += 1
        used = block_manager.num_used + np.cumsum(allocated)[1:]  # [K]
        self._kv_s.extend(timed.start_s.tolist())
        self._kv_used.extend(used.tolist())

    def kv_series(self) -> tuple[np.ndarray, np.ndarray]:
        """(times [n] seconds, KV blocks in use from each [n]): the replica's whole KV use, its
        steps' and what changed between them, for the reports."""
        return np.frombuffer(self._kv_s, dtype=np.float64).copy(), \
            np.frombuffer(self._kv_used, dtype=np.int64).copy()

    def at(self, time_s: float) -> Load:
        """The load as it stood at `time_s` (nothing before the first report)."""
        i = bisect_right(self._outstanding_s, time_s) - 1
        k = bisect_right(self._kv_s, time_s) - 1
        return Load(self._outstanding[i] if i >= 0 else 0,
                    self._kv_used[k] / self.kv_blocks_total if k >= 0 else 0.0)
