"""The lock beside an output place: `.NAME.lock`, a file holding `LOCK_TEXT`, held with
flock while a command writes the place (`reports.output`), so that a second command writing
the same place at the same time is refused (`OutputBusy`), and a file of that name servesim did
not make is refused and kept (`OutputRefused`). The lock goes with the process however it
ends.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from reports.places import OutputBusy, OutputRefused

LOCK_TEXT = b"servesim output lock\n"  # what a lock file servesim made holds


@contextmanager
def locked(lock_path: Path, out_dir: Path):
    """Hold an exclusive lock on `lock_path` (created if need be, holding `LOCK_TEXT`;
    released if the process dies); OutputBusy if another process holds it, OutputRefused if a
    file servesim did not make is there (it is never removed)."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_NONBLOCK)  # a FIFO there: no waiting
        except FileNotFoundError:
            _make_lock(lock_path, out_dir)
            continue
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
        text = os.read(fd, len(LOCK_TEXT) + 1) if regular else None
        if text != LOCK_TEXT:
            os.close(fd)
            empty = " (an empty one is left by an earlier version's killed command, and may " \
                    "be removed)" if text == b"" else ""
            raise OutputRefused(f"{lock_path}: a file servesim did not make is where it keeps "
                                f"the lock for {out_dir}{empty}; move it, or write elsewhere "
                                f"with --out")
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


def _make_lock(lock_path: Path, out_dir) -> None:
    """Create `lock_path` holding `LOCK_TEXT`, whole from its first instant (written beside it,
    then linked into place); a file already there is left as it is. The file written beside
    it is named as no stale entry is (`reports.output.remove_stale` under another command's
    lock would take it); if it goes anyway, the caller tries again. A folder that takes no file
    is an OSError naming `out_dir` and that folder, not the file's passing name."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=f"{lock_path.name}.", suffix=".new",
                                         dir=lock_path.parent)
    except OSError as exc:
        raise cannot_write(exc, out_dir, lock_path.parent) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(LOCK_TEXT)
        try:
            os.link(temporary, lock_path)
        except (FileExistsError, FileNotFoundError):
            pass
        except OSError:  # a file system without hard links (FAT, some network ones)
            _create_lock(lock_path)
    finally:
        Path(temporary).unlink(missing_ok=True)


def cannot_write(exc: OSError, out, folder: Path) -> OSError:
    """`exc`, a file that could not be made in `folder`, as the OSError of `out` (the output
    servesim writes beside it there), not of the passing file's name."""
    return OSError(exc.errno, f"{exc.strerror} (servesim writes beside {out}, in {folder})",
                   str(out))


def _create_lock(lock_path: Path) -> None:
    """`_make_lock` where files cannot be linked: created, then written (a command opening it
    in between finds it empty and is refused: the rare cost of such a file system)."""
    try:
        fd = os.open(lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        f.write(LOCK_TEXT)
