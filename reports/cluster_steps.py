"""A cluster's steps as one engine's, for the charts that draw a run over time (the timeline,
the prefix cache): at every instant, the replicas' running and waiting requests, KV blocks in
use and cached, summed; their prefill and cached tokens counted in the slice their step
starts in.

A replica's value holds from its step's start to its end; while it is idle it runs nothing, and
keeps its waiting requests (nothing is admitted while idle) and its cached blocks. Its KV
blocks in use come from its log of them (`ClusterRecorder.kv_series`), exact between steps too:
a disaggregated prefill replica holds the blocks of requests whose KV is still being sent.
`chart_steps(recorder)` gives a single engine's step columns as they are.
"""

from __future__ import annotations

import numpy as np

from engine.cluster_records import ClusterRecorder

SUMMED = ("num_running", "num_waiting", "kv_blocks_used", "kv_blocks_cached")
COUNTED = ("cached_tokens", "num_prefill_tokens")


def chart_steps(recorder) -> dict:
    """Step columns to draw a run over time: a cluster's summed (`cluster_steps`)."""
    if isinstance(recorder, ClusterRecorder):
        return cluster_steps(recorder)
    return recorder.step_columns()


def cluster_steps(recorder: ClusterRecorder) -> dict:
    """The replicas' step columns summed on the union of their step boundaries: one row per
    interval between consecutive boundaries (`start_s`, `end_s`), `kv_blocks_total` of all."""
    steps = recorder.step_columns()
    replica = np.asarray(steps["replica"])
    start, end = np.asarray(steps["start_s"], float), np.asarray(steps["end_s"], float)
    logged = [recorder.kv_used(r) for r in range(len(recorder.replicas))] \
        if recorder.kv_series is not None else None
    changes = [times for times, _ in logged] if logged else []
    grid = np.unique(np.concatenate([start, end, *changes]))  # [m] every boundary
    columns = {"start_s": grid[:-1], "end_s": grid[1:]}
    for name in SUMMED + COUNTED:
        columns[name] = np.zeros(max(len(grid) - 1, 0))
    for r in np.unique(replica):
        mine = replica == r
        own_start, own_end = start[mine], end[mine]  # [n_r] each, in step order
        step = np.searchsorted(own_start, grid[:-1], side="right") - 1  # [m - 1]
        started = step >= 0
        last = np.maximum(step, 0)
        busy = started & (grid[:-1] < own_end[last])
        for name in SUMMED:
            if name == "kv_blocks_used" and logged:
                continue  # from the replica's log below
            values = np.asarray(steps[name], float)[mine][last]
            held = started if name in ("kv_blocks_cached", "num_waiting") else busy
            columns[name] += np.where(held, values, 0.0)
        slot = np.searchsorted(grid, own_start)  # the interval each step starts
        for name in COUNTED:
            np.add.at(columns[name], slot, np.asarray(steps[name], float)[mine])
    for times, used in logged or ():  # each replica's KV use, between its steps too
        if not len(times):  # a replica the router sent nothing
            continue
        k = np.searchsorted(times, grid[:-1], side="right") - 1
        columns["kv_blocks_used"] += np.where(k >= 0, used[np.maximum(k, 0)], 0)
    columns["kv_blocks_total"] = recorder.kv_blocks_total
    return columns
