"""`servesim serve`: one scenario's engine (its model, engine and scheduler settings; the
weights from the model's seed) behind the HTTP server, until SIGINT or SIGTERM.

The scenario's workload is not used: the requests come from HTTP clients. Sampling draws from
the scenario seed's "sampling" stream, or from a request's own `seed`.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.model import ModelConfig, init_params

from .server import Model, start_server
from .text import model_vocab


def engine_for(config: dict) -> tuple[LLMEngine, Model]:
    """The real engine of a resolved run config, and the model it serves. A config that has
    no NumPy model to serve (a hardware model, a cluster) raises ValueError."""
    from sim.runner import build_scheduler, hardware_of
    from sim.workloads.builder import seeded_streams

    if hardware_of(config) is not None or config.get("cluster") is not None:
        raise ValueError("serve runs one NumPy engine: a scenario with cost.model = "
                         "\"hardware\" or a [cluster] cannot be served")
    model = ModelConfig(**config["model"])
    vocab = model_vocab(model.vocab_size)
    scheduler = build_scheduler(config, model.max_seq_len)
    swap = scheduler.swap
    executor = NumpyExecutor(init_params(model), scheduler.block_manager,
                             rng=seeded_streams(config["seed"])["sampling"],
                             swap_blocks=swap.num_blocks if swap is not None else 0)
    model_id = f"servesim-char{model.vocab_size}-L{model.n_layers}-d{model.d_model}"
    return LLMEngine(scheduler, executor), Model(model_id, vocab, model.max_seq_len)


def serve_scenario(config: dict, host: str, port: int, max_waiting: int | None = None) -> None:
    """Serve until SIGINT or SIGTERM; "serving on http://HOST:PORT" goes to stderr once the
    port listens."""
    engine, model = engine_for(config)
    asyncio.run(_serve_until_signal(engine, model, host, port, max_waiting))


async def _serve_until_signal(engine: LLMEngine, model: Model, host: str, port: int,
                              max_waiting: int | None) -> None:
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = await start_server(engine, model, host, port, max_waiting)
    print(f"serving on {server.url}", file=sys.stderr, flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
