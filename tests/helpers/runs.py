"""Whole runs for the tests: every value a run recorded, comparable (NaN made equal), the
servers the fast-forward tests run, as scenario TOML that `config_of` adds a workload to, and a
small scheduler (`scheduler`) driven to its end step by step (`drain`)."""

from __future__ import annotations

import math

import scenarios
from engine.block_manager import BlockManager
from engine.scheduler import Scheduler, SchedulerConfig

WORKLOAD = """
[workload]
num_requests = {n}
arrival = {{ process = "{process}", rate = {rate} }}
prompt_tokens = {{ dist = "lognormal", median = 40, sigma = 0.8, max = 400 }}
output_tokens = {{ dist = "uniform", low = 1, high = 90 }}
priority = {{ dist = "choice", values = [0, 1, 2] }}
"""
LINEAR = '[cost]\nmodel = "linear"\n'

CASES = {
    "continuous, preemptions": "[engine]\nnum_kv_blocks = 32\n" + LINEAR,
    "chunked prefill": ("[engine]\nmax_num_batched_tokens = 64\nnum_kv_blocks = 60\n"
                        "[scheduler]\nchunked_prefill = true\n" + LINEAR),
    "static with a timeout": ("[engine]\nnum_kv_blocks = 60\n[scheduler]\npolicy = \"static\"\n"
                              "max_batch_size = 6\nbatch_timeout_s = 0.05\n" + LINEAR),
    "priority queue, preemptions": ("[engine]\nnum_kv_blocks = 32\n[scheduler]\n"
                                    "queue = \"priority\"\n" + LINEAR),
    "guaranteed no evict": ("[engine]\nnum_kv_blocks = 32\n[scheduler]\n"
                            "capacity_scheduler_policy = \"guaranteed_no_evict\"\n" + LINEAR),
    "prefills alone, chunked, preemptions": (
        "[engine]\nmax_num_batched_tokens = 64\nnum_kv_blocks = 32\n[scheduler]\n"
        "chunked_prefill = true\nenable_mixed_chunk = false\n" + LINEAR),
    "SGLang's receive interval, prefills alone, preemptions": (
        "[engine]\nnum_kv_blocks = 32\n[scheduler]\nenable_mixed_chunk = false\n"
        "scheduler_recv_interval = 4\n" + LINEAR),
    "fitted profile": "[engine]\nnum_kv_blocks = 80\n",
    "round costs, constant arrivals": ("[cost]\nmodel = \"linear\"\nstep_overhead_s = 0.25\n"
                                       "prefill_token_s = 0.0\ndecode_seq_s = 0.0\n"
                                       "context_token_s = 0.0\n"),
}


def config_of(tmp_path, text: str, n: int = 60, process: str = "poisson", rate: float = 6.0):
    path = tmp_path / "case.toml"
    path.write_text(text + WORKLOAD.format(n=n, process=process, rate=rate))
    return scenarios.load(path).base


def records(recorder) -> dict:
    """Every recorded value, with NaN made comparable."""
    out = {f"step.{k}": list(v) for k, v in recorder.step_columns().items()
           if k != "kv_blocks_total"}
    for name, values in recorder.request_columns().items():
        out[f"request.{name}"] = ["nan" if isinstance(x, float) and math.isnan(x) else x
                                  for x in values]
    out["itl"] = list(zip(recorder.itl_gaps, recorder.itl_counts))
    return out


def own_keys_both_ways(run, monkeypatch) -> tuple[dict, dict]:
    """The records of `run()` with requests' own prefix keys registered at preemption (a range,
    as simulations run) and as their blocks fill (the same keys as a list), less the count of
    blocks cached, which only the second keeps of every block."""
    from sim.workloads import block_keys

    lazy = records(run())
    own = block_keys.own_block_keys
    monkeypatch.setattr("sim.build.own_block_keys", lambda *args: list(own(*args)))
    eager = records(run())
    monkeypatch.undo()
    for rec in (lazy, eager):
        del rec["step.kv_blocks_cached"]
    return lazy, eager


def scheduler(policy: str, blocks: int = 10, block_size: int = 4, **config) -> Scheduler:
    """An engine scheduler of 8 slots under capacity policy `policy`, over `blocks` KV blocks."""
    return Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=policy, **config),
                     BlockManager(blocks, block_size))


def drain(scheduler, limit: int = 1000) -> list[list[str]]:
    """Run `scheduler` until every sequence is done; the request ids prefilled in each step."""
    steps = []
    for _ in range(limit):
        if not scheduler.has_unfinished():
            return steps
        plan = scheduler.schedule()
        steps.append([seq.request_id for seq, _ in plan.prefills])
        scheduler.postprocess(plan)
    raise AssertionError("the run did not end")


def drive(scheduler, arrivals: dict, row, limit: int = 300) -> list:
    """Run `scheduler`, adding `arrivals[k]` before step k, until every sequence is done and
    every arrival added; each step as `row(plan)`."""
    out = []
    for k in range(limit):
        if k in arrivals:
            assert scheduler.add(arrivals[k])
        if not scheduler.has_unfinished() and k > max(arrivals):
            return out
        plan = scheduler.schedule()
        out.append(row(plan))
        scheduler.postprocess(plan)
    raise AssertionError("the run did not end")


def preemptions(recorder) -> int:
    """The preemptions a run recorded."""
    return sum(recorder.step_columns()["preemptions"])
