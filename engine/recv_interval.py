"""SGLang's receive interval (`--scheduler-recv-interval`; the scheduler key
`scheduler_recv_interval`): its scheduler reads new requests off its socket at the start of a
step only every so often. A step of decodes counts one (one that also preempted too: SGLang
retracts requests from its decode batch, which stays a decode batch); once the count reaches
the interval it reads them (and starts the count over, whether any came or not). After a step
with a prefill (mixed with decodes or not) it reads them at the next, and so it does when
nothing runs (an idle scheduler polls at once). Until read, a request waits outside the queue:
it counts as waiting and is never admitted. With an interval of 1 (SGLang's default) every step
reads them, and the scheduler keeps no such state at all (`Scheduler.recv` is None).

As SGLang's `SchedulerRecvSkipper` counts (its default weights): a decode step 1, any other
step 1,000, so that above 1,000 a step with a prefill is not enough either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OTHER_STEP = 1000  # what a step with a prefill counts (SGLang's default weight)


@dataclass
class RecvInterval:
    """The requests that arrived since the scheduler last read, and what the steps planned since
    then count (one attribute of the scheduler: its instance attributes are kept few,
    docs/sim/speed.md)."""

    interval: int
    inbox: list = field(default_factory=list)
    since: int = 0  # what the steps planned since the last read count

    def due(self, running: bool) -> bool:
        """Whether the step about to be planned reads the inbox: the count has reached the
        interval, or nothing runs."""
        return self.since >= self.interval or not running

    def read(self) -> list:
        """Empty the inbox (its requests, in arrival order) and start the count over."""
        self.since = 0
        inbox, self.inbox = self.inbox, []
        return inbox

    def planned(self, plan) -> None:
        """Count the step just planned: `OTHER_STEP` if it prefills, one if it decodes or only
        preempts (a decode batch that SGLang retracted from), nothing if it is empty (idle)."""
        if plan.prefills:
            self.since += OTHER_STEP
        elif plan.decodes or plan.preempted:
            self.since += 1

    def steps_unread(self) -> int:
        """How many more decode-only steps can follow the one just planned before a step
        reads the inbox (with requests in it; `sim.fastpath` ends a run of decode steps
        there)."""
        return max(self.interval - self.since, 0)

    def after_decodes(self, steps: int) -> None:
        """Count `steps` >= 1 decode-only steps after the one just planned, the inbox empty:
        each step that reads it (of nothing) starts the count over."""
        first = (0 if self.since >= self.interval else self.since) + 1
        self.since = (first + steps - 2) % self.interval + 1
