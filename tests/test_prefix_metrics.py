"""Prefix-cache metrics: the hit rate counts the prompt tokens a request's first admission found
cached, the block hit rate the same in full blocks, the prefill tokens saved every admission's
cached tokens (re-admissions after a preemption too); caching off serves nothing from the cache;
the requests' and steps' rows carry what the engine reported; the chart is drawn only for runs
whose requests found shared prefixes cached."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.benchmark import summarize
from engine.prefix_cache import make_block_manager
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from reports.prefix_cache_chart import caching_runs, hit_rate_series, prefix_cache_chart
from scenarios.scenario import RunSpec
from sim.costs import LinearCost
from sim.costs.executor import CostModelExecutor
from sim.loop import run_loop
from helpers.configs import resolved

BLOCK = 4
COST = LinearCost(step_overhead_s=0.01, prefill_token_s=0.001, decode_seq_s=0.001,
                  context_token_s=0.0)


def serve(requests, caching: bool = True, num_blocks: int = 32, fast_forward: bool = True,
          max_num_seqs: int = 4) -> RunRecorder:
    """Simulate `requests` [(arrival_s, prompt_len, output_tokens, block hashes)] on an engine
    with KV blocks of 4 tokens; returns its records."""
    bm = make_block_manager(num_blocks, BLOCK, caching)
    config = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=256,
                             max_seq_len=256)
    arrivals = [arrival for arrival, *_ in requests]

    def make(index, arrival_s):
        _, prompt, output, hashes = requests[index]
        return Sequence(index, prompt, output, arrival_s=arrival_s, seq_id=index,
                        block_hashes=list(hashes))

    return run_loop(Scheduler(config, bm), CostModelExecutor(COST, block_size=BLOCK),
                    RunRecorder(num_blocks), make, arrival_s=np.array(arrivals),
                    num_requests=len(requests), fast_forward=fast_forward)


# Two requests of 10 prompt tokens sharing a 2-block prefix; the second arrives after the first
# has finished. Its admission finds both blocks cached: 8 tokens (10 // 4 = 2 full blocks, and
# the last token is always computed, which a 2-block hit leaves out anyway).
SHARED = [(0.0, 10, 3, (11, 12)), (5.0, 10, 3, (11, 12))]


def test_the_hit_rate_is_the_share_of_prompt_tokens_found_cached_at_first_admission():
    summary = summarize(serve(SHARED))
    assert summary["completed"] == 2
    assert summary["prefix_cache_hit_rate"] == 8 / 20
    assert summary["prefix_cache_block_hit_rate"] == 2 / 4  # of 2 + 2 full prompt blocks
    assert summary["prefill_tokens_saved"] == 8


def test_requests_and_steps_carry_the_cached_tokens_and_blocks():
    recorder = serve(SHARED)
    assert recorder.request_columns()["cached_tokens"] == [0, 8]
    steps = recorder.step_columns()
    assert sum(steps["cached_tokens"]) == 8
    second = list(steps["cached_tokens"]).index(8)
    assert steps["num_prefill_tokens"][second] == 2  # only the uncached tokens are prefilled
    assert steps["kv_blocks_cached"][second] == 2 and max(steps["kv_blocks_cached"]) == 2


def test_caching_off_serves_nothing_from_the_cache():
    recorder = serve(SHARED, caching=False)
    summary = summarize(recorder)
    assert summary["prefix_cache_hit_rate"] == 0.0
    assert summary["prefix_cache_block_hit_rate"] == 0.0
    assert summary["prefill_tokens_saved"] == 0
    assert not any(recorder.step_columns()["kv_blocks_cached"])


def test_a_warmup_leaves_early_requests_out_of_the_hit_rate_but_not_the_saved_tokens():
    summary = summarize(serve(SHARED), warmup_s=1.0)
    assert summary["prefix_cache_hit_rate"] == 8 / 10
    assert summary["prefix_cache_block_hit_rate"] == 2 / 2
    assert summary["prefill_tokens_saved"] == 8  # a step figure, like preemptions


def test_without_an_admitted_request_the_hit_rates_are_nan_not_zero():
    summary = summarize(RunRecorder(8))
    assert math.isnan(summary["prefix_cache_hit_rate"])
    assert math.isnan(summary["prefix_cache_block_hit_rate"])
    assert summary["prefill_tokens_saved"] == 0


def test_a_recorder_not_told_the_block_size_has_no_block_hit_rate():
    recorder = serve(SHARED)
    recorder.block_size = None
    summary = summarize(recorder)
    assert math.isnan(summary["prefix_cache_block_hit_rate"])
    assert summary["prefix_cache_hit_rate"] == 8 / 20


def test_a_readmission_after_preemption_saves_prefill_without_raising_the_hit_rate():
    # Eight blocks for two requests of 2 prompt blocks growing to 5 blocks each: one is
    # preempted, and readmitted onto its own prompt blocks, still cached.
    requests = [(0.0, 8, 12, (1, 2)), (0.0, 8, 12, (3, 4))]
    recorder = serve(requests, num_blocks=8)
    summary = summarize(recorder)
    assert summary["completed"] == 2 and summary["preemptions"] > 0
    assert summary["prefix_cache_hit_rate"] == 0.0  # no first admission found anything
    assert summary["prefill_tokens_saved"] > 0


def test_fast_forwarded_records_equal_the_step_by_step_ones_with_cached_prefixes():
    requests = [(0.1 * i, 9 + i % 3, 6 + i % 5, (100, 101 + i % 2)) for i in range(12)]
    fast, slow = serve(requests).step_columns(), serve(requests, fast_forward=False).step_columns()
    for name in ("cached_tokens", "kv_blocks_cached", "kv_blocks_used", "num_prefill_tokens"):
        assert list(fast[name]) == list(slow[name]), name
    assert sum(slow["cached_tokens"]) > 0


# --- the chart ----------------------------------------------------------------------------------


def spec(caching: bool) -> RunSpec:
    workload = {"num_requests": 1, "arrival": {"process": "burst"},
                "prompt_tokens": {"dist": "fixed", "value": 4},
                "output_tokens": {"dist": "fixed", "value": 2}}
    return RunSpec("cached" if caching else "plain", {},
                   resolved({"engine": {"enable_prefix_caching": caching}, "workload": workload}))


def test_the_hit_rate_of_a_time_slice_is_cached_over_cached_plus_prefilled_tokens():
    steps = {"start_s": [0.0, 0.5, 1.5, 2.5], "end_s": [0.5, 1.0, 2.0, 4.0],
             "cached_tokens": [0, 8, 4, 0], "num_prefill_tokens": [10, 2, 4, 0]}
    edges, rate = hit_rate_series(steps, bins=4)  # slices of 1 s
    assert list(edges) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert rate[0] == pytest.approx(100 * 8 / 20) and rate[1] == pytest.approx(50.0)
    assert np.isnan(rate[2]) and np.isnan(rate[3])  # nothing admitted or prefilled


def test_the_chart_is_drawn_only_for_runs_whose_requests_found_shared_prefixes():
    cached, plain = serve(SHARED), serve(SHARED, caching=False)
    # requests sharing nothing: the cache holds a preempted request's blocks, found again on
    # its readmission, but no first admission finds any (the summary's hit rate is 0)
    readmitted = serve([(0.0, 8, 12, (1, 2)), (0.0, 8, 12, (3, 4))], num_blocks=8)
    assert max(readmitted.step_columns()["cached_tokens"]) > 0
    runs = caching_runs([(spec(True), cached), (spec(False), plain), (spec(True), plain),
                         (spec(True), readmitted)])
    assert [label for label, _ in runs] == ["cached"]
    assert prefix_cache_chart(runs).startswith(b"\x89PNG")
