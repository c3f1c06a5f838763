"""What a trace reader returns, and the checks every format applies to a row's values.

A `Trace` holds one entry per request, in the file's order: arrival times in seconds from the
first row (None for a format that gives lengths only), prompt and output token counts, and, for a
format that says which prompts share a prefix (mooncake), the ids of each prompt's blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scenarios.defaults import MAX_TOKENS  # a request's token counts, as a row may hold them


@dataclass(frozen=True)
class PrefixBlocks:
    """Which prompts share a prefix: request i's prompt is cut into blocks of `block_tokens`
    tokens (its last block may be partial) and its block k is named by `ids[offsets[i] + k]`.
    An id names a block's tokens and everything before them (a chained hash), so two prompts
    whose first k ids are equal share their first k blocks. Ids are renumbered 0, 1, ... in
    order of first appearance (equal stays equal, and a number stays small)."""

    offsets: np.ndarray  # [n + 1] int64: request i's ids are ids[offsets[i]:offsets[i + 1]]
    ids: np.ndarray  # [total] int64
    block_tokens: int

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def of(self, i: int) -> np.ndarray:
        """[blocks] the ids of request i's prompt blocks."""
        return self.ids[self.offsets[i]:self.offsets[i + 1]]


@dataclass(frozen=True)
class Trace:
    arrival_s: np.ndarray | None  # [n] float64 from 0, non-decreasing; None: lengths only
    prompt_tokens: np.ndarray  # [n] int64
    output_tokens: np.ndarray  # [n] int64
    skipped: int = 0  # entries that hold no request (a ShareGPT conversation without a reply)
    prefix_blocks: PrefixBlocks | None = None  # which prompts share a prefix, when the format says

    def __post_init__(self):
        n = len(self.prompt_tokens)
        assert len(self.output_tokens) == n
        assert self.arrival_s is None or len(self.arrival_s) == n
        assert self.prefix_blocks is None or len(self.prefix_blocks) == n

    def __len__(self) -> int:
        return len(self.prompt_tokens)


def shorten(text: str, limit: int = 60) -> str:
    """`text` cut to `limit` characters for an error message (a whole row may be very long)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_tokens(path, line: int, name: str, value) -> int:
    """A token count read from a row: an integer from 1 to MAX_TOKENS (a request with no prompt
    or nothing to generate cannot be served)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{path}: line {line}: {name} must be an integer, got "
                         f"{shorten(repr(value))}")
    if value < 1:
        raise ValueError(f"{path}: line {line}: {name} must be >= 1, got {value} (a request "
                         f"with no prompt or nothing to generate cannot be served)")
    if value > MAX_TOKENS:
        raise ValueError(f"{path}: line {line}: {name} must be at most {MAX_TOKENS:,}, got "
                         f"{value}")
    return int(value)


def check_time(path, line: int, name: str, value, previous) -> float:
    """An arrival time read from a row: a finite number >= 0 (an integer below 2^63, as int64
    holds it), not before the row above it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not 0 <= value < (2**63 if isinstance(value, int) else math.inf):
        raise ValueError(f"{path}: line {line}: {name} must be a number >= 0, got "
                         f"{shorten(repr(value))}")
    if previous is not None and value < previous:
        raise ValueError(f"{path}: line {line}: {name} {value!r} is earlier than the line before "
                         f"(the trace must be in arrival order)")
    return value


def timed(path, times: list, prompts: list, outputs: list, unit_s: float = 1.0) -> Trace:
    """A `Trace` of rows read in arrival order: times (in units of `unit_s` seconds) from the
    first row's, subtracted before converting so that integer times stay exact."""
    if not prompts:
        raise ValueError(f"{path}: the trace has no requests")
    times = np.asarray(times)  # [n] int64 when every time is an integer, else float64
    seconds = (times - times[0]).astype(np.float64) * unit_s  # [n]
    return Trace(seconds, np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64))
