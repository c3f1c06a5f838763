"""Swap preemption (scheduler.preemption = "swap", engine.swap): a victim's computed KV blocks
go to host swap space and come back when it is readmitted, so it resumes where it stopped;
greedy outputs and every sequence's KV rows are the same as with recompute and with no
preemption at all; a victim that does not fit in the free swap space is recomputed; random
workloads never leak a GPU or host block."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.llm_engine import LLMEngine
from engine.prefix_cache import make_block_manager
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence, SequenceStatus
from engine.step_plan import StepPlan
from engine.swap import SwapSpace
from helpers.real_engine import Served, assert_same_outputs_and_kv
from helpers.real_engine import serve_greedy as serve_prefix_greedy
from sim.costs import CostModelExecutor, LinearCost
from sim.build import swap_block_s
from sim.runner import run_config


def serve_greedy(prompts, num_blocks: int, preemption: str = "recompute", swap_blocks: int = 0,
                 caching: bool = False) -> Served:
    """`helpers.real_engine.serve_greedy` with ten output tokens a request, four at a time."""
    return serve_prefix_greedy(prompts, num_blocks, caching=caching, preemption=preemption,
                               swap_blocks=swap_blocks, max_new_tokens=10, max_num_seqs=4)


PROMPTS = [np.random.default_rng(i).integers(0, 64, size=9 + 3 * i).tolist() for i in range(8)]


@pytest.mark.parametrize("caching", [False, True])
def test_swapped_sequences_resume_with_the_same_outputs_and_kv_as_without_preemption(caching):
    roomy = serve_greedy(PROMPTS, 128, caching=caching)
    swapped = serve_greedy(PROMPTS, 14, "swap", swap_blocks=64, caching=caching)
    recomputed = serve_greedy(PROMPTS, 14, caching=caching)
    assert roomy.scheduler.num_preemptions == 0
    assert swapped.scheduler.num_preemptions > 0 and recomputed.scheduler.num_preemptions > 0
    plans = swapped.plans
    assert sum(len(p.swap_out) for p in plans) > 0
    assert sum(len(p.swap_out) for p in plans) == sum(len(p.swap_in) for p in plans)
    assert_same_outputs_and_kv(swapped, roomy)
    assert_same_outputs_and_kv(recomputed, roomy)
    # resuming computes less than recomputing the victims' prompts and outputs
    computed = [sum(p.num_prefill_tokens + len(p.decodes) for p in run.plans)
                for run in (swapped, recomputed)]
    assert computed[0] < computed[1]


def test_a_victim_that_does_not_fit_in_the_swap_space_is_recomputed():
    roomy = serve_greedy(PROMPTS, 128)
    tight = serve_greedy(PROMPTS, 14, "swap", swap_blocks=6)
    plans = tight.plans
    victims = sum(len(p.preempted) for p in plans)
    swapped = sum(1 for p in plans if p.swap_out)  # a step here swaps out one victim at most
    assert 0 < swapped < victims  # some went to host memory, the others were recomputed
    assert all(len(p.swap_out) <= 6 for p in plans)
    assert_same_outputs_and_kv(tight, roomy)


def test_swap_preemption_needs_a_swap_space():
    config = SchedulerConfig(preemption="swap")
    with pytest.raises(ValueError, match="engine.swap_blocks"):
        Scheduler(config, make_block_manager(8, 4))
    with pytest.raises(ValueError, match="scheduler.preemption must be one of recompute, swap"):
        SchedulerConfig(preemption="drop")


workload_st = st.lists(st.tuples(st.integers(1, 20), st.integers(1, 12)), min_size=1,
                       max_size=14)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=workload_st, block_size=st.sampled_from([1, 2, 4]),
       cache_tokens=st.integers(24, 80), swap_blocks=st.integers(1, 30),
       chunked=st.booleans(), caching=st.booleans(),
       queue=st.sampled_from(["fcfs", "priority"]))
def test_random_workloads_with_swapping_never_leak_a_gpu_or_host_block(
        workload, block_size, cache_tokens, swap_blocks, chunked, caching, queue, fake_executor):
    bm = make_block_manager(max(2, cache_tokens // block_size), block_size, caching)
    config = SchedulerConfig(max_num_seqs=3, max_num_batched_tokens=24, max_seq_len=40,
                             chunked_prefill=chunked, queue=queue, preemption="swap")
    scheduler = Scheduler(config, bm, SwapSpace(swap_blocks))
    engine = LLMEngine(scheduler, fake_executor(bm), RunRecorder(bm.num_blocks),
                       timing="executor")
    seqs = [Sequence(f"r{i}", prompt, out, prompt_token_ids=[i % 3] * prompt, priority=i % 2)
            for i, (prompt, out) in enumerate(workload)]
    for seq in seqs:
        engine.add_request(seq)
    for _ in range(3000):
        if not engine.has_unfinished():
            break
        engine.step()
        bm.check_invariants()
        scheduler.swap.check_invariants()
        for seq in scheduler.running:  # a running sequence's computed KV has its blocks
            assert len(bm.block_tables[seq.seq_id]) * block_size >= seq.num_computed_tokens
    assert not engine.has_unfinished()
    assert all(s.is_finished or s.status is SequenceStatus.REJECTED for s in seqs)
    assert bm.num_used == 0 and scheduler.swap.num_free == swap_blocks


# --- the simulator --------------------------------------------------------------------------

def swap_config(mode: str):
    from helpers.configs import resolved
    from helpers.cosim import CONFIG

    config = copy.deepcopy(CONFIG)
    config["mode"] = mode
    config["scheduler"]["preemption"] = "swap"
    config["engine"]["swap_blocks"] = 40
    config["cost"]["swap_bandwidth_gbs"] = 1e-3  # 8 KiB blocks: 8.2 ms a copy, plain to see
    return resolved(config)


def test_simulation_and_cosimulation_swap_the_same_blocks_step_for_step():
    real, simulated = run_config(swap_config("cosimulate")), run_config(swap_config("simulate"))
    sa, sb = real.step_columns(), simulated.step_columns()
    for name in ("num_prefill_tokens", "num_decode_seqs", "kv_blocks_used", "preemptions"):
        assert list(sa[name]) == list(sb[name])
    assert sum(sa["preemptions"]) > 0


def test_the_simulator_charges_each_swapped_block_at_the_host_bandwidth():
    config = swap_config("simulate")
    cost = LinearCost(0.0, 1e-5, 1e-4, 0.0)  # a cost model with no swap time of its own
    block_s = swap_block_s(config, cost)
    assert block_s == pytest.approx(2 * 2 * 4 * 32 * 4 / 1e6)  # K+V, 2 layers, 4 x 32 floats
    executor = CostModelExecutor(cost, None, 4, block_s)
    plain = CostModelExecutor(cost, None, 4)
    seq = Sequence("a", 8, 4)
    plan = StepPlan(step=0, prefills=[(seq, 8)], swap_out=[(1, 0), (2, 1)], swap_in=[(0, 3)])
    assert executor.execute(plan).duration_s - plain.execute(plan).duration_s == \
        pytest.approx(3 * block_s)
