"""Runs and search points give the same results serially, on a process pool and on Ray (a local
Ray of 2 CPUs, started once for this module and shut down after), in the jobs' order; `servesim
run --jobs 2` writes the serial run's files byte for byte; a job's failure is raised as itself;
without Ray, --ray is one line saying how to install it."""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import scenarios
from sim.cli import main
from sim.parallel import RAY_MISSING, Parallel, WorkerLost, run_config_job, run_jobs
from sim.search import search, search_scenario

REPO = Path(__file__).resolve().parents[1]

SERIAL, POOL = Parallel(workers=1), Parallel(workers=2)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    yield Parallel(ray=True)
    ray.shutdown()


def run_records(parallel: Parallel) -> list[bytes]:
    scenario = scenarios.load("load-sweep", ["workload.num_requests=40"])
    jobs = [(spec.config, scenario.path.parent) for spec in scenario.runs()]
    return [pickle.dumps(recorder) for recorder in run_jobs(run_config_job, jobs, parallel)]


def search_rows(parallel: Parallel) -> bytes:
    scenario = search_scenario(scenarios.load("capacity-search", [
        "workload.num_requests=60", "search.grid={\"hardware.gpu\" = [\"a100-80gb-sxm\", "
                                    "\"l40s\"]}"]))
    return pickle.dumps(search(scenario, parallel).rows())


def test_runs_are_identical_serially_on_a_pool_and_on_ray(local_ray):
    serial = run_records(SERIAL)
    assert len(serial) == 8
    assert run_records(POOL) == serial
    assert run_records(local_ray) == serial


def test_search_results_are_identical_serially_on_a_pool_and_on_ray(local_ray):
    serial = search_rows(SERIAL)
    assert search_rows(POOL) == serial
    assert search_rows(local_ray) == serial


def test_a_running_ray_clusters_address_answers_as_ray(local_ray):
    """What `--ray-address` checks before ray.init (a listener that is not Ray is refused:
    tests/test_cli_flags.py) passes at a real cluster's GCS."""
    import ray
    from sim.parallel import _check_answers

    _check_answers(ray.get_runtime_context().gcs_address)


def test_a_ray_worker_killed_under_its_job_is_one_line(local_ray):
    """A task whose worker dies (the out-of-memory killer, a signal: here it exits) is
    WorkerLost, a one-line error, not Ray's traceback."""
    with pytest.raises(WorkerLost, match="a Ray worker ended before its run did"):
        run_jobs(os._exit, [1, 1], local_ray)


def test_results_keep_the_jobs_order_and_each_job_is_reported_done_once():
    finished = []
    results = run_jobs(math.sqrt, [16.0, 1.0, 9.0, 4.0], POOL,
                       done=lambda index, result: finished.append((index, result)))
    assert results == [4.0, 1.0, 3.0, 2.0]
    assert sorted(finished) == [(0, 4.0), (1, 1.0), (2, 3.0), (3, 2.0)]


def test_a_pool_runs_from_a_thread_other_than_the_main_one():
    """A library user's thread (a web app's, a notebook's) may run jobs on a process pool;
    only the main thread may set signal handlers, so none is set there."""
    results = {}
    thread = threading.Thread(target=lambda: results.update(
        r=run_jobs(math.sqrt, [1.0, 4.0], POOL)))
    thread.start()
    thread.join()
    assert results == {"r": [1.0, 2.0]}


def test_the_pools_helper_processes_ignore_a_hang_up():
    """A closed terminal hangs up the whole process group: the fork server (and the workers'
    resource tracker) must outlive it, or the tracker's restart prints a traceback a queue;
    the workers themselves end on it, as this process does."""
    code = ("import math, signal\n"
            "from multiprocessing import forkserver, resource_tracker\n"
            "from sim.parallel import Parallel, run_jobs\n"
            "run_jobs(math.sqrt, [1.0, 4.0], Parallel(workers=2))\n"
            "for pid in (forkserver._forkserver._forkserver_pid,\n"
            "            resource_tracker._resource_tracker._pid):\n"
            "    status = open(f'/proc/{pid}/status').read()\n"
            "    ignored = int(status.split('SigIgn:')[1].split()[0], 16)\n"
            "    print(bool(ignored & (1 << (signal.SIGHUP - 1))))\n")
    # a fresh process: the first pool of a process starts its helpers
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=os.environ | {"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_a_worker_killed_under_its_job_is_one_error_not_a_broken_pool():
    """The out-of-memory killer ends a worker mid-run: `WorkerLost`, a ValueError the commands
    print in one line, not concurrent.futures' BrokenProcessPool traceback."""
    with pytest.raises(WorkerLost, match="a worker process ended before its run did"):
        run_jobs(os._exit, [3], POOL)


def test_a_failing_job_raises_its_own_exception_from_the_pool():
    with pytest.raises(ValueError, match="math domain error"):
        run_jobs(math.sqrt, [4.0, -1.0], POOL)


def test_run_with_two_processes_writes_the_serial_files_byte_for_byte(tmp_path):
    hashes = {}
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        assert main(["run", "load-sweep", "--num-prompts", "20", "--quiet", "--out", str(out),
                     "--jobs", jobs]) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        hashes[jobs] = [(f["path"], f["sha256"]) for f in manifest["files"]]
    assert hashes["1"] == hashes["2"] and len(hashes["1"]) > 8


def test_without_ray_installed_ray_is_one_line_saying_how_to_install_it(monkeypatch, tmp_path,
                                                                        capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else find_spec(name, *a))
    assert main(["run", "kv-pressure", "--ray", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"servesim: error: {RAY_MISSING}" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, message", [
    (["--jobs", "0"], "argument --jobs: must be a whole number >= 1, got '0'"),
    (["--ray-address", "127.0.0.1:6379", "--jobs", "2"], "--jobs sets the CPUs of a local Ray"),
])
def test_bad_parallel_flags_are_one_line_exit_2(flags, message, tmp_path, capsys):
    try:
        status = main(["run", "kv-pressure", "--out", str(tmp_path / "out"), *flags])
    except SystemExit as exit_:  # argparse's own checks exit as it parses
        status = exit_.code
    assert status == 2
    assert message in capsys.readouterr().err
