"""Serving metrics: the one implementation of the definitions in docs/benchmark/metrics.md
(vLLM's conventions).

- TTFT = first token - arrival; E2E = finish - arrival; queue = first scheduled - arrival.
- TPOT = (E2E - TTFT) / (output tokens - 1), per request; undefined (NaN) for one output token
  and left out of TPOT statistics.
- ITL = every gap between consecutive tokens of a request, pooled over requests (token-weighted),
  first tokens excluded; read exactly from the recorder's (gap, count) pairs.
- Throughputs divide by the run's duration, first arrival to last finish, counting finished
  requests. Goodput = finished requests per second that meet every SLO given.
- Percentiles interpolate linearly (NumPy's default); empty input gives NaN, never a fake 0.
- Prefix caching: the hit rate is the share of the counted requests' prompt tokens that their
  first admission found cached (requests never admitted left out; NaN when none was), the block
  hit rate the same over full prompt blocks, and the prefill tokens saved every step's cached
  tokens, re-admissions after a preemption included.
- A cluster's run (`ClusterRecorder`): every request and inter-token gap of every replica;
  the step figures are the mean of the replicas' own (batch size, KV use mean) and the
  largest KV use of any replica.

What vLLM's result file adds (its names, standard deviations, any percentile, its peaks) is in
`vllm_figures.py`, over the same requests and gaps.

The engine's part 8 steps (`time_to_first_token`, `inter_token_latency`, `aggregate_throughput`,
`latency_percentiles`, `run_benchmark`) are the building blocks `summarize` uses; reports read
`summarize`, `request_metrics` and `vllm_figures` and never recompute a metric themselves.
"""

from __future__ import annotations

import math

import numpy as np

from .cluster_records import ClusterRecorder
from .records import RunRecorder

PERCENTILES = (50, 90, 95, 99)
STATS = ("mean", "p50", "p90", "p95", "p99", "max")
LATENCIES = ("ttft", "tpot", "itl", "e2e", "queue")
SLO_KEYS = ("ttft_s", "tpot_s", "e2e_s")
PREFIX_CACHE_KEYS = ("prefix_cache_hit_rate", "prefix_cache_block_hit_rate",
                     "prefill_tokens_saved")


# --- the engine's part 8 steps --------------------------------------------------------------


def time_to_first_token(arrival_s, first_token_s):
    """First-token time minus arrival, elementwise over scalars or arrays (seconds)."""
    return np.subtract(np.asarray(first_token_s, float), np.asarray(arrival_s, float))


