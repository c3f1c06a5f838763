"""What `servesim bench` asks a server before it sends a workload: its model (`GET /v1/models`,
where none is named) and, for text prompts, how many tokens a word is (two probe requests).
Both are asked once a bench, when the first workload is built; what the server could not
answer is noted and the bench goes on without it (a fake OpenAI-compatible server,
`helpers.fake_openai`)."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from aiohttp import web

import scenarios
from helpers.fake_openai import (SCENARIO, answering, counting, model_listing, never_answers,
                                 probe_answer, prompt_length)
from sim.bench import BenchOptions, bench_runs
from sim.bench.prompts import PROBE_WORDS
from sim.cli import main


MODEL_LISTINGS = {
    "HTTP 500": (answering(500, b"down"), "HTTP 500: down"),
    "not JSON": (answering(200, b"<html>"), "the body is not JSON: <html>"),
    "binary": (answering(200, b"\x00\xff" * 10), "the body is not JSON: \\x00\\xff"),
    "an array": (answering(200, b"[1]"), "the body is an array [1], not a JSON object"),
    "data a string": (answering(200, b'{"data": "m"}'),
                      'data is a string "m", not an array of models'),
    "no model": (answering(200, b'{"data": []}'), "it lists no model"),
    "a model without an id": (answering(200, b'{"data": [{"name": "m"}]}'),
                              'data[0] is an object {"name": "m"}, not a model with a string id'),
    "an id a number": (answering(200, b'{"data": [{"id": 5}]}'),
                       'data[0] is an object {"id": 5}, not a model with a string id'),
    "over 8 MiB": (answering(200, b" " * (8 * 2**20 + 1)), "the body is over 8388608 bytes"),
}


@pytest.mark.parametrize("listing, why", MODEL_LISTINGS.values(), ids=MODEL_LISTINGS)
def test_garbage_from_v1_models_is_noted_and_the_bench_goes_on(fake, bench_scenario, listing,
                                                               why):
    fake.models = listing
    run, = bench_runs(scenarios.load(bench_scenario), BenchOptions(fake.url))
    note, = [n for n in run.notes if n.startswith("model:")]
    assert note.startswith(f"model: none named (GET /v1/models: {why}")
    assert [r.status for r in run.results] == ["finished"] * 5
    assert all("model" not in body for body in fake.bodies)


def test_a_listed_model_is_asked_for(fake, bench_scenario):
    run, = bench_runs(scenarios.load(bench_scenario), BenchOptions(fake.url))
    assert "model: fake-model" in run.notes
    assert {body["model"] for body in fake.bodies} == {"fake-model"}


def test_the_record_names_the_model_benchmarked_and_the_default_run_is_the_served_one(
        fake, tmp_path, capsys):
    # vLLM's model_id is the model asked for, not the scenario's; without a scenario, the
    # default one's variant that `servesim serve` serves by default
    out = tmp_path / "bench"
    assert main(["bench", fake.url, "--num-prompts", "3", "--out", str(out), "--quiet"]) == 0
    record = json.loads((out / "summary.json").read_text())
    assert (record["model_id"], record["label"], record["variant"]) == \
        ("fake-model", "continuous", "continuous")
    assert record["backend"] == "servesim-bench" and len(record["date"]) == 15  # vLLM's format


def probe_reporting(prompt_tokens: str):
    return answering(200, b'{"usage": {"prompt_tokens": %s}}' % prompt_tokens.encode())


PROBE_ANSWERS = {
    "HTTP 500": (answering(500, b"down"), "HTTP 500: down"),
    "not JSON": (answering(200, b"{oops"), "the body is not JSON: {oops"),
    "no usage": (answering(200, b"{}"), "the response reports no usage.prompt_tokens"),
    "usage a string": (answering(200, b'{"usage": "x"}'), 'usage is a string "x", not an '
                                                          "object"),
    "count a string": (probe_reporting('"9"'), 'usage.prompt_tokens is a string "9", not an '
                                               "integer count"),
    "count NaN": (probe_reporting("NaN"), "usage.prompt_tokens is a number NaN"),
    "count negative": (probe_reporting("-4"), "usage.prompt_tokens is -4, a negative count"),
    "count 1e30": (probe_reporting("1e30"), "usage.prompt_tokens is a number 1e+30"),
    "the same count for both": (probe_reporting("7"), "the probe's prompt token counts do not "
                                                      "grow with the words: {16: 7, 64: 7}"),
}


@pytest.mark.parametrize("probe, why", PROBE_ANSWERS.values(), ids=PROBE_ANSWERS)
def test_garbage_from_the_text_probe_leaves_prompts_uncalibrated_saying_why(
        fake, bench_scenario, probe, why):
    fake.probe = probe
    options = BenchOptions(fake.url, "/v1/chat/completions", model="m")
    run, = bench_runs(scenarios.load(bench_scenario), options)
    note, = [n for n in run.notes if n.startswith("prompts:")]
    assert f"not calibrated ({why}" in note and "one word is taken as one token" in note
    assert [r.status for r in run.results] == ["finished"] * 5


def test_the_probe_calibrates_text_prompts(fake, bench_scenario):
    run, = bench_runs(scenarios.load(bench_scenario),
                      BenchOptions(fake.url, "/v1/chat/completions", model="m"))
    assert "prompts: text of repeated words, calibrated: 3 tokens a word, +5 tokens a prompt" \
        in run.notes


def test_the_server_is_asked_for_its_model_and_probed_once_for_every_run(fake, tmp_path):
    # three variants of distinct workloads, each sent; the server's answers hold for all
    path = tmp_path / "three.toml"
    path.write_text(SCENARIO + "".join(f'[[variants]]\nname = "v{n}"\n'
                                       f'set = {{ "workload.num_requests" = {n} }}\n'
                                       for n in (2, 3, 4)))
    calls = []
    fake.models, fake.probe = counting(calls, model_listing), counting(calls, probe_answer)
    runs = bench_runs(scenarios.load(path), BenchOptions(fake.url, "/v1/chat/completions"))
    assert [len(run.results) for run in runs] == [2, 3, 4]
    assert sorted(calls) == ["/v1/chat/completions"] * 2 + ["/v1/models"]
    assert all("model: fake-model" in run.notes for run in runs)
    assert all("prompts: text of repeated words, calibrated: 3 tokens a word, +5 tokens a "
               "prompt" in run.notes for run in runs)


def test_the_probes_are_sent_together(fake, bench_scenario):
    # a server that lets every request wait: sent one after the other, they would take two
    # --timeout
    arrived, in_flight, answered = [], [], []

    async def holding(request, body):
        arrived.append(body)
        in_flight.append(len(arrived) - len(answered))
        for _ in range(200):  # until both are in, or 2 s
            if len(arrived) == len(PROBE_WORDS):
                break
            await asyncio.sleep(0.01)
        answered.append(body)
        return await probe_answer(request, body)
    fake.probe = holding
    run, = bench_runs(scenarios.load(bench_scenario),
                      BenchOptions(fake.url, "/v1/chat/completions", model="m"))
    assert in_flight == [1, 2]
    assert "prompts: text of repeated words, calibrated: 3 tokens a word, +5 tokens a prompt" \
        in run.notes


def test_a_server_slow_on_v1_models_is_still_probed(fake, bench_scenario):
    # a listing past --timeout is noted, and the probe, which this server answers, calibrates
    probes = []
    fake.models, fake.probe = never_answers(fake), counting(probes, probe_answer)
    run, = bench_runs(scenarios.load(bench_scenario),
                      BenchOptions(fake.url, "/v1/chat/completions", timeout_s=1))
    assert len(probes) == len(PROBE_WORDS)
    assert "model: none named (GET /v1/models: timed out after 1 s)" in run.notes
    assert "prompts: text of repeated words, calibrated: 3 tokens a word, +5 tokens a prompt" \
        in run.notes
    assert [r.status for r in run.results] == ["finished"] * 5


def test_a_workload_that_cannot_be_built_fails_before_the_server_is_asked(fake, tmp_path):
    # a trace that is not there: refused at once, not after GET /v1/models and the probe
    path = tmp_path / "trace.toml"
    path.write_text(f'[workload]\ntrace = {{ path = "{tmp_path / "gone.jsonl"}" }}\n')
    calls = []
    fake.models, fake.probe = counting(calls, model_listing), counting(calls, probe_answer)
    with pytest.raises(FileNotFoundError, match="gone.jsonl"):
        bench_runs(scenarios.load(path), BenchOptions(fake.url, "/v1/chat/completions"))
    assert calls == []


def test_a_failed_probe_cancels_the_other_rather_than_waiting_for_it(fake, bench_scenario):
    # the 16-word probe fails at once; the 64-word one would hang up to --timeout (none here):
    # it is cancelled, its connection closed, and the bench goes on uncalibrated
    held = []

    async def one_fails(request, body):
        if prompt_length(body) == PROBE_WORDS[0]:
            return web.Response(status=400, text="no")
        for _ in range(2000):  # a guard of 20 s: what waiting for it would take
            if request.transport is None or request.transport.is_closing():
                return web.Response(status=500)
            await asyncio.sleep(0.01)
        held.append(body)
        return await probe_answer(request, body)
    fake.probe = one_fails
    run, = bench_runs(scenarios.load(bench_scenario),
                      BenchOptions(fake.url, "/v1/chat/completions", model="m",
                                   timeout_s=math.inf))
    assert held == []
    assert ("prompts: text of repeated words, not calibrated (HTTP 400: no): one word is taken "
            "as one token") in run.notes


def test_a_silent_probe_leaves_prompts_uncalibrated_saying_so(fake, bench_scenario):
    fake.probe = never_answers(fake)
    run, = bench_runs(scenarios.load(bench_scenario),
                      BenchOptions(fake.url, "/v1/chat/completions", model="m", timeout_s=1))
    assert ("prompts: text of repeated words, not calibrated (timed out after 1 s): one word is "
            "taken as one token") in run.notes
