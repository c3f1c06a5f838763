"""The OpenAI request and response shapes: `parse_completion` and `parse_chat` read a request
body into a `GenerationRequest` (or raise `ApiError` naming the field), and the builders write
responses and stream chunks as the OpenAI API (and vLLM) do.

Fields the engine cannot honour with a value other than their "off" one (`UNSUPPORTED`) are
refused rather than ignored; fields it knows nothing about (`user`, `metadata`, ...) are
ignored, as vLLM ignores them. vLLM's own extensions that clients send by default are read:
`ignore_eos`, `top_k`, `stream_options.continuous_usage_stats` (guidellm).
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass

from engine.sequence import SamplingParams

from .errors import ApiError, bad
from .messages import parse_messages

DEFAULT_MAX_TOKENS = 16  # the OpenAI completions default; a chat's is the context left
MAX_STOP_STRINGS = 4
KIND_NAMES = {int: "an integer", float: "a number", bool: "a boolean"}
# field -> the values that mean "off"; anything else is refused with 400
# (a completion's `logprobs: 0` asks for the sampled token's: not off)
UNSUPPORTED = {"logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False),
               "best_of": (None, 1), "suffix": (None, ""), "logit_bias": (None, {}),
               "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
               "tools": (None, []), "tool_choice": (None, "none", "auto"),
               "functions": (None, []), "function_call": (None, "none", "auto"),
               "response_format": (None, {"type": "text"}), "modalities": (None, ["text"]),
               "repetition_penalty": (None, 1), "min_p": (None, 0), "min_tokens": (None, 0),
               "stop_token_ids": (None, []), "include_stop_str_in_output": (None, False)}


@dataclass(frozen=True)
class GenerationRequest:
    """One validated request: a prompt (text or token ids) and how to generate from it.
    `continuous_usage`: every stream chunk carries the usage so far (with `include_usage`)."""

    prompt: str | list[int]
    max_tokens: int | None  # None: what is left of the context (a chat that sets no limit)
    sampling: SamplingParams
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool = False
    priority: int = 0  # vLLM's: the lower the sooner, with a priority queue
    max_tokens_field: str = "max_tokens"  # the field that set the limit, for an error to name


def parse_completion(body, vocab_size: int) -> GenerationRequest:
    """A /v1/completions body: `prompt` is a string or a list of token ids (or a list holding
    exactly one of either)."""
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        if not all(0 <= t < vocab_size for t in prompt):
            raise bad("prompt", f"token ids must be in [0, {vocab_size})")
    elif not isinstance(prompt, str):
        raise bad("prompt", "must be a string or a non-empty list of token ids (one prompt)")
    return _generation(body, prompt, _get(body, "max_tokens", int, DEFAULT_MAX_TOKENS),
                       "max_tokens")


def parse_chat(body) -> tuple[list[tuple[str, str]], GenerationRequest]:
    """A /v1/chat/completions body: its messages as (role, text) pairs (`messages.py`) and the
    request. The output limit is `max_completion_tokens` or, as before it, `max_tokens`; with
    neither, what is left of the context once the prompt is in, as vLLM's chat default."""
    body = _object(body)
    messages = parse_messages(body.get("messages"))
    limits = {field: _get(body, field, int, None)
              for field in ("max_completion_tokens", "max_tokens")}
    given = {field: n for field, n in limits.items() if n is not None}
    if len(set(given.values())) > 1:
        raise bad("max_completion_tokens", f"{given['max_completion_tokens']} differs from "
                                           f"max_tokens {given['max_tokens']} (give one of them)")
    field, limit = next(iter(given.items()), ("max_tokens", None))
    return messages, _generation(body, "", limit, field)


def _same(given, off) -> bool:
    """`given` is the "off" value `off`, a boolean only where `off` is one (`true` is no 1,
    `0` no `false`; `0.0` is 0)."""
    return given == off and isinstance(given, bool) == isinstance(off, bool)


