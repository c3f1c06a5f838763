"""Runs side by side: p50 and p99 of TTFT, TPOT, ITL and E2E (ms), output throughput
(tokens/s) and preemptions, one bar group per run, each bar labelled with its value."""

from __future__ import annotations

import numpy as np

from matplotlib.ticker import MaxNLocator

from .figures import new_figure, png_bytes

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))


def comparison_chart(labels: list[str], summaries: list[dict]) -> bytes:
    """One bar group per run; `summaries` are `engine.benchmark.summarize` dicts."""
    fig, axes = new_figure(2, 3, 12, 7.5)
    x = np.arange(len(labels))
    width = 0.38
    for ax, (metric, name) in zip(axes.flat, LATENCIES):
        tallest = 0.0
        for offset, stat, color in ((-width / 2, "p50", "tab:blue"), (width / 2, "p99", "tab:red")):
            values = [s[f"{metric}_{stat}_s"] * 1e3 for s in summaries]
            tallest = max(tallest, _bars(ax, x + offset, values, width, color, stat))
        _headroom(ax, tallest)
        ax.set_title(f"{name} p50 and p99")
        ax.set_ylabel("latency (ms)")
    throughput = [s["output_throughput"] for s in summaries]
    _headroom(axes[1, 1], _bars(axes[1, 1], x, throughput, 0.6, "tab:green", None))
    axes[1, 1].set_title("Output throughput")
    axes[1, 1].set_ylabel("output tokens / s")
    preemptions = [s["preemptions"] for s in summaries]
    _headroom(axes[1, 2], _bars(axes[1, 2], x, preemptions, 0.6, "tab:purple", None))
    axes[1, 2].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1, 2].set_title("Preemptions")
    axes[1, 2].set_ylabel("preemptions (count)")
    for ax in axes.flat:
        ax.set_xticks(x, labels, rotation=20 if len(labels) > 3 else 0, ha="right"
                      if len(labels) > 3 else "center")
    fig.suptitle("Comparison of runs")
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.legend(handles, names, loc="lower center", ncol=2, frameon=False)
    return png_bytes(fig)


def _bars(ax, x, values, width, color, label) -> float:
    """Draw labelled bars; returns the tallest finite value (0 if none)."""
    values = np.asarray(values, dtype=np.float64)
    shown = np.nan_to_num(values, nan=0.0)
    bars = ax.bar(x, shown, width, color=color, label=label)
    ax.bar_label(bars, labels=[_short(v) for v in values], fontsize=7, padding=1)
    return float(shown.max()) if shown.size else 0.0


def _headroom(ax, tallest: float) -> None:
    """Start at zero and leave room above the tallest bar for its label."""
    ax.set_ylim(0, tallest * 1.15 if tallest > 0 else 1.0)


def _short(value: float) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
