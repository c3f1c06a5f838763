"""The requests over HTTP: streamed completions sent at the workload's arrival times, with at
most `max_concurrency` in flight (a request due while the limit is reached waits for a slot, as
in vLLM's `bench serve`; its latencies start when it is sent).

A request that fails (an HTTP error, a connection refused or broken, a timeout, an answer that
is not an event stream, an error inside the stream, a malformed chunk, a stream that ends
without `[DONE]`) is returned with status "failed" and its reason; nothing here raises for a
server's fault. Model discovery and the text probe raise ValueError saying why.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from .checked import BadResponse, described, json_object, quoted_bytes, usage_counts
from .sse import DONE, chunk_error, chunk_text, chunk_usage, event_data, parse_chunk
from .timing import RequestResult
from .urls import is_chat

EVENT_STREAM = "text/event-stream"
QUOTED_BODY_BYTES = 200  # of an error's body, in the request's reason
MAX_BODY_BYTES = 8 * 2**20  # of a whole (not streamed) answer: a model list, a probe's usage


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
        return is_chat(self.endpoint)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.endpoint

    def payload(self, prompt, max_tokens: int, stream: bool = True,
                priority: int | None = None) -> dict:
        """The request body: `max_tokens` with `ignore_eos`, streamed with usage, and the
        request's `priority` where it has one (vLLM's field)."""
        body = {"max_tokens": max_tokens, "ignore_eos": True, "stream": stream}
        if priority is not None:
            body["priority"] = priority
        if self.model is not None:
            body["model"] = self.model
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body


def check_api_key() -> None:
    """ValueError, naming OPENAI_API_KEY, where it holds what a header cannot carry (a line
    break read from a file with it, a control character, bytes that are not text)."""
    key = os.environ.get("OPENAI_API_KEY") or ""
    bad = next((c for c in key if not c.isprintable() or "\udc80" <= c <= "\udcff"), None)
    if bad is not None:
        raise ValueError(f"OPENAI_API_KEY holds {bad!r}, which an Authorization header cannot "
                         f"carry; set it to the key alone")


def auth_headers(base_url: str) -> dict:
    """`Authorization: Bearer $OPENAI_API_KEY` where that is set, as `vllm bench serve` and the
    OpenAI client send it; nothing otherwise, or where the URL carries its own credentials
    (`http://user:password@host`, sent as basic authentication)."""
    key = os.environ.get("OPENAI_API_KEY")
    if not key or urlsplit(base_url).username is not None:
        return {}
    return {"Authorization": f"Bearer {key}"}


async def first_model(base_url: str, timeout_s: float) -> str:
    """The id of the first model `GET /v1/models` lists; ValueError saying why there is none
    (whatever the server answered)."""
    try:
        async with aiohttp.ClientSession(timeout=client_timeout(timeout_s),
                                         headers=auth_headers(base_url)) as s:
            async with s.get(base_url.rstrip("/") + "/v1/models") as response:
                listing = json_object(await whole_body(response), "the body")
        return listed_model(listing)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise ValueError(f"GET /v1/models: {_describe(exc, timeout_s)}") from None
    except BadResponse as exc:
        raise ValueError(f"GET /v1/models: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any other fault: the bench goes on without it
        raise ValueError(f"GET /v1/models: {_unexpected(exc)}") from None


def listed_model(listing: dict) -> str:
    """The first model's id in a `/v1/models` listing (`{"data": [{"id": ...}, ...]}`)."""
    models = listing.get("data")
    if not isinstance(models, list):
        raise BadResponse(f"data is {described(models)}, not an array of models")
    if not models:
        raise BadResponse("it lists no model")
    first = models[0]
    model = first.get("id") if isinstance(first, dict) else None
    if not isinstance(model, str) or not model:
        raise BadResponse(f"data[0] is {described(first)}, not a model with a string id")
    return model


