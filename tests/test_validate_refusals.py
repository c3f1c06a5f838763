"""What `servesim validate` refuses, in one line before anything runs: runs it cannot compare,
a flag the chosen way ignores, a profile that is no profile, and the hardware model without a
server to validate against."""

from __future__ import annotations

import pytest

from helpers.validation import SCENARIO
from sim.cli import main


@pytest.mark.parametrize("settings, message", [
    (["mode=\"cosimulate\"", "cost.model=\"live\""],
     "cost.model: validate compares a cost model with serving"),
    (["workload.arrival={process=\"closed_loop\",concurrency=2,think_time_s=1.0}"],
     "workload.arrival.think_time_s: validate serves requests at their arrival times"),
    (["cluster.replicas=2"], "cluster: validate serves one NumPy engine"),
    (["seed=3"], "workload.sessions: validate serves requests at arrival times given up front"),
])
def test_what_cannot_be_validated_is_one_line_and_nothing_runs(tmp_path, capsys, settings,
                                                               message):
    path = tmp_path / "small.toml"
    text = SCENARIO
    if "sessions" in message:  # conversations: a turn is sent when the last one ends
        text = text.replace("num_requests = 6\n", "").replace(
            "[[variants]]", "[workload.sessions]\nconversations = 2\nturns = { dist = "
            "\"fixed\", value = 2 }\n[[variants]]", 1)
    path.write_text(text)
    out = tmp_path / "v"
    assert main(["validate", str(path), "--out", str(out), "--quiet", "--set", *settings]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (["--against", "http://127.0.0.1:9", "--calibrate"],
     "--calibrate: with --against the server is benched from here"),
    (["--against", "http://127.0.0.1:9", "--jobs", "2"], "--jobs: with --against"),
    (["--timeout", "5"], "--timeout is the HTTP client's, for --against URL"),
    (["--endpoint", "/v1/chat/completions"], "--endpoint is the HTTP client's"),
    (["--endpoint", "/v1/completions"], "--endpoint is the HTTP client's"),  # its default too
    (["--against", "http://127.0.0.1:9", "--sweep", "engine.num_kv_blocks=32,64"],
     "send the same requests as another run and differ in the server's settings"),
    (["--profile", "default"], "--profile default: no run of the scenario costs its steps with "
                               "a profile (cost.model is 'linear')"),
    (["--calibrate"], "cost.model: --calibrate scales a profile's step costs"),
    (["--set", 'cost.model="profile"', "--profile", "nosuch"],
     "cost.profile: no shipped profile 'nosuch'"),
    (["--set", 'cost.model="profile"'], "model.max_seq_len: --profile auto profiles this "
                                        "machine with requests of up to 2,096 tokens"),
])
def test_a_flag_the_chosen_way_ignores_is_refused(tmp_path, capsys, monkeypatch, flags, message):
    monkeypatch.setenv("SERVESIM_CACHE", str(tmp_path / "cache"))  # no profile of this machine
    path = tmp_path / "small.toml"
    path.write_text(SCENARIO)
    out = tmp_path / "v"
    assert main(["validate", str(path), "--variant", "static", "--out", str(out), "--quiet",
                 *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


def test_a_profile_that_is_no_profile_says_so(tmp_path, capsys):
    path, bad = tmp_path / "small.toml", tmp_path / "bad.json"
    path.write_text(SCENARIO)
    bad.write_text("not json")
    assert main(["validate", str(path), "--variant", "static", "--out", str(tmp_path / "v"),
                 "--quiet", "--set", 'cost.model="profile"', "--profile", str(bad)]) == 2
    assert "cost.profile: " + str(bad) + ": not a servesim profile (not JSON" in \
        capsys.readouterr().err


def test_the_hardware_model_is_validated_against_a_server_not_in_process(tmp_path, capsys):
    # a GPU's costs are checked against a GPU server's URL; here the URL is dead, so every
    # request fails and the files say so
    out = tmp_path / "v"
    argv = ["validate", "llama3-8b-h100", "--variant", "static", "--num-prompts", "3",
            "--out", str(out), "--quiet"]
    assert main(argv + ["--against", "http://127.0.0.1:9"]) == 1
    assert (out / "validation.csv").is_file()
    capsys.readouterr()
    assert main(argv) == 2
    assert "must be one of profile, linear (the hardware model is validated against a GPU " \
           "server: --against URL), got 'hardware'" in capsys.readouterr().err
