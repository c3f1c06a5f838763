"""Output folders that are whole or absent, never half-written, mixed, or written over a user's
files.

`output_folder(out_dir, manifest)` is a context manager around everything a command writes:

- on entry, before any simulation, serving or profiling, it resolves `out_dir` (symlinks
  followed, so a link and its target are one place) and refuses, with `OutputRefused`, a place
  it may not replace (`reports.places`: one holding anything servesim did not write, among
  others);
- it creates the folders above it that are missing (removed again if the command fails), takes
  a lock beside the folder (`reports.locks`: a second command writing the same place at the
  same time is refused with `OutputBusy`, a file of that name servesim did not make with
  `OutputRefused`), removes what killed commands left there (the
  `.NAME.servesim-XXXXXXXX.partial` and `.old` folders of this name), and creates a temporary
  folder beside it, with the user's umask, so a folder that cannot be created or written is
  found before any work;
- the command writes its files into the temporary folder;
- when the block ends without error, `manifest.json` is written (what was run, and every file
  with its size and SHA-256, status "complete"), and the temporary folder replaces the
  destination whole, with the replaced folder's permissions: an earlier run there is replaced
  at once, never mixed with this one, and a stop signal during the swap waits for its end;
- on any error, an interruption included, the temporary folder is removed and the destination
  is left as it was.

`write_atomic(path, text, is_ours)` does the same for a single file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from reports.locks import cannot_write, locked
from reports.places import (MANIFEST, OutputRefused, check_names,
                            check_outside_outputs, check_replaceable, check_replaceable_file,
                            destination, exists)

# A temporary or old entry beside a place `.NAME`: `.NAME.servesim-` and what tempfile adds (8
# of [a-z0-9_], `.partial` or `.old`); a name no user's entry has by chance, so the clean-up of
# what killed commands left (`remove_stale`) never takes a user's `.NAME.20241207.old`
TEMP_MARK = ".servesim-"
TEMP_SUFFIX = re.escape(TEMP_MARK) + r"[a-z0-9_]{8}\.(partial|old)"
WRITTEN: set = set()  # the output folders this process put in place (`was_written`)


@contextmanager
def output_folder(out_dir, manifest: dict):
    """Yield a temporary folder to write into; on success it becomes `out_dir`, whole, with a
    manifest of `manifest` (what was run) and its files."""
    target = destination(out_dir)
    WRITTEN.discard(target)  # until this command's output is in place
    parent = target.parent
    with _parents_made(parent):
        prefix = hidden_prefix(target.name)
        with locked(parent / f"{prefix}.lock", out_dir):
            remove_stale(parent, prefix, target)
            check_replaceable(target, out_dir)
            partial = Path(tempfile.mkdtemp(prefix=prefix + TEMP_MARK, suffix=".partial",
                                            dir=parent))
            try:
                os.chmod(partial, 0o777 & ~_umask())  # mkdtemp's own mode is 0700
                yield partial
                write_manifest(partial, manifest)
                check_replaceable(target, out_dir, while_running=True)
                _replace(partial, target, prefix)
            finally:
                if partial.exists():
                    shutil.rmtree(partial, ignore_errors=True)


@contextmanager
def _parents_made(folder: Path, keep: bool = True):
    """Create `folder` and the folders above it that are missing; if the block fails (with
    `keep` false, however it ends), remove those it created, still empty, so a failed command
    leaves no trace."""
    made = []  # those this command created (not another at the same moment), outermost first
    for place in reversed([p for p in (folder, *folder.parents) if not exists(p)]):
        try:
            place.mkdir()
            made.append(place)
        except FileExistsError:
            pass
    try:
        yield
    except BaseException:
        _remove_made(made)
        raise
    if not keep:
        _remove_made(made)


def _remove_made(made: list) -> None:
    for place in reversed(made):  # the deepest first
        try:
            place.rmdir()
        except OSError:  # no longer empty (another command's), or gone
            break


def remove_stale(parent: Path, prefix: str, target: Path | None = None) -> list[str]:
    """Remove the temporary and old folders (and files) that commands killed while writing this
    place left beside it; called under the place's lock, so none of them is in use. Returns
    their names. An old folder while `target` is missing is the earlier output a failed swap
    left aside (`_replace`): it is put back in its place, not removed."""
    stale = re.compile(re.escape(prefix) + TEMP_SUFFIX)
    removed = []
    for entry in parent.iterdir():
        if target is not None and entry.name.endswith(".old") and stale.fullmatch(entry.name) \
                and entry.is_dir() and not entry.is_symlink() and not exists(target):
            os.rename(entry, target)
            continue
        if stale.fullmatch(entry.name):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed


def hidden_prefix(name: str) -> str:
    """The prefix of the lock and temporary entries beside a folder or file called `name`:
    '.' + name, shortened with a hash when the temporary names would pass the file system's
    limit of 255 bytes a name."""
    if len(os.fsencode(name)) <= 200:
        return f".{name}"
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    return f".{os.fsdecode(os.fsencode(name)[:100]).rstrip(chr(0xFFFD))}~{digest}"


def write_manifest(folder: Path, manifest: dict) -> Path:
    """`manifest.json` in `folder`: `manifest`, every file under the folder (path, bytes,
    sha256; in path order) and status "complete"."""
    files = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST):
        data = path.read_bytes()
        files.append({"path": path.relative_to(folder).as_posix(), "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()})
    text = json.dumps(dict(manifest, files=files, status="complete"), indent=1) + "\n"
    (folder / MANIFEST).write_text(text, encoding="utf-8")
    return folder / MANIFEST


def write_atomic(path, text: str, is_ours=None) -> Path:
    """Write `text` to `path` through a temporary file beside it, renamed into place. An
    existing file is replaced only when `is_ours(its text)` says servesim wrote it (None: never
    refuse)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = hidden_prefix(path.name)
    with locked(path.parent / f"{prefix}.lock", path):
        check_replaceable_file(path, is_ours)
        remove_stale(path.parent, prefix)
        fd, temporary = tempfile.mkstemp(prefix=prefix + TEMP_MARK, suffix=".partial",
                                         dir=path.parent)
        try:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's own mode is 0600
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    return path


