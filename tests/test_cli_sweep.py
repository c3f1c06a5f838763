"""`--sweep` as `servesim run` takes it: values split at top-level commas, a table key before
the keys inside it, a narrower key refining a wider one, points that make the same run refused;
and `--max-concurrency`, which keeps the arrivals a sweep, a search or the variants vary."""

from __future__ import annotations

import pytest

from helpers.cli import loaded, one_error_line, small_scenario
from sim.cli import build_parser, main
from sim.cli.common import load_scenario
from sim.cli.flag_values import sweep_flags


def test_num_prompts_limits_a_trace_and_sweep_crosses_the_variants():
    assert loaded("azure-code", "--num-prompts", "30").base.workload.trace.max_requests == 30
    assert loaded("prefix-caching", "--num-prompts", "7").base.workload.sessions \
        .conversations == 7  # multi-turn sessions: it counts conversations
    scenario = loaded("static-vs-continuous", "--sweep", "workload.arrival.rate=1,2.5")
    assert [(s.variant, s.sweep) for s in scenario.runs()] == [
        (v, {"workload.arrival.rate": r}) for v in ("static", "continuous") for r in (1, 2.5)]


ARRIVALS = ('workload.arrival={process = "poisson", rate = 2}, '
            '{process = "gamma", rate = 2, cv = 3}')


def test_a_swept_value_may_hold_commas():
    points = [s.sweep for s in loaded("static-vs-continuous", "--sweep", ARRIVALS).runs()]
    assert points[:2] == [{"workload.arrival": {"process": "poisson", "rate": 2}},
                          {"workload.arrival": {"process": "gamma", "rate": 2, "cv": 3}}]
    runs = loaded("static-vs-continuous", "--sweep", 'description="fast, cheap",slow').runs()
    assert [s.sweep["description"] for s in runs[:2]] == ["fast, cheap", "slow"]


@pytest.mark.parametrize("text, values", [
    ('"q\\",",b', ['q",', "b"]),  # an escaped quote closes no string
    ("'lit,eral',b", ["lit,eral", "b"]),  # a literal string
    ("it's,other", ["it's", "other"]),  # an apostrophe inside a bare word opens nothing
    ("[{x = 1}, {y = 2}],[]", [[{"x": 1}, {"y": 2}], []]),
    ('"""a,"b""",c', ['a,"b', "c"]),  # a multi-line basic string
    ('{low = 1, high = "a,b"}, 3', [{"low": 1, "high": "a,b"}, 3]),
])
def test_sweep_values_split_at_top_level_commas(text, values):
    assert sweep_flags([f"k={text}"]) == {"k": values}


def test_a_table_key_sweeps_before_the_keys_inside_it_wherever_each_is_given(tmp_path):
    path = small_scenario(tmp_path, "tables", """[sweep]
"workload.arrival" = [{ process = "poisson", rate = 1 }, { process = "gamma", rate = 1, cv = 2 }]
"workload.arrival.rate" = [1, 2]
""")
    for flags in ([], ["--sweep", ARRIVALS]):  # the flag's tables replace the file's
        runs = loaded(str(path), *flags).runs()
        assert list(runs[0].sweep) == ["workload.arrival", "workload.arrival.rate"]
        assert [(r.config.workload.arrival.process, r.config.workload.arrival.rate)
                for r in runs] == [("poisson", 1), ("poisson", 2), ("gamma", 1), ("gamma", 2)]


@pytest.mark.parametrize("scenario", ["static-vs-continuous", "load-sweep"])
def test_a_narrower_sweep_key_after_a_wider_one_refines_it(scenario):
    # load-sweep sweeps the rate itself: the flag's sweep of it replaces the file's, in the
    # flags' order (after workload.arrival)
    scenario = loaded(scenario, "--variant", "continuous", "--sweep", ARRIVALS,
                      "--sweep", "workload.arrival.rate=1,4")
    arrivals = [(s.config.workload.arrival.process, s.config.workload.arrival.rate)
                for s in scenario.runs()]
    assert arrivals == [("poisson", 1), ("poisson", 4), ("gamma", 1), ("gamma", 4)]


def test_a_swept_table_is_judged_by_the_keys_it_writes():
    # an untagged table merges: it writes workload.max_concurrency alone, which neither
    # --num-prompts nor the file's sweep of workload.arrival.rate sets
    scenario = loaded("load-sweep", "--num-prompts", "30", "--sweep",
                      "workload={max_concurrency = 4},{max_concurrency = 8}")
    assert {s.config.workload.max_concurrency for s in scenario.runs()} == {4, 8}
    assert {s.config.workload.num_requests for s in scenario.runs()} == {30}


def test_sweep_points_making_the_same_run_are_refused(capsys, tmp_path):
    # queue = "fcfs" is the default: the two tables set the same
    status = main(["run", "static-vs-continuous", "--variant", "continuous", "--out",
                   str(tmp_path / "o"), "--sweep", 'scheduler={policy = "continuous"},'
                   '{policy = "continuous", queue = "fcfs"}'])
    assert status == 2 and not (tmp_path / "o").exists()
    assert ('sweep scheduler={policy = "continuous"} and scheduler={policy = "continuous", '
            'queue = "fcfs"} make the same run') in one_error_line(capsys)


def test_max_concurrency_keeps_the_arrivals_a_search_or_the_variants_vary(tmp_path):
    args = build_parser().parse_args(["search", "capacity-search", "--max-concurrency", "4"])
    workload = load_scenario(args).base.workload
    assert workload.max_concurrency == 4 and workload.arrival.process == "poisson"
    path = small_scenario(tmp_path, "rates", """[[variants]]
name = "slow"
set = { "workload.arrival" = { process = "poisson", rate = 1 } }
[[variants]]
name = "fast"
set = { "workload.arrival" = { process = "gamma", rate = 4, cv = 2 } }
""")
    runs = loaded(str(path), "--max-concurrency", "4").runs()
    assert [(r.config.workload.arrival.rate, r.config.workload.max_concurrency)
            for r in runs] == [(1, 4), (4, 4)]
    # one variant alone runs as it does among the others
    [fast] = loaded(str(path), "--max-concurrency", "4", "--variant", "fast").runs()
    assert fast.config == runs[1].config
    for given in ("workload.arrival.rate=3", 'workload.arrival = {process = "poisson", '
                                             'rate = 3}'):  # a --set gives the arrivals
        kept = loaded("static-vs-continuous", "--set", given, "--max-concurrency", "4") \
            .base.workload
        assert (kept.arrival.process, kept.arrival.rate, kept.max_concurrency) == \
            ("poisson", 3, 4)
    swept = loaded("static-vs-continuous", "--max-concurrency", "2", "--sweep",
                   "workload={arrival = {process = \"poisson\", rate = 1}},"
                   "{arrival = {process = \"poisson\", rate = 2}}").runs()
    assert {r.config.workload.arrival.rate for r in swept} == {1, 2}


def test_max_concurrency_keeps_the_swept_rates():
    # vLLM's --max-concurrency alone sends at rate inf; where the scenario sweeps the rate,
    # each point keeps its own, with at most C in flight
    scenario = loaded("load-sweep", "--num-prompts", "20", "--max-concurrency", "2")
    assert {s.config.workload.max_concurrency for s in scenario.runs()} == {2}
    assert [s.config.workload.arrival.rate for s in scenario.runs()] == \
        [p["workload.arrival.rate"] for p in (s.sweep for s in scenario.runs())]
    assert loaded("static-vs-continuous", "--max-concurrency", "2").base.workload.arrival \
        .process == "burst"
