"""Reports of a run: pandas tables from the recorders (requests, steps, summary), matplotlib
charts (latency CDFs, timeline, comparison, sweep), and report.md / report.html.

    files = reports.write_report(scenario, results, "out/my-run")  # into the folder as is
    print(reports.summary_text(results, files.summaries))

Every metric comes from `engine.benchmark`; see docs/reports/ for each file and chart.
"""

from .chart_worker import ChartWorker
from .document import rejection_text
from .key_figures import KEY_FIGURES, key_rows, text_table
from .tables import requests_table, run_summaries, steps_table, summary_table
from .vllm_json import summary_json_names, vllm_records
from .writer import ReportFiles, write_report


def summary_text(results, summaries=None) -> str:
    """The key figures of every run as an aligned text table (one row per run)."""
    summaries = summaries if summaries is not None else run_summaries(results)
    return text_table(*key_rows([spec for spec, _ in results], summaries))


__all__ = ["KEY_FIGURES", "ChartWorker", "ReportFiles", "key_rows", "rejection_text",
           "requests_table", "run_summaries", "steps_table", "summary_json_names",
           "summary_table", "summary_text", "text_table", "vllm_records", "write_report"]
