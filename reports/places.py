"""Where servesim may write: the rules `reports.output` applies before it writes anything.

servesim replaces only what it wrote. A folder is servesim's when its `manifest.json` lists
every entry in it, at the listed size and SHA-256 (`foreign_entries` names the others); a file
is servesim's when the command's own test of its text says so. Besides, an output folder may
not be the root folder, the current folder or one holding it, a mount point, a place inside a
folder servesim wrote (that folder would no longer be servesim's own), or a name longer than
the file system allows. Each refusal is an `OutputRefused`, one line naming the place.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
import stat
from pathlib import Path

MANIFEST = "manifest.json"
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")
SHOWN_ENTRIES = 3  # foreign entries named in a refusal


class OutputError(RuntimeError):
    """An output place that cannot be written now; one line."""


class OutputBusy(OutputError):
    """Another command is writing the same output folder."""


class OutputRefused(OutputError):
    """A place servesim may not replace (it holds a user's files, or is no folder to write)."""


def is_plain_name(name: str) -> bool:
    """Letters, digits, '-', '_' and '.', and not '.' or '..': safe as one folder's name."""
    return bool(PLAIN_NAME.fullmatch(name)) and name not in (".", "..")


def check_place(out_dir) -> Path:
    """The resolved destination of `out_dir`, refused now, before any work, where
    `output_folder` would refuse it."""
    target = destination(out_dir)
    check_replaceable(target, out_dir)
    return target


def destination(out_dir) -> Path:
    """`out_dir` resolved (symlinks followed), or OutputRefused saying why servesim may not
    write there (a file where a folder must go, too)."""
    shown = Path(out_dir)
    check_names(Path(os.path.abspath(shown)), shown)
    try:
        target = shown.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of symbolic links
        raise OutputRefused(f"{shown}: cannot be resolved ({exc})") from None
    for place in (target, *target.parents):  # the nearest that exists must be a folder
        if exists(place):
            if not place.is_dir():
                raise OutputRefused(f"{shown}: {place} is a file, so {shown} cannot be a "
                                    f"folder; give a new or empty folder")
            break
    if target.parent == target:
        raise OutputRefused(f"{shown}: the root folder cannot be an output folder; give a new "
                            f"or empty folder")
    cwd = Path.cwd().resolve()
    if target == cwd or target in cwd.parents:
        raise OutputRefused(f"{shown}: the current folder (or one holding it) cannot be an "
                            f"output folder; give a new or empty folder")
    if exists(target) and os.path.ismount(target):  # a volume: it cannot be renamed over
        raise OutputRefused(f"{shown}: a mount point, which servesim cannot replace whole; "
                            f"give a folder inside it, e.g. {Path(shown) / 'run'}")
    check_outside_outputs(target, shown)
    return target


def check_outside_outputs(target: Path, shown) -> None:
    """OutputRefused when `target` lies inside a folder servesim wrote: written there, it
    would make that folder no longer servesim's own, and the next run there would refuse it."""
    for place in target.parents:
        if _listed_files(place / MANIFEST) is not None:
            raise OutputRefused(f"{shown}: inside {place}, an output folder servesim wrote, "
                                f"which stays whole as written; move or rename it, or write "
                                f"outside it (--out)")


def check_replaceable(target: Path, shown, while_running: bool = False) -> None:
    """OutputRefused unless `target` is absent, an empty folder, or a folder servesim wrote
    (every entry listed in its manifest, at the listed size and SHA-256), which this user may
    rename and remove (not write-protected, not another user's under a sticky bit)."""
    if not target.exists():
        return
    if not target.is_dir():
        raise OutputRefused(f"{shown}: {target} is a file, so {shown} cannot be a folder; give "
                            f"a new or empty folder")
    if not os.access(target, os.R_OK | os.X_OK):
        raise OutputRefused(f"{shown}: the folder cannot be read, so servesim cannot tell that "
                            f"it holds only files it wrote; make it readable (chmod u+rx "
                            f"{shown}) or give another folder")
    foreign = foreign_entries(target)
    if foreign:
        names = ", ".join(foreign[:SHOWN_ENTRIES]) + (", ..." if len(foreign) > SHOWN_ENTRIES
                                                      else "")
        when = " (added while the command ran; nothing was written)" if while_running else ""
        raise OutputRefused(f"{shown}: the folder holds files servesim did not write "
                            f"({names}){when}; servesim replaces only a folder it wrote itself "
                            f"(listed in its {MANIFEST}): give a new or empty folder")
    if _sticky_elsewhere(target):
        raise OutputRefused(f"{shown}: another user's folder in {target.parent}, where only a "
                            f"folder's owner may rename it (the sticky bit, as in /tmp); give "
                            f"a folder of your own")
    for folder in (target, *sorted(p for p in target.rglob("*") if p.is_dir())):
        if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):  # it could not be emptied
            which = "the folder" if folder == target else folder
            owner = folder.stat().st_uid
            if owner != os.geteuid():
                raise OutputRefused(f"{shown}: {which} is {_user(owner)}'s, and this user may "
                                    f"not empty it to replace it; give a folder of your own")
            raise OutputRefused(f"{shown}: {which} is write-protected, so servesim may not "
                                f"replace it; make it writable (chmod -R u+rwx {shown}) or "
                                f"give another folder")


