"""Validation: the simulator against the real engine on the same requests.

- `validate.py`: `validate(scenario, out_dir)`: serve, simulate, compare, write the files;
- `serve.py`: a config served in real time with every step's shape logged;
- `steps.py`: the step-level table (each served step with its prediction);
- `table.py`: the percentile error table (`validation.csv`).
"""

from .validate import Validation, ValidationRun, validate

__all__ = ["Validation", "ValidationRun", "validate"]
