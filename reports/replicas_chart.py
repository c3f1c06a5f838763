"""The load balance of cluster runs, a row per run: each replica's request throughput (bars;
a disaggregated prefill replica's: the counted requests it prefilled, per second), its queue
length (requests waiting) over time and the share of its KV blocks in use over time (a line
per replica; the axis names each pool's replicas). A router that spreads the load well gives
bars of one height and lines that overlap; one that herds requests gives a replica whose queue
grows while others idle.
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from .figures import legend_below, new_figure, png_bytes, run_colors
from .replica_table import prefilled_throughputs, replica_row
from .timeline_chart import minmax, step_series

ROW_HEIGHT_IN = 2.4
# Replicas each named (a tick under its bar, a legend entry for its lines) up to this many; a
# larger cluster gets whole-number ticks and its lines no legend (thousands of labels would
# take minutes to lay out and could not be read)
NAMED_REPLICAS = 32


def replicas_chart(runs) -> bytes:
    """`runs`: [(label, ClusterRecorder, summary, warm-up seconds, each replica's pool name)]
    -> PNG bytes."""
    return png_bytes(replicas_figure(runs))


def replicas_figure(runs):
    """The chart's matplotlib Figure: throughput, queue length and KV use, a row per run."""
    fig, axes = new_figure(len(runs), 3, 12, 1.4 + ROW_HEIGHT_IN * len(runs),
                           gridspec_kw={"width_ratios": [1, 2, 2]})
    most = max(len(recorder.replicas) for _, recorder, *_ in runs)
    for (bars, queue, kv), (label, recorder, summary, warmup_s, pools) in zip(axes, runs):
        colors = run_colors(most)[:len(recorder.replicas)]  # replica i one colour in every row
        throughput = _throughputs(recorder, summary["duration_s"], warmup_s)
        bars.bar(range(len(throughput)), throughput, color=colors)
        bars.set_title(label, loc="left")
        bars.set_xlabel(f"replica ({pool_spans(pools)})" if any(pools) else "replica")
        bars.set_ylabel("requests/s" if not recorder.prefill_replicas
                        else "requests/s (prefill: prefilled)")
        named = len(throughput) <= NAMED_REPLICAS
        if named:
            bars.set_xticks(range(len(throughput)))
        else:
            bars.xaxis.set_major_locator(MaxNLocator(integer=True))
        t0 = recorder.origin_s()
        for i, (replica, color) in enumerate(zip(recorder.replicas, colors)):
            steps = replica.step_columns(t0)
            start, end = steps["start_s"], steps["end_s"]
            if not len(start):
                continue
            t, y = minmax(*step_series(start, end, steps["num_waiting"], None))
            queue.step(t, y, where="post", color=color, linewidth=1.0,
                       label=f"replica {i}" if named else None)
            logged = recorder.kv_used(i)  # between steps too
            if logged is None:
                used = np.asarray(steps["kv_blocks_used"], float)
                t, y = step_series(start, end, 100.0 * used / steps["kv_blocks_total"], 0.0)
            else:
                t, y = logged[0], 100.0 * logged[1] / steps["kv_blocks_total"]
            t, y = minmax(t, y)
            kv.step(t, y, where="post", color=color, linewidth=1.0)
        queue.set_ylabel("requests waiting")
        queue.set_ylim(bottom=0)
        queue.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole requests
        kv.set_ylabel("KV in use (%)")
        kv.set_ylim(0, 105)
    for ax in axes[-1, 1:]:
        ax.set_xlabel("time from first arrival (s)")
    fig.suptitle("Load balance: each replica's throughput, queue and KV cache use")
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes[:, 1]),
                          key=lambda pair: len(pair[1]))
    legend_below(fig, handles, labels)
    return fig


def _throughputs(recorder, duration_s: float, warmup_s: float) -> list[float]:
    """Each replica's counted finished requests per second of the cluster's run; a prefill
    replica's (disaggregation): the counted finished requests it prefilled."""
    origin = recorder.origin_s()
    out = [replica_row(i, "", r, duration_s, origin, warmup_s)["request_throughput"]
           for i, r in enumerate(recorder.replicas)]
    prefilled = prefilled_throughputs(recorder, duration_s, warmup_s)
    return prefilled[:recorder.prefill_replicas] + out[recorder.prefill_replicas:]


def pool_spans(pools: list[str]) -> str:
    """Each pool's replicas, in order: "prefill 0-1, decode 2-3"."""
    spans, start = [], 0
    for i in range(1, len(pools) + 1):
        if i == len(pools) or pools[i] != pools[start]:
            spans.append(f"{pools[start]} {start}" + (f"-{i - 1}" if i - 1 > start else ""))
            start = i
    return ", ".join(spans)
