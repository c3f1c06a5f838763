"""Profiling where steps really run: a quick served profile of a tiny model is fitted, written,
cached under this machine's fingerprint and reused; a profile of another machine is refused by
validate with one line and noted once by run; and a profile-then-validate round trip serves and
simulates the same requests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import scenarios
from scenarios import ScenarioError
from sim.costs import load_profile
from sim.profiling import cache, threads
from sim.profiling.fingerprint import differences, fingerprint, key
from sim.profiling.profiler import profile_engine
from sim.profiling.reference import BLOCK_SIZE
from sim.profiling.served import AFTER_STEPS, ServedSteps, served_steps
from sim.profiling.serving import serve_logged
from sim.profiling.workloads import HELD_OUT, TRAIN
from sim.validation.machine import check_profile, note_foreign_profiles, profile_for
from sim.validation.validate import validate

TINY = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
        "max_seq_len": 4096}
SCENARIO = """
name = "served-round-trip"
seed = 4
[model]
vocab_size = 64
d_model = 32
n_layers = 2
n_heads = 2
d_ff = 64
max_seq_len = 4096
[engine]
num_kv_blocks = 64
max_num_seqs = 4
[workload]
num_requests = 8
arrival = { process = "poisson", rate = 30.0 }
prompt_tokens = { dist = "uniform", low = 4, high = 60 }
output_tokens = { dist = "uniform", low = 2, high = 16 }
"""


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("served") / "tiny.json"
    return path, profile_engine(TINY, path, quick=True, progress=False, jitter_s=1.0)


def test_a_served_profile_holds_its_fingerprint_fit_and_errors_and_loads(profile):
    path, data = profile
    assert json.loads(path.read_text()) == data
    assert data["fingerprint"] == fingerprint(data["model"]) and data["block_size"] == BLOCK_SIZE
    assert data["fingerprint_key"] == key(data["fingerprint"])
    fit = data["fit"]
    for split in ("train", "held_out"):
        assert fit[split]["steps"] > 50
        assert 0 <= fit[split]["median_abs_rel_error"] <= fit[split]["p90_abs_rel_error"]
    assert set(fit["workloads"]) >= {"drain", "sparse", "held-mixed"}
    cost = load_profile(path)
    assert all(c >= 0 for c in cost.coefficients) and cost.reference_s > 0
    assert list(cost.wake_extra_s) == sorted(cost.wake_extra_s)
    assert all(len(row) == AFTER_STEPS for row in cost.after_extra_s)
    assert cost.jitter is not None


def test_the_profile_is_cached_under_its_fingerprint_and_reused(profile, monkeypatch):
    path, data = profile
    cached = cache.profile_file(data["fingerprint_key"])
    assert cached.read_text() == path.read_text()

    def no_profiling(*args, **kwargs):
        raise AssertionError("profiled again although the cache has this machine's profile")

    monkeypatch.setattr("sim.profiling.profiler.profile_engine", no_profiling)
    assert profile_for(data["model"]) == cached


def test_auto_says_when_it_uses_a_quick_profile(profile, capsys):
    path, data = profile
    assert profile_for(data["model"], progress=True) == cache.profile_file(data["fingerprint_key"])
    assert "using this machine's quick profile" in capsys.readouterr().err


def test_a_quick_profile_never_replaces_a_full_one_in_the_cache(profile, monkeypatch):
    path, data = profile
    cached = cache.profile_file(data["fingerprint_key"])
    full = json.dumps(dict(data, fit=dict(data["fit"], quick=False)))
    cached.write_text(full)
    measured = (load_profile(path), data["fit"])  # the served workloads, already measured
    monkeypatch.setattr("sim.profiling.profiler._profile_served", lambda *args: measured)
    try:
        assert cache.holds_full(data["fingerprint_key"])
        profile_engine(TINY, None, quick=True, progress=False, jitter_s=0.05)
        assert cached.read_text() == full
        profile_engine(TINY, None, quick=False, progress=False, jitter_s=0.05)
        assert cached.read_text() != full  # a full profile replaces it
    finally:
        cached.write_text(path.read_text())
    assert not cache.holds_full(data["fingerprint_key"])


def test_a_profile_of_another_machine_or_thread_setting_is_refused_in_one_line(profile,
                                                                               tmp_path):
    path, data = profile
    assert check_profile(str(path), data["model"], "x.toml: ") == path
    foreign = dict(data, fingerprint=dict(data["fingerprint"], host="elsewhere",
                                          blas_threads="8"))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(foreign))
    with pytest.raises(ScenarioError) as info:
        check_profile(str(other), data["model"], "x.toml: ")
    message = str(info.value)
    assert "\n" not in message and message.startswith("x.toml: cost.profile: ")
    assert "host 'elsewhere' there" in message and "blas threads '8' there" in message
    assert "--profile auto" in message
    old = tmp_path / "old.json"
    old.write_text(json.dumps({k: v for k, v in data.items() if k != "fingerprint"}))
    with pytest.raises(ScenarioError, match="records no machine fingerprint"):
        check_profile(str(old), data["model"], "")


def test_run_notes_a_foreign_profile_once(profile, tmp_path):
    path, data = profile
    other = tmp_path / "foreign.json"
    other.write_text(json.dumps(dict(data, fingerprint=dict(data["fingerprint"],
                                                            cpu="another CPU"))))
    scenario_path = tmp_path / "s.toml"
    scenario_path.write_text(SCENARIO + f'[cost]\nprofile = "{other}"\n')
    scenario = scenarios.load(scenario_path)
    [note] = note_foreign_profiles(scenario)
    assert "foreign.json" in note and "cpu 'another CPU' there" in note
    assert note_foreign_profiles(scenario) == []  # said once
    scenario_path.write_text(SCENARIO + f'[cost]\nprofile = "{path}"\n')
    assert note_foreign_profiles(scenarios.load(scenario_path)) == []  # this machine's


def test_a_profile_then_validate_round_trip_serves_and_simulates_the_same_requests(profile,
                                                                                   tmp_path):
    scenario = tmp_path / "round.toml"
    scenario.write_text(SCENARIO)
    result = validate(scenario, tmp_path / "out")  # --profile auto: the cached tiny profile
    [run] = result.runs
    assert run.spec.config.cost.profile == str(cache.profile_file(profile[1]
                                                                        ["fingerprint_key"]))
    served, simulated = run.serve.request_columns(), run.simulate.request_columns()
    assert served["status"] == simulated["status"] == ["finished"] * 8
    assert served["output_tokens"] == simulated["output_tokens"]
    assert served["prompt_tokens"] == simulated["prompt_tokens"]


def test_served_steps_count_the_after_prefill_distance_and_the_wake_up_as_the_simulator(
        tmp_path):
    path = tmp_path / "sparse.toml"
    path.write_text(SCENARIO.replace("rate = 30.0", "rate = 8.0"))  # idle gaps between requests
    recorder, log = serve_logged(scenarios.load(path).base)
    steps = served_steps(recorder, log.shapes)
    assert len(steps) == recorder.num_steps
    for i, shape in enumerate(steps.shapes):
        if steps.woke[i]:
            assert steps.after_k[i] == 0 and steps.idle_s[i] >= 0 and steps.lag_s[i] >= 0
        if steps.after_k[i]:
            j = i - steps.after_k[i]  # the step with the prefill it counts from
            assert steps.shapes[j].prefill_tokens == steps.after_tokens[i]
            assert not any(steps.woke[j + 1:i + 1])
    assert steps.woke.any() and steps.after_k.any()
    assert np.all(steps.seconds > 0)
    assert len(ServedSteps.join([steps, steps])) == 2 * len(steps)


def test_a_capped_workload_is_served_with_at_most_its_cap_in_flight(tmp_path):
    # validate --max-concurrency serves a client's slots as the simulator runs them
    path = tmp_path / "capped.toml"
    path.write_text(SCENARIO.replace("rate = 30.0 }", 'rate = 200.0 }\nmax_concurrency = 2'))
    recorder, _ = serve_logged(scenarios.load(path).base)
    columns = recorder.request_columns()
    assert columns["status"] == ["finished"] * 8
    sent, done = np.asarray(columns["arrival_s"]), np.asarray(columns["finish_s"])
    in_flight = [int(np.sum((sent <= t) & (done > t))) for t in sent]
    assert max(in_flight) == 2  # 8 requests in 40 ms: the cap holds them back
    loop = tmp_path / "loop.toml"  # a closed loop of 2 users: the same slots, all at once
    loop.write_text(SCENARIO.replace('{ process = "poisson", rate = 30.0 }',
                                     '{ process = "closed_loop", concurrency = 2 }'))
    recorder, _ = serve_logged(scenarios.load(loop).base)
    columns = recorder.request_columns()
    sent, done = np.asarray(columns["arrival_s"]), np.asarray(columns["finish_s"])
    assert columns["status"] == ["finished"] * 8
    assert max(int(np.sum((sent <= t) & (done > t))) for t in sent) == 2


def test_threads_are_set_before_numpy_loads_and_recorded_by_the_profile(tmp_path):
    out = tmp_path / "p.json"
    env = {k: v for k, v in os.environ.items() if k not in threads.THREAD_ENV}
    code = ("import sys\nfrom sim.cli import main\n"
            "sys.exit(main(['profile', '--model', 'vocab_size=64', 'd_model=32', 'n_layers=1',"
            " 'n_heads=2', 'd_ff=64', 'max_seq_len=4096', '--quick', '--quiet', '--out', "
            f"{str(out)!r}]))")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
    data = json.loads(out.read_text())
    assert data["fingerprint"]["blas_threads"] == str(threads.DEFAULT_THREADS)
    assert data["machine"]["thread_env"] == {name: "1" for name in threads.THREAD_ENV}
    assert threads.recorded(out) == "1"


def test_differences_name_each_field_that_differs():
    here = fingerprint(TINY)
    assert differences(here, here) == []
    other = dict(here, cores=here["cores"] + 1, model=dict(here["model"], d_model=64))
    assert differences(other, here) == [f"cores {here['cores'] + 1!r} there, {here['cores']!r} "
                                        f"here", "model.d_model 64 there, 32 here"]
    assert differences(dict(here, blas_threads="4"), here, ignore=("blas_threads",)) == []
    damaged = differences(dict(here, model=[1]), here)  # a damaged file: every key differs
    assert "model.d_model None there, 32 here" in damaged


def test_the_served_workloads_use_the_block_size_the_profile_records():
    assert {w.config(TINY).engine.block_size for w in TRAIN + HELD_OUT} == {BLOCK_SIZE}
