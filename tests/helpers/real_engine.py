"""Serving prompts greedily on the real engine, step by step, with every sequence's output ids
and the KV rows of its tokens kept, and the check that two such servings are the same."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.model import ModelConfig, init_params
from engine.prefix_cache import make_block_manager
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import GREEDY, Sequence, SequenceStatus
from engine.swap import SwapSpace

MODEL = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=128)


class Served(NamedTuple):
    outputs: dict  # request id -> output token ids
    kv: dict  # request id -> [(K, V) of every layer] of its computed tokens
    seqs: list
    scheduler: Scheduler
    plans: list  # every step's plan


def serve_greedy(prompts, num_blocks: int, *, caching: bool = False,
                 preemption: str = "recompute", swap_blocks: int = 0, max_new_tokens: int = 6,
                 max_num_seqs: int = 3, block_size: int = 4, per_step: int = 2,
                 max_num_batched_tokens: int | None = None) -> Served:
    """Serve the prompts greedily on the real engine (arriving `per_step` a step): every
    sequence's output ids and the KV rows of its tokens, read from the paged cache just
    before its blocks are let go. Block (and swap space) invariants are checked every step."""
    bm = make_block_manager(num_blocks, block_size, caching)
    config = SchedulerConfig(max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max_num_batched_tokens or 8 * max_num_seqs,
                             max_seq_len=128, chunked_prefill=True, preemption=preemption)
    scheduler = Scheduler(config, bm, SwapSpace(swap_blocks) if swap_blocks else None)
    executor = NumpyExecutor(init_params(MODEL), bm, rng=np.random.default_rng(0),
                             swap_blocks=swap_blocks)
    engine = LLMEngine(scheduler, executor, RunRecorder(num_blocks), timing="executor")
    kv, plans, retire = {}, [], scheduler.retire

    def keep_kv(finished, step):
        for seq in finished:
            table = bm.block_tables[seq.seq_id]
            slots = np.asarray([table[t // block_size] * block_size + t % block_size
                                for t in range(seq.num_computed_tokens)])
            kv[seq.request_id] = [tuple(a.copy() for a in executor.storage.gather(layer, slots))
                                  for layer in range(MODEL.n_layers)]
        retire(finished, step)

    scheduler.retire = keep_kv
    seqs = [Sequence(f"r{i}", len(p), max_new_tokens, prompt_token_ids=list(p),
                     sampling=GREEDY) for i, p in enumerate(prompts)]
    pending = list(seqs)
    while pending or engine.has_unfinished():
        for seq in pending[:per_step]:
            engine.add_request(seq)
        pending = pending[per_step:]
        plans.append(engine.step().plan)
        bm.check_invariants()
        if scheduler.swap is not None:
            scheduler.swap.check_invariants()
    assert all(s.status is SequenceStatus.FINISHED for s in seqs)
    assert bm.num_used == 0
    if scheduler.swap is not None:
        assert scheduler.swap.num_free == swap_blocks  # every host block back
    return Served({s.request_id: s.output_token_ids for s in seqs}, kv, seqs, scheduler, plans)


def assert_same_outputs_and_kv(a: Served, b: Served) -> None:
    assert a.outputs == b.outputs
    for request_id, rows in a.kv.items():
        for (k_a, v_a), (k_b, v_b) in zip(rows, b.kv[request_id]):
            np.testing.assert_allclose(k_a, k_b, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(v_a, v_b, rtol=1e-4, atol=1e-5)
