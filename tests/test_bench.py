"""`servesim bench`'s pure parts: the SSE stream, the client's latencies, prompts of a given
token count and the records the reports read."""

import asyncio
import math

import numpy as np
import pytest

from engine.benchmark import summarize
from engine.vllm_figures import peak_figures, vllm_summary
from sim.bench.checked import BadResponse, token_count
from sim.bench.client import read_stream
from sim.bench.outcome import outcome_line
from sim.bench.prompts import TextScale, fit_text_scale, id_prompts, text_prompt
from sim.bench.recorder import BenchRecorder
from sim.bench.sse import DONE, chunk_text, chunk_usage, event_data, parse_chunk
from sim.bench.timing import RequestResult, max_in_flight


def finished(request_id, sent, chunks, end, completion=None):
    result = RequestResult(request_id, sent, 8, len(chunks), sent_s=sent, chunk_s=list(chunks),
                           end_s=end, completion_tokens=completion, status="finished")
    return result


async def lines_of(*lines):
    for line in lines:
        yield line


def test_event_data_reads_data_lines_and_skips_comments_and_other_fields():
    assert event_data(b'data: {"a": 1}\n') == '{"a": 1}'
    assert event_data(b'data:{"a": 1}\r\n') == '{"a": 1}'
    assert event_data(b"data: [DONE]\n") == DONE
    assert event_data(b": keep-alive\n") is None
    assert event_data(b"event: message\n") is None
    assert event_data(b"\n") is None


def test_chunk_text_of_completions_and_chat_and_usage_chunks():
    assert chunk_text({"choices": [{"text": "ab"}]}, chat=False) == "ab"
    assert chunk_text({"choices": [{"delta": {"content": "c"}}]}, chat=True) == "c"
    assert chunk_text({"choices": [{"delta": {"role": "assistant"}}]}, chat=True) == ""
    usage_only = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
    assert chunk_text(usage_only, chat=False) == ""
    assert chunk_usage(usage_only) == (5, 3)


def test_a_chunk_that_is_not_json_is_a_value_error():
    with pytest.raises(ValueError, match="not JSON"):
        parse_chunk("{oops")


def test_read_stream_times_every_chunk_with_a_choice_and_takes_the_server_usage():
    # vLLM's rule: a chunk with a choice is a token's, its text empty (a special token) or not
    result = RequestResult(0, 0.0, 4, 3)
    stream = lines_of(b'data: {"choices": [{"text": "a"}]}\n', b"\n",
                      b'data: {"choices": [{"text": ""}]}\n',
                      b'data: {"choices": [{"text": "b"}]}\n',
                      b'data: {"choices": [], "usage": {"prompt_tokens": 4, '
                      b'"completion_tokens": 3}}\n', b"data: [DONE]\n")
    asyncio.run(read_stream(stream, result, chat=False))
    assert result.status == "finished"
    assert len(result.chunk_s) == 3
    assert (result.prompt_tokens, result.completion_tokens) == (4, 3)


def test_a_stream_without_a_choice_before_done_fails_as_in_vllm():
    result = RequestResult(0, 0.0, 4, 2)
    asyncio.run(read_stream(lines_of(b'data: {"choices": [], "usage": {"prompt_tokens": 4, '
                                     b'"completion_tokens": 0}}\n', b"data: [DONE]\n"),
                            result, False))
    assert (result.status, result.chunk_s) == ("failed", [])
    assert result.reason.startswith("no chunk with a choice before [DONE]")


def test_a_stream_that_ends_before_done_fails_with_its_reason():
    result = RequestResult(0, 0.0, 4, 2)
    asyncio.run(read_stream(lines_of(b'data: {"choices": [{"text": "a"}]}\n'), result, False))
    assert result.status == "failed"
    assert "before [DONE]" in result.reason


def test_an_error_inside_the_stream_fails_the_request():
    result = RequestResult(0, 0.0, 4, 2)
    asyncio.run(read_stream(lines_of(b'data: {"error": {"message": "overloaded"}}\n'), result,
                            False))
    assert (result.status, result.reason) == ("failed", "error in the stream: overloaded")


def test_latencies_follow_the_definitions():
    result = finished(0, sent=10.0, chunks=[10.5, 10.7, 11.0], end=11.1)
    assert result.ttft_s() == pytest.approx(0.5)
    assert result.e2e_s() == pytest.approx(1.1)
    assert result.tpot_s() == pytest.approx((1.1 - 0.5) / 2)
    assert result.itl_s() == pytest.approx([0.2, 0.3])


