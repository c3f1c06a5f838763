"""The `servesim` command line, called through `main([...])`: runs write their files and print
the summary; every user mistake is one line on stderr with exit status 2 and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

import scenarios
from helpers.cli import one_error_line
from sim.cli import build_parser, main

SCENARIO = """
name = "cli-case"
description = "Two variants of a small workload."
[cost]
model = "linear"
[workload]
num_requests = 12
arrival = { process = "poisson", rate = 8.0 }
prompt_tokens = { dist = "uniform", low = 8, high = 64 }
output_tokens = { dist = "fixed", value = 6 }
[[variants]]
name = "static"
set = { "scheduler.policy" = "static" }
[[variants]]
name = "continuous"
"""
OUTPUTS = ("requests.csv", "steps.csv", "summary.csv", "summary-static.json",
           "summary-continuous.json", "report.md", "report.html", "latency_cdfs.png",
           "comparison.png", "timeline.png")


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    path = tmp_path / "cli-case.toml"
    path.write_text(SCENARIO)
    return path


def test_run_writes_every_file_and_prints_the_summary(scenario_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    header, rule, static, continuous = printed.splitlines()[:4]
    for title in ("completed", "rejected", "req/s", "out tok/s", "TTFT p50 ms", "TTFT p99 ms",
                  "TPOT p99 ms", "ITL p99 ms", "E2E p99 ms", "preemptions"):
        assert title in header
    assert static.startswith("static ") and continuous.startswith("continuous ")
    assert static.split()[1] == "12"
    assert f"report: {out / 'report.html'}" in printed
    for name in OUTPUTS:
        assert (out / name).is_file(), name


def test_run_says_why_requests_were_rejected(scenario_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet",
                 "--set", "model.max_seq_len=40"]) == 0
    printed = capsys.readouterr().out
    assert "\nstatic: " in printed and "\ncontinuous: " in printed
    assert "rejected: prompt (" in printed and "exceeds max_seq_len (40)" in printed


def test_run_defaults_to_out_slash_scenario_name(scenario_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(scenario_file), "--quiet", "--set", "workload.num_requests=3"]) == 0
    assert (tmp_path / "out" / "cli-case" / "report.html").is_file()


def test_set_overrides_reach_the_run(scenario_file, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet",
                 "--set", "workload.num_requests=5", "workload.output_tokens.value=3"]) == 0
    rows = (out / "requests.csv").read_text().splitlines()[1:]
    assert len(rows) == 10  # 5 requests x 2 variants
    assert "`workload.num_requests = 5`" in (out / "report.md").read_text()


@pytest.mark.parametrize("override, expected", [
    ("workload.arrival.rate=-1", "--set: workload.arrival.rate: must be a positive number, got -1"),
    ("engine.num_blocks=4", "--set: engine.num_blocks: unknown key (did you mean "
                            "'num_kv_blocks'? allowed: block_size"),
    ("engine.gpu_memory_utilization=0.8", "--set: engine.gpu_memory_utilization: unknown key "
                                          "(did you mean 'hardware.gpu_memory_utilization'? "),
    ("engine.max_model_len=8192", "--set: engine.max_model_len: unknown key (did you mean "
                                  "'model.max_seq_len'? "),  # vLLM's name of it
    ("workload.seed=3", "--set: workload.seed: unknown key (did you mean 'seed'? "),
    ("scheduler.policy=fifo", "--set: scheduler.policy: must be one of static, continuous"),
    ("rate", "--set: rate: --set expects KEY=VALUE"),
])
def test_a_bad_set_is_one_line_exit_2_and_nothing_written(scenario_file, tmp_path, capsys,
                                                           override, expected):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--set", override]) == 2
    line = one_error_line(capsys)
    assert line == f"servesim: error: {scenario_file}: {expected}" or \
        (line.startswith(f"servesim: error: {scenario_file}: ") and expected in line)
    assert not out.exists()


def test_a_bad_scenario_file_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(SCENARIO.replace("rate = 8.0", 'rate = "fast"'))
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    assert one_error_line(capsys) == (f"servesim: error: {path}: workload.arrival.rate: "
                                      "must be a positive number, got 'fast'")


def test_an_unknown_scenario_is_one_line_exit_2(capsys):
    assert main(["run", "no-such-scenario", "--quiet"]) == 2
    assert "no such scenario file or built-in scenario" in one_error_line(capsys)


def test_run_without_a_scenario_runs_the_default():
    args = build_parser().parse_args(["run"])
    assert args.scenario == scenarios.DEFAULT_SCENARIO == "static-vs-continuous"


def test_scenarios_lists_every_builtin_with_its_description(capsys):
    assert main(["scenarios"]) == 0
    printed = capsys.readouterr().out
    for name, description in scenarios.list_builtin():
        assert name in printed and description.split()[0] in printed
    assert "static-vs-continuous (default)" in printed


def test_profile_rejects_an_unknown_model_key(capsys, tmp_path):
    assert main(["profile", "--model", "width=3", "--out", str(tmp_path / "p.json")]) == 2
    assert "--model width=3: expected KEY=VALUE with KEY one of vocab_size" in one_error_line(capsys)


def test_profile_rejects_a_bad_model_value(capsys, tmp_path):
    assert main(["profile", "--model", "n_heads=3", "--out", str(tmp_path / "p.json")]) == 2
    assert "model.d_model (512) must be divisible by model.n_heads (3)" in one_error_line(capsys)


def test_profile_passes_the_model_and_options_to_the_profiler(monkeypatch, tmp_path, capsys):
    import sim.profiling.profiler

    calls, error = [], [0.05]

    def profile_engine(model_config, out_path, quick=False, progress=True, method="served",
                       store=True):
        calls.append((model_config, Path(out_path), quick, progress, method, store))
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)  # as write_atomic does
        Path(out_path).write_text("{}")
        return {"machine": {"profiling_s": 1.0}, "fingerprint": {"blas_threads": "1"},
                "fingerprint_key": "no-such-key",
                "fit": {"held_out": {"median_abs_rel_error": error[0]}}}

    monkeypatch.setattr(sim.profiling.profiler, "profile_engine", profile_engine)
    out = tmp_path / "profiles" / "small.json"
    assert main(["profile", "--model", "d_model=256", "n_layers=2", "--out", str(out),
                 "--quick", "--quiet"]) == 0
    [(model, path, quick, progress, method, store)] = calls[:1]
    assert (model.d_model, model.n_layers, model.n_heads) == (256, 2, 8)
    assert path == out and quick is True and progress is False and method == "served"
    assert store is True
    captured = capsys.readouterr()
    printed = captured.out
    assert f"cost.profile={out}" in printed and "held-out step error median 5.0%" in printed
    assert "and cached for `servesim validate --profile auto`" in printed
    assert "not timed steadily" not in captured.err
    error[0] = 0.5  # a profile measured on a busy machine says so
    assert main(["profile", "--model", "d_model=256", "n_layers=2", "--out",
                 str(out.with_name("busy.json")), "--quick", "--quiet"]) == 0
    assert "note: a held-out median error above 10% says the steps were not timed steadily" \
        in capsys.readouterr().err


@pytest.fixture
def fake_profiler(monkeypatch):
    """`profile_engine` replaced by one that writes its file at once: [its keyword arguments]."""
    import sim.profiling.profiler

    calls = []

    def profile_engine(model_config, out_path, **options):
        calls.append(options)
        Path(out_path).write_text('{"format": "servesim-profile/3"}')
        return {"machine": {"profiling_s": 1.0}, "fingerprint": {"blas_threads": "1"},
                "fingerprint_key": "no-such-key", "fit": {"held_out": {"median_abs_rel_error": 0}}}

    monkeypatch.setattr(sim.profiling.profiler, "profile_engine", profile_engine)
    return calls


def test_profile_says_a_bare_file_name_as_a_path_cost_profile_reads(fake_profiler, tmp_path,
                                                                    monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--out", "mine", "--quiet"]) == 0
    assert "use it with --set cost.profile=./mine" in capsys.readouterr().out
    assert main(["profile", "--out", "", "--quiet"]) == 2  # not the default place
    assert "--out: give a file's path" in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_profile_refuses_max_seq_len_below_the_grids_reference_step(fake_profiler, capsys,
                                                                      tmp_path):
    assert main(["profile", "--method", "grid", "--model", "max_seq_len=100", "--out",
                 str(tmp_path / "p.json")]) == 2
    assert "--model max_seq_len: profiling (grid) runs sequences of up to 128 tokens" in \
        one_error_line(capsys)
    assert fake_profiler == []


def test_profile_refuses_threads_the_environment_overrules(fake_profiler, monkeypatch, capsys,
                                                           tmp_path):
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert main(["profile", "--threads", "2", "--out", str(tmp_path / "p.json")]) == 2
    assert "--threads 2: the environment sets OPENBLAS_NUM_THREADS=1" in one_error_line(capsys)
    assert main(["profile", "--threads", "1", "--out", str(tmp_path / "p.json"),
                 "--quiet"]) == 0


def test_profile_with_a_cache_it_cannot_write_writes_its_file_and_says_so(
        fake_profiler, monkeypatch, capsys, tmp_path):
    blocked = tmp_path / "a_file"
    blocked.write_text("mine")
    monkeypatch.setenv("SERVESIM_CACHE", str(blocked))
    assert main(["profile", "--out", str(tmp_path / "p.json"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "note: the profile cache cannot be written" in captured.err
    assert "and cached for" not in captured.out and fake_profiler[0]["store"] is False
    assert (tmp_path / "p.json").is_file() and blocked.read_text() == "mine"


def test_profile_refuses_fewer_than_one_blas_thread(capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse's own checks exit as it parses
        main(["profile", "--threads", "0"])
    assert exit_.value.code == 2
    assert one_error_line(capsys) == "servesim: error: argument --threads: must be a whole " \
        "number >= 1, got '0' (see `servesim profile --help`)"


def test_every_command_line_is_read_and_its_blas_threads_set_before_numpy_loads(tmp_path):
    """BLAS reads its thread count once, when NumPy loads: reading any command's arguments
    loads no NumPy, and each command sets the count it runs with (`profile` --threads,
    `validate` its profile's, `serve` one; the others leave BLAS alone)."""
    import json
    import os
    import subprocess
    import sys

    from sim.profiling import threads

    profile = tmp_path / "measured.json"
    profile.write_text(json.dumps({"fingerprint": {"blas_threads": "3"}}))
    command_lines = {"run": ["run"], "search": ["search", "s.toml"], "scenarios": ["scenarios"],
                     "profile": ["profile", "--threads", "2"],
                     "validate": ["validate", "s.toml", "--profile", str(profile)],
                     "bench": ["bench", "http://127.0.0.1:8000"], "serve": ["serve"]}
    code = ("import json, os, sys\n"
            "from sim.cli import build_parser, set_threads\n"
            f"names, counts = {threads.THREAD_ENV!r}, {{}}\n"
            f"for command, argv in {command_lines!r}.items():\n"
            "    for name in names:\n"
            "        os.environ.pop(name, None)\n"
            "    set_threads(build_parser().parse_args(argv))\n"
            "    counts[command] = [os.environ.get(name) for name in names]\n"
            "assert 'numpy' not in sys.modules\n"
            "print(json.dumps(counts))\n")
    env = {k: v for k, v in os.environ.items() if k not in threads.THREAD_ENV}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    counts = {command: set(values) for command, values in json.loads(done.stdout).items()}
    assert counts == {"run": {None}, "search": {None}, "scenarios": {None}, "profile": {"2"},
                      "validate": {"3"}, "bench": {None}, "serve": {"1"}}
