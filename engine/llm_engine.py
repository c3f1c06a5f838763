"""The one engine loop: schedule, execute, postprocess, record.

`LLMEngine.step(now_s)` runs one iteration of whatever policy the scheduler has and records it.
The server, the part 6 continuous-batching functions and the benchmark harness all step through
here, so the order of those four calls and the way a step is timed exist once.

Step time: with `timing="wall"` (real execution) the step lasts what `time.perf_counter()`
measures around the whole iteration, scheduling and postprocessing included, because that is
what a client waits for. With `timing="executor"` (a cost model on a simulated clock) it lasts
the executor's predicted `duration_s`. A discrete-event loop calls the two halves of a step,
`start_step` and `finish_step`, with its clock advanced between them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .records import RunRecorder
from .scheduler import Scheduler
from .sequence import Sequence
from .step_plan import StepPlan

TIMINGS = ("wall", "executor")


@dataclass(frozen=True)
class StepOutput:
    """One engine iteration: its plan, the tokens sampled (seq_id -> id; None in simulation),
    the sequences that finished, its start and end on the run's clock, and the sequences whose
    sampling failed (seq_id -> exception; each was aborted, see `LLMEngine.step`)."""

    plan: StepPlan
    tokens: dict | None
    finished: list
    start_s: float
    end_s: float
    failed: dict = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        """The step executed (its sequences may all have failed, leaving its plan empty)."""
        return not self.plan.is_empty or bool(self.failed)


class LLMEngine:
    """A scheduler and an executor, driven one step at a time, optionally into a recorder."""

    def __init__(self, scheduler: Scheduler, executor, recorder: RunRecorder | None = None, *,
                 timing: str = "wall"):
        if timing not in TIMINGS:
            raise ValueError(f"timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
        self.scheduler = scheduler
        self.executor = executor
        self.recorder = recorder
        if recorder is not None:  # for the block hit rate of prefix caching
            recorder.block_size = scheduler.block_manager.block_size
        self._wall = timing == "wall"

    def add_request(self, seq: Sequence) -> bool:
        """Queue a request; a rejected one is recorded at once. False when rejected."""
        accepted = self.scheduler.add(seq)
        if not accepted and self.recorder is not None:
            self.recorder.record_request(seq)
        return accepted

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def abort_request(self, seq: Sequence) -> None:
        """Cancel a queued or running request between steps (`Scheduler.abort`): its KV blocks
        are freed at once. It is not recorded: a cancelled request has no outcome to report."""
        self.scheduler.abort(seq)

    def step(self, now_s: float = 0.0) -> StepOutput:
        """Plan, execute and apply one step that starts at `now_s` on the run's clock. An empty
        plan (nothing runnable: idle, or a static batch waiting for its timeout) executes
        nothing and takes no time; its `plan.idle_until_s` says when to try again. A sequence
        whose sampling raised leaves the step aborted (`_drop_failed`); the rest is applied."""
        wall_start = time.perf_counter()
        plan, result = self.start_step(now_s)
        if result is None:
            return StepOutput(plan, None, [], now_s, now_s)
        failed = self._drop_failed(plan, result)
        finished = self.scheduler.postprocess(plan, result.tokens)
        end_s = now_s + (time.perf_counter() - wall_start if self._wall else result.duration_s)
        self._record(plan, finished, now_s, end_s)
        return StepOutput(plan, result.tokens, finished, now_s, end_s, failed)

    def start_step(self, now_s: float):
        """First half of a step, for loops whose clock must advance between the halves (a
        discrete-event simulation): plan and execute. Returns (plan, result); result is None
        when the plan is empty. When the executor raises, the blocks the step's prefills
        registered in the prefix cache are forgotten before the exception goes on."""
        plan = self.scheduler.schedule(now_s)
        if plan.is_empty:
            return plan, None
        try:
            return plan, self.executor.execute(plan)
        except BaseException:  # their KV may be unwritten: no later prompt may find them
            self.scheduler.forget_planned(plan)
            raise

    def finish_step(self, plan: StepPlan, result, start_s: float, end_s: float) -> list[Sequence]:
        """Second half: apply the step's tokens, record it; returns the finished sequences."""
        self._drop_failed(plan, result)
        finished = self.scheduler.postprocess(plan, result.tokens)
        self._record(plan, finished, start_s, end_s)
        return finished

    def _drop_failed(self, plan: StepPlan, result) -> dict:
        """Take the sequences whose sampling raised (`StepResult.failed`; an executor that
        samples nothing, a cost model, has no such field) out of the step before it is applied:
        each is aborted (its KV blocks freed, finish_reason "error"), so one request's failure
        is its own. Returns them as {seq_id: exception}. A run that records its requests cannot
        lose one: with a recorder the first failure raises instead."""
        failed = getattr(result, "failed", None)
        if not failed:
            return {}
        if self.recorder is not None:
            raise next(iter(failed.values()))
        dropped = [seq for seq, _ in plan.prefills if seq.seq_id in failed] + \
            [seq for seq in plan.decodes if seq.seq_id in failed]
        plan.prefills = [(seq, n) for seq, n in plan.prefills if seq.seq_id not in failed]
        plan.decodes = [seq for seq in plan.decodes if seq.seq_id not in failed]
        for seq in dropped:
            self.scheduler.abort(seq)
            seq.finish_reason = "error"
        return failed

    def _record(self, plan: StepPlan, finished: list, start_s: float, end_s: float) -> None:
        if self.recorder is not None:
            self.recorder.record_step(plan, start_s, end_s)
            for seq in finished:
                self.recorder.record_request(seq)

    def unfinished_sequences(self) -> list[Sequence]:
        """Every sequence still running or waiting (queue order after the running ones, then
        those not yet read: a receive interval)."""
        scheduler = self.scheduler
        scheduler.sync()
        unread = scheduler.recv.inbox if scheduler.recv is not None else []
        return list(scheduler.running) + list(scheduler.waiting) + list(unread)

    def record_unfinished(self) -> list[Sequence]:
        """At a time limit: record every sequence still queued or running as "unfinished"."""
        left = self.unfinished_sequences()
        if self.recorder is not None:
            for seq in left:
                self.recorder.record_request(seq, "unfinished")
        return left
