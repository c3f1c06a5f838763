"""`load_trace`: a trace file's requests, read once per version of the file and format.

- Arrival times are seconds since the first row, multiplied by `time_scale`: every
  inter-arrival gap is scaled, so 0.5 replays the trace twice as fast (double the rate) and 2.0
  half as fast. A trace whose scaled span would pass `MAX_TIME_S` is refused.
- `max_requests` keeps the first N requests (all when None or larger than the file); for a
  format without times (sharegpt), the first N after the shuffle `rng` draws, when given.
- Nothing is dropped or reordered behind the user's back: a bad row is an error naming the file
  and line (see each format's module).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from scenarios.defaults import MAX_TIME_S, TRACE_FORMATS, UNTIMED_TRACE_FORMATS
from . import azure, mooncake, sharegpt, table
from .files import open_text, reading, resolve_path
from .trace import Trace

TIMED = {"azure": azure.read, "mooncake": mooncake.read, "csv": table.read_csv,
         "jsonl": table.read_jsonl}
KINDS = {"azure": azure.KIND, "mooncake": mooncake.KIND, "csv": table.CSV_KIND,
         "jsonl": table.JSONL_KIND, "sharegpt": sharegpt.KIND}
FORMATS = (*TIMED, *UNTIMED_TRACE_FORMATS)
assert FORMATS == TRACE_FORMATS and set(KINDS) == set(FORMATS)


def load_trace(path, trace_format: str = "azure", time_scale: float = 1.0,
               max_requests: int | None = None, base_dir=None, *, tokenizer="char",
               rng: np.random.Generator | None = None) -> Trace:
    """The requests of a trace file (see the module docstring). `tokenizer` (sharegpt): "char",
    "whitespace" or a function from text to a token count; `rng` (sharegpt): shuffle the
    requests with it before keeping `max_requests` (file order without it)."""
    if trace_format not in FORMATS:
        raise ValueError(f"workload.trace.format must be one of {', '.join(FORMATS)}, "
                         f"got {trace_format!r}")
    if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or \
            not 0 < time_scale < math.inf:
        raise ValueError(f"workload.trace.time_scale must be a positive number, got {time_scale!r}")
    if max_requests is not None and (isinstance(max_requests, bool) or
                                     not isinstance(max_requests, int) or max_requests < 1):
        raise ValueError(f"workload.trace.max_requests must be a positive integer, got {max_requests!r}")
    untimed = trace_format in UNTIMED_TRACE_FORMATS
    if untimed and time_scale != 1.0:
        raise ValueError(f"workload.trace.time_scale: format {trace_format} gives no arrival "
                         f"times to scale (the arrival process sets the rate)")
    path = resolve_path(path, base_dir)
    stat = path.stat()
    trace = _read_cached(str(path), stat.st_mtime_ns, stat.st_size, trace_format,
                         None if untimed else max_requests, tokenizer if untimed else None)
    if untimed:
        return _sample(trace, max_requests, rng)
    span = trace.arrival_s[-1]
    if span > MAX_TIME_S:  # the file's own times, whatever the scale
        raise ValueError(f"{path}: its arrival times span {span:.3g} s from the first row to "
                         f"the last; times past {MAX_TIME_S:.3g} s (136 years) lose "
                         f"sub-microsecond precision")
    if span * time_scale > MAX_TIME_S:
        raise ValueError(f"workload.trace.time_scale: the trace spans {span:.3g} s, "
                         f"{span * time_scale:.3g} s scaled by {time_scale:g}; times past "
                         f"{MAX_TIME_S:.3g} s (136 years) lose sub-microsecond precision")
    return replace(trace, arrival_s=trace.arrival_s * time_scale)


def trace_notes(trace_config, base_dir=None) -> list[str]:
    """What a run of a resolved `workload.trace` table should say of its file: fewer requests
    than `max_requests` asked for (every one is sent), and entries that hold no request."""
    trace = load_trace(trace_config.path, trace_config.format, trace_config.time_scale,
                       trace_config.max_requests, base_dir,
                       tokenizer=trace_config.tokenizer)
    name = trace_config.name or Path(trace_config.path).name
    notes = []
    wanted = trace_config.max_requests
    if wanted is not None and len(trace) < wanted:
        notes.append(f"{name} holds {len(trace):,} requests, fewer than the {wanted:,} asked "
                     f"for (workload.trace.max_requests, --num-prompts): all {len(trace):,} "
                     f"are sent")
    if trace.skipped:
        entries, were = ("entry holds", "was") if trace.skipped == 1 else ("entries hold", "were")
        notes.append(f"{name}: {trace.skipped:,} {entries} no request (no human turn with text "
                     f"followed by a gpt turn with text) and {were} skipped")
    return notes


def _sample(trace: Trace, max_requests: int | None, rng) -> Trace:
    """A lengths-only trace's requests: shuffled by `rng` (when given), the first N kept."""
    order = rng.permutation(len(trace)) if rng is not None else np.arange(len(trace))  # [n]
    order = order[:max_requests]
    return replace(trace, prompt_tokens=trace.prompt_tokens[order],
                   output_tokens=trace.output_tokens[order])


@lru_cache(maxsize=8)
def _read_cached(path: str, mtime_ns: int, size: int, trace_format: str,
                 max_rows: int | None, tokenizer) -> Trace:
    """A file's requests, read once per version of it (a scenario is checked, then run)."""
    path = Path(path)
    with reading(path, KINDS[trace_format]), open_text(path) as f:
        if trace_format in TIMED:
            trace = TIMED[trace_format](path, f, max_rows)
        else:
            trace = sharegpt.read(path, f.read(), tokenizer)
    blocks = trace.prefix_blocks
    for array in (trace.arrival_s, trace.prompt_tokens, trace.output_tokens,
                  *((blocks.offsets, blocks.ids) if blocks is not None else ())):
        if array is not None:
            array.flags.writeable = False  # shared by every load of this file
    return trace
