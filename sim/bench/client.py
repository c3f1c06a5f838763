"""The requests over HTTP: streamed completions sent at the workload's arrival times, with at
most `max_concurrency` in flight (a request due while the limit is reached waits for a slot, as
in vLLM's `bench serve`; its latencies start when it is sent).

A request that fails (an HTTP error, a connection refused or broken, a timeout, an answer that
is not an event stream, an error inside the stream, a malformed chunk, a stream that ends
without `[DONE]`) is returned with status "failed" and its reason; nothing here raises for a
server's fault. Model discovery and the text probe (`discovery.py`) raise ValueError saying
why.
"""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from .checked import BadResponse
from .http_io import (Target, auth_headers, client_timeout, describe_fault, quoted_body,
                      status_reason, unexpected_fault)
from .sse import DONE, chunk_error, chunk_text, chunk_usage, event_data, parse_chunk
from .timing import RequestResult

EVENT_STREAM = "text/event-stream"


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
        result.fail(describe_fault(exc, target.timeout_s))
    except BadResponse as exc:
        result.fail(str(exc))
    except Exception as exc:  # noqa: BLE001 - any other fault fails this request alone
        result.fail(unexpected_fault(exc))
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
