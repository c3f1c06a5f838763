"""steps.csv: one row per engine step of every run, written straight from the recorders.

An hour of production traffic replayed at its real rate is a few hundred thousand steps. Going
through a DataFrame and `to_csv` costs seconds there; here each run's row is one `%` format
whose constant part (the run's variant and sweep values, quoted as the csv module quotes them)
is written in once, so a row costs one C-level format call. A cluster's run writes each
replica's rows in turn, its `replica` among the constant part. The text is what `to_csv` writes
(floats with 9 significant digits, integers as integers).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from engine.cluster_records import ClusterRecorder

from .tables import STEP_COLUMNS, label_values

STEP_FORMATS = {"start_s": "%.9g", "end_s": "%.9g"}  # the rest are integers


def steps_csv_text(results, keys: list[str]) -> str:
    """`results`: [(RunSpec, RunRecorder or ClusterRecorder)]; `keys`: the run columns
    (`tables.run_keys`). With a cluster's run among them, a `replica` column follows the run
    columns (empty for a single engine's rows)."""
    clustered = any(isinstance(recorder, ClusterRecorder) for _, recorder in results)
    parts = [_csv_line(keys + ["replica"] * clustered + list(STEP_COLUMNS))]
    for spec, recorder in results:
        labels = label_values(spec, keys)
        if not isinstance(recorder, ClusterRecorder):
            parts.append(_rows(labels + [""] * clustered, recorder.step_columns()))
            continue
        t0 = recorder.origin_s()
        for index, replica in enumerate(recorder.replicas):
            parts.append(_rows(labels + [index], replica.step_columns(t0)))
    return "".join(parts)


def _rows(labels: list, columns: dict) -> str:
    """The rows of one engine's step columns, each after the same `labels`."""
    total = columns.pop("kv_blocks_total")
    prefix = _csv_line(labels)[:-1].replace("%", "%%")
    row = ",".join([prefix] + [f"{total}" if name == "kv_blocks_total" else
                               STEP_FORMATS.get(name, "%d") for name in STEP_COLUMNS])
    names = [name for name in STEP_COLUMNS if name != "kv_blocks_total"]
    return "".join(map((row + "\n").__mod__, zip(*(columns[n] for n in names))))


def write_steps_csv(results, keys: list[str], path: Path) -> Path:
    path.write_text(steps_csv_text(results, keys), encoding="utf-8")
    return path


def _csv_line(values) -> str:
    """One CSV line (quoted as needed), with its newline; floats as the writer formats them."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(
        [f"{v:.9g}" if isinstance(v, float) else v for v in values])
    return buffer.getvalue()
