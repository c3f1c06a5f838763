"""Write every output file of a run (docs/reports/files.md) into one directory:
requests.csv, steps.csv, summary.csv, replicas.csv (cluster runs only), each run's vLLM-layout
summary (`summary.json` for one run, `summary-<run>.json` for each of several; vllm_json.py),
the PNG charts, report.md and report.html.

Files are reproducible: CSV floats are written with 9 significant digits, JSON floats rounded
the same way (NaN as null), PNGs carry no date or software stamp, and the vLLM records' `date`
is null unless one is given, so the same scenario and seed give byte-identical files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from .document import report_blocks
from .render import to_html, to_markdown
from .step_csv import write_steps_csv
from .replica_table import replicas_table
from .tables import requests_table, run_keys, run_summaries, summary_table
from .vllm_json import record_date, summary_json_names, vllm_records

FLOAT_FORMAT = "%.9g"
SIGNIFICANT_DIGITS = 9


@dataclass(frozen=True)
class ReportFiles:
    out_dir: Path
    files: tuple[Path, ...]
    summaries: tuple[dict, ...]

    @property
    def html(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def markdown(self) -> Path:
        return self.out_dir / "report.md"


def write_report(scenario, results, out_dir, worker=None, date: str | None = None,
                 remote: str | None = None, percentiles=None) -> ReportFiles:
    """`results`: [(RunSpec, RunRecorder)] of `scenario`; returns the files written. `worker`:
    a `chart_worker.ChartWorker` that draws the charts while the tables are written (else they
    are drawn here, after them). `date`: the vLLM records' `date` (default: from
    SOURCE_DATE_EPOCH, else null). `remote`: the runs benchmarked a server a client cannot see
    the steps of (`sim.bench`): no steps.csv, no timeline, and this text says so in the
    report. `percentiles`: vLLM's --metric-percentiles of --percentile-metrics for the vLLM
    records (`vllm_json.MetricPercentiles`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs = [spec for spec, _ in results]
    summaries = run_summaries(results)
    if worker is not None:
        worker.draw(results, summaries)
    keys = run_keys(results)
    requests = requests_table(results)
    written = [_csv(requests, out_dir / "requests.csv")]
    if remote is None:
        written.append(write_steps_csv(results, keys, out_dir / "steps.csv"))
    written.append(_csv(summary_table(results, summaries), out_dir / "summary.csv"))
    replicas = replicas_table(results, summaries)
    if replicas is not None:
        written.append(_csv(replicas, out_dir / "replicas.csv"))
    records = vllm_records(results, summaries, record_date(date), percentiles)
    for name, record in zip(summary_json_names(specs), records):
        written.append(_json(record, out_dir / name))
    if worker is not None:
        charts = worker.charts()
    else:
        from .charts import make_charts  # matplotlib: imported where charts are drawn

        charts = make_charts(results, summaries, steps=remote is None)
    for image in charts:
        (out_dir / image.filename).write_bytes(image.png)
        written.append(out_dir / image.filename)
    blocks = report_blocks(scenario, specs, summaries, requests, charts, remote,
                           run_notes(results))
    (out_dir / "report.md").write_text(to_markdown(blocks), encoding="utf-8")
    (out_dir / "report.html").write_text(to_html(blocks, f"servesim report: {scenario.name}"),
                                         encoding="utf-8")
    written += [out_dir / "report.md", out_dir / "report.html"]
    return ReportFiles(out_dir, tuple(written), tuple(summaries))


def run_notes(results) -> list[tuple[str, list[str]]]:
    """[(note, the labels of the runs that said it)] of the runs' notes (`sim.notes`: a
    fallback to the roofline, say), in the order first said."""
    said: dict = {}
    for spec, recorder in results:
        for note in recorder.notes:
            said.setdefault(note, []).append(spec.label)
    return list(said.items())


def _csv(frame, path: Path) -> Path:
    frame.to_csv(path, index=False, float_format=FLOAT_FORMAT, lineterminator="\n")
    return path


def _json(data, path: Path) -> Path:
    path.write_text(json.dumps(rounded(data), indent=2) + "\n", encoding="utf-8")
    return path


def rounded(value):
    """JSON-ready copy: floats to 9 significant digits, NaN and infinities to None, numpy
    scalars to Python numbers."""
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # numpy scalar
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}") if math.isfinite(value) else None
    return value