def test_output_tokens_are_the_server_count_when_reported_else_the_chunks():
    assert finished(0, 0.0, [0.1, 0.2], 0.3).output_tokens == 2
    assert finished(0, 0.0, [0.1, 0.2], 0.3, completion=5).output_tokens == 5


def test_one_output_token_has_no_tpot():
    assert math.isnan(finished(0, 0.0, [0.1], 0.1).tpot_s())


def test_max_in_flight_counts_overlapping_requests():
    results = [finished(0, 0.0, [0.5], 1.0), finished(1, 0.5, [0.9], 2.0),
               finished(2, 1.0, [1.5], 3.0)]  # 2 starts as 0 ends: not overlapping
    assert max_in_flight(results) == 2


def test_fit_text_scale_is_the_line_through_the_probe():
    scale = fit_text_scale({16: 100, 64: 292})  # 4 tokens a word, 36 for the template
    assert scale.words_for(36 + 4 * 50) == 50
    assert TextScale().words_for(0) == 1


def test_peak_tokens_a_second_count_the_seconds_that_hold_tokens_not_the_span():
    """A benchmark whose last token came 10^12 s after the first (a stalled server, a bad
    clock): vLLM's one-second buckets are counted for the seconds that hold a token, never an
    array of the span's length."""
    ok = finished(0, 0.0, [0.5, 0.7, 1e12], 1e12 + 1)
    other = finished(1, 0.0, [0.6, 1e12 + 0.5], 1e12 + 1)
    assert peak_figures(BenchRecorder([ok, other])) == {"max_output_tokens_per_s": 3.0,
                                                        "max_concurrent_requests": 2}


def test_text_prompts_start_with_their_index_so_no_two_share_a_prefix():
    assert text_prompt(3, 4, TextScale()).startswith("3 ")
    assert text_prompt(3, 4, TextScale()) != text_prompt(4, 4, TextScale())


def test_id_prompts_have_the_planned_lengths():
    prompts = id_prompts(np.array([3, 7]), np.random.default_rng(0))
    assert [len(p) for p in prompts] == [3, 7]


def test_the_recorder_gives_the_summaries_the_client_latencies_and_counts_failures():
    ok = finished(0, 0.0, [0.5, 0.7, 1.0], 1.1)
    failed = RequestResult(1, 0.2, 8, 3, sent_s=0.2, end_s=0.3).fail("HTTP 500: boom")
    recorder = BenchRecorder([ok, failed])
    summary = summarize(recorder)
    assert summary["completed"] == 1 and summary["unfinished"] == 1
    assert summary["ttft_mean_s"] == pytest.approx(0.5)
    assert summary["itl_mean_s"] == pytest.approx(0.25)
    assert math.isnan(summary["queue_mean_s"]) and math.isnan(summary["mean_batch_size"])
    # what a client cannot see is unknown, never a fake 0
    assert math.isnan(summary["preemptions"]) and math.isnan(summary["prefill_tokens_saved"])
    assert math.isnan(summary["prefix_cache_hit_rate"])
    assert vllm_summary(summary)["failed"] == 1
    columns = recorder.request_columns()
    assert columns["status"] == ["finished", "failed"]
    assert all(math.isnan(v) for v in [*columns["preemptions"], *columns["cached_tokens"]])
    assert recorder.reject_reasons == {1: "HTTP 500: boom"}
    assert summary["duration_s"] == pytest.approx(1.1)  # the failure ended before the finish


def test_the_duration_runs_to_the_last_request_given_up_on_as_vllms():
    # a request timing out at 6 s after the last finish at 1.1 s: 2 requests over 6 s
    ok = finished(0, 0.0, [0.5, 0.7, 1.0], 1.1)
    late = RequestResult(1, 0.2, 8, 3, sent_s=0.2, end_s=6.0).fail("timed out after 5.8 s")
    summary = summarize(BenchRecorder([ok, late]))
    assert summary["duration_s"] == pytest.approx(6.0)
    assert summary["request_throughput"] == pytest.approx(1 / 6.0)
    # a request sent in the warm-up and failed late is the warm-up's
    warm = summarize(BenchRecorder([finished(0, 0.5, [0.9, 1.0], 1.1), late]), warmup_s=0.3)
    assert warm["duration_s"] == pytest.approx((1.1 - 0.2) - 0.3)  # from the first send


