"""The report's charts, as PNG images: latency CDFs, the comparison of runs, the timeline, for a
sweep, latency and throughput against the swept value, and for runs that cache prefixes, the
prefix cache over time. Imported only where charts are drawn (matplotlib takes a good part of
a second to import)."""

from __future__ import annotations

from .cdf_chart import cdf_chart
from .comparison_chart import comparison_chart
from .figures import ordered_colors
from .labels import is_ordered_sweep, short_labels
from .prefix_cache_chart import caching_runs, prefix_cache_chart
from .render import Image
from .sweep_chart import sweep_chart
from .tables import request_frame, run_keys
from .timeline_chart import timeline_chart


def make_charts(results, summaries: list[dict]) -> list[Image]:
    """The report's charts of `results` ([(RunSpec, RunRecorder)]) and their summaries."""
    keys = run_keys(results)
    specs = [spec for spec, _ in results]
    labels, labels_title = short_labels(specs)  # only what differs between the runs
    cdf_runs = [(label, request_frame(spec, rec, keys), rec)
                for label, (spec, rec) in zip(labels, results)]
    styles = [(color, "-") for color in ordered_colors(len(specs))] \
        if is_ordered_sweep(specs) else None  # a load sweep reads as a gradient
    timeline_runs = [(spec.label, rec.step_columns()) for spec, rec in results]
    charts = [
        Image("latency_cdfs.png", cdf_chart(cdf_runs, styles, labels_title),
              "Latency distributions (CDFs)"),
        Image("comparison.png", comparison_chart(labels, summaries, labels_title),
              "Comparison of runs"),
        Image("timeline.png", timeline_chart(timeline_runs),
              "Timeline: running and waiting requests, KV cache use"),
    ]
    if specs and specs[0].sweep:
        charts.append(Image("sweep.png", sweep_chart(specs, summaries),
                            "Latency against achieved throughput, over the swept value"))
    cache_runs = caching_runs(results)
    if cache_runs:
        charts.append(Image("prefix_cache.png", prefix_cache_chart(cache_runs),
                            "Prefix cache: hit rate and KV blocks cached over time"))
    return charts
