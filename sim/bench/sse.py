"""Server-sent events of a streamed OpenAI completion, parsed without I/O.

A stream is lines `data: {json}` separated by blank lines, ending with `data: [DONE]`; lines
starting with ':' are comments (keep-alives) and other fields (`event:`, `id:`) carry nothing a
completion uses. A chunk carries tokens when its first choice has non-empty text (`text` for
/v1/completions, `delta.content` for /v1/chat/completions), as vLLM's benchmark counts them;
the final chunk may carry only `usage` (asked for with `stream_options.include_usage`).
"""

from __future__ import annotations

import json

DONE = "[DONE]"


def event_data(line: bytes | str) -> str | None:
    """The payload of one `data:` line (`DONE` for the end), None for any other line."""
    text = line.decode("utf-8") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    if not text.startswith("data:"):
        return None
    data = text[len("data:"):]
    return data[1:] if data.startswith(" ") else data


def parse_chunk(data: str) -> dict:
    """The JSON object of a chunk's payload; ValueError naming the payload when it is not one."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        raise ValueError(f"a stream chunk is not JSON: {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise ValueError(f"a stream chunk is not a JSON object: {data[:80]!r}")
    return chunk


def chunk_text(chunk: dict, chat: bool) -> str:
    """The text a chunk's first choice carries ('' when none)."""
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
    return text or ""


def chunk_usage(chunk: dict) -> dict | None:
    """The chunk's `usage` ({prompt_tokens, completion_tokens, ...}), None when it has none."""
    usage = chunk.get("usage")
    return usage if isinstance(usage, dict) else None


def chunk_error(chunk: dict) -> str | None:
    """The message of an error sent inside the stream (`{"error": ...}`), else None."""
    error = chunk.get("error")
    if error is None:
        return None
    return str(error.get("message", error)) if isinstance(error, dict) else str(error)
