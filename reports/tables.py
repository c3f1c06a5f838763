"""The run's tables, as pandas DataFrames built from the recorders.

Every figure comes from the engine's metric functions (`engine.benchmark.request_metrics`,
`summarize`); nothing here computes a latency or a percentile of its own (the vLLM-layout
records are in vllm_json.py). Each
table starts with `variant` and one column per sweep key, so the runs of a scenario stack into
one file.

`results` is what the simulator returns: [(RunSpec, RunRecorder), ...].
"""

from __future__ import annotations

import pandas as pd

from engine.benchmark import counted, request_metrics, summarize
from scenarios.sweep import point_text

REQUEST_COLUMNS = ("request_id", "priority", "arrival_s", "first_scheduled_s", "first_token_s",
                   "finish_s", "prompt_tokens", "output_tokens", "cached_tokens", "ttft_s",
                   "tpot_s", "e2e_s", "queue_s", "preemptions", "status", "reject_reason",
                   "counted")
STEP_COLUMNS = ("step", "start_s", "end_s", "num_prefill_tokens", "num_prefill_seqs",
                "num_decode_seqs", "num_padding_seqs", "num_running", "num_waiting",
                "kv_blocks_used", "kv_blocks_total", "preemptions", "cached_tokens",
                "kv_blocks_cached")
# a cluster's run: the replica that served a request, and a disaggregated cluster's
# prefill replica, KV transfer time and first token at the decode replica
CLUSTER_COLUMNS = ("replica", "prefill_replica", "kv_transfer_s", "decode_first_token_s")
INT_COLUMNS = ("priority", "prompt_tokens", "output_tokens", "cached_tokens", "preemptions",
               "step", "num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs",
               "num_padding_seqs", "num_running", "num_waiting", "kv_blocks_used",
               "kv_blocks_total", "kv_blocks_cached")


def run_keys(results) -> list[str]:
    """`variant` plus the sweep keys, in order: the columns that identify a run."""
    keys = ["variant"]
    for spec, _ in results:
        keys += [key for key in spec.sweep if key not in keys]
    return keys


def _label_columns(spec, keys: list[str]) -> dict:
    """A run's variant and sweep values; a swept table or list as TOML writes it."""
    return {key: spec.variant if key == "variant" else _cell(spec.sweep.get(key))
            for key in keys}


def _cell(value):
    return point_text(value) if isinstance(value, (dict, list)) else value


def label_values(spec, keys: list[str]) -> list:
    """A run's values of the run columns `keys` (its variant, then its sweep values)."""
    return list(_label_columns(spec, keys).values())


def _frame(columns: dict, spec, keys: list[str], order) -> pd.DataFrame:
    frame = pd.DataFrame({name: columns[name] for name in order})
    for name in order:
        if name in INT_COLUMNS:  # whole numbers; a count no one saw (a client's) is empty
            frame[name] = frame[name].astype("Int64" if frame[name].isna().any() else "int64")
    for position, (key, value) in enumerate(_label_columns(spec, keys).items()):
        frame.insert(position, key, [value] * len(frame))
    return frame


def request_frame(spec, recorder, keys: list[str] | None = None) -> pd.DataFrame:
    """One row per request of one run: its times, lengths and the derived latencies (and, in
    a cluster's run, its `replica` first)."""
    columns = dict(recorder.request_columns())
    columns.update(request_metrics(columns))
    reasons = recorder.reject_reasons
    columns["reject_reason"] = [reasons.get(rid, "") for rid in columns["request_id"]]
    columns["counted"] = counted(columns, spec.config.workload.warmup_s)  # in the figures
    return _frame(columns, spec, keys or ["variant", *spec.sweep],
                  _with_replica(columns, REQUEST_COLUMNS))


def step_frame(spec, recorder, keys: list[str] | None = None) -> pd.DataFrame:
    """One row per engine step of one run (of each replica, in a cluster's run)."""
    columns = recorder.step_columns()
    return _frame(columns, spec, keys or ["variant", *spec.sweep],
                  _with_replica(columns, STEP_COLUMNS))


def _with_replica(columns: dict, order: tuple) -> tuple:
    """`order`, after a `replica` column where the rows have one (a cluster's run), and a
    disaggregated cluster's `prefill_replica`, `kv_transfer_s` and `decode_first_token_s`."""
    cluster = [name for name in CLUSTER_COLUMNS if name in columns]
    return (*cluster, *order)


def requests_table(results) -> pd.DataFrame:
    """Every run's requests, one table: the run keys, a cluster's columns where any run has
    them (empty in the others' rows), then REQUEST_COLUMNS, whatever the runs' order."""
    keys = run_keys(results)
    frame = pd.concat([request_frame(spec, rec, keys) for spec, rec in results],
                      ignore_index=True)
    order = [*keys, *CLUSTER_COLUMNS, *REQUEST_COLUMNS]
    return frame[[name for name in order if name in frame.columns]]


def steps_table(results) -> pd.DataFrame:
    keys = run_keys(results)
    return pd.concat([step_frame(spec, rec, keys) for spec, rec in results], ignore_index=True)


def run_summaries(results) -> list[dict]:
    """`summarize` of every run, with the run's SLO and warm-up."""
    return [summarize(recorder, spec.config.slo.limits(), spec.config.workload.warmup_s)
            for spec, recorder in results]


def summary_table(results, summaries: list[dict] | None = None) -> pd.DataFrame:
    """One row per run: the run keys, then every figure of `summarize` in its order."""
    summaries = summaries if summaries is not None else run_summaries(results)
    keys = run_keys(results)
    rows = [_label_columns(spec, keys) | summary for (spec, _), summary in zip(results, summaries)]
    return pd.DataFrame(rows)
