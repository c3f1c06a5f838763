"""Matplotlib set-up shared by the charts: figures drawn straight onto the Agg canvas (no
pyplot, no display, no global figure registry), one look, colours for runs, the rule for when
an axis is logarithmic (`scale_axis`), one legend under the panels, and byte-identical PNG files
(no software or date stamp in the metadata)."""

from __future__ import annotations

import io

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation

DPI = 100
RC = {
    "figure.facecolor": "white",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "svg.hashsalt": "servesim",  # stable ids if a chart is ever saved as SVG
}


def new_figure(rows: int, cols: int, width_in: float, height_in: float, **kwargs):
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width_in, height_in))
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, cols, squeeze=False, **kwargs)
    return fig, axes


# More than two decades: on a linear axis the smaller values flatten to nothing (continuous
# batching's 100 ms TTFT beside static batching's 25 s is a bar one pixel high).
LOG_SPAN = 100.0
# A tail this many times the middle: on a linear axis the body is a twentieth of the width.
TAIL_SPAN = 20.0
LEGEND_CHARS = 110  # characters of legend text across a figure 11-12 inches wide


def run_colors(n: int) -> list:
    """Distinct colours for up to 10 runs; an ordered colormap beyond (sweeps)."""
    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    return ordered_colors(n)


def ordered_colors(n: int) -> list:
    """Colours in order, dark to light, for runs that are points along one swept value (the
    light yellow end of viridis is left out: it vanishes on white)."""
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(0.88 * i / max(n - 1, 1)) for i in range(n)]


def needs_log(values) -> bool:
    """True when the finite values are all > 0 and the largest is more than LOG_SPAN times the
    smallest: the rule every chart uses to pick a logarithmic value axis."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    return bool(v.size) and bool((v > 0).all()) and v.max() > LOG_SPAN * v.min()


def scale_axis(ax, which: str, values, middle: float | None = None) -> bool:
    """Make `ax`'s "x" or "y" axis logarithmic, labelled with plain numbers, when
    `needs_log(values)` (the values it shows), or, given where the values' body lies
    (`middle`, > 0), when their largest is more than TAIL_SPAN times it; returns whether it
    did."""
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    tail = middle is not None and middle > 0 and bool(v.size) and bool((v > 0).all()) \
        and v.max() > TAIL_SPAN * middle
    if not (needs_log(v) or tail):
        return False
    getattr(ax, f"set_{which}scale")("log")
    plain_log_axis(getattr(ax, f"{which}axis"))
    return True


def log_note(is_log: bool) -> str:
    """", log scale" for an axis label when the axis is logarithmic."""
    return ", log scale" if is_log else ""


class PlainLogFormatter(LogFormatterSciNotation):
    """Log-axis labels as plain numbers (3, 20, 1000), on the ticks matplotlib would label."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def plain_log_axis(axis) -> None:
    """Label a log-scaled axis (ax.xaxis or ax.yaxis) with plain numbers."""
    axis.set_major_formatter(PlainLogFormatter())
    axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.6)))


def legend_below(fig, handles, labels, title: str | None = None) -> None:
    """One legend for the whole figure, under the panels (never over a title or a line), read
    row by row, as many entries a row as their length allows; then lay out. Its height is
    measured, so a legend of many runs still fits. A title without entries is still shown."""
    fig.tight_layout()
    if not labels and title is None:
        return
    width = max((len(str(label)) for label in labels), default=0) + 6  # the handle's included
    ncol = max(1, min(len(labels), LEGEND_CHARS // width))
    order = [i for col in range(ncol) for i in range(col, len(labels), ncol)]  # row-major
    legend = fig.legend([handles[i] for i in order], [labels[i] for i in order],
                        loc="lower center", ncol=ncol, frameon=False, title=title)
    height = legend.get_window_extent(fig.canvas.get_renderer()).height / fig.bbox.height
    fig.tight_layout(rect=(0, min(height + 0.01, 0.6), 1, 1))


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes, identical for identical figures; closes the figure."""
    buffer = io.BytesIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()