@pytest.mark.parametrize("value", [0, 1, 2**31 - 1])
def test_a_token_count_is_a_non_negative_integer_within_bounds(value):
    assert token_count(value, "usage.prompt_tokens") == value


@pytest.mark.parametrize("value, why", [
    (-1, "usage.x is -1, a negative count"),
    (2**31, "usage.x is a number 2147483648, over 2147483647"),
    (True, "usage.x is a boolean true, not an integer count"),
    (3.0, "usage.x is a number 3.0, not an integer count"),
    (math.nan, "usage.x is a number NaN, not an integer count"),
    (math.inf, "usage.x is a number Infinity, not an integer count"),
    ("7", 'usage.x is a string "7", not an integer count'),
    ([7], "usage.x is an array [7], not an integer count"),
    (None, "usage.x is null, not an integer count"),
])
def test_anything_else_is_not_a_token_count_and_the_reason_says_what_it_was(value, why):
    with pytest.raises(BadResponse) as raised:
        token_count(value, "usage.x")
    assert str(raised.value).startswith(why)


def test_a_reason_is_one_line_cut_short_saying_how_long_it_was():
    result = RequestResult(0, 0.0, 4, 2).fail("HTTP 500:\n" + "x" * 1000)
    assert result.reason == "HTTP 500: " + "x" * 290 + "... (1010 characters)"
    # a server's control characters (clear the screen, set the title, ring) do not reach the
    # terminal or the CSV as they are
    result = RequestResult(0, 0.0, 4, 2).fail("error in the stream: \x1b[2J\x1b]0;pwned\x07 x")
    assert result.reason == "error in the stream: \\x1b[2J\\x1b]0;pwned\\x07 x"
    # cut before escaping, the length the server's; letters, emoji and their joiners as they are
    result = RequestResult(0, 0.0, 4, 2).fail("\x1b" * 400)
    assert result.reason == "\\x1b" * 300 + "... (400 characters)"
    text = "débit 👩\u200d🔬 \u202eevil"
    assert RequestResult(0, 0.0, 4, 2).fail(text).reason == "débit 👩\u200d🔬 \\u202eevil"


def test_the_outcome_line_names_the_most_common_reasons_with_their_counts():
    def failed(i, reason):
        return RequestResult(i, 0.0, 4, 2).fail(reason)
    results = ([finished(0, 0.0, [0.1], 0.2)] + [failed(i, "HTTP 503: busy") for i in (1, 2, 3)]
               + [failed(4, "timed out after 5 s"), failed(5, "b"), failed(6, "c"),
                  failed(7, "c"), failed(8, "d")])
    assert outcome_line(results) == (
        "bench: 1 of 9 requests succeeded; 8 failed: 3 HTTP 503: busy; 2 c; "
        "1 timed out after 5 s; 2 for 2 other reasons (bench_requests.csv)")
    assert outcome_line(results[:2]) == ("bench: 1 of 2 requests succeeded; 1 failed: 1 HTTP 503: "
                                          "busy")
    assert outcome_line(results[:1]) == "bench: all 1 request succeeded"


def test_token_id_prompts_share_the_prefixes_a_trace_shares(tmp_path):
    # Mooncake's hash ids: requests 0 and 1 share their first 512-token block, 2 shares none
    from helpers.configs import resolved
    from sim.bench.prompts import ID_HIGH, ID_LOW
    from sim.workloads import build_workload

    path = tmp_path / "m.jsonl"
    row = '{{"timestamp": {}, "input_length": {}, "output_length": 4, "hash_ids": {}}}\n'
    path.write_text(row.format(0, 600, [7, 8]) + row.format(5, 530, [7, 9])
                    + row.format(9, 520, [3, 4]))
    spec = resolved({"workload": {"trace": {"path": str(path), "format": "mooncake"}}}).workload
    workload = build_workload(spec, np.random.default_rng(0))
    prompts = id_prompts(workload.prompt_tokens, np.random.default_rng(1), workload.prompt_ids)
    assert [len(p) for p in prompts] == [600, 530, 520]
    assert prompts[0][:512] == prompts[1][:512] and prompts[0][512:530] != prompts[1][512:]
    assert prompts[2][:512] != prompts[0][:512]
    assert all(ID_LOW <= t < ID_HIGH for p in prompts for t in p)
