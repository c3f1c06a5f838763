"""Hostile requests against a real server (`sim/http`): bodies that are not JSON objects or
nest too deep, sampling values at and past their edges (tiny temperatures, NaN and Infinity as
Python's json reads them, huge or wrong-typed numbers), content parts good and bad, failures
injected inside the engine (one request's sampling, a whole step, the engine thread itself) and
clients that go away. After each abuse the server is healthy again (`assert_recovered`: /health
200, a normal request completes, no KV block leaked) unless the test stops its engine on purpose.
"""

from __future__ import annotations

import asyncio

import pytest

from engine import model_runner
from helpers.http import PROMPT, assert_recovered, fail_next_step, post, post_raw, served, \
    sse_events, until
from sim.http.text import Detokenizer

COMPLETE = "/v1/completions"
CHAT = "/v1/chat/completions"


def body(**fields) -> dict:
    return {"prompt": PROMPT, "max_tokens": 6, "ignore_eos": True, **fields}


async def streamed(client, url: str, payload: dict) -> tuple[int, list]:
    async with client.post(url, json={**payload, "stream": True}) as response:
        return response.status, await sse_events(response)


# --- bodies --------------------------------------------------------------------------------------


def test_over_deep_or_malformed_or_non_object_json_is_a_json_400():
    deep = b"[" * 100_000 + b"]" * 100_000
    bodies = [deep, b'{"prompt": ' + deep + b"}", b"{not json", b"", b"\xff\xfe{}",
              b'{"max_tokens": ' + b"9" * 5000 + b"}",  # past Python's digit limit
              b"[]", b'"a prompt"', b"42", b"null", b"true"]

    async def test(client, url, engine):
        answers = [await post_raw(client, f"{url}{path}", data)
                   for data in bodies for path in (COMPLETE, CHAT)]
        await assert_recovered(client, url, engine)
        return answers
    answers = served(test)
    assert all(status == 400 for status, _ in answers), answers
    messages = [error["error"]["message"] for _, error in answers]
    assert messages[0] == messages[2] == "the request body is not valid JSON: nested too deeply"
    assert all("not valid JSON" in m for m in messages[:12])
    assert messages[12:] == [f"the request body must be a JSON object, got {kind}"
                             for kind in ("list", "str", "int", "null", "bool") for _ in "ab"]


def test_unknown_paths_wrong_methods_and_oversized_bodies_get_json_errors():
    async def test(client, url, engine):
        async with client.post(f"{url}/v1/nothing", json={}) as r:
            missing = r.status, await r.json()
        async with client.get(f"{url}{COMPLETE}") as r:
            method = r.status, await r.json(), r.headers.get("Allow")
        too_big = await post_raw(client, f"{url}{COMPLETE}", b'{"prompt": "' + b"a" * 2**21
                                 + b'"}')
        await assert_recovered(client, url, engine)
        return missing, method, too_big
    missing, method, too_big = served(test)
    assert missing[0] == 404 and missing[1]["error"]["message"] == "Not Found: POST /v1/nothing"
    assert method[0] == 405 and method[2] == "POST"
    assert too_big[0] == 413 and "Maximum request body size" in too_big[1]["error"]["message"]


def test_only_aiohttp_records_of_unparsable_requests_lose_their_traceback():
    import logging

    from aiohttp.http_exceptions import LineTooLong
    from aiohttp.web_protocol import RequestPayloadError

    from sim.http.errors import OneLine

    def record(exc):
        return logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "Error handling "
                                 "request", (), (type(exc), exc, None))
    parse, fault = record(LineTooLong("x" * 9000, "8190")), record(ZeroDivisionError("boom"))
    drained = record(RequestPayloadError("Can not decode content-encoding: gzip"))
    assert OneLine().filter(parse) and OneLine().filter(fault) and OneLine().filter(drained)
    assert parse.exc_info is None and parse.getMessage().startswith(
        "servesim serve: Error handling request: LineTooLong")
    # a body that cannot be decoded, read again as aiohttp drains it after the 400
    assert drained.exc_info is None and "RequestPayloadError" in drained.getMessage()
    assert fault.exc_info[0] is ZeroDivisionError  # a real fault keeps its traceback


