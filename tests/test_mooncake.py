"""The Mooncake trace's prefix hashes (`format = "mooncake"`, `hash_ids`): read and checked
against the prompt lengths, mapped onto the engine's KV blocks exactly whatever its block size,
and shared in the simulator as the real engine shares the token ids built from them."""

import copy
import json

import numpy as np
import pytest

from engine.executor import NumpyExecutor
from engine.model import ModelConfig, init_params
from helpers.configs import resolved
from helpers.cosim import Recording, Replay
from helpers.sessions import run_pieces
from helpers.traces import error, write
from sim.runner import run_config
from sim.workloads import load_trace
from sim.workloads.block_keys import trace_block_keys, trace_token_ids
from sim.workloads.traces import shipped_trace


def rows(*requests) -> str:
    """JSON lines of (timestamp ms, input_length, output_length, hash_ids) requests."""
    return "".join(json.dumps({"timestamp": t, "input_length": n, "output_length": o,
                               "hash_ids": ids}) + "\n" for t, n, o, ids in requests)


def test_hash_ids_are_renumbered_by_first_appearance_and_kept_per_request(tmp_path):
    path = write(tmp_path, "m.jsonl", rows((0, 1000, 5, [70, 71]), (10, 600, 5, [70, 99]),
                                            (20, 20, 5, [])))
    blocks = load_trace(path, "mooncake").prefix_blocks
    assert [blocks.of(i).tolist() for i in range(3)] == [[0, 1], [0, 2], []]
    assert blocks.block_tokens == 512


@pytest.mark.parametrize("text, message", [
    (rows((0, 1025, 5, [1, 2])), "line 1: hash_ids has 2 ids for input_length 1025; format "
                                 "mooncake names each 512-token prompt block, so it needs 3"),
    (rows((0, 10, 5, [1]), (1, 512, 5, [1, 2])), "line 2: hash_ids has 2 ids for input_length "
                                                 "512"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": 7}\n',
     "line 1: hash_ids must be a list of integers, got 7"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}\n',
     "line 1: hash_ids must be a list of integers"),
])
def test_hash_ids_that_do_not_fit_the_lengths_are_one_line_naming_the_line(tmp_path, text,
                                                                           message):
    assert message in error(write(tmp_path, "m.jsonl", text), "mooncake")


