"""Chat messages as clients send them, read into (role, text) pairs for the chat template.

A message is {"role": string, "content": ...} with an optional string `name` (accepted, and
left out of the prompt as most chat templates leave it). `content` is a string or a non-empty
list of text parts, {"type": "text", "text": string}, whose texts are joined with "\n" (as vLLM
joins them for a template that renders string content); the official client, guidellm and
aiperf send either
form. Any other part (an image, audio, a file) is refused naming its field: the model reads
text only. An assistant message's `tool_calls` are refused too: this server has no tools.
"""

from __future__ import annotations

import reprlib

from .errors import ApiError, bad


def parse_messages(messages) -> list[tuple[str, str]]:
    """The (role, text) of each message of a chat request's `messages`; ApiError (400) naming
    the field (`messages[i].content[j].type`, ...) otherwise."""
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "must be a non-empty list of {role, content} objects")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]


def _message(message, where: str) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise bad(where, f"must be an object with role and content, got {reprlib.repr(message)}")
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise bad(f"{where}.role", f"must be a non-empty string, got {reprlib.repr(role)}")
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise bad(f"{where}.name", f"must be a string, got {reprlib.repr(name)}")
    if message.get("tool_calls"):
        raise bad(f"{where}.tool_calls", "is not supported by this server (it has no tools)")
    return role, _content(message.get("content"), f"{where}.content")


def _content(content, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise bad(where, "must be a string or a non-empty list of text parts "
                         "({\"type\": \"text\", \"text\": string})")
    return "\n".join(_text_part(part, f"{where}[{j}]") for j, part in enumerate(content))


def _text_part(part, where: str) -> str:
    if not isinstance(part, dict):
        raise bad(where, f"must be a content part object, got {reprlib.repr(part)}")
    kind = part.get("type")
    if kind != "text":
        raise ApiError(400, f"{where}.type: {reprlib.repr(kind)} is not supported: this server "
                            f"reads text only (\"type\": \"text\")", f"{where}.type")
    text = part.get("text")
    if not isinstance(text, str):
        raise bad(f"{where}.text", f"must be a string, got {reprlib.repr(text)}")
    return text
