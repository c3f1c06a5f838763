"""`servesim bench` against servers that misbehave: a fake OpenAI-compatible server (aiohttp,
on a loopback port, on its own thread) answers some requests badly and the rest well. Each bad
answer fails its request alone, with its reason in requests.csv and bench_requests.csv; the
bench finishes, writes every file and measures the healthy requests; the last printed line
counts the failures and the exit status is 1 when nothing succeeded. Bad URLs and endpoints
are refused before anything is sent. (What the bench asks the server before it sends:
`test_bench_server_facts.py`.)"""

from __future__ import annotations

import asyncio
import csv
import json
import socket

import aiohttp
import pytest
from aiohttp import web

import scenarios
from engine.benchmark import summarize
from helpers.fake_openai import (SCENARIO, answering, event_stream, healthy, model_listing,
                                 never_answers, prompt_length, token_chunks)
from sim.bench import BenchOptions, bench_runs
from sim.bench.client import Target, send
from sim.bench.timing import RequestResult
from sim.cli import main

BAD = 2  # of the 5 requests, answered badly; the other 3 well


def rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def bench_cli(capsys, url, bench_scenario, out, *flags) -> tuple[int, str]:
    """`servesim bench` run as a user runs it: (exit status, the last printed line)."""
    status = main(["bench", url, str(bench_scenario), "--out", str(out), "--quiet", *flags])
    return status, capsys.readouterr().out.rstrip("\n").splitlines()[-1]


def bench_with(fake, bench_scenario, *answers, **options):
    """The scenario's one run benched against `fake`, its first arrivals given `answers`."""
    fake.answers = list(answers)
    run, = bench_runs(scenarios.load(bench_scenario), BenchOptions(fake.url, **options))
    return run


def assert_failed_alone(run, reason: str, bad: int = BAD) -> None:
    """`bad` requests failed with `reason` (its start), the rest finished and were measured."""
    failed = [r for r in run.results if not r.finished]
    assert len(failed) == bad and all(r.reason.startswith(reason) for r in failed), \
        [r.reason for r in failed]
    assert run.recorder.reject_reasons == {r.request_id: r.reason for r in failed}
    for r in run.results:
        if r.finished:
            assert len(r.chunk_s) == r.completion_tokens == r.planned_output_tokens
            assert 0 < r.ttft_s() <= r.e2e_s()
    assert summarize(run.recorder)["completed"] == len(run.results) - bad


def assert_files_say_why(out, reasons: list[str], succeeded: int) -> None:
    """requests.csv and bench_requests.csv give each failed request one of `reasons` (each
    reason once), the others finished and were measured; the summaries and the report are
    written."""
    table = rows(out / "bench_requests.csv")
    failed = [r["reason"] for r in table if r["status"] == "failed"]
    assert len(failed) == len(reasons) and len(table) == len(reasons) + succeeded
    for reason in reasons:
        assert sum(f.startswith(reason) for f in failed) == 1, (reason, failed)
    requests = {r["request_id"]: r for r in rows(out / "requests.csv")}
    for r in table:
        row = requests[r["request_id"]]
        assert (row["status"], row["reject_reason"]) == (r["status"], r["reason"])
        if r["status"] == "finished":
            assert 0 < float(row["ttft_s"]) <= float(row["e2e_s"])
    record = json.loads((out / "summary.json").read_text())
    assert (record["completed"], record["failed"]) == (succeeded, len(reasons))
    for name in ("summary.csv", "report.md", "report.html"):
        assert (out / name).is_file()


# --- a malformed stream fails its request alone --------------------------------------------------

def chunk_then_done(payload: str):
    async def answer(request, body):
        return await event_stream(request, [payload, "[DONE]"])
    return answer


def usage_with(**counts) -> str:
    usage = {"prompt_tokens": 5, "completion_tokens": 3}
    return '{"choices": [], "usage": {%s}}' % ", ".join(
        f'"{key}": {counts.get(key, value)}' for key, value in usage.items())


