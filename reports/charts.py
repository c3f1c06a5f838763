"""The report's charts, as PNG images: latency CDFs, the comparison of runs, the timeline and,
for a sweep, latency and throughput against the swept value. Imported only where charts are
drawn (matplotlib takes a good part of a second to import)."""

from __future__ import annotations

from .cdf_chart import cdf_chart
from .comparison_chart import comparison_chart
from .render import Image
from .sweep_chart import sweep_chart
from .tables import request_frame, run_keys
from .timeline_chart import timeline_chart


def make_charts(results, summaries: list[dict]) -> list[Image]:
    """The report's charts of `results` ([(RunSpec, RunRecorder)]) and their summaries."""
    keys = run_keys(results)
    request_frames = [request_frame(spec, rec, keys) for spec, rec in results]
    labels = [spec.label for spec, _ in results]
    cdf_runs = [(spec.label, frame, rec) for (spec, rec), frame in zip(results, request_frames)]
    timeline_runs = [(spec.label, rec.step_columns()) for spec, rec in results]
    charts = [
        Image("latency_cdfs.png", cdf_chart(cdf_runs), "Latency distributions (CDFs)"),
        Image("comparison.png", comparison_chart(labels, summaries), "Comparison of runs"),
        Image("timeline.png", timeline_chart(timeline_runs),
              "Timeline: running and waiting requests, KV cache use"),
    ]
    specs = [spec for spec, _ in results]
    if specs and specs[0].sweep:
        charts.append(Image("sweep.png", sweep_chart(specs, summaries),
                            "Latency and throughput against the swept value"))
    return charts
