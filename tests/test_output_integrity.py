"""Output integrity: a command's output folder is whole or absent (a manifest of every file,
replaced whole, never mixed with an earlier run), a second command into the same folder is
refused, and an interruption (SIGINT, SIGTERM, a full disk) leaves nothing half-written and says
so in one line. That no bad input ever gives a traceback: test_hostile_scenarios.py."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import one_error_line
from helpers.outputs import INTEGRITY, leftovers
from reports import locks, output, places
from sim.cli import main


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    path = tmp_path / "integrity.toml"
    path.write_text(INTEGRITY)
    return path


def test_a_run_writes_a_manifest_of_every_file_and_replaces_an_earlier_run_whole(
        scenario_file, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet",
                 "--sweep", "workload.arrival.rate=4,8"]) == 0
    assert (out / "sweep.png").is_file()  # an earlier run with a chart this one has not
    swept = json.loads((out / "manifest.json").read_text())
    assert swept["sweep"] == {"workload.arrival.rate": [4, 8]} and swept["variants"] == [
        "default"] and swept["overrides"] == []
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["scenario"] == "integrity"
    assert manifest["seed"] == 0 and manifest["command"] == "run"
    listed = {f["path"]: f for f in manifest["files"]}
    assert set(listed) == {p.name for p in out.iterdir()} - {"manifest.json"}
    assert "sweep.png" not in listed  # the earlier run's file went with it
    for name, entry in listed.items():
        data = (out / name).read_bytes()
        assert entry["bytes"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert leftovers(tmp_path) == []


def test_the_manifest_writes_overrides_as_set_takes_them_back(scenario_file, tmp_path):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet",
                 "--max-concurrency", "2"]) == 0
    overrides = json.loads((out / "manifest.json").read_text())["overrides"]
    assert overrides == ['workload.arrival={process = "burst"}', "workload.max_concurrency=2"]


def test_a_second_command_into_the_same_folder_is_refused_in_one_line(scenario_file, tmp_path,
                                                                       capsys):
    out = tmp_path / "out"
    with locks.locked(tmp_path / ".out.lock", out):  # as a command writing it holds it
        assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 2
    assert "is being written by another servesim command" in one_error_line(capsys)
    assert not out.exists()


def test_a_stop_signal_while_the_folders_swap_waits_for_the_swap(scenario_file, tmp_path,
                                                                 capsys, monkeypatch):
    """Ctrl-C between moving the earlier folder aside and the new one in would leave the place
    empty: it is held until both renames are done, and the line says the output was written."""
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    rename, calls = output.os.rename, []

    def interrupted(source, destination):
        calls.append(destination)
        rename(source, destination)
        if len(calls) == 1:  # the earlier folder is aside, the new one not yet in
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(output.os, "rename", interrupted)
    # Ctrl-C as at a terminal (a suite started in the background begins with it ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status = main(["run", str(scenario_file), "--out", str(out), "--quiet", "--seed", "3"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 130
    assert f"interrupted; the output in {out}/ was written whole first" in one_error_line(capsys)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and "seed=3" in manifest["overrides"][0]
    assert leftovers(tmp_path) == []


def test_an_earlier_output_a_failed_swap_left_aside_is_put_back_not_removed(
        scenario_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rename, calls = output.os.rename, []

    def failing(source, destination):  # the earlier folder moves aside; nothing after
        calls.append(destination)
        if len(calls) > 1:
            raise OSError(errno.EIO, "Input/output error", str(destination))
        rename(source, destination)

    monkeypatch.setattr(output.os, "rename", failing)
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet", "--seed", "3"]) == 1
    capsys.readouterr()
    monkeypatch.setattr(output.os, "rename", rename)
    assert not out.exists() and [p.name.endswith(".old") for p in tmp_path.glob(".out.*")] == [
        True]
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet", "--seed", "3"]) == 0
    assert before != {p.name: p.read_bytes() for p in out.iterdir()}  # the new run replaced it
    assert leftovers(tmp_path) == []
    aside = tmp_path / ".out.servesim-abcdefgh.old"  # as a killed swap leaves it: put back
    out.rename(aside)
    assert output.remove_stale(tmp_path, ".out", out) == [] and (out / "manifest.json").is_file()


def test_a_command_making_the_lock_as_another_takes_it_is_told_the_place_is_busy(
        tmp_path, monkeypatch):
    """Command B writes its lock beside the place as command A makes and takes its own, then
    (under it) removes what killed commands left: B's file must survive A's clean-up, and B
    hear that the place is busy, not a FileNotFoundError."""
    lock, real_link = tmp_path / ".out.lock", output.os.link

    def link(source, destination):  # meanwhile, command A
        if not hasattr(link, "held"):
            (tmp_path / "a.tmp").write_bytes(locks.LOCK_TEXT)
            real_link(tmp_path / "a.tmp", lock)
            (tmp_path / "a.tmp").unlink()
            link.held = os.open(lock, os.O_RDWR)
            fcntl.flock(link.held, fcntl.LOCK_EX)
            output.remove_stale(tmp_path, ".out", tmp_path / "out")
        return real_link(source, destination)

    monkeypatch.setattr(output.os, "link", link)
    with pytest.raises(places.OutputBusy, match="is being written by another servesim command"):
        with locks.locked(lock, tmp_path / "out"):
            pass
    os.close(link.held)


def test_a_file_of_the_locks_name_that_servesim_did_not_make_is_refused_and_kept(
        scenario_file, tmp_path, capsys):
    lock = tmp_path / ".out.lock"
    lock.write_text("mine\n")
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "a file servesim did not make is where it keeps the lock" in one_error_line(capsys)
    assert lock.read_text() == "mine\n" and not (tmp_path / "out").exists()


def test_a_failed_command_removes_the_folders_it_made_above_its_output(scenario_file, tmp_path,
                                                                       capsys, monkeypatch):
    def failing(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("reports.writer._json", failing)
    (tmp_path / "kept").mkdir()
    out = tmp_path / "kept" / "new" / "deep" / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 130
    assert "interrupted; nothing written" in one_error_line(capsys)
    assert list((tmp_path / "kept").iterdir()) == []


def test_a_bad_source_date_epoch_is_one_line_before_any_work(scenario_file, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000.5")
    simulated = []
    monkeypatch.setattr("sim.cli.run._run_all", lambda *a, **k: simulated.append(1))
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "SOURCE_DATE_EPOCH must be whole seconds since 1970" in one_error_line(capsys)
    assert simulated == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("fault, status, message", [
    (KeyboardInterrupt(), 130, "servesim: interrupted; nothing written"),
    (OSError(errno.ENOSPC, "No space left on device"), 1, "No space left on device"),
])
def test_a_fault_while_writing_leaves_the_earlier_output_whole(scenario_file, tmp_path, capsys,
                                                               monkeypatch, fault, status,
                                                               message):
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()

    def failing(*args, **kwargs):
        raise fault

    monkeypatch.setattr("reports.writer._json", failing)
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == status
    line = one_error_line(capsys)
    assert message in line and "kept whole" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("sig, status, word", [(signal.SIGINT, 130, "interrupted"),
                                               (signal.SIGTERM, 143, "terminated")])
def test_a_signal_stops_a_real_process_with_one_line_and_no_partial_folder(tmp_path, sig,
                                                                           status, word):
    scenario = tmp_path / "long.toml"
    scenario.write_text(INTEGRITY.replace("num_requests = 12", "num_requests = 3000000")
                        .replace("rate = 8.0", "rate = 500.0"))
    out = tmp_path / "out"
    # A shell that runs the suite in the background has SIGINT ignored, and a child inherits
    # that (as a background job should); the command is tested as run in a terminal.
    process = subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(scenario), "--out",
                                str(out), "--quiet"], stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".partial") for p in tmp_path.iterdir()):
        assert time.monotonic() < deadline and process.poll() is None, "the run never started"
        time.sleep(0.05)
    time.sleep(0.5)  # well into the simulation
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == status
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"servesim: {word}; nothing written", err
    assert not out.exists() and leftovers(tmp_path) == []


def test_a_reader_that_stops_early_leaves_the_output_whole_and_no_error(scenario_file, tmp_path):
    """`servesim run ... | head -1`: the pipe closes before the summary is printed; the folder,
    renamed into place before printing, stays whole, and nothing is said on stderr."""
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(scenario_file),
                                "--out", str(out), "--quiet"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141 and err == ""
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_the_files_are_utf8_whatever_the_locale(tmp_path):
    """Under an ASCII locale (no UTF-8 mode, no coercion) the run writes the same bytes as
    under UTF-8, not a traceback: a scenario named "intégrité" and a variant "débit" included,
    the variant's name escaped where the summary prints it, and a folder's name that is not
    text printed as its own bytes (so it can be copied)."""
    scenario_file = tmp_path / "integrity.toml"
    scenario_file.write_text(INTEGRITY.replace('"integrity"', '"intégrité"')
                             + '[[variants]]\nname = "débit"\n', encoding="utf-8")
    env = os.environ | {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    run = subprocess.run([sys.executable, "-m", "sim.cli", "run", str(scenario_file), "--out",
                          str(tmp_path / "ascii"), "--quiet"], env=env, capture_output=True)
    assert run.returncode == 0, run.stderr
    assert b"d\\xe9bit " in run.stdout
    folder = os.fsencode(tmp_path) + b"/caf\xe9"
    run = subprocess.run([sys.executable, "-m", "sim.cli", "run", str(scenario_file), "--out",
                          folder, "--quiet"], env=env, capture_output=True)
    assert run.returncode == 0 and folder + b"/report.html" in run.stdout, run.stdout
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "utf8"), "--quiet"]) == 0
    report = (tmp_path / "ascii" / "report.md").read_bytes()
    assert "intégrité".encode() in report
    assert report == (tmp_path / "utf8" / "report.md").read_bytes()
