"""The engine over time, one panel per run: requests running and waiting (left axis) and the
share of KV blocks in use (right axis, %), as recorded at each step.

Between steps the engine may sit idle; then nothing runs and no KV block is held (running and
KV drop to 0), while the waiting count is not recorded (a static batch may be waiting for its
timeout), so its line breaks there. Queues that grow without bound, a cache that stays full, or
a batch that drains between static batches show up here.

A long run has far more steps than the chart has pixels across: each line keeps, in each of
`BINS` slices of the time axis, its first point and its lowest and highest (`minmax`), which is
what a pixel column would show of all of them, for a fraction of the drawing time.
"""

from __future__ import annotations

import numpy as np

from .figures import new_figure, png_bytes

PANEL_HEIGHT_IN = 2.2
BINS = 2000  # slices of the time axis a line keeps three points of (about 2 per pixel)


def step_series(start_s, end_s, values, idle_value: float):
    """Points for a post-step plot of a per-step value, with `idle_value` (0, or NaN for
    unknown) over every idle gap between one step's end and the next step's start."""
    start_s, end_s = np.asarray(start_s, float), np.asarray(end_s, float)  # [n], [n]
    values = np.asarray(values, float)  # [n]
    gap = np.append(start_s[1:] > end_s[:-1], True)  # [n]: idle after step i (and at the end)
    t = np.column_stack([start_s, end_s]).ravel()  # [2n]: start_i, end_i
    y = np.column_stack([values, np.where(gap, idle_value, values)]).ravel()  # [2n]
    keep = np.ones(len(t), bool)
    keep[1::2] = gap  # an end point is needed only where an idle gap follows
    return t[keep], y[keep]


def minmax(t: np.ndarray, y: np.ndarray, bins: int = BINS):
    """At most three points of (t, y) per slice of `bins` equal slices of t's range: the
    slice's first point and its lowest and highest (NaN counts as both: a gap stays a gap),
    in time order. Series of up to 3 x bins points are returned whole. t: [n] sorted."""
    if len(t) <= 3 * bins:
        return t, y
    span = t[-1] - t[0]
    slice_of = np.minimum(((t - t[0]) / span * bins).astype(np.int64), bins - 1)  # [n]
    starts = np.flatnonzero(np.diff(slice_of, prepend=-1))  # [m] first index of each slice
    low = np.where(np.isnan(y), -np.inf, y)
    high = np.where(np.isnan(y), np.inf, y)
    keep = np.zeros(len(t), bool)
    keep[starts] = True
    for values, reduce in ((low, np.minimum), (high, np.maximum)):
        extreme = reduce.reduceat(values, starts)[slice_of[starts].searchsorted(slice_of)]
        hits = np.flatnonzero(values == extreme)  # positions equal to their slice's extreme
        keep[hits[np.unique(slice_of[hits], return_index=True)[1]]] = True  # first per slice
    return t[keep], y[keep]


def timeline_chart(runs) -> bytes:
    """`runs`: [(label, step columns)] (`RunRecorder.step_columns()`) -> PNG bytes."""
    fig, axes = new_figure(len(runs), 1, 11, 1.2 + PANEL_HEIGHT_IN * len(runs), sharex=True)
    for ax, (label, steps) in zip(axes[:, 0], runs):
        start, end = steps["start_s"], steps["end_s"]
        for column, color, name, idle in (("num_running", "tab:blue", "running", 0.0),
                                          ("num_waiting", "tab:orange", "waiting", np.nan)):
            t, y = minmax(*step_series(start, end, steps[column], idle))
            ax.step(t, y, where="post", color=color, label=name)
        ax.set_ylabel("requests")
        ax.set_ylim(bottom=0)
        ax.set_title(label, loc="left")
        kv = ax.twinx()
        used = np.asarray(steps["kv_blocks_used"], dtype=float)
        t, y = minmax(*step_series(start, end, 100.0 * used / max(steps["kv_blocks_total"], 1),
                                   0.0))
        kv.step(t, y, where="post", color="tab:green", alpha=0.6, label="KV blocks in use")
        kv.set_ylim(0, 105)
        kv.set_ylabel("KV in use (%)")
        kv.grid(False)
        lines, kv_lines = ax.get_legend_handles_labels(), kv.get_legend_handles_labels()
        ax.legend(lines[0] + kv_lines[0], lines[1] + kv_lines[1], loc="lower right",
                  bbox_to_anchor=(1.0, 1.0), ncol=3, frameon=False)
    axes[-1, 0].set_xlabel("time from first arrival (s)")
    fig.suptitle("Running and waiting requests and KV cache use")
    fig.tight_layout()
    return png_bytes(fig)
