"""Hostile input to the commands, from a table of cases and from hypothesis (random scenarios
and overrides): each is one line and a non-zero status, never a traceback, and leaves no
partial folder, lock or old copy beside its output."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.outputs import INTEGRITY, leftovers
from sim.cli import main


def hostile_cases(tmp_path: Path) -> list:
    """(argv, scenario text or None, expected fragment of the one line)."""
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x00\x81\xfe" * 20)
    unreadable = tmp_path / "unreadable.toml"
    unreadable.write_text(INTEGRITY)
    unreadable.chmod(0)
    folder_as_file = tmp_path / "folder.toml"
    folder_as_file.mkdir()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    centuries = tmp_path / "centuries.csv"
    centuries.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                         "1700-01-01 00:00:00.0,10,5\n2300-01-01 00:00:00.0,10,5\n")
    trace = f'[workload]\ntrace = {{ path = "{centuries}" }}\n[cost]\nmodel = "linear"\n'
    return [
        (["run", "{s}"], trace, "its arrival times span 1.89e+10 s from the first row"),
        (["run", "{s}", "--set", "workload.arrival.rate=1e-14"], INTEGRITY,
         "lose sub-microsecond precision"),
        (["run", "{s}", "--set", "scheduler.batch_timeout_s=1e300"], INTEGRITY,
         "scheduler.batch_timeout_s"),
        (["run", "{s}", "--set", "workload.num_requests=1000000000000", "workload.arrival."
          "rate=1e9"], INTEGRITY, "workload.num_requests: the run would need about"),
        (["run", "{s}", "--set", "engine.num_kv_blocks=1000000000", "mode=\"cosimulate\"",
          "cost.model=\"live\""], INTEGRITY, "engine.num_kv_blocks: the run would need about"),
        (["run", "{s}", "--set", "workload.arrival={process=\"gamma\",rate=1.0,cv=1e6}"],
         INTEGRITY, "workload.arrival.cv: must be a number from 0.01 to 10"),
        (["run", "{s}", "--set", "seed=99999999999999999999"], INTEGRITY, "at most 2^63 - 1"),
        (["run", "{s}", "--set", "cost.model=\"profile\"", "cost.profile=\"/no/such.json\""],
         INTEGRITY, "cost.profile: file not found"),
        (["run", str(binary)], None, "not UTF-8 text (byte 1 is 81)"),
        (["run", str(unreadable)], None, "cannot read it"),
        (["run", str(folder_as_file)], None, "is a folder, not a scenario file"),
        (["run", "{s}", "--out", str(a_file / "out")], INTEGRITY, "is a file, so"),
        (["run", "{s}"], INTEGRITY.replace('name = "integrity"', 'name = "../../escaped"'),
         "cannot name its output folder"),
        (["run", "{s}"], "\ufeff" + INTEGRITY.replace('name = "integrity"',
                                                    'name = "bom"\ncolour = 1'),
         "colour: unknown key"),
        (["run", "{s}"], "a = " + "[" * 5000 + "]" * 5000, "not valid TOML"),
        (["profile", "--model", "seed=-1", "--out", str(tmp_path / "p.json")], None,
         "model.seed must be an integer from 0"),
        (["profile", "--quick", "--model", "max_seq_len=16", "--out", str(tmp_path / "p.json")],
         None, "--model max_seq_len: profiling (served) runs sequences of up to 2,096"),
    ]


def test_hostile_inputs_are_one_line_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run without --out would write under tmp_path/out
    for i, (argv, text, fragment) in enumerate(hostile_cases(tmp_path)):
        scenario = tmp_path / f"case{i}.toml"
        if text is not None:
            scenario.write_text(text)
        argv = [scenario.as_posix() if a == "{s}" else a for a in argv]
        if argv[0] == "run" and "--out" not in argv and "output folder" not in fragment:
            argv += ["--out", str(tmp_path / f"out{i}")]
        status = main(argv + ["--quiet"])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err, (argv, captured.err)
        if fragment == "cannot read it" and status == 0:
            continue  # root can read a mode-000 file
        lines = captured.err.strip().splitlines()
        assert status != 0 and len(lines) == 1 and fragment in lines[0], (argv, captured.err)
        assert not (tmp_path / f"out{i}").exists()
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "escaped").exists()
    assert [p for p in leftovers(tmp_path) if p.endswith((".partial", ".lock"))] == []


KEYS = st.sampled_from(["name", "seed", "mode", "model", "engine", "scheduler", "cost",
                        "workload", "slo", "variants", "sweep", "colour"])
LEAVES = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                   st.text(max_size=8), st.booleans(), st.lists(st.integers(), max_size=3))


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if value != value else ("inf" if value == float("inf") else
                                             "-inf" if value == float("-inf") else repr(value))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(top=st.dictionaries(KEYS, LEAVES, max_size=4),
       sets=st.lists(st.tuples(st.sampled_from(["workload.num_requests", "workload.arrival.rate",
                                                "engine.block_size", "model.d_model", "seed",
                                                "scheduler.policy", "cost.step_overhead_s",
                                                "workload.output_tokens.value", "x.y"]),
                               LEAVES), max_size=3))
def test_random_scenarios_and_overrides_never_trace_back_or_leave_a_partial_folder(
        tmp_path, capsys, top, sets):
    text = "\n".join(f"{k} = {_toml_value(v)}" for k, v in top.items()) + "\n" + INTEGRITY
    scenario = tmp_path / "fuzz.toml"
    scenario.write_text(text)
    out = Path(tempfile.mkdtemp(dir=tmp_path)) / "out"  # a fresh folder for every example
    argv = ["run", str(scenario), "--out", str(out), "--quiet"]
    for key, value in sets:
        argv += ["--set", f"{key}={_toml_value(value)}"]
    status = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if status == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["status"] == "complete"
    else:
        assert len(captured.err.strip().splitlines()) == 1 and not out.exists()
    assert [p for p in leftovers(tmp_path) if p.endswith((".partial", ".lock", ".old"))] == []
