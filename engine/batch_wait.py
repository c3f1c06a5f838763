"""TensorRT-LLM's batch waiting (its `PyExecutor._waiting_requests`; the scheduler keys
`batch_wait_timeout_iters` and `batch_wait_max_tokens_ratio`): while sequences decode, new
prefills are held back until the sequences a step would prefill, each counted whole, and its
decodes fill `batch_wait_max_tokens_ratio` of the token budget, or `batch_wait_timeout_iters`
steps in a row have held them. Only a step with both decodes and prefills asks; a sequence
whose KV is computed (swapped out, handed over by a prefill engine) decodes, counts nothing
and joins even a held step. One rank's: `SchedulerConfig` refuses it with data-parallel ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kv_reservation import RESUMING, has_free_capacity


@dataclass
class BatchWait:
    """Steps that have held prefills back in a row, and whether the step just planned did (one
    attribute of the scheduler: its instance attributes are kept few, docs/sim/speed.md)."""

    waited: int = 0
    holding: bool = False


def hold_prefills(scheduler, decodes: list, prefilling: list, budget: int,
                  admitting: bool = True) -> bool:
    """Whether the step being planned holds its prefills back (module docstring): it stops
    holding, and resets the count, once the prefill tokens and the decodes reach the ratio of
    the budget or the count reaches the iterations, else holds and counts one more. `prefilling`:
    the running sequences still prefilling; `budget`: the tokens left after the decodes;
    `admitting`: False when the step already preempted (it admits no one from the queue)."""
    wait = scheduler.batch_wait
    wait.holding = False
    if not decodes:
        return False
    tokens = prefill_preview(scheduler, prefilling, budget, admitting)
    if not tokens:
        return False
    cfg = scheduler.config
    if (wait.waited >= cfg.batch_wait_timeout_iters
            or tokens + len(decodes) >= cfg.batch_wait_max_tokens_ratio
            * cfg.max_num_batched_tokens):
        wait.waited = 0
        return False
    wait.waited += 1
    wait.holding = True
    return True


def prefill_preview(scheduler, prefilling: list, budget: int, admitting: bool = True) -> int:
    """The tokens of the sequences the step would prefill, each counted whole (changing
    nothing): the prefills under way, then, while `admitting`, the queue's head as the
    scheduler's admission would take it (prefix-cache hits not taken off), with the blocks the
    prefills' chunks take first (chunks that do not fit preempt, and a step that preempts
    admits no one; under the guaranteed-no-evict capacity policy, only those whose promised
    blocks the room holds, as admission asks)."""
    cfg, bm = scheduler.config, scheduler.block_manager
    tokens = blocks = 0
    for seq in prefilling:  # one rank: no per-sequence cap
        if budget == 0:
            return tokens
        n = min(seq.num_tokens - seq.num_computed_tokens, budget)
        blocks += bm.blocks_to_hold(seq.seq_id, seq.num_computed_tokens + n)
        tokens, budget = tokens + seq.num_tokens, budget - n
    if not admitting or not has_free_capacity(bm, blocks):
        return tokens
    slots = cfg.max_num_seqs - len(scheduler.running)
    promised = scheduler.promised()  # None unless guaranteed_no_evict
    for seq in scheduler.waiting.head(max(slots, 0)):
        if budget == 0:
            break
        left = seq.num_tokens - seq.num_computed_tokens
        decodes = seq.status in RESUMING and left == 1
        n = 1 if decodes else scheduler.first_chunk(left, budget)
        if not n:
            break
        blocks += bm.blocks_to_hold(seq.seq_id, seq.num_computed_tokens + n)
        if not has_free_capacity(bm, blocks) or (promised is not None
                                                 and not promised.take(seq)):
            break
        tokens, budget = tokens + (0 if decodes else seq.num_tokens), budget - n
    return tokens
