"""Charts: the drawing rules every chart shares (the log axis, colours, labels of swept runs,
time axes), each chart's own series (weighted CDFs, step series through idle gaps, min-max
thinning, a cluster's steps and KV log read as one engine's) and what each chart plots."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from reports.cdf_chart import weighted_cdf
from reports.timeline_chart import step_series


def test_weighted_cdf_equals_the_cdf_of_the_expanded_values():
    values, counts = np.array([0.3, 0.1, 0.2, 0.1]), np.array([2, 1, 3, 4])
    x, y = weighted_cdf(values, counts)
    expanded = np.sort(np.repeat(values, counts))
    for xi, yi in zip(x, y):
        assert yi == pytest.approx(np.searchsorted(expanded, xi, side="right") / len(expanded))


def test_a_weighted_cdf_of_no_weight_is_no_curve():
    # every request in a warm-up: values, but no gap counted
    x, y = weighted_cdf(np.array([0.1, 0.2]), np.array([0, 0]))
    assert x.size == y.size == 0


def test_step_series_shows_idle_gaps_at_the_idle_value():
    t, y = step_series([0.0, 1.0, 5.0], [1.0, 2.0, 6.0], [3, 4, 2], 0.0)
    assert list(t) == [0.0, 1.0, 2.0, 5.0, 6.0]
    assert list(y) == [3, 4, 0, 2, 0]


def test_a_carried_step_series_holds_each_value_through_idle_gaps():
    t, y = step_series([0.0, 1.0, 5.0], [1.0, 2.0, 6.0], [3, 4, 2], None)
    assert list(t) == [0.0, 1.0, 5.0] and list(y) == [3, 4, 2]


def test_a_clusters_idle_replica_keeps_its_queue_and_drops_its_running_requests():
    """Nothing is admitted while a replica idles (a prefill replica whose blocks all wait to be
    sent): its waiting requests count on through the gap, its running ones do not."""
    from types import SimpleNamespace

    from reports.cluster_steps import cluster_steps

    columns = {"replica": [0, 0], "start_s": [0.0, 4.0], "end_s": [1.0, 5.0],  # idle 1 to 4 s
               "num_running": [2, 1], "num_waiting": [5, 6], "kv_blocks_used": [8, 9],
               "kv_blocks_cached": [0, 0], "cached_tokens": [0, 0], "num_prefill_tokens": [0, 0]}
    steps = cluster_steps(SimpleNamespace(step_columns=lambda: columns, kv_blocks_total=10,
                                          kv_series=None))
    assert list(steps["start_s"]) == [0.0, 1.0, 4.0]
    assert list(steps["num_waiting"]) == [5, 5, 6] and list(steps["num_running"]) == [2, 0, 1]
    assert list(steps["kv_blocks_used"]) == [8, 0, 9]


def test_a_clusters_kv_use_is_read_from_each_replicas_log_between_steps_too():
    """A prefill replica idle from 1 to 4 s holds 8 blocks until their KV is sent at 2.5 s;
    its steps record only the plans."""
    from types import SimpleNamespace

    from reports.cluster_steps import cluster_steps

    columns = {"replica": [0, 0], "start_s": [0.0, 4.0], "end_s": [1.0, 5.0],
               "num_running": [2, 1], "num_waiting": [0, 0], "kv_blocks_used": [8, 9],
               "kv_blocks_cached": [0, 0], "cached_tokens": [0, 0], "num_prefill_tokens": [0, 0]}
    log = (np.array([0.0, 1.0, 2.5, 4.0, 5.0]), np.array([8, 8, 0, 9, 1]))
    idle = (np.array([]), np.array([], dtype=np.int64))  # a replica sent nothing
    recorder = SimpleNamespace(step_columns=lambda: columns, kv_blocks_total=10,
                               replicas=[None, None], kv_series=[log, idle],
                               kv_used=lambda r: (log, idle)[r])
    steps = cluster_steps(recorder)
    assert list(steps["start_s"]) == [0.0, 1.0, 2.5, 4.0]
    assert list(steps["kv_blocks_used"]) == [8, 8, 0, 9]


def test_the_replicas_chart_names_each_pools_replicas():
    from reports.replicas_chart import pool_spans

    assert pool_spans(["prefill", "prefill", "decode", "decode"]) == "prefill 0-1, decode 2-3"
    assert pool_spans(["big", "small", "small", "small"]) == "big 0, small 1-3"


def test_minmax_keeps_each_slices_first_lowest_and_highest_point_and_every_gap():
    from reports.timeline_chart import minmax

    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 100, 50_000))
    y = rng.integers(0, 50, len(t)).astype(float)
    y[(t > 40) & (t < 41)] = np.nan  # an idle stretch
    kt, ky = minmax(t, y, bins=100)
    assert len(kt) <= 400 and np.all(np.diff(kt) >= 0)
    slice_of = lambda x: np.minimum(((x - t[0]) / (t[-1] - t[0]) * 100).astype(int), 99)
    for k in range(0, 100, 7):  # every slice keeps its extremes and its first and last points
        inside, kept = slice_of(t) == k, slice_of(kt) == k
        assert kt[kept][0] == t[inside][0] and kt[kept][-1] == t[inside][-1]
        assert np.nanmax(ky[kept]) == np.nanmax(y[inside])
        assert np.nanmin(ky[kept]) == np.nanmin(y[inside])
    assert np.isnan(ky[(kt > 40) & (kt < 41)]).all()
    short = np.arange(10.0)
    assert minmax(short, short, bins=100)[0] is short  # small series are drawn whole


def test_minmax_keeps_the_idle_value_that_closes_a_slice():
    from reports.timeline_chart import minmax

    # a busy stretch that goes idle (0) twice in one slice, then stays idle: the line must end
    # the slice at 0, not at the busy value before it
    t = np.concatenate([np.linspace(0, 0.9, 50), [0.95], np.linspace(100, 101, 500)])
    y = np.concatenate([np.full(20, 5.0), [0.0], np.full(29, 7.0), [0.0], np.full(500, 3.0)])
    kt, ky = minmax(t, y, bins=100)
    assert ky[np.searchsorted(kt, 0.95)] == 0.0


def test_an_axis_is_logarithmic_exactly_when_its_values_span_more_than_two_decades():
    from reports.figures import needs_log

    assert needs_log([99.3, 1765, 24747, 49792])  # continuous vs static TTFT (ms)
    assert not needs_log([19, 22, 34.5, 52.6])  # TPOT
    assert not needs_log([1.0, 100.0]) and needs_log([1.0, 100.1])
    assert not needs_log([0.0, 5.0, 1000.0])  # a zero cannot be drawn on a log axis
    assert needs_log([np.nan, 1.0, 1000.0]) and not needs_log([np.nan])


def test_every_chart_applies_the_log_rule_to_its_value_axes():
    from reports.cdf_chart import cdf_figure
    from reports.comparison_chart import comparison_figure

    fast = {f"{m}_{s}_s": 0.1 for m in ("ttft", "tpot", "itl", "e2e") for s in ("p50", "p99")}
    slow = dict(fast, ttft_p50_s=25.0, ttft_p99_s=50.0)
    for summary in (fast, slow):
        summary.update(output_throughput=400.0, preemptions=0)
    fig = comparison_figure(["static", "continuous"], [slow, fast])
    scales = [ax.get_xscale() for ax in fig.axes[:4]]
    assert scales == ["log", "linear", "linear", "linear"]
    assert "log scale" in fig.axes[0].get_xlabel() and "log" not in fig.axes[1].get_xlabel()

    gaps = ([0.01, 0.02], [3, 1])  # inter-token gaps, and the tokens each counts for
    frame = pd.DataFrame({"ttft_s": [0.1, 30.0], "tpot_s": [0.02, 0.03], "e2e_s": [1.0, 2.0]})
    fig = cdf_figure([("run", frame, gaps)])
    assert [ax.get_xscale() for ax in fig.axes[:4]] == ["log", "linear", "linear", "linear"]
    # gaps of 20 ms but a tail to 1 s: less than two decades, 50 times the median
    fig = cdf_figure([("run", frame, ([0.02, 0.03, 1.0], [18, 1, 1]))])
    assert [ax.get_xscale() for ax in fig.axes[:4]] == ["log", "linear", "log", "linear"]


def test_a_sweep_of_anything_but_the_rate_is_drawn_against_the_swept_value():
    from reports.sweep_chart import sweep_figure
    from scenarios import RunSpec

    specs = [RunSpec("continuous", {"hardware.tp": tp}, {}) for tp in (2, 4)]
    summaries = [{f"{m}_{s}_s": 0.1 * tp for m in ("ttft", "tpot", "e2e") for s in ("p50", "p99")}
                 | {"request_throughput": 1.50 + tp / 1000} for tp in (2, 4)]
    fig = sweep_figure(specs, summaries)
    ttft, throughput = fig.axes[0], fig.axes[3]
    assert list(ttft.get_lines()[0].get_xdata()) == [2, 4]  # not the throughputs
    assert list(ttft.get_xticks()) == [2, 4] and throughput.get_ylim()[0] == 0
    assert "achieved throughput" not in ttft.get_xlabel()
    # the load swept as a table, or the rate as a later key: against achieved throughput
    tables = [RunSpec("continuous", {"workload.arrival": {"process": "poisson", "rate": r}}, {})
              for r in (2.0, 4.0)]
    later = [RunSpec("continuous", {"engine.num_kv_blocks": 64, "workload.arrival.rate": r}, {})
             for r in (2.0, 4.0)]
    for swept in (tables, later):
        ttft, throughput = sweep_figure(swept, summaries).axes[::3]
        assert list(ttft.get_lines()[0].get_xdata()) == [1.502, 1.504]
        assert "achieved throughput" in ttft.get_xlabel()
    labels = [t.get_text() for t in sweep_figure(tables, summaries).axes[3].get_xticklabels()]
    assert labels == ['{process = "poisson", rate = 2}', '{process = "poisson", rate = 4}']
    # burstiness swept at one rate: one load, drawn against the swept value
    bursty = [RunSpec("continuous", {"workload.arrival.cv": cv}, {}) for cv in (1.0, 4.0)]
    ttft = sweep_figure(bursty, summaries).axes[0]
    assert list(ttft.get_lines()[0].get_xdata()) == [1.0, 4.0]


def test_sweep_runs_are_labelled_by_the_swept_value_alone():
    from reports.labels import short_labels
    from scenarios import RunSpec

    rates = [RunSpec("continuous", {"workload.arrival.rate": r}, {}) for r in (1.0, 2.5)]
    assert short_labels(rates) == (["1", "2.5"], "request rate (requests/s)")
    crossed = rates + [RunSpec("static", {"workload.arrival.rate": 1.0}, {})]
    assert short_labels(crossed) == (["continuous, rate=1", "continuous, rate=2.5",
                                      "static, rate=1"], None)
    plain = [RunSpec("a", {}, {}), RunSpec("b", {}, {})]
    assert short_labels(plain) == (["a", "b"], None)


def test_runs_of_very_different_lengths_get_their_own_time_axes():
    from reports.timeline_chart import shared_time_axis, timeline_figure

    def steps(end_s):
        ends = np.linspace(1.0, end_s, 20)
        return {"start_s": ends - 0.5, "end_s": ends, "num_running": np.ones(20, int),
                "num_waiting": np.zeros(20, int), "kv_blocks_used": np.ones(20, int),
                "kv_blocks_total": 8}

    assert shared_time_axis([100.0, 90.0]) and not shared_time_axis([300.0, 60.0])
    fig = timeline_figure([("long", steps(300.0)), ("short", steps(60.0))])
    long_panel, short_panel = fig.axes[:2]  # the panels, then their KV twins
    assert long_panel.get_xlim()[1] > 250 and short_panel.get_xlim()[1] < 80
    assert fig.legends and not any(ax.get_legend() for ax in fig.axes)  # one legend, below


def test_validation_lines_of_one_variant_share_a_colour_solid_and_dashed():
    from reports.cdf_chart import cdf_figure

    gaps = ([0.01, 0.02], [3, 1])
    frame = pd.DataFrame({"ttft_s": [0.1, 0.2], "tpot_s": [0.02, 0.03], "e2e_s": [1.0, 2.0]})
    runs = [(f"{name}: {mode}", frame, gaps) for name in ("a", "b")
            for mode in ("served", "simulated")]
    styles = [("C0", "-"), ("C0", "--"), ("C1", "-"), ("C1", "--")]
    lines = cdf_figure(runs, styles).axes[0].get_lines()
    assert [line.get_color() for line in lines] == ["C0", "C0", "C1", "C1"]
    assert [line.get_linestyle() for line in lines] == ["-", "--", "-", "--"]
