"""Latency over a sweep: p50 (solid) and p99 (dashed) of TTFT, TPOT and E2E, and the throughput
a server achieved against the swept value.

The swept value on the x axis is the first of `LOAD_KEYS` the sweep varies (the rate, the
arrivals as tables of differing rates, a trace's time scale, a concurrency cap), else the first
sweep key. In a sweep of the load the x axis of the latency panels is each run's
`request_throughput` (requests completed per second), not the load it was offered: past the knee
the offered rate keeps growing while the achieved one stops, so the curve turns upwards where
the server saturates, and a series that gets more work done sits further right; each p50 point
is marked with its swept value, and the fourth panel maps swept values to throughputs, for the
rate with the line where achieved equals offered. A sweep of anything else (a GPU count, a block
count) is drawn against the swept value itself: its runs are offered one load, so their
throughputs are alike and would draw a long line across a sliver of an axis. A series is one
variant at one value of the other sweep keys. Non-numeric swept values (policy names) are placed
at evenly spaced ticks, and a few whole numbers (tensor parallel sizes) at their own ticks.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from .figures import legend_below, log_note, new_figure, png_bytes, run_colors, scale_axis
from .labels import axis_label, value_text

PANELS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E"))
STYLES = (("p50", "-", "o"), ("p99", "--", "s"))
RATE_KEY = "workload.arrival.rate"
# what sets the load a server is offered (the arrivals as a table only when their rates
# differ): a sweep of one is drawn against achieved throughput
LOAD_KEYS = (RATE_KEY, "workload.arrival", "workload.trace.time_scale",
             "workload.max_concurrency")
MARK_SPACING_PX = 14  # swept-value marks closer than this to one another would overlap
MAX_VALUE_TICKS = 12  # whole swept values up to this many each get their own tick


def sweep_chart(specs, summaries: list[dict]) -> bytes:
    """`specs`: the runs' RunSpecs (with non-empty sweeps), `summaries` their summaries."""
    return png_bytes(sweep_figure(specs, summaries))


def sweep_figure(specs, summaries: list[dict]):
    """The chart's matplotlib Figure: TTFT, TPOT, E2E against achieved throughput, then
    achieved throughput against the swept value."""
    load_key = _load_key(specs)
    x_key = load_key or next(iter(specs[0].sweep))
    by_load = load_key is not None
    values = [spec.sweep[x_key] for spec in specs]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    ticks = sorted(set(values)) if numeric else list(dict.fromkeys(map(value_text, values)))
    series = _series(specs, x_key)
    colors = run_colors(len(series))
    fig, axes = new_figure(2, 2, 11, 8.5)
    latency_axes = [axes[0, 0], axes[0, 1], axes[1, 0]]
    handles, marks = [], []
    for color, (name, members) in zip(colors, series.items()):
        points = sorted(((spec.sweep[x_key] if numeric
                          else ticks.index(value_text(spec.sweep[x_key])),
                          spec.sweep[x_key], summaries[index]) for spec, index in members),
                        key=lambda p: p[0])
        throughput = np.array([s["request_throughput"] for _, _, s in points])
        xs = throughput if by_load else np.array([x for x, _, _ in points], dtype=float)
        for ax, (metric, _) in zip(latency_axes, PANELS):
            for stat, style, marker in STYLES:
                ys = np.array([s[f"{metric}_{stat}_s"] * 1e3 for _, _, s in points])
                ax.plot(xs, ys, style, marker=marker, markersize=4, color=color)
        marks.append([(throughput, [s[f"{metric}_p50_s"] * 1e3 for _, _, s in points],
                       [value_text(v) for _, v, _ in points]) for metric, _ in PANELS])
        axes[1, 1].plot([x for x, _, _ in points], throughput, "-", marker="o", color=color)
        handles.append(Line2D([], [], color=color, marker="o", label=name))
    for i, (ax, (metric, name)) in enumerate(zip(latency_axes, PANELS)):
        is_log = scale_axis(ax, "y", _plotted(ax, "y"))
        ax.set_title(f"{name} p50 (solid) and p99 (dashed)")
        ax.set_ylabel(f"latency (ms{log_note(is_log)})")
        if by_load:
            x_log = scale_axis(ax, "x", _plotted(ax, "x"))
            ax.set_xlabel(f"achieved throughput (requests completed / s{log_note(x_log)})")
            _mark_values(ax, [series_marks[i] for series_marks in marks])
        else:
            _swept_axis(ax, x_key, numeric, ticks)
    _throughput_panel(axes[1, 1], x_key, numeric, ticks)
    fig.suptitle(f"Latency against achieved throughput, over {axis_label(x_key)}" if by_load
                 else f"Latency and achieved throughput over {axis_label(x_key)}")
    handles += [Line2D([], [], color="black", linestyle=style, marker=marker, label=stat)
                for stat, style, marker in STYLES]
    legend_below(fig, handles, [h.get_label() for h in handles])
    return fig


