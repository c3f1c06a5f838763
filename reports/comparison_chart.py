"""Runs side by side: p50 and p99 of TTFT, TPOT, ITL and E2E (ms), output throughput
(tokens/s) and preemptions, one bar group per run, each bar labelled with its value."""

from __future__ import annotations

import numpy as np

from .figures import new_figure, png_bytes

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))


def comparison_chart(labels: list[str], summaries: list[dict]) -> bytes:
    """One bar group per run; `summaries` are `engine.benchmark.summarize` dicts."""
    fig, axes = new_figure(2, 3, 12, 7.5)
    x = np.arange(len(labels))
    for ax, (metric, name) in zip(axes.flat, LATENCIES):
        width = 0.38
        for offset, stat, color in ((-width / 2, "p50", "tab:blue"), (width / 2, "p99", "tab:red")):
            values = [s[f"{metric}_{stat}_s"] * 1e3 for s in summaries]
            _bars(ax, x + offset, values, width, color, stat)
        ax.set_title(f"{name} p50 and p99")
        ax.set_ylabel("latency (ms)")
        ax.legend(loc="upper left")
    _bars(axes[1, 1], x, [s["output_throughput"] for s in summaries], 0.6, "tab:green", None)
    axes[1, 1].set_title("Output throughput")
    axes[1, 1].set_ylabel("output tokens / s")
    _bars(axes[1, 2], x, [s["preemptions"] for s in summaries], 0.6, "tab:purple", None)
    axes[1, 2].set_title("Preemptions")
    axes[1, 2].set_ylabel("preemptions (count)")
    for ax in axes.flat:
        ax.set_xticks(x, labels, rotation=20 if len(labels) > 3 else 0, ha="right"
                      if len(labels) > 3 else "center")
    fig.suptitle("Comparison of runs")
    fig.tight_layout()
    return png_bytes(fig)


def _bars(ax, x, values, width, color, label) -> None:
    values = np.asarray(values, dtype=np.float64)
    shown = np.nan_to_num(values, nan=0.0)
    bars = ax.bar(x, shown, width, color=color, label=label)
    ax.bar_label(bars, labels=[_short(v) for v in values], fontsize=7, padding=1)
    ax.margins(y=0.15)
    ax.set_ylim(bottom=0)


def _short(value: float) -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
