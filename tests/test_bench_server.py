"""`servesim bench` and `servesim validate --against` end to end against a real HTTP server:
`servesim serve` started on a free loopback port with a tiny model. The client's token counts
are the engine's, `--max-concurrency` caps the requests in flight, and the comparison with the
simulation is written."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time

import pytest

from sim.bench import BenchOptions, bench_runs

import scenarios

TINY = ["model.vocab_size=64", "model.d_model=32", "model.n_layers=2", "model.n_heads=2",
        "model.d_ff=64", "model.max_seq_len=512"]
SCENARIO = """
name = "bench-case"
seed = 4
[workload]
num_requests = 12
arrival = { process = "poisson", rate = 20.0 }
prompt_tokens = { dist = "uniform", low = 8, high = 60 }
output_tokens = { dist = "uniform", low = 2, high = 16 }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A `servesim serve` process on a free port: its base URL. Its stderr goes to a file
    (a pipe nobody reads could fill and stall it)."""
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with open(log, "w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "sim.cli", "serve", "--port", "0",
                                    "--set", *TINY], stderr=stderr, text=True)
    deadline = time.monotonic() + 120
    url = None
    while url is None:
        assert time.monotonic() < deadline and process.poll() is None, "the server never started"
        found = re.search(r"^serving .*, on (http://\S+)$", log.read_text(), re.M)
        url = found.group(1) if found else time.sleep(0.05)
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "bench-case.toml"
    path.write_text(SCENARIO)
    return path


def test_priorities_are_sent_and_a_server_without_a_priority_queue_refuses_them_alone(
        server, tmp_path):
    # the module's server is fcfs: a request with priority 1 fails with its 400, as vLLM's
    path = tmp_path / "prio.toml"
    path.write_text(SCENARIO.replace("[workload]", "[workload]\npriority = { dist = \"choice\", "
                                                   "values = [0, 1] }"))
    run, = bench_runs(scenarios.load(path, [*TINY, 'scheduler.queue="priority"']),
                      BenchOptions(server))
    sent = [r.priority for r in run.results]
    assert set(sent) == {0, 1}
    assert run.recorder.request_columns()["priority"] == sent
    for r in run.results:
        assert r.finished == (r.priority == 0), r.reason
        assert r.finished or "priority scheduling is not enabled" in r.reason
    # a run whose own queue ignores priorities sends none, and says so
    fcfs, = bench_runs(scenarios.load(path, TINY), BenchOptions(server))
    assert all(r.finished and r.priority is None for r in fcfs.results)
    assert "priorities: drawn but not sent (scheduler.queue is fcfs" in " ".join(fcfs.notes)


def test_the_client_counts_the_tokens_the_engine_generated(server, scenario_file):
    run, = bench_runs(scenarios.load(scenario_file, TINY), BenchOptions(server))
    assert [r.status for r in run.results] == ["finished"] * 12
    for r in run.results:  # max_tokens with ignore_eos: exactly the planned output
        assert r.completion_tokens == r.planned_output_tokens
        assert r.prompt_tokens == r.planned_prompt_tokens  # as the server counted them
        # a chunk a token, but a token that decodes to no text (a special id) carries none
        assert 0 < len(r.chunk_s) <= r.planned_output_tokens
    cols = run.recorder.request_columns()
    assert cols["output_tokens"] == [r.planned_output_tokens for r in run.results]


def test_max_concurrency_caps_the_requests_in_flight_and_is_recorded(server, scenario_file,
                                                                      tmp_path):
    from sim.cli import main

    out = tmp_path / "capped"
    assert main(["bench", server, str(scenario_file), "--out", str(out), "--quiet",
                 "--request-rate", "inf", "--max-concurrency", "2", "--set", *TINY]) == 0
    record = json.loads((out / "summary.json").read_text())
    assert record["max_concurrency"] == 2 and record["request_rate"] == "inf"
    assert record["max_concurrent_requests"] == 2  # vLLM's peak, of the finished requests
    assert "at most 2 requests in flight" in (out / "report.md").read_text()
    # every request sent at t=0, as the flags above ask: at 20 req/s a tiny request can end
    # before the next is sent, and one is in flight at a time
    capped = ["workload.max_concurrency=2", 'workload.arrival={process="burst"}']
    run, = bench_runs(scenarios.load(scenario_file, TINY + capped), BenchOptions(server))
    assert run.max_in_flight == 2
    assert all(r.status == "finished" for r in run.results)


def test_bench_and_validate_against_write_their_files(server, scenario_file, tmp_path):
    from sim.cli import main

    out = tmp_path / "bench"
    assert main(["bench", server, str(scenario_file), "--out", str(out), "--quiet",
                 "--metric-percentiles", "50,99.9", "--set", *TINY]) == 0
    with open(out / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 12 and {r["status"] for r in rows} == {"finished"}
    assert not (out / "steps.csv").exists()
    record = json.loads((out / "summary.json").read_text())
    assert record["p50_ttft_ms"] == record["median_ttft_ms"] and "p99.9_itl_ms" in record
    against = tmp_path / "against"
    assert main(["validate", str(scenario_file), "--against", server, "--out", str(against),
                 "--quiet", "--set", *TINY, "cost.model=\"linear\""]) == 0
    assert (against / "validation.csv").is_file()
