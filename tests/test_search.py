"""`servesim search`: the bisection finds a known threshold and keeps its invariant under noise,
a server of computable capacity is found to within the tolerance, the CLI writes every file,
and the built-in capacity search ranks GPUs as their memory bandwidth says (bad input:
test_search_refusals.py)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

import scenarios
from sim.cli import main
from sim.parallel import Parallel
from reports.search_report import best_lines
from sim.search import (AT_LEAST_HIGH, FAILS_AT_LOW, FOUND, PointResult, Probe, SearchResult,
                        search, search_scenario)
from sim.search.bisection import bisect_rate
from helpers.configs import ONE_REQUEST, resolved
from helpers.search import CAPACITY_RPS, linear_capacity

SERIAL = Parallel(workers=1)


@dataclass(frozen=True)
class FakeProbe:
    rate: float
    meets: bool


def probe_below(threshold: float, dips=()):
    """A probe that meets the target up to `threshold`, except inside the (low, high) dips."""
    def probe(rate: float) -> FakeProbe:
        return FakeProbe(rate, rate <= threshold and not any(lo < rate < hi for lo, hi in dips))
    return probe


def answer(probes) -> tuple[float, float]:
    """(highest rate that met, lowest rate that failed above it)."""
    met = max(p.rate for p in probes if p.meets)
    return met, min(p.rate for p in probes if not p.meets and p.rate > met)


@pytest.fixture
def linear(tmp_path) -> Path:
    return linear_capacity(tmp_path)


def test_bisection_brackets_a_known_threshold_within_the_tolerance():
    probes = bisect_rate(probe_below(7.3), 0.5, 64.0, 0.05)
    met, failed = answer(probes)
    assert met <= 7.3 < failed and (failed - met) / failed < 0.05
    assert [p.rate for p in probes[:2]] == [0.5, 64.0]
    assert len(probes) == 2 + math.ceil(math.log2(math.log(128) / -math.log(0.95)))


def test_bisection_answers_a_rate_that_met_just_below_one_that_failed_when_not_monotone():
    probes = bisect_rate(probe_below(40.0, dips=[(5.0, 6.0)]), 0.5, 64.0, 0.05)
    met, failed = answer(probes)
    assert (failed - met) / failed < 0.05
    assert met < 5.0  # the dip at 5.66 was probed and failed: nothing above it is tried


def test_bisection_stops_at_low_when_it_fails_and_at_high_when_it_meets():
    assert [p.rate for p in bisect_rate(probe_below(0.1), 0.5, 64.0, 0.05)] == [0.5]
    assert [p.rate for p in bisect_rate(probe_below(100.0), 0.5, 64.0, 0.05)] == [0.5, 64.0]


@pytest.mark.parametrize("tolerance", [1e-15, 1e-16, 1e-300])
def test_a_tolerance_finer_than_floats_ends_when_the_midpoint_cannot_split_them(tolerance):
    probes = bisect_rate(probe_below(3.0), 0.5, 64.0, tolerance)
    met, failed = answer(probes)
    assert met <= 3.0 < failed and (failed - met) / failed < max(tolerance, 1e-15)
    assert len(probes) < 80  # before, 1e-16 probed forever


def test_search_finds_the_capacity_of_a_server_it_can_be_computed_for(linear):
    point, = search(search_scenario(scenarios.load(linear)), SERIAL).points
    met, failed = answer(point.probes)
    assert point.status == FOUND and point.best.rate == met
    assert met <= CAPACITY_RPS < failed and (failed - met) / failed < 0.01
    assert met > 0.99 * CAPACITY_RPS


def test_a_point_meeting_the_target_at_high_is_at_least_high_and_one_failing_low_fails(linear):
    at_least, = search(search_scenario(scenarios.load(
        linear, ["search.rate={low = 10.0, high = 50.0}"])), SERIAL).points
    failing, = search(search_scenario(scenarios.load(
        linear, ["search.rate={low = 200.0, high = 400.0}"])), SERIAL).points
    assert at_least.status == AT_LEAST_HIGH and at_least.figures()["capacity"] == 50.0
    assert failing.status == FAILS_AT_LOW and len(failing.probes) == 1
    assert math.isnan(failing.figures()["capacity"]) and failing.best is None


ON_GPUS = {"cost": {"model": "hardware"}, "model": {"name": "meta-llama/Llama-3.1-8B"},
           "workload": ONE_REQUEST}


def test_gpus_are_tensor_parallel_times_replicas():
    config = resolved(ON_GPUS | {"hardware": {"tp": 4, "gpu": "h100-sxm"},
                                 "cluster": {"replicas": 3}})
    point = PointResult(SimpleNamespace(config=config), ())
    assert point.gpus == 12
    assert point.dollars_per_hour == pytest.approx(12 * 3.24)
    numpy_engine = resolved({"workload": ONE_REQUEST})
    assert PointResult(SimpleNamespace(config=numpy_engine), ()).dollars_per_hour is None


def test_a_cluster_of_pools_counts_and_prices_each_pools_gpus():
    config = resolved(ON_GPUS | {"hardware": {"tp": 1, "gpu": "h100-sxm"}, "cluster": {"pools": [
        {"name": "h100", "replicas": 2, "set": {"hardware.tp": 2}},
        {"name": "l40s", "replicas": 3, "set": {"hardware.gpu": "l40s"}}]}})
    point = PointResult(SimpleNamespace(config=config), ())
    assert point.gpus == 2 * 2 + 3 * 1
    assert point.dollars_per_hour == pytest.approx(4 * 3.24 + 3 * 1.15)


def test_the_short_run_note_counts_the_requests_a_time_limit_let_through():
    """Under --max-seconds a probe sends fewer requests than num_requests: the note gives
    what was sent."""
    scenario = scenarios.load("capacity-search", [
        "workload.num_requests=100", "workload.max_seconds=0.5",
        "search.grid={\"hardware.gpu\" = [\"h100-sxm\"]}"])
    point = search(search_scenario(scenario), SERIAL).points[0]  # one H100
    sent = point.best.requests
    assert sent < 100
    assert f"the probe's {sent:,} requests were served at" in point.notes[-1]


def test_best_points_say_which_other_capacities_are_only_lower_bounds():
    h100, l40s = (resolved(ON_GPUS | {"hardware": {"gpu": gpu}}) for gpu in ("h100-sxm", "l40s"))

    def point(config, rates_met):
        return PointResult(SimpleNamespace(config=config), tuple(
            Probe(rate, 1.0 if met else 0.0, met, rate, rate, 100 * rate, 0.1, 0.01, 100)
            for rate, met in rates_met))

    # the H100 met the target at the top (7/s), the L40S was found at 6/s: per GPU the H100
    # leads; per dollar the L40S leads, unless the H100's true capacity is above 7 * 3.24 / 1.15
    result = SearchResult(None, None, (point(h100, [(1, True), (7, True)]),
                                       point(l40s, [(1, True), (8, False), (6, True)])))
    per_gpu, per_dollar = best_lines(result, ["h100", "l40s"])
    assert per_gpu == "best by capacity per GPU: h100: 7 requests/s a GPU (a lower bound: it " \
                      "met the target at the bracket's top)"
    assert per_dollar.startswith("best by capacity per dollar-hour: l40s: 5.22 requests/s per "
                                 "$/h; h100 met the "
                                 "target at the bracket's top, so might rank higher")


def test_best_points_name_the_rate_searched_and_what_to_do_when_none_met_the_target():
    h100 = resolved(ON_GPUS | {"hardware": {"gpu": "h100-sxm"}})
    chat = resolved(ON_GPUS | {"hardware": {"gpu": "h100-sxm"}, "workload": {
        "arrival": {"process": "poisson", "rate": 1.0},
        "sessions": {"conversations": 4, "turns": {"dist": "fixed", "value": 2},
                     "think_time_s": 1.0},
        "prompt_tokens": {"dist": "fixed", "value": 16},
        "output_tokens": {"dist": "fixed", "value": 4}}})

    def point(config, rates_met):
        return PointResult(SimpleNamespace(config=config), tuple(
            Probe(rate, 1.0 if met else 0.0, met, rate, rate, 100 * rate, 0.1, 0.01, 100)
            for rate, met in rates_met))

    failed = SearchResult(None, None, (point(h100, [(1, False)]),))
    assert best_lines(failed, ["h100"])[0] == (
        "best by capacity per GPU: none (no point met the target even at the bracket's "
        "bottom: lower search.rate's low)")
    conversations = SearchResult(None, None, (point(chat, [(1, True), (4, False), (2, True)]),))
    assert best_lines(conversations, ["h100"])[0] == \
        "best by capacity per GPU: h100: 2 conversations/s a GPU"


def test_search_writes_every_file_with_a_row_per_point(linear, tmp_path, capsys):
    out = tmp_path / "out"
    grid = "search.grid={\"cost.step_overhead_s\" = [0.01, 0.005]}"
    assert main(["search", str(linear), "--out", str(out), "--quiet", "--jobs", "1",
                 "--set", grid]) == 0
    assert {p.name for p in out.iterdir()} == {"search.csv", "probes.csv", "search.png",
                                                "report.md", "report.html", "manifest.json"}
    rows = list(csv.DictReader((out / "search.csv").open()))
    assert [r["cost.step_overhead_s"] for r in rows] == ["0.01", "0.005"]
    assert float(rows[1]["capacity"]) > 1.9 * float(rows[0]["capacity"])  # steps twice as fast
    report = (out / "report.md").read_text()
    assert "between 10 and 1000 requests/s" in report and "< 0.01" in report
    assert "arrivals constant at the rate searched" in report  # not the file's 10/s
    assert "best by capacity per GPU: 0.005: " in capsys.readouterr().out


def test_the_report_lists_what_the_probes_noted_and_at_which_points(tmp_path):
    # an A40 has no measured kernel tables: every probe of its point is the roofline's
    path = tmp_path / "a40.toml"
    path.write_text("""name = "a40"
