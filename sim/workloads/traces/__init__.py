"""Recorded request traces: each request's arrival time and prompt and output token counts read
from a file, selected by `workload.trace.format` (a plain dict of readers in `load.py`).

- `azure.py`: the Azure LLM inference trace 2023 (CSV with absolute timestamps);
- `mooncake.py`: the Mooncake traces (JSON lines, timestamps in milliseconds);
- `table.py`: a plain table of `arrival_s, prompt_tokens, output_tokens`, as csv or jsonl;
- `sharegpt.py`: ShareGPT conversations, which give lengths only (arrivals come from the
  scenario's arrival process, as in vLLM's benchmark);
- `files.py`: shipped traces by name, paths, plain or gzip-compressed text, one-line errors;
- `load.py`: `load_trace`, the reads cached, `time_scale`, `max_requests`, the shuffle.
The traces servesim ships live in `data/` (sources, licences and citations in its README.md).
"""

from .files import resolve_path, shipped_trace
from .load import FORMATS, load_trace, trace_notes
from .trace import MAX_TOKENS, Trace

__all__ = ["FORMATS", "MAX_TOKENS", "Trace", "load_trace", "resolve_path", "shipped_trace",
           "trace_notes"]
