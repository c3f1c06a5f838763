"""Reports: every file of ARCHITECTURE section 7 with its columns, figures equal to the engine's
metric functions, charts embedded in a self-contained HTML page, rejected requests listed with
their reasons, and byte-identical files for the same seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import reports
import scenarios
import sim
from engine.benchmark import request_metrics, summarize
from reports.cdf_chart import weighted_cdf
from reports.timeline_chart import step_series

SCENARIO = """
name = "tiny"
description = "A small mixed workload for report tests."
seed = 5
[model]
max_seq_len = 256
[engine]
num_kv_blocks = 24
max_num_seqs = 8
max_num_batched_tokens = 512
[cost]
model = "linear"
step_overhead_s = 0.002
prefill_token_s = 0.0001
decode_seq_s = 0.0005
[workload]
num_requests = 40
arrival = { process = "poisson", rate = 20.0 }
prompt_tokens = { dist = "lognormal", median = 64, sigma = 0.8, min = 4, max = 300 }
output_tokens = { dist = "uniform", low = 2, high = 48 }
priority = { dist = "choice", values = [0, 1], weights = [0.3, 0.7] }
[[variants]]
name = "static"
set = { "scheduler.policy" = "static", "scheduler.max_batch_size" = 4 }
[[variants]]
name = "continuous"
"""
FILES = ("requests.csv", "steps.csv", "summary.csv", "summary.json", "report.md", "report.html",
         "latency_cdfs.png", "comparison.png", "timeline.png")


def simulate(tmp_path: Path, text: str = SCENARIO, overrides=()):
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    scenario = scenarios.load(path, overrides)
    return scenario, sim.simulate(scenario)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    scenario, results = simulate(tmp)
    files = reports.write_report(scenario, results, tmp / "out")
    return scenario, results, files.out_dir


def test_every_file_is_written(run):
    _, _, out = run
    for name in FILES:
        assert (out / name).stat().st_size > 0, name


def test_requests_csv_has_one_row_per_request_and_the_engine_metrics(run):
    _, results, out = run
    table = pd.read_csv(out / "requests.csv", keep_default_na=False, na_values=[""])
    assert list(table.columns[:2]) == ["variant", "request_id"]
    assert {"priority", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s",
            "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s",
            "preemptions", "status"} <= set(table.columns)
    for spec, recorder in results:
        rows = table[table["variant"] == spec.variant]
        assert len(rows) == recorder.num_requests == 40
        expected = request_metrics(recorder.request_columns())
        for column in ("ttft_s", "tpot_s", "e2e_s", "queue_s"):
            np.testing.assert_allclose(rows[column], expected[column], rtol=1e-8, equal_nan=True)
    assert set(table["status"]) <= {"finished", "rejected", "unfinished"}


def test_steps_csv_has_one_row_per_engine_step(run):
    _, results, out = run
    steps = pd.read_csv(out / "steps.csv")
    assert list(steps.columns[:2]) == ["variant", "step"]
    assert {"start_s", "end_s", "num_prefill_tokens", "num_decode_seqs", "num_running",
            "num_waiting", "kv_blocks_used", "kv_blocks_total", "preemptions"} <= set(steps.columns)
    for spec, recorder in results:
        rows = steps[steps["variant"] == spec.variant]
        assert list(rows["step"]) == list(range(recorder.num_steps))
        assert (rows["kv_blocks_total"] == 24).all()
        assert (rows["end_s"] > rows["start_s"]).all()


def test_summary_csv_equals_summarize_of_each_run(run):
    _, results, out = run
    table = pd.read_csv(out / "summary.csv")
    assert list(table["variant"]) == ["static", "continuous"]
    for column in ("completed", "rejected", "duration_s", "request_throughput",
                   "output_throughput", "total_token_throughput", "goodput", "preemptions",
                   "mean_batch_size", "kv_util_mean", "kv_util_max"):
        assert column in table.columns
    for name in ("ttft", "tpot", "itl", "e2e", "queue"):
        for stat in ("mean", "p50", "p90", "p95", "p99", "max"):
            assert f"{name}_{stat}_s" in table.columns
    for (spec, recorder), (_, row) in zip(results, table.iterrows()):
        expected = summarize(recorder, spec.config["slo"])
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-8, nan_ok=True), key


def test_summary_json_uses_vllm_bench_serve_names(run):
    _, results, out = run
    data = json.loads((out / "summary.json").read_text())
    assert data["scenario"] == "tiny" and data["seed"] == 5
    first = data["runs"][0]
    assert first["variant"] == "static" and first["sweep"] == {}
    for key in ("completed", "request_throughput", "output_throughput", "mean_ttft_ms",
                "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "median_e2el_ms"):
        assert key in first
    summary = summarize(results[0][1], results[0][0].config["slo"])
    assert first["p99_itl_ms"] == pytest.approx(summary["itl_p99_s"] * 1e3, rel=1e-8)


def test_the_workload_exercises_rejections_and_preemptions(run):
    _, results, _ = run
    summaries = [summarize(rec) for _, rec in results]
    assert all(s["rejected"] > 0 for s in summaries)
    assert all(s["preemptions"] > 0 for s in summaries)


def test_report_lists_each_rejected_request_with_its_reason(run):
    _, results, out = run
    markdown = (out / "report.md").read_text()
    recorder = results[0][1]
    for request_id, reason in recorder.reject_reasons.items():
        assert f"| {request_id} |" in markdown and reason in markdown


def test_report_says_what_was_run_and_shows_summary_and_charts(run):
    _, _, out = run
    markdown = (out / "report.md").read_text()
    for text in ("# servesim report: tiny", "| seed | 5 |", "| mode | simulate |",
                 "linear: step_overhead_s 0.002", "| static | ", "TTFT p99 ms",
                 "![Latency distributions (CDFs)](latency_cdfs.png)", "## By priority"):
        assert text in markdown, text


def test_html_report_embeds_every_chart(run):
    _, _, out = run
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3
    assert ".png\"" not in page  # no link to a file beside it: the page stands alone
    assert "<table>" in page and "TTFT p99 ms" in page


def test_png_files_carry_no_date_or_software_stamp(run):
    _, _, out = run
    for png in out.glob("*.png"):
        data = png.read_bytes()
        assert data.startswith(b"\x89PNG") and b"tIME" not in data and b"Software" not in data


def test_same_seed_gives_byte_identical_files(tmp_path, run):
    scenario, _, first = run
    results = sim.simulate(scenario)
    second = reports.write_report(scenario, results, tmp_path / "again").out_dir
    for name in FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_a_sweep_adds_its_column_and_the_sweep_chart(tmp_path):
    text = SCENARIO + '[sweep]\n"workload.arrival.rate" = [5.0, 40.0]\n'
    scenario, results = simulate(tmp_path, text, ["workload.num_requests=12"])
    out = reports.write_report(scenario, results, tmp_path / "out").out_dir
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns[:2]) == ["variant", "workload.arrival.rate"]
    assert list(summary["workload.arrival.rate"]) == [5.0, 40.0, 5.0, 40.0]
    assert (out / "sweep.png").stat().st_size > 0
    assert "rate" in reports.summary_text(results).splitlines()[0]


def test_summary_text_has_one_row_per_run_in_milliseconds(run):
    _, results, _ = run
    lines = reports.summary_text(results).splitlines()
    assert lines[0].split()[:3] == ["variant", "completed", "rejected"]
    assert [line.split()[0] for line in lines[2:]] == ["static", "continuous"]
    summary = summarize(results[1][1], results[1][0].config["slo"])
    header = lines[0].split("  ")
    cells = lines[3].split()
    titles = [h.strip() for h in header if h.strip()]
    assert cells[titles.index("TTFT p99 ms")] == f"{summary['ttft_p99_s'] * 1e3:.1f}"


def test_weighted_cdf_equals_the_cdf_of_the_expanded_values():
    values, counts = np.array([0.3, 0.1, 0.2, 0.1]), np.array([2, 1, 3, 4])
    x, y = weighted_cdf(values, counts)
    expanded = np.sort(np.repeat(values, counts))
    for xi, yi in zip(x, y):
        assert yi == pytest.approx(np.searchsorted(expanded, xi, side="right") / len(expanded))


def test_step_series_shows_idle_gaps_at_the_idle_value():
    t, y = step_series([0.0, 1.0, 5.0], [1.0, 2.0, 6.0], [3, 4, 2], 0.0)
    assert list(t) == [0.0, 1.0, 2.0, 5.0, 6.0]
    assert list(y) == [3, 4, 0, 2, 0]


def test_minmax_keeps_each_slices_first_lowest_and_highest_point_and_every_gap():
    from reports.timeline_chart import minmax

    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 100, 50_000))
    y = rng.integers(0, 50, len(t)).astype(float)
    y[(t > 40) & (t < 41)] = np.nan  # an idle stretch
    kt, ky = minmax(t, y, bins=100)
    assert len(kt) <= 300 and np.all(np.diff(kt) >= 0)
    slice_of = lambda x: np.minimum(((x - t[0]) / (t[-1] - t[0]) * 100).astype(int), 99)
    for k in range(0, 100, 7):  # every slice keeps its extremes and its first point
        inside, kept = slice_of(t) == k, slice_of(kt) == k
        assert kt[kept][0] == t[inside][0]
        assert np.nanmax(ky[kept]) == np.nanmax(y[inside])
        assert np.nanmin(ky[kept]) == np.nanmin(y[inside])
    assert np.isnan(ky[(kt > 40) & (kt < 41)]).all()
    short = np.arange(10.0)
    assert minmax(short, short, bins=100)[0] is short  # small series are drawn whole


def test_charts_drawn_in_the_worker_process_are_the_same_bytes_as_drawn_here(tmp_path):
    from reports.chart_worker import ChartWorker
    from reports.charts import make_charts

    _, results = simulate(tmp_path)
    summaries = reports.run_summaries(results)
    worker = ChartWorker.start()
    if worker is None:
        pytest.skip("no second core or no fork here: charts are always drawn in-process")
    worker.draw(results, summaries)
    assert worker.charts() == make_charts(results, summaries)


def test_a_worker_closed_without_a_job_exits():
    from reports.chart_worker import ChartWorker

    worker = ChartWorker.start()
    if worker is None:
        pytest.skip("no second core or no fork here")
    worker.close()  # waits for the process: it would hang here if the worker did not exit
