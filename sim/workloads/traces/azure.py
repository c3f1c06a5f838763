"""Format "azure": the Azure LLM inference trace 2023 (Patel et al., "Splitwise", ISCA 2024).

A CSV file with the header `TIMESTAMP,ContextTokens,GeneratedTokens`, then one request a line,
e.g. `2023-11-16 18:17:03.9799600,4808,10`: ContextTokens is the prompt length, GeneratedTokens
the number of output tokens the request asks for. Timestamps are dates and times (a bare
number is refused), read to the microsecond (any year, no wrapping), and must not go
backwards, to the last digit written. A timestamp may end in a time zone (`Z`, `+05:00`), the
same on every row (`Z`, `+00:00` and `+0000` are one zone): rows in different zones would need
converting, which is refused rather than guessed.
"""

from __future__ import annotations

import csv
import re
import warnings

import numpy as np

from .files import csv_rows
from .table import INTEGER
from .trace import Trace, check_tokens, shorten

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
KIND = "a CSV file"
ZONE = re.compile(r"(Z|[+-]\d\d(:?\d\d)?)$")  # an ISO 8601 zone at the end of a timestamp
FRACTION = re.compile(r"\.(\d+)")  # a timestamp's fraction of a second
# a date first (NumPy would read a bare number as a year: 1700000000 as the year 1,700,000,000)
DATE = re.compile(r"-?\d{4,}-\d\d-\d\d(T|$)")


def read(path, f, max_rows: int | None) -> Trace:
    """The first `max_rows` requests (all when None) of the open file `f`."""
    reader = csv.reader(f)
    header = next(reader, None)
    if header is None or tuple(h.strip() for h in header) != COLUMNS:
        raise ValueError(f"{path}: line 1: expected the header {','.join(COLUMNS)} "
                         f"(format azure), got {shorten(','.join(header or []))!r}")
    stamps, prompts, outputs, zone, last_order = [], [], [], None, ""
    for line, row in csv_rows(path, reader, max_rows):
        stamp, order, row_zone, prompt, output = _parse_row(path, line, row)
        if stamps and row_zone != zone:
            raise ValueError(f"{path}: line {line}: TIMESTAMP {row[0].strip()} is in time zone "
                             f"{row_zone or 'none'}, the rows before in {zone or 'none'}; "
                             f"every row must give the same zone (or none)")
        zone = row_zone
        if stamps and (stamp, order) < (stamps[-1], last_order):
            raise ValueError(f"{path}: line {line}: TIMESTAMP {row[0]} is earlier than the "
                             f"line before (the trace must be in arrival order)")
        stamps.append(stamp)
        last_order = order
        prompts.append(prompt)
        outputs.append(output)
    if not stamps:
        raise ValueError(f"{path}: the trace has no requests")
    stamps = np.array(stamps)  # [n] datetime64[us]
    seconds = (stamps - stamps[0]).astype(np.float64) * 1e-6  # [n] us -> s
    return Trace(seconds, np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64))


def _zone(text: str) -> str:
    """A zone as +HH:MM ("Z" is "+00:00", "+05" "+05:00", "+0530" "+05:30")."""
    digits = "0000" if text == "Z" else text[1:].replace(":", "").ljust(4, "0")
    sign = "+" if digits == "0000" else text[0]  # -00:00 is UTC too
    return f"{sign}{digits[:2]}:{digits[2:]}"


def _parse_row(path, line: int, row: list):
    if len(row) != 3:
        raise ValueError(f"{path}: line {line}: expected 3 fields "
                         f"({','.join(COLUMNS)}), got {len(row)}")
    text = row[0].strip().replace(" ", "T")
    if not DATE.match(text):
        raise ValueError(f"{path}: line {line}: TIMESTAMP {shorten(row[0].strip())!r} is not a "
                         f"date and time (e.g. 2023-11-16 18:17:03.979960)")
    zone = ZONE.search(text) if "T" in text else None  # a date alone has no zone, only a '-'
    counts = [field.strip() for field in row[1:]]
    try:  # microseconds: every date from year -290,000 to 290,000, no wrapping
        with warnings.catch_warnings():  # NumPy converts a zone it finds left with a warning
            warnings.simplefilter("error")
            stamp = np.datetime64(text[:zone.start()] if zone else text, "us")
        if not all(INTEGER.fullmatch(count) for count in counts):
            raise ValueError("token counts in ASCII digits")
        prompt, output = int(counts[0]), int(counts[1])
    except (ValueError, OverflowError, Warning):
        raise ValueError(f"{path}: line {line}: malformed row {shorten(','.join(row))!r}") \
            from None
    fraction = FRACTION.search(text)  # past the microsecond: only to keep the rows' order
    order = (fraction.group(1) if fraction else "")[6:].ljust(12, "0")
    return stamp, order, _zone(zone.group()) if zone else None, \
        check_tokens(path, line, "ContextTokens", prompt), \
        check_tokens(path, line, "GeneratedTokens", output)
