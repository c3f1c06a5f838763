"""Server-sent events of a streamed OpenAI completion, parsed and checked without I/O.

A stream is lines `data: {json}` separated by blank lines, ending with `data: [DONE]`; lines
starting with ':' are comments (keep-alives) and other fields (`event:`, `id:`) carry nothing a
completion uses. A chunk with a choice (a non-empty `choices` list) is a token's, its text
(`text` for /v1/completions, `delta.content` for /v1/chat/completions) empty or not (a special
token's, or a chat stream's opening role), as vLLM's benchmark counts them; the final chunk
may carry only `usage` (asked for with `stream_options.include_usage`, `choices` empty).
Anything else (a line that is not UTF-8, a payload that is not a JSON object, a field of the
wrong type, a count that is not a count) raises `BadResponse` saying what it was.
"""

from __future__ import annotations

import json

from .checked import BadResponse, described, quoted_bytes, usage_counts

DONE = "[DONE]"


def event_data(line: bytes | str) -> str | None:
    """The payload of one `data:` line (`DONE` for the end), None for any other line."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise BadResponse(f"a stream line is not UTF-8: {quoted_bytes(line)}") from None
    text = line.rstrip("\r\n")
    if not text.startswith("data:"):
        return None
    data = text[len("data:"):]
    return data[1:] if data.startswith(" ") else data


def parse_chunk(data: str) -> dict:
    """The JSON object of a chunk's payload; BadResponse quoting the payload when it is not
    one."""
    try:
        chunk = json.loads(data)
    except RecursionError:
        raise BadResponse("a stream chunk nests too deeply to parse") from None
    except json.JSONDecodeError:
        raise BadResponse(f"a stream chunk is not JSON: {quoted_bytes(data.encode())}") from None
    except ValueError:  # an integer of more digits than Python converts
        raise BadResponse(f"a stream chunk holds a number too long to read: "
                          f"{quoted_bytes(data.encode())}") from None
    if not isinstance(chunk, dict):
        raise BadResponse(f"a stream chunk is {described(chunk)}, not a JSON object")
    return chunk


def chunk_text(chunk: dict, chat: bool) -> str:
    """The text a chunk's first choice carries ('' when none); every choice is checked."""
    choices = chunk.get("choices")
    if choices is None:
        return ""
    if not isinstance(choices, list):
        raise BadResponse(f"choices is {described(choices)}, not an array")
    texts = [choice_text(choice, f"choices[{i}]", chat) for i, choice in enumerate(choices)]
    return texts[0] if texts else ""


def choice_text(choice, name: str, chat: bool) -> str:
    """A choice's `text` (completions) or `delta.content` (chat), '' when absent or null."""
    if not isinstance(choice, dict):
        raise BadResponse(f"{name} is {described(choice)}, not an object")
    if chat:
        delta = choice.get("delta")
        if delta is None:
            return ""
        if not isinstance(delta, dict):
            raise BadResponse(f"{name}.delta is {described(delta)}, not an object")
        text, name = delta.get("content"), f"{name}.delta.content"
    else:
        text, name = choice.get("text"), f"{name}.text"
    if text is None:
        return ""
    if not isinstance(text, str):
        raise BadResponse(f"{name} is {described(text)}, not a string")
    return text


def chunk_usage(chunk: dict) -> tuple[int | None, int | None] | None:
    """The chunk's (usage.prompt_tokens, usage.completion_tokens), checked; None when the
    chunk carries no usage."""
    usage = chunk.get("usage")
    return None if usage is None else usage_counts(usage)


def chunk_error(chunk: dict) -> str | None:
    """The message of an error sent inside the stream (`{"error": ...}`), else None."""
    error = chunk.get("error")
    if error is None:
        return None
    message = error.get("message", error) if isinstance(error, dict) else error
    return message if isinstance(message, str) else json.dumps(message)
