"""The aiohttp application: OpenAI-compatible completions and chat completions (streamed as
server-sent events or not), `/v1/models`, `/health` and Prometheus `/metrics`, over an
`EngineThread`. `start_server` runs it on a loopback or public port inside a running event
loop; a client that disconnects has its request aborted (handler cancellation is on). Every
error is a JSON body for that request alone (`errors.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, replace

import numpy as np
from aiohttp import web

from engine.llm_engine import LLMEngine
from engine.sequence import Sequence
from engine.tokenizer import encode_prompt

from . import protocol
from .engine_thread import EngineStopped, EngineThread, QueueFull, RequestFailed
from .errors import ApiError, OneLine, api_errors, as_api_error, bad, sse_error
from .metrics import ServerMetrics
from .protocol import GenerationRequest
from .text import Detokenizer, render_chat


@dataclass
class Model:
    """What the server says about the model it serves."""

    id: str
    vocab: dict
    max_seq_len: int

    @property
    def eos_token_id(self) -> int | None:
        return self.vocab["token_to_id"].get("<eos>")


STATE = web.AppKey("state", dict)
SHUTDOWN_TIMEOUT_S = 5.0  # for a handler still writing once the engine has ended its stream


class Generation:
    """One request in flight, seen from its handler: its token events turned into text."""

    def __init__(self, engine: EngineThread, seq: Sequence, gen: GenerationRequest, vocab: dict):
        self.engine = engine
        self.seq = seq
        self.events = _submit(engine, seq)
        self.detokenizer = Detokenizer(vocab, gen.stop)
        self.num_tokens = 0
        self.done = False

    async def pieces(self):
        """Yield (text, finish_reason) per token; the last one has its finish reason."""
        while not self.done:
            event = await self.events.get()
            if isinstance(event, RequestFailed):
                self.done = True  # the engine holds nothing of it any more
                raise ApiError(event.status, event.message, error_type="server_error",
                               code="engine_stopped" if event.status == 503 else None)
            token, finish = event
            self.num_tokens += 1
            text = self.detokenizer.push(token)
            if self.detokenizer.stopped:
                finish = "stop"
                self.engine.abort(self.seq)  # a stop string: the engine need not go on
            elif finish is not None:
                text += self.detokenizer.flush()
            self.done = finish is not None
            yield text, finish

    def close(self) -> None:
        """After the handler, however it ended: a request not done is aborted."""
        if not self.done:
            self.engine.abort(self.seq)


def _submit(engine: EngineThread, seq: Sequence):
    try:
        return engine.submit(seq)
    except QueueFull as exc:
        raise ApiError(429, str(exc), error_type="rate_limit_error", code="queue_full") from None
    except EngineStopped as exc:
        raise ApiError(503, str(exc), error_type="server_error", code="engine_stopped") from None


def build_app(engine: EngineThread, model: Model) -> web.Application:
    app = web.Application(middlewares=[api_errors])
    app[STATE] = {"engine": engine, "model": model}
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app


async def completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await _json_body(request, state["model"])
    gen = protocol.parse_completion(body, len(state["model"].vocab["id_to_token"]))
    return await _generate(request, gen, "prompt", chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await _json_body(request, request.app[STATE]["model"])
    messages, gen = protocol.parse_chat(body)
    return await _generate(request, replace(gen, prompt=render_chat(messages)), "messages",
                           chat=True)


async def models(request: web.Request) -> web.Response:
    model = request.app[STATE]["model"]
    return web.json_response({"object": "list", "data": [{
        "id": model.id, "object": "model", "created": 0, "owned_by": "servesim",
        "max_model_len": model.max_seq_len, "tokenizer": "character"}]})


async def health(request: web.Request) -> web.Response:
    """200 (empty, as vLLM's) while the engine thread serves; 503 with the reason after it
    stopped."""
    engine = request.app[STATE]["engine"]
    if engine.alive:
        return web.Response(status=200)
    reason = engine.stopped_reason or "the engine thread is not running"
    error = ApiError(503, reason, error_type="server_error", code="engine_stopped")
    return web.json_response(error.body(), status=503)


async def metrics(request: web.Request) -> web.Response:
    text = request.app[STATE]["engine"].metrics.render()
    return web.Response(text=text, headers={  # Prometheus's text format, as prometheus_client
        "Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


async def _json_body(request: web.Request, model: Model) -> dict:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "the request body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if isinstance(body, dict) and body.get("model") not in (None, model.id):
        raise ApiError(404, f"the model {body['model']!r} does not exist (this server serves "
                            f"{model.id!r})", "model", code="model_not_found")
    return body


def new_sequence(engine: EngineThread, model: Model, gen: GenerationRequest,
                 prompt_field: str) -> Sequence:
    """The engine's sequence for a request; 400 naming the field when it can never fit."""
    scheduler = engine.engine.scheduler
    if gen.priority and scheduler.config.queue != "priority":
        raise bad("priority", f"got priority {gen.priority}, but priority scheduling is not "
                              f"enabled (this server's queue is {scheduler.config.queue})")
    ids = encode_prompt(gen.prompt, model.vocab) if isinstance(gen.prompt, str) else gen.prompt
    limit = gen.max_tokens if gen.max_tokens is not None else context_left(scheduler, len(ids))
    seq = Sequence(uuid.uuid4().hex, len(ids), limit, prompt_token_ids=list(ids),
                   arrival_s=engine.now_s(), sampling=gen.sampling, ignore_eos=gen.ignore_eos,
                   eos_token_id=model.eos_token_id, priority=gen.priority)
    reason = scheduler.rejection_reason(seq)
    if reason:
        # the prompt's fault when it cannot run even with one token to generate
        alone = scheduler.rejection_reason(Sequence("-", len(ids), 1, prompt_token_ids=list(ids)))
        field = prompt_field if alone else gen.max_tokens_field
        reason = alone or reason
        context = scheduler.config.max_seq_len
        if len(ids) + (1 if alone else limit) > context:  # in vLLM's words, which clients seek
            reason = f"this model's maximum context length is {context} tokens, and {reason}"
        raise bad(field, f"the prompt is {len(ids)} tokens: {reason}")
    if gen.seed is not None:
        seq.generator = np.random.default_rng(gen.seed)
    return seq


def context_left(scheduler, prompt_len: int) -> int:
    """vLLM's output limit for a chat that sets none: `max_model_len` less the prompt. Where
    this server's KV cache holds fewer tokens than `max_seq_len` (vLLM refuses to start so),
    the cache's reach for one sequence less the prompt: its slots and one token more, whose KV
    is never stored (under guaranteed no evict, which promises that token a slot too, its slots
    alone). At least 1, so that a prompt that leaves no room is refused as the prompt's
    fault."""
    cfg, bm = scheduler.config, scheduler.block_manager
    unstored = 0 if cfg.no_evict else 1
    cache = bm.num_blocks // cfg.data_parallel_size * bm.block_size + unstored
    return max(min(cfg.max_seq_len, cache) - prompt_len, 1)


async def _generate(request: web.Request, gen: GenerationRequest, prompt_field: str,
                    chat: bool) -> web.StreamResponse:
    engine, model = request.app[STATE]["engine"], request.app[STATE]["model"]
    seq = new_sequence(engine, model, gen, prompt_field)
    generation = Generation(engine, seq, gen, model.vocab)
    meta = (f"{'chatcmpl' if chat else 'cmpl'}-{seq.request_id}", int(time.time()), model.id)
    try:
        if gen.stream:
            return await _stream(request, generation, gen, meta, chat)
        return await _whole(generation, meta, chat)
    finally:
        generation.close()


async def _whole(generation: Generation, meta: tuple, chat: bool) -> web.Response:
    texts, finish = [], None
    async for text, finish in generation.pieces():
        texts.append(text)
    choice = (protocol.chat_choice if chat else protocol.completion_choice)("".join(texts), finish)
    body = protocol.envelope(*meta, "chat.completion" if chat else "text_completion", [choice])
    body["usage"] = protocol.usage(generation.seq.prompt_len, generation.num_tokens)
    return web.json_response(body)


async def _stream(request: web.Request, generation: Generation, gen: GenerationRequest,
                  meta: tuple, chat: bool) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
    await response.prepare(request)
    try:
        await _send_events(response, generation, gen, meta, chat)
        await response.write_eof()
    except ConnectionResetError:  # the client went away: nobody is left to tell
        pass
    return response


async def _send_events(response: web.StreamResponse, generation: Generation,
                       gen: GenerationRequest, meta: tuple, chat: bool) -> None:
    """One chunk per token (chat: the role's first, once the first token is ready, as vLLM sends
    it), the usage chunk when asked, [DONE]; a request that fails after its 200 ends with its
    error event instead (`sse_error`)."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    prompt_len = generation.seq.prompt_len

    async def send(choices: list, final: bool = False, tokens: int | None = None) -> None:
        chunk = protocol.envelope(*meta, kind, choices)
        if gen.include_usage:  # every chunk: null, or the counts so far (continuous_usage_stats)
            show = final or gen.continuous_usage
            counted = generation.num_tokens if tokens is None else tokens
            chunk["usage"] = protocol.usage(prompt_len, counted) if show else None
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    try:
        role = chat  # a chat stream opens with the role, when its first token is ready (vLLM)
        async for text, finish in generation.pieces():
            if role:
                await send([protocol.chat_delta({"role": "assistant", "content": ""}, None)],
                           tokens=0)  # as vLLM counts the role's chunk
                role = False
            await send([protocol.chat_delta({"content": text}, finish) if chat
                        else protocol.completion_choice(text, finish)])
        if gen.include_usage:
            await send([], final=True)
    except ConnectionResetError:
        raise
    except Exception as exc:  # this request failed after its 200: the stream says so
        await response.write(sse_error(as_api_error(exc)))
        return
    await response.write(b"data: [DONE]\n\n")


@dataclass
class RunningServer:
    """A server listening on `url`, its engine stepping on its own thread."""

    url: str
    engine: EngineThread
    runner: web.AppRunner

    async def close(self) -> None:
        """Stop: the engine first, which ends every open request's stream with a 503 event
        (so none holds the shutdown up), then the HTTP server."""
        await asyncio.to_thread(self.engine.stop)
        await self.runner.cleanup()


async def start_server(engine: LLMEngine, model: Model, host: str = "127.0.0.1", port: int = 0,
                       max_waiting: int | None = None) -> RunningServer:
    """Serve `engine` over HTTP from the running event loop (port 0: a free port)."""
    thread = EngineThread(engine, ServerMetrics(model.id), asyncio.get_running_loop(),
                          max_waiting)
    runner = web.AppRunner(build_app(thread, model), handler_cancellation=True,
                           access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    for name in ("aiohttp.server", "aiohttp.web"):  # a malformed request: one line, no traceback
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLine) for f in logger.filters):
            logger.addFilter(OneLine())
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:  # the port is taken, say: leave nothing behind
        await runner.cleanup()
        raise
    thread.start()
    bound_host, bound_port = runner.addresses[0][:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return RunningServer(f"http://{shown}:{bound_port}", thread, runner)
