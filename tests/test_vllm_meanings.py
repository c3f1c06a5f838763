"""vLLM's flags mean here what they mean in `vllm bench serve`: `--goodput` counts exactly the
SLOs it names; `--max-concurrency` caps the requests in flight (with `--request-rate inf`:
every request queued at once), in simulation and in real-time serving, and is recorded;
goodput is shown whenever an SLO is set; `validate --variant` picks the run to compare.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import scenarios
from engine.benchmark import request_metrics, summarize
from helpers.cli import loaded
from sim.cli import main
from sim.runner import run_config
from scenarios.arrival import Burst

SMALL = ["--num-prompts", "60"]


def in_flight_peak(recorder) -> int:
    """The most requests sent and not yet finished at one instant."""
    cols = recorder.request_columns()
    events = sorted([(t, 1) for t in cols["arrival_s"]] + [(t, -1) for t in cols["finish_s"]],
                    key=lambda e: (e[0], e[1]))  # a finish frees its slot before a send
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def test_goodput_counts_only_the_slos_it_names():
    scenario = loaded("kv-pressure", "--variant", "128-blocks", "--goodput", "e2el:60000")
    config = scenario.runs()[0].config
    assert config.slo.limits() == {"ttft_s": None, "tpot_s": None, "e2e_s": 60.0}
    recorder = run_config(config)
    summary = summarize(recorder, config.slo.limits())
    cols = recorder.request_columns()
    e2e = request_metrics(cols)["e2e_s"][np.asarray(cols["status"]) == "finished"]
    assert summary["goodput"] == pytest.approx((e2e <= 60.0).sum() / summary["duration_s"])
    with_defaults = summarize(recorder, scenarios.load("kv-pressure").base.slo.limits())
    assert with_defaults["goodput"] < summary["goodput"]  # the default TTFT SLO no longer counts


def test_a_slo_can_be_turned_off_in_a_scenario(tmp_path):
    path = tmp_path / "no-slo.toml"
    path.write_text('[slo]\nttft_s = false\ntpot_s = 0.2\n[workload]\nnum_requests = 5\n'
                    'arrival = { process = "poisson", rate = 1.0 }\n'
                    'prompt_tokens = { dist = "fixed", value = 8 }\n'
                    'output_tokens = { dist = "fixed", value = 4 }\n')
    assert scenarios.load(path).base.slo.limits() == {"ttft_s": None, "tpot_s": 0.2,
                                                      "e2e_s": None}


def test_rate_inf_with_max_concurrency_is_a_closed_loop_of_that_many_users():
    capped = loaded("static-vs-continuous", *SMALL, "--request-rate", "inf",
                    "--max-concurrency", "8").runs()[1].config
    assert capped.workload.arrival == Burst()
    users = loaded("static-vs-continuous", *SMALL, "--set",
                   'workload.arrival={process="closed_loop",concurrency=8}').runs()[1].config
    a, b = run_config(capped), run_config(users)
    assert a.request_columns() == b.request_columns()
    assert in_flight_peak(a) == 8


def test_a_rate_with_max_concurrency_holds_requests_back_until_a_slot_frees():
    config = loaded("static-vs-continuous", *SMALL, "--request-rate", "8",
                    "--max-concurrency", "3").runs()[1].config
    recorder = run_config(config)
    planned = run_config(loaded("static-vs-continuous", *SMALL, "--request-rate", "8")
                         .runs()[1].config).request_columns()["arrival_s"]
    sent = recorder.request_columns()["arrival_s"]
    assert in_flight_peak(recorder) == 3
    assert all(s >= p - 1e-12 for s, p in zip(sent, planned))  # never before it arrived
    assert sum(s > p + 1e-9 for s, p in zip(sent, planned)) > 10  # many waited for a slot


def test_max_seconds_under_a_cap_sends_nothing_later_however_early_it_was_due():
    # one slot, 8 requests/s: the queue of requests due grows; none is sent after 2 s
    config = loaded("static-vs-continuous", *SMALL, "--request-rate", "8",
                    "--max-concurrency", "1", "--max-seconds", "2").runs()[1].config
    sent = run_config(config).request_columns()["arrival_s"]
    due = run_config(loaded("static-vs-continuous", *SMALL, "--request-rate", "8",
                            "--max-seconds", "2").runs()[1].config).request_columns()["arrival_s"]
    assert max(sent) <= sent[0] + 2.0 and len(sent) < len(due)
    # as a closed loop of one user is, for requests all due at once
    burst = loaded("static-vs-continuous", *SMALL, "--request-rate", "inf",
                   "--max-concurrency", "1", "--max-seconds", "2").runs()[1].config
    user = loaded("static-vs-continuous", *SMALL, "--max-seconds", "2", "--set",
                  'workload.arrival={process="closed_loop",concurrency=1}').runs()[1].config
    assert run_config(burst).request_columns() == run_config(user).request_columns()


def test_a_cap_no_run_reaches_changes_nothing():
    free = loaded("static-vs-continuous", *SMALL, "--request-rate", "4.25").runs()[1].config
    capped = loaded("static-vs-continuous", *SMALL, "--request-rate", "4.25",
                    "--max-concurrency", "1000").runs()[1].config
    assert run_config(free).request_columns() == run_config(capped).request_columns()


def test_max_concurrency_is_recorded_in_summary_json_and_the_report(tmp_path):
    out = tmp_path / "out"
    assert main(["run", "static-vs-continuous", *SMALL, "--request-rate", "inf",
                 "--max-concurrency", "8", "--out", str(out), "--quiet"]) == 0
    for name in ("summary-static.json", "summary-continuous.json"):
        record = json.loads((out / name).read_text())
        assert record["max_concurrency"] == 8 and record["request_rate"] == "inf"
    assert "at most 8 requests in flight" in (out / "report.md").read_text()


def test_serving_in_real_time_keeps_the_cap():
    from engine.records import RunRecorder
    from engine.server import serve
    from sim.build import build_server, sequence_factory
    from sim.workloads import build_workload, seeded_streams

    config = loaded("static-vs-continuous", "--num-prompts", "12", "--request-rate", "inf",
                    "--max-concurrency", "3", "--set", "mode=\"serve\"", "model.d_model=32",
                    "model.n_layers=1", "model.n_heads=2", "model.d_ff=64",
                    "workload.output_tokens={dist=\"fixed\",value=4}").runs()[1].config
    streams = seeded_streams(config.seed)
    workload = build_workload(config.workload, streams["workload"])
    scheduler, executor, model = build_server(config, "serve", streams)
    make = sequence_factory(workload, streams["tokens"], model.vocab_size)
    requests = [make(i, 0.0) for i in range(len(workload))]
    recorder = serve(scheduler, executor, requests, RunRecorder(512), max_in_flight=3)
    assert recorder.request_columns()["status"] == ["finished"] * 12
    assert in_flight_peak(recorder) == 3


def test_goodput_is_printed_and_in_the_report_whenever_an_slo_is_set(tmp_path, capsys):
    out = tmp_path / "with"
    assert main(["run", "static-vs-continuous", *SMALL, "--out", str(out), "--quiet"]) == 0
    assert "goodput req/s" in capsys.readouterr().out
    assert "goodput req/s" in (out / "report.md").read_text()
    out = tmp_path / "without"
    assert main(["run", "static-vs-continuous", *SMALL, "--out", str(out), "--quiet", "--set",
                 "slo.ttft_s=false", "slo.tpot_s=false"]) == 0
    assert "goodput" not in capsys.readouterr().out.splitlines()[0]


def test_validate_variant_picks_one_run_and_against_needs_one(tmp_path, capsys):
    scenario = loaded("kv-pressure", "--variant", "128-blocks")
    assert [spec.variant for spec in scenario.runs()] == ["128-blocks"]
    assert main(["validate", "kv-pressure", "--variant", "nope", "--out",
                 str(tmp_path / "v")]) == 2
    assert "--variant nope: the scenario's variants are" in capsys.readouterr().err
    assert main(["validate", "kv-pressure", "--against", "http://127.0.0.1:9", "--out",
                 str(tmp_path / "v")]) == 2
    assert "name it with --variant" in capsys.readouterr().err
