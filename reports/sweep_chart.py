"""Latency and throughput against the swept value (the load, for a sweep of the arrival rate):
p50 (solid) and p99 (dashed) of TTFT, ITL and E2E, and output throughput, one line per series.

The x axis is the first sweep key; a series is one variant at one value of the other sweep
keys. Numbers are plotted at their value, anything else (a policy name) at evenly spaced ticks.
"""

from __future__ import annotations

import numpy as np

from .figures import legend_below, new_figure, plain_log_axis, png_bytes, run_colors

UNITS = {"workload.arrival.rate": "request rate (requests/s)",
         "workload.arrival.concurrency": "concurrent users",
         "workload.trace.time_scale": "trace time scale (x slower)"}
PANELS = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E"))


def axis_label(key: str) -> str:
    return UNITS.get(key, key)


def sweep_chart(specs, summaries: list[dict]) -> bytes:
    """`specs`: the runs' RunSpecs (with non-empty sweeps), `summaries` their summaries."""
    x_key = next(iter(specs[0].sweep))
    series = _series(specs, x_key)
    values = [spec.sweep[x_key] for spec in specs]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    ticks = sorted(set(values)) if numeric else list(dict.fromkeys(map(str, values)))
    fig, axes = new_figure(2, 2, 11, 8)
    colors = run_colors(len(series))
    for color, (name, members) in zip(colors, series.items()):
        points = sorted(((spec.sweep[x_key] if numeric else ticks.index(str(spec.sweep[x_key])),
                          summaries[index]) for spec, index in members), key=lambda p: p[0])
        xs = [x for x, _ in points]
        for ax, (metric, _) in zip(axes.flat, PANELS):
            for stat, style in (("p50", "-"), ("p99", "--")):
                ys = [s[f"{metric}_{stat}_s"] * 1e3 for _, s in points]
                ax.plot(xs, ys, style, marker="o", color=color, label=f"{name} {stat}")
        ys = [s["output_throughput"] for _, s in points]
        axes[1, 1].plot(xs, ys, "-", marker="o", color=color, label=name)
    for ax, (metric, name) in zip(axes.flat, PANELS):
        ax.set_title(f"{name} p50 (solid) and p99 (dashed)")
        ax.set_ylabel("latency (ms, log scale)")
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
    axes[1, 1].set_title("Output throughput")
    axes[1, 1].set_ylabel("output tokens / s")
    for ax in axes.flat:
        ax.set_xlabel(axis_label(x_key))
        if not numeric:
            ax.set_xticks(range(len(ticks)), ticks)
    fig.suptitle(f"Latency and throughput against {axis_label(x_key)}")
    legend_below(fig, axes[0, 0])
    return png_bytes(fig)


def _series(specs, x_key: str) -> dict:
    """{series name: [(spec, index of its summary)]}."""
    groups: dict = {}
    for index, spec in enumerate(specs):
        others = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in spec.sweep.items()
                           if k != x_key)
        name = f"{spec.variant} ({others})" if others else spec.variant
        groups.setdefault(name, []).append((spec, index))
    return groups