def _generation(body: dict, prompt, max_tokens: int | None,
                max_tokens_field: str) -> GenerationRequest:
    for field, off in UNSUPPORTED.items():
        if field in body and not any(_same(body[field], value) for value in off):
            raise bad(field, "is not supported by this server")
    if _get(body, "n", int, 1) != 1:
        raise bad("n", "only n = 1 is supported")
    if max_tokens is not None and max_tokens < 1:
        raise bad(max_tokens_field, f"must be at least 1, got {max_tokens}")
    stream = _get(body, "stream", bool, False)
    options = body.get("stream_options")
    if options is not None and not (stream and isinstance(options, dict)):
        raise bad("stream_options", "must be an object, and is only allowed with stream = true")
    options = options or {}
    include_usage = _get(options, "include_usage", bool, False, "stream_options.include_usage")
    continuous = _get(options, "continuous_usage_stats", bool, False,
                      "stream_options.continuous_usage_stats")
    priority = _get(body, "priority", int, 0)
    if not -2**63 <= priority < 2**63:
        raise bad("priority", f"must be an integer from -2^63 to 2^63 - 1, got {priority}")
    return GenerationRequest(prompt, max_tokens, _sampling(body), _seed(body), _stop(body),
                             _get(body, "ignore_eos", bool, False), stream, include_usage,
                             continuous, priority, max_tokens_field)


def _sampling(body: dict) -> SamplingParams:
    temperature = _get(body, "temperature", float, 1.0)
    if not (math.isfinite(temperature) and temperature >= 0):
        raise bad("temperature", f"must be a finite number >= 0 (0 is greedy), got {temperature}")
    top_p = _get(body, "top_p", float, 1.0)
    if not 0 < top_p <= 1:
        raise bad("top_p", f"must be in (0, 1], got {top_p}")
    top_k = _get(body, "top_k", int, 0)
    if top_k < -1:
        raise bad("top_k", f"must be a positive integer, or 0 or -1 for off; got {top_k}")
    return SamplingParams(temperature=temperature, top_k=max(top_k, 0), top_p=top_p)


def _seed(body: dict) -> int | None:
    seed = _get(body, "seed", int, None)
    if seed is not None and not 0 <= seed < 2**63:
        raise bad("seed", f"must be an integer from 0 to 2^63 - 1, got {seed}")
    return seed


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    stops = [] if stop is None else [stop] if isinstance(stop, str) else stop
    if not (isinstance(stops, list) and len(stops) <= MAX_STOP_STRINGS
            and all(isinstance(s, str) and s for s in stops)):
        raise bad("stop", f"must be a non-empty string or a list of up to {MAX_STOP_STRINGS}")
    return tuple(stops)


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object, got "
                            f"{type(body).__name__ if body is not None else 'null'}")
    return body


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _get(body: dict, field: str, kind: type, default, name: str | None = None):
    """body[field] as `kind` (an int is a valid float), or `default` when absent or null."""
    value = body.get(field)
    if value is None:
        return default
    ok = {int: _is_int(value), bool: isinstance(value, bool),
          float: _is_int(value) or isinstance(value, float)}[kind]
    if not ok:
        raise bad(name or field, f"must be {KIND_NAMES[kind]}, got {reprlib.repr(value)}")
    try:
        return kind(value)
    except OverflowError:  # an integer past any float
        raise bad(name or field, f"must be {KIND_NAMES[kind]}, got an integer of "
                                 f"{len(str(abs(value)))} digits") from None


# --- responses -----------------------------------------------------------------------------------


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_choice(text: str, finish_reason: str | None) -> dict:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}


def chat_choice(text: str, finish_reason: str | None) -> dict:
    return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
            "finish_reason": finish_reason}


def chat_delta(delta: dict, finish_reason: str | None) -> dict:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def envelope(request_id: str, created: int, model: str, kind: str, choices: list) -> dict:
    """A response or chunk: kind "text_completion", "chat.completion" or
    "chat.completion.chunk"."""
    return {"id": request_id, "object": kind, "created": created, "model": model,
            "choices": choices}
