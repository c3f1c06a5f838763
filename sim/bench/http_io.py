"""What every request to a server shares: where and how to send (`Target`), the API key's
header, the client's timeout, an answer's body read within limits (`whole_body`,
`quoted_body`), and a fault described in one line (`describe_fault`).
"""

from __future__ import annotations

import asyncio
import math
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from .checked import BadResponse, quoted_bytes
from .urls import is_chat

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


def client_timeout(seconds: float) -> aiohttp.ClientTimeout:
    """A whole request's limit of `seconds` (inf: none)."""
    return aiohttp.ClientTimeout(total=None if math.isinf(seconds) else seconds)


def describe_fault(exc: BaseException, timeout_s: float) -> str:
    """A request's fault in one line: a timeout's limit, or any other exception's type and
    text."""
    if isinstance(exc, asyncio.TimeoutError):
        return f"timed out after {timeout_s:g} s"
    return unexpected_fault(exc)


def unexpected_fault(exc: Exception) -> str:
    """An exception nothing expected, as its type and text."""
    return f"{type(exc).__name__}: {exc}"
