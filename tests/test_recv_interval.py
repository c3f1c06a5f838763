"""SGLang's receive interval (`scheduler.scheduler_recv_interval`, engine/recv_interval.py): a
new request waits outside the queue until a step reads it, every that many steps of decodes,
the step after one with a prefill, or at once when nothing runs. Fast-forwarded runs under it
are the step-by-step run's (tests/test_decode_runs.py: a case of tests/helpers/runs.py and the
random servers)."""

from __future__ import annotations

import asyncio

import aiohttp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scenarios
from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.recv_interval import OTHER_STEP, RecvInterval
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import GREEDY, Sequence, SequenceStatus
from engine.step_plan import StepPlan
from helpers.http import PROMPT, assert_recovered, fail_next_step, metric, post, sse_events, \
    tiny_config, until
from helpers.model_scenario import scenario
from helpers.runs import drive, records
from reports.section_text import scheduler_text
from scenarios import ScenarioError
from sim.http import engine_for, start_server
from sim.runner import run_config


def scheduler(interval: int, mixed: bool = False, blocks: int = 64) -> Scheduler:
    return Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64,
                                     enable_mixed_chunk=mixed,
                                     scheduler_recv_interval=interval), BlockManager(blocks, 4))


def steps(s: Scheduler, arrivals: dict[int, Sequence], limit: int = 300) -> list[tuple]:
    """Run `s`, adding `arrivals[k]` before step k; each step as (prefilled ids, decoding ids,
    num_waiting)."""
    return drive(s, arrivals, lambda plan: (
        tuple(seq.request_id for seq, _ in plan.prefills),
        tuple(seq.request_id for seq in plan.decodes), plan.num_waiting), limit)


def first_prefill(run: list[tuple], request: str) -> int:
    return next(k for k, (prefills, _, _) in enumerate(run) if request in prefills)


def test_a_request_waits_for_the_step_that_reads_it_while_others_decode():
    # a prefills at step 0; steps 1.. only decode; with an interval of 5 the reads come at
    # step 1 (after the prefill) and then every 5 decode-only steps: 6, 11, 16...
    for arrives, read in ((2, 6), (6, 6), (7, 11), (12, 16)):
        run = steps(scheduler(5), {0: Sequence("a", 8, 40), arrives: Sequence("b", 8, 4)})
        assert first_prefill(run, "b") == read, arrives
        assert all(waiting == 1 for _, _, waiting in run[arrives:read])  # b counts as waiting
    # every step reads without the interval
    run = steps(scheduler(1), {0: Sequence("a", 8, 40), 7: Sequence("b", 8, 4)})
    assert first_prefill(run, "b") == 7


def test_the_step_after_a_prefill_reads_and_an_idle_scheduler_reads_at_once():
    run = steps(scheduler(5), {0: Sequence("a", 8, 40), 3: Sequence("b", 8, 40),
                               7: Sequence("c", 8, 4)})
    assert first_prefill(run, "b") == 6
    assert first_prefill(run, "c") == 7  # the step after b's prefill reads
    run = steps(scheduler(50), {0: Sequence("a", 8, 3), 10: Sequence("b", 8, 3)})
    assert first_prefill(run, "b") == 10  # nothing runs: read at once


def test_a_mixed_step_counts_as_a_prefill():
    run = steps(scheduler(5, mixed=True), {0: Sequence("a", 8, 40), 3: Sequence("b", 8, 40),
                                           7: Sequence("c", 8, 4)})
    assert run[6][:2] == (("b",), ("a",))  # b's prefill beside a's decode
    assert first_prefill(run, "c") == 7


def test_a_step_of_decodes_that_preempts_counts_one():
    """SGLang retracts requests from its decode batch, which stays a decode batch: the count
    goes on by one, and a request that came is not read at the next step."""
    s = scheduler(10, blocks=8)
    s.add(Sequence("a", 8, 20))
    s.add(Sequence("b", 8, 20))
    for _ in range(40):
        plan = s.schedule()
        s.postprocess(plan)
        if plan.preempted:
            break
    assert [seq.request_id for seq in plan.preempted] == ["b"] and plan.decodes
    since = s.recv.since
    assert since < 10
    s.add(Sequence("c", 4, 2))
    nxt = s.schedule()
    assert not nxt.prefills and s.recv.since == since + 1 and s.num_queued() == 2
    assert [seq.request_id for seq in s.recv.inbox] == ["c"]