def test_the_shipped_trace_names_every_512_token_block():
    trace = load_trace(shipped_trace("mooncake-conv"), "mooncake")
    blocks = trace.prefix_blocks
    sizes = np.diff(blocks.offsets)  # [n]
    assert np.array_equal(sizes, -(-trace.prompt_tokens // 512))
    assert len(np.unique(blocks.ids)) == 182_790 and len(blocks.ids) == 288_500


@pytest.mark.parametrize("block_size", [16, 48, 512, 1000])
def test_engine_blocks_share_a_key_exactly_when_their_tokens_and_prefix_are_shared(
        tmp_path, block_size):
    # a and b share their first 512-token block; c shares a's whole 2-block prompt
    path = write(tmp_path, "m.jsonl", rows((0, 1100, 40, [5, 6, 7]), (0, 1100, 40, [5, 8, 9]),
                                            (0, 1100, 40, [5, 6, 7])))
    blocks = load_trace(path, "mooncake").prefix_blocks
    keys = [trace_block_keys(blocks, i, 1100, 1140, block_size) for i in range(3)]
    assert all(len(k) == 1140 // block_size for k in keys)
    for j in range(len(keys[0])):
        end = (j + 1) * block_size  # one past the block's last token
        assert (keys[0][j] == keys[1][j]) == (end <= 512)  # in the shared first block
        assert (keys[0][j] == keys[2][j]) == (end <= 1100)  # in the prompt, not the output
    assert len(set(keys[0]) | set(keys[1])) == len(keys[0]) + len(keys[1]) - 512 // block_size


def test_token_ids_built_from_hash_ids_share_exactly_the_named_blocks(tmp_path):
    path = write(tmp_path, "m.jsonl", rows((0, 1100, 4, [5, 6, 7]), (0, 700, 4, [5, 8])))
    blocks = load_trace(path, "mooncake").prefix_blocks
    rng = np.random.default_rng(0)
    a, b = (trace_token_ids(blocks, i, n, 1000, rng) for i, n in ((0, 1100), (1, 700)))
    assert len(a) == 1100 and len(b) == 700
    assert a[:512] == b[:512] and a[512:700] != b[512:700]


# --- simulated and real engines -------------------------------------------------------------

TINY = {"vocab_size": 128, "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
        "max_seq_len": 2048}


def mooncake_config(path) -> dict:
    """A small config replaying the mooncake trace at `path` (a dict to change, then
    `resolved`)."""
    from helpers.sessions import CONFIG

    cfg = copy.deepcopy(CONFIG)
    cfg["model"] = dict(TINY)
    cfg["engine"].update(block_size=16, num_kv_blocks=200, max_num_batched_tokens=512)
    cfg["workload"] = {"trace": {"path": str(path), "format": "mooncake"}}
    return cfg


def shared_prefix_trace(tmp_path):
    """Twelve requests, 40 ms apart: three conversations whose prompts grow turn by turn."""
    rng, requests, next_id = np.random.default_rng(2), [], 1000
    for turn in range(4):
        for conversation in range(3):
            length = 520 + 300 * turn + int(rng.integers(0, 200))
            blocks = -(-length // 512)
            ids = [conversation * 10 + k for k in range(blocks - 1)] + [next_id]
            next_id += 1  # the last, partial block is the turn's own
            requests.append((40 * len(requests), length, int(rng.integers(4, 20)), ids))
    return write(tmp_path, "conv.jsonl", rows(*requests))


def test_simulated_keys_make_the_real_engines_caching_decisions_step_for_step(tmp_path):
    # arrivals 2 s apart (the trace's 40 ms x 50): each turn finds its conversation's earlier
    # turns done and cached however fast this machine runs the real engine's steps
    table = mooncake_config(shared_prefix_trace(tmp_path))
    table["workload"]["trace"]["time_scale"] = 50.0
    cfg = resolved(table)
    params = init_params(ModelConfig(**TINY))
    recording = []

    def live(bm):
        recording.append(Recording(NumpyExecutor(params, bm, rng=np.random.default_rng(0))))
        return recording[0]

    real, _ = run_pieces(cfg, live, True)
    simulated, _ = run_pieces(cfg, lambda bm: Replay(recording[0].durations), False)
    a, b = real.step_columns(), simulated.step_columns()
    for name in ("num_prefill_tokens", "num_decode_seqs", "kv_blocks_used", "preemptions",
                 "cached_tokens", "kv_blocks_cached"):
        assert list(a[name]) == list(b[name]), name
    assert real.request_columns() == simulated.request_columns()
    assert sum(a["cached_tokens"]) > 0.3 * sum(real.request_columns()["prompt_tokens"])


def test_prefix_caching_serves_the_shipped_trace_with_a_lower_ttft():
    """The first 1,000 requests with a cache that holds them all: the hit rate is the trace's
    own, 21% of prompt tokens in 512-token blocks an earlier prompt began with."""
    from engine.benchmark import summarize

    cfg = mooncake_config(shipped_trace("mooncake-conv"))
    cfg["model"]["max_seq_len"] = 131072
    cfg["engine"].update(num_kv_blocks=1_000_000, max_num_batched_tokens=8192, max_num_seqs=64)
    cfg["cost"] = {"model": "linear", "step_overhead_s": 2e-3, "prefill_token_s": 2e-5,
                   "decode_seq_s": 1e-4, "context_token_s": 1e-8}
    cfg["workload"]["trace"]["max_requests"] = 1000
    on = summarize(run_config(resolved(cfg)))
    cfg["engine"]["enable_prefix_caching"] = False
    off = summarize(run_config(resolved(cfg)))
    assert 0.2 < on["prefix_cache_hit_rate"] < 0.23 and off["prefix_cache_hit_rate"] == 0.0
    assert on["prefill_tokens_saved"] > 0 and off["prefill_tokens_saved"] == 0
    assert on["ttft_mean_s"] < 0.5 * off["ttft_mean_s"]
