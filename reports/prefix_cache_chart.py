"""The prefix cache over time, one row per run that caches: the hit rate in each slice of time
(left) and the KV blocks cached and in use (right, % of the cache), as recorded at each step.

The hit rate of a slice is the prompt tokens its steps' admissions found cached over those plus
the tokens its steps prefilled: the share of the prefill work the cache served. A slice in
which nothing is admitted or prefilled has no rate (the line breaks there). Blocks cached
outlive the requests that filled them (a freed block stays cached until it is taken for another
one), so the cached line stays up through idle time while the blocks in use drop to 0: the gap
between the two is what the cache keeps for requests to come.

Only runs in which some request the summary counts found part of its prompt cached at its
first admission are drawn (`caching_runs`): a run whose requests share no prefix caches blocks
only for its preempted requests to find again, which its summary's hit rate (first admissions)
leaves at 0. Runs share one time axis by the timeline's rule.
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import PercentFormatter

from engine.benchmark import counted

from .cluster_steps import chart_steps
from .figures import legend_below, new_figure, png_bytes
from .timeline_chart import duration_s, minmax, shared_time_axis, step_series

ROW_HEIGHT_IN = 2.4
RATE_BINS = 60  # slices of the time axis the hit rate is taken over
CACHED_COLOR, USED_COLOR, RATE_COLOR = "tab:purple", "tab:green", "tab:blue"


def caching_runs(results, label=lambda spec, recorder: spec.label) -> list:
    """[(label, step columns)] of the runs of `results` ([(RunSpec, RunRecorder)]) in which a
    request the summary counts found part of its prompt cached at its first admission (a
    `prefix_cache_hit_rate` above 0: in a cluster, at a replica of any pool that caches);
    `label(spec, recorder)` names each."""
    runs = []
    for spec, recorder in results:
        if not recorder.sees_steps:  # a client's benchmark: what the server cached is unknown
            continue
        cols = recorder.request_columns()
        kept = counted(cols, spec.config.workload.warmup_s)
        hits = np.asarray(cols["cached_tokens"], float)[kept]
        if hits.size and hits.max() > 0:
            runs.append((label(spec, recorder), chart_steps(recorder)))  # replicas summed
    return runs


def hit_rate_series(steps, bins: int = RATE_BINS):
    """(slice edges [bins + 1] in seconds, hit rate [bins] in %): cached prompt tokens over
    cached plus prefilled tokens of the steps starting in each slice; NaN where there are
    none."""
    start = np.asarray(steps["start_s"], float)  # [n]
    edges = np.linspace(0.0, max(duration_s(steps), np.finfo(float).tiny), bins + 1)
    slice_of = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, bins - 1)  # [n]
    cached = np.bincount(slice_of, np.asarray(steps["cached_tokens"], float), bins)  # [bins]
    prefilled = np.bincount(slice_of, np.asarray(steps["num_prefill_tokens"], float), bins)
    total = cached + prefilled
    with np.errstate(invalid="ignore", divide="ignore"):
        return edges, np.where(total > 0, 100.0 * cached / total, np.nan)


def prefix_cache_chart(runs) -> bytes:
    """`runs`: [(label, step columns)] (`caching_runs`) -> PNG bytes."""
    return png_bytes(prefix_cache_figure(runs))


def prefix_cache_figure(runs):
    """The chart's matplotlib Figure: a row per run, hit rate left and blocks right."""
    shared = shared_time_axis([duration_s(steps) for _, steps in runs])
    fig, axes = new_figure(len(runs), 2, 11, 1.4 + ROW_HEIGHT_IN * len(runs),
                           sharex="all" if shared else "row")
    for (rate_ax, blocks_ax), (label, steps) in zip(axes, runs):
        _rate_panel(rate_ax, label, steps)
        _blocks_panel(blocks_ax, steps)
    for ax in axes[-1]:
        ax.set_xlabel("time from first arrival (s)")
    title = "Prefix cache: hit rate and KV blocks cached"
    fig.suptitle(title if shared else f"{title} (each run on its own time axis)")
    handles = [*axes[0, 0].get_legend_handles_labels()[0],
               *axes[0, 1].get_legend_handles_labels()[0]]
    legend_below(fig, handles, [h.get_label() for h in handles])
    return fig


def _rate_panel(ax, label: str, steps) -> None:
    edges, rate = hit_rate_series(steps)
    ax.stairs(rate, edges, baseline=None, color=RATE_COLOR, linewidth=1.2,
              label="hit rate: cached / (cached + prefilled) prompt tokens, per time slice "
                    "(re-admissions after a preemption too)")
    ax.set_title(label, loc="left")
    ax.set_ylabel("hit rate")
    ax.set_ylim(0, 105)
    ax.yaxis.set_major_formatter(PercentFormatter())


def _blocks_panel(ax, steps) -> None:
    start, end = steps["start_s"], steps["end_s"]
    share = 100.0 / max(steps["kv_blocks_total"], 1)
    cached = np.asarray(steps["kv_blocks_cached"], float) * share  # [n]
    t, y = minmax(np.asarray(start, float), cached)  # cached blocks outlast idle time
    ax.step(t, y, where="post", color=CACHED_COLOR, linewidth=1.2,
            label="KV blocks cached (held or evictable)")
    used = np.asarray(steps["kv_blocks_used"], float) * share
    t, y = minmax(*step_series(start, end, used, 0.0))
    ax.fill_between(t, y, step="post", color=USED_COLOR, alpha=0.25, linewidth=0,
                    label="KV blocks in use")
    ax.set_ylabel("share of KV blocks")
    ax.set_ylim(0, 105)
    ax.yaxis.set_major_formatter(PercentFormatter())
