"""One engine of the simulation (`Replica`): its scheduler, the event it sleeps on while idle,
and, under async scheduling, the requests it holds until its engine has planned its next step
(`sim.loop` says why). Each of a cluster's replicas is one (`sim.cluster`)."""

from __future__ import annotations

from engine.llm_engine import LLMEngine


# what a replica holds until its engine has planned its next step (async scheduling): a new
# request, a transferred one (its KV still at its prefill replica), one whose KV has come in
NEW, TRANSFERRED, LANDED = "new", "transferred", "landed"


class Replica:
    """One engine of the simulation and the event it waits on while idle. `kv_log`: where a
    cluster's engine reports its KV use (`sim.cluster.load.LoadLog`); None on a single
    server."""

    def __init__(self, engine: LLMEngine, index: int = 0, kv_log=None):
        self.engine = engine
        self.scheduler = engine.scheduler
        self.index = index
        self.kv_log = kv_log
        self.wakeup = None  # the event an idle engine waits on
        # async scheduling (`sim.loop`'s docstring): (request, NEW, TRANSFERRED or LANDED) for each
        # that reached the replica since its engine last planned a step, queued once it has
        # planned the next
        self.plans_ahead = getattr(engine.executor, "async_scheduling", False)
        self.held: list = []

    def wake(self) -> None:
        if self.wakeup is not None and not self.wakeup.triggered:
            self.wakeup.succeed()

    def queue_held(self, retire) -> bool:
        """Queue the held requests at the engine (a rejected one is recorded, and `retire(seq)`
        called: `SimState.retire`); True when any was queued."""
        held, self.held = self.held, []
        queued = False
        for seq, kind in held:
            if kind is TRANSFERRED:
                self.scheduler.add_transferred(seq)
                queued = True
            elif kind is LANDED:
                self.scheduler.kv_landed(seq)
                queued = True
            elif self.engine.add_request(seq):
                queued = True
            else:
                retire(seq)
        return queued

    def receive(self, seq) -> None:
        """Queue a request a prefill replica computed (disaggregation), its KV still there:
        at once, or with async scheduling once the engine has planned its next step."""
        self._hear(seq, TRANSFERRED, self.scheduler.add_transferred)

    def landed(self, seq) -> None:
        """The KV of a request whose blocks this replica reserved has come in."""
        self._hear(seq, LANDED, self.scheduler.kv_landed)

    def _hear(self, seq, kind, now) -> None:
        if self.plans_ahead:
            self.held.append((seq, kind))
        else:
            now(seq)
        self.wake()
