"""The client's view of a benchmark as a `RunRecorder`, so summaries, tables, vLLM records and
charts read it as they read a simulation.

A request's row: `arrival_s` is when the client sent it (its latencies start there, as
vLLM's do), `first_token_s` its first chunk with a choice, `finish_s` the end of its stream;
`first_scheduled_s` is unknown to a client (NaN, so queueing figures are NaN), as are
preemptions and cached tokens (NaN: `sees_steps` is false, so the summary's are NaN too). Its
prompt and output tokens are the server's counts when it reported them. A failed request has
status "failed" and its reason. Each inter-token gap is one (gap, 1) pair, ended at its chunk's
arrival. There are no steps.
"""

from __future__ import annotations

import math
from array import array

import numpy as np

from engine.records import RunRecorder


class BenchRecorder(RunRecorder):
    """The records of one benchmark: requests and inter-token gaps, no steps."""

    sees_steps = False

    def __init__(self, results, served_model: str | None = None):
        super().__init__(kv_blocks_total=0)
        self.served_model = served_model  # the model asked for (vLLM's `model_id`)
        self.itl_end = array("d")  # when each gap ended, on the client's clock
        self.failed = [(r.sent_s, r.end_s) for r in results  # when each failed one was given up
                       if not r.finished and not math.isnan(r.end_s)]
        for result in sorted(results, key=lambda r: r.request_id):
            self._record(result)

    def _record(self, result) -> None:
        cols = self._requests
        finished = result.finished
        self.request_ids.append(result.request_id)
        self.statuses.append(result.status)
        if not finished:
            self.reject_reasons[result.request_id] = result.reason
        sent = result.sent_s if not math.isnan(result.sent_s) else result.planned_arrival_s
        for name, value in (("priority", result.priority or 0), ("arrival_s", sent),
                            ("first_scheduled_s", math.nan),
                            ("first_token_s", result.first_token_s if finished else math.nan),
                            ("finish_s", result.end_s if finished else math.nan),
                            ("prompt_tokens", result.prompt_tokens
                             if result.prompt_tokens is not None else
                             result.planned_prompt_tokens),
                            ("output_tokens", result.output_tokens),
                            ("preemptions", math.nan), ("cached_tokens", math.nan)):
            cols[name].append(value)
        if finished:
            gaps = result.itl_s()
            self.itl_gaps.extend(gaps.tolist())
            self.itl_counts.extend([1] * len(gaps))
            self.itl_end.extend(result.chunk_s[1:])

    def failed_end_s(self, warmup_s: float = 0.0) -> float | None:
        t0 = self.origin_s()
        return max((end - t0 for sent, end in self.failed if sent - t0 >= warmup_s), default=None)

    def itl_end_s(self, origin_s: float | None = None) -> np.ndarray:
        t0 = self.origin_s() if origin_s is None else origin_s
        return np.asarray(self.itl_end, dtype=np.float64) - t0
