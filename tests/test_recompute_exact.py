"""Greedy outputs are the same ids whichever way a request is scheduled.

Full recomputation, one sequence alone, a static batch, continuous batching, continuous batching
with chunked prefill, and KV caches so small that sequences are preempted and recomputed: all
must produce identical token ids, since scheduling may change when a token is computed, never
what it is.
"""

import numpy as np
import pytest

from engine.batching import static_batch_generate
from engine.block_manager import BlockManager
from engine.continuous_batching import run_continuous_batching
from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.prefix_cache import PrefixCachingBlockManager
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import GREEDY, Sequence
from engine.sequences import generate_single_sequence, make_request
from engine.transformer import forward_full

LENGTHS = [(1, 6), (17, 9), (5, 14), (29, 4), (9, 11), (3, 1), (12, 8)]  # (prompt, output)


@pytest.fixture(scope="module")
def requests(tiny_config):
    rng = np.random.default_rng(7)
    return [make_request(f"r{i}", rng.integers(0, tiny_config.vocab_size, size=p).tolist(), n,
                         {"greedy": True}) for i, (p, n) in enumerate(LENGTHS)]


@pytest.fixture(scope="module")
def reference(requests, tiny_params):
    """Greedy ids by full recomputation of every position at every step."""
    outputs = []
    for r in requests:
        ids = list(r["prompt_token_ids"])
        for _ in range(r["max_new_tokens"]):
            ids.append(int(np.argmax(forward_full(np.array(ids), tiny_params)[-1])))
        outputs.append(ids[len(r["prompt_token_ids"]):])
    return outputs


def test_single_sequence_generation_matches_full_recompute(requests, tiny_params, reference):
    assert [generate_single_sequence(r, tiny_params, None) for r in requests] == reference


def test_static_batch_matches(requests, tiny_params, reference):
    out = static_batch_generate(tiny_params, requests, {"greedy": True, "max_batch_size": 3}, 64)
    assert [r["output_ids"] for r in out] == reference


@pytest.mark.parametrize("config", [
    {},
    {"chunked_prefill": True, "max_num_batched_tokens": 8, "max_num_seqs": 4},
    {"max_num_seqs": 2, "queue": "priority"},
], ids=["continuous", "chunked-prefill", "priority"])
def test_continuous_batching_matches(requests, tiny_params, reference, config):
    out = run_continuous_batching(tiny_params, requests, {"greedy": True, **config})
    assert [r["output_ids"] for r in out] == reference


@pytest.mark.parametrize("config", [
    {"num_kv_blocks": 8, "block_size": 4},
    {"num_kv_blocks": 9, "block_size": 4, "chunked_prefill": True, "max_num_batched_tokens": 8,
     "max_num_seqs": 4},
], ids=["small-cache", "small-cache-chunked"])
def test_preempted_and_recomputed_sequences_match(requests, tiny_params, reference, config):
    out = run_continuous_batching(tiny_params, requests, {"greedy": True, **config})
    assert sum(r["preemptions"] for r in out) > 0, "the cache was meant to force preemptions"
    assert [r["output_ids"] for r in out] == reference


def test_static_batch_under_block_pressure_matches(requests, tiny_params, reference):
    bm = BlockManager(10, 4)
    scheduler = Scheduler(SchedulerConfig(policy="static", max_batch_size=4, max_seq_len=256), bm)
    seqs = [Sequence(r["request_id"], len(r["prompt_token_ids"]), r["max_new_tokens"],
                     prompt_token_ids=r["prompt_token_ids"], sampling=GREEDY) for r in requests]
    for s in seqs:
        assert scheduler.add(s)
    engine = LLMEngine(scheduler, NumpyExecutor(tiny_params, bm, rng=np.random.default_rng(0)))
    while engine.has_unfinished():
        engine.step()
    assert scheduler.num_preemptions > 0
    assert [s.output_token_ids for s in seqs] == reference


