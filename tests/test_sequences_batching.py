"""The engine's part 5: requests, single-sequence generation and static batching
(engine.sequences, engine.batching), cross-checked against each other and full recomputation."""

from fractions import Fraction

import numpy as np
import pytest

from engine import batching
from engine.batching import batched_decode_step, build_batch_step_input, static_batch_generate
from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.model import ModelConfig, init_params
from engine.paged_kv_cache import PagedKVStorage
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from engine.sequences import (generate_single_sequence, init_sequence_state, is_sequence_done,
                              make_request, sequence_decode_step)
from engine.tokenizer import build_vocab, decode_tokens, encode_prompt
from engine.transformer import forward_full

PARAMS = init_params(ModelConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                                 max_seq_len=64, seed=3))
GREEDY_SPEC = {"temperature": 0}


def greedy_reference(prompt, n_new, params=PARAMS):
    ids = list(prompt)
    for _ in range(n_new):
        ids.append(int(np.argmax(forward_full(ids, params)[-1])))
    return ids[len(prompt):]


def test_the_readme_quickstart_runs_as_written(capsys):
    vocab = build_vocab(["hello world"], ["<bos>", "<eos>", "<unk>"])
    V, D = len(vocab["id_to_token"]), 8
    rng = np.random.default_rng(0)

    # A toy model with random weights — real ones would come from a checkpoint.
    params = {
        "E": (rng.normal(size=(V, D)) * 0.1).astype(np.float32),
        "Wq": np.eye(D, dtype=np.float32), "Wk": np.eye(D, dtype=np.float32),
        "Wv": np.eye(D, dtype=np.float32), "Wo": np.eye(D, dtype=np.float32),
        "W_out": rng.normal(size=(D, V)).astype(np.float32),
        "max_seq_len": 32,
    }

    requests = [
        make_request("r0", encode_prompt("hello", vocab), 5, {}),
        make_request("r1", encode_prompt("world", vocab), 5, {}),
    ]
    config = {"temperature": 0.9, "top_p": 0.95, "rng": np.random.default_rng(0)}

    for result in static_batch_generate(params, requests, config, max_new_tokens=5):
        print(result["request_id"], result["output_ids"],
              repr(decode_tokens(result["output_ids"], vocab)))

    lines = capsys.readouterr().out.splitlines()
    # the README's own printed output
    assert lines == ["r0 [7, 0, 9, 6, 6] 'lrhh'", "r1 [3, 0, 10, 8, 10] ' wow'"]
    config["rng"] = np.random.default_rng(0)  # the same seed gives the same tokens
    results = static_batch_generate(params, requests, config, max_new_tokens=5)
    for line, result in zip(lines, results):
        assert line.startswith(f"{result['request_id']} {result['output_ids']} ")
        assert len(result["output_ids"]) == 5 and all(0 <= t < V for t in result["output_ids"])


PROMPTS = [[1, 2, 3], [4], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18], [2, 2]]


@pytest.mark.parametrize("max_batch_size", [4, 3, 1])
def test_greedy_single_and_static_batch_give_identical_ids(max_batch_size):
    lengths = [6, 3, 9, 1]  # unequal: finished sequences become padding rows
    requests = [make_request(f"q{i}", p, n, GREEDY_SPEC)
                for i, (p, n) in enumerate(zip(PROMPTS, lengths))]
    single = [generate_single_sequence(r, PARAMS, None) for r in requests]
    batched = static_batch_generate(PARAMS, requests, {"max_batch_size": max_batch_size,
                                                       "block_size": 3}, 20)
    assert [r["request_id"] for r in batched] == ["q0", "q1", "q2", "q3"]
    assert [r["output_ids"] for r in batched] == single
    assert single == [greedy_reference(p, n) for p, n in zip(PROMPTS, lengths)]


