"""`servesim bench` against servers that misbehave: a fake OpenAI-compatible server (aiohttp,
on a loopback port, on its own thread) answers some requests badly and the rest well. Each bad
answer fails its request alone, with its reason in requests.csv and bench_requests.csv; the
bench finishes, writes every file and measures the healthy requests; the last printed line
counts the failures and the exit status is 1 when nothing succeeded. (What the bench asks the
server before it sends: `test_bench_server_facts.py`; its URL, endpoint and key:
`test_bench_urls.py`; `validate --against` a server that fails: `test_validate_against.py`.)"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

import scenarios
from engine.benchmark import summarize
from helpers.bench import bench_cli, rows
from helpers.fake_openai import (SCENARIO, answering, event_stream, healthy, never_answers,
                                 token_chunks)
from sim.bench import BenchOptions, bench_runs
from sim.bench.client import send
from sim.bench.http_io import Target
from sim.bench.timing import RequestResult
from sim.cli import main

BAD = 2  # of the 5 requests, answered badly; the other 3 well


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
