"""The request bodies real clients send in their default modes (the official `openai` Python
client, guidellm 0.8, aiperf 0.13; recorded in tests/data/clients/, see its README for where
each shape comes from), sent unchanged, headers and all, to a real server: each gets a 200 and
a well-formed answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.http import TINY_MODEL_ID, served, sse_events

FIXTURES = sorted((Path(__file__).parent / "data" / "clients").glob("*.json"))


def limit_of(body: dict) -> int | None:
    return body.get("max_completion_tokens", body.get("max_tokens"))


def default_limit(chat: bool, prompt_tokens: int) -> int:
    """vLLM's: 16 for a completion, what is left of the context (256 tokens) for a chat."""
    return 256 - prompt_tokens if chat else 16


def check_whole(body: dict, answer: dict, chat: bool) -> None:
    assert answer["object"] == ("chat.completion" if chat else "text_completion")
    assert answer["model"] == TINY_MODEL_ID and answer["id"] and answer["created"] > 0
    (choice,) = answer["choices"]
    text = choice["message"]["content"] if chat else choice["text"]
    assert isinstance(text, str) and choice["finish_reason"] in ("stop", "length")
    if chat:
        assert choice["message"]["role"] == "assistant"
    usage = answer["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    limit = limit_of(body) or default_limit(chat, usage["prompt_tokens"])
    assert 1 <= usage["completion_tokens"] <= limit


def check_stream(body: dict, events: list, chat: bool) -> None:
    assert events[-1] == "[DONE]" and all(isinstance(e, dict) for e in events[:-1])
    chunks = events[:-1]
    assert all(c["object"] == ("chat.completion.chunk" if chat else "text_completion")
               and c["model"] == TINY_MODEL_ID for c in chunks)
    options = body.get("stream_options") or {}
    usage_chunk = chunks.pop() if options.get("include_usage") else None
    if chat:
        role = chunks.pop(0)
        assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        if options.get("continuous_usage_stats") and usage_chunk is not None:
            assert role["usage"]["completion_tokens"] == 0  # vLLM counts no token there
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert finishes[:-1] == [None] * (len(chunks) - 1) and finishes[-1] in ("stop", "length")
    if body.get("ignore_eos"):
        assert len(chunks) == limit_of(body) and finishes[-1] == "length"
    if usage_chunk is None:
        assert all("usage" not in c for c in chunks)
        return
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == len(chunks)
    counts = [c["usage"]["completion_tokens"] if options.get("continuous_usage_stats")
              else c["usage"] for c in chunks]
    if options.get("continuous_usage_stats"):  # the counts so far, on every chunk
        assert counts == list(range(1, len(chunks) + 1))
    else:
        assert counts == [None] * len(chunks)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda path: path.stem)
def test_what_a_client_sends_by_default_is_served(fixture):
    request = json.loads(fixture.read_text())
    body, chat = request["body"], request["path"].endswith("/chat/completions")

    async def test(client, url, engine):
        async with client.post(f"{url}{request['path']}", data=json.dumps(body).encode(),
                               headers=request["headers"]) as response:
            if body.get("stream"):
                return response.status, await sse_events(response)
            return response.status, await response.json()
    status, answer = served(test)
    assert status == 200, answer
    if body.get("stream"):
        check_stream(body, answer, chat)
    else:
        check_whole(body, answer, chat)