def test_greedy_continuous_batching_gives_the_same_ids():
    seqs = [Sequence(f"c{i}", len(p), 5, prompt_token_ids=p) for i, p in enumerate(PROMPTS)]
    bm = BlockManager(30, 2)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=8,
                                          chunked_prefill=True, max_seq_len=64), bm)
    executor = NumpyExecutor(PARAMS, bm, rng=np.random.default_rng(0))
    for seq in seqs:
        scheduler.add(seq)
    while scheduler.has_unfinished():
        plan = scheduler.schedule()
        scheduler.postprocess(plan, executor.execute(plan).tokens)
    requests = [make_request(s.request_id, p, 5, GREEDY_SPEC) for s, p in zip(seqs, PROMPTS)]
    static = static_batch_generate(PARAMS, requests, {}, 5)
    assert [s.output_token_ids for s in seqs] == [r["output_ids"] for r in static]


def test_static_batching_runs_the_scheduler_with_padding(monkeypatch):
    plans = []
    real = NumpyExecutor.execute
    monkeypatch.setattr(NumpyExecutor, "execute",
                        lambda self, plan, **kw: (plans.append(plan), real(self, plan, **kw))[1])
    requests = [make_request("a", [1, 2], 2), make_request("b", [3], 5)]
    static_batch_generate(PARAMS, requests, GREEDY_SPEC, 10)
    assert [p.num_prefill_tokens for p in plans] == [3, 0, 0, 0, 0]
    assert [p.padding_seqs for p in plans] == [0, 0, 1, 1, 1]  # "a" done after 2 tokens


def test_max_new_tokens_zero_is_done_at_once():
    request = make_request("z", [1, 2], 0, GREEDY_SPEC)
    state = init_sequence_state(request, PARAMS)
    assert is_sequence_done(state, None)
    assert generate_single_sequence(request, PARAMS, None) == []
    out = static_batch_generate(PARAMS, [request, make_request("y", [3], 2)], GREEDY_SPEC, 4)
    assert out[0] == {"request_id": "z", "output_ids": []} and len(out[1]["output_ids"]) == 2
    assert static_batch_generate(PARAMS, [make_request("y", [3], 2)], {}, 0)[0]["output_ids"] == []


def test_eos_stops_generation_and_is_included():
    prompt = [7, 8, 9]
    first, second = greedy_reference(prompt, 2)
    request = make_request("e", prompt, 6, GREEDY_SPEC)
    assert generate_single_sequence(request, PARAMS, eos_id=second) == [first, second]
    out = static_batch_generate(PARAMS, [request], {"eos_token_id": second}, 6)
    assert out[0]["output_ids"] == [first, second]


def test_sequence_decode_step_appends_one_token_and_refuses_past_the_limit():
    request = make_request("s", [3, 4, 5], 2, GREEDY_SPEC)
    state = init_sequence_state(request, PARAMS)
    token, state = sequence_decode_step(state, PARAMS)
    assert state["generated"] == [token] == greedy_reference([3, 4, 5], 1)
    assert not is_sequence_done(state, None) and is_sequence_done(state, token)
    sequence_decode_step(state, PARAMS, np.random.default_rng(0))
    assert is_sequence_done(state, None)
    with pytest.raises(ValueError, match="already generated"):
        sequence_decode_step(state, PARAMS)
    with pytest.raises(ValueError, match="params"):
        sequence_decode_step(init_sequence_state(request, PARAMS), dict(PARAMS))


