"""The simulation loop: queueing theory (M/D/1), idle start at the arrival instant, static batch
timeouts, closed loops, every request accounted for, KV blocks returned, and determinism."""

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from engine.records import RunRecorder
from sim.costs.executor import CostModelExecutor
from sim.costs import LinearCost
from sim.loop import run_loop
from sim.build import build_scheduler, sequence_factory
from sim.runner import run_config
from sim.workloads import build_workload
from helpers.configs import resolved

LINEAR = {"model": "linear", "profile": "default", "step_overhead_s": 0.001,
          "prefill_token_s": 1e-4, "decode_seq_s": 5e-4, "context_token_s": 1e-6}
BASE = {
    "name": "t", "description": "", "seed": 0, "mode": "simulate",
    "model": {"vocab_size": 512, "d_model": 512, "n_layers": 4, "n_heads": 8, "d_ff": 2048,
              "max_seq_len": 4096},
    "engine": {"block_size": 16, "num_kv_blocks": 512, "max_num_seqs": 32,
               "max_num_batched_tokens": 2048, "enable_prefix_caching": False},
    "scheduler": {"policy": "continuous", "queue": "fcfs", "chunked_prefill": False,
                  "max_batch_size": 16, "batch_timeout_s": 0.0},
    "cost": LINEAR,
    "workload": {"num_requests": 100, "arrival": {"process": "poisson", "rate": 5.0},
                 "prompt_tokens": {"dist": "uniform", "low": 4, "high": 200},
                 "output_tokens": {"dist": "uniform", "low": 1, "high": 50},
                 "priority": None, "trace": None},
    "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
}


def config(**sections):
    cfg = copy.deepcopy(BASE)
    for name, values in sections.items():
        if isinstance(values, dict) and isinstance(cfg.get(name), dict):
            cfg[name].update(values)
        else:
            cfg[name] = values
    return resolved(cfg)


def fixed(n):
    return {"dist": "fixed", "value": n}


def test_single_server_queue_matches_pollaczek_khinchine():
    """max_num_seqs = 1, fixed lengths and linear costs make every request's service time the
    same: Poisson arrivals give M/D/1, whose mean wait is rho * S / (2 (1 - rho))."""
    prompt, output = 10, 2
    c = LINEAR
    service_s = (2 * c["step_overhead_s"] + c["prefill_token_s"] * prompt + c["decode_seq_s"]
                 + c["context_token_s"] * (prompt + 1))  # one prefill step, one decode step
    rho = 0.6
    cfg = config(engine={"max_num_seqs": 1},
                 workload={"num_requests": 40_000, "prompt_tokens": fixed(prompt),
                           "output_tokens": fixed(output),
                           "arrival": {"process": "poisson", "rate": rho / service_s}})
    cols = run_config(cfg).request_columns()
    queue_s = np.subtract(cols["first_scheduled_s"], cols["arrival_s"])
    e2e_s = np.subtract(cols["finish_s"], cols["arrival_s"])
    expected_wait = rho * service_s / (2 * (1 - rho))
    assert queue_s.mean() == pytest.approx(expected_wait, rel=0.05)  # ~4 standard errors
    assert np.allclose(e2e_s - queue_s, service_s, rtol=1e-9)  # deterministic service
    assert np.mean(queue_s == 0) == pytest.approx(1 - rho, abs=0.01)  # P(no wait) = 1 - rho


def test_an_idle_engine_starts_at_the_instant_a_request_arrives():
    cfg = config(workload={"num_requests": 20, "arrival": {"process": "constant", "rate": 0.5}})
    cols = run_config(cfg).request_columns()
    assert cols["first_scheduled_s"] == cols["arrival_s"]  # every one finds the engine idle


def test_static_batch_waits_for_its_timeout_then_starts():
    cfg = config(scheduler={"policy": "static", "max_batch_size": 4, "batch_timeout_s": 0.5},
                 workload={"num_requests": 3, "arrival": {"process": "constant", "rate": 0.1}})
    cols = run_config(cfg).request_columns()
    for arrival, start in zip(cols["arrival_s"], cols["first_scheduled_s"]):
        assert start == pytest.approx(arrival + 0.5, abs=1e-12)  # alone: waits the full timeout


def test_a_full_static_batch_starts_without_waiting_for_the_timeout():
    cfg = config(scheduler={"policy": "static", "max_batch_size": 4, "batch_timeout_s": 5.0},
                 workload={"num_requests": 4, "arrival": {"process": "constant", "rate": 100.0}})
    cols = run_config(cfg).request_columns()
    assert cols["first_scheduled_s"] == [max(cols["arrival_s"])] * 4  # the 4th arrival


@pytest.mark.parametrize("think_time_s", [0.0, 0.25])
def test_closed_loop_users_send_the_next_request_when_the_last_one_ends(think_time_s):
    concurrency, n = 3, 40
    cfg = config(workload={"num_requests": n, "arrival": {"process": "closed_loop",
                                                          "concurrency": concurrency,
                                                          "think_time_s": think_time_s}})
    cols = run_config(cfg).request_columns()
    arrivals, finishes = np.array(cols["arrival_s"]), np.array(cols["finish_s"])
    assert np.all(arrivals[np.argsort(cols["request_id"])][:concurrency] == 0.0)
    later = np.sort(arrivals)[concurrency:]
    assert np.allclose(later, np.sort(finishes)[:n - concurrency] + think_time_s, atol=1e-12)
    for t in np.concatenate([arrivals, finishes]):  # never more requests in flight than users
        assert np.sum((arrivals <= t) & (finishes > t)) <= concurrency


