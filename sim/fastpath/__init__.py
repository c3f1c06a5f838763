"""The simulator's fast paths: the same steps as the engine's, at a cost that does not grow with
the batch. Both apply to simulated sequences only (they stop by length alone) and give the
engine's records, to the bit.

- `steady.py`: `SteadyScheduler`, the engine's scheduler with its decode seams overridden to
  count steady decoders in bulk: a step costs O(sequences that join, need a block or finish);
- `decode_run.py`: runs of decode-only steps whose plans are known in advance (`plan_run`,
  `apply_run`), applied through the scheduler's public methods;
- `runs.py`: `start_run` / `finish_run`, the loop's calls that predict, apply and record a run
  in one go.
"""

from .decode_run import DecodeRun, apply_run, plan_run
from .runs import TimedRun, finish_run, start_run
from .steady import ENGAGE_AT, RELEASE_BELOW, SteadyScheduler

__all__ = ["DecodeRun", "ENGAGE_AT", "RELEASE_BELOW", "SteadyScheduler", "TimedRun",
           "apply_run", "finish_run", "plan_run", "start_run"]
