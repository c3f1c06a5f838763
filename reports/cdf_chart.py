"""Latency distributions: empirical CDFs of TTFT, TPOT, ITL and E2E, one line per run.

TTFT, TPOT and E2E are per request (finished requests; TPOT needs two output tokens). ITL is
token-weighted from the recorder's exact (gap, count) pairs, so a gap shared by 30 tokens weighs
30 times one gap of one token. Each line counts what its summary counts: the requests sent after
the warm-up and the gaps of tokens sampled after it. A panel's x axis is logarithmic when its
latencies span more than two decades (static and continuous batching can differ by that much),
or when its longest latency is more than `figures.TAIL_SPAN` times the smallest of its lines'
medians (a tail that would crowd the lines' bodies against the left edge of a linear axis),
linear otherwise (`figures.scale_axis`). A CDF of hundreds of thousands of distinct latencies is
drawn from the first point in each cell of a grid of `LEVELS` x `LEVELS` over (log latency,
fraction): the same line at the chart's resolution (`thin`).
"""

from __future__ import annotations

import numpy as np

from engine.benchmark import itl_weights

from .figures import legend_below, log_note, new_figure, png_bytes, run_colors, scale_axis
from .tables import request_frame

LEVELS = 2000  # grid cells per axis a CDF line keeps one point of
PANELS = (("ttft_s", "TTFT: time to first token"), ("tpot_s", "TPOT: time per output token"),
          ("itl", "ITL: inter-token latency (token-weighted)"), ("e2e_s", "E2E: request latency"))


def weighted_cdf(values, counts) -> tuple[np.ndarray, np.ndarray]:
    """Distinct finite values, sorted, and the fraction of the weight at or below each."""
    values = np.asarray(values, dtype=np.float64)  # [n]
    counts = np.asarray(counts, dtype=np.float64)  # [n]
    keep = np.isfinite(values)
    distinct, index = np.unique(values[keep], return_inverse=True)  # [m], [n kept]
    weight = np.bincount(index, weights=counts[keep], minlength=len(distinct))  # [m]
    cumulative = np.cumsum(weight)  # [m]
    if not len(cumulative) or cumulative[-1] <= 0:  # nothing weighs: no curve
        return distinct[:0], cumulative[:0]
    return distinct, cumulative / cumulative[-1]


def thin(x: np.ndarray, y: np.ndarray, levels: int = LEVELS):
    """The points of a CDF (x sorted, > 0 on a log axis) that start a new cell of a levels x
    levels grid over (log x, y), and the last one; lines of up to 2 x levels points whole."""
    if len(x) <= 2 * levels:
        return x, y
    logs = np.log(np.maximum(x, np.finfo(float).tiny))  # [n]
    span = max(logs[-1] - logs[0], np.finfo(float).tiny)
    cell = (np.floor((logs - logs[0]) / span * levels) * (levels + 1)
            + np.floor(y * levels))  # [n] one number per grid cell
    keep = np.diff(cell, prepend=-1) != 0
    keep[-1] = True
    return x[keep], y[keep]


def cdf_line(label: str, spec, recorder, keys=None) -> tuple:
    """One run's line of the chart: (label, its counted requests' rows, its inter-token gaps
    and the tokens each counts for), what its summary counts (the warm-up left out)."""
    frame = request_frame(spec, recorder, keys)
    return label, frame[frame["counted"]], itl_weights(recorder, spec.config.workload.warmup_s)


def cdf_chart(runs, styles=None, legend_title: str | None = None) -> bytes:
    """`runs`: [`cdf_line`] -> PNG bytes of a 2 x 2 grid of CDFs. `styles`: one (colour,
    line style) per run (default: a distinct colour each, solid); `legend_title` says what the
    labels are."""
    return png_bytes(cdf_figure(runs, styles, legend_title))


def cdf_figure(runs, styles=None, legend_title: str | None = None):
    """The chart's matplotlib Figure: TTFT, TPOT, ITL, E2E panels, one line per run."""
    styles = styles or [(color, "-") for color in run_colors(len(runs))]
    fig, axes = new_figure(2, 2, 11, 7.5)
    for ax, (column, title) in zip(axes.flat, PANELS):
        shown, medians = [], []
        for (color, style), (label, frame, itl) in zip(styles, runs):
            if column == "itl":
                values, counts = itl
            else:
                values = frame[column].to_numpy(dtype=np.float64)
                counts = np.ones(len(values))
            x, y = weighted_cdf(values, counts)
            if len(x):
                medians.append(x[np.searchsorted(y, 0.5)] * 1e3)
            x, y = thin(x, y)
            ax.step(x * 1e3, y, where="post", color=color, linestyle=style, label=label)
            shown.append(x * 1e3)
        is_log = scale_axis(ax, "x", np.concatenate(shown) if shown else [],
                            middle=min(medians, default=None))
        ax.set_title(title)
        ax.set_xlabel(f"latency (ms{log_note(is_log)})")
        ax.set_ylabel("fraction of " + ("tokens" if column == "itl" else "requests"))
        ax.set_ylim(0, 1.02)
    fig.suptitle("Latency CDFs per run")
    legend_below(fig, *axes[0, 0].get_legend_handles_labels(), title=legend_title)
    return fig
