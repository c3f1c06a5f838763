"""Statistics and text tables of the fidelity benchmark (`fidelity.py`): medians and spreads of
several summaries of the same requests, and one row of errors per scenario."""

from __future__ import annotations

import math

import numpy as np

from sim.validation.table import METRICS, STATS, error_rows, max_abs_error


def median_summary(summaries: list) -> dict:
    """Each float statistic's median over several summaries of the same requests."""
    return {k: float(np.median([s[k] for s in summaries])) for k in summaries[0]
            if isinstance(summaries[0][k], float)}


def spread(summaries: list) -> dict:
    """Each float statistic's spread over summaries of the same requests, 100 (max - min) /
    median (%)."""
    median = median_summary(summaries)
    return {k: _relative(max(s[k] for s in summaries) - min(s[k] for s in summaries), m)
            for k, m in median.items()}


def _relative(width: float, median: float) -> float:
    """100 width / median; 0 when all agree, NaN for a spread around a median of 0."""
    if width == 0:
        return 0.0
    return 100 * width / median if median else math.nan


def as_rows(name: str, reference: dict, values: dict) -> list:
    """`values` ({statistic key: %}) in the layout of error rows."""
    return [dict(row, error_pct=values[f"{row['metric']}_{row['stat']}_s"])
            for row in error_rows(name, reference, reference)]


def table_text(results: list) -> str:
    """One row per scenario: error % of every metric and stat, then max |error| of the
    headline cells (p50/p90/p99 of TTFT, TPOT, E2E)."""
    cols = [(m, s) for m in METRICS for s in STATS]
    header = ["scenario"] + [f"{m} {s}" for m, s in cols] + ["max|err|"]
    lines = []
    for name, rows in results:
        cell = {(r["metric"], r["stat"]): r["error_pct"] for r in rows}
        lines.append([name] + [_pct(cell[c]) for c in cols] + [f"{max_abs_error(rows):.1f}"])
    widths = [max(len(x[i]) for x in [header, *lines]) for i in range(len(header))]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def _pct(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.1f}"


def worst(results: list) -> float:
    """The largest headline |error| over every scenario's rows."""
    return max(max_abs_error(rows) for _, rows in results)


TARGET_PCT = 5.0


def target_verdict(errors: list, spreads: list, stats=("p50", "p90"),
                   metrics=("ttft", "tpot", "e2e")) -> tuple[bool, str]:
    """Whether a scenario meets the fidelity target: every cell (metric x stat) within
    TARGET_PCT of the servings' median where the servings agree within TARGET_PCT, else within
    their spread. (met, the failing cells as text)."""
    spread_of = {(r["metric"], r["stat"]): r["error_pct"] for r in spreads}
    failing = []
    for row in errors:
        cell = (row["metric"], row["stat"])
        if row["metric"] not in metrics or row["stat"] not in stats:
            continue
        allowed = max(TARGET_PCT, spread_of[cell])
        if not abs(row["error_pct"]) <= allowed:  # NaN fails
            failing.append(f"{row['metric']} {row['stat']} {row['error_pct']:+.1f}% "
                           f"(allowed {allowed:.1f}%)")
    return not failing, ", ".join(failing)


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Imported by fidelity.py; run that script "
                    "(`python benchmarks/fidelity.py --help`) for the benchmark.").parse_args()
    print("benchmarks/fidelity_stats.py holds the fidelity benchmark's statistics; run "
          "`python benchmarks/fidelity.py`")
