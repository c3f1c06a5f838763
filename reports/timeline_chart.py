"""The engine over time, one panel per run: requests running and waiting (left axis) and the
share of KV blocks in use (right axis, %), as recorded at each step.

Between steps the engine may sit idle; then nothing runs (running drops to 0), and the waiting
count holds the last step's, since nothing is admitted while idle (a static batch waiting for
its timeout, a prefill replica whose blocks all wait to be sent; arrivals add to it from the
next step on). The KV line drops to 0, as a single engine idles with no request in flight; a
cluster's panel reads each replica's log of its KV use, which holds between steps too (a
disaggregated prefill replica keeps the blocks of requests whose KV is still being sent). Queues
that grow without bound, a cache that stays full, or a batch that drains between static batches
show up here.

A long run has far more steps than the chart has pixels across: each line keeps, in each of
`BINS` slices of the time axis, its first and last points and its lowest and highest (`minmax`),
which is what a pixel column would show of all of them, for a fraction of the drawing time (the
last point carries the slice's closing value, an idle 0 included, into the next slice).

Runs share one time axis only when their durations are alike (`shared_time_axis`): a run that
ends in 60 s drawn on the axis of one that lasts 300 s is a squeezed fifth of its panel. The KV
use is a shaded area behind the two request lines, so it never hides them; one legend for all
panels sits under them, clear of the titles. More than four runs are laid out in two columns.
"""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from .figures import legend_below, new_figure, png_bytes, scale_axis

PANEL_HEIGHT_IN = 2.2
BINS = 2000  # slices of the time axis a line keeps four points of (about 2 per pixel)
SHARE_RATIO = 0.67  # runs share a time axis when the shortest lasts this share of the longest
KV_COLOR = "tab:green"


def step_series(start_s, end_s, values, idle_value: float | None):
    """Points for a post-step plot of a per-step value, with `idle_value` (0, or NaN for
    unknown) over every idle gap between one step's end and the next step's start; None: the
    step's value holds through the gap."""
    start_s, end_s = np.asarray(start_s, float), np.asarray(end_s, float)  # [n], [n]
    values = np.asarray(values, float)  # [n]
    if idle_value is None:
        return start_s, values
    gap = np.append(start_s[1:] > end_s[:-1], True)  # [n]: idle after step i (and at the end)
    t = np.column_stack([start_s, end_s]).ravel()  # [2n]: start_i, end_i
    y = np.column_stack([values, np.where(gap, idle_value, values)]).ravel()  # [2n]
    keep = np.ones(len(t), bool)
    keep[1::2] = gap  # an end point is needed only where an idle gap follows
    return t[keep], y[keep]


def minmax(t: np.ndarray, y: np.ndarray, bins: int = BINS):
    """At most four points of (t, y) per slice of `bins` equal slices of t's range: the
    slice's first and last points and its lowest and highest (NaN counts as both: a gap stays
    a gap), in time order. Series of up to 4 x bins points are returned whole. t: [n] sorted."""
    if len(t) <= 4 * bins:
        return t, y
    span = t[-1] - t[0]
    slice_of = np.minimum(((t - t[0]) / span * bins).astype(np.int64), bins - 1)  # [n]
    starts = np.flatnonzero(np.diff(slice_of, prepend=-1))  # [m] first index of each slice
    low = np.where(np.isnan(y), -np.inf, y)
    high = np.where(np.isnan(y), np.inf, y)
    keep = np.zeros(len(t), bool)
    keep[starts] = True
    keep[np.append(starts[1:] - 1, len(t) - 1)] = True  # each slice's last point
    for values, reduce in ((low, np.minimum), (high, np.maximum)):
        extreme = reduce.reduceat(values, starts)[slice_of[starts].searchsorted(slice_of)]
        hits = np.flatnonzero(values == extreme)  # positions equal to their slice's extreme
        keep[hits[np.unique(slice_of[hits], return_index=True)[1]]] = True  # first per slice
    return t[keep], y[keep]


def duration_s(steps) -> float:
    """Seconds from the first arrival to the last step's end (0 for a run without steps)."""
    return float(np.max(steps["end_s"])) if len(steps["end_s"]) else 0.0


def shared_time_axis(durations) -> bool:
    """True when the runs last alike long enough to be read on one time axis."""
    longest = max(durations, default=0.0)
    return longest <= 0 or min(durations) >= SHARE_RATIO * longest


def timeline_chart(runs) -> bytes:
    """`runs`: [(label, step columns)] (`RunRecorder.step_columns()`) -> PNG bytes."""
    return png_bytes(timeline_figure(runs))


def timeline_figure(runs):
    """The chart's matplotlib Figure: one panel per run, in run order."""
    cols = 1 if len(runs) <= 4 else 2
    rows = -(-len(runs) // cols)
    shared = shared_time_axis([duration_s(steps) for _, steps in runs])
    fig, axes = new_figure(rows, cols, 11, 1.4 + PANEL_HEIGHT_IN * rows,
                           sharex="all" if shared else "none")
    for ax, (label, steps) in zip(axes.flat, runs):
        _panel(ax, label, steps)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for col in range(cols):  # the lowest panel of each column names the time axis
        lowest = max(r for r in range(rows) if r * cols + col < len(runs))
        axes[lowest, col].set_xlabel("time from first arrival (s)")
        if shared:
            axes[lowest, col].xaxis.set_tick_params(labelbottom=True)
    title = "Running and waiting requests and KV cache use"
    fig.suptitle(title if shared else f"{title} (each run on its own time axis)")
    handles = [*axes.flat[0].get_legend_handles_labels()[0],
               Patch(color=KV_COLOR, alpha=0.25, label="KV blocks in use (right axis)")]
    legend_below(fig, handles, [h.get_label() for h in handles])
    return fig


def _panel(ax, label: str, steps) -> None:
    """One run: running and waiting requests (left axis) over the KV use (right axis, %)."""
    ax.set_title(label, loc="left")
    ax.set_ylabel("requests")
    kv = ax.twinx()
    kv.set_zorder(ax.get_zorder() - 1)  # the shaded KV area behind the request lines
    ax.patch.set_visible(False)
    kv.set_ylim(0, 105)
    kv.set_ylabel("KV in use (%)")
    kv.grid(False)
    start, end = steps["start_s"], steps["end_s"]
    if not len(start):
        for name, color in (("running", "tab:blue"), ("waiting", "tab:orange")):
            ax.plot([], [], color=color, label=name)
        ax.text(0.5, 0.5, "no engine step ran", transform=ax.transAxes, ha="center")
        return
    series = []
    for column, color, name, idle in (("num_running", "tab:blue", "running", 0.0),
                                      ("num_waiting", "tab:orange", "waiting", None)):
        t, y = minmax(*step_series(start, end, steps[column], idle))
        ax.step(t, y, where="post", color=color, label=name, linewidth=1.2)
        series.append(y)
    scale_axis(ax, "y", np.concatenate(series))  # counts include 0: stays linear
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole requests
    used = np.asarray(steps["kv_blocks_used"], dtype=float)
    t, y = minmax(*step_series(start, end, 100.0 * used / max(steps["kv_blocks_total"], 1), 0.0))
    kv.fill_between(t, y, step="post", color=KV_COLOR, alpha=0.25, linewidth=0)
    kv.step(t, y, where="post", color=KV_COLOR, alpha=0.5, linewidth=0.6)  # brief spikes show
