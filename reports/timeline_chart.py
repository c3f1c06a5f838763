"""The engine over time, one panel per run: requests running and waiting (left axis) and the
share of KV blocks in use (right axis, %), as recorded at each step.

Between steps the engine may sit idle; then nothing runs and no KV block is held (running and
KV drop to 0), while the waiting count is not recorded (a static batch may be waiting for its
timeout), so its line breaks there. Queues that grow without bound, a cache that stays full, or
a batch that drains between static batches show up here.
"""

from __future__ import annotations

import numpy as np

from .figures import new_figure, png_bytes

PANEL_HEIGHT_IN = 2.2


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


def timeline_chart(runs) -> bytes:
    """`runs`: [(label, step_frame)] -> PNG bytes."""
    fig, axes = new_figure(len(runs), 1, 11, 1.2 + PANEL_HEIGHT_IN * len(runs), sharex=True)
    for ax, (label, steps) in zip(axes[:, 0], runs):
        start, end = steps["start_s"], steps["end_s"]
        for column, color, name, idle in (("num_running", "tab:blue", "running", 0.0),
                                          ("num_waiting", "tab:orange", "waiting", np.nan)):
            t, y = step_series(start, end, steps[column], idle)
            ax.step(t, y, where="post", color=color, label=name)
        ax.set_ylabel("requests")
        ax.set_ylim(bottom=0)
        ax.set_title(label, loc="left")
        kv = ax.twinx()
        total = np.maximum(steps["kv_blocks_total"].to_numpy(dtype=float), 1.0)
        t, y = step_series(start, end, 100.0 * steps["kv_blocks_used"] / total, 0.0)
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
