"""The chart of a capacity search (`search.png`), two panels:

- capacity against GPUs: each point's highest rate meeting the target (requests/s, or
  conversations/s) against how many GPUs it uses; a point that met the target at the
  bracket's top is drawn as a triangle pointing up (its capacity is at least that; the title
  says so when there is one), one that failed even at its bottom is left out and named under
  the chart;
- cost efficiency: capacity per GPU against capacity per dollar-hour, both better up and right,
  with the Pareto front (no point better on both) ringed and joined by a line. Without prices
  (a cost model other than "hardware", or a GPU without one), or when no point met the target,
  the panel says so.
"""

from __future__ import annotations

import math
import textwrap

from matplotlib.lines import Line2D

from .figures import LEGEND_CHARS, legend_below, new_figure, png_bytes, run_colors

MARKERS = {"found": "o", "at_least_high": "^"}


def search_chart(labels: list[str], rows: list[dict], unit: str = "requests/s") -> bytes:
    """`labels`: a short name per point; `rows`: their figures (`SearchResult.rows()`);
    `unit`: what the rate counts (requests/s, or conversations/s)."""
    fig, axes = new_figure(1, 2, 12, 5.2)
    capacity, cost = axes[0]
    colors = run_colors(len(rows))
    handles = []
    for label, row, color in zip(labels, rows, colors):
        if row["status"] == "fails_at_low":
            continue
        marker = MARKERS[row["status"]]
        capacity.plot(row["gpus"], row["capacity"], marker, color=color, markersize=8)
        if not math.isnan(row["capacity_per_dollar_hour"]):
            cost.plot(row["capacity_per_gpu"], row["capacity_per_dollar_hour"], marker,
                      color=color, markersize=8)
        handles.append(Line2D([], [], color=color, marker=marker, linestyle="", label=label))
    capacity.set_xticks(sorted({row["gpus"] for row in rows}))
    capacity.set_xlabel("GPUs (tensor parallel x replicas)")
    capacity.set_ylabel(f"highest rate meeting the target ({unit})")
    bounded = any(row["status"] == "at_least_high" for row in rows)
    capacity.set_title("Capacity (triangle: at least the bracket's top)" if bounded
                       else "Capacity")
    capacity.set_ylim(bottom=0)
    _cost_panel(cost, rows, unit)
    if not handles:
        capacity.text(0.5, 0.5, "no point met the target", ha="center", va="center",
                      transform=capacity.transAxes, color="dimgrey")
    failed = [label for label, row in zip(labels, rows) if row["status"] == "fails_at_low"]
    title = textwrap.fill(f"not shown, failing even at the bracket's bottom: "
                          f"{'; '.join(failed)}", LEGEND_CHARS) if failed else None
    legend_below(fig, handles, [h.get_label() for h in handles], title)
    return png_bytes(fig)


def _cost_panel(ax, rows: list[dict], unit: str) -> None:
    front = sorted((row["capacity_per_gpu"], row["capacity_per_dollar_hour"])
                   for row in rows if row["pareto"])
    if front:
        ax.plot(*zip(*front), "-o", color="grey", linewidth=1, markersize=15,
                markerfacecolor="none", zorder=0, label="Pareto front")
        ax.legend(loc="upper left", frameon=False)
    else:
        met = any(row["status"] != "fails_at_low" for row in rows)
        ax.text(0.5, 0.5, "no prices: set hardware.cost_per_hour" if met
                else "no point met the target", ha="center", va="center",
                transform=ax.transAxes, color="dimgrey")
    ax.set_xlabel(f"capacity per GPU ({unit} at which the target meets the SLOs)")
    ax.set_ylabel(f"capacity per dollar-hour ({unit} per $/h)")
    ax.set_title("Cost efficiency (better: up and right)")
