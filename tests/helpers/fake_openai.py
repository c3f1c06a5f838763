"""A fake OpenAI-compatible server for `servesim bench`'s tests (aiohttp, on a loopback port, on
its own thread), whose answers a test sets, and the small scenario they bench against it; the
fixtures `fake` (a running server) and `bench_scenario` (that scenario's file), which
tests/conftest.py loads for every test module."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from aiohttp import web

SCENARIO = """
name = "faults"
seed = 3
[workload]
num_requests = 5
arrival = { process = "burst" }
prompt_tokens = { dist = "uniform", low = 4, high = 12 }
output_tokens = { dist = "uniform", low = 2, high = 6 }
"""


def prompt_length(body: dict) -> int:
    prompt = body["messages"][0]["content"] if "messages" in body else body["prompt"]
    return len(prompt) if isinstance(prompt, list) else len(prompt.split())


async def event_stream(request, payloads, content_type="text/event-stream"):
    """A streamed answer: each payload a `data:` event (bytes written as they are)."""
    response = web.StreamResponse(headers={"Content-Type": content_type})
    await response.prepare(request)
    for payload in payloads:
        await response.write(payload if isinstance(payload, bytes) else
                             f"data: {payload}\n\n".encode())
    await response.write_eof()
    return response


def token_chunks(body: dict) -> list[str]:
    """A healthy stream's payloads: a token a chunk, then the usage, then [DONE]."""
    n, chat = body["max_tokens"], "messages" in body
    choice = {"index": 0, "delta": {"content": "a"}} if chat else {"index": 0, "text": "a"}
    usage = {"prompt_tokens": prompt_length(body), "completion_tokens": n}
    return [json.dumps({"choices": [choice]})] * n + [json.dumps({"choices": [],
                                                                  "usage": usage}), "[DONE]"]


async def healthy(request, body):
    return await event_stream(request, token_chunks(body))


async def probe_answer(request, body):
    """A non-streamed answer, as the text probe asks: 3 tokens a word, 5 for the template."""
    return web.json_response({"choices": [{"text": "a"}],
                              "usage": {"prompt_tokens": 5 + 3 * prompt_length(body),
                                        "completion_tokens": 1}})


async def model_listing(request):
    return web.json_response({"object": "list", "data": [{"id": "fake-model"}]})


class FakeServer:
    """An OpenAI-compatible server whose answers a test sets: `answers[i]` answers the i-th
    streamed request to arrive, `healthy` those after them; `probe` the non-streamed ones;
    `models` GET /v1/models. It runs on its own thread's event loop, as the bench runs its
    own."""

    def __init__(self):
        self.answers, self.probe, self.models = [], probe_answer, model_listing
        self.bodies = []  # of the streamed requests, as they arrived
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = self._call(self._start())

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def _start(self) -> str:
        self.released = asyncio.Event()  # set at the end: a never-answering handler returns
        app = web.Application()
        for path in ("/v1/completions", "/v1/chat/completions"):
            app.router.add_post(path, self._complete)
        app.router.add_get("/v1/models", self._models)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        return "http://127.0.0.1:%d" % self.runner.addresses[0][1]

    async def _complete(self, request):
        body = await request.json()
        if not body.get("stream"):
            return await self.probe(request, body)
        self.bodies.append(body)
        arrival = len(self.bodies) - 1
        answer = self.answers[arrival] if arrival < len(self.answers) else healthy
        return await answer(request, body)

    async def _models(self, request):
        return await self.models(request)

    def close(self):
        self.loop.call_soon_threadsafe(self.released.set)
        self._call(self.runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def answering(status, body: bytes, content_type="application/json"):
    async def answer(request, *_):
        return web.Response(status=status, body=body, content_type=content_type)
    return answer


def never_answers(server):
    async def answer(request, *body):
        await server.released.wait()
        return web.Response(status=500)
    return answer


def counting(calls: list, answer):
    """`answer`, appending each request it gets to `calls`."""
    async def counted(request, *body):
        calls.append(request.path)
        return await answer(request, *body)
    return counted


@pytest.fixture
def fake():
    server = FakeServer()
    yield server
    server.close()


@pytest.fixture
def bench_scenario(tmp_path):
    path = tmp_path / "bench.toml"
    path.write_text(SCENARIO)
    return path
