"""Validation: the simulator against the real engine on the same requests.

- `validate.py`: `validate(scenario, out_dir)`: serve, simulate, compare, write the files;
- `result.py`: what it found (`Validation`, a `ValidationRun` a run), its tables and headline;
- `against.py`: `validate --against URL`: the simulation against a bench of a running server;
- `machine.py`: which profile a validation may use (one measured on this machine);
- `runs.py`: which runs can be compared, each with its profile, refused up front otherwise;
- `steps.py`: the step-level table (each served step with its prediction);
- `table.py`: the percentile error table (`validation.csv`).
"""

from .result import Validation, ValidationRun
from .validate import validate

__all__ = ["Validation", "ValidationRun", "validate"]