MALFORMED_CHUNKS = {
    "not JSON": ("{oops", "a stream chunk is not JSON: {oops"),
    "JSON not an object": ("[1, 2]", "a stream chunk is an array [1, 2], not a JSON object"),
    "a number too long to read": ('{"usage": {"prompt_tokens": 1%s}}' % ("0" * 5000),
                                  "a stream chunk holds a number too long to read"),
    "nested too deeply": ("[" * 100_000, "a stream chunk nests too deeply to parse"),
    "choices a string": ('{"choices": "nope"}', 'choices is a string "nope", not an array'),
    "a choice not an object": ('{"choices": [7]}', "choices[0] is a number 7, not an object"),
    "text not a string": ('{"choices": [{"text": ["a"]}]}',
                          'choices[0].text is an array ["a"], not a string'),
    "a later choice malformed": ('{"choices": [{"text": "a"}, null]}',
                                 "choices[1] is null, not an object"),
    "usage not an object": ('{"choices": [], "usage": [3]}', "usage is an array [3], not an "
                                                             "object"),
    "negative count": (usage_with(completion_tokens=-1), "usage.completion_tokens is -1, a "
                                                         "negative count"),
    "count a string": (usage_with(completion_tokens='"12"'),
                       'usage.completion_tokens is a string "12", not an integer count'),
    "count a boolean": (usage_with(prompt_tokens="true"),
                        "usage.prompt_tokens is a boolean true, not an integer count"),
    "count NaN": (usage_with(completion_tokens="NaN"),
                  "usage.completion_tokens is a number NaN, not an integer count"),
    "count Infinity": (usage_with(completion_tokens="Infinity"),
                       "usage.completion_tokens is a number Infinity, not an integer count"),
    "count with a fraction": (usage_with(completion_tokens="2.5"),
                              "usage.completion_tokens is a number 2.5, not an integer count"),
    "count 1e30": (usage_with(prompt_tokens="1e30"),
                   "usage.prompt_tokens is a number 1e+30, not an integer count"),
    "count over 2^63": (usage_with(completion_tokens=2**64),
                        f"usage.completion_tokens is a number {2**64}, over 2147483647"),
    "error event": ('{"error": {"message": "overloaded", "code": 503}}',
                    "error in the stream: overloaded"),
}


@pytest.mark.parametrize("payload, reason", MALFORMED_CHUNKS.values(), ids=MALFORMED_CHUNKS)
def test_a_malformed_chunk_fails_its_request_alone(fake, bench_scenario, payload, reason):
    run = bench_with(fake, bench_scenario, *[chunk_then_done(payload)] * BAD, model="m")
    assert_failed_alone(run, reason)


CHAT_CHUNKS = {
    "delta not an object": ('{"choices": [{"delta": "a"}]}',
                            'choices[0].delta is a string "a", not an object'),
    "content not a string": ('{"choices": [{"delta": {"content": 5}}]}',
                             "choices[0].delta.content is a number 5, not a string"),
}


@pytest.mark.parametrize("payload, reason", CHAT_CHUNKS.values(), ids=CHAT_CHUNKS)
def test_a_malformed_chat_chunk_fails_its_request_alone(fake, bench_scenario, payload, reason):
    run = bench_with(fake, bench_scenario, *[chunk_then_done(payload)] * BAD, model="m",
                     endpoint="/v1/chat/completions")
    assert_failed_alone(run, reason)


# --- a bad answer, a broken stream or a silent server fails its request alone --------------------

async def status_with(request, status, body: bytes, content_type="text/plain"):
    return web.Response(status=status, body=body, content_type=content_type)


async def huge_error(request, body):
    return await status_with(request, 500, b"overloaded " * 500_000)  # 5.5 MB


async def binary_error(request, body):
    return await status_with(request, 502, bytes(range(256)) * 4096, "application/octet-stream")


async def empty_error(request, body):
    return web.Response(status=503)


async def whole_json(request, body):
    return web.json_response({"choices": [{"text": "aaa"}]})


async def fifty_megabyte_line(request, body):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    try:
        await response.write(b"data: ")
        for _ in range(50):  # the client gives up after its line limit: stop when it has gone
            await response.write(b"x" * 2**20)
        await response.write(b"\n\ndata: [DONE]\n\n")
    except ConnectionError:
        pass
    return response


async def not_utf8(request, body):
    return await event_stream(request, [b"data: \xff\xfe{}\n\n", "[DONE]"])


async def no_done(request, body):
    return await event_stream(request, token_chunks(body)[:-1])


async def no_choice(request, body):
    # a server that stopped at once: usage, and no token to time
    return await event_stream(request, ['{"choices": [], "usage": {"prompt_tokens": 4, '
                                        '"completion_tokens": 0}}', "[DONE]"])


async def closes_the_connection(request, body):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(f"data: {token_chunks(body)[0]}\n\n".encode())
    request.transport.close()
    return response


