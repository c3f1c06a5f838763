"""SGLang's admission under KV pressure, the `new_token_ratio` capacity policy
(`capacity_scheduler_policy = "new_token_ratio"`): a request is admitted only where the KV cache
holds its prompt and its future tokens beside a share of every running request's future tokens.

SGLang does not know how long a request will run, so its admission (`PrefillAdder` in
`sglang/srt/managers/schedule_policy.py`) reserves for each running request a share, the new
token ratio, of the tokens it may still emit (`max_new_tokens` less those emitted, at most
4,096), and for each request it admits all of them; a request is admitted only where the free
tokens less those reserved still hold it. The ratio starts at 0.7, falls by a 600th of the way
to a seventh of that in each step that only decodes (the running requests turned out shorter
than feared), is raised where a decode finds the cache full and requests are taken back (to
the share the remaining ones have emitted, plus 20 tokens each), and starts over when the
server idles. A request that ignores EOS, while prefix caching is off, is admitted instead
only where the cache holds every running request and it to their last tokens, each request
freeing its tokens as it ends, shortest first (`add_one_req_ignore_eos`).

servesim counts as SGLang does, in tokens, with its block size as SGLang's page size (a page
more a request) and its free blocks (evictable cached ones included, but those a request's
prefix would use) as SGLang's available and evictable tokens. docs/scheduler/scheduler.md
gives the rules and what is not modelled.
"""

from __future__ import annotations

from .sequence import Sequence

INIT_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO (x --schedule-conservativeness, 1)
MIN_RATIO = INIT_RATIO * 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
DECAY = (INIT_RATIO - MIN_RATIO) / 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS: tokens a request is counted after one
CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION


class NewTokenRatio:
    """The share of each running request's future tokens that admission reserves. Kept as a
    start and a count of decays since, so that many decode steps applied at once give the
    very ratio that as many steps one by one give."""

    __slots__ = ("start", "decays")

    def __init__(self):
        self.start, self.decays = INIT_RATIO, 0

    @property
    def current(self) -> float:
        return max(self.start - self.decays * DECAY, MIN_RATIO)

    def decay(self, steps: int = 1) -> None:
        """`steps` steps that only decoded, none of them preempting."""
        self.decays += steps

    def reset(self) -> None:
        """Nothing runs: the estimate starts over."""
        self.start, self.decays = INIT_RATIO, 0

    def after_preemption(self, running) -> None:
        """A step preempted (SGLang retracts): the share the running requests have emitted of
        their `max_new_tokens`, plus RETRACT_DECODE_STEPS tokens each, at most 1."""
        emitted = sum(seq.num_output_tokens for seq in running)
        most = sum(seq.max_new_tokens for seq in running)
        self.start = min(1.0, (emitted + RETRACT_DECODE_STEPS * len(running)) / (most + 1))
        self.decays = 0


def _future_tokens(seq: Sequence) -> int:
    """The tokens a request may still emit, as SGLang estimates them (at most 4,096)."""
    return min(max(seq.max_new_tokens - seq.num_output_tokens, 0), CLIP_MAX_NEW_TOKENS)


class ReservedTokens:
    """One round of admission's account of the tokens reserved (`PrefillAdder`'s budget): for
    the running requests whose prefill is done, the ratio's share of their future tokens; for
    those whose prefill ends in this step and each request admitted, a page and all their future
    tokens (a request admitted with a chunk short of its prompt: the page alone). Counted when
    first asked (a round that reaches no candidate asks nothing)."""

    __slots__ = ("block_manager", "running", "finishing", "ratio", "ignore_eos_rule",
                 "owed", "pages", "admitted")

    def __init__(self, block_manager, running: list, finishing, ratio: float, caching: bool):
        self.block_manager = block_manager
        self.running = running  # the scheduler's list: this round's admissions join it
        self.finishing = finishing  # running sequences whose prefill completes in this step
        self.ratio = ratio
        self.ignore_eos_rule = not caching  # SGLang's rule for EOS-ignoring requests
        self.owed: float | None = None  # tokens reserved beyond the blocks held
        self.pages = 0  # this round's admissions' extra pages
        self.admitted = 0

    def _count(self) -> None:
        ratio, page = self.ratio, self.block_manager.block_size
        finishing = {seq.seq_id for seq in self.finishing}
        owed = 0.0
        for seq in self.running:
            if seq.seq_id in finishing:  # its last chunk, admitted again in SGLang's round
                owed += page + min(seq.max_new_tokens, CLIP_MAX_NEW_TOKENS)
            elif not seq.is_prefilling:
                owed += _future_tokens(seq) * ratio
        self.owed = owed

    def take(self, seq: Sequence, whole: int, chunk: int, pinned: int = 0) -> bool:
        """Whether a waiting request fits, `whole` of its tokens to compute and `chunk` of
        them in this step; `pinned`: evictable cached blocks its prefix would use. If it fits,
        its tokens are reserved."""
        if self.owed is None:
            if not self.running:
                # an idle engine runs the queue's head where its first chunk fits (SGLang
                # turns away at arrival a request an idle cache could never admit)
                self.owed = 0.0
                self._reserve(seq, whole, chunk)
                return True
            self._count()
        page = self.block_manager.block_size
        free = (self.block_manager.num_free - pinned) * page
        left_total, left_now = free - self.owed, free - self.pages
        paged = -(-whole // page) * page + page
        if self.ignore_eos_rule and seq.ignore_eos:
            if paged > min(left_now, left_total) or not self._all_finish(seq, left_now - paged):
                return False
        elif not whole + _future_tokens(seq) + page < left_total:
            return False
        self._reserve(seq, whole, chunk)
        return True

    def _reserve(self, seq: Sequence, whole: int, chunk: int) -> None:
        page = self.block_manager.block_size
        self.owed += page + (min(seq.max_new_tokens, CLIP_MAX_NEW_TOKENS) if chunk == whole
                             else 0)
        self.pages += page
        self.admitted += 1

    def _all_finish(self, seq: Sequence, free: float) -> bool:
        """SGLang's check for a request that ignores EOS: every running request and this one,
        shortest first, can emit its remaining tokens (all of them where it ignores EOS, else
        the ratio's share) in the free tokens and those the ones before it free as they end,
        with a token each to spare."""
        ratio, states = self.ratio, []
        for s in (*self.running, seq):
            left = s.max_new_tokens * (1.0 if s.ignore_eos else ratio) - s.num_output_tokens
            if left > 0:
                states.append((left, s.prompt_len + s.num_output_tokens))
        states.sort(key=lambda state: state[0])
        freed, n = 0, len(states)
        for i, (left, held) in enumerate(states):
            if free + freed - left * (n - i) <= n - i:
                return False
            freed += held
        return True
