"""Each run's summary as a vLLM `bench serve` result file: one flat JSON object per run, with
vLLM's keys in vLLM's order, so a script written for `vllm bench serve --save-result` files
reads servesim's unchanged.

- Files: `summary.json` when the scenario has one run, else `summary-<run label>.json` for each
  run (`summary_json_names`), as `bench serve` writes one file per benchmark run: every run's
  file matches `summary*.json`.
- Setup and traffic keys first (`date, backend, label, model_id, num_prompts, request_rate,
  burstiness, max_concurrency`), then `engine.vllm_figures.vllm_summary` (vLLM's figures, then what
  vLLM does not report under names in its style), then how servesim names the run (`scenario,
  variant, sweep, seed, arrival_process`, and with the hardware model `hardware`: the GPU, TP, DP,
  EP, dtypes, the framework modelled and its measured kernels' version, the KV cache's tokens on a
  rank, and in a cluster its replicas; with pools, the replicas and a record a pool).
- `date` is null unless given (`SOURCE_DATE_EPOCH`, the reproducible-builds convention, or the
  `date` argument): a clock reading would make two runs of the same seed differ.
- `request_rate` is the arrival rate of an open process, "inf" (vLLM's spelling) when every
  request is sent at once or by a closed loop, and for a trace, or conversations (whose process
  starts conversations, not requests), the mean rate of the requests' arrivals;
  `burstiness` is vLLM's gamma shape (1 / cv^2: 1 for Poisson, "inf" for constant gaps; 1 for
  a burst, as vLLM writes its flag's default at rate inf), null where arrivals have no such
  shape (a closed loop, a trace, conversations); `max_concurrency` is `workload.max_concurrency` (the cap
  on requests in flight, vLLM's `--max-concurrency`) or a closed loop's number of users.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from engine.vllm_figures import (VLLM_METRICS, latency_std, metric_percentiles, peak_figures,
                                 percentile_word, vllm_summary)

from .tables import run_summaries

DATE_FORMAT = "%Y%m%d-%H%M%S"  # vLLM's
MAX_SLUG = 160  # characters of a run's label in its file name (a longer one ends in a hash)
# A hardware-model run's `hardware` record: the model, the GPU, the layout, the dtypes, the
# framework modelled (its KV sizing; its kernels where measured) and the tables' version (null
# where the roofline costs every operator); the fp8 GEMMs' activation scales where they were
# measured with them; the experts' kernel where `moe_backend` chose one (Marlin's, Triton's)
# and whose tables timed it; and each operator's source, "measured" or "roofline" (empty where
# the roofline costs every one)
HARDWARE_KEYS = ("model", "gpu", "tp", "dp", "ep", "dtype", "kv_dtype", "activation_scheme",
                 "moe_kernel", "framework", "framework_version", "kernel_sources", "kv_tokens")


@dataclass(frozen=True)
class MetricPercentiles:
    """vLLM's `--metric-percentiles` (each P in [0, 100] adds `p<P>_<metric>_ms`) of its
    `--percentile-metrics` (which of ttft, tpot, itl, e2el get them). Every metric's mean,
    median, std, p90, p95 and p99 are written whatever these say: a superset of vLLM's file."""

    percentiles: tuple = ()
    metrics: tuple = VLLM_METRICS

    def record(self) -> dict:
        """What a manifest records of them (nothing when none is asked for)."""
        if not self.percentiles:
            return {}
        return {"metric_percentiles": [percentile_word(p) for p in self.percentiles],
                "percentile_metrics": list(self.metrics)}


def vllm_records(results, summaries: list[dict] | None = None, date: str | None = None,
                 percentiles: MetricPercentiles | None = None) -> list[dict]:
    """One flat record per run of `results` ([(RunSpec, RunRecorder)])."""
    summaries = summaries if summaries is not None else run_summaries(results)
    return [vllm_record(spec, recorder, summary, date, percentiles)
            for (spec, recorder), summary in zip(results, summaries)]


