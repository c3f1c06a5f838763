"""Runs side by side: p50 and p99 of TTFT, TPOT, ITL and E2E (ms), output throughput
(tokens/s) and preemptions, one row of bars per run.

The bars are horizontal: the runs' names sit once at the left, however many runs there are
(eight sweep points' names under vertical bars overlap), and each bar's value label has its own
row, so labels never collide. A panel whose values span more than two decades is drawn on a log
axis (`figures.scale_axis`). Beyond `MAX_LABELLED_RUNS` runs the bars are not labelled: the
numbers are in summary.csv.
"""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.ticker import MaxNLocator

from .figures import legend_below, log_note, new_figure, png_bytes, scale_axis

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))
STATS = (("p50", "tab:blue"), ("p99", "tab:red"))
MAX_LABELLED_RUNS = 12
ROW_IN = 0.36  # height of one run's row of bars (inches): room for two labelled bars
LABEL_CHARS = 34  # a run's name is wrapped to lines of this many characters at most
LINE_IN = 0.14  # height of one line of a run's name (inches)


def comparison_chart(labels: list[str], summaries: list[dict],
                     labels_title: str | None = None) -> bytes:
    """One row of bars per run; `summaries` are `engine.benchmark.summarize` dicts; `labels`
    name the runs and `labels_title` says what they are (e.g. the swept value's name)."""
    return png_bytes(comparison_figure(labels, summaries, labels_title))


def comparison_figure(labels: list[str], summaries: list[dict],
                      labels_title: str | None = None):
    """The chart's matplotlib Figure (panels in reading order: TTFT, TPOT, ITL, E2E, output
    throughput, preemptions)."""
    n = len(labels)
    labels = [wrapped(label) for label in labels]
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    panel_in = max(1.9, 0.5 + max(ROW_IN, LINE_IN * lines + 0.08) * n)
    fig, axes = new_figure(2, 3, 11, 1.1 + 2 * panel_in, sharey=True)
    y = np.arange(n)
    height = 0.8 / len(STATS)
    for ax, (metric, name) in zip(axes.flat, LATENCIES):
        values = {stat: np.array([s[f"{metric}_{stat}_s"] * 1e3 for s in summaries])
                  for stat, _ in STATS}
        is_log = scale_axis(ax, "x", np.concatenate(list(values.values())))
        for offset, (stat, color) in zip((-height / 2, height / 2), STATS):
            _bars(ax, y + offset, values[stat], height, color, stat, n)
        _room_for_labels(ax, np.concatenate(list(values.values())), is_log)
        _few_ticks(ax, is_log)
        ax.set_title(f"{name} p50 and p99")
        ax.set_xlabel(f"latency (ms{log_note(is_log)})")
    throughput = np.array([s["output_throughput"] for s in summaries])
    panel = axes[1, 1]
    is_log = scale_axis(panel, "x", throughput)
    _bars(panel, y, throughput, 0.6, "tab:green", None, n)
    _room_for_labels(panel, throughput, is_log)
    _few_ticks(panel, is_log)
    panel.set_title("Output throughput")
    panel.set_xlabel(f"output tokens / s{log_note(is_log)}")
    preemptions = np.array([s["preemptions"] for s in summaries], dtype=np.float64)
    panel = axes[1, 2]
    _bars(panel, y, preemptions, 0.6, "tab:purple", None, n)
    _room_for_labels(panel, preemptions, False)
    panel.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    panel.set_title("Preemptions")
    panel.set_xlabel("preemptions (count)")
    for ax in axes.flat:
        ax.grid(axis="y", visible=False)  # rows are runs: only the value grid helps
    axes[0, 0].set_yticks(y, labels)
    axes[0, 0].set_ylim(n - 0.5, -0.5)  # the first run on top
    if labels_title:
        for ax in axes[:, 0]:
            ax.set_ylabel(labels_title)
    fig.suptitle("Comparison of runs")
    legend_below(fig, *axes[0, 0].get_legend_handles_labels())
    return fig


def wrapped(label: str) -> str:
    """A run's name in lines of at most `LABEL_CHARS` characters (a long name would squeeze
    the panels to slivers), broken after the commas between its parts where it can be, else
    at spaces."""
    lines: list[str] = []
    for part in _parts(str(label)):
        if lines and len(lines[-1]) + 1 + len(part) <= LABEL_CHARS:
            lines[-1] += " " + part
        else:
            lines += textwrap.wrap(part, LABEL_CHARS, break_on_hyphens=False) or [""]
    return "\n".join(lines)


def _parts(label: str) -> list[str]:
    """`label` split after each comma outside braces and brackets, each part keeping its
    comma ("a, b={c = 1, d = 2}" -> ["a,", "b={c = 1, d = 2}"])."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(label):
        depth += (char in "{[") - (char in "}]")
        if char == "," and depth == 0:
            parts.append(label[start:i + 1].strip())
            start = i + 1
    return [*parts, label[start:].strip()]


def _bars(ax, y, values, height, color, label, n: int) -> None:
    """Horizontal bars, labelled with their values when there are few enough runs; an
    undefined value (NaN) draws no bar and is labelled "n/a"."""
    values = np.asarray(values, dtype=np.float64)
    shown = np.where(np.isfinite(values), values, 0.0)
    bars = ax.barh(y, shown, height, color=color, label=label)
    if n <= MAX_LABELLED_RUNS:
        ax.bar_label(bars, labels=[_short(v) for v in values], fontsize=8 if n <= 6 else 7,
                     padding=2)


def _room_for_labels(ax, values, is_log: bool) -> None:
    """Start at zero (linear) or below the smallest bar (log), and leave room to the right of
    the longest bar for its label."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    top = float(finite.max()) if finite.size else 0.0
    if is_log:
        ax.set_xlim(float(finite.min()) / 2, top * 4)
    else:
        ax.set_xlim(0, top * 1.2 if top > 0 else 1.0)


def _few_ticks(ax, is_log: bool) -> None:
    """At most about five value ticks on a linear axis: a third of the figure's width holds
    five labels like "20000" with room between them."""
    if not is_log:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))


def _short(value: float) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