async def prompt_token_counts(target: Target, prompts: dict) -> dict:
    """{key: the server's usage.prompt_tokens} of one non-streamed, one-token request per
    prompt of `prompts` ({key: prompt}), sent together; ValueError saying why a count is
    missing (whatever the server answered), once one fails: the others are then cancelled
    (where several fail together, the first prompt's fault)."""
    async with aiohttp.ClientSession(timeout=client_timeout(target.timeout_s),
                                     headers=auth_headers(target.base_url)) as session:
        tasks = [asyncio.ensure_future(_prompt_tokens(session, target, prompt))
                 for prompt in prompts.values()]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    return {key: task.result() for key, task in zip(prompts, tasks)}


async def _prompt_tokens(session, target: Target, prompt) -> int:
    try:
        async with session.post(target.url, json=target.payload(prompt, 1, False)) as response:
            answer = json_object(await whole_body(response), "the body")
        prompt_tokens, _ = usage_counts(answer.get("usage"))
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise ValueError(_describe(exc, target.timeout_s)) from None
    except BadResponse:
        raise
    except Exception as exc:  # noqa: BLE001 - any other fault: uncalibrated, saying why
        raise ValueError(_unexpected(exc)) from None
    if prompt_tokens is None:
        raise ValueError("the response reports no usage.prompt_tokens")
    return prompt_tokens


