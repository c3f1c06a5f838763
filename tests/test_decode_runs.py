"""Fast forward: the simulator advances a run of decode steps that repeat the last one in one go
(`sim.fastpath.decode_run`, `CostModelExecutor.execute_run`, `sim.fastpath.start_run`). It must be the
step-by-step simulation exactly: the same steps, blocks, tokens, preemptions and times, to the
last bit, under every policy, queue and cost model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.block_manager import BlockManager
from sim.fastpath import apply_run, plan_run
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from helpers.runs import CASES, LINEAR, config_of, records
from sim.costs import load_profile
from sim.costs.jitter import Jitter
from sim.runner import run_config


def assert_same_runs(config, **kwargs):
    fast = run_config(config, **kwargs)
    slow = run_config(config, fast_forward=False, **kwargs)
    assert records(fast) == records(slow)
    return fast


@pytest.mark.parametrize("case", CASES)
def test_fast_forward_records_exactly_the_step_by_step_simulation(tmp_path, case):
    process = "constant" if "constant" in case else "poisson"
    recorder = assert_same_runs(config_of(tmp_path, CASES[case], process=process, rate=20.0))
    columns = recorder.step_columns()
    assert recorder.statuses.count("finished") == 60
    if "preemptions" in case:
        assert sum(columns["preemptions"]) > 0  # the case exercises what it names


def test_fast_forward_is_exact_with_jitter_after_prefill_costs_and_gathered_keys(tmp_path):
    """A cost model with every per-step term the fast path must reproduce: the machine's speed
    process (sequential draws), the after-prefill cost of the k-th step, and decode attention's
    gathered keys across several gather groups (long contexts)."""
    base = load_profile("default")
    coefficients = list(base.coefficients)
    coefficients[-2] = 3e-9  # decode_gathered
    cost = dataclasses.replace(base, coefficients=tuple(coefficients),
                               jitter=Jitter((0.01, 0.3), (0.1, 0.2), 0.05),
                               after_tokens=(16, 256), after_extra_s=((2e-3, 1e-3, 5e-4),
                                                                      (4e-3, 2e-3, 1e-3)))
    assert cost.counts_gathered and cost.after_prefill_steps == 3
    config = config_of(tmp_path, "[engine]\nnum_kv_blocks = 400\n[cost]\njitter = false\n",
                       rate=3.0)
    config = config.updated({"workload.prompt_tokens": {"dist": "uniform", "low": 500,
                                                        "high": 3000},
                             "cost.jitter": True})
    assert_same_runs(config, cost=cost)


def test_fast_forward_is_exact_in_a_closed_loop_with_think_time(tmp_path):
    config = config_of(tmp_path, "[engine]\nnum_kv_blocks = 40\n" + LINEAR)
    assert_same_runs(config.updated({"workload.arrival": {"process": "closed_loop",
                                                          "concurrency": 5,
                                                          "think_time_s": 0.03}}))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(blocks=st.integers(24, 120), block_size=st.sampled_from([1, 4, 16]),
       policy=st.sampled_from(["continuous", "static"]), queue=st.sampled_from(["fcfs", "priority"]),
       chunked=st.booleans(), rate=st.floats(0.5, 40.0), seed=st.integers(0, 10**6),
       capacity=st.sampled_from(["max_utilization", "guaranteed_no_evict", "new_token_ratio"]),
       mixed=st.booleans(), recv=st.sampled_from([1, 2, 7]))
def test_fast_forward_matches_step_by_step_on_random_servers(tmp_path, blocks, block_size, policy,
                                                             queue, chunked, rate, seed, capacity,
                                                             mixed, recv):
    config = config_of(tmp_path, LINEAR, n=30, rate=rate)
    changes = {"seed": seed, "engine.num_kv_blocks": blocks, "engine.block_size": block_size,
               "engine.max_num_batched_tokens": 512, "engine.max_num_seqs": 8,
               "scheduler.policy": policy, "scheduler.queue": queue,
               "scheduler.chunked_prefill": chunked and policy == "continuous",
               "scheduler.max_batch_size": 5, "scheduler.capacity_scheduler_policy":
                   capacity if policy == "continuous" or capacity != "new_token_ratio"
                   else "max_utilization",  # SGLang's admission is continuous batching's
               "scheduler.enable_mixed_chunk": mixed or policy == "static",
               "scheduler.scheduler_recv_interval": recv if policy == "continuous" else 1,
               "workload.prompt_tokens": {"dist": "uniform", "low": 1, "high": 300}}
    assert_same_runs(config.updated(changes))


# --- the run itself -------------------------------------------------------------------------------


def decoding_scheduler(num_blocks: int, outputs=(10, 30), prompt: int = 16,
                       max_num_seqs: int = 32) -> Scheduler:
    """A scheduler whose sequences have prefilled and decoded once: the next plan decodes all."""
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=max_num_seqs), BlockManager(num_blocks, 4))
    for i, n in enumerate(outputs):
        scheduler.add(Sequence(i, prompt, n, seq_id=i))
    for _ in range(2):
        scheduler.postprocess(scheduler.schedule())
    return scheduler


def test_fast_forward_is_exact_where_evictions_can_split_a_waiting_recomputation(tmp_path):
    # caching on, chunked prefill off, a 64-token budget: a preempted request of 94 tokens,
    # 32 cached, waits while its 62 uncached tokens fit a step; the decodes' evictions of its
    # cached blocks make it longer than the budget, so it is split and admitted mid-run
    path = tmp_path / "split.toml"
    path.write_text("""seed = 468915
