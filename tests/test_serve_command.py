"""The `servesim serve` command in a subprocess: its banner and BLAS threads, a signal that ends
open streams with 503 and stops it, a named scenario's first variant served, and a bad port
or a model too big for memory refused in one line with exit status 2 before serving, as
`servesim profile` refuses the latter. The server itself: test_http_server.py.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import aiohttp
import pytest

from helpers.http import ROOT, TINY, serve_command


def health_of(url: str) -> int:
    async def health():
        async with aiohttp.ClientSession() as client, client.get(f"{url}/health") as r:
            return r.status
    return asyncio.run(health())


def test_serve_command_serves_continuous_batching_on_one_blas_thread_and_says_so():
    process = serve_command("--port", "0", "--set", *TINY)
    try:
        line = process.stderr.readline()
        assert line.startswith(
            "serving static-vs-continuous (variant continuous): continuous batching, fcfs "
            "queue, model servesim-char64-L1-d32, 64 KV blocks of 8 tokens, 1 BLAS thread, "
            "on http://127.0.0.1:"), line
        assert health_of(line.split()[-1]) == 200
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_signal_ends_open_streams_with_503_and_stops_the_server():
    # an open stream does not hold the shutdown up: the engine ends it first
    process = serve_command("--port", "0", "--set", "model.n_layers=1")
    try:
        url = process.stderr.readline().split()[-1]

        async def stream_through_a_signal() -> list[str]:
            body = {"prompt": "hi", "max_tokens": 4000, "stream": True, "ignore_eos": True}
            events = []
            async with aiohttp.ClientSession() as client, \
                    client.post(f"{url}/v1/completions", json=body) as response:
                async for line in response.content:
                    if line.startswith(b"data: "):
                        events.append(line.decode().strip())
                        if len(events) == 1:
                            process.send_signal(signal.SIGINT)
            return events

        events = asyncio.run(stream_through_a_signal())
        assert events[-1] == "data: [DONE]" and '"code": "engine_stopped"' in events[-2]
        assert len(events) < 4000
        assert process.wait(timeout=60) == 0
        assert "servesim serve: stopping; open requests end now" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_command_with_a_named_scenario_serves_its_first_variant_and_keeps_a_set_count():
    process = serve_command("static-vs-continuous", "--port", "0", "--set", *TINY,
                            OPENBLAS_NUM_THREADS="2")
    try:
        line = process.stderr.readline()
        assert line.startswith("serving static-vs-continuous (variant static): static batching, "
                               "fcfs queue,"), line
        assert ", 2 BLAS threads, on http://" in line, line
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=20)


@pytest.mark.parametrize("args, message", [
    (["--port", "99999"], "argument --port: must be a port from 0 to 65535 (0: any free port), "
                          "got '99999'"),
    (["--port", "0", "--set", *TINY, "engine.num_kv_blocks=100000000000"],
     "engine.num_kv_blocks: serving would need about"),
    (["--port", "0", "--set", *TINY, "model.d_model=262144", "model.d_ff=262144"],
     "model.d_model: serving would need about"),
])
def test_serve_command_refuses_a_bad_port_or_a_model_too_big_for_memory_in_one_line(args,
                                                                                    message):
    process = serve_command(*args)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert stderr.count("\n") == 1 and message in stderr, stderr
    assert stderr.startswith("servesim: error: ")


def test_profile_refuses_a_model_too_big_for_memory_in_one_line():
    result = subprocess.run([sys.executable, "-m", "sim.cli", "profile", "--quick", "--model",
                             "d_model=262144", "d_ff=262144"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("servesim: error: --model: model.d_model: profiling would "
                                     "need about") and result.stderr.count("\n") == 1
