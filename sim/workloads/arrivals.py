"""The requests a run sends as earlier ones finish (`Slots`): a closed loop's users, or the
client slots of an open process behind a cap on requests in flight. The arrival processes
themselves are the scenario's (`scenarios.arrival`); open ones draw their times up front.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Slots:
    """`concurrency` users (or client slots), each sending its next request `think_time_s`
    after its previous one finished (or was rejected). With `arrival_s`, request i is not sent
    before its arrival time: an open process behind a cap on requests in flight
    (`workload.max_concurrency`, vLLM's `--max-concurrency`: a request waits on the client for
    a free slot, and its latencies start when it is sent)."""

    concurrency: int
    think_time_s: float = 0.0
    max_seconds: float | None = None  # users send no request after this time
    # [n] seconds: request i is sent at its arrival or once a slot frees, whichever is later
    arrival_s: np.ndarray | None = field(default=None, compare=False)
