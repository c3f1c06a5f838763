"""`StepPlan`: what one engine step computes, handed from the scheduler to an executor.

Token rule: a prefill entry `(seq, n)` computes KV for tokens [num_computed, num_computed + n);
when that reaches `seq.num_tokens`, the step samples one token for it. A decode computes the KV of
token `num_tokens - 1` (the last sampled token) and samples one. Block tables already have room
for every token a plan computes: the scheduler reserved it before handing the plan out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .sequence import Sequence


@dataclass
class StepPlan:
    """One step: prefill chunks, decodes, and the scheduler's state when it was planned."""

    step: int = -1  # index of the step; -1 for an empty plan (nothing ran)
    prefills: list[tuple[Sequence, int]] = field(default_factory=list)
    decodes: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    padding_seqs: int = 0  # static batching: finished slots still in the batch (zero rows)
    idle_until_s: float | None = None  # static with a timeout: nothing to run before this time
    num_running: int = 0  # after planning
    num_waiting: int = 0
    kv_blocks_used: int = 0
    # Prefix caching: prompt tokens this step's admissions found cached (their prefill is
    # skipped), and the blocks registered under a hash after planning (held or evictable).
    cached_tokens: int = 0
    kv_blocks_cached: int = 0
    # Swap preemption (engine.swap): KV blocks to copy before the forward pass, every copy out
    # before every copy in: (gpu block, host block) of this step's swapped-out victims, and
    # (host block, gpu block) of the swapped-out sequences it readmits.
    swap_out: list[tuple[int, int]] = field(default_factory=list)
    swap_in: list[tuple[int, int]] = field(default_factory=list)
    swapped_in: list[Sequence] = field(default_factory=list)  # the readmitted sequences
    # A prefill-only engine (prefill/decode disaggregation): the sequences that sampled their
    # first token in this step and left (their blocks held until their KV is read), their KV
    # to move to a decode engine. Filled by postprocess.
    handed_off: list[Sequence] = field(default_factory=list)
    # A decode engine (disaggregation): the transferred sequences whose blocks this planning
    # reserved, whose KV the caller moves here now (`Scheduler.kv_landed` when it has); they
    # take no part in the step, which may be empty
    kv_requested: list[Sequence] = field(default_factory=list)
    # Filled by postprocess, for exact inter-token latencies without per-token timestamps:
    itl_consecutive: int = 0  # tokens whose previous token came from the previous step
    itl_from_steps: list[int] = field(default_factory=list)  # previous-token step of the others

    @property
    def num_prefill_tokens(self) -> int:
        return sum(n for _, n in self.prefills)

    @property
    def num_decode_seqs(self) -> int:
        return len(self.decodes)

    @property
    def is_empty(self) -> bool:
        return not (self.prefills or self.decodes or self.swap_out or self.swap_in
                    or self.preempted)