async def whole_body(response, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body of a 200 response of at most `limit` bytes; BadResponse for another status
    (quoting the body's start) or a longer body."""
    if response.status != 200:
        raise BadResponse(await status_reason(response))
    body = await body_start(response, limit)
    if len(body) > limit:
        raise BadResponse(f"the body is over {limit} bytes")
    return body


async def status_reason(response) -> str:
    """A non-200 answer as a reason: `HTTP 503: ` and the start of its body."""
    return f"HTTP {response.status}: {await quoted_body(response)}"


async def quoted_body(response) -> str:
    """The body's first QUOTED_BODY_BYTES, quoted on one line."""
    body = await body_start(response, QUOTED_BODY_BYTES)
    if not body:
        return "(no body)"
    more = f"... (its first {QUOTED_BODY_BYTES} bytes)" if len(body) > QUOTED_BODY_BYTES else ""
    return quoted_bytes(body[:QUOTED_BODY_BYTES], QUOTED_BODY_BYTES) + more


async def body_start(response, limit: int) -> bytes:
    """The body's first `limit` bytes and one more when there are more (the rest is not
    read: the connection is closed, not reused)."""
    parts, size = [], 0
    while size <= limit:
        part = await response.content.read(limit + 1 - size)
        if not part:
            break
        parts.append(part)
        size += len(part)
    return b"".join(parts)


async def replay(target: Target, requests: list, prompts: list, max_concurrency: int | None,
                 on_done=None, send_until_s: float = math.inf) -> list[RequestResult]:
    """Send each of `requests` (RequestResults with their plan) with its prompt at its planned
    arrival time after the start; `on_done()` after each. Returns them filled in; under
    `max_concurrency`, one whose slot frees only after `send_until_s` (on the planned clock) is
    never sent (its `sent_s` stays NaN)."""
    start = time.perf_counter()
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    connector = aiohttp.TCPConnector(limit=max_concurrency or 0)  # 0: no pool limit of its own

    async def one(session, result: RequestResult, prompt) -> RequestResult:
        if slots is None:
            await asyncio.sleep(max(0.0, start + result.planned_arrival_s - time.perf_counter()))
            await send(session, target, result, prompt)
        elif result.planned_arrival_s <= send_until_s:
            await asyncio.sleep(max(0.0, start + result.planned_arrival_s - time.perf_counter()))
            async with slots:
                if time.perf_counter() - start <= send_until_s:
                    await send(session, target, result, prompt)
        if on_done is not None:
            on_done()
        return result

    async with aiohttp.ClientSession(connector=connector,
                                     headers=auth_headers(target.base_url)) as session:
        return list(await asyncio.gather(*(one(session, r, p)
                                           for r, p in zip(requests, prompts))))


async def send(session, target: Target, result: RequestResult, prompt) -> RequestResult:
    """One streamed request; fills `result` in. This is the fault boundary of one request:
    whatever the server does, the request is failed with its reason and nothing is raised
    (but cancellation and Ctrl-C, which are not `Exception`s, stop the bench)."""
    timeout = client_timeout(target.timeout_s)
    result.sent_s = time.perf_counter()
    try:
        body = target.payload(prompt, result.planned_output_tokens, priority=result.priority)
        async with session.post(target.url, json=body, timeout=timeout) as response:
            if response.status != 200:
                raise BadResponse(await status_reason(response))
            if response.content_type != EVENT_STREAM:
                raise BadResponse(f"HTTP 200 but not an event stream (Content-Type "
                                  f"{response.content_type}): {await quoted_body(response)}")
            await read_stream(stream_lines(response.content), result, target.chat)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        result.fail(_describe(exc, target.timeout_s))
    except BadResponse as exc:
        result.fail(str(exc))
    except Exception as exc:  # noqa: BLE001 - any other fault fails this request alone
        result.fail(_unexpected(exc))
    finally:
        result.end_s = time.perf_counter()
    return result


async def stream_lines(content):
    """The lines of a response body; BadResponse for a line longer than aiohttp reads (its
    StreamReader raises LineTooLong, or ValueError before aiohttp 3.10)."""
    lines = content.__aiter__()
    while True:
        try:
            line = await lines.__anext__()
        except StopAsyncIteration:
            return
        except LineTooLong as exc:
            raise BadResponse(f"a stream line is longer than aiohttp reads ({exc.args[1]} "
                              f"bytes)") from None
        except ValueError as exc:
            raise BadResponse(f"a stream line is longer than aiohttp reads ({exc})") from None
        yield line


async def read_stream(lines, result: RequestResult, chat: bool) -> None:
    """Read a stream's events into `result`: the time of each chunk with a choice (a token's,
    `sse.py`), the usage, "finished" at `[DONE]` after one such chunk or more, or failed at an
    error event, at an end before `[DONE]`, at a `[DONE]` after none, or past `most_chunks`;
    BadResponse for a chunk that is not what a completion's stream sends."""
    async for line in lines:
        data = event_data(line)
        if data is None:
            continue
        if data == DONE:
            if result.chunk_s:
                result.status = "finished"
            else:  # as vLLM's bench: "Never received a valid chunk to calculate TTFT"
                result.fail("no chunk with a choice before [DONE], so there is no first token "
                            "to time")
            return
        now = time.perf_counter()
        chunk = parse_chunk(data)
        error = chunk_error(chunk)
        if error is not None:
            result.fail(f"error in the stream: {error}")
            return
        chunk_text(chunk, chat)  # checked: every choice is what a completion streams
        usage = chunk_usage(chunk)
        if chunk.get("choices"):  # a token's chunk, its text empty or not (vLLM's rule)
            result.chunk_s.append(now)
            if len(result.chunk_s) > most_chunks(result.planned_output_tokens):
                result.fail(f"the stream sent more than {len(result.chunk_s) - 1} chunks with "
                            f"a choice for max_tokens = {result.planned_output_tokens}, and "
                            f"did not stop")
                return
        if usage is not None:
            result.prompt_tokens, result.completion_tokens = usage
    result.fail("the stream ended before [DONE]")


def most_chunks(max_tokens: int) -> int:
    """The chunks with a choice a stream of `max_tokens` tokens may send before it is taken for
    one that does not stop (a token's text may come a character a chunk, with room for empty
    ones: a chat's role, a last one with the finish reason), so what a request keeps stays
    bounded."""
    return 16 * max_tokens + 64


def client_timeout(seconds: float) -> aiohttp.ClientTimeout:
    """A whole request's limit of `seconds` (inf: none)."""
    return aiohttp.ClientTimeout(total=None if math.isinf(seconds) else seconds)


def _describe(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return f"timed out after {timeout_s:g} s"
    return _unexpected(exc)


def _unexpected(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