@pytest.mark.parametrize("budget", [5, 8])
def test_shared_prefixes_cached_while_chunked_prefills_run_match(tiny_config, tiny_params,
                                                                  budget):
    # a new request each step sharing a 13-token prefix (three full blocks of 4 and a partial
    # one) with the others, while earlier ones still prefill in chunks: each finds the prefix
    # blocks cached as they fill, and generates what full recomputation does
    rng = np.random.default_rng(11)
    prefix = rng.integers(0, tiny_config.vocab_size, size=13).tolist()
    prompts = [prefix + rng.integers(0, tiny_config.vocab_size, size=n).tolist()
               for n in (0, 1, 3, 4, 6, 9)]
    reference = []
    for prompt in prompts:
        ids = list(prompt)
        for _ in range(5):
            ids.append(int(np.argmax(forward_full(np.array(ids), tiny_params)[-1])))
        reference.append(ids[len(prompt):])
    bm = PrefixCachingBlockManager(64, 4)
    scheduler = Scheduler(SchedulerConfig(chunked_prefill=True, max_num_batched_tokens=budget,
                                          max_num_seqs=4, max_seq_len=256), bm)
    engine = LLMEngine(scheduler, NumpyExecutor(tiny_params, bm, rng=np.random.default_rng(0)))
    seqs = [Sequence(f"s{i}", len(p), 5, prompt_token_ids=p, sampling=GREEDY)
            for i, p in enumerate(prompts)]
    for seq in seqs:  # one arrives each step, while the ones before it prefill
        assert scheduler.add(seq)
        engine.step()
    while engine.has_unfinished():
        engine.step()
    assert sum(seq.num_cached_tokens for seq in seqs) > 0, "the prefix was meant to be found"
    assert [seq.output_token_ids for seq in seqs] == reference


def test_a_prefills_chunk_that_preempts_planned_decodes_changes_no_token(tiny_config,
                                                                         tiny_params,
                                                                         monkeypatch):
    # priority: a 30-token prompt runs ahead of three decoders admitted before it, on 10
    # blocks of 4; its chunks of 8 find no free block and preempt decoders already planned in
    # the step (which then do not run), and every request still generates what full
    # recomputation does
    unplanned = []
    unplan = Scheduler.unplan_last_decode
    monkeypatch.setattr(Scheduler, "unplan_last_decode",
                        lambda self, plan: unplanned.append(plan.step) or unplan(self, plan))
    rng = np.random.default_rng(5)
    prompts = [rng.integers(0, tiny_config.vocab_size, size=n).tolist() for n in (8, 8, 8, 30)]
    outputs = [12, 12, 12, 3]
    reference = []
    for prompt, n in zip(prompts, outputs):
        ids = list(prompt)
        for _ in range(n):
            ids.append(int(np.argmax(forward_full(np.array(ids), tiny_params)[-1])))
        reference.append(ids[len(prompt):])
    bm = BlockManager(10, 4)
    scheduler = Scheduler(SchedulerConfig(chunked_prefill=True, max_num_batched_tokens=8,
                                          max_num_seqs=6, queue="priority", max_seq_len=128), bm)
    engine = LLMEngine(scheduler, NumpyExecutor(tiny_params, bm, rng=np.random.default_rng(0)))
    seqs = [Sequence(f"s{i}", len(p), n, prompt_token_ids=p, sampling=GREEDY,
                     priority=0 if i == 3 else 1) for i, (p, n) in enumerate(zip(prompts, outputs))]
    for seq in seqs[:3]:
        assert scheduler.add(seq)
    engine.step()
    engine.step()
    assert scheduler.add(seqs[3])
    while engine.has_unfinished():
        engine.step()
        bm.check_invariants()
    assert unplanned, "the long prompt's chunks were meant to preempt planned decodes"
    assert [seq.output_token_ids for seq in seqs] == reference
    assert bm.num_used == 0
