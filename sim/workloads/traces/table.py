"""Formats "csv" and "jsonl": a plain table of requests, one a row, in arrival order.

- csv: a header naming the columns `arrival_s,prompt_tokens,output_tokens` (in any order), then
  one request a line, e.g. `12.25,512,128`;
- jsonl: one JSON object a line, e.g. `{"arrival_s": 12.25, "prompt_tokens": 512,
  "output_tokens": 128}`.
`arrival_s` is the request's arrival time in seconds (a number >= 0, never less than the row
above's); the token counts are integers >= 1. Other columns or keys (a request id, a category)
are allowed and not read. `read_json_lines` with other `Columns` also reads the mooncake format.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from itertools import islice

from .files import TOO_LONG, csv_rows, json_objects
from .trace import Trace, check_time, check_tokens, shorten, timed


@dataclass(frozen=True)
class Columns:
    """Where a format keeps each request's arrival time, prompt and output token counts."""

    fmt: str
    time: str
    prompt: str
    output: str
    unit_s: float = 1.0  # seconds per unit of `time`

    @property
    def names(self) -> tuple[str, str, str]:
        return self.time, self.prompt, self.output

    def listed(self) -> str:
        return ", ".join(self.names)


INTEGER = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(nan|inf(inity)?)",
                    re.IGNORECASE)  # NaN and infinity read, to be refused as times
CSV = Columns("csv", "arrival_s", "prompt_tokens", "output_tokens")
JSONL = replace(CSV, fmt="jsonl")
CSV_KIND, JSONL_KIND = "a CSV file", "a JSON-lines file"


def read_csv(path, f, max_rows: int | None) -> Trace:
    """The first `max_rows` requests (all when None) of a csv-format table."""
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{path}: the file is empty (format csv needs a header with "
                         f"{CSV.listed()}, then one request a line)")
    header = [h.strip() for h in header]
    missing = [name for name in CSV.names if name not in header]
    if missing:
        raise ValueError(f"{path}: line 1: missing column {', '.join(missing)} (format csv "
                         f"needs a header with {CSV.listed()}), got "
                         f"{shorten(','.join(header))!r}")
    twice = sorted({name for name in CSV.names if header.count(name) > 1})
    if twice:
        raise ValueError(f"{path}: line 1: column {', '.join(twice)} appears more than once")
    where = [header.index(name) for name in CSV.names]
    times, prompts, outputs = [], [], []
    for line, row in csv_rows(path, reader, max_rows):
        if len(row) != len(header):
            raise ValueError(f"{path}: line {line}: expected {len(header)} fields (as the "
                             f"header), got {len(row)}")
        time, prompt, output = (_number(path, line, name, row[i].strip(), name != CSV.time)
                                for name, i in zip(CSV.names, where))
        times.append(check_time(path, line, CSV.time, time, times[-1] if times else None))
        prompts.append(check_tokens(path, line, CSV.prompt, prompt))
        outputs.append(check_tokens(path, line, CSV.output, output))
    return timed(path, times, prompts, outputs)


def _number(path, line: int, name: str, text: str, integer: bool):
    """`text` as an int or a float, written in ASCII digits only (Python's `int` would also
    take "1_000" and other scripts' digits)."""
    what = "an integer" if integer else "a number"
    if not (INTEGER if integer else NUMBER).fullmatch(text):
        raise ValueError(f"{path}: line {line}: {name} must be {what}, got {shorten(text)!r}")
    try:
        return int(text) if integer else float(text)
    except ValueError:  # past Python's 4,300 digits
        raise ValueError(f"{path}: line {line}: {name}: {TOO_LONG}") from None


def read_jsonl(path, f, max_rows: int | None) -> Trace:
    """The first `max_rows` requests (all when None) of a jsonl-format table."""
    return read_json_lines(path, f, max_rows, JSONL)


def read_json_lines(path, f, max_rows: int | None, columns: Columns, each_row=None) -> Trace:
    """The first `max_rows` requests of a JSON-lines file whose objects hold `columns`;
    `each_row(line, row, prompt_tokens)` reads what else a format keeps in a row."""
    times, prompts, outputs = [], [], []
    lines = f if max_rows is None else islice(f, max_rows)  # one request a line
    for line, row in json_objects(path, lines, columns.fmt, columns.listed()):
        missing = [name for name in columns.names if name not in row]
        if missing:
            raise ValueError(f"{path}: line {line}: missing key {', '.join(missing)} (format "
                             f"{columns.fmt} needs {columns.listed()})")
        times.append(check_time(path, line, columns.time, row[columns.time],
                                times[-1] if times else None))
        prompts.append(check_tokens(path, line, columns.prompt, row[columns.prompt]))
        outputs.append(check_tokens(path, line, columns.output, row[columns.output]))
        if each_row is not None:
            each_row(line, row, prompts[-1])
    return timed(path, times, prompts, outputs, columns.unit_s)
