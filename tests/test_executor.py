"""The batched paged executor (engine.executor, engine.model_runner) against full recomputation
and contiguous-cache decoding, over several model shapes and block sizes."""

import numpy as np
import pytest

from engine import model_runner
from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor, StepResult
from engine.model import ModelConfig, init_params
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import GREEDY, SamplingParams, Sequence
from engine.step_plan import StepPlan
from engine.transformer import forward_full, model_decode_step, model_prefill

ATOL = 2e-4  # float32 logits of O(1-10) after a few layers; orders of summation differ
SHAPES = {  # (n_layers, n_heads, d_model, d_ff)
    "seed-like 1 layer 1 head no MLP": (1, 1, 8, 0),
    "2 layers 2 heads": (2, 2, 16, 32),
    "3 layers 4 heads": (3, 4, 32, 64),
}


def tiny_params(shape, max_seq_len=128, vocab=40):
    n_layers, n_heads, d_model, d_ff = shape
    return init_params(ModelConfig(vocab_size=vocab, d_model=d_model, n_layers=n_layers,
                                   n_heads=n_heads, d_ff=d_ff, max_seq_len=max_seq_len, seed=1))


def new_seq(rng, prompt_len, max_new, sampling=GREEDY, vocab=40):
    ids = [int(t) for t in rng.integers(0, vocab, prompt_len)]
    return Sequence(f"r{prompt_len}", prompt_len, max_new, prompt_token_ids=ids, sampling=sampling)


def run_checking_logits(params, seqs, bm, config, rng):
    """Drive the scheduler; compare every sampled row with forward_full. Returns step kinds."""
    scheduler, executor = Scheduler(config, bm), NumpyExecutor(params, bm, rng=rng)
    for seq in seqs:
        assert scheduler.add(seq)
    by_id, kinds = {s.seq_id: s for s in seqs}, set()
    while scheduler.has_unfinished():
        plan = scheduler.schedule()
        result = executor.execute(plan, return_logits=True)
        kinds.add((bool(plan.prefills), bool(plan.decodes)))
        assert set(result.logits) == set(result.tokens)
        for seq_id, logits in result.logits.items():
            expected = forward_full(by_id[seq_id].token_ids(), params)[-1]  # [V]
            np.testing.assert_allclose(logits, expected, atol=ATOL, rtol=1e-4)
            assert result.tokens[seq_id] == int(np.argmax(logits))
        scheduler.postprocess(plan, result.tokens)
    bm.check_invariants()
    assert bm.num_used == 0
    return kinds


@pytest.mark.parametrize("block_size", [1, 3, 16])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_mixed_batched_steps_match_full_recomputation(shape, block_size):
    rng = np.random.default_rng(block_size)
    params = tiny_params(shape)
    # long prompts span many blocks; a small token budget splits them into chunks that share
    # steps with the decodes of the others
    seqs = [new_seq(rng, n, m) for n, m in ((3, 6), (41, 4), (1, 5), (17, 7), (30, 3))]
    config = SchedulerConfig(policy="continuous", chunked_prefill=True, max_num_seqs=4,
                             max_num_batched_tokens=12, max_seq_len=128)
    kinds = run_checking_logits(params, seqs, BlockManager(200, block_size), config, rng)
    assert (True, True) in kinds and (False, True) in kinds  # mixed steps and pure decode steps


def test_preemption_and_recompute_still_match_full_recomputation():
    rng = np.random.default_rng(5)
    params = tiny_params(SHAPES["2 layers 2 heads"])
    seqs = [new_seq(rng, n, 12) for n in (9, 14, 6)]
    config = SchedulerConfig(policy="continuous", max_num_seqs=3, max_num_batched_tokens=64,
                             max_seq_len=128)
    scheduler_blocks = BlockManager(9, 4)  # too few for all three at full length: preemptions
    run_checking_logits(params, seqs, scheduler_blocks, config, rng)
    assert sum(s.preemptions for s in seqs) > 0


