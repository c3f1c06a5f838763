"""The error table of a validation: each latency statistic of the served run beside the same
statistic of the simulated run, and the simulator's relative error.

    error_pct = 100 * (simulate - serve) / serve

so a positive error means the simulator predicts a slower server than the real one. Every figure
comes from `engine.benchmark.summarize` (the one implementation of the metrics): TTFT, TPOT and
E2E per request, ITL token-weighted over every inter-token gap. A statistic that is undefined in
either run (no request with two output tokens has no TPOT) gives NaN, never 0.
"""

from __future__ import annotations

import csv
import math

METRICS = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
COLUMNS = ("variant", "metric", "stat", "serve", "simulate", "error_pct")
HEADLINE = (("ttft", "tpot", "e2e"), ("p50", "p90", "p99"))  # the fidelity target's cells


def error_pct(serve: float, simulate: float) -> float:
    """100 * (simulate - serve) / serve; NaN when either is NaN or serve is 0."""
    if math.isnan(serve) or math.isnan(simulate) or serve == 0:
        return math.nan
    return 100.0 * (simulate - serve) / serve


def error_rows(variant: str, serve_summary: dict, simulate_summary: dict) -> list[dict]:
    """One row per metric and stat (METRICS x STATS): {variant, metric, stat, serve, simulate,
    error_pct}, latencies in seconds, from two `summarize` results."""
    rows = []
    for metric in METRICS:
        for stat in STATS:
            key = f"{metric}_{stat}_s"
            serve, simulate = float(serve_summary[key]), float(simulate_summary[key])
            rows.append({"variant": variant, "metric": metric, "stat": stat, "serve": serve,
                         "simulate": simulate, "error_pct": error_pct(serve, simulate)})
    return rows


def max_abs_error(rows: list[dict], metrics=HEADLINE[0], stats=HEADLINE[1]) -> float:
    """The largest |error_pct| over the rows of the given metrics and stats. A statistic
    defined on one side only counts as a failure (inf: reported, not skipped); one undefined on
    both (no TPOT where every request generated one token) agrees."""
    worst = 0.0
    for row in rows:
        if math.isnan(row["serve"]) and math.isnan(row["simulate"]):
            continue
        if row["metric"] in metrics and row["stat"] in stats:
            err = abs(row["error_pct"])
            worst = math.inf if math.isnan(err) else max(worst, err)
    return worst


def write_csv(rows: list[dict], path) -> None:
    """validation.csv: COLUMNS, latencies in seconds (9 significant digits), errors in percent."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([row["variant"], row["metric"], row["stat"], _num(row["serve"]),
                             _num(row["simulate"]), _num(row["error_pct"])])


def read_csv(path) -> list[dict]:
    """The rows of a validation.csv, numbers as floats."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: (float(v) if k in ("serve", "simulate", "error_pct") else v)
                 for k, v in row.items()} for row in csv.DictReader(f)]


def _num(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.9g}"


def display_rows(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) as text, for the printed table and the report: latencies in
    milliseconds, errors in percent."""
    header = ["variant", "metric", "stat", "serve ms", "simulate ms", "error %"]
    body = [[r["variant"], r["metric"], r["stat"], _fmt(r["serve"] * 1e3, 2),
             _fmt(r["simulate"] * 1e3, 2), _fmt(r["error_pct"], 1, signed=True)] for r in rows]
    return header, body


def text_table(rows: list[dict]) -> str:
    """The rows as aligned text: latencies in milliseconds, errors in percent."""
    header, body = display_rows(rows)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def _fmt(value: float, decimals: int, signed: bool = False) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:+.{decimals}f}" if signed else f"{value:.{decimals}f}"
