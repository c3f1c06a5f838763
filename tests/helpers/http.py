"""What the HTTP server's tests share: a fresh server of a tiny model on a free loopback port
(`served`), spoken to by aiohttp's client, readers of its answers, the check that a server
is healthy again after an abuse (`assert_recovered`), and `servesim serve` in a subprocess
(`serve_command`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import aiohttp

import scenarios
from sim.http import engine_for, start_server
from sim.profiling.threads import THREAD_ENV

TINY = ["model.vocab_size=64", "model.d_model=32", "model.n_layers=1", "model.n_heads=2",
        "model.d_ff=64", "model.max_seq_len=256", "engine.num_kv_blocks=64",
        "engine.block_size=8"]
TINY_MODEL_ID = "servesim-char64-L1-d32"
PROMPT = "the quick brown fox"
COMPLETE = "/v1/completions"
CHAT = "/v1/chat/completions"
POLLS = 2000  # of 5 ms: how long a test waits for the engine thread to catch up, at most
ROOT = Path(__file__).resolve().parents[2]


def tiny_config(*sets: str) -> dict:
    specs = scenarios.load(scenarios.DEFAULT_SCENARIO, [*TINY, *sets]).runs()
    return next(s for s in specs if s.variant == "continuous").config


def served(test, *sets: str, max_waiting: int | None = None):
    """Run `await test(client, url, engine)` against a fresh server of the tiny model."""
    async def main():
        engine, model = engine_for(tiny_config(*sets))
        server = await start_server(engine, model, max_waiting=max_waiting)
        try:
            connector = aiohttp.TCPConnector(limit=0)  # as many connections as requests
            async with aiohttp.ClientSession(connector=connector) as client:
                return await test(client, server.url, engine)
        finally:
            await server.close()
    return asyncio.run(main())


async def sse_events(response) -> list:
    """The `data:` payloads of a server-sent event stream, parsed ("[DONE]" kept as is)."""
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = []
    async for line in response.content:
        line = line.decode().rstrip("\n")
        if line:
            assert line.startswith("data: "), line
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def completion_body(**fields) -> dict:
    """A completion request of PROMPT for 6 tokens, ignoring EOS, with `fields` added."""
    return {"prompt": PROMPT, "max_tokens": 6, "ignore_eos": True, **fields}


async def streamed(client, url: str, payload: dict) -> tuple[int, list]:
    """(status, events) of `payload` streamed."""
    async with client.post(url, json={**payload, "stream": True}) as response:
        return response.status, await sse_events(response)


async def post(client, url: str, body) -> tuple[int, dict]:
    async with client.post(url, json=body) as response:
        return response.status, await response.json()


async def post_raw(client, url: str, data: bytes) -> tuple[int, dict]:
    """POST bytes as they are; the answer must be JSON, whatever the status."""
    async with client.post(url, data=data,
                           headers={"Content-Type": "application/json"}) as response:
        assert response.content_type == "application/json", await response.text()
        return response.status, await response.json()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


async def kv_usage(client, url: str) -> float:
    async with client.get(f"{url}/metrics") as response:
        return metric(await response.text(), "vllm:kv_cache_usage_perc")


def fail_next_step(monkeypatch, engine, error: Exception) -> None:
    """Make the engine's next step raise `error` in its executor; the steps after run."""
    execute, calls = engine.executor.execute, []

    def execute_once_failing(plan, **kw):
        calls.append(plan)
        if len(calls) == 1:
            raise error
        return execute(plan, **kw)
    monkeypatch.setattr(engine.executor, "execute", execute_once_failing)


async def until(condition) -> None:
    """Wait, polling, for `condition()` to hold (the engine thread works beside the test)."""
    for _ in range(POLLS):
        if condition():
            return
        await asyncio.sleep(0.005)
    assert condition(), "the engine never got there"


async def assert_recovered(client, url: str, engine) -> None:
    """After an abuse: /health is 200, a normal request completes, and every KV block is free
    again (none leaked: the free count is back to the whole cache)."""
    async with client.get(f"{url}/health") as response:
        assert response.status == 200
    status, body = await post(client, f"{url}/v1/completions",
                              {"prompt": PROMPT, "max_tokens": 4, "ignore_eos": True})
    assert status == 200 and body["usage"]["completion_tokens"] == 4, body
    bm = engine.scheduler.block_manager
    await until(lambda: not engine.scheduler.has_unfinished() and bm.num_free == bm.num_blocks)


def serve_command(*args: str, **env: str) -> subprocess.Popen:
    """`servesim serve ARGS` in a subprocess, with no BLAS thread count set unless given."""
    environ = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
    return subprocess.Popen([sys.executable, "-m", "sim.cli", "serve", *args], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True,
                            env=environ | {"PYTHONUNBUFFERED": "1"} | env)