[cost]
model = "linear"
[engine]
num_kv_blocks = 62
block_size = 16
max_num_batched_tokens = 64
enable_prefix_caching = true
[workload]
num_requests = 132
prompt_tokens = { dist = "lognormal", median = 8, sigma = 0.8, max = 500 }
output_tokens = { dist = "uniform", low = 1, high = 300 }
arrival = { process = "poisson", rate = 200 }
""")
    import scenarios

    recorder = assert_same_runs(scenarios.load(path).base)
    assert sum(recorder.step_columns()["preemptions"]) > 100


def test_a_run_goes_on_after_a_finish_only_where_nothing_can_take_its_place():
    for through, steps, finishes in ((False, 7, [7]), (True, 27, [7, 27])):
        scheduler = decoding_scheduler(num_blocks=100)
        plan = scheduler.schedule()
        run = plan_run(scheduler, plan, through_finishes=through)
        # outputs so far 2 (prefill + one decode); the plan emits the 3rd; the sequences' last
        # tokens (the 10th and the 30th) come 7 and 27 repeats after it
        assert run.max_steps == steps
        scheduler.postprocess(plan)
        used, _, finished = apply_run(scheduler, run, run.max_steps)
        assert [s.finish_step - plan.step for s in finished] == finishes
        assert len(used) == steps and scheduler.num_steps == plan.step + steps + 1
        assert run.decoding(np.arange(1, steps + 1)).tolist() == [2] * 7 + [1] * (steps - 7)
        scheduler.block_manager.check_invariants()
    waiting = decoding_scheduler(num_blocks=100, max_num_seqs=2)
    waiting.add(Sequence(9, 20, 5, seq_id=9))  # no room beside the two; it takes a finished one's
    assert plan_run(waiting, waiting.schedule()).max_steps == 7


def test_a_run_stops_before_the_step_that_would_preempt():
    scheduler = decoding_scheduler(num_blocks=12)  # 2 x 4 prompt blocks + 4 free
    plan = scheduler.schedule()
    run = plan_run(scheduler, plan)
    # rows 18, 19 written by plan and repeat 1; blocks needed at rows 20, 24 for each sequence:
    # repeats 2 (two blocks) and 6 (two more): 4 fit, the 5th is at repeat 10, past the finish
    scheduler.postprocess(plan)
    slow = decoding_scheduler(num_blocks=12)
    slow.postprocess(slow.schedule())
    used, _, _ = apply_run(scheduler, run, run.max_steps)
    for k in range(run.max_steps):  # the same blocks, in the same order, step by step
        p = slow.schedule()
        assert not p.preempted and p.kv_blocks_used == used[k]
        slow.postprocess(p)
    assert scheduler.block_manager.block_tables == slow.block_manager.block_tables


def test_a_run_follows_a_completed_prefill_only_when_nothing_could_be_admitted_next():
    scheduler = Scheduler(SchedulerConfig(), BlockManager(50, 4))
    scheduler.add(Sequence(0, 8, 20, seq_id=0))
    run = plan_run(scheduler, scheduler.schedule())
    assert run.max_steps == 19  # the prefill emits token 1, repeats 1..19 tokens 2..20
    busy = Scheduler(SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8),
                     BlockManager(50, 4))
    for i in range(2):
        busy.add(Sequence(i, 40, 20, seq_id=i))
    assert plan_run(busy, busy.schedule()) is None  # the second waits for the first's budget
    chunked = Scheduler(SchedulerConfig(max_num_batched_tokens=32, chunked_prefill=True),
                        BlockManager(50, 4))
    chunked.add(Sequence(0, 40, 20, seq_id=0))
    assert plan_run(chunked, chunked.schedule()) is None  # more of the prompt comes next


def test_no_run_for_a_real_sequence_that_could_stop_at_any_token():
    real = Scheduler(SchedulerConfig(), BlockManager(50, 4))
    real.add(Sequence(0, 3, 20, prompt_token_ids=[1, 2, 3], seq_id=0, ignore_eos=False))
    real.postprocess(real.schedule(), {0: 5})
    assert plan_run(real, real.schedule()) is None


def test_the_clock_lands_exactly_where_the_steps_end_even_where_one_delay_cannot():
    from sim.loop import delays_to

    now, target = 0.006371946230925478, 0.026021946230925474  # now + d skips target for all d
    assert all(now + d != target for d in (target - now, math.nextafter(target - now, 1),
                                          math.nextafter(target - now, 0)))
    t = now
    for delay in delays_to(now, target):
        t = t + delay
    assert t == target
    assert delays_to(1.0, 1.5) == [0.5]


def test_gathered_keys_of_a_repeated_batch_match_counting_each_step():
    from sim.costs.shape import gathered_keys, gathered_keys_repeated

    rng = np.random.default_rng(0)
    contexts = rng.integers(1, 3000, size=37).tolist()
    repeats = np.arange(1, 200)
    for slot_bytes in (64, 2048, 8192):
        expected = [gathered_keys([c + j for c in contexts], 16, slot_bytes) for j in repeats]
        assert gathered_keys_repeated(contexts, repeats, 16, slot_bytes).tolist() == expected
