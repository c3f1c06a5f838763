"""The report's content as blocks (see render.py): what was run, the summary, the charts, the
latency by priority class when priorities differ, and every rejected request with its reason."""

from __future__ import annotations

import numpy as np

from engine.benchmark import latency_percentiles

from .describe import settings_text, what_was_run
from .key_figures import key_rows
from .render import Heading, Image, Paragraph, Table

MAX_REJECTED_LISTED = 100  # per run; requests.csv has them all, with the reason


def report_blocks(scenario, specs, summaries, requests, charts: list[Image]) -> list:
    """`requests`: the requests table (reports.tables.requests_table)."""
    blocks = [Heading(1, f"servesim report: {scenario.name}")]
    if scenario.description:
        blocks.append(Paragraph(scenario.description))
    blocks += [Heading(2, "What was run"),
               Table(["setting", "value"], what_was_run(scenario, len(specs)))]
    if len(scenario.variants) > 1 or scenario.variants[0].set:
        rows = [[v.name, settings_text(v.set)] for v in scenario.variants]
        blocks += [Heading(3, "Variants"), Table(["variant", "settings"], rows)]
    if scenario.sweep:
        rows = [[f"`{key}`", ", ".join(map(str, values))] for key, values in scenario.sweep.items()]
        blocks += [Heading(3, "Sweep (crossed with every variant)"),
                   Table(["key", "values"], rows)]
    header, rows = key_rows(specs, summaries)
    blocks += [Heading(2, "Summary"), Table(header, rows),
               Paragraph("Latencies in milliseconds. Every figure (mean, p50, p90, p95, p99 and "
                         "max of TTFT, TPOT, ITL, E2E and queueing, goodput, batch size, KV use) "
                         "is in `summary.csv`; `summary.json` has them under vLLM "
                         "`bench serve` names; per-request rows are in `requests.csv` and "
                         "per-step rows in `steps.csv`.")]
    blocks += [Heading(2, "Charts")]
    for image in charts:
        blocks += [Heading(3, image.alt), image]
    blocks += priority_blocks(requests)
    blocks += rejected_blocks(requests)
    return blocks


def priority_blocks(requests) -> list:
    """TTFT and E2E by priority class, when the workload has more than one."""
    if requests["priority"].nunique() < 2:
        return []
    keys = [c for c in requests.columns[: list(requests.columns).index("request_id")]]
    rows = []
    for labels, group in requests.groupby(keys + ["priority"], sort=False, dropna=False):
        done = group[group["status"] == "finished"]
        row = [str(v) for v in labels] + [str(len(group)), str(len(done))]
        for column in ("ttft_s", "e2e_s"):
            pct = latency_percentiles(done[column].to_numpy(dtype=np.float64), (50, 99))
            row += [_ms(pct[50]), _ms(pct[99])]
        rows.append(row)
    header = keys + ["priority", "requests", "finished", "TTFT p50 ms", "TTFT p99 ms",
                     "E2E p50 ms", "E2E p99 ms"]
    return [Heading(2, "By priority (lower value first)"), Table(header, rows)]


def _ms(value_s: float) -> str:
    return "n/a" if np.isnan(value_s) else f"{1e3 * value_s:.1f}"


def rejected_blocks(requests) -> list:
    rejected = requests[requests["status"] == "rejected"]
    blocks = [Heading(2, "Rejected requests")]
    if rejected.empty:
        return blocks + [Paragraph("None: every request could be served.")]
    keys = list(requests.columns[: list(requests.columns).index("request_id")])
    for labels, group in rejected.groupby(keys, sort=False, dropna=False):
        labels = labels if isinstance(labels, tuple) else (labels,)
        name = ", ".join(str(v) for v in labels)
        shown = group.head(MAX_REJECTED_LISTED)
        rows = [[str(r.request_id), str(r.prompt_tokens), r.reject_reason]
                for r in shown.itertuples()]
        note = (f"{len(group)} rejected; the first {len(shown)} are listed (all of them are in "
                f"`requests.csv`, status `rejected`, with `reject_reason`)."
                if len(group) > len(shown) else f"{len(group)} rejected.")
        blocks += [Heading(3, name), Paragraph(note),
                   Table(["request", "prompt tokens", "reason"], rows)]
    return blocks
