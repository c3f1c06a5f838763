"""Reports: every file of docs/reports/files.md with its columns, figures equal to the engine's
metric functions, charts embedded in a self-contained HTML page, rejected requests listed with
their reasons, and byte-identical files for the same seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import reports
import scenarios
import sim
from engine.benchmark import request_metrics, summarize
from reports.document import reason_kind, reason_summary

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
FILES = ("requests.csv", "steps.csv", "summary.csv", "summary-static.json",
         "summary-continuous.json", "report.md", "report.html", "latency_cdfs.png",
         "comparison.png", "timeline.png")


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
            "prompt_tokens", "output_tokens", "cached_tokens", "ttft_s", "tpot_s", "e2e_s",
            "queue_s", "preemptions", "status"} <= set(table.columns)
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
            "num_waiting", "kv_blocks_used", "kv_blocks_total", "preemptions", "cached_tokens",
            "kv_blocks_cached"} <= set(steps.columns)
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
                   "mean_batch_size", "kv_util_mean", "kv_util_max", "prefix_cache_hit_rate",
                   "prefix_cache_block_hit_rate", "prefill_tokens_saved"):
        assert column in table.columns
    for name in ("ttft", "tpot", "itl", "e2e", "queue"):
        for stat in ("mean", "p50", "p90", "p95", "p99", "max"):
            assert f"{name}_{stat}_s" in table.columns
    for (spec, recorder), (_, row) in zip(results, table.iterrows()):
        expected = summarize(recorder, spec.config.slo.limits())
        for key, value in expected.items():
            assert row[key] == pytest.approx(value, rel=1e-8, nan_ok=True), key


def test_the_workload_exercises_rejections_and_preemptions(run):
    _, results, _ = run
    summaries = [summarize(rec) for _, rec in results]
    assert all(s["rejected"] > 0 for s in summaries)
    assert all(s["preemptions"] > 0 for s in summaries)


def test_report_summarizes_rejected_requests_by_reason_with_counts_and_examples(tmp_path):
    scenario, results = simulate(tmp_path, overrides=["model.max_seq_len=96"])
    out = reports.write_report(scenario, results, tmp_path / "out").out_dir
    markdown = (out / "report.md").read_text()
    section = markdown[markdown.index("## Rejected requests"):]
    for spec, recorder in results:
        reasons = recorder.reject_reasons
        kinds = {reason_kind(reason) for reason in reasons.values()}
        rows = [line for line in section.splitlines() if line.startswith(f"| {spec.variant} |")]
        assert len(rows) == len(kinds) < len(reasons)  # one row per kind, not per request
        counted = sum(int(row.split(" | ")[2]) for row in rows)
        assert counted == len(reasons)
        first = min(reasons)
        assert any(row.split(" | ")[3].startswith(f"{first}, ") or
                   row.split(" | ")[3].startswith(f"{first} ") for row in rows)


def test_the_console_says_why_requests_were_rejected_a_line_a_kind(tmp_path):
    _, results = simulate(tmp_path, overrides=["model.max_seq_len=96"])
    lines = reports.rejection_text(results).splitlines()
    for spec, recorder in results:
        own = [line for line in lines if line.startswith(f"{spec.label}: ")]
        kinds = {reason_kind(reason) for reason in recorder.reject_reasons.values()}
        assert len(own) == len(kinds) > 0
        assert sum(int(line.split(": ")[1].split()[0]) for line in own) == \
            len(recorder.reject_reasons)
        assert all("exceeds max_seq_len (96)" in line for line in own)
    _, fitting = simulate(tmp_path, overrides=["model.max_seq_len=4096"])
    assert not any(recorder.reject_reasons for _, recorder in fitting)
    assert reports.rejection_text(fitting) == ""


def test_a_clusters_report_lists_its_rejected_requests_and_priority_classes(tmp_path):
    # a cluster's requests carry the replica that served them; the report's tables are by run
    cluster = SCENARIO.replace("[[variants]]", "[cluster]\nreplicas = 2\n[[variants]]", 1)
    scenario, results = simulate(tmp_path, cluster, overrides=["model.max_seq_len=96"])
    out = reports.write_report(scenario, results, tmp_path / "out").out_dir
    markdown = (out / "report.md").read_text()
    rejected = markdown[markdown.index("## Rejected requests"):]
    for spec, recorder in results:
        rows = [line for line in rejected.splitlines() if line.startswith(f"| {spec.variant} |")]
        assert sum(int(row.split(" | ")[2]) for row in rows) == len(recorder.reject_reasons) > 0
    classes = markdown[markdown.index("## Latency by priority class"):markdown.index("## Charts")]
    assert len([line for line in classes.splitlines() if line.startswith("| continuous |")]) == 2


def test_warm_up_requests_are_marked_and_left_out_as_the_summary_leaves_them(tmp_path):
    scenario, results = simulate(tmp_path, overrides=["workload.warmup_s=0.5"])
    out = reports.write_report(scenario, results, tmp_path / "out").out_dir
    table = pd.read_csv(out / "requests.csv")
    assert list(table["counted"]) == list(table["arrival_s"] >= 0.5)
    assert 0 < (~table["counted"]).sum() < len(table)
    markdown = (out / "report.md").read_text()
    assert "the requests sent in the first 0.5 s are a warm-up" in markdown
    classes = markdown[markdown.index("## Latency by priority class"):markdown.index("## Charts")]
    for spec, recorder in results:
        rows = [line.split(" | ") for line in classes.splitlines()
                if line.startswith(f"| {spec.variant} |")]
        counted = table[(table["variant"] == spec.variant) & table["counted"]]
        assert sum(int(row[3]) for row in rows) == len(counted)  # requests per class, summed
        summary = summarize(recorder, spec.config.slo.limits(), 0.5)
        assert summary["completed"] == (counted["status"] == "finished").sum()


def test_reasons_of_one_kind_are_one_with_the_numbers_that_differ_as_ranges():
    reasons = ["prompt (300) + max_new_tokens (10) exceeds max_seq_len (256)",
               "prompt (280) + max_new_tokens (40) exceeds max_seq_len (256)"]
    assert reason_kind(reasons[0]) == reason_kind(reasons[1])
    assert reason_kind(reasons[0]) != reason_kind("needs 30 KV blocks, the cache has 24")
    assert reason_summary(reasons) == \
        "prompt (280\u2013300) + max_new_tokens (10\u201340) exceeds max_seq_len (256)"


def test_report_says_what_was_run_and_shows_summary_and_charts(run):
    _, _, out = run
    markdown = (out / "report.md").read_text()
    for text in ("# servesim report: tiny", "| seed | 5 |", "| mode | simulate |",
                 "linear: step_overhead_s 0.002", "| static | ", "TTFT p99 ms",
                 "![Latency distributions (CDFs)](latency_cdfs.png)",
                 "## Latency by priority class",
                 "TPOT: a request's time per output token after the first",  # the terms
                 "(`summary-static.json` to `summary-continuous.json`, one a run)"):
        assert text in markdown, text


def test_what_was_run_shows_each_variants_own_settings_not_the_base(run):
    _, _, out = run
    markdown = (out / "report.md").read_text()
    assert "| scheduler | differs by variant: see Variants below |" in markdown
    variants = markdown[markdown.index("### Variants"):markdown.index("## Summary")]
    assert "| variant | sets | scheduler |" in variants
    static = next(line for line in variants.splitlines() if line.startswith("| static |"))
    continuous = next(line for line in variants.splitlines() if line.startswith("| continuous |"))
    assert "static batching of up to 4 requests" in static
    assert "continuous batching" in continuous and "(the base config)" in continuous


def test_settings_the_variants_share_are_described_once(run):
    _, _, out = run
    markdown = (out / "report.md").read_text()
    assert ("| engine | 24 KV blocks of 16 tokens, max_num_seqs 8, max_num_batched_tokens 512, "
            "prefix caching on |") in markdown


def test_priority_classes_are_listed_lowest_value_first_right_after_the_summary(run):
    _, _, out = run
    markdown = (out / "report.md").read_text()
    headings = [line for line in markdown.splitlines() if line.startswith("## ")]
    assert headings.index("## Latency by priority class") == headings.index("## Summary") + 1
    section = markdown[markdown.index("## Latency by priority class"):markdown.index("## Charts")]
    assert "lowest priority value first" in section
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| static |")
            or line.startswith("| continuous |")]
    assert [(row[0], row[2]) for row in rows] == [("| static", "0"), ("| static", "1"),
                                                  ("| continuous", "0"), ("| continuous", "1")]
    assert {row[1] for row in rows} == {"fcfs"}  # the queue each run used


def test_number_columns_are_right_aligned_and_text_columns_left_aligned(run):
    _, _, out = run
    markdown = (out / "report.md").read_text()
    summary = markdown[markdown.index("## Summary"):]
    rule = summary.splitlines()[3]
    assert rule.startswith("|:---|---:|---:|")  # variant, completed, rejected
    page = (out / "report.html").read_text()
    assert '<td>static</td><td class="num">' in page
    assert '<th>variant</th><th class="num">completed</th>' in page


def test_a_column_is_numeric_only_when_every_cell_is_a_number_or_missing():
    from reports.render import Table, numeric_columns

    table = Table(["name", "value", "mixed", "ids", "no request had it", "empty"],
                  [["a", "1.5", "3", "0, 4", "n/a", ""], ["b", "n/a", "x", "7", "n/a", ""],
                   ["c", "-2,048", "", "9", "", ""]])
    assert numeric_columns(table) == [False, True, False, False, True, False]


def test_a_name_a_user_gave_reads_literally_in_the_markdown_report():
    from reports.render import Heading, Paragraph, Table, to_markdown

    text = to_markdown([Heading(1, "Run <b>"), Paragraph("variant a|b <i>x</i>, p < 0.5, "
                                                          "`summary-<run>.json`"),
                        Table(["variant", "model"], [["a|b <i>x</i>", "org/\nmodel\r\n"]])])
    assert text.startswith("# Run &lt;b>\n")
    assert "variant a|b &lt;i>x&lt;/i>, p < 0.5, `summary-<run>.json`" in text  # code as is
    assert "| a\\|b &lt;i>x&lt;/i> | org/ model |" in text  # a line break would end the row


def test_a_swept_table_is_named_as_toml_writes_it_and_long_names_wrap():
    from reports.comparison_chart import wrapped
    from reports.labels import value_text

    arrival = {"process": "gamma", "rate": 2.0, "cv": 3, "burst": True}
    assert value_text(arrival) == '{process = "gamma", rate = 2, cv = 3, burst = true}'
    name = f"continuous, arrival={value_text(arrival)}"
    assert wrapped(name) == 'continuous,\narrival={process = "gamma", rate =\n2, cv = 3, ' \
                            'burst = true}'
    assert wrapped("short, name") == "short, name"


def test_html_report_embeds_every_chart(run):
    _, _, out = run
    page = (out / "report.html").read_text()
    charts = sorted(p.name for p in out.glob("*.png"))
    assert "latency_cdfs.png" in charts and page.count('src="data:image/png;base64,') == \
        len(charts)
    assert ".png\"" not in page  # no link to a file beside it: the page stands alone
    assert "<table>" in page and "TTFT p99 ms" in page
    assert '<div class="table"><table>' in page  # a wide table scrolls inside the page


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
    assert sorted(p.name for p in out.glob("summary*.json")) == [
        "summary-continuous-rate-40.0.json", "summary-continuous-rate-5.0.json",
        "summary-static-rate-40.0.json", "summary-static-rate-5.0.json"]
    markdown = (out / "report.md").read_text()
    assert "`workload.arrival.rate` is swept" in markdown


def test_the_sweep_chart_plots_latency_against_achieved_throughput(tmp_path):
    from reports.sweep_chart import sweep_figure

    text = SCENARIO + '[sweep]\n"workload.arrival.rate" = [5.0, 40.0]\n'
    scenario, results = simulate(tmp_path, text, ["workload.num_requests=12"])
    specs, summaries = [spec for spec, _ in results], reports.run_summaries(results)
    fig = sweep_figure(specs, summaries)
    ttft, tpot, e2e, throughput = fig.axes[:4]
    assert [ax.get_title().split()[0] for ax in (ttft, tpot, e2e)] == ["TTFT", "TPOT", "E2E"]
    achieved = sorted(s["request_throughput"] for s in summaries[:2])  # the static series
    for ax, metric in ((ttft, "ttft"), (tpot, "tpot"), (e2e, "e2e")):
        p50, p99 = ax.get_lines()[:2]
        assert sorted(p50.get_xdata()) == pytest.approx(achieved)
        assert sorted(p50.get_ydata()) == pytest.approx(
            sorted(s[f"{metric}_p50_s"] * 1e3 for s in summaries[:2]))
        assert "achieved throughput" in ax.get_xlabel()
    assert list(throughput.get_lines()[0].get_xdata()) == [5.0, 40.0]
    assert sorted(throughput.get_lines()[0].get_ydata()) == pytest.approx(achieved)


def test_summary_text_has_one_row_per_run_in_milliseconds(run):
    _, results, _ = run
    lines = reports.summary_text(results).splitlines()
    assert lines[0].split()[:3] == ["variant", "completed", "rejected"]
    assert [line.split()[0] for line in lines[2:]] == ["static", "continuous"]
    summary = summarize(results[1][1], results[1][0].config.slo.limits())
    header = lines[0].split("  ")
    cells = lines[3].split()
    titles = [h.strip() for h in header if h.strip()]
    assert cells[titles.index("TTFT p99 ms")] == f"{summary['ttft_p99_s'] * 1e3:.1f}"


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
