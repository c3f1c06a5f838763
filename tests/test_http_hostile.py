"""Hostile requests against a real server (`sim/http`): bodies that are not JSON objects or
nest too deep, sampling values at and past their edges (tiny temperatures, NaN and Infinity as
Python's json reads them, huge or wrong-typed numbers), content parts good and bad, and fields
vLLM takes that servesim does not (failures inside the engine:
`test_http_engine_faults.py`). After each abuse the server is healthy again
(`assert_recovered`: /health 200, a normal request completes, no KV block leaked).
"""

from __future__ import annotations

import pytest

from helpers.http import CHAT, COMPLETE, PROMPT, assert_recovered, completion_body, post, post_raw, \
    served, streamed


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
    payload = chat if path == CHAT else completion_body(max_tokens=12)

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
        answers = [await post(client, f"{url}{COMPLETE}", completion_body(**fields))
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
        answers = [await post(client, f"{url}{COMPLETE}", completion_body(**fields))
                   for fields in edges]
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


# --- fields servesim does not take ---------------------------------------------------------------


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
