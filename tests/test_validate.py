"""`servesim validate`: the same requests served in real time by the NumPy engine and simulated
with a cost model, compared statistic by statistic. Accuracy is a benchmark figure
(benchmarks/fidelity.py); these tests check what must hold whatever the machine's speed (what
cannot be validated: test_validate_refusals.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.validation import SCENARIO
from sim.cli import main
from sim.validation.validate import validate
from sim.validation.steps import busy_after, step_rows
from sim.validation.table import COLUMNS, METRICS, STATS, error_pct, max_abs_error, read_csv


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """One validation of the two-variant scenario, shared by the tests that read it."""
    root = tmp_path_factory.mktemp("validate")
    path = root / "validate-case.toml"
    path.write_text(SCENARIO)
    out = root / "out"
    return validate(path, out), out


def requests_by_id(recorder) -> dict:
    cols = recorder.request_columns()
    return {rid: (status, arrival, prompt, output) for rid, status, arrival, prompt, output in
            zip(cols["request_id"], cols["status"], cols["arrival_s"], cols["prompt_tokens"],
                cols["output_tokens"])}


def test_both_runs_finish_every_request_with_the_same_arrivals_and_token_counts(validated):
    result, _ = validated
    assert [run.label for run in result.runs] == ["continuous", "static"]
    for run in result.runs:
        served, simulated = requests_by_id(run.serve), requests_by_id(run.simulate)
        assert sorted(served) == list(range(6))
        assert served == simulated  # same ids, all finished, same arrivals, prompts, outputs
        assert {status for status, *_ in served.values()} == {"finished"}


def test_every_served_step_is_logged_with_its_executor_time_inside_the_step(validated):
    result, _ = validated
    run = result.runs[0]
    served_steps = run.serve.num_steps
    assert served_steps == len(run.steps) > 0
    assert all(row["executor_s"] > 0 and row["measured_s"] >= row["executor_s"]
               for row in run.steps)


def test_validation_csv_has_every_metric_and_stat_with_finite_numbers(validated):
    result, out = validated
    rows = read_csv(out / "validation.csv")
    assert list(rows[0]) == list(COLUMNS)
    for variant in ("continuous", "static"):
        cells = {(r["metric"], r["stat"]) for r in rows if r["variant"] == variant}
        assert cells == {(m, s) for m in METRICS for s in STATS}
    assert len(rows) == 2 * len(METRICS) * len(STATS)
    for row in rows:
        assert math.isfinite(row["serve"]) and row["serve"] > 0
        assert math.isfinite(row["simulate"]) and row["simulate"] > 0
        assert row["error_pct"] == pytest.approx(error_pct(row["serve"], row["simulate"]),
                                                 rel=1e-6, abs=1e-4)  # CSV: 9 digits
    assert math.isfinite(result.max_abs_error())


def test_the_error_table_matches_the_runs_own_summaries(validated):
    result, out = validated
    summary = (out / "serve" / "summary.csv").read_text().splitlines()
    header, first = summary[0].split(","), summary[1].split(",")
    served_p90 = float(first[header.index("ttft_p90_s")])
    row = next(r for r in result.rows if r["variant"] == "continuous"
               and (r["metric"], r["stat"]) == ("ttft", "p90"))
    assert row["serve"] == pytest.approx(served_p90, rel=1e-8)
    assert int(first[header.index("completed")]) == 5  # after the warm-up


def test_each_mode_gets_its_usual_files_and_the_comparison_files_exist(validated):
    _, out = validated
    for mode in ("serve", "simulate"):
        for name in ("requests.csv", "steps.csv", "summary.csv", "summary-continuous.json",
                     "summary-static.json", "report.md", "latency_cdfs.png"):
            assert (out / mode / name).is_file(), (mode, name)
        assert f'"backend": "servesim-{mode}"' in \
            (out / mode / "summary-static.json").read_text()
    for name in ("validation.csv", "step_errors.csv", "validation_cdfs.png", "report.md",
                 "report.html"):
        assert (out / name).stat().st_size > 0, name


def test_the_validation_report_has_the_error_table_and_the_chart(validated):
    result, out = validated
    markdown = (out / "report.md").read_text()
    assert "| variant | metric | stat | serve ms | simulate ms | error % |" in markdown
    row = next(r for r in result.rows if (r["variant"], r["metric"], r["stat"])
               == ("static", "ttft", "p90"))
    assert f"| static | ttft | p90 | {row['serve'] * 1e3:.2f} | {row['simulate'] * 1e3:.2f} |" \
        in markdown
    assert "![Latency CDFs, served and simulated](validation_cdfs.png)" in markdown
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 1
    assert '<a href="serve/report.html">' in page and '<a href="simulate/report.html">' in page


def test_the_printed_text_ends_saying_where_the_report_is(validated):
    result, out = validated
    assert result.text().splitlines()[-1] == f"report: {out / 'report.html'}"


def test_serving_reports_its_progress_from_start_to_every_request_done(tmp_path):
    import scenarios
    from sim.profiling.serving import serve_logged
    from sim.validation.validate import ServingBar

    path = tmp_path / "validate-case.toml"
    path.write_text(SCENARIO)
    calls = []
    config = scenarios.load(path, ["workload.num_requests=4"]).runs()[0].config
    recorder, _ = serve_logged(config, progress=lambda *args: calls.append(args))
    first, last = calls[0], calls[-1]
    arrivals = recorder.request_columns()["arrival_s"]
    assert first[:3] == (0, 4, 0.0)
    assert first[3] == pytest.approx(max(arrivals) - min(arrivals))  # when the last arrives
    assert last[0] == last[1] == 4
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)  # done never goes back
    bar = ServingBar("continuous")  # off a terminal: a disabled bar that takes the calls
    for args in calls:
        bar(*args)
    bar.close()


def test_error_pct_is_relative_to_the_served_value_and_nan_when_undefined():
    assert error_pct(2.0, 2.5) == pytest.approx(25.0)
    assert error_pct(2.0, 1.0) == pytest.approx(-50.0)
    assert math.isnan(error_pct(math.nan, 1.0)) and math.isnan(error_pct(0.0, 1.0))


def test_max_abs_error_counts_only_the_headline_cells_and_never_skips_nan():
    def row(metric, stat, error_pct, serve=1.0, simulate=1.0):
        return {"metric": metric, "stat": stat, "error_pct": error_pct, "serve": serve,
                "simulate": simulate}
    rows = [row("ttft", "p50", -4.0), row("itl", "p99", 40.0),  # not a headline cell
            row("e2e", "mean", 30.0)]  # nor this
    assert max_abs_error(rows) == 4.0
    assert max_abs_error(rows + [row("tpot", "p90", math.nan, serve=0.0)]) == math.inf
    one_side = {"metric": "tpot", "stat": "p90", "serve": 0.01, "simulate": math.nan,
                "error_pct": math.nan}
    assert max_abs_error(rows + [one_side]) == math.inf
    neither = dict(one_side, serve=math.nan)  # every request one token: no TPOT on either side
    assert max_abs_error(rows + [neither]) == 4.0


def test_profile_auto_uses_a_cached_profile_of_a_model_too_short_to_profile(tmp_path,
                                                                            monkeypatch):
    """Only profiling needs max_seq_len >= 2,096: a profile of this machine cached already (as
    `servesim profile --method grid` makes for a short model) is used."""
    import json

    import scenarios
    from sim.costs import load_profile
    from sim.profiling import cache
    from sim.profiling.fingerprint import fingerprint, key
    from sim.validation.runs import validatable_runs

    monkeypatch.setenv("SERVESIM_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "small.toml"
    linear = SCENARIO[SCENARIO.index("[cost]"):SCENARIO.index("[workload]")]
    path.write_text(SCENARIO.replace(linear, '[cost]\nmodel = "profile"\n'))
    scenario = scenarios.load(path)
    model = scenarios.config.as_table(scenario.base.model)
    with pytest.raises(scenarios.ScenarioError, match="--profile auto profiles this machine"):
        validatable_runs(scenario, False, "auto", False)
    profile = json.loads(open(load_profile("default").source).read()) | {"model": model}
    cache.store(key(fingerprint(model)), json.dumps(profile))
    specs = validatable_runs(scenario, False, "auto", False)
    assert {spec.config.cost.profile for spec in specs} == \
        {str(cache.profile_file(key(fingerprint(model))))}


def test_the_headline_counts_requests_finished_on_one_side_only():
    """A slower server sends fewer requests before workload.max_seconds: the two sides' figures
    are then over unlike requests, which the headline counts and `compared` refuses."""
    from types import SimpleNamespace

    from sim.validation.result import Validation

    def side(statuses):
        return SimpleNamespace(request_columns=lambda: {"request_id": list(range(len(statuses))),
                                                        "status": statuses})
    rows = [{"metric": "ttft", "stat": "p50", "serve": 1.0, "simulate": 1.1, "error_pct": 10.0}]
    run = SimpleNamespace(serve=side(["finished", "finished", "unfinished"]),
                          simulate=side(["finished", "finished", "finished"]),
                          errors=rows, normalized_errors=rows)
    result = Validation(None, (run,), None)
    assert result.apart() == (0, 1) and not result.compared()
    assert result.headline().endswith(", but over unlike requests: 1 finished in the simulation "
                                      "and not when served, 0 the reverse (requests.csv of each "
                                      "side says why)")
    alike = SimpleNamespace(**{**vars(run), "serve": run.simulate})
    assert Validation(None, (alike,), None).compared()


def test_requests_finished_on_one_side_only_make_the_headline_say_so_and_exit_1(tmp_path,
                                                                                capsys):
    """A workload cut at max_seconds sends what arrived by then; served, a slower server
    admits differently: here every prompt is too long to serve and the figures compare
    nothing."""
    path = tmp_path / "small.toml"
    path.write_text(SCENARIO)
    assert main(["validate", str(path), "--variant", "static", "--out", str(tmp_path / "v"),
                 "--quiet", "--input-len", "300"]) == 1
    printed = capsys.readouterr().out
    assert "no request finished when served: nothing to compare" in printed


def test_a_static_batch_waiting_for_its_timeout_is_a_sleep_not_step_time(tiny_params):
    # six requests at once, batches of 4 with a 1 s timeout: the first batch runs at once, the
    # last two wait (asleep) for the timeout; the step before that wait has no cycle, the step
    # after it pays a wake-up
    from engine.block_manager import BlockManager
    from engine.executor import NumpyExecutor
    from engine.records import RunRecorder
    from engine.scheduler import Scheduler, SchedulerConfig
    from engine.sequence import Sequence
    from engine.server import serve
    from sim.costs import LinearCost
    from sim.profiling.serving import StepLog

    bm = BlockManager(64, 4)
    scheduler = Scheduler(SchedulerConfig(policy="static", max_batch_size=4, max_seq_len=128,
                                          batch_timeout_s=1.0), bm)
    log = StepLog(NumpyExecutor(tiny_params, bm, rng=np.random.default_rng(0)))
    requests = [Sequence(f"r{i}", 6, 3, prompt_token_ids=[1 + i] * 6, arrival_s=0.0)
                for i in range(6)]
    recorder = serve(scheduler, log, requests, RunRecorder(64))
    busy = busy_after(recorder)
    slept = np.flatnonzero(~np.isnan(recorder.slept_before()))
    assert slept.tolist() == [3] and busy.tolist() == [True, True, False, True, True, True]
    assert recorder.slept_before()[3] == pytest.approx(1.0)  # the timeout, from the arrivals

    class Waking(LinearCost):
        def wake_cost(self, idle_s: float) -> float:
            return 0.5

    cost = Waking(0.001, 1e-5, 1e-4, 0.0)
    rows = step_rows("static", recorder, log, cost)
    assert math.isnan(rows[2]["cycle_s"]) and rows[2]["measured_s"] < 0.9  # no wait inside
    assert rows[3]["predicted_s"] == pytest.approx(cost.step_time(log.shapes[3]) + 0.5)


def test_cli_prints_the_error_table(tmp_path, capsys):
    path = tmp_path / "small.toml"
    path.write_text(SCENARIO.replace("num_requests = 6", "num_requests = 2"))
    assert main(["validate", str(path), "--out", str(tmp_path / "v"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "metric" in printed and "error %" in printed and "ttft" in printed
    assert f"report: {tmp_path / 'v' / 'report.html'}" in printed
    assert (tmp_path / "v" / "validation.csv").is_file()


def test_runs_validated_on_a_process_pool_simulate_as_they_do_one_by_one(tmp_path, validated):
    """--jobs 2 serves and simulates the two variants side by side: the simulations (seeded,
    on the scenario's own linear cost model) are the same numbers as the serial validation's."""
    serial = read_csv(validated[1] / "validation.csv")
    path = tmp_path / "validate-case.toml"
    path.write_text(SCENARIO)
    assert main(["validate", str(path), "--out", str(tmp_path / "v"), "--quiet", "--jobs",
                 "2"]) == 0
    rows = read_csv(tmp_path / "v" / "validation.csv")
    assert [(r["variant"], r["metric"], r["stat"]) for r in rows] == \
        [(r["variant"], r["metric"], r["stat"]) for r in serial]
    assert [r["simulate"] for r in rows] == pytest.approx([r["simulate"] for r in serial],
                                                          rel=1e-9, nan_ok=True)
