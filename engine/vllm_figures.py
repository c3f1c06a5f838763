"""What vLLM's `bench serve` result file adds to the figures of `benchmark.summarize`, over the
same requests and gaps: its names and order (`vllm_summary`, latencies in milliseconds), the
standard deviations (`latency_std`), any percentile of any latency (`metric_percentiles`, its
`--metric-percentiles`) and its two peaks (`peak_figures`). The definitions are in
docs/benchmark/metrics.md.

- Standard deviations (for vLLM's `std_*_ms`) are population ones (NumPy's default).
- The peaks: the most output tokens sampled in one second (one-second buckets from the first
  counted request's arrival) and the most finished requests in flight.
"""

from __future__ import annotations

import math

import numpy as np

from .benchmark import (LATENCIES, PREFIX_CACHE_KEYS, counted, counted_requests, defined_values,
                        itl_weights, latency_percentiles, weighted_percentile)
from .records import RunRecorder

_VLLM_NAMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
THEIR_NAMES = {theirs: ours for ours, theirs in _VLLM_NAMES.items()}
VLLM_METRICS = tuple(_VLLM_NAMES.values())  # vLLM's --percentile-metrics choices
_VLLM_STATS = {"mean": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99"}


def latency_std(recorder: RunRecorder, warmup_s: float = 0.0) -> dict:
    """Standard deviations of the latencies `summarize` describes, over the same requests and
    gaps: {ttft, tpot, itl, e2e, queue}_std_s. Population standard deviation (NumPy's default,
    ddof 0), as vLLM reports; ITL token-weighted from the (gap, count) pairs, equal to
    np.std(np.repeat(gaps, counts)) without expanding them. NaN when there is no value."""
    _, _, _, metrics = counted_requests(recorder, warmup_s)
    out = {}
    for name in ("ttft", "tpot", "e2e", "queue"):
        values = defined_values(name, metrics[f"{name}_s"])
        out[f"{name}_std_s"] = float(values.std()) if values.size else math.nan
    gaps, counts = itl_weights(recorder, warmup_s)
    total = counts.sum()
    if total:
        mean = gaps @ counts / total
        out["itl_std_s"] = float(math.sqrt(((gaps - mean) ** 2) @ counts / total))
    else:
        out["itl_std_s"] = math.nan
    return {f"{name}_std_s": out[f"{name}_std_s"] for name in LATENCIES}


def metric_percentiles(recorder, percentiles, metrics=VLLM_METRICS,
                       warmup_s: float = 0.0) -> dict:
    """vLLM's `--metric-percentiles` of its `--percentile-metrics`: {`p<P>_<metric>_ms`: value}
    for each metric (vLLM's names: ttft, tpot, itl, e2el) and each percentile P (written as
    vLLM writes it: 50 as "50", 99.9 as "99.9"), in milliseconds, over the same requests and
    gaps as `summarize`'s percentiles; NaN where there is no value."""
    _, _, _, per_request = counted_requests(recorder, warmup_s)
    gaps, counts = itl_weights(recorder, warmup_s)
    out = {}
    for metric in metrics:
        ours = THEIR_NAMES[metric]
        if ours == "itl":
            values = weighted_percentile(gaps, counts.astype(np.int64), percentiles) \
                if counts.sum() else [math.nan] * len(percentiles)
        else:
            values = list(latency_percentiles(defined_values(ours, per_request[f"{ours}_s"]),
                                              percentiles).values())
        for p, value in zip(percentiles, values):
            out[f"p{percentile_word(p)}_{metric}_ms"] = float(value) * 1000.0
    return out


def percentile_word(p: float) -> str:
    """A percentile as vLLM names it in its keys: 50.0 -> "50", 99.9 -> "99.9"."""
    return str(int(p)) if float(p).is_integer() else str(p)


def peak_figures(recorder, warmup_s: float = 0.0) -> dict:
    """vLLM's two peaks of one run. `max_output_tokens_per_s`: the most output tokens sampled
    within one second, in one-second buckets from the first counted finished request's
    arrival (vLLM's `start_time`), over the tokens sampled from `warmup_s` on: first tokens
    and the tokens the ITL figures count. `max_concurrent_requests`: the most counted finished
    requests in flight at once, each over [arrival, finish) (one ending as another starts
    overlaps it not). Both 0 when no counted request finished, as vLLM writes them."""
    cols = recorder.request_columns()
    arrival = np.asarray(cols["arrival_s"], float)
    done = counted(cols, warmup_s) & (np.asarray(cols["status"], dtype=object) == "finished")
    if not done.any():
        return {"max_output_tokens_per_s": 0.0, "max_concurrent_requests": 0}
    origin = float(arrival[done].min())
    first = np.asarray(cols["first_token_s"], float)
    first = first[~np.isnan(first) & (first >= warmup_s)]
    _, counts = itl_weights(recorder, warmup_s)
    times = np.concatenate([first, recorder.itl_end_s()]) - origin
    weights = np.concatenate([np.ones(first.size), counts])
    kept = times >= 0  # vLLM's buckets start at its first request
    # only the seconds that hold a token: a run's span never sizes an array
    _, bucket = np.unique(np.floor(times[kept]), return_inverse=True)
    per_second = np.bincount(bucket.ravel(), weights=weights[kept])
    return {"max_output_tokens_per_s": float(per_second.max(initial=0.0)),
            "max_concurrent_requests": peak_overlap(
                arrival[done], np.asarray(cols["finish_s"], float)[done])}


def peak_overlap(starts, ends) -> int:
    """The most of the intervals [start, end) that hold at one instant (an end before a start
    at the same instant); 0 for none. `ends` may be inf (never ended)."""
    edges = np.concatenate([np.asarray(starts, float), np.asarray(ends, float)])
    if not edges.size:
        return 0
    n = edges.size // 2
    change = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    return int(np.cumsum(change[np.lexsort((change, edges))]).max())


def vllm_summary(summary: dict, std: dict | None = None, peaks: dict | None = None) -> dict:
    """One run's figures under vLLM `bench serve` result-file names, in its order (latencies in
    milliseconds): duration, completed, failed, tokens, throughputs, `max_output_tokens_per_s`
    and `max_concurrent_requests`, then for TTFT, TPOT, ITL and E2E `mean_*_ms, median_*_ms,
    std_*_ms, p90_*_ms, p95_*_ms, p99_*_ms`; then what vLLM does not report, in the same style:
    `max_*_ms`, queueing time (`*_queue_ms`), `rejected`, `unfinished`, `preemptions`,
    `mean_batch_size`, `mean_kv_util`, `max_kv_util` (fractions of the KV blocks),
    `prefix_cache_hit_rate`, `prefix_cache_block_hit_rate`, `prefill_tokens_saved`. `failed` =
    rejected + unfinished. `std`: `latency_std` of the same run, `peaks`: its `peak_figures`
    (without them those keys are NaN)."""
    std, peaks = std or {}, peaks or {}
    out = {"duration": summary["duration_s"], "completed": summary["completed"],
           "failed": summary["rejected"] + summary["unfinished"],
           "total_input_tokens": summary["total_input_tokens"],
           "total_output_tokens": summary["total_output_tokens"],
           "request_throughput": summary["request_throughput"],
           "request_goodput": summary["goodput"],
           "output_throughput": summary["output_throughput"],
           "total_token_throughput": summary["total_token_throughput"]}
    for key in ("max_output_tokens_per_s", "max_concurrent_requests"):
        out[key] = peaks.get(key, math.nan)
    for ours, theirs in _VLLM_NAMES.items():
        out.update(_vllm_latency(summary, std, ours, theirs))
    for ours, theirs in _VLLM_NAMES.items():
        out[f"max_{theirs}_ms"] = summary[f"{ours}_max_s"] * 1000.0
    out.update(_vllm_latency(summary, std, "queue", "queue"))
    out["max_queue_ms"] = summary["queue_max_s"] * 1000.0
    out.update({"rejected": summary["rejected"], "unfinished": summary["unfinished"],
                "preemptions": summary["preemptions"],
                "mean_batch_size": summary["mean_batch_size"],
                "mean_kv_util": summary["kv_util_mean"], "max_kv_util": summary["kv_util_max"]})
    out.update({key: summary[key] for key in PREFIX_CACHE_KEYS})
    return out


def _vllm_latency(summary: dict, std: dict, ours: str, theirs: str) -> dict:
    """mean, median, std, p90, p95, p99 of one latency, in vLLM's names and milliseconds."""
    out = {}
    for stat, vllm_stat in _VLLM_STATS.items():
        if vllm_stat == "p90":  # vLLM writes the standard deviation after the median
            out[f"std_{theirs}_ms"] = std.get(f"{ours}_std_s", math.nan) * 1000.0
        out[f"{vllm_stat}_{theirs}_ms"] = summary[f"{ours}_{stat}_s"] * 1000.0
    return out
