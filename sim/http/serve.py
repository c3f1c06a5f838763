"""`servesim serve`: one scenario's engine (its model, engine and scheduler settings; the
weights from the model's seed) behind the HTTP server, until SIGINT or SIGTERM.

The scenario's workload is not used: the requests come from HTTP clients. Sampling draws from
the scenario seed's "sampling" stream, or from a request's own `seed`. The model and its KV
cache are checked against the machine's memory before either is allocated.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from engine.llm_engine import LLMEngine

from .hf_tokenizer import tokenizer_files
from .server import Model, start_server
from .text import model_vocab


def engine_for(config) -> tuple[LLMEngine, Model]:
    """The real engine of a resolved run config, and the model it serves. A config that has
    no NumPy model to serve (a hardware model, a cluster), or whose model and KV cache would
    not fit in memory, raises ValueError."""
    from sim.build import build_server, hardware_of
    from sim.memory import check_engine_memory
    from sim.workloads.builder import seeded_streams

    if hardware_of(config) is not None or config.cluster is not None:
        raise ValueError("serve runs one NumPy engine: a scenario with cost.model = "
                         "\"hardware\" or a [cluster] cannot be served")
    engine = config.engine
    check_engine_memory(config.model, engine.num_kv_blocks, engine.block_size, "serving")
    scheduler, executor, model = build_server(config.with_mode("serve"), "serve",
                                              seeded_streams(config.seed))
    vocab = model_vocab(model.vocab_size)
    model_id = f"servesim-char{model.vocab_size}-L{model.n_layers}-d{model.d_model}"
    return LLMEngine(scheduler, executor), Model(model_id, vocab, model.max_seq_len)


def describe_served(config, model: Model, blas_threads: str | None) -> str:
    """What is served, for the banner: batching, queue, model, KV cache and BLAS threads."""
    scheduler, engine = config.scheduler, config.engine
    threads = "BLAS threads as BLAS chooses" if blas_threads is None else \
        f"{blas_threads} BLAS thread{'' if blas_threads == '1' else 's'}"
    return (f"{scheduler.policy} batching, {scheduler.queue} queue, model {model.id}, "
            f"{engine.num_kv_blocks} KV blocks of {engine.block_size} tokens, {threads}")


def serve_scenario(config, host: str, port: int, max_waiting: int | None = None,
                   name: str = "the scenario", tokenizer_out=None,
                   manifest: dict | None = None) -> None:
    """Serve until SIGINT or SIGTERM. Once the port listens, one line goes to stderr:
    "serving NAME: <what is served>, on http://HOST:PORT". A port it cannot listen on raises
    ValueError. `tokenizer_out`: a folder to write the model's tokenizer to once the port
    listens, before that line (`write_tokenizer`, with `manifest`)."""
    from sim.profiling import threads

    engine, model = engine_for(config)
    banner = f"serving {name}: {describe_served(config, model, threads.current())}"
    listening = None if tokenizer_out is None else \
        (lambda: write_tokenizer(model, tokenizer_out, manifest))
    asyncio.run(_serve_until_signal(engine, model, host, port, max_waiting, banner, listening))


def write_tokenizer(model: Model, out_dir, manifest: dict | None = None) -> None:
    """The served model's tokenizer in Hugging Face's format (`hf_tokenizer.py`), written to
    `out_dir` as an output folder is (whole or not at all, never over files servesim did not
    write), with `manifest` (what was run) recorded; one line to stderr says where."""
    from reports.output import output_folder

    files = tokenizer_files(len(model.vocab["id_to_token"]), model.max_seq_len)
    with output_folder(out_dir, (manifest or {"command": "serve"}) | {"model": model.id}) \
            as folder:
        for file_name, text in files.items():
            (folder / file_name).write_text(text, encoding="utf-8")
    shown = Path(out_dir)  # without a trailing slash
    print(f"tokenizer of {model.id} written to {shown}/ (give it to a client as --tokenizer "
          f"{shown})", file=sys.stderr, flush=True)


async def _serve_until_signal(engine: LLMEngine, model: Model, host: str, port: int,
                              max_waiting: int | None, banner: str, listening=None) -> None:
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    try:
        server = await start_server(engine, model, host, port, max_waiting)
    except OSError as exc:  # in use, not allowed, or no such address
        why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or exc
        raise ValueError(f"cannot listen on {host}:{port}: {why}") from None
    if listening is not None:
        try:
            listening()
        except BaseException:
            await server.close()
            raise
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        loop.add_signal_handler(sig, stop.set)
    print(f"{banner}, on {server.url}", file=sys.stderr, flush=True)
    try:
        await stop.wait()
    finally:  # a second signal now interrupts the shutdown itself, as the command's handlers say
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)
        if stop.is_set():
            print("servesim serve: stopping; open requests end now (a stream with an "
                  "engine_stopped error event, a waiting request with HTTP 503)",
                  file=sys.stderr, flush=True)
        await server.close()
