"""How every failure of a request becomes the OpenAI error body {"error": {"message", "type",
"param", "code"}}, for that request alone: `ApiError` (a request's own mistake, `bad` naming its
field, or the server's answer to it) as it is, aiohttp's own HTTP errors (an unknown path, a
wrong method, a body over the size limit) in the same shape, and anything unexpected as a 500
(`as_api_error`), logged as one line on stderr. A stream whose 200 is already sent ends with the
error as one more event, then `data: [DONE]` (`sse_error`).
"""

from __future__ import annotations

import json
import logging
import sys

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from .engine_thread import describe


class ApiError(Exception):
    """An error answered as {"error": {"message", "type", "param", "code"}} with `status`."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 error_type: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status = status
        self.param = param
        self.error_type = error_type
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.error_type, "param": self.param,
                          "code": self.code}}


def bad(param: str, message: str) -> ApiError:
    """A 400 naming the field: "param: message"."""
    return ApiError(400, f"{param}: {message}", param)


def as_api_error(exc: Exception) -> ApiError:
    """The error a client gets for `exc`: an ApiError as it is; a body that cannot be read (a
    content encoding it does not have, say) a 400; anything else a 500 naming the exception
    (and logged, since it is a fault of the server, not of the request)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, (RequestPayloadError, HttpProcessingError)):
        return ApiError(400, f"the request body could not be read: {describe(exc)}")
    print(f"servesim serve: a request failed: {describe(exc)}", file=sys.stderr, flush=True)
    return ApiError(500, f"the server failed on this request: {describe(exc)}",
                    error_type="server_error")


def sse_error(error: ApiError) -> bytes:
    """The events that end a stream with `error`: the error body, then [DONE]."""
    return f"data: {json.dumps(error.body())}\n\ndata: [DONE]\n\n".encode()


class OneLine(logging.Filter):
    """aiohttp's own log records of a request it could not parse (a header too long, a bad
    chunk size), each one line without its traceback: the request was answered (400) and
    failed alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        # (a body that cannot be decoded raises again when aiohttp drains it after the answer)
        if isinstance(exc, (HttpProcessingError, RequestPayloadError)):  # others: a traceback
            record.msg, record.args = f"servesim serve: {record.getMessage()}: " \
                                      f"{describe(exc)}", ()
            record.exc_info = record.exc_text = None
        return True


@web.middleware
async def api_errors(request: web.Request, handler):
    """Answer every error a handler raises as a JSON error body (a stream that has begun
    reports its own, `sse_error`)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        detail = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else \
            f"{exc.reason}: {request.method} {request.path}"
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return web.json_response(ApiError(exc.status, detail).body(), status=exc.status,
                                 headers=allow)
    except Exception as exc:  # a fault of this request's handling: this request fails alone
        error = as_api_error(exc)
        return web.json_response(error.body(), status=error.status)