async def endless(request, body):
    """Token chunks without end (but for a cap, should the client not go away)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    chunk = f"data: {token_chunks(body)[0]}\n\n".encode()
    try:
        for _ in range(100_000):
            await response.write(chunk)
    except ConnectionError:
        pass
    return response





BAD_ANSWERS = {
    "huge error body": (huge_error, "HTTP 500: overloaded overloaded"),
    "binary error body": (binary_error, "HTTP 502: \\x00\\x01\\x02"),
    "error without a body": (empty_error, "HTTP 503: (no body)"),
    "not an event stream": (whole_json, "HTTP 200 but not an event stream (Content-Type "
                                        'application/json): {"choices": [{"text": "aaa"}]}'),
    "a 50 MB line": (fifty_megabyte_line, "a stream line is longer than aiohttp reads"),
    "not UTF-8": (not_utf8, "a stream line is not UTF-8: data: \\xff\\xfe{}"),
    "no [DONE]": (no_done, "the stream ended before [DONE]"),
    "no choice": (no_choice, "no chunk with a choice before [DONE]"),
    "connection closed": (closes_the_connection, "ClientPayloadError"),
    "a stream that does not stop": (endless, "the stream sent more than "),
}


@pytest.mark.parametrize("answer, reason", BAD_ANSWERS.values(), ids=BAD_ANSWERS)
def test_a_bad_answer_fails_its_request_alone(fake, bench_scenario, answer, reason):
    run = bench_with(fake, bench_scenario, *[answer] * BAD, model="m")
    assert_failed_alone(run, reason)


def test_an_error_body_is_quoted_short_on_one_line(fake, bench_scenario):
    run = bench_with(fake, bench_scenario, huge_error, model="m")
    reason, = [r.reason for r in run.results if not r.finished]
    assert reason == "HTTP 500: " + ("overloaded " * 19)[:200] + "... (its first 200 bytes)"


def test_a_server_that_never_answers_times_out_and_the_rest_are_measured(fake, bench_scenario):
    # the limit holds every request: long enough that a stall of a loaded machine fails none
    # of the others
    run = bench_with(fake, bench_scenario, never_answers(fake), model="m", timeout_s=3)
    assert_failed_alone(run, "timed out after 3 s", bad=1)


def test_cancelling_a_request_stops_it_rather_than_failing_it(fake):
    """Cancellation (and Ctrl-C) is not a server's fault: the request's fault boundary lets it
    through, so the bench stops."""
    fake.answers = [never_answers(fake)]
    result = RequestResult(0, 0.0, 4, 2)

    async def cancelled_while_waiting():
        async with aiohttp.ClientSession() as session:
            request = asyncio.create_task(send(session, Target(fake.url, "/v1/completions",
                                                               "m", 60.0), result, [11] * 4))
            while not fake.bodies:  # until the server holds it
                await asyncio.sleep(0.01)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request

    asyncio.run(cancelled_while_waiting())
    assert result.reason == ""  # no failure recorded: the cancellation went through


# --- the real command: every file says why, and the last line counts the failures ----------------

def test_every_bad_answer_in_one_run_fails_alone_and_the_files_say_why(
        fake, bench_scenario, tmp_path, capsys):
    faults = [(chunk_then_done(payload), reason) for payload, reason in
              MALFORMED_CHUNKS.values()] + list(BAD_ANSWERS.values())
    faults.append((never_answers(fake), "timed out after 5 s"))
    fake.answers = [answer for answer, _ in faults]
    fake.models = answering(200, b"[1]")
    out = tmp_path / "bench"
    total = len(faults) + 3
    status, last = bench_cli(capsys, fake.url, bench_scenario, out, "--num-prompts", str(total),
                             "--timeout", "5")
    assert_files_say_why(out, [reason for _, reason in faults], succeeded=3)
    report = (out / "report.md").read_text()
    assert "model: none named (GET /v1/models: the body is an array [1], not a JSON object)" \
        in report
    assert "## Failed requests" in report and "| choices is a string \"nope\", not an array | 1 |" \
        in report
    assert status == 0
    assert last.startswith(f"bench: 3 of {total} requests succeeded; {len(faults)} failed: 1 ")
    assert last.endswith(f"; {len(faults) - 3} for {len(faults) - 3} other reasons "
                         f"(bench_requests.csv)")


def test_malformed_chat_chunks_and_a_failed_probe_in_one_run(fake, bench_scenario, tmp_path,
                                                            capsys):
    fake.answers = [chunk_then_done(payload) for payload, _ in CHAT_CHUNKS.values()]
    fake.probe = answering(200, b'{"usage": {"prompt_tokens": "many"}}')
    out = tmp_path / "bench"
    status, last = bench_cli(capsys, fake.url, bench_scenario, out, "--model", "m",
                             "--endpoint", "/v1/chat/completions")
    reasons = [reason for _, reason in CHAT_CHUNKS.values()]
    assert_files_say_why(out, reasons, succeeded=5 - len(reasons))
    assert ('not calibrated (usage.prompt_tokens is a string "many", not an integer count)'
            in (out / "report.md").read_text())
    assert (status, last) == (0, f"bench: 3 of 5 requests succeeded; 2 failed: 1 {reasons[0]}; "
                                 f"1 {reasons[1]}")


def test_when_every_request_fails_the_files_are_written_and_the_status_is_1(
        fake, bench_scenario, tmp_path, capsys):
    fake.answers = [chunk_then_done('{"choices": "nope"}')] * BAD
    out = tmp_path / "bench"
    status, last = bench_cli(capsys, fake.url, bench_scenario, out, "--model", "m",
                             "--num-prompts", str(BAD))
    assert status == 1
    assert last == ('bench: 0 of 2 requests succeeded; 2 failed: 2 choices is a string '
                    '"nope", not an array')
    assert [r["status"] for r in rows(out / "requests.csv")] == ["failed"] * BAD
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()


def test_when_every_request_succeeds_the_last_line_says_so(fake, bench_scenario, tmp_path,
                                                          capsys):
    status, last = bench_cli(capsys, fake.url, bench_scenario, tmp_path / "bench", "--model",
                             "m")
    assert (status, last) == (0, "bench: all 5 requests succeeded")


def test_a_workload_bench_cannot_send_is_refused_naming_the_file_before_any_is_sent(
        tmp_path, capsys):
    conversations = tmp_path / "talk.toml"
    conversations.write_text(SCENARIO.replace("num_requests = 5\n", "") + "[workload.sessions]\n"
                             "conversations = 2\nturns = { dist = \"fixed\", value = 2 }\n")
    out = tmp_path / "bench"
    for path, flags, why in ((conversations, [], "workload.sessions: bench sends arrival times"),
                             (tmp_path / "loop.toml", ["--set", 'workload.arrival={process='
                              '"closed_loop", concurrency=2, think_time_s=1}'],
                              "workload.arrival.think_time_s: bench sends each request")):
        if not path.exists():
            path.write_text(SCENARIO)
        assert main(["bench", "http://127.0.0.1:9", str(path), "--out", str(out), *flags]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"servesim: error: {path}: ") and why in err[0]
        assert not out.exists()


def test_a_timeout_of_inf_is_no_limit(fake, bench_scenario, tmp_path, capsys):
    status, last = bench_cli(capsys, fake.url, bench_scenario, tmp_path / "bench", "--timeout",
                             "inf")
    assert (status, last) == (0, "bench: all 5 requests succeeded")


# --- the URL and the endpoint are checked before anything is sent --------------------------------

def test_a_dead_url_fails_every_request_with_status_1(bench_scenario, tmp_path, capsys):
    out = tmp_path / "bench"
    with socket.socket() as sock:  # bound, not listening, while the bench runs: refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        status, last = bench_cli(capsys, f"http://127.0.0.1:{port}", bench_scenario, out,
                                 "--timeout", "5")
    assert status == 1
    assert last.startswith(f"bench: 0 of 5 requests succeeded; 5 failed: 5 "
                           f"ClientConnectorError: Cannot connect to host 127.0.0.1:{port}")
    assert [r["status"] for r in rows(out / "bench_requests.csv")] == ["failed"] * 5
    assert (out / "report.html").is_file() and (out / "summary.json").is_file()
    assert not (out / "steps.csv").exists()  # a client sees no steps


BAD_URLS = {
    "notaurl": "no http:// or https:// at its start",
    "ftp://x": "no http:// or https:// at its start",
    "http://": "there is no host",
    "http://127.0.0.1:99999": "the port '99999' is not a number in 1-65535",
    "http://127.0.0.1:0": "the port '0' is not a number in 1-65535",
    "http://127.0.0.1:8000/?key=1": "a base URL has no ?query or #fragment (the endpoint is "
                                    "appended to it)",
    "http://127.0.0.1 :8000": "it holds spaces or control characters",
}


@pytest.mark.parametrize("url, problem", BAD_URLS.items(), ids=BAD_URLS)
@pytest.mark.parametrize("command", ["bench", "validate"])
def test_a_bad_url_is_a_usage_error_naming_the_flag(bench_scenario, tmp_path, capsys, command,
                                                    url, problem):
    argv = (["bench", url, str(bench_scenario)] if command == "bench" else
            ["validate", str(bench_scenario), "--against", url])
    status = main([*argv, "--out", str(tmp_path / "out"), "--quiet"])
    flag = "URL" if command == "bench" else "--against"
    err = capsys.readouterr().err
    assert status == 2
    assert err == (f"servesim: error: {flag} {url!r}: {problem}; expected "
                   f"http(s)://HOST[:PORT][/PATH] with a port in 1-65535, e.g. "
                   f"http://127.0.0.1:8000\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["bench", "validate"])
@pytest.mark.parametrize("endpoint", ["v1/completions", ""])  # given empty: not the default
def test_an_endpoint_without_a_leading_slash_is_a_usage_error(fake, bench_scenario, tmp_path,
                                                              capsys, command, endpoint):
    argv = (["bench", fake.url, str(bench_scenario)] if command == "bench" else
            ["validate", str(bench_scenario), "--against", fake.url])
    status = main([*argv, "--endpoint", endpoint, "--out", str(tmp_path / "out")])
    assert status == 2
    assert capsys.readouterr().err == (
        f"servesim: error: --endpoint {endpoint!r}: expected a path starting with '/', "
        f"e.g. /v1/completions or /v1/chat/completions, without spaces\n")
    assert fake.bodies == [] and not (tmp_path / "out").exists()


def test_token_id_prompts_for_a_chat_endpoint_are_a_usage_error(fake, bench_scenario, tmp_path,
                                                               capsys):
    # a chat message is text; any chat endpoint is one (a prefix before /chat/completions too)
    for endpoint in ("/v1/chat/completions", "/api/v1/chat/completions"):
        status = main(["bench", fake.url, str(bench_scenario), "--endpoint", endpoint,
                       "--prompt", "ids", "--out", str(tmp_path / "out")])
        assert status == 2
        assert capsys.readouterr().err == (
            f"servesim: error: --prompt ids: a chat endpoint ({endpoint}) takes messages of "
            f"text, not token ids; use --prompt text\n")
    assert fake.bodies == [] and not (tmp_path / "out").exists()
    assert BenchOptions("http://127.0.0.1:8000", "/api/v1/chat/completions").prompt_kind == \
        "text"


def test_a_url_ending_in_v1_before_a_v1_endpoint_is_a_usage_error(fake, bench_scenario, tmp_path,
                                                                 capsys):
    # the OpenAI client's base URL style: every request would go to /v1/v1/completions
    status = main(["bench", fake.url + "/v1", str(bench_scenario), "--out", str(tmp_path / "o")])
    assert status == 2
    assert "ends in /v1 and --endpoint /v1/completions begins with it, so every request would " \
           "go to /v1/v1/completions" in capsys.readouterr().err
    assert fake.bodies == [] and not (tmp_path / "o").exists()


def test_bench_options_refuse_a_bad_url_or_endpoint():
    with pytest.raises(ValueError, match="^url 'notaurl': no http"):
        BenchOptions("notaurl")
    with pytest.raises(ValueError, match="^endpoint 'v1/completions': expected a path"):
        BenchOptions("http://127.0.0.1:8000", "v1/completions")


def test_validate_against_a_dead_server_says_so_and_fails(tmp_path, capsys):
    from sim.cli import main

    scenario = tmp_path / "small.toml"
    scenario.write_text('[cost]\nmodel = "linear"\n[workload]\nnum_requests = 3\n'
                        'arrival = { process = "poisson", rate = 8.0 }\n'
                        'prompt_tokens = { dist = "fixed", value = 8 }\n'
                        'output_tokens = { dist = "fixed", value = 4 }\n')
    out = tmp_path / "v"
    assert main(["validate", str(scenario), "--against", "http://127.0.0.1:9", "--out",
                 str(out), "--quiet"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("bench: 0 of 3 requests succeeded; 3 failed:")
    assert (out / "manifest.json").is_file()


def test_validate_against_a_server_failing_some_requests_says_the_sides_are_unlike(
        fake, bench_scenario, tmp_path, capsys):
    # the server's failed requests count on neither side of its figures, the simulation serves
    # them: the headline says so and the status is 1
    from sim.cli import main

    fake.answers = [empty_error] * BAD
    out = tmp_path / "v"
    status = main(["validate", str(bench_scenario), "--against", fake.url, "--out", str(out),
                   "--quiet", "--set", 'cost.model="linear"'])
    printed = capsys.readouterr().out
    assert status == 1
    assert (f"but over unlike requests: of 5, {BAD} finished in the simulation and not on the "
            f"server") in printed
    assert "unlike requests" in (out / "report.md").read_text()


def test_under_max_concurrency_nothing_is_sent_after_max_seconds(fake, bench_scenario):
    # one slot, held 0.5 s by the first request: by then max_seconds has passed, and the
    # others, which waited for the slot, are never sent (as the simulator's client slots)
    async def slow(request, body):
        await asyncio.sleep(0.5)
        return await healthy(request, body)

    fake.answers = [slow]
    run, = bench_runs(scenarios.load(bench_scenario, ["workload.max_concurrency=1",
                                                     "workload.max_seconds=0.2"]),
                      BenchOptions(fake.url, model="m"))
    assert [r.request_id for r in run.results] == [0] and run.results[0].finished
    assert len(fake.bodies) == 1 and run.recorder.num_requests == 1
    assert "4 requests not sent: workload.max_seconds passed while they waited for a slot" \
        in run.notes


def test_validate_against_counts_a_request_both_sides_refuse_as_alike(
        fake, bench_scenario, tmp_path, capsys):
    # prompts past the context are refused by the server (400) and by the simulation alike:
    # the two sides count the same requests
    from sim.cli import main

    context = 14

    async def as_the_context_allows(request, body):
        if prompt_length(body) + body["max_tokens"] > context:
            return web.json_response({"error": {"message": "too long"}}, status=400)
        return await healthy(request, body)

    fake.answers = [as_the_context_allows] * 5
    out = tmp_path / "v"
    status = main(["validate", str(bench_scenario), "--against", fake.url, "--out", str(out),
                   "--quiet", "--set", 'cost.model="linear"', f"model.max_seq_len={context}",
                   "engine.block_size=2"])
    printed = capsys.readouterr().out
    refused = [r for r in rows(out / "simulate" / "requests.csv") if r["status"] == "rejected"]
    assert 0 < len(refused) < 5, "the case needs requests refused and served"
    assert status == 0 and "unlike" not in printed


def test_openai_api_key_is_sent_as_vllm_sends_it_and_a_urls_password_is_not_shown(
        fake, bench_scenario, tmp_path, capsys, monkeypatch):
    """`vllm bench serve` sends `Authorization: Bearer $OPENAI_API_KEY`, and so does bench; a
    URL's own credentials go as basic authentication, and its password is never written."""
    seen = []

    async def models(request):
        seen.append(request.headers.get("Authorization"))
        return await model_listing(request)

    async def answer(request, body):
        seen.append(request.headers.get("Authorization"))
        return await healthy(request, body)

    fake.models = models
    fake.answers = [answer] * 5  # every request of the scenario
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    status, _ = bench_cli(capsys, fake.url, bench_scenario, tmp_path / "keyed")
    assert status == 0 and seen == ["Bearer sk-test"] * 6  # the listing and every request
    url = fake.url.replace("http://", "http://alice:s3cret@")
    status, _ = bench_cli(capsys, url, bench_scenario, tmp_path / "userinfo")
    assert status == 0 and seen[-1].startswith("Basic ")  # the URL's, not the key
    written = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "userinfo").iterdir()
               if p.suffix in (".md", ".html", ".json", ".csv")}
    assert "alice:***@127.0.0.1" in written["report.md"]
    assert not [name for name, text in written.items() if "s3cret" in text]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test\r")  # read from a file with a CRLF
    assert main(["bench", fake.url, str(bench_scenario), "--out", str(tmp_path / "crlf"),
                 "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        "servesim: error: OPENAI_API_KEY holds '\\r', which an Authorization header cannot "
        "carry; set it to the key alone")
    assert len(seen) == 7 and not (tmp_path / "crlf").exists()  # nothing sent or written


def test_a_models_name_with_control_characters_is_written_escaped(fake, bench_scenario,
                                                                    tmp_path, capsys):
    """A name /v1/models gives is the server's text: it cannot start a heading in report.md
    or clear the terminal."""
    async def models(request):
        return web.json_response({"data": [{"id": "m\n# pwned\x1b[2J"}]})

    fake.models = models
    status, _ = bench_cli(capsys, fake.url, bench_scenario, tmp_path / "out")
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert status == 0 and "model: m # pwned\\x1b[2J" in report
    assert "\x1b" not in report and "\n# pwned" not in report
