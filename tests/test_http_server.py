"""The HTTP server (`sim/http`): a real aiohttp server on a free loopback port, over a tiny
model, spoken to by aiohttp's client: streamed and whole completions and chat completions,
the OpenAI error shapes, the queue limit, disconnects that free KV blocks, 200 concurrent
streams (the `servesim serve` command: test_serve_command.py). Hostile requests:
test_http_hostile.py; failures inside the engine: test_http_engine_faults.py; the bodies real
clients send: test_http_clients.py.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.http import POLLS, PROMPT, kv_usage, metric, post, served, sse_events, until
from sim.http.text import Detokenizer, model_vocab


# --- completions ---------------------------------------------------------------------------------


def test_streamed_completion_sends_a_chunk_per_token_then_usage_and_done():
    async def test(client, url, engine):
        body = {"prompt": PROMPT, "max_tokens": 12, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        async with client.post(f"{url}/v1/completions", json=body) as response:
            assert response.status == 200
            events = await sse_events(response)
        *tokens, usage, done = events
        assert done == "[DONE]"
        assert len(tokens) == 12
        assert all(c["object"] == "text_completion" and c["usage"] is None for c in tokens)
        assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 11 + ["length"]
        assert usage["choices"] == []
        assert usage["usage"] == {"prompt_tokens": len(PROMPT) + 1, "completion_tokens": 12,
                                  "total_tokens": len(PROMPT) + 13}
    served(test)


def test_chat_stream_opens_with_the_assistant_role():
    async def test(client, url, engine):
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                "ignore_eos": True, "stream": True}
        async with client.post(f"{url}/v1/chat/completions", json=body) as response:
            events = await sse_events(response)
        first, *tokens, done = events
        assert first["object"] == "chat.completion.chunk"
        assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert len(tokens) == 5 and done == "[DONE]"
        assert tokens[-1]["choices"][0]["finish_reason"] == "length"
        assert "usage" not in tokens[0]
    served(test)


def test_seeded_requests_repeat_streamed_or_whole():
    async def test(client, url, engine):
        body = {"prompt": PROMPT, "max_tokens": 20, "ignore_eos": True, "temperature": 1.0,
                "seed": 7}
        texts = [(await post(client, f"{url}/v1/completions", body))[1]["choices"][0]["text"]
                 for _ in range(2)]
        async with client.post(f"{url}/v1/completions", json={**body, "stream": True}) as r:
            streamed = "".join(c["choices"][0]["text"] for c in (await sse_events(r))[:-1])
        other = await post(client, f"{url}/v1/completions", {**body, "seed": 8})
        return texts, streamed, other[1]["choices"][0]["text"]
    texts, streamed, other = served(test)
    assert texts[0] == texts[1] == streamed
    assert other != texts[0]


def test_whole_chat_completion_and_token_id_prompt():
    async def test(client, url, engine):
        chat = await post(client, f"{url}/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4,
                           "ignore_eos": True, "temperature": 0})
        ids = await post(client, f"{url}/v1/completions",
                         {"prompt": [0, 5, 9, 13], "max_tokens": 3, "ignore_eos": True})
        return chat, ids
    (chat_status, chat), (ids_status, ids) = served(test)
    assert chat_status == ids_status == 200
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["prompt_tokens"] == len("user: hello\nassistant:") + 1
    assert chat["usage"]["completion_tokens"] == 4
    assert ids["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}


@pytest.mark.parametrize("blocks, room, policy", [
    (64, 256, "max_utilization"), (16, 16 * 8 + 1, "max_utilization"),
    (16, 16 * 8, "guaranteed_no_evict")])
def test_a_chat_without_a_limit_runs_to_the_end_of_its_context(blocks, room, policy):
    """vLLM's chat default for max_tokens: max_model_len less the prompt (here 256), or the
    most one sequence's KV can hold where the cache is smaller (16 blocks of 8, + 1: the last
    token's KV is never stored; guaranteed no evict promises that token a slot too)."""
    async def test(client, url, engine):
        return await post(client, f"{url}/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True})
    status, chat = served(test, f"engine.num_kv_blocks={blocks}",
                          f'scheduler.capacity_scheduler_policy="{policy}"')
    assert status == 200 and chat["choices"][0]["finish_reason"] == "length"
    usage = chat["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] == room


def test_a_limit_too_long_for_the_context_is_refused_naming_the_field_given():
    async def test(client, url, engine):
        return await post(client, f"{url}/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "hi"}],
                           "max_completion_tokens": 1000})
    status, answer = served(test)
    assert status == 400 and answer["error"]["param"] == "max_completion_tokens"
    assert answer["error"]["message"] == (  # vLLM's words, which clients look for
        "max_completion_tokens: the prompt is 20 tokens: this model's maximum context length is "
        "256 tokens, and prompt (20) + max_new_tokens (1000) exceeds max_seq_len (256)")


def test_stop_string_cuts_the_text_before_it():
    async def test(client, url, engine):
        body = {"prompt": PROMPT, "max_tokens": 40, "ignore_eos": True, "temperature": 0}
        text = (await post(client, f"{url}/v1/completions", body))[1]["choices"][0]["text"]
        stop = text[10:13]
        async with client.post(f"{url}/v1/completions",
                               json={**body, "stop": [stop], "stream": True}) as response:
            chunks = (await sse_events(response))[:-1]
        return text, stop, chunks
    text, stop, chunks = served(test)
    assert "".join(c["choices"][0]["text"] for c in chunks) == text[:text.find(stop)]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_detokenizer_holds_back_a_possible_stop_string():
    vocab = model_vocab(64)
    ids = [vocab["token_to_id"][c] for c in "abxaby"]
    detokenizer = Detokenizer(vocab, ("aby",))
    pieces = [detokenizer.push(token) for token in ids]
    assert pieces == ["", "", "abx", "", "", ""]
    assert detokenizer.stopped and detokenizer.text == "abx"


@settings(max_examples=300)
@given(text=st.text(alphabet="abc", max_size=40),
       stops=st.lists(st.text(alphabet="abc", min_size=1, max_size=4), max_size=3))
def test_the_detokenizer_stops_at_the_first_stop_string_searching_only_new_text(text, stops):
    # as vLLM: at the first token that completes a stop string, the text is cut before it (the
    # first in the list's order, of those it completes); the whole text when none is reached
    vocab = model_vocab(64)
    detokenizer = Detokenizer(vocab, tuple(stops))
    sent = ""
    for char in text:
        if detokenizer.stopped:
            break
        sent += detokenizer.push(vocab["token_to_id"][char])
    if not detokenizer.stopped:
        sent += detokenizer.flush()
    cuts = [[end - len(stop) for stop in stops if text[:end].endswith(stop)]
            for end in range(1, len(text) + 1)]
    cut = next((found[0] for found in cuts if found), None)
    assert sent == text[:len(text) if cut is None else cut]
    assert detokenizer.stopped == (cut is not None)


# --- models, health, metrics ---------------------------------------------------------------------


def test_models_health_and_metrics():
    async def test(client, url, engine):
        await post(client, f"{url}/v1/completions",
                   {"prompt": PROMPT, "max_tokens": 6, "ignore_eos": True})
        async with client.get(f"{url}/v1/models") as models, \
                client.get(f"{url}/health") as health, client.get(f"{url}/metrics") as metrics:
            assert metrics.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            return await models.json(), health.status, await metrics.text()
    models, health, text = served(test)
    assert health == 200
    (model,) = models["data"]
    assert model["object"] == "model" and "char" in model["id"] and model["max_model_len"] == 256
    assert metric(text, "vllm:prompt_tokens_total") == len(PROMPT) + 1
    assert metric(text, "vllm:generation_tokens_total") == 6
    assert metric(text, "vllm:num_requests_running") == 0
    assert metric(text, "vllm:num_requests_waiting") == 0
    ttft = re.findall(r'^vllm:time_to_first_token_seconds_bucket{.*le="\+Inf"} (\d+)$', text, re.M)
    assert ttft == ["1"]
    assert metric(text, "vllm:inter_token_latency_seconds_count") == 5
    assert "# TYPE vllm:time_per_output_token_seconds histogram" in text


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("body, param", [
    ({"prompt": PROMPT, "n": 2}, "n"),
    ({"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
    ({"prompt": PROMPT, "max_tokens": "ten"}, "max_tokens"),
    ({"prompt": PROMPT, "temperature": -1}, "temperature"),
    ({"prompt": PROMPT, "top_p": 0}, "top_p"),
    ({"prompt": PROMPT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"prompt": PROMPT, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": PROMPT, "logprobs": 2}, "logprobs"),
    ({"prompt": PROMPT, "logprobs": 0}, "logprobs"),  # the sampled token's: not given
    ({"prompt": PROMPT, "best_of": True}, "best_of"),  # no "off" value of another type
    ({"prompt": PROMPT, "echo": 0}, "echo"),
    ({"prompt": ["one", "two"]}, "prompt"),
    ({"prompt": [0, 64]}, "prompt"),
    ({"prompt": "x" * 300}, "prompt"),
    ({"prompt": PROMPT, "max_tokens": 250}, "max_tokens"),
])
def test_bad_completion_parameters_answer_400_naming_the_field(body, param):
    status, error = served(lambda client, url, engine:
                           post(client, f"{url}/v1/completions", body))
    assert status == 400
    assert error["error"]["param"] == param
    assert error["error"]["type"] == "invalid_request_error"
    assert set(error["error"]) == {"message", "type", "param", "code"}


def test_a_priority_is_taken_by_a_priority_queue_and_refused_by_another():
    # vLLM's `priority` field: an fcfs server refuses any but 0, naming the field
    body = {"prompt": PROMPT, "max_tokens": 2, "priority": 3}
    status, error = served(lambda client, url, engine: post(client, f"{url}/v1/completions",
                                                            body))
    assert status == 400 and error["error"]["param"] == "priority"
    assert "priority scheduling is not enabled" in error["error"]["message"]

    async def test(client, url, engine):
        seen, add = [], engine.scheduler.add
        engine.scheduler.add = lambda seq: seen.append(seq.priority) or add(seq)
        status, _ = await post(client, f"{url}/v1/completions", body)
        return status, seen

    assert served(test, 'scheduler.queue="priority"') == (200, [3])
    for bad_value in ("high", 1.5, True):
        status, error = served(lambda client, url, engine: post(
            client, f"{url}/v1/completions", body | {"priority": bad_value}),
            'scheduler.queue="priority"')
        assert status == 400 and error["error"]["param"] == "priority"


def test_malformed_json_and_bad_messages_answer_400():
    async def test(client, url, engine):
        async with client.post(f"{url}/v1/completions", data=b"{not json") as response:
            malformed = response.status, await response.json()
        messages = await post(client, f"{url}/v1/chat/completions", {"messages": [{"role": 1}]})
        return malformed, messages
    (status, malformed), (messages_status, messages) = served(test)
    assert status == 400 and "JSON" in malformed["error"]["message"]
    assert messages_status == 400 and messages["error"]["param"] == "messages[0].role"


def test_full_queue_answers_429():
    async def test(client, url, engine):
        # long enough that it is still running when the others arrive, however fast the machine
        body = {"prompt": PROMPT, "max_tokens": 3000, "ignore_eos": True, "stream": True}
        async with client.post(f"{url}/v1/completions", json=body) as running:
            await running.content.readline()  # admitted: its first token came
            waiting = asyncio.create_task(post(client, f"{url}/v1/completions",
                                               {**body, "stream": False}))
            for _ in range(2000):  # at most 10 s
                if engine.scheduler.waiting:
                    break
                await asyncio.sleep(0.005)
            assert engine.scheduler.waiting, "the second request never queued"
            refused = await post(client, f"{url}/v1/completions", body)
            waiting.cancel()
        return refused
    status, error = served(test, "engine.max_num_seqs=1", "model.max_seq_len=4096",
                           "engine.num_kv_blocks=512", max_waiting=1)
    assert status == 429
    assert error["error"]["code"] == "queue_full" and "queue is full" in error["error"]["message"]


# --- disconnects and load ------------------------------------------------------------------------


def test_disconnect_mid_stream_frees_the_kv_blocks():
    async def test(client, url, engine):
        body = {"prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True, "stream": True}
        async with client.post(f"{url}/v1/completions", json=body) as response:
            assert response.status == 200
            for _ in range(3):
                await response.content.readline()
            busy = await kv_usage(client, url)
            response.close()  # the client goes away mid-stream
        await until(lambda: not engine.scheduler.has_unfinished())
        for _ in range(POLLS):  # the gauges follow the step after the abort
            if await kv_usage(client, url) == 0:
                break
            await asyncio.sleep(0.005)
        async with client.get(f"{url}/metrics") as response:
            text = await response.text()
        return busy, text, engine.scheduler.block_manager.num_used
    busy, text, used = served(test, "model.max_seq_len=2048", "engine.num_kv_blocks=300")
    assert busy > 0
    assert metric(text, "vllm:generation_tokens_total") < 2000  # it was cut short
    assert metric(text, "vllm:kv_cache_usage_perc") == 0 and used == 0


def test_200_concurrent_streams_lose_nothing_and_leak_no_block():
    async def stream(client, url, i):
        body = {"prompt": f"{PROMPT} {i}", "max_tokens": 8, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        async with client.post(f"{url}/v1/completions", json=body) as response:
            assert response.status == 200
            events = await sse_events(response)
        return events[-2]["usage"]["completion_tokens"], len(events) - 2

    async def test(client, url, engine):
        counts = await asyncio.gather(*(stream(client, url, i) for i in range(200)))
        return counts, engine.scheduler.block_manager.num_used, await kv_usage(client, url)
    counts, used, usage = served(test)
    assert counts == [(8, 8)] * 200
    assert used == 0 and usage == 0
