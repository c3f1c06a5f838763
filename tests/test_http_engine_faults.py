"""Failures injected inside a real server's engine (`sim/http`): one request's sampling or
detokenizing, a whole step, the engine thread itself, and clients that go away mid-stream or
while queued. Each fails the requests it touches alone; after it the server is healthy again
(`assert_recovered`: /health 200, a normal request completes, no KV block leaked) unless the
test stops its engine on purpose.
"""

from __future__ import annotations

import asyncio

import pytest

from engine import model_runner
from helpers.http import CHAT, COMPLETE, assert_recovered, completion_body, fail_next_step, post, \
    served, streamed, until
from sim.http.text import Detokenizer


MARK = 0.123  # a top_p that makes the injected sampling failure pick this request


@pytest.fixture
def failing_sampling(monkeypatch):
    """Sampling raises for requests whose top_p is MARK, inside the engine's step."""
    sample = model_runner.sample_token

    def sample_or_fail(logits, params, rng):
        if params.top_p == MARK:
            raise FloatingPointError("injected sampling failure")
        return sample(logits, params, rng)
    monkeypatch.setattr(model_runner, "sample_token", sample_or_fail)


def test_a_request_whose_sampling_fails_in_the_engine_fails_alone(failing_sampling):
    normal = completion_body(max_tokens=30, stream_options={"include_usage": True})

    async def test(client, url, engine):
        answers = await asyncio.gather(
            streamed(client, f"{url}{COMPLETE}", normal),
            streamed(client, f"{url}{COMPLETE}", completion_body(top_p=MARK)),
            post(client, f"{url}{COMPLETE}", completion_body(top_p=MARK)),
            streamed(client, f"{url}{CHAT}", {"messages": [{"role": "user", "content": "hi"}],
                                              "top_p": MARK}),
            streamed(client, f"{url}{COMPLETE}", normal))
        await assert_recovered(client, url, engine)
        return answers
    ok1, failed_stream, failed_whole, failed_chat, ok2 = served(test)
    for status, events in (ok1, ok2):
        assert status == 200 and events[-1] == "[DONE]"
        assert events[-2]["usage"]["completion_tokens"] == 30
    for status, events in (failed_stream, failed_chat):
        assert status == 200 and events[-1] == "[DONE]"
        error = events[-2]["error"]
        assert error["type"] == "server_error" and "injected sampling failure" in error["message"]
    status, error = failed_whole
    assert status == 500 and error["error"]["message"] == (
        "the engine failed on this request: FloatingPointError: injected sampling failure")


def test_a_request_whose_sampling_fails_alone_in_its_step_is_answered(failing_sampling):
    async def test(client, url, engine):
        failed = await post(client, f"{url}{COMPLETE}", completion_body(top_p=MARK))
        await assert_recovered(client, url, engine)
        return failed
    status, error = served(test)
    assert status == 500 and "injected sampling failure" in error["error"]["message"]


def test_a_request_whose_detokenizing_fails_fails_alone(monkeypatch):
    push = Detokenizer.push

    def push_or_fail(self, token_id):
        if self.stop == ("zz",):  # the marked request
            raise UnicodeError("injected detokenizer failure")
        return push(self, token_id)
    monkeypatch.setattr(Detokenizer, "push", push_or_fail)

    async def test(client, url, engine):
        answers = await asyncio.gather(
            post(client, f"{url}{COMPLETE}", completion_body(stop="zz")),
            streamed(client, f"{url}{COMPLETE}", completion_body(stop="zz")),
            post(client, f"{url}{COMPLETE}", completion_body(max_tokens=20)))
        await assert_recovered(client, url, engine)
        return answers
    (status, error), (stream_status, events), (ok, answer) = served(test)
    assert status == 500 and "UnicodeError: injected detokenizer failure" in \
        error["error"]["message"]
    assert stream_status == 200 and events[-1] == "[DONE]" and "error" in events[-2]
    assert ok == 200 and answer["usage"]["completion_tokens"] == 20