def _load_key(specs) -> str | None:
    """The sweep key that varies the offered load (`LOAD_KEYS`, the first that does), or
    None: the arrivals swept as tables count only when their rates differ (a sweep of their
    burstiness offers one rate)."""
    for key in LOAD_KEYS:
        values = [spec.sweep[key] for spec in specs if key in spec.sweep]
        if not values:
            continue
        if key == "workload.arrival":
            values = [v.get("rate") if isinstance(v, dict) else v for v in values]
        if len({value_text(v) for v in values}) > 1:
            return key
    return None


def _throughput_panel(ax, x_key: str, numeric: bool, ticks: list) -> None:
    """Achieved against swept: for an arrival-rate sweep, the achieved = offered line shows
    where the server stops keeping up."""
    if x_key == RATE_KEY and numeric:
        top = max(ticks)
        ax.plot([0, top], [0, top], ":", color="grey", label="achieved = offered")
        ax.legend(loc="upper left", frameon=False)
    values = _plotted(ax, "y")
    is_log = scale_axis(ax, "y", values)
    if not is_log:  # from 0, so that throughputs alike look alike, and room above the top
        ax.set_ylim(0, 1.08 * max((v for v in values if v > 0), default=1.0))
    _swept_axis(ax, x_key, numeric, ticks)
    ax.set_title("Achieved throughput")
    ax.set_ylabel(f"requests completed / s{log_note(is_log)}")


def _swept_axis(ax, x_key: str, numeric: bool, ticks: list) -> None:
    """An x axis of swept values: numbers on a linear or log scale (a few whole numbers at
    their own ticks, never between them), names at evenly spaced ticks."""
    if not numeric:
        ax.set_xticks(range(len(ticks)), ticks)
    elif not scale_axis(ax, "x", ticks) and len(ticks) <= MAX_VALUE_TICKS \
            and all(float(v).is_integer() for v in ticks):
        ax.set_xticks(ticks, [value_text(v) for v in ticks])
    ax.set_xlabel(axis_label(x_key))


def _mark_values(ax, series) -> None:
    """Write each p50 point's swept value beside it (small, grey), skipping a mark that would
    overlap one already written. `series`: [(xs, ys, texts)], once the axes are scaled."""
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits: display positions are final
    placed: list = []
    for xs, ys, texts in series:
        for x, y, text in zip(xs, ys, texts):
            if not (np.isfinite(x) and np.isfinite(y)):
                continue
            at = ax.transData.transform((x, y))
            if any(np.hypot(*(at - other)) < MARK_SPACING_PX for other in placed):
                continue
            placed.append(at)
            ax.annotate(text, (x, y), xytext=(-4, 4), textcoords="offset points", ha="right",
                        fontsize=7, color="dimgrey")


def _plotted(ax, which: str) -> np.ndarray:
    """Every finite value the axes' lines plot on `which` ("x" or "y")."""
    data = [np.asarray(getattr(line, f"get_{which}data")(), dtype=np.float64)
            for line in ax.get_lines()]
    values = np.concatenate(data) if data else np.array([])
    return values[np.isfinite(values)]


def _series(specs, x_key: str) -> dict:
    """{series name: [(spec, index of its summary)]}."""
    groups: dict = {}
    for index, spec in enumerate(specs):
        others = ", ".join(f"{k.rsplit('.', 1)[-1]}={value_text(v)}"
                           for k, v in spec.sweep.items() if k != x_key)
        name = f"{spec.variant} ({others})" if others else spec.variant
        groups.setdefault(name, []).append((spec, index))
    return groups
