"""The flags a `vllm bench serve` user reaches for, each the same as the scenario key it stands
for; `--set` never swallows the scenario after it; every mistake in a flag is one line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from helpers.cli import loaded, one_error_line, small_scenario
from sim.cli import build_parser, main
from sim.cli.common import load_scenario
from sim.cli.flag_values import split_set_values
from sim.search import search_scenario
from sim.workloads import build_workload, seeded_streams


SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_set_takes_only_key_value_words_and_leaves_the_scenario():
    assert split_set_values(["run", "--set", "a=1", "b=2", "kv-pressure", "--quiet"]) == \
        ["run", "--set=a=1", "--set=b=2", "kv-pressure", "--quiet"]
    scenario = loaded("--set", "workload.num_requests=20", "kv-pressure")
    assert scenario.name == "kv-pressure" and scenario.base.workload.num_requests == 20


@pytest.mark.parametrize("flags, key, expected", [
    (["--request-rate", "3"], "workload.arrival",
     {"process": "poisson", "rate": 3.0, "fixed_span": True}),
    (["--request-rate", "inf"], "workload.arrival", {"process": "burst"}),
    (["--request-rate", "4", "--burstiness", "0.25"], "workload.arrival",
     {"process": "gamma", "rate": 4.0, "cv": 2.0, "fixed_span": True}),
    (["--request-rate", "4", "--burstiness", "1"], "workload.arrival",
     {"process": "poisson", "rate": 4.0, "fixed_span": True}),
    (["--max-concurrency", "8"], "workload.arrival", {"process": "burst"}),  # rate inf
    (["--max-concurrency", "8"], "workload.max_concurrency", 8),
    (["--request-rate", "2", "--max-concurrency", "3"], "workload.arrival",
     {"process": "poisson", "rate": 2.0, "fixed_span": True}),
    (["--request-rate", "2", "--max-concurrency", "3"], "workload.max_concurrency", 3),
    (["--num-prompts", "42"], "workload.num_requests", 42),
    (["--seed", "7"], "seed", 7),
    (["--goodput", "ttft:500", "tpot:40", "e2el:9000"], "slo",
     {"ttft_s": 0.5, "tpot_s": 0.04, "e2e_s": 9.0}),
    (["--max-seconds", "30"], "workload.max_seconds", 30.0),
    (["--warmup-seconds", "5"], "workload.warmup_s", 5.0),
    # vLLM's random dataset: fixed lengths, or uniform from floor(N(1-R)) to ceil(N(1+R))
    (["--random-input-len", "1024"], "workload.prompt_tokens", {"dist": "fixed", "value": 1024}),
    (["--output-len", "128"], "workload.output_tokens", {"dist": "fixed", "value": 128}),
    (["--input-len", "1000", "--random-range-ratio", "0.25"], "workload.prompt_tokens",
     {"dist": "uniform", "low": 750, "high": 1250}),
    (["--random-input-len", "7", "--random-output-len", "3", "--random-range-ratio", "0.5"],
     "workload", {"prompt_tokens": {"dist": "uniform", "low": 3, "high": 11},
                  "output_tokens": {"dist": "uniform", "low": 1, "high": 5}}),
])
def test_each_flag_sets_the_scenario_key_it_stands_for(flags, key, expected):
    value = loaded("static-vs-continuous", *flags).base.to_dict()
    for part in key.split("."):
        value = value[part]
    if isinstance(expected, dict) and key == "workload":
        value = {k: value[k] for k in expected}
    assert value == expected


def test_goodput_flags_add_up_and_an_error_names_the_flag_that_made_it(tmp_path, capsys):
    slo = loaded("static-vs-continuous", "--goodput", "ttft:100", "--goodput", "tpot:50") \
        .base.slo
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s) == (0.1, 0.05, None)
    path = tmp_path / "warm.toml"
    path.write_text((SCENARIOS / "static-vs-continuous.toml").read_text()
                    .replace("[workload]\n", "[workload]\nwarmup_s = 10\n"))
    assert main(["run", str(path), "--max-seconds", "5", "--out", str(tmp_path / "o")]) == 2
    assert "--max-seconds: workload.warmup_s: must be below workload.max_seconds (5)" in \
        one_error_line(capsys)


def test_an_error_found_building_the_hardware_names_only_the_override_that_made_it(capsys,
                                                                                   tmp_path):
    assert main(["run", "fp8-kv", "--num-prompts", "20", "--set", "hardware.tp=3",
                 "--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys)
    assert ": --set: hardware.tp = 3 does not divide" in line and "--num-prompts" not in line


def test_a_dotted_key_may_be_quoted_as_in_a_file():
    scenario = loaded("static-vs-continuous", "--set", '"workload.num_requests"=5', "--sweep",
                      "'workload.arrival.rate'=1,2")
    assert scenario.base.workload.num_requests == 5
    assert [s.sweep for s in scenario.runs()[:2]] == [{"workload.arrival.rate": 1},
                                                      {"workload.arrival.rate": 2}]


def test_a_later_set_of_a_key_wins():
    assert loaded("static-vs-continuous", "--set", "workload.num_requests=7", "--set",
                  "workload.num_requests=8").base.workload.num_requests == 8


def test_a_rate_of_inf_sends_every_request_at_once():
    scenario = loaded("static-vs-continuous", "--request-rate", "inf", "--num-prompts", "5")
    workload = build_workload(scenario.base.workload, seeded_streams(0)["workload"])
    assert np.array_equal(workload.arrival_s, np.zeros(5))


def test_max_seconds_stops_arrivals_and_warmup_leaves_early_requests_out(tmp_path):
    from engine.benchmark import summarize
    from sim.runner import run_config

    scenario = loaded("static-vs-continuous", "--num-prompts", "200", "--max-seconds", "10",
                      "--warmup-seconds", "2")
    config = scenario.runs()[1].config
    recorder = run_config(config)
    arrivals = np.asarray(recorder.request_columns()["arrival_s"])  # from the first arrival
    assert 0 < len(arrivals) < 200 and arrivals.max() <= 10
    assert summarize(recorder, config.slo.limits(), 2.0)["completed"] == int((arrivals >= 2).sum())


@pytest.mark.parametrize("flags, message", [
    (["--burstiness", "2"], "--burstiness needs --request-rate"),
    (["--request-rate", "inf", "--burstiness", "2"],
     "--burstiness 2: --request-rate inf sends every request at once, with no gaps to shape"),
    (["--random-prefix-len", "10"], "--random-prefix-len is a flag of vllm bench serve that "
                                    "servesim does not take: prompts that share a prefix"),
    (["--request-rate", "1", "--burstiness", "1e-9"],
     "--burstiness: must be from 0.01 to 10,000 (gaps with a coefficient of variation"),
    (["--goodput", "latency:5"], "--goodput latency:5: expected METRIC:MS"),
    (["--goodput", "ttft:-1"], "--goodput ttft:-1: must be a positive number"),
    (["--request-rate", "0"], "argument --request-rate: must be a positive number of requests "
                              "a second, or inf (every request at once), got '0'"),
    (["--sweep", "workload.arrival.rate"], "--sweep workload.arrival.rate: expected KEY=V1,V2"),
    (["--sweep", "workload.arrival.rate=1,-1"],
     "sweep workload.arrival.rate=-1: workload.arrival.rate: must be a positive number"),
    (["--num-prompts", "many"], "argument --num-prompts: must be a whole number >= 1, got 'many'"),
    (["prefix-caching", "--request-rate", "1e-30"], "workload.arrival.rate: 120 conversations "
                                                    "at 1e-30/s would span about 1.2e+32 s"),
    (["prefix-caching", "--max-concurrency", "4"],
     "workload.max_concurrency: not allowed with workload.sessions"),
    (["load-sweep", "--request-rate", "3"], "--request-rate sets workload.arrival, which the "
                                            "scenario's [sweep] also sets"),
    (["load-sweep", "--num-prompts", "30", "--request-rate", "3"],
     "--request-rate sets workload.arrival, which the scenario's [sweep] also sets"),
    (["load-sweep", "--sweep", "workload.arrival={rate = 2},{rate = 3}"],
     "[sweep] workload.arrival.rate applies after --sweep workload.arrival and writes over all "
     "it sets, so its points would differ in name only"),
    (["pd-disaggregation", "--set", "cluster.kv_transfer_gbps=50"],
     "--set: cluster.kv_transfer_gbps: only with cluster.prefill_replicas and decode_replicas "
     "(a disaggregated cluster); variant 'split-2p2d' takes it: run it alone with --variant "
     "split-2p2d"),
    (["--sweep", "workload.arrival.rate=1,,2"], "--sweep workload.arrival.rate=1,,2: an empty "
                                                "value between commas"),
    (["--sweep", "workload.arrival={rate = 1"], "'{' is never closed"),
    (["--sweep", "workload.arrival=[1, 2},3"], "'}' closes '['"),
    (["--sweep", "workload.arrival=1]"], "']' closes nothing"),
    (["--sweep", 'description="a, b'], 'a string opened with " is never closed'),
    (["azure-code", "--num-prompts", "20", "--request-rate", "4"],
     "--request-rate: workload.arrival.process: must be 'trace' (or absent) with workload.trace"),
    (["--set", "scheduler.policy=\"bogus\""],  # every variant sets it: no --variant hint
     "--set: scheduler.policy: must be one of static, continuous, got 'bogus'\n"),
    (["--set", "scheduler.policy=\"bogus\"", "--seed", "3"],  # the hint weighs that key alone
     "--set: scheduler.policy: must be one of static, continuous, got 'bogus'\n"),
    (["--set", "workload.num_requests=7", "--num-prompts", "5"],
     "--set workload.num_requests is written over by --num-prompts, which applies after it"),
    (["--request-rate", "2", "--set", "workload.arrival.cv=2"],
     "--set workload.arrival.cv is written over by --request-rate"),
    (["--goodput", "ttft:100", "ttft:200"], "--goodput ttft:200: ttft is given twice"),
    (["--goodput", "ttft:100", "--goodput", "ttft:200"],
     "--goodput ttft:200: ttft is given twice"),
    (["--max-seconds", "1", "--warmup-seconds", "2"],
     "--warmup-seconds: workload.warmup_s: must be below workload.max_seconds (1)"),
    (["--sweep", "workload.arrival.rate=1,2", "--sweep", "workload.arrival.rate=3"],
     "--sweep workload.arrival.rate is given twice; give all its values in one"),
    (["--goodput", "ttft:x"], "--goodput ttft:x: must be a positive number"),
    # vllm bench serve's flags that servesim does not take: what it offers instead
    (["--save-result", "--result-dir", "x"], "--save-result is a flag of vllm bench serve "
                                             "that servesim does not take: servesim always "
                                             "writes vLLM's result file"),
    (["--metric-percentiles=50,101"], "argument --metric-percentiles: must be numbers from 0 "
                                      "to 100, separated by commas (e.g. 25,50,99.9), got '101'"),
    (["--metric-percentiles=50,50"], "argument --metric-percentiles: 50 is given twice"),
    (["--percentile-metrics", "ttft,e2e"], "argument --percentile-metrics: must be metrics "
                                           "among ttft, tpot, itl, e2el, separated by commas, "
                                           "got 'e2e'"),
    (["--random-range-ratio", "0.1"], "--random-range-ratio needs --random-input-len or "
                                      "--random-output-len"),
    (["--random-input-len", "1", "--random-range-ratio", "0.5"],
     "--random-input-len 1 with --random-range-ratio 0.5: the shortest prompt would be 0"),
    (["--random-range-ratio", "1", "--input-len", "9"],
     "argument --random-range-ratio: must be a number from 0 to below 1 (vLLM's range), "
     "got '1'"),
    (["azure-code", "--output-len", "64"], "--random-output-len: workload.output_tokens: not "
                                           "allowed with workload.trace"),
    (["--set", "scheduler.policy=\"bogus\"", "--variant", "static"],
     "--set scheduler.policy: changes no run: every variant (static) sets again what it sets"),
    (["load-sweep", "--set", "workload.arrival.rate=3"], "--set workload.arrival.rate sets "
                                                         "workload.arrival.rate, which the "
                                                         "scenario's [sweep] also sets"),
    (["--set", "workload.arrival.rate=3", "--sweep", "workload.arrival.rate=1,2"],
     "which --sweep also sets"),
    (["--set", "scheduler.chunked_prefill=true"],
     "variant 'static': scheduler.chunked_prefill: static batching prefills each batch whole"),
    (["--set", "scheduler.policy=\"static\""],
     "--set scheduler.policy: changes no run: every variant (static, continuous) sets again "
     "what it sets, after it"),
    (["--set", "scheduler.max_batch_size=8"],  # static sets its own, continuous reads none
     "--set scheduler.max_batch_size: changes no run: static sets it again after it, "
     "continuous does not read it"),
    (["--set", "engine.block_size=100000000"], "engine.block_size: must be at most "
                                               "model.max_seq_len (4096)"),
    # alone, it would replace the loop's users and their think time with a capped burst
    (["closed-loop", "--max-concurrency", "2"], "--max-concurrency: the scenario's arrivals are "
                                                "a closed loop of 3 users, whose number is "
                                                "workload.arrival.concurrency"),
])
def test_a_bad_flag_is_one_line_and_status_2(tmp_path, capsys, flags, message):
    if flags[0] == "closed-loop":
        flags = [write_closed_loop(tmp_path), *flags[1:]]
    if flags[0].startswith("--"):
        flags = ["static-vs-continuous", *flags]
    argv = ["run", flags[0], "--out", str(tmp_path / "o"), *flags[1:]]
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own checks exit as it parses
        status = exit_.code
    assert status == 2 and message in one_error_line(capsys) + "\n"
    assert not (tmp_path / "o").exists()


def write_closed_loop(tmp_path) -> str:
    path = tmp_path / "loop.toml"
    path.write_text('[workload]\nnum_requests = 10\narrival = { process = "closed_loop", '
                    'concurrency = 3, think_time_s = 0.5 }\nprompt_tokens = { dist = "fixed", '
                    'value = 50 }\noutput_tokens = { dist = "fixed", value = 10 }\n')
    return str(path)


def test_an_override_read_at_some_points_of_a_sweep_given_as_a_flag_is_taken(tmp_path, capsys):
    # the default scenario's continuous variant reads the batch size where --sweep makes it
    # static: the flags are resolved with the sweep, not without it
    status = main(["run", "--sweep", "scheduler.policy=continuous,static", "--set",
                   "scheduler.max_batch_size=8", "--num-prompts", "5", "--quiet", "--out",
                   str(tmp_path / "o")])
    assert status == 0, capsys.readouterr().err


def test_version_names_the_package(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.startswith("servesim ")


def test_the_cli_reference_is_the_parser_rendered():
    """docs/scenarios/cli-reference.md documents every flag once, as the parser has it
    (regenerate with `python docs/scenarios/cli_reference.py`)."""
    import runpy
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "docs" / "scenarios"
    reference = runpy.run_path(str(folder / "cli_reference.py"))["reference_text"]()
    assert (folder / "cli-reference.md").read_text() == reference
    for flag in ("--request-rate", "--max-concurrency", "--goodput", "--sweep", "--calibrate",
                 "--version", "--quick"):
        assert f"`{flag}`" in reference


def test_a_search_varies_the_rate_and_takes_burstiness_alone(tmp_path, capsys):
    # the search sets the rate of every probe: a rate given beside it would be dropped unsaid
    for flags in (["--request-rate", "3"], ["--request-rate", "3", "--burstiness", "0.25"],
                  ["--set", "workload.arrival.rate=3"],
                  ["--set", 'workload.arrival={process="gamma", rate=3, cv=2}']):
        out = tmp_path / "o"
        assert main(["search", "capacity-search", *flags, "--out", str(out)]) == 2
        line = one_error_line(capsys)
        assert ("--request-rate: servesim search varies the arrival rate itself" in line
                or "sets workload.arrival.rate, which the search sets itself" in line), line
        assert not out.exists()
    args = build_parser().parse_args(["search", "capacity-search", "--burstiness", "0.25"])
    searched = load_scenario(args)
    arrival = searched.base.workload.arrival
    assert (arrival.process, arrival.cv) == ("gamma", 2.0)
    assert search_scenario(searched).base.workload.arrival.process == "gamma"  # not refused
    assert main(["run", "capacity-search", "--burstiness", "0.25"]) == 2
    assert "--burstiness needs --request-rate" in one_error_line(capsys)


def test_a_ray_address_where_nothing_answers_is_one_line_not_a_wait(capsys, tmp_path):
    """ray.init waits without end for an address where no cluster answers: refused at once."""
    pytest.importorskip("ray")
    import socket

    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = small_scenario(tmp_path, "lost", "[[variants]]\nname = \"a\"\n[[variants]]\n"
                                            "name = \"b\"\nset = { seed = 2 }\n")
    out = tmp_path / "out"
    assert main(["run", str(path), "--ray-address", f"127.0.0.1:{port}", "--out", str(out),
                 "--quiet"]) == 1  # as a run whose worker was lost
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in one_error_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("server, said", [
    ("http", "it answered b'<!DOCTYPE'"),  # a web server (a Ray dashboard's port, say)
    ("silent", "nothing came back in 1 s"),  # a listener that accepts and says nothing
    ("trickle", "it answered b'x"),  # a byte at a time, each sooner than a read's wait
    ("closing", "it closed the connection"),  # reads, then closes
])
def test_a_ray_address_where_something_else_listens_is_one_line_not_a_wait(
        capsys, tmp_path, monkeypatch, server, said):
    """ray.init waits without end for an address that accepts and does not answer as Ray's
    gRPC: refused once the first bytes say it is not Ray, or its time is up (1 s here, in all:
    not a read's), whatever RAY_USE_TLS says but "1" or "true" (as Ray reads it)."""
    pytest.importorskip("ray")
    import http.server
    import socket
    import threading
    import time

    monkeypatch.setattr("sim.parallel.CONNECT_TIMEOUT_S", 1.0)
    monkeypatch.setenv("RAY_USE_TLS", "false")

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # its log is not servesim's stderr
            pass

    def serve(answer):  # each connection answered by `answer(connection)`, on a thread
        def accept():
            while True:
                try:
                    connection, _ = listener.accept()
                except OSError:  # closed: the test is over
                    return
                threading.Thread(target=answer, args=(connection,), daemon=True).start()
        threading.Thread(target=accept, daemon=True).start()

    def closing(connection):
        connection.recv(64)
        connection.close()

    def trickle(connection):
        for _ in range(8):
            time.sleep(0.4)
            try:
                connection.sendall(b"x")
            except OSError:  # servesim has hung up
                return

    if server == "http":
        listener = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=listener.serve_forever, daemon=True).start()
        port, stop = listener.server_address[1], listener.shutdown
    else:
        listener = socket.create_server(("127.0.0.1", 0))  # accepted by the kernel, unread
        port, stop = listener.getsockname()[1], listener.close
        if server != "silent":
            serve(trickle if server == "trickle" else closing)
    path = small_scenario(tmp_path, "other", "[[variants]]\nname = \"a\"\n[[variants]]\n"
                                             "name = \"b\"\nset = { seed = 2 }\n")
    try:
        assert main(["run", str(path), "--ray-address", f"127.0.0.1:{port}", "--out",
                     str(tmp_path / "out"), "--quiet"]) == 1
    finally:
        stop()
    line = one_error_line(capsys)
    assert f"what listens at 127.0.0.1:{port} is not a Ray cluster ({said}" in line
    assert "give the address `ray start --head` printed" in line
    if server == "trickle":  # what came in the 1 s (two bytes), not in eight reads' waits
        assert len(re.search(r"it answered b'(x*)'", line).group(1)) <= 4
    assert not (tmp_path / "out").exists()
