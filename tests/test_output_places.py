"""Where a command may write: `--out` replaces only a folder servesim wrote (every entry listed
in its manifest), refuses any other non-empty folder, the root and the current folder before
anything runs, follows symbolic links to one place (one lock, the link kept), cleans what killed
commands left there, and writes with the user's umask (what a user may not write, and
`profile --out`: test_output_permissions.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import one_error_line
from helpers.outputs import PLACES, leftovers, places_file, run
from reports import locks
from sim.cli import main


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    return places_file(tmp_path)


def test_a_folder_with_a_users_file_is_refused_and_the_file_kept(scenario_file, tmp_path,
                                                                 capsys, monkeypatch):
    out = tmp_path / "mydata"
    out.mkdir()
    (out / "important.txt").write_text("x")
    simulated = []
    monkeypatch.setattr("sim.cli.run._run_all", lambda *a, **k: simulated.append(1))
    assert run(scenario_file, out) == 2
    line = one_error_line(capsys)
    assert "mydata: the folder holds files servesim did not write (important.txt)" in line
    assert simulated == []  # refused before anything ran
    assert sorted(p.name for p in out.iterdir()) == ["important.txt"]
    assert (out / "important.txt").read_text() == "x"


def test_a_file_added_to_servesims_folder_makes_it_the_users(scenario_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(scenario_file, out) == 0
    (out / "notes.md").write_text("mine")
    assert run(scenario_file, out) == 2
    assert "(notes.md)" in one_error_line(capsys)
    assert (out / "notes.md").read_text() == "mine"


def test_a_file_servesim_wrote_and_the_user_changed_is_kept(scenario_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(scenario_file, out) == 0
    (out / "report.md").write_text("my edits")
    assert run(scenario_file, out) == 2
    assert "(report.md)" in one_error_line(capsys)
    assert (out / "report.md").read_text() == "my edits"


def test_an_edit_that_keeps_a_files_size_is_the_users_too(scenario_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(scenario_file, out) == 0
    text = (out / "summary.csv").read_text()
    edited = text.replace("0", "9", 1)
    assert len(edited) == len(text) and edited != text
    (out / "summary.csv").write_text(edited)
    assert run(scenario_file, out) == 2
    assert "(summary.csv)" in one_error_line(capsys)
    assert (out / "summary.csv").read_text() == edited


def test_places_that_cannot_be_replaced_whole_are_refused_before_simulating(
        scenario_file, tmp_path, capsys, monkeypatch):
    first = tmp_path / "first"
    assert run(scenario_file, first) == 0
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    volume = tmp_path / "volume"
    volume.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == volume)
    monkeypatch.setattr("sim.cli.run._run_all", lambda *a, **k: pytest.fail("simulated"))
    for out, why in ((first / "nested", f"inside {first}, an output folder servesim wrote"),
                     (a_file, "is a file, so"), (a_file / "out", "is a file, so"),
                     (volume, "a mount point, which servesim cannot replace whole; give a "
                              f"folder inside it, e.g. {volume / 'run'}")):
        assert run(scenario_file, out) == 2  # a usage error, as every other refused place
        assert why in one_error_line(capsys)
    assert a_file.read_text() == "mine" and sorted(p.name for p in volume.iterdir()) == []


def test_an_empty_folder_keeps_its_permissions_and_its_files_take_the_users_umask(
        scenario_file, tmp_path):
    """The folder is replaced whole, but a folder a user made (here shared with a group, new
    files joining it) keeps what they set; a new folder and the files take the umask."""
    out, new = tmp_path / "empty", tmp_path / "new"
    out.mkdir()
    os.chmod(out, 0o2770)
    previous = os.umask(0o027)
    try:
        assert run(scenario_file, out) == 0 and run(scenario_file, new) == 0
    finally:
        os.umask(previous)
    assert (out / "manifest.json").is_file()
    assert stat.S_IMODE(out.stat().st_mode) == 0o2770
    assert stat.S_IMODE(new.stat().st_mode) == 0o750
    assert (out / "summary.csv").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("place", ["/", "."])
def test_the_root_and_the_current_folder_are_refused_before_simulating(
        scenario_file, tmp_path, capsys, monkeypatch, place):
    monkeypatch.chdir(tmp_path)
    simulated = []
    monkeypatch.setattr("sim.cli.run._run_all", lambda *a, **k: simulated.append(1))
    assert run(scenario_file, place) == 2
    assert "cannot be an output folder" in one_error_line(capsys) and simulated == []


def test_a_symlinked_out_replaces_its_target_and_stays_a_link(scenario_file, tmp_path):
    target = tmp_path / "real"
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    assert run(scenario_file, link) == 0
    assert run(scenario_file, link) == 0
    assert link.is_symlink() and (target / "manifest.json").is_file()
    assert leftovers(tmp_path) == []


def test_a_link_and_its_target_share_one_lock(scenario_file, tmp_path, capsys):
    target = tmp_path / "real"
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    with locks.locked(tmp_path / ".real.lock", target):  # a command writing the target
        assert run(scenario_file, link) == 2
    assert "is being written by another servesim command" in one_error_line(capsys)


def test_what_a_killed_command_left_is_removed_by_the_next_run_there(scenario_file, tmp_path):
    partial = tmp_path / ".out.servesim-abcd1234.partial"
    old = tmp_path / ".out.servesim-ef_56789.old"
    partial.mkdir()
    (partial / "requests.csv").write_text("half")
    old.symlink_to(tmp_path)  # an old link, as a symlinked --out once left
    unrelated = tmp_path / ".other.servesim-abcd1234.partial"
    unrelated.mkdir()
    assert run(scenario_file, tmp_path / "out") == 0
    assert not partial.exists() and not old.is_symlink() and unrelated.is_dir()


def test_a_users_entries_named_like_a_dated_copy_are_never_taken_for_leftovers(
        scenario_file, tmp_path):
    """`.results.20241207.old` is a user's copy, not what a killed command left: neither
    removed beside an earlier output nor put in the place of a missing one."""
    out = tmp_path / "results"
    assert run(scenario_file, out) == 0
    copies = [tmp_path / ".results.20241207.old", tmp_path / ".results.abcd_123.partial"]
    for copy in copies:
        copy.mkdir()
        (copy / "notes.txt").write_text("mine")
    (tmp_path / ".results.pre_fix.old").write_text("mine too")
    assert run(scenario_file, out) == 0
    shutil.rmtree(out)
    assert run(scenario_file, out) == 0 and (out / "manifest.json").is_file()
    assert all((copy / "notes.txt").read_text() == "mine" for copy in copies)
    assert (tmp_path / ".results.pre_fix.old").read_text() == "mine too"


def test_a_sighup_stops_a_run_as_sigterm_does(tmp_path):
    scenario = tmp_path / "long.toml"
    scenario.write_text(PLACES.replace("num_requests = 6", "num_requests = 3000000")
                        .replace("rate = 8.0", "rate = 500.0"))
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(scenario), "--out",
                                str(out), "--quiet"], stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".partial") for p in tmp_path.iterdir()):
        assert time.monotonic() < deadline and process.poll() is None, "the run never started"
        time.sleep(0.05)
    process.send_signal(signal.SIGHUP)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and err.strip() == "servesim: terminated; nothing written"
    assert not out.exists()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("out", ["x" * 300, "deep/" * 900 + "x"])
def test_a_name_or_path_too_long_for_the_file_system_is_one_line(scenario_file, tmp_path,
                                                                 capsys, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    assert run(scenario_file, out) == 2
    line = one_error_line(capsys)
    assert "too long" in line or "longer than" in line


def test_a_scenario_name_too_long_for_its_folder_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scenario = tmp_path / "long-name.toml"
    scenario.write_text(PLACES.replace('name = "places"', f'name = "{"n" * 300}"'))
    assert main(["run", str(scenario), "--quiet"]) == 2
    assert "longer than the" in one_error_line(capsys)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_long_name_that_fits_gets_short_temporary_names(scenario_file, tmp_path):
    out = tmp_path / ("n" * 250)
    assert run(scenario_file, out) == 0
    assert (out / "manifest.json").is_file()
