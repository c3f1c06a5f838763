"""replicas.csv: one row per replica of every cluster run, to see how evenly a router spread
the load: the requests sent to it (a prefill replica's: those it prefilled and handed on, and
any it still held), what it served of the requests the summary counts (those arriving after
any warm-up; per second of the cluster's run as the summary counts it, so they add up to the
summary's throughputs), its queue length (requests waiting) and the share of its KV blocks in
use, as means over its steps and maxima (0 for a replica that ran no step); with
disaggregation, what each prefill replica prefilled a second (`prefilled_throughput`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.benchmark import counted
from engine.cluster_records import ClusterRecorder

from .tables import label_values, run_keys

COLUMNS = ("replica", "pool", "requests", "completed", "request_throughput",
           "output_throughput", "queue_mean", "queue_max", "kv_util_mean", "kv_util_max",
           "prefilled_throughput")


def cluster_results(results, summaries=None):
    """The (spec, recorder[, summary]) of the runs of `results` that ran on a cluster."""
    rows = zip(results, summaries) if summaries is not None else ((r, None) for r in results)
    return [(spec, rec, summary) for (spec, rec), summary in rows
            if isinstance(rec, ClusterRecorder)]


def pool_names(config) -> list[str]:
    """Each replica's pool name (empty for `cluster.replicas` copies; "prefill" or "decode"
    in a disaggregated cluster)."""
    cluster = config.cluster
    if cluster.prefill_replicas:
        return ["prefill"] * cluster.prefill_replicas + ["decode"] * cluster.decode_replicas
    if not cluster.pools:
        return [""] * cluster.replicas
    return [pool.name for pool in cluster.pools for _ in range(pool.replicas)]


def replicas_table(results, summaries: list[dict]) -> pd.DataFrame | None:
    """The rows of every cluster run's replicas (None when no run is a cluster's)."""
    clusters = cluster_results(results, summaries)
    if not clusters:
        return None
    keys = run_keys(results)
    rows = []
    for spec, recorder, summary in clusters:
        handed_off = handed_off_counts(recorder)
        origin, warmup_s = recorder.origin_s(), spec.config.workload.warmup_s
        prefilled = prefilled_throughputs(recorder, summary["duration_s"], warmup_s)
        for index, (replica, pool) in enumerate(zip(recorder.replicas,
                                                    pool_names(spec.config))):
            row = replica_row(index, pool, replica, summary["duration_s"], origin, warmup_s)
            row["requests"] += handed_off.get(index, 0)
            row["prefilled_throughput"] = prefilled[index]
            rows.append(dict(zip(keys, label_values(spec, keys))) | row)
    frame = pd.DataFrame(rows)
    if not any(recorder.prefill_replicas for _, recorder, _ in clusters):
        frame = frame.drop(columns="prefilled_throughput")  # disaggregation's alone
    return frame if (frame["pool"] != "").any() else frame.drop(columns="pool")


def prefilled_throughputs(recorder, duration_s: float, warmup_s: float) -> list[float]:
    """Per replica of a cluster run, the counted finished requests it prefilled, per second of
    the run: with disaggregation, a prefill replica's work (it completes none); 0 for every
    other replica."""
    out = [0.0] * len(recorder.replicas)
    if recorder.prefill_replicas:
        cols = recorder.request_columns()
        done = (np.asarray(cols["status"]) == "finished") & counted(cols, warmup_s)
        # (a request never sent to a replica has no prefill replica, and never finished)
        prefilled = np.asarray([p for p, d in zip(cols["prefill_replica"], done) if d], float)
        for i in range(recorder.prefill_replicas):
            out[i] = float(np.sum(prefilled == i)) / duration_s
    return out


def handed_off_counts(recorder) -> dict[int, int]:
    """{prefill replica: requests it prefilled and handed to a decode replica} of a
    disaggregated cluster run (empty otherwise): those requests are recorded where they
    decode, and were sent to it first."""
    counts: dict[int, int] = {}
    for replica in recorder.replicas:
        for transfer in replica.transfers.values():
            counts[transfer.prefill_replica] = counts.get(transfer.prefill_replica, 0) + 1
    return counts


def replica_row(index: int, pool: str, recorder, duration_s: float, origin_s: float | None = None,
                warmup_s: float = 0.0) -> dict:
    """One replica's figures (`duration_s`: the cluster run's; what it completed counted as
    the summary counts it: the requests arriving from `warmup_s` after the cluster's first
    arrival, `origin_s`)."""
    requests = recorder.request_columns(origin_s)
    done = (np.asarray(requests["status"]) == "finished") & counted(requests, warmup_s)
    steps = recorder.step_columns()
    waiting = np.asarray(steps["num_waiting"], float)
    kv = np.asarray(steps["kv_blocks_used"], float) / recorder.kv_blocks_total
    ran = recorder.num_steps > 0  # an idle replica queued and held nothing: 0, not NaN
    return {"replica": index, "pool": pool, "requests": recorder.num_requests,
            "completed": int(done.sum()),
            "request_throughput": done.sum() / duration_s,
            "output_throughput": np.asarray(requests["output_tokens"])[done].sum() / duration_s,
            "queue_mean": waiting.mean() if ran else 0.0,
            "queue_max": int(waiting.max()) if ran else 0,
            "kv_util_mean": kv.mean() if ran else 0.0,
            "kv_util_max": kv.max() if ran else 0.0}
