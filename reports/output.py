"""Output folders that are whole or absent, never half-written or mixed.

`output_folder(out_dir, manifest)` is a context manager around everything a command writes:

- on entry it takes a lock beside the folder (a second command writing the same folder at the
  same time is refused with `OutputBusy`) and creates a temporary folder beside it, so a folder
  that cannot be created or written is found before any simulation, serving or profiling;
- the command writes its files into the temporary folder;
- when the block ends without error, `manifest.json` is written (what was run, and every file
  with its size and SHA-256, status "complete"), and the temporary folder replaces `out_dir`
  whole: an earlier run there is replaced at once, never mixed with this one;
- on any error, an interruption included, the temporary folder is removed and `out_dir` is left
  as it was.

`write_atomic(path, text)` does the same for a single file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

MANIFEST = "manifest.json"
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class OutputBusy(RuntimeError):
    """Another command is writing the same output folder."""


def is_plain_name(name: str) -> bool:
    """Letters, digits, '-', '_' and '.', and not '.' or '..': safe as one folder's name."""
    return bool(PLAIN_NAME.fullmatch(name)) and name not in (".", "..")


@contextmanager
def output_folder(out_dir, manifest: dict):
    """Yield a temporary folder to write into; on success it becomes `out_dir`, whole, with a
    manifest of `manifest` (what was run) and its files."""
    out_dir = Path(out_dir)
    for place in (out_dir, *out_dir.parents):  # the nearest that exists must be a folder
        if place.exists():
            if not place.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, f"{place} is a file, so {out_dir} "
                                                        f"cannot be a folder")
            break
    parent = out_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent / f".{out_dir.name}.lock", out_dir):
        partial = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".partial",
                                        dir=parent))
        try:
            yield partial
            write_manifest(partial, manifest)
            _replace(partial, out_dir)
        finally:
            if partial.exists():
                shutil.rmtree(partial, ignore_errors=True)


def write_manifest(folder: Path, manifest: dict) -> Path:
    """`manifest.json` in `folder`: `manifest`, every file under the folder (path, bytes,
    sha256; in path order) and status "complete"."""
    files = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        data = path.read_bytes()
        files.append({"path": path.relative_to(folder).as_posix(), "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()})
    text = json.dumps(dict(manifest, files=files, status="complete"), indent=1) + "\n"
    (folder / MANIFEST).write_text(text)
    return folder / MANIFEST


def write_atomic(path, text: str) -> Path:
    """Write `text` to `path` through a temporary file beside it, renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return path


def check_writable_file(path) -> None:
    """Raise OSError now if a file cannot be created at `path` (before long work that writes it)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a file")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=path.parent)
    os.close(fd)
    os.unlink(temporary)


@contextmanager
def _locked(lock_path: Path, out_dir: Path):
    """Hold an exclusive lock on `lock_path` (created if need be; released if the process
    dies); OutputBusy if another process holds it."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusy(f"{out_dir} is being written by another servesim command; wait "
                             f"for it to finish, or write elsewhere with --out") from None
        try:  # the file may have been removed by its last holder after we opened it
            if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        try:
            os.unlink(lock_path)
        finally:
            os.close(fd)


def _replace(partial: Path, out_dir: Path) -> None:
    """Put the complete folder in place of `out_dir`, removing the earlier one only once the
    new one is there."""
    if not out_dir.exists():
        os.rename(partial, out_dir)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".old", dir=out_dir.parent))
    os.rmdir(old)
    os.rename(out_dir, old)
    os.rename(partial, out_dir)
    shutil.rmtree(old, ignore_errors=True)
