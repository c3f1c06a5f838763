"""SGLang's admission under KV pressure, the `new_token_ratio` capacity policy
(`capacity_scheduler_policy = "new_token_ratio"`): a request is admitted only where the KV cache
holds its prompt and its future tokens beside a share of every running request's future tokens.

SGLang does not know how long a request will run, so its admission (`PrefillAdder` in
`sglang/srt/managers/schedule_policy.py`) reserves for each running request a share, the new
token ratio, of the tokens it may still emit (`max_new_tokens` less those emitted, at most
4,096), and for each request it admits all of them; a request is admitted only where the free
tokens less those reserved still hold it. The ratio starts at 0.7, falls by a 600th of the way
to 0.14 of that in each step that only decodes (the running requests turned out shorter than
feared), is set where a decode finds the cache full and requests are taken back (to the share
the remaining ones have emitted, plus 20 tokens each, over the tokens they may emit in all), and
starts over when the server idles. A request that ignores EOS, while prefix caching is off, is
admitted instead only where the cache holds every running request and it to their last tokens,
each request freeing its tokens as it ends, shortest first (`add_one_req_ignore_eos`).

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
        """The start until a step decays it (a preemption may set it below the floor), then
        never below the floor."""
        if not self.decays:
            return self.start
        return max(self.start - self.decays * DECAY, MIN_RATIO)

    def decay(self, steps: int = 1) -> None:
        """`steps` steps that only decoded, none of them preempting."""
        self.decays += steps

    def reset(self) -> None:
        """The server idles: the estimate starts over."""
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
    """One round of admission's account of the tokens reserved (`PrefillAdder`'s budget), beyond
    the blocks held: for the running requests whose prefill is done, the ratio's share of their
    future tokens; for each prefill continuing in this step (SGLang admits its chunked request
    again in each round) and each request admitted, a page, and where its prompt completes in
    this step, all its future tokens. Counted when first asked (a round that reaches no
    candidate asks nothing)."""

    __slots__ = ("block_manager", "running", "chunks", "ratio", "ignore_eos_rule", "owed",
                 "pages")

    def __init__(self, block_manager, running: list, chunks, ratio: float, caching: bool):
        self.block_manager = block_manager
        self.running = running  # the scheduler's list: this round's admissions join it
        self.chunks = chunks  # (sequence, tokens) of the prefills continuing in this step
        self.ratio = ratio
        self.ignore_eos_rule = not caching  # SGLang's rule for EOS-ignoring requests
        self.owed: float | None = None  # tokens reserved beyond the blocks held
        self.pages = 0  # pages reserved beyond the blocks held (SGLang's current offset)

    def _count(self) -> None:
        ratio, page = self.ratio, self.block_manager.block_size
        owed, chunked = 0.0, set()
        for seq, n in self.chunks:
            chunked.add(seq.seq_id)
            owed += page
            if seq.num_computed_tokens + n == seq.num_tokens:  # its last chunk
                owed += min(seq.max_new_tokens, CLIP_MAX_NEW_TOKENS)
        for seq in self.running:
            if seq.seq_id not in chunked and not seq.is_prefilling:
                owed += _future_tokens(seq) * ratio
        self.owed = owed
        self.pages = page * len(self.chunks)

    def take(self, seq: Sequence, whole: int, chunk: int, pinned: int = 0) -> bool:
        """Whether a waiting request fits, `whole` of its tokens to compute and `chunk` of
        them in this step; `pinned`: evictable cached blocks its prefix would use. If it fits,
        its tokens are reserved."""
        if self.owed is None:
            if not self.running:
                # servesim's own rule, so that nothing waits forever: an idle engine runs the
                # queue's head where its first chunk fits, though SGLang's rule may not
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
