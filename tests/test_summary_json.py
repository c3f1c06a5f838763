"""The vLLM-layout summaries: one flat file per run with `vllm bench serve`'s result keys, its
figures those of `summarize` (in milliseconds), standard deviations equal to NumPy's, and
byte-identical files for the same seed (no clock reading in `date`)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

import reports
import scenarios
import sim
from engine.benchmark import request_metrics, summarize
from helpers.hardware import hardware_text
from reports.vllm_json import summary_json_names, traffic
from scenarios.config import SessionSettings, WorkloadSettings
from scenarios.arrival import Burst, ClosedLoop, Constant, Poisson, TraceArrivals

SCENARIO = """
name = "json-case"
seed = 11
[model]
max_seq_len = 128
[engine]
num_kv_blocks = 32
max_num_seqs = 6
[cost]
model = "linear"
[workload]
num_requests = 30
arrival = { process = "gamma", rate = 12.0, cv = 2.0 }
prompt_tokens = { dist = "uniform", low = 4, high = 120 }
output_tokens = { dist = "uniform", low = 1, high = 24 }
"""
# vLLM `bench serve --save-result` keys (setup, traffic, results, latency statistics)
VLLM_KEYS = ["date", "backend", "label", "model_id", "num_prompts", "request_rate", "burstiness",
             "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
             "total_output_tokens", "request_throughput", "request_goodput",
             "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
             "max_concurrent_requests"] + [
    f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p90", "p95", "p99")]
EXTRA_KEYS = ["max_ttft_ms", "max_tpot_ms", "max_itl_ms", "max_e2el_ms", "mean_queue_ms",
              "median_queue_ms", "std_queue_ms", "p90_queue_ms", "p95_queue_ms", "p99_queue_ms",
              "max_queue_ms", "rejected", "unfinished", "preemptions", "mean_batch_size",
              "mean_kv_util", "max_kv_util", "prefix_cache_hit_rate",
              "prefix_cache_block_hit_rate", "prefill_tokens_saved", "scenario", "variant",
              "sweep", "seed", "arrival_process"]


def write(tmp_path, text=SCENARIO, overrides=(), name="out"):
    path = tmp_path / "json-case.toml"
    path.write_text(text)
    scenario = scenarios.load(path, overrides)
    results = sim.simulate(scenario)
    return results, reports.write_report(scenario, results, tmp_path / name).out_dir


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return write(tmp_path_factory.mktemp("json"))


def test_a_single_run_writes_one_flat_summary_json_with_vllms_keys_in_order(single):
    _, out = single
    assert [p.name for p in out.glob("summary*.json")] == ["summary.json"]
    record = json.loads((out / "summary.json").read_text())
    assert list(record) == VLLM_KEYS + EXTRA_KEYS
    assert record["backend"] == "servesim-simulate" and record["label"] == "default"
    assert record["model_id"] == "servesim-numpy-v512-d512-l4-h8-ff2048-ctx128"


def test_goodput_is_null_without_an_slo_as_vllm_writes_it_without_goodput(tmp_path):
    _, out = write(tmp_path, overrides=["slo.ttft_s=false", "slo.tpot_s=false"])
    assert json.loads((out / "summary.json").read_text())["request_goodput"] is None


def test_the_figures_are_summarizes_in_milliseconds(single):
    results, out = single
    record = json.loads((out / "summary.json").read_text())
    spec, recorder = results[0]
    summary = summarize(recorder, spec.config.slo.limits())
    assert record["completed"] == summary["completed"] > 0
    assert record["failed"] == summary["rejected"] + summary["unfinished"] > 0
    assert record["num_prompts"] == 30 == record["completed"] + record["failed"]
    assert record["duration"] == pytest.approx(summary["duration_s"], rel=1e-8)
    assert record["request_goodput"] == pytest.approx(summary["goodput"], rel=1e-8)
    for ours, theirs in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el"),
                         ("queue", "queue")):
        for stat, name in (("mean", "mean"), ("p50", "median"), ("p90", "p90"),
                           ("p95", "p95"), ("p99", "p99"), ("max", "max")):
            assert record[f"{name}_{theirs}_ms"] == pytest.approx(
                summary[f"{ours}_{stat}_s"] * 1e3, rel=1e-8), f"{name}_{theirs}_ms"
    assert record["preemptions"] == summary["preemptions"]
    assert record["mean_kv_util"] == pytest.approx(summary["kv_util_mean"], rel=1e-8)
    for key in ("prefix_cache_hit_rate", "prefix_cache_block_hit_rate", "prefill_tokens_saved"):
        assert record[key] == pytest.approx(summary[key], rel=1e-8), key


def test_standard_deviations_are_numpys_over_the_same_requests(single):
    results, out = single
    record = json.loads((out / "summary.json").read_text())
    recorder = results[0][1]
    columns = recorder.request_columns()
    finished = np.asarray(columns["status"]) == "finished"
    metrics = {k: v[finished] for k, v in request_metrics(columns).items()}
    tpot = metrics["tpot_s"][~np.isnan(metrics["tpot_s"])]
    assert tpot.size < finished.sum()  # one-token requests have no TPOT and are left out
    expected = {"ttft": np.std(metrics["ttft_s"]), "tpot": np.std(tpot),
                "e2el": np.std(metrics["e2e_s"]), "queue": np.std(metrics["queue_s"]),
                "itl": np.std(np.repeat(recorder.itl_gaps, recorder.itl_counts))}
    for name, value in expected.items():
        assert record[f"std_{name}_ms"] == pytest.approx(value * 1e3, rel=1e-8), name


def test_metric_percentiles_are_vllms_keys_over_the_same_requests(single):
    """vLLM's --metric-percentiles 25,50,99.9 --percentile-metrics ttft,tpot,itl: p<P>_*_ms
    after each asked-for metric's p99, equal to NumPy's percentiles of every finished request
    (TPOT over those of two tokens or more; ITL over every gap); none for e2el."""
    from reports.vllm_json import MetricPercentiles, vllm_record

    results, _ = single
    spec, recorder = results[0]
    summary = reports.run_summaries(results)[0]
    asked = MetricPercentiles((25.0, 50.0, 99.9), ("ttft", "tpot", "itl"))
    record = vllm_record(spec, recorder, summary, percentiles=asked)
    plain = vllm_record(spec, recorder, summary)
    columns = recorder.request_columns()
    finished = np.asarray(columns["status"]) == "finished"
    metrics = {k: v[finished] for k, v in request_metrics(columns).items()}
    values = {"ttft": metrics["ttft_s"], "tpot": metrics["tpot_s"][~np.isnan(metrics["tpot_s"])],
              "itl": np.repeat(recorder.itl_gaps, recorder.itl_counts)}
    for metric, samples in values.items():
        for p, word in ((25.0, "25"), (50.0, "50"), (99.9, "99.9")):
            assert record[f"p{word}_{metric}_ms"] == pytest.approx(
                np.percentile(samples, p) * 1e3, rel=1e-9), (metric, p)
    assert record["p50_ttft_ms"] == record["median_ttft_ms"]
    keys = list(record)
    assert keys[keys.index("p99_ttft_ms") + 1:][:3] == ["p25_ttft_ms", "p50_ttft_ms",
                                                        "p99.9_ttft_ms"]
    assert "p25_e2el_ms" not in record and {k: plain[k] for k in plain} == \
        {k: record[k] for k in plain}  # only keys added, in vLLM's places


def test_the_flags_of_vllms_result_file_reach_summary_json_and_the_manifest(tmp_path):
    from engine.vllm_figures import VLLM_METRICS
    from sim.cli import main
    from sim.cli.result_flags import VLLM_METRICS as NAMES_READ

    assert NAMES_READ == VLLM_METRICS  # the command line's copy, read before NumPy loads

    path = tmp_path / "json-case.toml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", "--metric-percentiles",
                 "50,75", "--percentile-metrics", "e2el"]) == 0
    record = json.loads((out / "summary.json").read_text())
    assert "p75_e2el_ms" in record and "p75_ttft_ms" not in record
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metric_percentiles"] == ["50", "75"]
    assert manifest["percentile_metrics"] == ["e2el"]


def test_gamma_arrivals_give_vllms_burstiness_and_their_rate(single):
    _, out = single
    record = json.loads((out / "summary.json").read_text())
    assert record["request_rate"] == 12.0 and record["burstiness"] == pytest.approx(0.25)
    assert record["max_concurrency"] is None and record["arrival_process"] == "gamma"


def test_traffic_keys_of_every_arrival_process():
    class Trace:
        def request_columns(self):
            return {"arrival_s": [0.0, 1.0, 4.0]}

    def workload(arrival, sessions=None):
        return WorkloadSettings(None, None, None, 0.0, arrival, None, None, None, None, sessions)

    assert traffic(workload(Poisson(3.0)), None) == (3.0, 1.0, None)
    assert traffic(workload(Constant(2.0)), None) == (2.0, "inf", None)
    assert traffic(workload(Burst()), None) == ("inf", 1.0, None)  # as vLLM at rate inf
    assert traffic(workload(ClosedLoop(8, 0.0)), None) == ("inf", None, 8)
    assert traffic(workload(TraceArrivals()), Trace()) == (0.5, None, None)  # 2 gaps in 4 s
    # the process starts conversations: the rate written is their turns'
    conversations = workload(Poisson(0.1), SessionSettings(3, 2, 0, 0.0))
    assert traffic(conversations, Trace()) == (0.5, None, None)


def test_a_run_label_too_long_for_a_file_name_is_cut_and_ends_in_its_hash():
    labels = ["a" + "x" * 250, "b" + "x" * 250, "a" + "x" * 250 + "y"]
    names = summary_json_names([SimpleNamespace(label=label) for label in labels])
    assert len(set(names)) == 3 and all(len(name.encode()) <= 255 for name in names)
    assert names[0].startswith("summary-axxx") and names[0] != names[2]
    assert summary_json_names([SimpleNamespace(label="short")] * 2) == \
        ["summary-short.json", "summary-short-1.json"]


def test_several_runs_write_one_file_each_named_after_the_run(tmp_path):
    text = SCENARIO + ('[[variants]]\nname = "static"\nset = { "scheduler.policy" = "static" }\n'
                       '[[variants]]\nname = "continuous"\n'
                       '[sweep]\n"workload.arrival.rate" = [4.0, 12.0]\n')
    results, out = write(tmp_path, text, ["workload.num_requests=8"])
    names = summary_json_names([spec for spec, _ in results])
    assert names == ["summary-static-rate-4.0.json", "summary-static-rate-12.0.json",
                     "summary-continuous-rate-4.0.json", "summary-continuous-rate-12.0.json"]
    assert sorted(p.name for p in out.glob("summary*.json")) == sorted(names)
    assert not (out / "summary.json").exists()
    for name, (spec, _) in zip(names, results):
        record = json.loads((out / name).read_text())
        assert record["variant"] == spec.variant and record["label"] == spec.label
        assert record["sweep"] == {"workload.arrival.rate": spec.sweep["workload.arrival.rate"]}
        assert record["request_rate"] == spec.sweep["workload.arrival.rate"]


def test_date_is_null_unless_given_so_seeded_runs_write_identical_files(tmp_path, monkeypatch,
                                                                        single):
    _, first = single
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    _, again = write(tmp_path, name="again")
    assert (first / "summary.json").read_bytes() == (again / "summary.json").read_bytes()
    assert json.loads((again / "summary.json").read_text())["date"] is None
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _, dated = write(tmp_path, name="dated")
    assert json.loads((dated / "summary.json").read_text())["date"] == "20231114-221320"


def test_undefined_figures_are_null_never_zero(tmp_path):
    text = SCENARIO.replace('low = 1, high = 24', 'low = 1, high = 1')  # no TPOT, no ITL
    _, out = write(tmp_path, text)
    record = json.loads((out / "summary.json").read_text())
    for key in ("mean_tpot_ms", "std_tpot_ms", "p99_itl_ms", "std_itl_ms"):
        assert record[key] is None, key
    assert not math.isnan(record["mean_ttft_ms"])


@pytest.mark.parametrize("gpu, version", [("a40", None), ("h100-sxm", "0.24.0")])
def test_a_hardware_run_says_what_ran_on_what(tmp_path, gpu, version):
    """The framework is the server modelled (its KV sizing), with or without its tables; the
    version is the measured tables' (none on a GPU without them)."""
    if version is not None:
        pytest.importorskip("aiconfigurator_core")
    [(spec, _)], out = write(tmp_path, hardware_text(
        model="mistralai/Mixtral-8x7B-v0.1", gpu=gpu, hardware="tp = 4\nep = 4", requests=6,
        rate=4.0, prompts=(100, 400), outputs=(10, 40)))
    record = json.loads((out / "summary.json").read_text())
    assert list(record)[-1] == "hardware"
    derived = spec.config.hardware.derived
    assert record["hardware"] == {
        "model": "mistralai/Mixtral-8x7B-v0.1", "gpu": gpu, "tp": 4, "dp": 1, "ep": 4,
        "dtype": "fp16", "kv_dtype": "fp16", "activation_scheme": None, "moe_kernel": None,
        "framework": "vllm",
        "framework_version": version, "kernel_sources": derived["kernel_sources"],
        "kv_tokens": derived["kv_tokens"]}
    assert (record["hardware"]["kernel_sources"].get("moe_experts") == "measured") == \
        (version is not None)