def _run_direct(cfg):
    """run_config's pieces, kept so the test can look at the block manager afterwards."""
    sched = build_scheduler(cfg, cfg.model.max_seq_len)
    bm = sched.block_manager
    workload = build_workload(cfg.workload, np.random.default_rng(cfg.seed))
    cost = LinearCost(**{k: v for k, v in LINEAR.items() if k.endswith("_s")})
    executor = CostModelExecutor(cost, block_size=bm.block_size,
                                 every_step_decodes=sched.config.enable_mixed_chunk)
    rec = run_loop(sched, executor,
                   RunRecorder(bm.num_blocks), sequence_factory(workload),
                   arrival_s=workload.arrival_s, closed_loop=workload.closed_loop,
                   num_requests=len(workload))
    return rec, sched, bm


@settings(max_examples=25, deadline=None)
@given(policy=st.sampled_from(["static", "continuous"]), queue=st.sampled_from(["fcfs", "priority"]),
       chunked=st.booleans(), blocks=st.integers(8, 64), seed=st.integers(0, 2**16),
       rate=st.sampled_from([2.0, 50.0, 1000.0]),
       capacity=st.sampled_from(["max_utilization", "guaranteed_no_evict", "new_token_ratio"]),
       mixed=st.booleans())
def test_every_request_ends_finished_or_rejected_and_every_block_comes_back(
        policy, queue, chunked, blocks, seed, rate, capacity, mixed):
    cfg = config(seed=seed, engine={"block_size": 4, "num_kv_blocks": blocks, "max_num_seqs": 8,
                                    "max_num_batched_tokens": 64},
                 scheduler={"policy": policy, "queue": queue,
                            "chunked_prefill": chunked and policy == "continuous",
                            "max_batch_size": 4, "capacity_scheduler_policy":
                                capacity if policy == "continuous" or capacity != "new_token_ratio"
                                else "max_utilization",  # SGLang's is continuous batching's
                            "enable_mixed_chunk": mixed or policy == "static"},
                 model=dict(BASE["model"], max_seq_len=160),
                 workload={"num_requests": 60, "arrival": {"process": "poisson", "rate": rate},
                           "prompt_tokens": {"dist": "uniform", "low": 1, "high": 150},
                           "output_tokens": {"dist": "uniform", "low": 1, "high": 30},
                           "priority": {"dist": "choice", "values": [0, 1, 2],
                                        "weights": [1, 1, 1]}})
    rec, sched, bm = _run_direct(cfg)
    assert rec.num_requests == 60 and sorted(rec.request_ids) == list(range(60))
    assert set(rec.statuses) <= {"finished", "rejected"}
    cols = rec.request_columns()
    wanted = _wanted_outputs(cfg)
    for rid, status, out in zip(cols["request_id"], cols["status"], cols["output_tokens"]):
        assert (status == "rejected") == (rid in rec.reject_reasons)
        assert out == (wanted[rid] if status == "finished" else 0)
    assert bm.num_used == 0 and not sched.has_unfinished()
    bm.check_invariants()
    if capacity == "guaranteed_no_evict":  # every admitted sequence's blocks were promised
        assert sched.num_preemptions == 0


def _wanted_outputs(cfg):
    w = build_workload(cfg.workload, np.random.default_rng(cfg.seed))
    return w.output_tokens.tolist()


def test_the_same_seed_gives_byte_identical_records():
    cfg = config(engine={"num_kv_blocks": 40}, workload={"num_requests": 300},
                 scheduler={"chunked_prefill": True})
    a, b = run_config(cfg), run_config(cfg)
    assert _bytes(a) == _bytes(b)
    assert _bytes(a) != _bytes(run_config(config(seed=1, engine={"num_kv_blocks": 40},
                                                 workload={"num_requests": 300},
                                                 scheduler={"chunked_prefill": True})))


def _bytes(rec):
    """Every record as bytes (float repr round-trips exactly)."""
    parts = []
    for columns in (rec.request_columns(), rec.step_columns()):
        for name, values in columns.items():
            values = values if isinstance(values, int) else list(values)
            parts.append(f"{name}={values!r}".encode())
    return b"|".join(parts + [rec.itl_gaps.tobytes(), rec.itl_counts.tobytes()])


def test_kv_pressure_preempts_and_still_finishes_everything():
    cfg = config(engine={"num_kv_blocks": 24}, workload={"num_requests": 200,
                                                          "arrival": {"process": "poisson",
                                                                      "rate": 50.0}})
    rec = run_config(cfg)
    cols = rec.request_columns()
    assert sum(cols["preemptions"]) > 0
    assert all(s == "finished" for s in cols["status"])


def test_requests_that_can_never_fit_are_rejected_with_a_reason():
    cfg = config(model=dict(BASE["model"], max_seq_len=100),
                 workload={"num_requests": 50, "prompt_tokens": {"dist": "uniform",
                                                                 "low": 50, "high": 90}})
    rec = run_config(cfg)
    cols = rec.request_columns()
    rejected = [r for r, s in zip(cols["request_id"], cols["status"]) if s == "rejected"]
    assert rejected and all("exceeds max_seq_len (100)" in rec.reject_reasons[r] for r in rejected)
    assert all(math.isnan(cols["first_scheduled_s"][cols["request_id"].index(r)]) for r in rejected)


def test_every_request_runs_in_step_order_with_contiguous_steps():
    rec = run_config(config(workload={"num_requests": 200}))
    steps = rec.step_columns()
    assert list(steps["step"]) == list(range(rec.num_steps))
    assert np.all(np.diff(steps["start_s"]) > 0)
    assert np.all(np.asarray(steps["end_s"][:-1]) <= np.asarray(steps["start_s"][1:]))