def test_sglangs_reserved_share_starts_over_when_only_unread_requests_are_left():
    """The last running request finishes while another waits unread: SGLang idles a turn, which
    resets its new-token ratio, before it reads it."""
    s = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=2048,
                                  enable_mixed_chunk=False, max_seq_len=4096,
                                  capacity_scheduler_policy="new_token_ratio",
                                  scheduler_recv_interval=10), BlockManager(400, 4))
    ratio = s.new_token_ratio
    start = ratio.current
    arrivals = {0: Sequence("a", 8, 700), 697: Sequence("b", 8, 1000, ignore_eos=False)}
    at = {}
    for k in range(800):
        if k in arrivals:
            assert s.add(arrivals[k])
        plan = s.schedule()
        for seq, _ in plan.prefills:
            at.setdefault(seq.request_id, (k, ratio.current))
        s.postprocess(plan)
        if "b" in at:
            break
    assert at["b"][1] == start  # reset, not the 0.098 it had decayed to
    assert ratio.current == start


def test_requests_read_together_are_admitted_in_arrival_order():
    arrivals = {0: Sequence("a", 8, 40), 2: Sequence("b", 8, 4), 3: Sequence("c", 8, 4)}
    run = steps(scheduler(5), arrivals)
    assert run[6][0] == ("b", "c")


