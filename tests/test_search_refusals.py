"""`servesim search` refusing what it cannot search: bad search keys, a grid key also swept or
set by an override, a variant setting the rate, a grid point that cannot run (named as the
grid's), a bracket whose top probe counts nothing after the warm-up, and flags a search does
not take. Each is one line, exit status 2, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.search import linear_capacity
from sim.cli import main


@pytest.fixture
def linear(tmp_path) -> Path:
    return linear_capacity(tmp_path)


@pytest.mark.parametrize("override, message", [
    ("search.target=0", "search.target: must be a number above 0 and at most 1"),
    ("search.target=1.5", "search.target: must be a number above 0 and at most 1"),
    ("search.tolerance=1", "search.tolerance: must be a number above 0 and below 1"),
    ("search.rate={low = 8.0, high = 8.0}", "search.rate: low (8.0) must be below high (8.0)"),
    ("search.rate={low = 1.0, high = 8.0, mid = 4.0}",
     "search.rate.mid: unknown key (allowed: low, high)"),
    ("search.rate={low = -1.0, high = 8.0}", "search.rate.low: must be a positive number, "
                                             "got -1.0"),
    ("search.rate=8", "search.rate: must be a table { low, high }"),
    ("search.grid={}", "search.grid: must be a non-empty table"),
    ("search.grid={\"engine.max_num_seqs\" = []}",
     "search.grid.engine.max_num_seqs: must be a non-empty list"),
    ("search.grid={\"engine.bogus\" = [1, 2]}", "engine.bogus: unknown key"),
    ("search.grid={\"workload.arrival.rate\" = [1, 2]}",
     "search.grid.workload.arrival.rate: cannot be searched over"),
    ("search.grid={\"workload.arrival\" = [{process = \"poisson\", rate = 2.0}]}",
     "search.grid.workload.arrival: cannot be searched over"),  # a table holding the rate
    ("workload.arrival={process = \"closed_loop\", concurrency = 4}",
     "--set: workload.arrival.process: the search varies workload.arrival.rate"),
    # a client's limit holds requests back before their latencies start: any rate would pass
    ("workload.max_concurrency=4", "--set: workload.max_concurrency: a request's latencies "
                                   "start when it is sent"),
])
def test_bad_search_input_is_one_line_exit_2_and_nothing_runs(linear, tmp_path, capsys,
                                                               override, message):
    out = tmp_path / "out"
    status = main(["search", str(linear), "--out", str(out), "--quiet", "--set", override])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err and not out.exists()


def test_a_grid_key_also_swept_and_a_variant_setting_the_rate_are_refused(linear, tmp_path,
                                                                         capsys):
    out = tmp_path / "out"
    grid = "search.grid={\"engine.max_num_seqs\" = [1, 2]}"
    assert main(["search", str(linear), "--out", str(out), "--quiet", "--set", grid,
                 "--sweep", "engine.max_num_seqs=3,4"]) == 2
    err = capsys.readouterr().err
    assert "search.grid.engine.max_num_seqs: also a key of the sweep" in err
    table = "search.grid={\"engine\" = [{max_num_seqs = 1}, {max_num_seqs = 2}]}"
    assert main(["search", str(linear), "--out", str(out), "--quiet", "--set", table,
                 "--sweep", "engine.max_num_seqs=3,4"]) == 2
    assert "search.grid.engine: overlaps the sweep's engine.max_num_seqs" in \
        capsys.readouterr().err
    variant = tmp_path / "variant.toml"
    variant.write_text(linear.read_text() + '[[variants]]\nname = "fast"\n'
                                            'set = { "workload.arrival.rate" = 2.0 }\n')
    assert main(["search", str(variant), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "variant 'fast': sets " \
        "workload.arrival.rate, which the search sets itself" in err
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    # a grid point that cannot run is named as the grid's, not the sweep's
    (["--set", 'search.grid={"hardware.tp" = [1, 3]}'],
     'search.grid hardware.gpu="a100-80gb-sxm", hardware.tp=3: hardware.tp = 3 does not '
     'divide'),
    (["--set", 'search.grid={"hardware.tp" = [1, 3]}', "--sweep", "seed=1,2"],
     'sweep seed=1, search.grid hardware.gpu="a100-80gb-sxm", hardware.tp=3: hardware.tp = 3'),
    # and so is a key an override sets that the grid sets too, and a value given twice
    (["--set", "hardware.tp=2"], "--set hardware.tp sets hardware.tp, which search.grid also "
                                 "sets (hardware.tp = [1, 2])"),
    (["--set", 'search.grid={"hardware.tp" = [1, 1]}'],
     "search.grid.hardware.tp: gives 1 twice (each value is one point)"),
])
def test_what_a_search_grid_gives_is_named_as_the_grids(tmp_path, capsys, flags, message):
    out = tmp_path / "out"
    assert main(["search", "capacity-search", "--out", str(out), "--quiet", *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_a_bracket_whose_top_probe_would_count_nothing_after_the_warm_up_is_refused(
        linear, tmp_path, capsys):
    # 100 requests at 10/s arrive over 10 s, past a 5 s warm-up; at 1,000/s, within it
    out = tmp_path / "out"
    status = main(["search", str(linear), "--out", str(out), "--quiet", "--jobs", "1",
                   "--warmup-seconds", "5"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert "search.rate.high: at 1000 requests/s every request arrives within the 5 s " \
           "warm-up" in err
    assert not out.exists()


def test_flags_a_search_refuses_are_named_by_the_flag(linear, tmp_path, capsys):
    for flags, message in ((["--max-concurrency", "4"], "--max-concurrency: "
                                                        "workload.max_concurrency: "),
                           (["--num-prompts", "100000000"], "--num-prompts: "
                                                            "workload.num_requests: ")):
        assert main(["search", str(linear), "--out", str(tmp_path / "out"), "--quiet",
                     *flags]) == 2
        assert message in capsys.readouterr().err


def test_a_scenario_without_a_search_table_cannot_be_searched(tmp_path, capsys):
    assert main(["search", "kv-pressure", "--out", str(tmp_path / "out")]) == 2
    assert "needs a [search] table" in capsys.readouterr().err
