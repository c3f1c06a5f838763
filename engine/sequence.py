"""A request's life inside the engine: its tokens, its progress and its lifecycle state.

A `Sequence` knows how many of its tokens have KV in the cache (`num_computed_tokens`) and how
many exist (`num_tokens` = prompt + generated). A step computes KV for some of the missing tokens;
when it reaches the last known token it samples one more. Prefill, chunked prefill, decode and
recompute after preemption are all that one rule.

The simulator runs without real token ids: it passes `None` for sampled tokens and the sequence
only counts them (`output_token_ids` stays empty).
"""

from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from enum import Enum

import numpy as np


class SequenceStatus(Enum):
    WAITING = "waiting"  # queued, never run
    RUNNING = "running"  # holds KV blocks, scheduled every step
    PREEMPTED = "preempted"  # blocks freed, back in the queue, will recompute its tokens
    SWAPPED = "swapped"  # blocks copied to host swap space, back in the queue, will resume
    TRANSFERRED = "transferred"  # prefilled by another engine, its KV moved here, will resume
    FINISHED = "finished"
    REJECTED = "rejected"  # can never fit; `reject_reason` says why
    ABORTED = "aborted"  # cancelled before it finished (its client went away)


_LEGAL = {
    SequenceStatus.WAITING: {SequenceStatus.RUNNING, SequenceStatus.REJECTED,
                             SequenceStatus.ABORTED},
    SequenceStatus.RUNNING: {SequenceStatus.PREEMPTED, SequenceStatus.SWAPPED,
                             SequenceStatus.TRANSFERRED, SequenceStatus.FINISHED,
                             SequenceStatus.ABORTED},
    SequenceStatus.PREEMPTED: {SequenceStatus.RUNNING, SequenceStatus.ABORTED},
    SequenceStatus.SWAPPED: {SequenceStatus.RUNNING, SequenceStatus.ABORTED},
    SequenceStatus.TRANSFERRED: {SequenceStatus.RUNNING, SequenceStatus.ABORTED},
    SequenceStatus.FINISHED: set(),
    SequenceStatus.REJECTED: set(),
    SequenceStatus.ABORTED: set(),
}


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. temperature 0 is greedy; top_k 0 and top_p 1 are off."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not _number(self.temperature) or not 0 <= self.temperature < math.inf:
            raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got "
                             f"{self.temperature!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, numbers.Integral):
            raise ValueError(f"top_k must be a whole number (0 or less is off), got "
                             f"{self.top_k!r}")
        if not _number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")


def _number(value) -> bool:
    """A float or an integer (Python's or NumPy's), not a bool (True is no temperature)."""
    return isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, bool)


GREEDY = SamplingParams(temperature=0.0)

_seq_counter = itertools.count()