def check_writable_file(path, is_ours=None) -> None:
    """Raise now (OutputRefused for a place servesim may not write: a folder, a file servesim
    did not write, a place under a file or inside an output folder; OSError for a file system
    fault) if `path` cannot be written, before long work that writes it."""
    path = Path(path)
    check_names(Path(os.path.abspath(path)), path)
    if path.is_dir():
        raise OutputRefused(f"{path}: a folder, not a file; give a file's path")
    above = next((p for p in Path(os.path.abspath(path)).parents if exists(p)), None)
    if above is not None and not above.is_dir():
        raise OutputRefused(f"{path}: {above} is a file, so {path} cannot be written; give "
                            f"another path")
    check_outside_outputs(Path(os.path.abspath(path)), path)
    check_replaceable_file(path, is_ours)
    with _parents_made(path.parent, keep=False):  # the file is written later, not now
        try:
            fd, temporary = tempfile.mkstemp(prefix=f"{hidden_prefix(path.name)}.",
                                             suffix=".check", dir=path.parent)
        except OSError as exc:
            raise cannot_write(exc, path, path.parent) from None
        os.close(fd)
        os.unlink(temporary)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _replace(partial: Path, target: Path, prefix: str) -> None:
    """Put the complete folder in place of `target` (with the mode of a folder it replaces),
    removing the earlier one only once the new one is there. A stop signal while the two
    renames run waits until both are done: the place never stands empty."""
    if target.exists():
        _keep_mode(target, partial)
        old = Path(tempfile.mkdtemp(prefix=prefix + TEMP_MARK, suffix=".old",
                                    dir=target.parent))
        os.rmdir(old)
        try:
            with _signals_deferred():
                os.rename(target, old)
                try:
                    os.rename(partial, target)
                except BaseException:
                    os.rename(old, target)  # the earlier folder back in its place
                    raise
                WRITTEN.add(target)
        finally:  # a signal held meanwhile is raised first (a killed command's `.old`: stale)
            if target in WRITTEN:  # never the only copy of the earlier output
                shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(partial, target)
        WRITTEN.add(target)


def _keep_mode(folder: Path, new: Path) -> None:
    """Give `new` the permissions (and, where this user may, the group) of `folder`, which it
    replaces: a shared folder a user made stays shared."""
    info = folder.stat()
    os.chmod(new, stat.S_IMODE(info.st_mode))
    if info.st_gid != new.stat().st_gid:
        try:
            os.chown(new, -1, info.st_gid)
        except OSError:  # not a group of this user's
            pass


@contextmanager
def _signals_deferred():
    """Hold the stop signals (Ctrl-C, SIGTERM, SIGHUP) until the block ends, then let the
    first one act as it would have; elsewhere than the main thread, nothing to hold, and a
    signal the process ignores (`nohup`, a background job's Ctrl-C) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    stops = [sig for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
             if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))
                for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if caught:
            signal.raise_signal(caught[0])


def was_written(out_dir) -> bool:
    """Whether this process put a complete output folder at `out_dir` (an interruption after
    that leaves the new output whole, not the earlier one)."""
    try:
        return Path(out_dir).resolve() in WRITTEN
    except (OSError, RuntimeError):
        return False
