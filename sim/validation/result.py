"""What `servesim validate` found: each run served and simulated (`ValidationRun`, with its
error rows and served steps) and the whole scenario's (`Validation`): its tables, each run's
step-level prediction error, and the headline that says whether the two sides finished the
same requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import scenarios
from engine.records import RunRecorder

from .steps import step_error_summary
from .table import max_abs_error, text_table


@dataclass(frozen=True)
class ValidationRun:
    """One run of the scenario served and simulated: both recorders, the error rows and the
    served steps with their predictions."""

    spec: scenarios.RunSpec
    serve: RunRecorder
    simulate: RunRecorder
    errors: list
    steps: list
    speed_ratio: float  # served steps' total measured / total predicted seconds
    normalized_errors: list  # errors of the simulation scaled by speed_ratio
    calibration: float | None = None  # the machine's speed before serving / the profile's

    @property
    def label(self) -> str:
        return self.spec.label


@dataclass(frozen=True)
class Validation:
    scenario: scenarios.Scenario
    runs: tuple
    out_dir: Path | None

    @property
    def rows(self) -> list[dict]:
        """Every run's error rows, in run order (validation.csv's rows)."""
        return [row for run in self.runs for row in run.errors]

    @property
    def normalized_rows(self) -> list[dict]:
        return [row for run in self.runs for row in run.normalized_errors]

    def max_abs_error(self, normalized: bool = False) -> float:
        """Largest |error %| over p50, p90, p99 of TTFT, TPOT and E2E, over every run."""
        return max_abs_error(self.normalized_rows if normalized else self.rows)

    def run_notes(self) -> list[str]:
        """One line per run on its step-level prediction error (and its calibration)."""
        lines = []
        for run in self.runs:
            if run.calibration is not None:
                lines.append(f"{run.label}: calibrated: the reference step took "
                             f"{run.calibration:.2f}x its profiled time just before serving; "
                             f"the simulation's step costs are scaled by that")
            s = step_error_summary(run.steps)
            lines.append(f"{run.label}: {s['steps']} served steps, step-time prediction error "
                         f"median {s['median_error_pct']:+.1f}%, mean {s['mean_error_pct']:+.1f}%"
                         f" (|error| median {s['median_abs_error_pct']:.1f}%); "
                         + (f"served steps took {run.speed_ratio:.2f}x the predicted time in "
                            f"total" if math.isfinite(run.speed_ratio) else
                            "no speed-normalized simulation (no step served, or the cost "
                            "model predicts the served steps take no time)"))
        return lines

    def apart(self) -> tuple[int, int]:
        """(requests that finished served and not simulated, the reverse), over every run."""
        pairs = [finished_apart(run.serve, run.simulate) for run in self.runs]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def finished(self) -> int:
        """Requests that finished served, over every run."""
        return sum(status == "finished" for run in self.runs
                   for status in run.serve.request_columns()["status"])

    def compared(self) -> bool:
        """Whether the figures compare the same requests, and some finished."""
        return self.finished() > 0 and self.apart() == (0, 0)

    def headline(self) -> str:
        if not self.finished():
            return "no request finished when served: nothing to compare (requests.csv of " \
                   "each side says why)"
        served, simulated = self.apart()
        unlike = "" if not served + simulated else \
            (f", but over unlike requests: {simulated} finished in the simulation and not when "
             f"served, {served} the reverse (requests.csv of each side says why)")
        return (f"max |error| over p50/p90/p99 of TTFT, TPOT, E2E: "
                f"{percent_text(self.max_abs_error())} (simulation scaled by the served speed: "
                f"{percent_text(self.max_abs_error(normalized=True))}){unlike}")

    def text(self) -> str:
        """The printed error table, each run's step-level prediction error, the headline and
        where the report is."""
        lines = [text_table(self.rows), "", *self.run_notes(), self.headline()]
        if self.out_dir is not None:
            lines.append(f"report: {self.out_dir / 'report.html'}")
        return "\n".join(lines)


def finished_apart(served, simulated) -> tuple[int, int]:
    """(requests that finished on the server and not in the simulation, the reverse), matched
    by request id: a request both refused (a prompt too long for either) is alike on both."""
    def finished(recorder) -> dict:
        cols = recorder.request_columns()
        return {rid: status == "finished" for rid, status in zip(cols["request_id"],
                                                                  cols["status"])}

    server, simulation = finished(served), finished(simulated)
    ids = server.keys() | simulation.keys()
    return (sum(server.get(i, False) and not simulation.get(i, False) for i in ids),
            sum(simulation.get(i, False) and not server.get(i, False) for i in ids))


def percent_text(value: float) -> str:
    return "n/a" if math.isinf(value) else f"{value:.1f}%"  # (the table says which cell)