class Sequence:
    """One request as the scheduler and executor see it."""

    __slots__ = (
        "seq_id", "request_id", "prompt_token_ids", "prompt_len", "output_token_ids",
        "num_output_tokens", "num_computed_tokens", "max_new_tokens", "priority", "arrival_s",
        "sampling", "ignore_eos", "eos_token_id", "status", "preemptions", "reject_reason",
        "admit_order", "finish_reason", "first_scheduled_step", "first_token_step",
        "last_token_step", "finish_step", "block_hashes", "num_cached_tokens", "kv_transfer",
        "generator", "filled_from",
    )

    def __init__(self, request_id, prompt_len: int, max_new_tokens: int, *,
                 prompt_token_ids=None, priority: int = 0, arrival_s: float = 0.0,
                 sampling: SamplingParams = GREEDY, ignore_eos: bool = True,
                 eos_token_id: int | None = None, seq_id: int | None = None,
                 block_hashes: list | None = None):
        if prompt_token_ids is not None and len(prompt_token_ids) != prompt_len:
            raise ValueError(f"request {request_id}: prompt_len {prompt_len} != "
                             f"{len(prompt_token_ids)} prompt token ids")
        if prompt_len < 1:
            raise ValueError(f"request {request_id}: prompt must have at least 1 token")
        if max_new_tokens < 1:
            raise ValueError(f"request {request_id}: max_new_tokens must be >= 1, got {max_new_tokens}")
        self.seq_id = next(_seq_counter) if seq_id is None else seq_id
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.prompt_len = prompt_len
        self.output_token_ids: list[int] = []
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        self.max_new_tokens = max_new_tokens
        self.priority = priority
        self.arrival_s = arrival_s
        self.sampling = sampling
        self.ignore_eos = ignore_eos
        self.eos_token_id = eos_token_id
        self.status = SequenceStatus.WAITING
        self.preemptions = 0
        self.reject_reason: str | None = None
        # "stop" (EOS), "length" (max_new_tokens), "abort", "error" (its sampling failed)
        self.finish_reason: str | None = None
        self.admit_order = -1  # set by the scheduler on each admission
        # Step indices (the caller maps them to times): first scheduled, first/last token, finish.
        self.first_scheduled_step: int | None = None
        self.first_token_step: int | None = None
        self.last_token_step: int | None = None
        self.finish_step: int | None = None
        # Prefix caching (engine.prefix_cache): the hashes of the sequence's full KV blocks in
        # token order, computed from its token ids as they are known, or given (a simulated
        # sequence's, from its workload); None: it takes no part. num_cached_tokens: the prompt
        # tokens its first admission found cached (None until admitted).
        self.block_hashes = block_hashes if block_hashes is not None else \
            ([] if prompt_token_ids is not None else None)
        self.num_cached_tokens: int | None = None
        # The first of its blocks this engine's steps filled since it was (re)admitted: after a
        # swap-in or a transfer, the blocks before came with their KV, filled by no step here
        self.filled_from = 0
        # Prefill/decode disaggregation: how its KV came from the engine that prefilled it
        # (an `engine.records.KvTransfer`); None while it has not moved.
        self.kv_transfer = None
        # A request's own seeded `np.random.Generator` for its sampled tokens (an HTTP
        # request's `seed`); None: the executor's shared one.
        self.generator = None

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens

    @property
    def is_prefilling(self) -> bool:
        """True while KV is missing for more than the last token (prompt or recompute)."""
        return self.num_computed_tokens < self.num_tokens - 1

    @property
    def is_finished(self) -> bool:
        return self.status in (SequenceStatus.FINISHED, SequenceStatus.REJECTED,
                               SequenceStatus.ABORTED)

    def token_ids(self) -> list[int]:
        """Prompt plus generated ids (real runs only)."""
        return list(self.prompt_token_ids) + self.output_token_ids

    def forget_steps(self) -> None:
        """Leave for another engine (prefill/decode disaggregation): step indices are an
        engine's own, so the next engine counts this sequence's tokens from its own steps."""
        self.first_scheduled_step = self.first_token_step = self.last_token_step = None

    def set_status(self, status: SequenceStatus) -> None:
        if status not in _LEGAL[self.status]:
            raise RuntimeError(f"sequence {self.request_id}: illegal transition "
                               f"{self.status.value} -> {status.value}")
        self.status = status

    def append_token(self, token_id: int | None) -> None:
        """Record one sampled token (None in simulation, where only the count matters)."""
        self.num_output_tokens += 1
        if token_id is not None:
            self.output_token_ids.append(token_id)

    def should_stop(self, token_id: int | None) -> bool:
        if self.num_output_tokens >= self.max_new_tokens:
            self.finish_reason = "length"
            return True
        if not self.ignore_eos and token_id is not None and token_id == self.eos_token_id:
            self.finish_reason = "stop"
            return True
        return False

    def __repr__(self) -> str:
        return (f"Sequence({self.request_id!r}, {self.status.value}, prompt={self.prompt_len}, "
                f"out={self.num_output_tokens}/{self.max_new_tokens}, "
                f"computed={self.num_computed_tokens})")
