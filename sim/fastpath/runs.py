"""Runs of decode-only steps taken in one go by the simulation loop, on the engine's objects.

`start_run(engine, plan, end_s, until_s)`: after `LLMEngine.start_step` gave `plan` (a step that
ends at `end_s`, not yet finished), the decode steps that repeat it (`decode_run.plan_run`), as
many as start before `until_s` (when something could arrive), timed by the executor's
`execute_run`. `finish_run(engine, timed)`: apply them (`decode_run.apply_run`) and record them
as the engine records its steps, one row a step (`RunRecorder.record_steps`). The records are
the ones the step-by-step loop writes, to the bit (`tests/test_decode_runs.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.llm_engine import LLMEngine
from engine.sequence import Sequence
from engine.step_plan import StepPlan

from .decode_run import DecodeRun, apply_run, plan_run


@dataclass(frozen=True)
class TimedRun:
    """The decode steps after a decode-only step with their times on the run's clock: step j
    starts at `start_s[j]` and ends at `end_s[j]` (the next one's start)."""

    run: DecodeRun
    start_s: np.ndarray  # [K]
    end_s: np.ndarray  # [K]

    @property
    def num_steps(self) -> int:
        return len(self.end_s)


def start_run(engine: LLMEngine, plan: StepPlan, end_s: float, until_s: float,
              through_finishes: bool = True) -> TimedRun | None:
    """The timed run after `plan`, or None when there is none or the executor cannot predict
    one (a real executor runs every step: it has no `execute_run`). `through_finishes`: see
    `plan_run`."""
    execute_run = getattr(engine.executor, "execute_run", None)
    if execute_run is None or not end_s < until_s:
        return None
    run = plan_run(engine.scheduler, plan, through_finishes)
    if run is None:
        return None
    ends = execute_run(run, end_s, until_s)  # [K]
    if not len(ends):
        return None
    return TimedRun(run, np.concatenate(([end_s], ends[:-1])), ends)


def finish_run(engine: LLMEngine, timed: TimedRun) -> list[Sequence]:
    """Apply and record the steps of `timed`, after its plan's own `finish_step`; returns the
    sequences that finished in them, in the order they did."""
    run, steps = timed.run, timed.num_steps
    kv_used, kv_cached, finished = apply_run(engine.scheduler, run, steps)
    recorder = engine.recorder
    if recorder is not None:
        decoding = run.decoding(np.arange(1, steps + 1)) \
            if run.first_finish < steps else len(run.members)  # [steps], or the same in all
        plan = run.plan  # each repeat: its decodes only, plan's queue, nothing admitted
        recorder.record_steps(plan.step + 1, timed.start_s, timed.end_s, {
            "num_prefill_tokens": 0, "num_prefill_seqs": 0, "num_decode_seqs": decoding,
            "num_padding_seqs": run.padding(decoding), "num_running": decoding,
            "num_waiting": plan.num_waiting, "kv_blocks_used": kv_used, "preemptions": 0,
            "cached_tokens": 0, "kv_blocks_cached": kv_cached}, decoding)
        for seq in finished:
            recorder.record_request(seq)
    return finished
