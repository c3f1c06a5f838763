"""The summary at a glance: the key figures of each run as text, for the terminal and the
report (the full set is in summary.csv). Latencies are shown in milliseconds."""

from __future__ import annotations

import math

from scenarios.sweep import point_text

# (summary key, column title, scale, decimals)
KEY_FIGURES = (
    ("completed", "completed", 1, 0),
    ("rejected", "rejected", 1, 0),
    ("request_throughput", "req/s", 1, 3),
    ("output_throughput", "out tok/s", 1, 1),
    ("ttft_p50_s", "TTFT p50 ms", 1e3, 1),
    ("ttft_p99_s", "TTFT p99 ms", 1e3, 1),
    ("tpot_p50_s", "TPOT p50 ms", 1e3, 1),
    ("tpot_p99_s", "TPOT p99 ms", 1e3, 1),
    ("itl_p50_s", "ITL p50 ms", 1e3, 1),
    ("itl_p99_s", "ITL p99 ms", 1e3, 1),
    ("e2e_p50_s", "E2E p50 ms", 1e3, 1),
    ("e2e_p99_s", "E2E p99 ms", 1e3, 1),
    ("preemptions", "preemptions", 1, 0),
)
# The report's summary table has room for one more: the share of prompt tokens the prefix cache
# served (the terminal's table is already as wide as a terminal).
REPORT_FIGURES = KEY_FIGURES + (("prefix_cache_hit_rate", "prefix cache hit %", 100, 1),)
# Shown after the request rate whenever a run has an SLO: requests/s meeting every SLO.
GOODPUT = ("goodput", "goodput req/s", 1, 3)


def short_key(key: str) -> str:
    """"workload.arrival.rate" -> "rate": a sweep key as a column title."""
    return key.rsplit(".", 1)[-1]


def key_rows(specs, summaries: list[dict],
             figures=KEY_FIGURES) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of strings: variant, the sweep values, then `figures` ((summary key,
    column title, scale, decimals) each), with goodput after the request rate when a run has
    an SLO."""
    if any(has_slo(spec.config) for spec in specs):
        at = [key for key, *_ in figures].index("request_throughput") + 1
        figures = (*figures[:at], GOODPUT, *figures[at:])
    sweep_keys = list(dict.fromkeys(key for spec in specs for key in spec.sweep))
    header = ["variant"] + [short_key(k) for k in sweep_keys] + [t for _, t, _, _ in figures]
    rows = []
    for spec, summary in zip(specs, summaries):
        row = [spec.variant] + [point_text(spec.sweep.get(k, "")) for k in sweep_keys]
        row += [_number(summary[key] * scale, decimals) for key, _, scale, decimals in figures]
        rows.append(row)
    return header, rows


def has_slo(config: dict) -> bool:
    """Whether a run's goodput counts against any SLO."""
    return config.slo.any


def _number(value, decimals: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{decimals}f}"


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Aligned plain text: the first column left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells):
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])])

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])
