"""steps.csv: one row per engine step of every run, written straight from the recorders.

An hour of production traffic replayed at its real rate is a few hundred thousand steps. Going
through a DataFrame and `to_csv` costs seconds there; here each run's row is one `%` format
whose constant part (the run's variant and sweep values, quoted as the csv module quotes them)
is written in once, so a row costs one C-level format call. The text is what `to_csv` writes
(floats with 9 significant digits, integers as integers).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .tables import STEP_COLUMNS, label_values

STEP_FORMATS = {"start_s": "%.9g", "end_s": "%.9g"}  # the rest are integers


def steps_csv_text(results, keys: list[str]) -> str:
    """`results`: [(RunSpec, RunRecorder)]; `keys`: the run columns (`tables.run_keys`)."""
    parts = [_csv_line(keys + list(STEP_COLUMNS))]
    for spec, recorder in results:
        columns = recorder.step_columns()
        total = columns.pop("kv_blocks_total")
        prefix = _csv_line(label_values(spec, keys))[:-1].replace("%", "%%")
        row = ",".join([prefix] + [f"{total}" if name == "kv_blocks_total" else
                                   STEP_FORMATS.get(name, "%d") for name in STEP_COLUMNS])
        names = [name for name in STEP_COLUMNS if name != "kv_blocks_total"]
        parts.append("".join(map((row + "\n").__mod__, zip(*(columns[n] for n in names)))))
    return "".join(parts)


def write_steps_csv(results, keys: list[str], path: Path) -> Path:
    path.write_text(steps_csv_text(results, keys))
    return path


def _csv_line(values) -> str:
    """One CSV line (quoted as needed), with its newline; floats as the writer formats them."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(
        [f"{v:.9g}" if isinstance(v, float) else v for v in values])
    return buffer.getvalue()
