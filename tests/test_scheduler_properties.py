"""Property test: random workloads through small KV caches under every policy.

Whatever the workload, every request ends finished or rejected (never lost, never hung), no
block is ever held twice, the limits of the policy hold at every step, every block is free at
the end, preemption never loses or duplicates a token, and the recorder's pooled inter-token
gaps count exactly one gap per output token after the first.
"""

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.block_manager import BlockManager
from engine.llm_engine import LLMEngine
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence, SequenceStatus

requests_st = st.lists(
    st.tuples(st.integers(1, 20), st.integers(1, 16), st.integers(0, 2), st.integers(0, 8)),
    min_size=1, max_size=14)

config_st = st.fixed_dictionaries({
    "policy": st.sampled_from(["static", "continuous"]),
    "queue": st.sampled_from(["fcfs", "priority"]),
    "chunked_prefill": st.booleans(),
    "max_num_seqs": st.integers(1, 6),
    "extra_budget": st.integers(0, 40),
    "max_batch_size": st.integers(1, 5),
    "block_size": st.sampled_from([1, 2, 4, 8]),
    "cache_tokens": st.integers(8, 64),
})


def check_plan(plan, config, bm):
    bm.check_invariants()
    if config.policy == "continuous":
        assert plan.num_prefill_tokens + len(plan.decodes) <= config.max_num_batched_tokens
        assert plan.num_running <= config.max_num_seqs
    else:
        assert plan.num_running <= config.max_batch_size
        assert not (plan.prefills and plan.decodes)  # a static batch never mixes phases
    scheduled = [s.seq_id for s, _ in plan.prefills] + [s.seq_id for s in plan.decodes]
    assert len(scheduled) == len(set(scheduled))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=requests_st, knobs=config_st)
def test_random_workloads_finish_or_are_rejected_and_free_every_block(requests, knobs, fake_executor):
    config = SchedulerConfig(
        policy=knobs["policy"], queue=knobs["queue"],
        chunked_prefill=knobs["chunked_prefill"] and knobs["policy"] == "continuous",
        max_num_seqs=knobs["max_num_seqs"], max_batch_size=knobs["max_batch_size"],
        max_num_batched_tokens=knobs["max_num_seqs"] + knobs["extra_budget"], max_seq_len=64)
    bm = BlockManager(max(2, knobs["cache_tokens"] // knobs["block_size"]), knobs["block_size"])
    scheduler = Scheduler(config, bm)
    executor = fake_executor(bm, step_s=1.0)
    recorder = RunRecorder(bm.num_blocks)
    engine = LLMEngine(scheduler, executor, recorder, timing="executor")
    arrivals = sorted(
        (Sequence(f"r{i}", p, out, priority=prio, arrival_s=float(t)) for i, (p, out, prio, t)
         in enumerate(requests)), key=lambda s: s.arrival_s)
    now, next_arrival, steps = 0.0, 0, 0
    while next_arrival < len(arrivals) or engine.has_unfinished():
        while next_arrival < len(arrivals) and arrivals[next_arrival].arrival_s <= now:
            engine.add_request(arrivals[next_arrival])
            next_arrival += 1
        out = engine.step(now)
        check_plan(out.plan, config, bm)
        if out.ran:
            now, steps = out.end_s, steps + 1
        else:
            assert not engine.has_unfinished(), "requests wait but nothing runs"
            if next_arrival == len(arrivals):
                break
            now = arrivals[next_arrival].arrival_s
        assert steps < 5_000, "the run does not finish"
    assert bm.num_used == 0 and not bm.block_tables
    assert recorder.num_requests == len(arrivals)
    finished = [s for s in arrivals if s.status is SequenceStatus.FINISHED]
    assert all(s.status in (SequenceStatus.FINISHED, SequenceStatus.REJECTED) for s in arrivals)
    for s in finished:
        assert s.num_output_tokens == s.max_new_tokens
        assert s.output_token_ids == [(7 * s.seq_id + 3 * k + 1) % executor.vocab_size
                                      for k in range(s.max_new_tokens)]
    assert sum(recorder.itl_counts) == sum(s.max_new_tokens - 1 for s in finished)
    assert sum(recorder.step_columns()["preemptions"]) == scheduler.num_preemptions
    event(f"{config.policy}, preempted: {scheduler.num_preemptions > 0}")