def test_a_body_that_cannot_be_decoded_is_a_json_400_and_one_log_line(capsys):
    # a body claiming an encoding it does not have: the request fails alone, as a 400
    async def test(client, url, engine):
        async with client.post(f"{url}{COMPLETE}", data=b'{"prompt": "hi", "max_tokens": 2}',
                               headers={"Content-Encoding": "gzip",
                                        "Content-Type": "application/json"}) as r:
            bad = r.status, await r.json()
        await assert_recovered(client, url, engine)
        return bad
    status, body = served(test)
    assert status == 400 and "the request body could not be read" in body["error"]["message"]
    assert "Traceback" not in capsys.readouterr().err


# --- sampling values -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [COMPLETE, CHAT])
def test_tiny_temperatures_are_greedy_streamed_or_not_and_huge_ones_sample(path):
    chat = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 12,
            "ignore_eos": True}
    payload = chat if path == CHAT else body(max_tokens=12)

    def text_of(answer: dict) -> str:
        choice = answer["choices"][0]
        return choice["message"]["content"] if path == CHAT else choice["text"]

    def streamed_text(events: list) -> str:
        return "".join(e["choices"][0]["delta"].get("content", "") if path == CHAT
                       else e["choices"][0]["text"] for e in events[:-1])

    async def test(client, url, engine):
        status, greedy = await post(client, f"{url}{path}", {**payload, "temperature": 0})
        assert status == 200
        for temperature in (1e-308, 5e-324, 1e-40, 1e-6):
            status, answer = await post(client, f"{url}{path}",
                                        {**payload, "temperature": temperature})
            assert status == 200 and text_of(answer) == text_of(greedy), temperature
            status, events = await streamed(client, f"{url}{path}",
                                            {**payload, "temperature": temperature})
            assert status == 200 and events[-1] == "[DONE]"
            assert streamed_text(events) == text_of(greedy), temperature
        for temperature in (1e-5, 1e308):
            status, answer = await post(client, f"{url}{path}",
                                        {**payload, "temperature": temperature, "seed": 1})
            assert status == 200 and answer["usage"]["completion_tokens"] == 12
        await assert_recovered(client, url, engine)
    served(test)


@pytest.mark.parametrize("raw, param", [
    (b'{"prompt": "x", "temperature": NaN}', "temperature"),
    (b'{"prompt": "x", "temperature": Infinity}', "temperature"),
    (b'{"prompt": "x", "temperature": -Infinity}', "temperature"),
    (b'{"prompt": "x", "temperature": 1e400}', "temperature"),
    (b'{"prompt": "x", "temperature": 1' + b"0" * 400 + b"}", "temperature"),  # past a float
    (b'{"prompt": "x", "top_p": 1' + b"0" * 400 + b"}", "top_p"),
    (b'{"prompt": "x", "top_p": NaN}', "top_p"),
    (b'{"prompt": "x", "top_p": Infinity}', "top_p"),
    (b'{"prompt": "x", "top_k": Infinity}', "top_k"),
    (b'{"prompt": "x", "max_tokens": NaN}', "max_tokens"),
    (b'{"prompt": "x", "max_tokens": Infinity}', "max_tokens"),
    (b'{"prompt": "x", "seed": NaN}', "seed"),
    (b'{"prompt": "x", "presence_penalty": NaN}', "presence_penalty"),
    (b'{"prompt": [1, NaN]}', "prompt"),
    (b'{"messages": [{"role": "user", "content": NaN}]}', "messages[0].content"),
])
def test_nan_and_infinity_as_json_numbers_are_a_400_naming_the_field(raw, param):
    path = CHAT if b"messages" in raw else COMPLETE

    async def test(client, url, engine):
        answer = await post_raw(client, f"{url}{path}", raw)
        await assert_recovered(client, url, engine)
        return answer
    status, error = served(test)
    assert status == 400 and error["error"]["param"] == param, error


