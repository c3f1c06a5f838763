"""Replay of recorded request traces: arrival times and token counts read from a CSV file.

Format "azure" (Azure LLM inference trace 2023, as in ../shared/traces/): a header
`TIMESTAMP,ContextTokens,GeneratedTokens`, then one request per line, e.g.
`2023-11-16 18:17:03.9799600,4808,10`. ContextTokens is the prompt length and GeneratedTokens
the number of output tokens the request asks for.

- Arrival times are seconds since the first row, multiplied by `time_scale`: every
  inter-arrival gap is scaled, so 0.5 replays the trace twice as fast (double the rate) and 2.0
  half as fast.
- `max_requests` keeps the first N rows (all rows when None or larger than the file).
- A row with fewer than 1 prompt or output token, a malformed number or timestamp, or a timestamp
  earlier than the row before is an error naming the file and line: nothing is dropped or
  reordered behind the user's back. Timestamps are read to the microsecond (any year), and a
  trace whose scaled span would pass `MAX_TIME_S` is refused; an unreadable or non-UTF-8 file
  is one line naming it.
- A relative path is looked up in the current directory, then in `base_dir` (the scenario's
  folder) when given.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from scenarios.defaults import MAX_TIME_S

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
FORMATS = ("azure",)
MAX_TOKENS = 2**31 - 1  # a request's token counts, as a row may hold them


@dataclass(frozen=True)
class Trace:
    arrival_s: np.ndarray  # [n] float64, from 0
    prompt_tokens: np.ndarray  # [n] int64
    output_tokens: np.ndarray  # [n] int64

    def __len__(self) -> int:
        return len(self.arrival_s)


def resolve_path(path, base_dir=None) -> Path:
    """The trace file: absolute, or relative to the current directory, then to base_dir."""
    path = Path(path)
    candidates = [path] if path.is_absolute() else [Path.cwd() / path] + (
        [Path(base_dir) / path] if base_dir is not None else [])
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"workload.trace.path: file not found: {path} (looked in "
                            + ", ".join(str(c.parent) for c in candidates) + ")")


def load_trace(path, trace_format: str = "azure", time_scale: float = 1.0,
               max_requests: int | None = None, base_dir=None) -> Trace:
    """The requests of a trace file (see the module docstring for the conventions)."""
    if trace_format not in FORMATS:
        raise ValueError(f"workload.trace.format must be one of {', '.join(FORMATS)}, "
                         f"got {trace_format!r}")
    if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or \
            not 0 < time_scale < math.inf:
        raise ValueError(f"workload.trace.time_scale must be a positive number, got {time_scale!r}")
    if max_requests is not None and (isinstance(max_requests, bool) or
                                     not isinstance(max_requests, int) or max_requests < 1):
        raise ValueError(f"workload.trace.max_requests must be a positive integer, got {max_requests!r}")
    path = resolve_path(path, base_dir)
    stat = path.stat()
    seconds, prompts, outputs = _read_cached(str(path), stat.st_mtime_ns, stat.st_size,
                                             max_requests)
    if seconds[-1] * time_scale > MAX_TIME_S:
        raise ValueError(f"workload.trace.time_scale: the trace spans {seconds[-1]:.3g} s, "
                         f"{seconds[-1] * time_scale:.3g} s scaled by {time_scale:g}; times past "
                         f"{MAX_TIME_S:.3g} s (136 years) lose sub-microsecond precision")
    return Trace(seconds * time_scale, prompts, outputs)


@lru_cache(maxsize=8)
def _read_cached(path: str, mtime_ns: int, size: int, max_requests: int | None):
    """(seconds from the first row [n], prompt tokens [n], output tokens [n]) of a file, read
    once per version of it (a scenario is checked, then run)."""
    stamps, prompts, outputs = _read_azure(Path(path), max_requests)
    seconds = (stamps - stamps[0]).astype(np.float64) * 1e-6  # [n] us -> s
    for array in (seconds, prompts, outputs):
        array.flags.writeable = False  # shared by every load of this file
    return seconds, prompts, outputs


def _read_azure(path: Path, max_requests: int | None):
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return _rows(path, csv.reader(f), max_requests)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start} of a chunk read near it "
                         f"is {exc.object[exc.start:exc.start + 1].hex()}); a trace is a CSV "
                         f"file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except csv.Error as exc:
        raise ValueError(f"{path}: not a CSV file: {exc}") from None


def _rows(path: Path, reader, max_requests: int | None):
    stamps, prompts, outputs = [], [], []
    header = next(reader, None)
    if header is not None and header and header[0].startswith("\ufeff"):
        header[0] = header[0][1:]  # a UTF-8 byte-order mark
    if header is None or tuple(h.strip() for h in header) != AZURE_COLUMNS:
        raise ValueError(f"{path}: line 1: expected the header {','.join(AZURE_COLUMNS)} "
                         f"(format azure), got {','.join(header or [])!r}")
    for line, row in enumerate(reader, start=2):
        if max_requests is not None and len(stamps) == max_requests:
            break
        stamp, prompt, output = _parse_row(path, line, row)
        if stamps and stamp < stamps[-1]:
            raise ValueError(f"{path}: line {line}: TIMESTAMP {row[0]} is earlier than the "
                             f"line before (the trace must be in arrival order)")
        stamps.append(stamp)
        prompts.append(prompt)
        outputs.append(output)
    if not stamps:
        raise ValueError(f"{path}: the trace has no requests")
    return np.array(stamps), np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64)


def _parse_row(path: Path, line: int, row: list):
    if len(row) != 3:
        raise ValueError(f"{path}: line {line}: expected 3 fields "
                         f"({','.join(AZURE_COLUMNS)}), got {len(row)}")
    try:  # microseconds: every date from year -290,000 to 290,000, no wrapping
        stamp = np.datetime64(row[0].strip().replace(" ", "T"), "us")
        prompt, output = int(row[1]), int(row[2])
    except (ValueError, OverflowError):
        raise ValueError(f"{path}: line {line}: malformed row {','.join(row)!r}") from None
    for name, value in (("ContextTokens", prompt), ("GeneratedTokens", output)):
        if value < 1:
            raise ValueError(f"{path}: line {line}: {name} must be >= 1, got {value} (a request "
                             f"with no prompt or nothing to generate cannot be served)")
        if value > MAX_TOKENS:
            raise ValueError(f"{path}: line {line}: {name} must be at most {MAX_TOKENS:,}, got "
                             f"{value}")
    return stamp, prompt, output