def test_sampled_generation_is_reproducible_with_a_seeded_rng():
    request = make_request("t", [1, 2, 3], 8, {"temperature": 1.2, "top_k": 10})
    runs = [generate_single_sequence(request, PARAMS, None, np.random.default_rng(42))
            for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 8


def test_a_decode_steps_own_rng_draws_that_steps_token_and_leaves_the_states_alone():
    request = make_request("r", [1, 2, 3], 2, {"temperature": 1.0})

    def state_of(seed):
        return init_sequence_state(request, PARAMS, rng=np.random.default_rng(seed))

    state = state_of(7)
    token, _ = sequence_decode_step(state, PARAMS, np.random.default_rng(99))
    assert token == sequence_decode_step(state_of(99), PARAMS)[0]
    untouched = np.random.default_rng(7).bit_generator.state
    assert state["executor"].rng.bit_generator.state == untouched  # the next step draws from it


@pytest.mark.parametrize("args, match", [
    (("r", [], 3, {}), "at least one token"),
    (("r", [1, -2], 3, {}), "non-negative"),
    (("r", [1], -1, {}), "max_new_tokens"),
    (("r", [1], 2, {"temprature": 1.0}), "unknown key"),
    (("r", [1], 2, {"top_p": 0.0}), "top_p"),
    # values that would fail at the first decode step, refused when the request is made
    (("r", [1], 2, {"temperature": float("nan")}), "temperature must be a finite number"),
    (("r", [1], 2, {"temperature": float("inf")}), "temperature must be a finite number"),
    (("r", [1], 2, {"temperature": "hot"}), "temperature must be a finite number"),
    (("r", [1], 2, {"top_k": 2.9}), "top_k must be a whole number"),
    (("r", [1], 2, {"top_k": True}), "top_k must be a whole number"),
    (("r", [1], 2, {"top_p": float("nan")}), "top_p"),
    (("r", [1], 2, {"temperature": Fraction(1, 2)}), "temperature must be a finite number"),
])
def test_make_request_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        make_request(*args)


def test_static_batch_generate_rejects_bad_config_and_oversized_requests():
    request = make_request("r", [1, 2], 3)
    with pytest.raises(ValueError, match="unknown config key"):
        static_batch_generate(PARAMS, [request], {"temp": 0.5}, 3)
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        static_batch_generate(PARAMS, [request], {"temperature": float("inf")}, 3)
    with pytest.raises(ValueError, match="max_seq_len"):
        static_batch_generate(PARAMS, [make_request("long", [1] * 60, 10)], {}, 10)
    with pytest.raises(ValueError, match="max_seq_len"):
        init_sequence_state(make_request("long", [1] * 60, 10), PARAMS)


def test_build_batch_step_input_flattens_decodes_then_prefill_chunks():
    bm = BlockManager(10, 2)
    dec = Sequence("d", 3, 4, prompt_token_ids=[5, 6, 7])
    dec.num_computed_tokens = 2  # its last prompt token's K/V is missing: a decode
    pre = Sequence("p", 5, 4, prompt_token_ids=[1, 2, 3, 4, 5])
    pre.num_computed_tokens = 1  # a chunk of 4 finishes its prompt
    for seq in (dec, pre):
        bm.ensure_capacity(seq.seq_id, seq.num_tokens)
    inp = build_batch_step_input([dec], bm, prefills=[(pre, 4)], padding_seqs=2)
    assert inp.token_ids.tolist() == [7, 2, 3, 4, 5]
    assert inp.positions.tolist() == [2, 1, 2, 3, 4]
    table_d, table_p = bm.block_tables[dec.seq_id], bm.block_tables[pre.seq_id]
    assert inp.slots[0] == table_d[1] * 2  # position 2: second block, offset 0
    assert inp.slots[1] == table_p[0] * 2 + 1
    assert inp.sample_rows.tolist() == [0, 4] and inp.sample_seqs == [dec, pre]
    assert inp.decode_context_lens.tolist() == [3] and inp.padding_rows == 2
    tokens, logits = batched_decode_step(
        PARAMS, PagedKVStorage.for_model(PARAMS, 10, 2), inp, np.random.default_rng(0))
    assert logits.shape == (2, 30) and set(tokens) == {dec.seq_id, pre.seq_id}


def test_batching_exposes_the_executors_own_step_functions():
    from engine import model_runner
    assert batching.build_batch_step_input is model_runner.build_batch_step_input
    assert batching.batched_decode_step is model_runner.batched_decode_step


def test_greedy_requests_with_the_flat_flat_params_match_recomputation():
    rng = np.random.default_rng(1)
    flat = {"E": rng.normal(size=(12, 4)).astype(np.float32),
            **{w: rng.normal(size=(4, 4)).astype(np.float32) for w in ("Wq", "Wk", "Wv", "Wo")},
            "W_out": rng.normal(size=(4, 12)).astype(np.float32), "max_seq_len": 16}
    request = make_request("f", [1, 5, 2], 6, GREEDY_SPEC)
    out = static_batch_generate(flat, [request], {}, 6)[0]["output_ids"]
    assert out == generate_single_sequence(request, flat, None)
    assert out == greedy_reference([1, 5, 2], 6, flat)