BAD_VALUES = [
    ({"max_tokens": 10**30}, "max_tokens"), ({"max_tokens": 2**63}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"), ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_p": -0.1}, "top_p"),
    ({"top_p": "1"}, "top_p"),
    ({"top_k": -2}, "top_k"), ({"top_k": 1.5}, "top_k"), ({"top_k": "5"}, "top_k"),
    ({"seed": -1}, "seed"), ({"seed": 2**63}, "seed"), ({"seed": "7"}, "seed"),
    ({"seed": 1.5}, "seed"), ({"temperature": "hot"}, "temperature"),
    ({"temperature": True}, "temperature"), ({"temperature": -1e-300}, "temperature"),
    ({"n": 2}, "n"), ({"n": "1"}, "n"), ({"stop": ""}, "stop"), ({"stop": [1]}, "stop"),
    ({"stream": "yes"}, "stream"), ({"ignore_eos": 1}, "ignore_eos"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}},
     "stream_options.include_usage"),
    ({"stream": True, "stream_options": {"continuous_usage_stats": 1}},
     "stream_options.continuous_usage_stats"),
    ({"repetition_penalty": 1.2}, "repetition_penalty"), ({"min_p": 0.1}, "min_p"),
    ({"tool_choice": "required"}, "tool_choice"),
]


def test_bad_sampling_values_are_each_a_400_naming_the_field():
    async def test(client, url, engine):
        answers = [await post(client, f"{url}{COMPLETE}", body(**fields))
                   for fields, _ in BAD_VALUES]
        await assert_recovered(client, url, engine)
        return answers
    answers = served(test)
    for (fields, param), (status, error) in zip(BAD_VALUES, answers):
        assert status == 400 and error["error"]["param"] == param, (fields, error)
        assert error["error"]["message"].startswith(f"{param}: ")


def test_values_at_their_edges_are_served():
    edges = [{"top_p": 1e-300}, {"top_p": 1}, {"top_k": 1}, {"top_k": 10**30}, {"top_k": -1},
             {"seed": 0}, {"seed": 2**63 - 1}, {"n": 1}, {"n": None}, {"stop": None},
             {"max_tokens": 1}, {"temperature": 0, "top_p": 1e-9, "top_k": 1},
             {"prompt": [PROMPT]}, {"prompt": [[5, 6, 7]]}, {"prompt": ""}]

    async def test(client, url, engine):
        answers = [await post(client, f"{url}{COMPLETE}", body(**fields)) for fields in edges]
        await assert_recovered(client, url, engine)
        return answers
    for fields, (status, answer) in zip(edges, served(test)):
        assert status == 200, (fields, answer)


# --- chat content --------------------------------------------------------------------------------


