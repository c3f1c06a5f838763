"""Token pace of `servesim serve` on a busy machine: TPOT quiet and beside busy processes.

Starts `servesim serve` (the real command, in its own process: the default scenario's continuous
variant, the default model unless --set says otherwise) and streams a fixed workload to it:
--requests completions of --max-tokens tokens each (EOS ignored), --concurrency at a time. Each
request's TPOT is measured on the client, (last token - first token) / (tokens - 1). Each
repeat measures the workload quiet, then with --busy processes spinning a pure-Python loop
(`python -c "while True: pass"`), side by side; printed per repeat, then the medians and
spreads of the mean and p50 TPOT and of their ratio, with the machine's state (CPU count, load
average, a fixed Python loop's time) before and after.

`servesim serve` runs BLAS on one thread unless a count is set; --blas-threads N sets it for
the server (OPENBLAS_NUM_THREADS and the rest), to compare with BLAS on every core.

    python benchmarks/serve_under_load.py
    python benchmarks/serve_under_load.py --blas-threads 2 --repeats 1   # BLAS on both cores
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path


import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cli.flag_types import positive_integer  # noqa: E402
from sim.profiling.threads import THREAD_ENV  # noqa: E402  (imports nothing heavy)
from sim_speed import machine_state  # noqa: E402  (benchmarks/ is on the path)

PROMPT = "the quick brown fox jumps over the lazy dog"
BUSY_LOOP = "while True: pass"


class ServeProcess:
    """`servesim serve --port 0` in its own process; `url` once it listens."""

    def __init__(self, sets: list[str], blas_threads: int | None):
        env = {k: v for k, v in os.environ.items() if k not in THREAD_ENV}
        if blas_threads is not None:
            env |= {name: str(blas_threads) for name in THREAD_ENV}
        argv = [sys.executable, "-m", "sim.cli", "serve", "--port", "0",
                *(["--set", *sets] if sets else [])]
        self.process = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True,
                                        env=env)
        self.banner = self.process.stderr.readline().strip()
        found = re.search(r", on (http://\S+)$", self.banner)
        if found is None:
            self.process.kill()
            raise RuntimeError(f"servesim serve did not start: {self.banner}")
        self.url = found.group(1)

    def close(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=30)


class BusyProcesses:
    """`n` processes spinning a Python loop, until closed."""

    def __init__(self, n: int):
        self.processes = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]

    def close(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


async def _tpot_s(client, url: str, max_tokens: int) -> float:
    """One streamed completion: its client-side TPOT in seconds."""
    body = {"prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    times = []
    async with client.post(f"{url}/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if line.startswith(b"data: {"):
                times.append(time.perf_counter())
    assert len(times) == max_tokens, f"{len(times)} of {max_tokens} tokens came"
    return (times[-1] - times[0]) / (len(times) - 1)


async def _workload(url: str, args) -> list[float]:
    gate = asyncio.Semaphore(args.concurrency)

    async def one(client) -> float:
        async with gate:
            return await _tpot_s(client, url, args.max_tokens)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        return list(await asyncio.gather(*(one(client) for _ in range(args.requests))))


def tpot_ms(url: str, args) -> dict:
    """Mean and p50 TPOT (ms) of one pass of the workload."""
    tpots = asyncio.run(_workload(url, args))
    return {"mean": 1e3 * statistics.fmean(tpots), "p50": 1e3 * statistics.median(tpots)}


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):7.2f} (min {min(values):.2f}, "
            f"max {max(values):.2f})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=positive_integer, default=24,
                        help="streamed requests a pass "
                                                                   "(default 24)")
    parser.add_argument("--max-tokens", type=positive_integer, default=64,
                        help="tokens each (default 64)")
    parser.add_argument("--concurrency", type=positive_integer, default=4,
                        help="in flight (default 4)")
    parser.add_argument("--busy", type=int, default=2, help="busy processes (default 2)")
    parser.add_argument("--repeats", type=positive_integer, default=3,
                        help="quiet/busy pairs (default 3)")
    parser.add_argument("--blas-threads", type=positive_integer,
                        help="BLAS threads of the server (default: "
                                                         "what servesim serve sets, one)")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="scenario overrides for the server, e.g. model.n_layers=1")
    args = parser.parse_args(argv)
    print(machine_state())
    server = ServeProcess(args.set, args.blas_threads)
    print(server.banner)
    runs = []
    try:
        tpot_ms(server.url, args)  # warm up: first steps, connections, caches
        for repeat in range(args.repeats):
            quiet = tpot_ms(server.url, args)
            busy_processes = BusyProcesses(args.busy)
            try:
                time.sleep(0.5)  # let them take their share of the cores
                busy = tpot_ms(server.url, args)
                load = os.getloadavg()[0]
            finally:
                busy_processes.close()
            runs.append((quiet, busy))
            print(f"repeat {repeat + 1}: TPOT quiet mean {quiet['mean']:.2f} ms, p50 "
                  f"{quiet['p50']:.2f} ms; with {args.busy} busy processes mean "
                  f"{busy['mean']:.2f} ms, p50 {busy['p50']:.2f} ms (load average {load:.2f}); "
                  f"ratio mean x{busy['mean'] / quiet['mean']:.2f}, "
                  f"p50 x{busy['p50'] / quiet['p50']:.2f}")
    finally:
        server.close()
    for key in ("mean", "p50"):
        quiet, busy = [q[key] for q, _ in runs], [b[key] for _, b in runs]
        ratio = [b / q for q, b in zip(quiet, busy)]
        print(f"TPOT {key:>4} ms: quiet {spread(quiet)}; busy {spread(busy)}; "
              f"ratio {spread(ratio)}")
    print(machine_state())


if __name__ == "__main__":
    main()