def test_static_batch_with_padding_rows_matches_full_recomputation():
    rng = np.random.default_rng(2)
    params = tiny_params(SHAPES["3 layers 4 heads"])
    seqs = [new_seq(rng, n, m) for n, m in ((5, 2), (12, 9), (7, 4))]
    config = SchedulerConfig(policy="static", max_batch_size=3, max_seq_len=128)
    run_checking_logits(params, seqs, BlockManager(40, 3), config, rng)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_decoding_matches_the_contiguous_cache(shape):
    rng = np.random.default_rng(3)
    params = tiny_params(shape)
    seq = new_seq(rng, 11, 9)
    bm = BlockManager(16, 3)
    executor = NumpyExecutor(params, bm, rng=rng)
    bm.ensure_capacity(seq.seq_id, seq.num_tokens)
    result = executor.execute(StepPlan(prefills=[(seq, 11)]), return_logits=True)
    logits, cache = model_prefill(seq.prompt_token_ids, params)
    for _ in range(8):
        token = result.tokens[seq.seq_id]
        np.testing.assert_allclose(result.logits[seq.seq_id], logits, atol=ATOL, rtol=1e-4)
        seq.num_computed_tokens = seq.num_tokens
        seq.append_token(token)
        bm.ensure_capacity(seq.seq_id, seq.num_tokens)
        result = executor.execute(StepPlan(decodes=[seq]), return_logits=True)
        logits, cache = model_decode_step(token, cache, params)
    # the paged storage holds the same keys as the contiguous cache, at the block table's slots
    n, bs = seq.num_tokens, bm.block_size
    table = bm.block_tables[seq.seq_id]
    paged_k = np.stack([executor.storage.k[:, table[i // bs], i % bs] for i in range(n)], 1)
    contiguous_k = cache["K"].reshape(len(params["layers"]), -1, *paged_k.shape[2:])[:, :n]
    np.testing.assert_allclose(paged_k, contiguous_k, atol=1e-5)


def test_padding_rows_cost_compute_but_change_no_result():
    rng = np.random.default_rng(4)
    params = tiny_params(SHAPES["2 layers 2 heads"])
    outputs = []
    for padding in (0, 5):
        seqs = [new_seq(np.random.default_rng(9), n, 3) for n in (4, 6)]
        bm = BlockManager(10, 4)
        for seq in seqs:
            bm.ensure_capacity(seq.seq_id, seq.num_tokens)
        plan = StepPlan(prefills=[(s, s.prompt_len) for s in seqs], padding_seqs=padding)
        result = NumpyExecutor(params, bm, rng=rng).execute(plan, return_logits=True)
        outputs.append([result.logits[s.seq_id] for s in seqs])
    # equal up to float32 rounding: BLAS may block a matmul of 10 + 5 rows differently
    np.testing.assert_allclose(np.array(outputs[0]), np.array(outputs[1]), atol=1e-5)


def test_padding_rows_go_through_the_matmuls(monkeypatch):
    seen = []
    real = model_runner.attention_input
    monkeypatch.setattr(model_runner, "attention_input",
                        lambda x, layer, h: (seen.append(x.shape[0]), real(x, layer, h))[1])
    params = tiny_params(SHAPES["2 layers 2 heads"])
    seq = new_seq(np.random.default_rng(0), 5, 2)
    bm = BlockManager(4, 4)
    bm.ensure_capacity(seq.seq_id, 5)
    NumpyExecutor(params, bm, rng=np.random.default_rng(0)).execute(
        StepPlan(prefills=[(seq, 5)], padding_seqs=3))
    assert seen == [8, 8]  # one matmul batch per layer: 5 tokens + 3 padding rows


def test_decode_groups_split_by_gather_budget_give_the_same_logits(monkeypatch):
    params = tiny_params(SHAPES["3 layers 4 heads"])
    results = []
    for budget in (model_runner.GATHER_GROUP_BYTES, 1):  # 1 byte: one sequence per group
        monkeypatch.setattr(model_runner, "GATHER_GROUP_BYTES", budget)
        rng = np.random.default_rng(6)
        seqs = [new_seq(rng, n, 1) for n in (3, 20, 9, 1, 14)]
        bm = BlockManager(40, 2)
        executor = NumpyExecutor(params, bm, rng=rng)
        for seq in seqs:  # prefill all but the last prompt token, then decode everyone at once
            bm.ensure_capacity(seq.seq_id, seq.num_tokens)
            if seq.prompt_len > 1:
                executor.execute(StepPlan(prefills=[(seq, seq.prompt_len - 1)]))
            seq.num_computed_tokens = seq.prompt_len - 1
        result = executor.execute(StepPlan(decodes=seqs), return_logits=True)
        for seq in seqs:
            np.testing.assert_allclose(result.logits[seq.seq_id],
                                       forward_full(seq.prompt_token_ids, params)[-1], atol=ATOL)
        results.append([result.logits[s.seq_id] for s in seqs])
    np.testing.assert_allclose(np.array(results[0]), np.array(results[1]), atol=1e-6)


def test_each_sequence_samples_with_its_own_params_and_the_seeded_rng():
    params = tiny_params(SHAPES["2 layers 2 heads"])
    samplings = [GREEDY, SamplingParams(1.0), SamplingParams(0.7, top_k=5, top_p=0.9)]
    runs = []
    for _ in range(2):
        rng = np.random.default_rng(11)
        seqs = [new_seq(np.random.default_rng(1), 6, 1, s) for s in samplings]
        bm = BlockManager(12, 4)
        for seq in seqs:
            bm.ensure_capacity(seq.seq_id, 6)
        result = NumpyExecutor(params, bm, rng=rng).execute(
            StepPlan(prefills=[(s, 6) for s in seqs]), return_logits=True)
        assert isinstance(result, StepResult) and result.duration_s > 0
        greedy = seqs[0].seq_id
        assert result.tokens[greedy] == int(np.argmax(result.logits[greedy]))
        top5 = np.argsort(result.logits[seqs[2].seq_id])[-5:]
        assert result.tokens[seqs[2].seq_id] in top5
        runs.append([result.tokens[s.seq_id] for s in seqs])
    assert runs[0] == runs[1]


def test_a_plan_without_reserved_blocks_is_refused_before_computing():
    params = tiny_params(SHAPES["2 layers 2 heads"])
    bm = BlockManager(4, 4)
    executor = NumpyExecutor(params, bm, rng=np.random.default_rng(0))
    seq = new_seq(np.random.default_rng(0), 5, 2)
    with pytest.raises(ValueError, match="block table"):
        executor.execute(StepPlan(prefills=[(seq, 5)]))
    bm.ensure_capacity(seq.seq_id, 4)  # one slot short for a decode of token 4
    seq.num_computed_tokens = 4
    with pytest.raises(ValueError, match="no KV slot"):
        executor.execute(StepPlan(decodes=[seq]))
    assert not executor.storage.k.any()


def test_a_prefill_chunk_that_stops_short_samples_nothing():
    params = tiny_params(SHAPES["2 layers 2 heads"])
    seq = new_seq(np.random.default_rng(0), 9, 2)
    bm = BlockManager(4, 4)
    bm.ensure_capacity(seq.seq_id, 9)
    result = NumpyExecutor(params, bm, rng=np.random.default_rng(0)).execute(
        StepPlan(prefills=[(seq, 5)]))
    assert result.tokens == {}


def test_simulated_sequences_bad_ids_and_positions_past_max_seq_len_are_refused():
    params = tiny_params(SHAPES["2 layers 2 heads"], max_seq_len=8)
    bm = BlockManager(8, 4)
    executor = NumpyExecutor(params, bm, rng=np.random.default_rng(0))
    ghost = Sequence("sim", 4, 2)  # no token ids: a simulated request
    bm.ensure_capacity(ghost.seq_id, 4)
    with pytest.raises(ValueError, match="no prompt token ids"):
        executor.execute(StepPlan(prefills=[(ghost, 4)]))
    long = new_seq(np.random.default_rng(0), 9, 1)
    bm.ensure_capacity(long.seq_id, 9)
    with pytest.raises(ValueError, match="max_seq_len"):
        executor.execute(StepPlan(prefills=[(long, 9)]))
    outside = Sequence("v", 2, 1, prompt_token_ids=[3, 40])  # vocabulary is [0, 40)
    bm.ensure_capacity(outside.seq_id, 2)
    with pytest.raises(ValueError, match="vocabulary"):
        executor.execute(StepPlan(prefills=[(outside, 2)]))
    with pytest.raises(TypeError, match="Generator"):
        NumpyExecutor(params, bm, rng=0)