def test_content_as_text_parts_is_joined_with_newlines_as_vllm_joins_them():
    parts = [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]
    chat = {"messages": [{"role": "system", "content": [{"type": "text", "text": "be brief"}]},
                         {"role": "user", "content": parts, "name": "ann"}],
            "max_completion_tokens": 3, "ignore_eos": True}

    async def test(client, url, engine):
        as_parts = await post(client, f"{url}{CHAT}", chat)
        as_text = await post(client, f"{url}{CHAT}", {**chat, "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "hello\nworld"}]})
        await assert_recovered(client, url, engine)
        return as_parts, as_text
    (status, as_parts), (_, as_text) = served(test)
    assert status == 200
    rendered = "system: be brief\nuser: hello\nworld\nassistant:"
    assert as_parts["usage"]["prompt_tokens"] == as_text["usage"]["prompt_tokens"] \
        == len(rendered) + 1
    assert as_parts["usage"]["completion_tokens"] == 3


BAD_CONTENT = [
    ([{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}],
     "messages[0].content[1].type", "'image_url' is not supported"),
    ([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}],
     "messages[0].content[0].type", "'input_audio' is not supported"),
    ([{"text": "no type"}], "messages[0].content[0].type", "None is not supported"),
    ([{"type": "text", "text": 5}], "messages[0].content[0].text", "must be a string"),
    (["just a string"], "messages[0].content[0]", "must be a content part object"),
    ([], "messages[0].content", "non-empty list of text parts"),
    (None, "messages[0].content", "must be a string or"),
    (7, "messages[0].content", "must be a string or"),
]


def test_content_parts_other_than_text_are_a_400_naming_the_part():
    async def test(client, url, engine):
        answers = [await post(client, f"{url}{CHAT}",
                              {"messages": [{"role": "user", "content": content}]})
                   for content, _, _ in BAD_CONTENT]
        others = [await post(client, f"{url}{CHAT}", {"messages": messages}) for messages in (
            [{"role": "user", "content": "x", "name": 3}],
            [{"role": "assistant", "content": "x", "tool_calls": [{"id": "1"}]}],
            [{"role": "", "content": "x"}], "hello", [])]
        await assert_recovered(client, url, engine)
        return answers, others
    answers, others = served(test)
    for (content, param, text), (status, error) in zip(BAD_CONTENT, answers):
        assert status == 400 and error["error"]["param"] == param, (content, error)
        assert text in error["error"]["message"], error
    assert [error["error"]["param"] for _, error in others] == [
        "messages[0].name", "messages[0].tool_calls", "messages[0].role", "messages", "messages"]


# --- failures inside the engine ------------------------------------------------------------------


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
    normal = body(max_tokens=30, stream_options={"include_usage": True})

    async def test(client, url, engine):
        answers = await asyncio.gather(
            streamed(client, f"{url}{COMPLETE}", normal),
            streamed(client, f"{url}{COMPLETE}", body(top_p=MARK)),
            post(client, f"{url}{COMPLETE}", body(top_p=MARK)),
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
        failed = await post(client, f"{url}{COMPLETE}", body(top_p=MARK))
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
            post(client, f"{url}{COMPLETE}", body(stop="zz")),
            streamed(client, f"{url}{COMPLETE}", body(stop="zz")),
            post(client, f"{url}{COMPLETE}", body(max_tokens=20)))
        await assert_recovered(client, url, engine)
        return answers
    (status, error), (stream_status, events), (ok, answer) = served(test)
    assert status == 500 and "UnicodeError: injected detokenizer failure" in \
        error["error"]["message"]
    assert stream_status == 200 and events[-1] == "[DONE]" and "error" in events[-2]
    assert ok == 200 and answer["usage"]["completion_tokens"] == 20


def test_a_step_that_raises_fails_its_requests_and_the_queued_ones_are_served(monkeypatch):
    long = body(max_tokens=2000)

    async def test(client, url, engine):
        bm = engine.scheduler.block_manager
        running = [asyncio.create_task(streamed(client, f"{url}{COMPLETE}", long))
                   for _ in range(2)]
        await until(lambda: len(engine.scheduler.running) == 2)
        queued = asyncio.create_task(post(client, f"{url}{COMPLETE}", body(max_tokens=5)))
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
        running = asyncio.create_task(streamed(client, f"{url}{COMPLETE}", body(max_tokens=3000)))
        await until(lambda: len(engine.scheduler.running) == 1)
        waiting = asyncio.create_task(post(client, f"{url}{COMPLETE}", body()))
        await until(lambda: len(engine.scheduler.waiting) == 1)

        def corrupting_step(now_s):  # leaves a KV block held by nobody: unsafe to go on
            engine.scheduler.block_manager.allocate_block(10**9)
            raise RuntimeError("injected corruption")
        monkeypatch.setattr(engine, "step", corrupting_step)
        (stream_status, events), (status, error) = await asyncio.gather(running, waiting)
        new = await post(client, f"{url}{COMPLETE}", body())
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
                                     json=body(max_tokens=3000, stream=True))
        for _ in range(3):
            await response.content.readline()
        queued = asyncio.create_task(post(client, f"{url}{COMPLETE}", body(max_tokens=5)))
        await until(lambda: len(engine.scheduler.waiting) == 1)
        queued.cancel()  # the queued client goes away
        response.close()  # and the streaming one, mid-stream
        await until(lambda: not engine.scheduler.has_unfinished())
        await assert_recovered(client, url, engine)
    served(test, "engine.max_num_seqs=1", "model.max_seq_len=4096", "engine.num_kv_blocks=600")


@pytest.mark.parametrize("field, value, accepted", [
    ("presence_penalty", 0.0, True), ("frequency_penalty", 0, True), ("echo", False, True),
    ("logprobs", None, True), ("presence_penalty", False, False), ("best_of", True, False),
    ("echo", 0, False), ("logprobs", 0, False), ("logprobs", 0.0, False)])
def test_an_unsupported_field_passes_only_at_its_off_value_of_its_own_kind(field, value,
                                                                           accepted):
    """`0.0` is the off value 0; `true` is no 1 and `0` no `false`; a completion's `logprobs: 0`
    asks for the sampled token's log probability, which this server does not give."""
    from sim.http.errors import ApiError
    from sim.http.protocol import parse_completion

    body = {"prompt": "hi", field: value}
    if accepted:
        parse_completion(body, vocab_size=64)
    else:
        with pytest.raises(ApiError) as error:
            parse_completion(body, vocab_size=64)
        assert error.value.param == field
