"""Matplotlib set-up shared by the charts: figures drawn straight onto the Agg canvas (no
pyplot, no display, no global figure registry), one look, colours for runs, and byte-identical
PNG files (no software or date stamp in the metadata)."""

from __future__ import annotations

import io

import matplotlib
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


def run_colors(n: int) -> list:
    """Distinct colours for up to 10 runs; an ordered colormap beyond (sweeps)."""
    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(i / (n - 1)) for i in range(n)]


class PlainLogFormatter(LogFormatterSciNotation):
    """Log-axis labels as plain numbers (3, 20, 1000), on the ticks matplotlib would label."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def plain_log_axis(axis) -> None:
    """Label a log-scaled axis (ax.xaxis or ax.yaxis) with plain numbers."""
    axis.set_major_formatter(PlainLogFormatter())
    axis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.6)))


def legend_below(fig, ax) -> None:
    """One legend for the whole figure, under the panels, for `ax`'s lines; then lay out."""
    handles, labels = ax.get_legend_handles_labels()
    rows = -(-len(labels) // 4) if labels else 0
    bottom = min(0.04 + 0.035 * rows, 0.4)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    if labels:
        fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), frameon=False)


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes, identical for identical figures; closes the figure."""
    buffer = io.BytesIO()
    with matplotlib.rc_context(RC):
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()