def vllm_record(spec, recorder, summary: dict, date: str | None = None,
                percentiles: MetricPercentiles | None = None) -> dict:
    """One run's record: setup and traffic, vLLM's figures and servesim's extras, the run;
    with `percentiles`, each asked-for metric's extra percentiles after its p99, where vLLM
    writes its percentiles."""
    config = spec.config
    request_rate, burstiness, max_concurrency = traffic(config.workload, recorder)
    max_concurrency = config.workload.max_concurrency or max_concurrency
    setup = {"date": date, "backend": f"servesim-{config.mode}", "label": spec.label,
             "model_id": getattr(recorder, "served_model", None) if config.mode == "bench"
             else model_id(config.model),
             "num_prompts": summary["completed"] + summary["rejected"] + summary["unfinished"],
             "request_rate": request_rate, "burstiness": burstiness,
             "max_concurrency": max_concurrency}
    warmup_s = config.workload.warmup_s
    std, peaks = latency_std(recorder, warmup_s), peak_figures(recorder, warmup_s)
    run = {"scenario": config.name, "variant": spec.variant, "sweep": dict(spec.sweep),
           "seed": config.seed, "arrival_process": config.workload.arrival.process}
    derived = config.hardware.derived if config.hardware is not None else None
    if derived:  # the hardware model's: what ran on what
        run["hardware"] = hardware_record(config, derived)
    figures = vllm_summary(summary, std, peaks)
    if not config.slo.any:  # no SLO to meet: vLLM writes null without --goodput
        figures["request_goodput"] = None
    if percentiles is not None and percentiles.percentiles:
        figures = _with_percentiles(figures, metric_percentiles(
            recorder, percentiles.percentiles, percentiles.metrics, warmup_s))
    return setup | figures | run


def _with_percentiles(figures: dict, extra: dict) -> dict:
    """`figures` with each metric's `extra` percentiles after its p99 (one already there, such
    as p90, keeps its place)."""
    out = {}
    for key, value in figures.items():
        out[key] = value
        if key.startswith("p99_") and key.endswith("_ms"):
            metric = key[len("p99_"):-len("_ms")]
            out |= {k: v for k, v in extra.items()
                    if k.endswith(f"_{metric}_ms") and k not in figures}
    return out


def hardware_record(config, derived: dict) -> dict:
    """A hardware run's `hardware` record: {HARDWARE_KEYS}; in a cluster also its "replicas"
    (and with disaggregation "prefill_replicas" and "decode_replicas"); with pools
    {"replicas", "pools": [each pool's "pool", "replicas" and HARDWARE_KEYS]} instead."""
    cluster = config.cluster
    if derived.get("pools"):
        return {"replicas": cluster.size,
                "pools": [{"pool": pool["pool"], "replicas": pool["replicas"]}
                          | {key: pool[key] for key in HARDWARE_KEYS}
                          for pool in derived["pools"]]}
    record = {key: derived[key] for key in HARDWARE_KEYS}
    if cluster is not None:
        record["replicas"] = cluster.size
        if cluster.prefill_replicas:
            record |= {"prefill_replicas": cluster.prefill_replicas,
                       "decode_replicas": cluster.decode_replicas}
    return record


def traffic(workload, recorder) -> tuple:
    """(request_rate, burstiness, max_concurrency) of a workload's arrivals, as vLLM writes
    them; a trace's rate, and that of conversations' turns (their process starts the
    conversations), is the mean rate of the requests' arrivals."""
    if workload.arrival.process != "trace" and workload.sessions is None:
        return workload.arrival.traffic()
    arrivals = np.asarray(recorder.request_columns()["arrival_s"], dtype=np.float64)
    span = float(arrivals.max() - arrivals.min()) if arrivals.size else 0.0
    return ((arrivals.size - 1) / span if span > 0 else "inf"), None, None


def model_id(model) -> str:
    """The model's name: its catalog id (a hardware run), else the NumPy engine's shape as a
    name (vLLM names a file after the part after the last '/')."""
    name = getattr(model, "name", None)
    if name:
        return name
    return (f"servesim-numpy-v{model.vocab_size}-d{model.d_model}-l{model.n_layers}"
            f"-h{model.n_heads}-ff{model.d_ff}-ctx{model.max_seq_len}")


def summary_json_names(specs) -> list[str]:
    """The file name of each run's record: `summary.json` for a single run, else
    `summary-<label slug>.json`, unique; a slug past `MAX_SLUG` characters is cut and ends in
    a hash of the whole label."""
    if len(specs) == 1:
        return ["summary.json"]
    names: list[str] = []
    for index, spec in enumerate(specs):
        slug = re.sub(r"[^A-Za-z0-9._]+", "-", spec.label).strip("-.") or f"run-{index}"
        if len(slug) > MAX_SLUG:  # a file name has at most 255 bytes
            digest = hashlib.sha256(spec.label.encode()).hexdigest()[:12]
            slug = f"{slug[:MAX_SLUG - 13].rstrip('-.')}-{digest}"
        name = f"summary-{slug}.json"
        if name in names:  # labels that differ only in punctuation
            name = f"summary-{slug}-{index}.json"
        names.append(name)
    return names


def record_date(date: str | None = None) -> str | None:
    """`date`, else SOURCE_DATE_EPOCH (seconds since 1970) in vLLM's format, in UTC; else
    None."""
    if date is not None:
        return date
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        return None
    try:
        return datetime.fromtimestamp(int(epoch), timezone.utc).strftime(DATE_FORMAT)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"SOURCE_DATE_EPOCH must be whole seconds since 1970, got "
                         f"{epoch!r}") from None