def time_per_output_token(arrival_s, first_token_s, finish_s, output_tokens):
    """(E2E - TTFT) / (output tokens - 1) elementwise; NaN where a request has < 2 tokens."""
    n = np.asarray(output_tokens, float)
    decode_s = np.subtract(np.asarray(finish_s, float), np.asarray(first_token_s, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 1, decode_s / (n - 1), np.nan)


def inter_token_latency(token_times_s) -> np.ndarray:
    """Gaps between consecutive token times of one request: [n] times -> [n - 1] gaps."""
    times = np.asarray(token_times_s, float)
    if times.ndim != 1:
        raise ValueError(f"inter_token_latency: token times must be 1-D, got shape {times.shape}")
    return np.diff(times)


def aggregate_throughput(num_requests: int, prompt_tokens: int, output_tokens: int,
                         duration_s: float) -> dict:
    """Requests, output tokens and all tokens per second over `duration_s` (NaN when the
    duration is NaN, i.e. nothing finished)."""
    if not duration_s > 0 and not math.isnan(duration_s):
        raise ValueError(f"aggregate_throughput: duration_s must be > 0, got {duration_s}")
    return {"request_throughput": num_requests / duration_s,
            "output_throughput": output_tokens / duration_s,
            "total_token_throughput": (prompt_tokens + output_tokens) / duration_s}


def latency_percentiles(latencies_s, percentiles=PERCENTILES) -> dict:
    """{p: value} by linear interpolation ([1, 2, 3, 4] -> p50 2.5, p90 3.7). Empty input gives
    NaN for each; NaN entries raise (leave undefined values out first)."""
    values = np.asarray(latencies_s, float).ravel()
    if np.isnan(values).any():
        raise ValueError("latency_percentiles: input holds NaN; drop undefined values first")
    if values.size == 0:
        return {p: math.nan for p in percentiles}
    return dict(zip(percentiles, np.percentile(values, percentiles).tolist()))


def run_benchmark(scheduler, executor, requests, *, slo: dict | None = None,
                  recorder: RunRecorder | None = None, time_limit_s: float | None = None) -> dict:
    """The harness: serve `requests` (Sequences with arrival_s set; all 0 for an offline burst)
    in real time through the engine and return `summarize` of the run."""
    from .server import serve  # the server imports the engine loop; keep metrics import-light

    if recorder is None:
        recorder = RunRecorder(scheduler.block_manager.num_blocks)
    serve(scheduler, executor, requests, recorder, time_limit_s=time_limit_s)
    return summarize(recorder, slo)


# --- run summaries -------------------------------------------------------------------------------


def weighted_percentile(values, counts, q):
    """Percentile(s) `q` (0-100) of the multiset holding values[i] counts[i] times; equal to
    np.percentile(np.repeat(values, counts), q) without expanding it. NaN when it is empty."""
    v, c = np.asarray(values, float).ravel(), np.asarray(counts, np.int64).ravel()
    if v.shape != c.shape or (c < 0).any():
        raise ValueError("weighted_percentile: values and counts must match and counts be >= 0")
    q = np.asarray(q, float)
    if ((q < 0) | (q > 100)).any():
        raise ValueError(f"weighted_percentile: q must be in [0, 100], got {q}")
    keep = c > 0
    order = np.argsort(v[keep], kind="stable")
    v, cum = v[keep][order], np.cumsum(c[keep][order])
    if v.size == 0:
        return np.full(q.shape, math.nan)[()]
    n = int(cum[-1])
    index = (n - 1) * (q / 100)  # NumPy's "linear" virtual index into the sorted multiset
    below = np.floor(index)
    lo = v[np.searchsorted(cum, np.minimum(below, n - 1), side="right")]
    hi = v[np.searchsorted(cum, np.minimum(below + 1, n - 1), side="right")]
    t, diff = index - below, hi - lo
    return np.where(t >= 0.5, hi - diff * (1 - t), lo + diff * t)[()]  # NumPy's lerp


def request_metrics(columns) -> dict:
    """Per-request ttft_s, tpot_s, e2e_s, queue_s arrays from request columns (RunRecorder's
    `request_columns()` or a table with the same names); NaN where undefined."""
    arrival = np.asarray(columns["arrival_s"], float)
    first_token = np.asarray(columns["first_token_s"], float)
    finish = np.asarray(columns["finish_s"], float)
    return {"ttft_s": time_to_first_token(arrival, first_token),
            "tpot_s": time_per_output_token(arrival, first_token, finish, columns["output_tokens"]),
            "e2e_s": finish - arrival,
            "queue_s": np.asarray(columns["first_scheduled_s"], float) - arrival}


def _stats(name: str, values) -> dict:
    values = np.asarray(values, float)
    empty = values.size == 0
    pct = latency_percentiles(values)
    return {f"{name}_mean_s": math.nan if empty else float(values.mean()),
            **{f"{name}_p{p}_s": pct[p] for p in PERCENTILES},
            f"{name}_max_s": math.nan if empty else float(values.max())}


def itl_weights(recorder: RunRecorder, warmup_s: float = 0.0):
    """The recorder's inter-token gaps [n] and how many tokens had each [n] (as floats), the
    gaps of tokens sampled before `warmup_s` weighing 0."""
    gaps, counts = np.asarray(recorder.itl_gaps), np.asarray(recorder.itl_counts, float)
    if warmup_s > 0:  # the gaps of tokens sampled before it
        counts = np.where(recorder.itl_end_s() >= warmup_s, counts, 0.0)
    return gaps, counts


def _itl_stats(recorder: RunRecorder, warmup_s: float = 0.0) -> dict:
    gaps, counts = itl_weights(recorder, warmup_s)
    total = counts.sum()
    pct = weighted_percentile(gaps, counts.astype(np.int64), PERCENTILES) if total else \
        [math.nan] * len(PERCENTILES)
    return {"itl_mean_s": float(gaps @ counts / total) if total else math.nan,
            **{f"itl_p{p}_s": float(x) for p, x in zip(PERCENTILES, pct)},
            "itl_max_s": float(gaps[counts > 0].max()) if total else math.nan}


def meets_slo(metrics: dict, slo: dict | None) -> np.ndarray:
    """Per request: True when it meets every SLO given ({"ttft_s", "tpot_s", "e2e_s"}; None
    values are ignored). An undefined TPOT (one output token) meets any TPOT SLO."""
    slo = {k: v for k, v in (slo or {}).items() if v is not None}
    unknown = sorted(set(slo) - set(SLO_KEYS))
    if unknown:
        raise ValueError(f"slo: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(SLO_KEYS)}")
    ok = np.ones(len(metrics["ttft_s"]), bool)
    for key, limit in slo.items():
        values = metrics[key]
        ok &= (values <= limit) | (np.isnan(values) if key == "tpot_s" else False)
    return ok


def counted(cols: dict, warmup_s: float = 0.0) -> np.ndarray:
    """[n] whether each request of the request columns `cols` counts in the figures: it
    arrived (was sent) from `warmup_s` on; those before are the warm-up's."""
    return np.asarray(cols["arrival_s"], float) >= warmup_s


def counted_requests(recorder: RunRecorder, warmup_s: float):
    """(request columns, the counted requests' statuses, the finished counted ones' mask, their
    request metrics): the requests that arrive before `warmup_s` are not counted."""
    cols = recorder.request_columns()
    status = np.asarray(cols["status"], dtype=object)
    kept = counted(cols, warmup_s)
    done = (status == "finished") & kept
    metrics = {k: v[done] for k, v in request_metrics(cols).items()}
    return cols, status[kept], done, metrics


def defined_values(name: str, values: np.ndarray) -> np.ndarray:
    """The values a statistic is taken over: TPOT leaves out the requests of one token, queueing
    the requests whose scheduling was not seen (a benchmarked server's, `sim.bench`)."""
    return values[~np.isnan(values)] if name in ("tpot", "queue") else values


def summarize(recorder: RunRecorder, slo: dict | None = None, warmup_s: float = 0.0) -> dict:
    """The summary figures of one run (summary.csv's columns, docs/reports/files.md).
    `warmup_s`: the requests that arrive before it are served but not counted, nor are the
    inter-token gaps of steps that end before it, and throughputs divide by the time from it
    to the last finish. `unfinished` also counts the requests a benchmarked server failed
    (status "failed", `sim.bench`)."""
    cols, status, done, metrics = counted_requests(recorder, warmup_s)
    completed = int(done.sum())
    prompt_tokens = int(np.asarray(cols["prompt_tokens"])[done].sum())
    output_tokens = int(np.asarray(cols["output_tokens"])[done].sum())
    # to the end of the last request, as vLLM's benchmark duration: a benchmarked server's
    # failed requests count too (a timeout at the end of an overloaded run)
    failed_end_s = recorder.failed_end_s(warmup_s)
    last_s = max(float(np.asarray(cols["finish_s"])[done].max()) if completed else -math.inf,
                 -math.inf if failed_end_s is None else failed_end_s)
    duration_s = last_s - warmup_s if completed else math.nan
    summary = {"completed": completed, "rejected": int((status == "rejected").sum()),
               "unfinished": int(np.isin(status, ("unfinished", "failed")).sum()),
               "duration_s": duration_s,
               "total_input_tokens": prompt_tokens, "total_output_tokens": output_tokens,
               **aggregate_throughput(completed, prompt_tokens, output_tokens, duration_s),
               "goodput": int(meets_slo(metrics, slo).sum()) / duration_s}
    for name in ("ttft", "tpot", "e2e", "queue"):
        summary.update(_stats(name, defined_values(name, metrics[f"{name}_s"])))
    summary.update(_itl_stats(recorder, warmup_s))
    summary.update(_step_stats(recorder))
    summary.update(_prefix_cache_stats(recorder, cols, warmup_s))
    return summary


def _prefix_cache_stats(recorder: RunRecorder, cols: dict, warmup_s: float) -> dict:
    """The prefix cache's hit rates over the counted requests that were admitted (prompt
    tokens found cached at first admission / prompt tokens, and the same in full blocks: NaN
    without the block size), and the prefill tokens every step's admissions skipped."""
    admitted = counted(cols, warmup_s) & \
        ~np.isnan(np.asarray(cols["first_scheduled_s"], float))
    prompt = np.asarray(cols["prompt_tokens"], np.float64)[admitted].astype(np.int64)
    cached = np.asarray(cols["cached_tokens"], np.float64)[admitted].astype(np.int64)  # blocks
    size = recorder.block_size
    prompt_blocks, cached_blocks = ((int((prompt // size).sum()), int((cached // size).sum()))
                                    if size else (0, 0))
    return {"prefix_cache_hit_rate": _share(int(cached.sum()), int(prompt.sum())),
            "prefix_cache_block_hit_rate": _share(cached_blocks, prompt_blocks),
            "prefill_tokens_saved": int(np.sum(recorder.step_columns()["cached_tokens"]))
            if recorder.sees_steps else math.nan}


def _share(part: int, whole: int) -> float:
    """part / whole; NaN when there is no whole (never a fake 0)."""
    return part / whole if whole else math.nan


# A cluster's replica that ran no step (the router sent it nothing): it batched nothing and
# held no KV block, so it counts 0 in the cluster's means rather than being left out of them
IDLE_REPLICA = {"preemptions": 0, "mean_batch_size": 0.0, "kv_util_mean": 0.0,
                "kv_util_max": 0.0}


def _step_stats(recorder) -> dict:
    """Preemptions, and the batch size and KV use over the engine's steps; of a cluster
    (`ClusterRecorder`), every replica's preemptions, the mean of the replicas' means (an idle
    one's 0) and the largest KV use of any."""
    if isinstance(recorder, ClusterRecorder):
        per_replica = [_step_stats(replica) if replica.num_steps else IDLE_REPLICA
                       for replica in recorder.replicas]
        return {"preemptions": sum(s["preemptions"] for s in per_replica),
                "mean_batch_size": _mean([s["mean_batch_size"] for s in per_replica]),
                "kv_util_mean": _mean([s["kv_util_mean"] for s in per_replica]),
                "kv_util_max": max((s["kv_util_max"] for s in per_replica), key=_nan_low)}
    steps = recorder.step_columns()
    if not recorder.sees_steps:  # a client's benchmark: the server's steps are unknown
        return {name: math.nan for name in IDLE_REPLICA}
    kv = np.asarray(steps["kv_blocks_used"], float) / recorder.kv_blocks_total
    batch = np.asarray(steps["num_prefill_seqs"]) + np.asarray(steps["num_decode_seqs"])
    any_steps = recorder.num_steps > 0
    return {"preemptions": int(np.sum(steps["preemptions"])),
            "mean_batch_size": float(batch.mean()) if any_steps else math.nan,
            "kv_util_mean": float(kv.mean()) if any_steps else math.nan,
            "kv_util_max": float(kv.max()) if any_steps else math.nan}


def _mean(values: list) -> float:
    """The mean of the defined values; NaN if none."""
    defined = [v for v in values if not math.isnan(v)]
    return sum(defined) / len(defined) if defined else math.nan


def _nan_low(value: float) -> float:
    return -math.inf if math.isnan(value) else value
