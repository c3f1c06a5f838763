"""Finding and opening trace files: a shipped trace's packaged file or a path, plain or
gzip-compressed (a name ending in `.gz`), read as UTF-8 text (a byte-order mark is skipped).

Every way a file cannot be read (missing, unreadable, not UTF-8, a broken gzip stream, a CSV
reader that gives up, JSON that does not parse or nests too deeply) is one line naming it.
JSON-lines files are read one object a line by `json_objects`, which the JSON-lines formats
(jsonl, mooncake) share.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import zlib
from contextlib import contextmanager
from pathlib import Path

from scenarios.paths import REPO_ROOT, shipped_trace

__all__ = ["csv_rows", "json_objects", "open_text", "reading", "resolve_path", "shipped_trace"]

TOO_LONG = "a number of more than 4,300 digits, longer than any trace's"


def resolve_path(path, base_dir=None) -> Path:
    """The trace file: absolute, or relative to the current directory, then to base_dir (the
    scenario's folder), then to the repository root, as `scenarios.paths.find_file` finds it."""
    path = Path(path)
    bases = [] if path.is_absolute() else list(dict.fromkeys(
        [Path.cwd()] + ([Path(base_dir)] if base_dir is not None else []) + [REPO_ROOT]))
    candidates = [path] if path.is_absolute() else [base / path for base in bases]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    special = next((c for c in candidates if c.exists() and not c.is_dir()), None)
    if special is not None:  # a device, a pipe, a socket
        raise FileNotFoundError(f"workload.trace.path: {special} is not a regular file")
    folder = next((candidate for candidate in candidates if candidate.is_dir()), None)
    if folder is not None:
        raise FileNotFoundError(f"workload.trace.path: {folder} is a folder; give a file in it")
    where = f" (looked in {', '.join(map(str, bases))})" if bases else ""
    raise FileNotFoundError(f"workload.trace.path: file not found: {path}{where}")


GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of gzip data


def open_text(path: Path):
    """The file as text, decompressed on the fly when its name ends in `.gz` (any case) or
    its bytes are gzip's whatever its name."""
    with open(path, "rb") as raw:
        magic = raw.read(2)
    if path.suffix.lower() == ".gz" or magic == GZIP_MAGIC:
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


@contextmanager
def reading(path: Path, kind: str):
    """Turn what can go wrong while reading `path` into one ValueError line; `kind` says what a
    trace of its format is ("a CSV file", ...)."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start} of a chunk read near it "
                         f"is {exc.object[exc.start:exc.start + 1].hex()}); a trace is "
                         f"{kind}") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # before OSError: BadGzipFile is one
        raise ValueError(f"{path}: not a whole gzip file ({exc}); a trace is {kind}, "
                         f"compressed or not") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except csv.Error as exc:
        raise ValueError(f"{path}: not a CSV file: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: not {kind}: nested too deeply") from None


def csv_rows(path: Path, reader, max_rows: int | None = None):
    """(line number, row) for each of the first `max_rows` rows (all when None) `reader` (a
    `csv.reader`) reads after the header: the line a row ends on, so a quoted field spanning
    lines does not shift the numbers after it; a row the reader gives up on (a field past its
    size limit), and an empty line, are errors naming the line (none past `max_rows` is read)."""
    for _ in itertools.repeat(None) if max_rows is None else range(max_rows):
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise ValueError(f"{path}: line {reader.line_num + 1}: not a CSV row: {exc}") \
                from None
        if not row:
            raise ValueError(f"{path}: line {reader.line_num}: an empty line; a CSV trace is "
                             f"one request a line")
        yield reader.line_num, row


def json_objects(path: Path, lines, fmt: str, keys: str):
    """(line number, object) for each line of a JSON-lines file; a line that is blank, not
    JSON or not an object is an error naming it (`keys` lists what an object holds)."""
    for number, text in enumerate(lines, start=1):
        try:
            row = json.loads(text, object_pairs_hook=_unique_keys)
        except DuplicateKey as exc:
            raise ValueError(f"{path}: line {number}: the key {exc.args[0]!r} is given twice; "
                             f"format {fmt} is one JSON object a line with {keys}") from None
        except json.JSONDecodeError as exc:
            what = "an empty line" if not text.strip() else f"not JSON ({exc.msg} at column " \
                                                            f"{exc.colno})"
            raise ValueError(f"{path}: line {number}: {what}; format {fmt} is one JSON object "
                             f"a line with {keys}") from None
        except ValueError:  # an integer past Python's 4,300 digits
            raise ValueError(f"{path}: line {number}: {TOO_LONG}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {number}: expected a JSON object with {keys} "
                             f"(format {fmt}), got {type(row).__name__}")
        yield number, row


class DuplicateKey(ValueError):
    """A JSON object giving one key twice (json.loads would keep the last silently)."""


def _unique_keys(pairs: list) -> dict:
    row = dict(pairs)
    if len(row) < len(pairs):
        seen = set()
        raise DuplicateKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return row