def test_the_real_engine_reads_late_and_computes_the_same_tokens(tiny_config, tiny_params):
    """The engine's own loop: requests that arrive while others decode start later under an
    interval, with the same greedy tokens, every block back."""
    rng = np.random.default_rng(5)
    lengths = [(7, 12), (13, 9), (5, 6), (21, 4), (9, 10)]
    prompts = [rng.integers(0, tiny_config.vocab_size, size=p).tolist() for p, _ in lengths]
    outputs, starts = {}, {}
    for interval in (1, 4):
        bm = BlockManager(40, 4)
        s = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32,
                                      enable_mixed_chunk=False, max_seq_len=256,
                                      scheduler_recv_interval=interval), bm)
        engine = LLMEngine(s, NumpyExecutor(tiny_params, bm, rng=np.random.default_rng(0)))
        seqs = [Sequence(f"r{i}", len(p), n, prompt_token_ids=p, sampling=GREEDY)
                for i, (p, (_, n)) in enumerate(zip(prompts, lengths))]
        for k in range(500):
            if k < len(seqs) * 2 and k % 2 == 0:  # one arrives every other step
                assert engine.add_request(seqs[k // 2])
            if k >= len(seqs) * 2 and not engine.has_unfinished():
                break
            engine.step()
        assert not engine.has_unfinished() and bm.num_used == 0
        outputs[interval] = [seq.output_token_ids for seq in seqs]
        starts[interval] = [seq.first_scheduled_step for seq in seqs]
    assert outputs[1] == outputs[4]
    assert all(late >= early for late, early in zip(starts[4], starts[1]))
    assert starts[4] != starts[1]


def test_an_http_servers_failed_step_leaves_unread_requests_to_be_served(monkeypatch):
    """The real server (sim.http) with an interval no step reaches while a request runs: one
    that comes meanwhile is not read, counts as waiting, is untouched by a failed step that
    fails the running one, and is served once nothing runs."""
    complete = "/v1/completions"
    long = {"prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True, "stream": True}

    async def streamed(client, url):
        async with client.post(url, json=long) as response:
            return response.status, await sse_events(response)

    async def test(client, url, engine):
        scheduler = engine.scheduler
        running = asyncio.create_task(streamed(client, f"{url}{complete}"))
        await until(lambda: len(scheduler.running) == 1)  # an idle server reads it at once
        queued = asyncio.create_task(post(client, f"{url}{complete}", {
            "prompt": PROMPT, "max_tokens": 5, "ignore_eos": True}))
        await until(lambda: len(scheduler.recv.inbox) == 1)
        assert scheduler.num_queued() == 1 and not scheduler.waiting
        for _ in range(200):  # the gauge is published after each step: the next one's
            async with client.get(f"{url}/metrics") as response:
                waiting = metric(await response.text(), "vllm:num_requests_waiting")
            if waiting == 1:
                break
        fail_next_step(monkeypatch, engine, MemoryError("injected step failure"))
        answers = await asyncio.gather(running, queued)
        await assert_recovered(client, url, engine)
        return waiting, answers
    config = tiny_config("engine.max_num_seqs=2", "model.max_seq_len=4096",
                         "engine.num_kv_blocks=600").updated(
        {"scheduler.scheduler_recv_interval": 1_000_000})

    async def main():
        engine, model = engine_for(config)
        server = await start_server(engine, model)
        try:
            async with aiohttp.ClientSession() as client:
                return await test(client, server.url, engine)
        finally:
            await server.close()
    waiting, ((status, events), queued) = asyncio.run(main())
    assert waiting == 1
    assert status == 200 and events[-1] == "[DONE]"
    assert "injected step failure" in events[-2]["error"]["message"]
    assert queued[0] == 200 and queued[1]["usage"]["completion_tokens"] == 5


def test_an_unread_request_can_be_aborted_and_is_unfinished_until_read():
    s = scheduler(5)
    a, b = Sequence("a", 8, 40), Sequence("b", 8, 4)
    s.add(a)
    s.postprocess(s.schedule())
    s.postprocess(s.schedule())  # a decodes: the count is 1
    s.add(b)
    assert s.queued(b) and s.num_queued() == 1
    engine = LLMEngine(s, executor=None)
    assert engine.unfinished_sequences() == [a, b]
    s.abort(b)
    assert b.status is SequenceStatus.ABORTED and not s.queued(b) and s.num_queued() == 0
    s.abort(a)
    assert not s.has_unfinished() and s.block_manager.num_used == 0


def test_an_unread_request_keeps_the_scheduler_unfinished():
    s = scheduler(5)
    s.add(Sequence("a", 8, 40))
    s.postprocess(s.schedule())
    s.postprocess(s.schedule())
    s.abort(s.running[0])
    s.add(Sequence("b", 8, 4))
    assert s.has_unfinished() and not s.waiting  # b unread, and nothing runs: the next reads
    plan = s.schedule()
    assert [seq.request_id for seq, _ in plan.prefills] == ["b"]


@settings(max_examples=200, deadline=None)
@given(interval=st.integers(1, 40), since=st.integers(0, 60), steps_=st.integers(1, 200))
def test_counting_a_run_of_decode_steps_is_counting_them_one_by_one(interval, since, steps_):
    """`after_decodes` (the fast path's) is, step by step, a read when due (of nothing) and
    one more decode-only step planned; `steps_unread` is how many go by before the first read
    that would find a request."""
    one = RecvInterval(interval, since=since + 1)  # as after a planned step (a count >= 1)
    bulk = RecvInterval(interval, since=since + 1)
    decode = StepPlan(decodes=[object()])
    unread = None
    for k in range(1, steps_ + 1):
        if one.due(running=True):
            unread = k - 1 if unread is None else unread
            one.read()
        one.planned(decode)
    bulk.after_decodes(steps_)
    assert bulk.since == one.since
    if unread is not None:
        assert RecvInterval(interval, since=since + 1).steps_unread() == unread


def test_above_a_thousand_a_prefill_step_counts_a_thousand():
    recv = RecvInterval(1500)
    recv.planned(StepPlan(prefills=[(object(), 8)]))
    assert recv.since == OTHER_STEP and not recv.due(running=True)
    for _ in range(500):
        recv.planned(StepPlan(decodes=[object()]))
    assert recv.due(running=True)


def test_the_scheduler_keeps_no_count_without_an_interval():
    assert scheduler(1).recv is None and isinstance(scheduler(2).recv, RecvInterval)


@pytest.mark.parametrize("changes, message", [
    ({"scheduler.scheduler_recv_interval": 0}, "scheduler.scheduler_recv_interval"),
    ({"scheduler.scheduler_recv_interval": True}, "scheduler.scheduler_recv_interval"),
    ({"scheduler.scheduler_recv_interval": 3, "scheduler.policy": "static"},
     "receive interval is continuous batching's"),
])
def test_a_bad_interval_is_refused_in_one_line(tmp_path, changes, message):
    path = tmp_path / "s.toml"
    path.write_text('[workload]\nnum_requests = 4\narrival = { process = "burst" }\n'
                    'prompt_tokens = { dist = "fixed", value = 8 }\n'
                    'output_tokens = { dist = "fixed", value = 8 }\n')
    with pytest.raises(ScenarioError) as err:
        scenarios.load(path, overrides=list(changes.items()))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_report_says_the_interval():
    config = SchedulerConfig(scheduler_recv_interval=10)
    text = scheduler_text(config)
    assert "new requests read every 10 steps of decodes" in text
    assert "read every" not in scheduler_text(SchedulerConfig())


def test_a_server_with_async_scheduling_fast_forwards_exactly_and_waits_longer(tmp_path):
    """On the hardware cost model (async scheduling: a request that arrives during a step joins
    the step after the next planned, and then waits to be read), fast-forwarded runs are the
    step-by-step run's, and the interval delays first tokens by whole decode steps."""
    ttft = {}
    for interval in (1, 10):
        config = scenarios.load(scenario(tmp_path, requests=40)).base.updated({
            "scheduler.scheduler_recv_interval": interval,
            "scheduler.enable_mixed_chunk": False,
            "workload.max_concurrency": 4, "workload.arrival": {"process": "burst"}})
        fast = run_config(config)
        assert records(fast) == records(run_config(config, fast_forward=False))
        columns = fast.request_columns()
        ttft[interval] = float(np.mean(np.asarray(columns["first_token_s"])
                                       - np.asarray(columns["arrival_s"])))
        assert fast.statuses.count("finished") == 40
    decode_s = 1e-3  # at least a millisecond a step on any GPU here
    assert ttft[10] > ttft[1] + 2 * decode_s