def _user(uid: int) -> str:
    """A user's name (its number where the system has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"user {uid}"


def _sticky_elsewhere(target: Path) -> bool:
    """Whether `target` is another user's entry in a sticky folder this user does not own,
    which this user may not rename (nor replace)."""
    parent, own, user = target.parent.stat(), target.stat(), os.geteuid()
    return bool(parent.st_mode & stat.S_ISVTX) and user not in (0, own.st_uid, parent.st_uid)


def foreign_entries(folder: Path) -> list[str]:
    """The entries of `folder` (relative paths, sorted) that its servesim manifest does not
    list as they are (their size and SHA-256): all of them when it has no such manifest."""
    listed = _listed_files(folder / MANIFEST)
    listed_dirs = {d.as_posix() for p in listed or () for d in Path(p).parents}
    entries = []

    def unreadable(error: OSError) -> None:  # what it holds is unknown: never taken as empty
        relative = Path(error.filename).relative_to(folder).as_posix()
        if f"{relative}/" in entries:  # named once, as unreadable
            entries.remove(f"{relative}/")
        entries.append(f"{relative} (unreadable)")

    for root, dirs, files in os.walk(folder, onerror=unreadable):
        for name in dirs + files:
            path = Path(root) / name
            relative = path.relative_to(folder).as_posix()
            if relative == MANIFEST and listed is not None:
                continue
            if path.is_symlink() or listed is None:
                entries.append(relative)
            elif name in dirs:
                if relative not in listed_dirs:
                    entries.append(relative + "/")
            elif not _as_listed(path, listed.get(relative)):
                entries.append(relative)
    return sorted(entries)


def _as_listed(path: Path, listed: tuple | None) -> bool:
    """Whether the file at `path` is as its manifest lists it: (bytes, sha256)."""
    if listed is None or _size(path) != listed[0]:
        return False  # a size differs: not read
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest() == listed[1]
    except OSError:
        return False


def written_by(folder) -> str | None:
    """The command that wrote `folder` (`run`, `search`, `serve` ...), as its servesim manifest
    says; None when it has none."""
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
        return data["command"] if _listed_files(Path(folder) / MANIFEST) is not None else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _listed_files(manifest: Path) -> dict | None:
    """{path: (bytes, sha256)} of a servesim manifest, or None when `manifest` is not one."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        listed = {f["path"]: (f["bytes"], f.get("sha256")) for f in data["files"]}
        ours = "command" in data and data.get("status") == "complete"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return listed if ours and all(isinstance(p, str) for p in listed) else None


def check_replaceable_file(path: Path, is_ours) -> None:
    """OutputRefused when `path` is a file that `is_ours(text)` does not recognise."""
    if is_ours is None or not path.exists() or path.is_dir():
        return
    try:
        ours = is_ours(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise OutputRefused(f"{path}: the file exists and servesim did not write it; give "
                            f"another path")


def check_names(target: Path, shown) -> None:
    """OutputRefused for a path or a name in it longer than the file system allows."""
    name_max, path_max = _limits(target)
    for part in target.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            raise OutputRefused(f"{shown}: the name {part[:24]}... is {size} bytes, longer than "
                                f"the {name_max} this file system allows; give a shorter path")
    if len(os.fsencode(str(target))) + 32 > path_max:  # room for the temporary names
        raise OutputRefused(f"{shown}: the path is {len(os.fsencode(str(target)))} bytes, too "
                            f"long for this file system ({path_max}); give a shorter path")


def _limits(target: Path) -> tuple[int, int]:
    """(bytes a name, bytes a path) on the file system of `target`'s nearest existing place."""
    place = next((p for p in (target, *target.parents) if exists(p)), Path("/"))
    try:
        return os.pathconf(place, "PC_NAME_MAX"), os.pathconf(place, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long to look up
        return False


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
