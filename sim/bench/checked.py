"""What a server sends, checked before the bench reads anything from it.

A server may send anything. Each check here accepts only what an OpenAI-compatible server
sends and otherwise raises `BadResponse`, whose message is the reason the request failed: which
field, what it held (in JSON terms, quoted short), what was expected. Token counts are checked
in one place, `token_count`.
"""

from __future__ import annotations

import json
import unicodedata

MAX_TOKEN_COUNT = 2**31 - 1  # far beyond any context window; sums over a run stay in int64
QUOTE_CHARS = 80  # of a server's value quoted in a reason
REASON_CHARS = 300  # of a whole reason: one readable line in a CSV cell and the last line


class BadResponse(ValueError):
    """A response an OpenAI-compatible server would not send; the message says why."""


def token_count(value, name: str) -> int:
    """`value` if it is a token count (an integer in 0..MAX_TOKEN_COUNT), else BadResponse
    naming `name` and what it held: booleans, numbers with a fraction or an exponent, NaN,
    Infinity and strings are not counts."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadResponse(f"{name} is {described(value)}, not an integer count")
    if value < 0:
        raise BadResponse(f"{name} is {value}, a negative count")
    if value > MAX_TOKEN_COUNT:
        raise BadResponse(f"{name} is {described(value)}, over {MAX_TOKEN_COUNT} "
                          f"(no server counts that many tokens)")
    return value


def usage_counts(usage) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) of a response's `usage` (None: not reported, as a
    count that is absent or null); BadResponse for a usage that is not an object or a count
    that is not a count."""
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        raise BadResponse(f"usage is {described(usage)}, not an object")
    prompt, completion = (None if usage.get(key) is None else token_count(usage[key],
                                                                           f"usage.{key}")
                          for key in ("prompt_tokens", "completion_tokens"))
    return prompt, completion


def json_object(raw: bytes, what: str) -> dict:
    """The JSON object a whole body `raw` holds; BadResponse naming `what` otherwise."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise BadResponse(f"{what} nests too deeply to parse") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadResponse(f"{what} is not JSON: {quoted_bytes(raw)}") from None
    except ValueError:  # an integer of more digits than Python converts
        raise BadResponse(f"{what} holds a number too long to read: {quoted_bytes(raw)}") \
            from None
    if not isinstance(value, dict):
        raise BadResponse(f"{what} is {described(value)}, not a JSON object")
    return value


def kind(value) -> str:
    """A JSON value's type, in JSON's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "an array", dict: "an object"}.get(type(value),
                                                                        type(value).__name__)


def described(value) -> str:
    """A JSON value as a reason quotes it: its type and its text, short (`a string "nope"`)."""
    if value is None:
        return "null"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):  # not a JSON value, or an integer too long to print
        text = f"<{type(value).__name__}>"
    return f"{kind(value)} {clipped(text, QUOTE_CHARS)}"


def quoted_bytes(raw: bytes, limit: int = QUOTE_CHARS) -> str:
    """Bytes a server sent, as one printable line (invalid UTF-8 and control characters
    escaped, `escaped`), cut after `limit` bytes saying how many the whole was."""
    text = escaped(raw[:limit].decode("utf-8", errors="backslashreplace"))
    return text if len(raw) <= limit else f"{text}... ({len(raw)} bytes)"


def one_line(text: str, limit: int = REASON_CHARS) -> str:
    """`text` on one line, cut at `limit` characters (saying how long the whole was), then
    made printable (`printable`)."""
    flat = " ".join(text.split())
    return printable(flat) if len(flat) <= limit else \
        f"{printable(flat[:limit])}... ({len(flat)} characters)"


# What a terminal acts on rather than shows: control characters (C0, C1), bytes that were not
# text (surrogates), and the bidirectional overrides and isolates, which reorder what follows
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """`text` on one line (each run of whitespace one space), `escaped`: a server's text (an
    error, a model's name) must not drive a terminal or end a line."""
    return escaped(" ".join(text.split()))


def escaped(text: str) -> str:
    """`text` with what a terminal would act on (`BIDI_CONTROLS`) as backslash escapes; letters
    of any script, emoji and their joiners as they are."""
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Cs")
                   or c in BIDI_CONTROLS else c for c in text)


def clipped(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and how long the whole was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