[model]
name = "meta-llama/Llama-3.1-8B"
max_seq_len = 4096
[hardware]
gpu = "h100-sxm"
[cost]
model = "hardware"
[workload]
num_requests = 20
arrival = { process = "poisson", rate = 1.0 }
prompt_tokens = { dist = "fixed", value = 100 }
output_tokens = { dist = "fixed", value = 10 }
[slo]
ttft_s = 1.0
[search]
rate = { low = 1.0, high = 4.0 }
tolerance = 0.5
grid = { "hardware.gpu" = ["h100-sxm", "a40"] }
""")
    out = tmp_path / "out"
    assert main(["search", str(path), "--out", str(out), "--quiet", "--jobs", "1"]) == 0
    report = (out / "report.md").read_text()
    notes = report.split("### Notes from the runs")[1].split("##")[0]
    [row] = [line for line in notes.splitlines() if "roofline" in line]
    assert row.startswith("| no measured kernel tables for GPU 'a40'")
    assert row.endswith("| a40 |")  # said by the A40's point alone, not "every point"
    # which kernels cost the first point's operators, said as the run's report says it
    [kernels] = [line for line in report.splitlines() if line.startswith("| kernels |")]
    assert "kernels measured on h100-sxm" in kernels and "changes from point to point" in kernels


def test_a_shortened_capacity_search_reproduces_its_figures():
    """Exact values of a short search (100 requests: too few for two H100s' queue to build up
    within the bracket); regenerate by printing these figures after an intended change."""
    scenario = scenarios.load("capacity-search", [
        "workload.num_requests=100", "search.grid={\"hardware.gpu\" = [\"h100-sxm\", \"l40s\"]}"])
    result = search(search_scenario(scenario), SERIAL)
    rows = result.rows()
    assert [(r["status"], r["probes"]) for r in rows] == [
        (FOUND, 9), (AT_LEAST_HIGH, 2), (FOUND, 9), (FOUND, 9)]
    expected = [(112.40013826389117, 19.45372192728322), (128.0, 34.19792697297195),
                (10.374716437208077, 4.520688903509005), (18.220618156107065, 7.920100795600023)]
    for row, (rate, goodput) in zip(rows, expected):
        assert row["capacity"] == pytest.approx(rate, rel=1e-9)
        assert row["measured_goodput"] == pytest.approx(goodput, rel=1e-9)
    # 100 requests at 112/s on one H100 are one burst it drains at about 21/s: said
    assert "100 requests were served at 21.4 requests/s: too few to reach a steady state" in \
        result.points[0].notes[-1]


def test_the_h100_serves_the_most_chat_per_gpu_and_per_dollar():
    """The built-in search at full size: at TP 1 the H100 (3.35 TB/s) sustains a higher rate
    than the A100 (2.0 TB/s), which beats the L40S (0.86 TB/s); a second GPU adds capacity but
    less than doubles it (all-reduces), so goodput per GPU falls with TP."""
    result = search(search_scenario(scenarios.load("capacity-search")), Parallel())
    rows = {(p.spec.sweep["hardware.gpu"], p.spec.sweep["hardware.tp"]): row
            for p, row in zip(result.points, result.rows())}
    assert all(row["status"] == FOUND for row in rows.values())
    rate = {key: row["capacity"] for key, row in rows.items()}
    assert rate["h100-sxm", 1] > 2 * rate["a100-80gb-sxm", 1] > 2 * rate["l40s", 1]
    for gpu in ("a100-80gb-sxm", "h100-sxm", "l40s"):
        assert rate[gpu, 1] < rate[gpu, 2] < 2 * rate[gpu, 1]
        assert rows[gpu, 2]["capacity_per_gpu"] < rows[gpu, 1]["capacity_per_gpu"]
    best = result.best("capacity_per_dollar_hour")
    assert best.spec.sweep == {"hardware.gpu": "h100-sxm", "hardware.tp": 1}
    assert result.best("capacity_per_gpu") is best


def test_a_probes_error_names_its_point_and_rate():
    """A failure inside one point's bisection says which point and which rate: here 200
    requests at 1e-8 requests/s spread over 2e10 s, past what the simulator's clock holds."""
    scenario = scenarios.load("capacity-search", [
        "search.rate={low = 1e-8, high = 128.0}",
        "search.grid={\"hardware.gpu\" = [\"h100-sxm\"], \"hardware.tp\" = [1], "
        "\"workload.num_requests\" = [200]}"])
    with pytest.raises(ValueError, match=r"^default \(gpu=h100-sxm, tp=1, num_requests=200\) "
                                         r"at 1e-08 requests/s: a step would end at"):
        search(search_scenario(scenario), SERIAL)