def test_a_step_that_raises_fails_its_requests_and_the_queued_ones_are_served(monkeypatch):
    long = completion_body(max_tokens=2000)

    async def test(client, url, engine):
        bm = engine.scheduler.block_manager
        running = [asyncio.create_task(streamed(client, f"{url}{COMPLETE}", long))
                   for _ in range(2)]
        await until(lambda: len(engine.scheduler.running) == 2)
        queued = asyncio.create_task(post(client, f"{url}{COMPLETE}", completion_body(max_tokens=5)))
        await until(lambda: len(engine.scheduler.waiting) == 1)
        fail_next_step(monkeypatch, engine, MemoryError("injected step failure"))
        answers = await asyncio.gather(*running, queued)
        await assert_recovered(client, url, engine)
        return answers, bm.num_free == bm.num_blocks
    (first, second, queued), all_free = served(test, "engine.max_num_seqs=2",
                                               "model.max_seq_len=4096",
                                               "engine.num_kv_blocks=600")
    for status, events in (first, second):
        assert status == 200 and events[-1] == "[DONE]"
        assert events[-2]["error"]["message"] == \
            "the engine failed on a step of this request: MemoryError: injected step failure"
    assert queued[0] == 200 and queued[1]["usage"]["completion_tokens"] == 5
    assert all_free


def test_a_dead_engine_thread_answers_waiting_and_new_requests_at_once_with_503(monkeypatch):
    async def test(client, url, engine):
        running = asyncio.create_task(streamed(client, f"{url}{COMPLETE}",
                                               completion_body(max_tokens=3000)))
        await until(lambda: len(engine.scheduler.running) == 1)
        waiting = asyncio.create_task(post(client, f"{url}{COMPLETE}", completion_body()))
        await until(lambda: len(engine.scheduler.waiting) == 1)

        def corrupting_step(now_s):  # leaves a KV block held by nobody: unsafe to go on
            engine.scheduler.block_manager.allocate_block(10**9)
            raise RuntimeError("injected corruption")
        monkeypatch.setattr(engine, "step", corrupting_step)
        (stream_status, events), (status, error) = await asyncio.gather(running, waiting)
        new = await post(client, f"{url}{COMPLETE}", completion_body())
        async with client.get(f"{url}/health") as response:
            health = response.status, await response.json()
        async with client.get(f"{url}/metrics") as response:
            metrics = response.status
        return stream_status, events, status, error, new, health, metrics
    stream_status, events, status, error, new, health, metrics = served(
        test, "engine.max_num_seqs=1", "model.max_seq_len=4096", "engine.num_kv_blocks=600")
    assert stream_status == 200 and events[-1] == "[DONE]"
    assert "injected corruption" in events[-2]["error"]["message"]  # it was in the step
    reason = "the engine stopped: RuntimeError: after a failed step the scheduler still holds " \
             "1 KV blocks"
    assert status == 503 and error["error"] == {"message": reason, "type": "server_error",
                                                "param": None, "code": "engine_stopped"}
    assert new == (503, error)
    assert health == (503, error)
    assert metrics == 200


def test_clients_that_go_away_mid_stream_or_while_queued_leak_nothing():
    async def test(client, url, engine):
        response = await client.post(f"{url}{COMPLETE}",
                                     json=completion_body(max_tokens=3000, stream=True))
        for _ in range(3):
            await response.content.readline()
        queued = asyncio.create_task(post(client, f"{url}{COMPLETE}", completion_body(max_tokens=5)))
        await until(lambda: len(engine.scheduler.waiting) == 1)
        queued.cancel()  # the queued client goes away
        response.close()  # and the streaming one, mid-stream
        await until(lambda: not engine.scheduler.has_unfinished())
        await assert_recovered(client, url, engine)
    served(test, "engine.max_num_seqs=1", "model.max_seq_len=4096", "engine.num_kv_blocks=600")
