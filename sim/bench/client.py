"""The requests over HTTP: streamed completions sent at the workload's arrival times, with at
most `max_concurrency` in flight (a request due while the limit is reached waits for a slot, as
in vLLM's `bench serve`; its latencies start when it is sent).

A request that fails (an HTTP error, a connection refused or broken, a timeout, an error
inside the stream, a stream that ends without `[DONE]`) is returned with status "failed" and
its reason; nothing here raises for a server's fault.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from .sse import DONE, chunk_error, chunk_text, chunk_usage, event_data, parse_chunk
from .timing import RequestResult

CHAT_ENDPOINT = "/v1/chat/completions"


@dataclass(frozen=True)
class Target:
    """Where and how to send: the server's base URL, the endpoint, the model name (None: the
    request names none) and the per-request timeout."""

    base_url: str
    endpoint: str
    model: str | None
    timeout_s: float

    @property
    def chat(self) -> bool:
        return self.endpoint.rstrip("/").endswith("/chat/completions")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.endpoint

    def payload(self, prompt, max_tokens: int, stream: bool = True) -> dict:
        """The request body: `max_tokens` with `ignore_eos`, streamed with usage."""
        body = {"max_tokens": max_tokens, "ignore_eos": True, "stream": stream}
        if self.model is not None:
            body["model"] = self.model
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body


async def first_model(base_url: str, timeout_s: float) -> str:
    """The id of the first model `GET /v1/models` lists; ValueError saying why there is none."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:
            async with s.get(base_url.rstrip("/") + "/v1/models") as response:
                if response.status != 200:
                    raise ValueError(f"GET /v1/models: HTTP {response.status}")
                models = (await response.json()).get("data") or []
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise ValueError(f"GET /v1/models: {_describe(exc, timeout_s)}") from None
    if not models:
        raise ValueError("GET /v1/models lists no model")
    return models[0]["id"]


async def prompt_token_counts(target: Target, prompts: dict) -> dict:
    """{key: the server's usage.prompt_tokens} of one non-streamed, one-token request per
    prompt of `prompts` ({key: prompt}); ValueError saying why a count is missing."""
    counts = {}
    async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=target.timeout_s)) as session:
        for key, prompt in prompts.items():
            try:
                async with session.post(target.url, json=target.payload(prompt, 1, False)) as r:
                    if r.status != 200:
                        raise ValueError(f"HTTP {r.status}: {(await r.text())[:200]}")
                    usage = (await r.json()).get("usage") or {}
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise ValueError(_describe(exc, target.timeout_s)) from None
            if "prompt_tokens" not in usage:
                raise ValueError("the response reports no usage.prompt_tokens")
            counts[key] = int(usage["prompt_tokens"])
    return counts


async def replay(target: Target, requests: list, prompts: list, max_concurrency: int | None,
                 on_done=None) -> list[RequestResult]:
    """Send each of `requests` (RequestResults with their plan) with its prompt at its planned
    arrival time after the start; `on_done()` after each. Returns them filled in."""
    start = time.perf_counter()
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    connector = aiohttp.TCPConnector(limit=max_concurrency or 0)  # 0: no pool limit of its own

    async def one(session, result: RequestResult, prompt) -> RequestResult:
        await asyncio.sleep(max(0.0, start + result.planned_arrival_s - time.perf_counter()))
        if slots is None:
            await send(session, target, result, prompt)
        else:
            async with slots:
                await send(session, target, result, prompt)
        if on_done is not None:
            on_done()
        return result

    async with aiohttp.ClientSession(connector=connector) as session:
        return list(await asyncio.gather(*(one(session, r, p)
                                           for r, p in zip(requests, prompts))))


async def send(session, target: Target, result: RequestResult, prompt) -> RequestResult:
    """One streamed request; fills `result` in (failed with its reason on any fault)."""
    timeout = aiohttp.ClientTimeout(total=target.timeout_s)
    result.sent_s = time.perf_counter()
    try:
        async with session.post(target.url, json=target.payload(prompt,
                                                                result.planned_output_tokens),
                                timeout=timeout) as response:
            if response.status != 200:
                return result.fail(f"HTTP {response.status}: {(await response.text())[:200]}")
            await read_stream(response.content, result, target.chat)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        result.fail(_describe(exc, target.timeout_s))
    except ValueError as exc:  # a chunk that is not JSON
        result.fail(str(exc))
    finally:
        result.end_s = time.perf_counter()
    return result


async def read_stream(lines, result: RequestResult, chat: bool) -> None:
    """Read a stream's events into `result`: the time of each chunk carrying tokens, the usage,
    "finished" at `[DONE]`, or failed at an error event or an end before `[DONE]`."""
    async for line in lines:
        data = event_data(line)
        if data is None:
            continue
        if data == DONE:
            result.status = "finished"
            return
        now = time.perf_counter()
        chunk = parse_chunk(data)
        error = chunk_error(chunk)
        if error is not None:
            result.fail(f"error in the stream: {error}")
            return
        if chunk_text(chunk, chat):
            result.chunk_s.append(now)
        usage = chunk_usage(chunk)
        if usage is not None:
            result.prompt_tokens = usage.get("prompt_tokens")
            result.completion_tokens = usage.get("completion_tokens")
    result.fail("the stream ended before [DONE]")


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return f"timed out after {timeout_s:g} s"
    return f"{type(exc).__name__}: {exc}"
