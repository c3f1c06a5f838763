"""Files and folders a command may not write: `profile --out` replaces only a profile it wrote
and refuses a folder or a place under a file; `write_atomic` replaces only what it recognises,
with the user's umask; and an output this user may not write, read or remove (write-protected,
unreadable, another user's under a sticky bit, a folder that takes no file) is refused in one
line before any work, and left as it is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers.cli import one_error_line
from helpers.outputs import leftovers, places_file, run
from reports import output, places
from sim.cli import main


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    return places_file(tmp_path)


def test_profile_does_not_overwrite_a_file_it_did_not_write(tmp_path, capsys):
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"my": "data"}))
    assert main(["profile", "--quick", "--out", str(mine), "--quiet"]) == 2
    assert "servesim did not write it" in one_error_line(capsys)
    assert json.loads(mine.read_text()) == {"my": "data"}


def test_checking_a_file_place_leaves_no_folder_it_made(tmp_path):
    """`profile --out new/deep/p.json` checks its place before minutes of work: an interruption
    then leaves nothing behind, the folders it made to try included."""
    place = tmp_path / "new" / "deep" / "p.json"
    output.check_writable_file(place)
    assert list(tmp_path.iterdir()) == []


def test_profile_out_a_folder_or_under_a_file_is_a_usage_error(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    written = tmp_path / "written"
    written.mkdir()
    output.write_manifest(written, {"command": "run"})  # an output folder of servesim's
    for out, why in ((tmp_path, "a folder, not a file"), (a_file / "p.json", "is a file, so"),
                     (written / "p.json", f"inside {written}, an output folder servesim")):
        assert main(["profile", "--quick", "--out", str(out), "--quiet"]) == 2
        assert why in one_error_line(capsys)
    assert sorted(p.name for p in written.iterdir()) == ["manifest.json"]


def test_write_atomic_replaces_only_what_it_recognises_and_follows_the_umask(tmp_path):
    path = tmp_path / "p.json"
    previous = os.umask(0o077)
    try:
        output.write_atomic(path, "ours", lambda text: text == "ours")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o600
    output.write_atomic(path, "ours", lambda text: text == "ours")
    path.write_text("theirs")
    with pytest.raises(places.OutputRefused):
        output.write_atomic(path, "ours", lambda text: text == "ours")
    assert path.read_text() == "theirs"


def test_a_read_only_folder_is_refused_before_simulating(scenario_file, tmp_path, capsys,
                                                         monkeypatch):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    monkeypatch.setattr("sim.cli.run._run_all", lambda *a, **k: pytest.fail("simulated"))
    assert run(scenario_file, parent / "out") == 1
    assert "Permission denied" in one_error_line(capsys)


def test_a_write_protected_output_is_refused_before_any_work(scenario_file, tmp_path, capsys,
                                                             monkeypatch):
    """An earlier output with a folder this user may not write (`chmod -R a-w`) could not be
    removed once replaced: refused before the run, and left as it is. Checked through
    os.access, which a root user's tests cannot otherwise see refuse."""
    out = tmp_path / "ro"
    assert run(scenario_file, out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    access = os.access
    monkeypatch.setattr(places.os, "access", lambda path, mode: not (
        Path(path) == out and mode & os.W_OK) and access(path, mode))
    simulated = []
    monkeypatch.setattr("sim.cli.run._run_all", lambda *a, **k: simulated.append(1))
    assert run(scenario_file, out, "--seed", "3") == 2
    error = one_error_line(capsys)
    assert error == (f"servesim: error: {out}: the folder is write-protected, so "
                     f"servesim may not replace it; make it writable (chmod -R "
                     f"u+rwx {out}) or give another folder")
    assert not simulated and {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == []
    monkeypatch.setattr(places.os, "geteuid", lambda: out.stat().st_uid + 4321)  # not its owner
    assert run(scenario_file, out, "--seed", "3") == 2
    error = one_error_line(capsys)
    assert error == (f"servesim: error: {out}: the folder is "
                     f"{places._user(out.stat().st_uid)}'s, and this user may not "
                     f"empty it to replace it; give a folder of your own")


def test_a_folder_that_cannot_be_read_is_never_taken_for_an_empty_one(
        scenario_file, tmp_path, capsys, monkeypatch):
    """`chmod 300 out` hides a user's files from a listing: refused, not replaced (which would
    move them aside and lose them); a listed subfolder that cannot be read counts as foreign."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    access = os.access
    monkeypatch.setattr(places.os, "access", lambda path, mode: not (
        Path(path) == out and mode & os.R_OK) and access(path, mode))
    assert run(scenario_file, out) == 2
    error = one_error_line(capsys)
    assert error == (f"servesim: error: {out}: the folder cannot be read, so "
                     f"servesim cannot tell that it holds only files it wrote; make "
                     f"it readable (chmod u+rx {out}) or give another folder")
    assert (out / "notes.txt").read_text() == "mine"
    monkeypatch.undo()
    written = tmp_path / "written"
    (written / "sub").mkdir(parents=True)
    (written / "sub" / "a.csv").write_text("a\n")
    output.write_manifest(written, {"command": "run"})
    assert places.foreign_entries(written) == []
    scandir, closed = os.scandir, {written / "sub"}

    def refused(path="."):
        if Path(path) in closed:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(places.os, "scandir", refused)
    assert places.foreign_entries(written) == ["sub (unreadable)"]
    (written / "other").mkdir()  # not listed, and unreadable: named once
    closed.add(written / "other")
    assert places.foreign_entries(written) == ["other (unreadable)", "sub (unreadable)"]


def test_another_users_folder_under_a_sticky_bit_is_refused_before_any_work(
        scenario_file, tmp_path, capsys, monkeypatch):
    """In a folder like /tmp (sticky, another user's), only a folder's owner may rename it:
    found before the run, not after it."""
    shared = tmp_path / "sticky"
    shared.mkdir()
    shared.chmod(0o1777)
    out = shared / "shared"
    out.mkdir()
    monkeypatch.setattr(places.os, "geteuid", lambda: out.stat().st_uid + 4321)
    simulated = []
    monkeypatch.setattr("sim.cli.run._run_all", lambda *a, **k: simulated.append(1))
    assert run(scenario_file, out) == 2
    error = one_error_line(capsys)
    assert error == (f"servesim: error: {out}: another user's folder in {shared}, "
                     f"where only a folder's owner may rename it (the sticky bit, "
                     f"as in /tmp); give a folder of your own")
    assert not simulated and out.is_dir()


def test_a_folder_that_takes_no_file_is_named_not_the_locks_passing_name(
        scenario_file, tmp_path, capsys, monkeypatch):
    """Where the folder above --out takes no file (write-protected, /proc), the line names
    --out and that folder, not the temporary file the lock is written through."""
    out = tmp_path / "above" / "out"
    out.mkdir(parents=True)

    def refused(prefix, suffix, dir):
        raise PermissionError(13, "Permission denied", f"{dir}/{prefix}abcd1234{suffix}")

    monkeypatch.setattr(output.tempfile, "mkstemp", refused)
    assert run(scenario_file, out) == 1
    error = one_error_line(capsys)
    assert error == (f"servesim: error: {out}: Permission denied (servesim writes "
                     f"beside {out}, in {out.parent}); nothing written")
    assert out.is_dir() and not any(out.iterdir())
    profile = tmp_path / "above" / "p.json"  # `servesim profile --out`, checked before profiling
    with pytest.raises(OSError) as refusal:
        output.check_writable_file(profile)
    assert str(refusal.value) == (f"[Errno 13] Permission denied (servesim writes beside "
                                  f"{profile}, in {profile.parent}): '{profile}'")
