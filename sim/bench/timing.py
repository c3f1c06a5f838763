"""One request as the client saw it, and its latencies, measured on the client's clock.

    TTFT = first chunk with a choice (a token's, `sse.py`) - request sent
    ITL  = the gaps between consecutive chunks with a choice
    E2E  = end of the stream - request sent
    TPOT = (E2E - TTFT) / (output tokens - 1)

Output tokens are the server's `usage.completion_tokens` when it reports them, else the chunks
with a choice (a server that streams several tokens a chunk is then undercounted, a chat
stream's role chunk counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.vllm_figures import peak_overlap

from .checked import one_line


@dataclass
class RequestResult:
    """One request: what was planned, when it was sent, when each chunk with a choice
    arrived and the stream ended (seconds on the client's clock), and what the server
    reported. `status`: "finished" or "failed" (with its `reason`)."""

    request_id: int
    planned_arrival_s: float
    planned_prompt_tokens: int
    planned_output_tokens: int
    priority: int | None = None  # sent as the request's `priority` (None: not sent)
    sent_s: float = math.nan
    chunk_s: list = field(default_factory=list)
    end_s: float = math.nan
    prompt_tokens: int | None = None  # as the server reported them
    completion_tokens: int | None = None
    status: str = "failed"
    reason: str = ""

    def fail(self, reason: str) -> "RequestResult":
        """Failed, with `reason` on one line of at most REASON_CHARS (a server's text in it
        is its own, so it is kept short enough for a CSV cell and the last printed line)."""
        self.status, self.reason = "failed", one_line(reason)
        return self

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    @property
    def output_tokens(self) -> int:
        """The server's count when it sent one, else the chunks with a choice."""
        return self.completion_tokens if self.completion_tokens is not None else \
            len(self.chunk_s)

    @property
    def first_token_s(self) -> float:
        return self.chunk_s[0] if self.chunk_s else math.nan

    def ttft_s(self) -> float:
        return self.first_token_s - self.sent_s

    def e2e_s(self) -> float:
        return self.end_s - self.sent_s

    def tpot_s(self) -> float:
        """(E2E - TTFT) / (output tokens - 1); NaN with fewer than two tokens."""
        n = self.output_tokens
        return (self.e2e_s() - self.ttft_s()) / (n - 1) if n > 1 else math.nan

    def itl_s(self) -> np.ndarray:
        """[chunks - 1] gaps between consecutive chunks with a choice."""
        return np.diff(np.asarray(self.chunk_s, dtype=np.float64))


def max_in_flight(results) -> int:
    """The most requests in flight at once (sent, stream not yet ended) over `results`."""
    sent = [r for r in results if not math.isnan(r.sent_s)]
    return peak_overlap([r.sent_s for r in sent],
                        [math.inf if math.isnan(r.end_s) else r.end_s for r in sent])
