"""The report's charts, as PNG images: latency CDFs, the comparison of runs, the timeline, for a
sweep, latency and throughput against the swept value, and for runs that cache prefixes, the
prefix cache over time, and for cluster runs, the load balance over their replicas. Imported
only where charts are drawn (matplotlib takes a good part of
a second to import)."""

from __future__ import annotations

from engine.cluster_records import ClusterRecorder

from .cdf_chart import cdf_chart, cdf_line
from .cluster_steps import chart_steps
from .comparison_chart import comparison_chart
from .figures import ordered_colors
from .labels import is_ordered_sweep, short_labels
from .prefix_cache_chart import caching_runs, prefix_cache_chart
from .render import Image
from .replica_table import cluster_results, pool_names
from .replicas_chart import replicas_chart
from .sweep_chart import sweep_chart
from .tables import run_keys
from .timeline_chart import timeline_chart


def make_charts(results, summaries: list[dict], steps: bool = True) -> list[Image]:
    """The report's charts of `results` ([(RunSpec, RunRecorder)]) and their summaries;
    without `steps` (a benchmarked server's runs) no timeline, which is drawn from steps."""
    keys = run_keys(results)
    specs = [spec for spec, _ in results]
    labels, labels_title = short_labels(specs)  # only what differs between the runs
    cdf_runs = [cdf_line(label, spec, rec, keys) for label, (spec, rec) in zip(labels, results)]
    styles = [(color, "-") for color in ordered_colors(len(specs))] \
        if is_ordered_sweep(specs) else None  # a load sweep reads as a gradient
    charts = [
        Image("latency_cdfs.png", cdf_chart(cdf_runs, styles, labels_title),
              "Latency distributions (CDFs)"),
        Image("comparison.png", comparison_chart(labels, summaries, labels_title),
              "Comparison of runs"),
    ]
    if steps:
        timeline_runs = [(_cluster_label(spec, rec), chart_steps(rec)) for spec, rec in results]
        charts.append(Image("timeline.png", timeline_chart(timeline_runs),
                            "Timeline: running and waiting requests, KV cache use"))
    if specs and specs[0].sweep:
        charts.append(Image("sweep.png", sweep_chart(specs, summaries),
                            "Latency and achieved throughput across the sweep"))
    cache_runs = caching_runs(results, _cluster_label)
    if cache_runs:
        charts.append(Image("prefix_cache.png", prefix_cache_chart(cache_runs),
                            "Prefix cache: hit rate and KV blocks cached over time"))
    clusters = cluster_results(results, summaries)
    if clusters:
        charts.append(Image("replicas.png", replicas_chart(
            [(spec.label, rec, summary, spec.config.workload.warmup_s, pool_names(spec.config))
             for spec, rec, summary in clusters]),
            "Load balance: each replica's throughput, queue and KV cache use"))
    return charts


def _cluster_label(spec, recorder) -> str:
    """A run's label, saying so when its panel sums a cluster's replicas."""
    if not isinstance(recorder, ClusterRecorder):
        return spec.label
    return f"{spec.label} ({len(recorder.replicas)} replicas, summed)"
