"""Before a bench's requests: the model a server serves (`first_model`, from `GET /v1/models`)
and the server's count of each probe prompt's tokens (`prompt_token_counts`), each failure a
ValueError saying why, whatever the server answered.
"""

from __future__ import annotations

import asyncio

import aiohttp

from .checked import BadResponse, described, json_object, usage_counts
from .http_io import (Target, auth_headers, client_timeout, describe_fault, unexpected_fault,
                      whole_body)


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
        raise ValueError(f"GET /v1/models: {describe_fault(exc, timeout_s)}") from None
    except BadResponse as exc:
        raise ValueError(f"GET /v1/models: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any other fault: the bench goes on without it
        raise ValueError(f"GET /v1/models: {unexpected_fault(exc)}") from None


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
        raise ValueError(describe_fault(exc, target.timeout_s)) from None
    except BadResponse:
        raise
    except Exception as exc:  # noqa: BLE001 - any other fault: uncalibrated, saying why
        raise ValueError(unexpected_fault(exc)) from None
    if prompt_tokens is None:
        raise ValueError("the response reports no usage.prompt_tokens")
    return prompt_tokens
