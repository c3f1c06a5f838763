"""HTTP overhead of `servesim serve`: what streaming over loopback costs on top of the engine.

For the default model and a 1-layer model (the default scenario's continuous variant):
- streamed tokens/s: --requests streaming completions (all sent at once, --max-tokens tokens
  each, EOS ignored) to a `servesim serve` process, against the engine's own rate for the same
  requests stepped in this process without HTTP; the difference per token is the overhead;
- request rate: --requests one-token completions, --concurrency at a time, non-streamed: the
  requests/s the server completes, where its own per-request overhead (HTTP, JSON, the hand-off
  between threads) dominates, all the more with the 1-layer model.
The client runs in this process, the server in its own; both run BLAS on one thread, as
`servesim serve` does unless a count is set. The machine's state is printed with the figures:
the seconds a fixed pure-Python loop takes (its speed) and the load average.

    python benchmarks/http_overhead.py
    python benchmarks/http_overhead.py --requests 16 --max-tokens 32   # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path


import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cli.flag_types import positive_integer  # noqa: E402
from sim.profiling import threads  # noqa: E402  (imports nothing heavy)

threads.apply(threads.DEFAULT_THREADS)  # before NumPy loads: the BLAS threads `serve` runs with

import scenarios  # noqa: E402
from engine.sequence import Sequence  # noqa: E402
from sim.http import engine_for  # noqa: E402
from sim.http.text import model_vocab  # noqa: E402
from sim_speed import machine_state  # noqa: E402  (benchmarks/ is on the path)

MODELS = {"default": [], "1-layer": ["model.n_layers=1"]}
PROMPT = "the quick brown fox jumps over the lazy dog"


def config(sets: list[str]) -> dict:
    specs = scenarios.load(scenarios.DEFAULT_SCENARIO, sets).runs()
    return next(s for s in specs if s.variant == "continuous").config


def engine_tokens_per_s(sets: list[str], n: int, max_tokens: int) -> float:
    """The engine alone: n requests queued at once, stepped until done."""
    engine, model = engine_for(config(sets))
    vocab = model_vocab(len(model.vocab["id_to_token"]))
    ids = [vocab["token_to_id"]["<bos>"]] + [vocab["token_to_id"][c] for c in PROMPT]
    for i in range(n):
        engine.add_request(Sequence(f"r{i}", len(ids), max_tokens, prompt_token_ids=ids))
    t0 = time.perf_counter()
    while engine.has_unfinished():
        engine.step(time.perf_counter() - t0)
    return n * max_tokens / (time.perf_counter() - t0)


class ServerProcess:
    """`servesim serve` in its own process, on a free loopback port."""

    def __init__(self, sets: list[str]):
        argv = [sys.executable, "-m", "sim.cli", "serve", "--port", "0", "--variant",
                "continuous", *(["--set", *sets] if sets else [])]
        self.process = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        line = self.process.stderr.readline()
        if not (line.startswith("serving ") and ", on http://" in line):
            raise RuntimeError(f"servesim serve did not start: {line}")
        self.url = line.split()[-1]

    def close(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=30)


async def _streamed(url: str, n: int, max_tokens: int) -> tuple[int, float]:
    body = {"prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}

    async def one(client) -> int:
        tokens = 0
        async with client.post(f"{url}/v1/completions", json=body) as response:
            async for line in response.content:
                tokens += line.startswith(b"data: {")
        return tokens

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(one(client) for _ in range(n)))
        return sum(counts), time.perf_counter() - t0


async def _request_rate(url: str, n: int, concurrency: int) -> float:
    body = {"prompt": PROMPT, "max_tokens": 1}
    gate = asyncio.Semaphore(concurrency)

    async def one(client) -> None:
        async with gate, client.post(f"{url}/v1/completions", json=body) as response:
            json.loads(await response.read())

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(one(client) for _ in range(n)))
        return n / (time.perf_counter() - t0)


def measure(name: str, sets: list[str], args) -> None:
    engine_rate = engine_tokens_per_s(sets, args.requests, args.max_tokens)
    server = ServerProcess(sets)
    try:
        tokens, wall_s = asyncio.run(_streamed(server.url, args.requests, args.max_tokens))
        rate = asyncio.run(_request_rate(server.url, 10 * args.requests, args.concurrency))
    finally:
        server.close()
    assert tokens == args.requests * args.max_tokens, "a streamed token went missing"
    http_rate = tokens / wall_s
    overhead_us = 1e6 * (1 / http_rate - 1 / engine_rate)
    print(f"{name:>8}: engine {engine_rate:8.0f} tokens/s; over HTTP {http_rate:8.0f} tokens/s "
          f"({overhead_us:6.1f} us overhead per streamed token); one-token requests "
          f"{rate:6.0f} /s at concurrency {args.concurrency}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=positive_integer, default=64,
                        help="streamed requests (default 64)")
    parser.add_argument("--max-tokens", type=positive_integer, default=128,
                        help="tokens each (default 128)")
    parser.add_argument("--concurrency", type=positive_integer, default=64,
                        help="one-token requests in flight (default 64)")
    args = parser.parse_args(argv)
    print(machine_state())
    for name, sets in MODELS.items():
        measure(name, sets, args)
    print(machine_state())


if __name__ == "__main__":
    main()
