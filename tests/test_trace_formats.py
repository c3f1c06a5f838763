"""The trace formats besides azure: a plain table (csv, jsonl), the Mooncake JSON lines and
ShareGPT conversations. Each reads its documented layout; each mistake in a file is one line
naming the file and line; a ShareGPT file gives lengths and the arrival process gives times."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

import scenarios
from engine.tokenizer import build_vocab, encode_prompt
from helpers.traces import error, write
from scenarios import ScenarioError
from sim.checks import check_scenario
from sim.runner import run_config
from sim.workloads import build_workload
from sim.workloads.traces import load_trace
from helpers.configs import resolved


# --- csv and jsonl --------------------------------------------------------------------------------

CSV = "arrival_s,prompt_tokens,output_tokens\n10.5,100,20\n10.5,7,1\n12.25,300,40\n"
JSONL = "".join(json.dumps({"arrival_s": t, "prompt_tokens": p, "output_tokens": o}) + "\n"
                for t, p, o in ((10.5, 100, 20), (10.5, 7, 1), (12.25, 300, 40)))


@pytest.mark.parametrize("fmt, name, text", [("csv", "t.csv", CSV), ("jsonl", "t.jsonl", JSONL)])
def test_a_plain_table_gives_arrivals_from_its_first_row_and_lengths(tmp_path, fmt, name, text):
    trace = load_trace(write(tmp_path, name, text), fmt, time_scale=2.0)
    assert trace.arrival_s.tolist() == [0.0, 0.0, 3.5]  # (12.25 - 10.5) * 2
    assert trace.prompt_tokens.tolist() == [100, 7, 300]
    assert trace.output_tokens.tolist() == [20, 1, 40]


def test_csv_columns_may_come_in_any_order_beside_others(tmp_path):
    text = "id,output_tokens,arrival_s,prompt_tokens\na,5,0,9\nb,6,1.5,8\n"
    trace = load_trace(write(tmp_path, "t.csv", text), "csv", max_requests=1)
    assert (trace.arrival_s.tolist(), trace.prompt_tokens.tolist()) == ([0.0], [9])


def test_a_compressed_table_reads_as_its_content(tmp_path):
    trace = load_trace(write(tmp_path, "t.jsonl.gz", gzip.compress(JSONL.encode())), "jsonl")
    assert trace.prompt_tokens.tolist() == [100, 7, 300]
    for name in ("T.JSONL.GZ", "t.jsonl"):  # gzip's bytes, whatever the name
        trace = load_trace(write(tmp_path, name, gzip.compress(JSONL.encode())), "jsonl")
        assert trace.prompt_tokens.tolist() == [100, 7, 300]


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty (format csv needs a header with arrival_s, prompt_tokens"),
    ("arrival_s,prompt_tokens\n1,2\n", "line 1: missing column output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens,arrival_s\n", "line 1: column arrival_s appears"),
    ("arrival_s,prompt_tokens,output_tokens\n", "the trace has no requests"),
    ("arrival_s,prompt_tokens,output_tokens\n1,2\n", "line 2: expected 3 fields"),
    ("arrival_s,prompt_tokens,output_tokens\nsoon,2,3\n", "line 2: arrival_s must be a number, "
                                                          "got 'soon'"),
    ("arrival_s,prompt_tokens,output_tokens\n1,2.5,3\n", "line 2: prompt_tokens must be an "
                                                         "integer, got '2.5'"),
    ("arrival_s,prompt_tokens,output_tokens\n1,2,0\n", "line 2: output_tokens must be >= 1"),
    # ASCII digits only, as a trace writes them (Python's int() takes these too)
    ("arrival_s,prompt_tokens,output_tokens\n1,1_000,3\n", "line 2: prompt_tokens must be an "
                                                           "integer, got '1_000'"),
    ("arrival_s,prompt_tokens,output_tokens\n1,\uff11\uff10,3\n", "line 2: prompt_tokens must "
                                                                   "be an integer"),
    ("arrival_s,prompt_tokens,output_tokens\n1," + "9" * 5000 + ",3\n",
     "line 2: prompt_tokens: a number of more than 4,300 digits"),
    # a quoted field across lines: the next row's number is its own line's
    ('arrival_s,prompt_tokens,output_tokens\n0,"10\n",5\n1,x,5\n', "line 4: prompt_tokens must "
                                                                    "be an integer, got 'x'"),
    ("arrival_s,prompt_tokens,output_tokens\nnan,2,3\n", "line 2: arrival_s must be a number >= 0"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,2,3\n", "line 2: arrival_s must be a number >= 0"),
    ("arrival_s,prompt_tokens,output_tokens\n2,2,3\n1,2,3\n", "line 3: arrival_s 1.0 is earlier"),
    ("arrival_s,prompt_tokens,output_tokens\n1,2,3\n\n", "line 3: an empty line; a CSV trace "
                                                         "is one request a line"),
    # a span no float tells apart to the microsecond, blamed on the file, not on time_scale
    ("arrival_s,prompt_tokens,output_tokens\n0,2,3\n1e300,2,3\n",
     "t.csv: its arrival times span 1e+300 s from the first row to the last"),
])
def test_bad_csv_rows_are_one_line_naming_the_line(tmp_path, text, message):
    assert message in error(write(tmp_path, "t.csv", text), "csv")


@pytest.mark.parametrize("text, message", [
    ("", "the trace has no requests"),
    ('{"arrival_s": 0, "prompt_tokens": 5}\n', "line 1: missing key output_tokens (format jsonl "
                                               "needs arrival_s, prompt_tokens, output_tokens)"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": "9"}\n', "line 1: output_tokens must "
                                                                    "be an integer, got '9'"),
    ('{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 9}\n', "line 1: prompt_tokens must "
                                                                     "be an integer, got True"),
    ('{"arrival_s": "0", "prompt_tokens": 5, "output_tokens": 9}\n', "line 1: arrival_s must be a "
                                                                    "number >= 0, got '0'"),
    ('[0, 5, 9]\n', "line 1: expected a JSON object with arrival_s, prompt_tokens, output_tokens "
                    "(format jsonl), got list"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 9}\n{"arrival_s": 1,\n',
     "line 2: not JSON"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 9}\n\n', "line 2: an empty line"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 9, "prompt_tokens": 99}\n',
     "line 1: the key 'prompt_tokens' is given twice"),
    ('{"arrival_s": 0, "prompt_tokens": ' + "9" * 5000 + ', "output_tokens": 9}\n',
     "line 1: a number of more than 4,300 digits"),
])
def test_bad_jsonl_rows_are_one_line_naming_the_line(tmp_path, text, message):
    assert message in error(write(tmp_path, "t.jsonl", text), "jsonl")


@pytest.mark.parametrize("fmt, name", [("csv", "t.csv"), ("jsonl", "t.jsonl"),
                                       ("mooncake", "t.jsonl"), ("sharegpt", "t.json")])
def test_a_binary_file_is_one_line_in_every_format(tmp_path, fmt, name):
    assert "not UTF-8 text" in error(write(tmp_path, name, b"\x00\x81\xfe" * 20), fmt)


def test_a_row_past_max_requests_is_not_read(tmp_path):
    path = write(tmp_path, "t.jsonl", JSONL + "not json\n")
    assert len(load_trace(path, "jsonl", max_requests=3)) == 3
    assert "line 4: not JSON" in error(path, "jsonl")
    csv = write(tmp_path, "t.csv", CSV + "\n")  # a blank line past them, in either CSV format
    assert len(load_trace(csv, "csv", max_requests=3)) == 3
    assert "line 5: an empty line" in error(csv, "csv")
    azure = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                     "2023-11-16 18:17:03,10,5\n\n")
    assert len(load_trace(azure, "azure", max_requests=1)) == 1


# --- mooncake -------------------------------------------------------------------------------------

MOONCAKE = ('{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
            '{"timestamp": 1250, "input_length": 20, "output_length": 7, "hash_ids": [0]}\n')


def test_mooncake_timestamps_are_milliseconds_from_the_first(tmp_path):
    trace = load_trace(write(tmp_path, "m.jsonl", MOONCAKE), "mooncake")
    assert trace.arrival_s.tolist() == [0.0, 0.25]
    assert trace.prompt_tokens.tolist() == [600, 20] and trace.output_tokens.tolist() == [5, 7]


@pytest.mark.parametrize("text, message", [
    ('{"timestamp": 0, "input_length": 5, "hash_ids": []}\n', "line 1: missing key output_length "
                                                              "(format mooncake needs timestamp, "
                                                              "input_length, output_length)"),
    ('{"timestamp": 5, "input_length": 5, "output_length": 1}\n'
     '{"timestamp": 4, "input_length": 5, "output_length": 1}\n', "line 2: timestamp 4 is earlier"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1}\n', "line 1: input_length must be "
                                                                  ">= 1"),
    ('{"timestamp": 0, "input_length": 5.0, "output_length": 1}\n', "line 1: input_length must be "
                                                                    "an integer, got 5.0"),
])
def test_bad_mooncake_rows_are_one_line_naming_the_line(tmp_path, text, message):
    assert message in error(write(tmp_path, "m.jsonl", text), "mooncake")


def test_an_azure_file_read_as_mooncake_says_what_it_expected(tmp_path):
    path = write(tmp_path, "a.jsonl", "TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert "line 1: not JSON" in error(path, "mooncake")


# --- sharegpt -------------------------------------------------------------------------------------


def conversation(*turns) -> dict:
    return {"id": "x", "conversations": [{"from": who, "value": text} for who, text in turns]}


SHAREGPT = [
    conversation(("human", "Hello there"), ("gpt", "Hi! How can I help?"), ("human", "More")),
    conversation(("system", "Be brief."), ("human", "2+2?"), ("gpt", "4")),
    conversation(("gpt", "I start"), ("human", "why")),  # no reply to the human turn
    conversation(),
    conversation(("human", "   "), ("gpt", "blank prompt")),
    conversation(("human", "one two three"), ("human", "four"), ("gpt", "five six")),
]


def test_sharegpt_counts_the_first_human_turn_and_the_next_gpt_turn(tmp_path):
    path = write(tmp_path, "s.json", json.dumps(SHAREGPT, indent=1))
    trace = load_trace(path, "sharegpt")
    assert trace.arrival_s is None and trace.skipped == 3
    assert trace.prompt_tokens.tolist() == [12, 5, 14]  # characters and the <bos>
    assert trace.output_tokens.tolist() == [19, 1, 8]
    words = load_trace(path, "sharegpt", tokenizer="whitespace")
    assert words.prompt_tokens.tolist() == [2, 1, 3]
    assert words.output_tokens.tolist() == [5, 1, 2]
    assert load_trace(path, "sharegpt", tokenizer=lambda text: 2).prompt_tokens.tolist() == [2] * 3


def test_the_char_tokenizer_counts_as_the_engine_encodes(tmp_path):
    # a prompt as the servers encode it (after its <bos>), a reply as the tokens generated
    prompt, reply = (SHAREGPT[0]["conversations"][i]["value"] for i in (0, 1))
    vocab = build_vocab([prompt + reply], ["<bos>", "<unk>"])
    trace = load_trace(write(tmp_path, "s.json", json.dumps(SHAREGPT[:1])), "sharegpt")
    assert trace.prompt_tokens.tolist() == [len(encode_prompt(prompt, vocab))]
    assert trace.output_tokens.tolist() == [len(encode_prompt(reply, vocab, add_bos=False))]


def test_sharegpt_shuffles_with_the_generator_then_keeps_max_requests(tmp_path):
    entries = [conversation(("human", "x" * n), ("gpt", "y")) for n in range(1, 21)]
    path = write(tmp_path, "s.json", json.dumps(entries))
    in_order = load_trace(path, "sharegpt", max_requests=5)
    assert in_order.prompt_tokens.tolist() == [2, 3, 4, 5, 6]  # n characters and the <bos>
    first = load_trace(path, "sharegpt", max_requests=5, rng=np.random.default_rng(3))
    again = load_trace(path, "sharegpt", max_requests=5, rng=np.random.default_rng(3))
    expected = (np.random.default_rng(3).permutation(20)[:5] + 2).tolist()
    assert first.prompt_tokens.tolist() == again.prompt_tokens.tolist() == expected


@pytest.mark.parametrize("text, message", [
    ("", "the file is empty (format sharegpt is a JSON list of conversations)"),
    ('{"conversations": []}', "line 1: expected a JSON list of conversations"),
    ("[]", "no entry has a human turn followed by a gpt turn"),
    ('[\n{"conversations": []},\n{"conversations": [{"from": "human"}]}\n]',
     'line 3: entry 1: conversations[0] must be an object with string "from" and "value"'),
    ('[\n{"conversations": [{"from": "human", "value": 5}]}]',
     'line 2: entry 0: conversations[0] must be an object with string "from" and "value", got'),
    ('[\n  {"id": 1}\n]', 'line 2: entry 0: expected an object with a "conversations" list'),
    ('[\n  "text"\n]', 'line 2: entry 0: expected an object with a "conversations" list'),
    ('[\n{"conversations": []},\n{"conversations": [}\n]', "line 3: not JSON"),
    ('[{"conversations": []}', "line 1: expected , or ] after entry 0"),
    ('[{"conversations": []}] []', "line 1: more after the end of the JSON list"),
    ('[\n{"conversations": [{"from": "human", "value": "a", "value": "bbbb"}]}]',
     "line 2: entry 0: the key 'value' is given twice in one object"),
    ('[{"conversations": []},\n]', "line 2: a comma after the last entry (not JSON)"),
    ('[{"id": ' + "1" * 5000 + ', "conversations": []}]',
     "line 1: entry 0: a number of more than 4,300 digits"),
    ("[" * 100_000, "nested too deeply"),
])
def test_bad_sharegpt_files_are_one_line_naming_the_line(tmp_path, text, message):
    assert message in error(write(tmp_path, "s.json", text), "sharegpt")


def test_a_tokenizer_that_counts_no_tokens_is_refused_naming_the_entry(tmp_path):
    path = write(tmp_path, "s.json", json.dumps(SHAREGPT[:2], indent=1))
    assert "line 2: entry 0: the human turn's token count must be >= 1" in error(
        path, "sharegpt", tokenizer=lambda text: 0)
    assert "tokenizer must be one of char, whitespace" in str(
        pytest.raises(ValueError, load_trace, path, "sharegpt", tokenizer="bpe").value)


def test_sharegpt_has_no_times_to_scale(tmp_path):
    path = write(tmp_path, "s.json", json.dumps(SHAREGPT))
    with pytest.raises(ValueError, match="time_scale: format sharegpt gives no arrival times"):
        load_trace(path, "sharegpt", time_scale=2.0)


# --- a ShareGPT workload and scenario ------------------------------------------------------------


def sharegpt_spec(path, arrival, **trace):
    """The resolved workload of a ShareGPT file at `path` with these arrivals."""
    return resolved({"workload": {
        "arrival": arrival, "trace": {"path": str(path), "format": "sharegpt"} | trace}}).workload


def test_a_sharegpt_workload_draws_the_shuffle_then_the_arrivals(tmp_path):
    entries = [conversation(("human", "x" * n), ("gpt", "y" * n)) for n in range(1, 41)]
    path = write(tmp_path, "s.json", json.dumps(entries))
    workload = build_workload(sharegpt_spec(path, {"process": "poisson", "rate": 4.0},
                                            max_requests=10), np.random.default_rng(7))
    rng = np.random.default_rng(7)
    order = rng.permutation(40)[:10]
    assert workload.prompt_tokens.tolist() == (order + 2).tolist()  # the <bos> too
    assert np.array_equal(workload.output_tokens, workload.prompt_tokens - 1)
    assert np.array_equal(workload.arrival_s, np.cumsum(rng.exponential(0.25, size=10)))


def test_a_sharegpt_workload_runs_in_a_closed_loop(tmp_path):
    path = write(tmp_path, "s.json", json.dumps(SHAREGPT))
    workload = build_workload(sharegpt_spec(path, {"process": "closed_loop", "concurrency": 2,
                                                   "think_time_s": 0.0}, shuffle=False),
                              np.random.default_rng(0))
    assert workload.arrival_s is None and workload.closed_loop.concurrency == 2
    assert workload.prompt_tokens.tolist() == [12, 5, 14]


def test_a_sharegpt_scenario_runs_with_vllm_style_arrivals(tmp_path):
    entries = [conversation(("human", "q" * (10 + n)), ("gpt", "a" * (5 + n % 7)))
               for n in range(30)]
    write(tmp_path, "chats.json.gz", gzip.compress(json.dumps(entries).encode()))
    path = write(tmp_path, "s.toml", '[cost]\nmodel = "linear"\n[workload]\n'
                 'arrival = { process = "poisson", rate = 5.0 }\n'
                 'trace = { path = "chats.json.gz", format = "sharegpt", max_requests = 12 }\n')
    scenario = scenarios.load(path)
    check_scenario(scenario)
    columns = run_config(scenario.base).request_columns()
    assert len(columns["prompt_tokens"]) == 12
    assert set(columns["prompt_tokens"]) <= set(range(11, 41))
    from reports.section_text import workload_text

    assert workload_text(scenario.base.workload) == (
        "lengths from `chats.json.gz` (sharegpt format, first 12 requests shuffled with the "
        "seed, tokens counted by `char`), arrivals poisson at 5 req/s")


def test_max_concurrency_alone_sends_a_sharegpt_file_at_once_as_vllm(tmp_path):
    """`vllm bench serve --dataset-name sharegpt --max-concurrency 2`: the rate is inf, so a
    scenario that gives only the file runs with --max-concurrency alone."""
    from sim.cli.common import load_scenario
    from sim.cli import build_parser

    write(tmp_path, "chats.json", json.dumps([conversation(("human", "q" * 9), ("gpt", "a" * 3))
                                              for _ in range(4)]))
    path = write(tmp_path, "s.toml", '[cost]\nmodel = "linear"\n[workload]\n'
                 'trace = { path = "chats.json", format = "sharegpt" }\n')
    args = build_parser().parse_args(["run", str(path), "--max-concurrency", "2"])
    workload = load_scenario(args).base.workload
    assert workload.arrival.process == "burst" and workload.max_concurrency == 2
    with pytest.raises(ScenarioError, match="workload.arrival: required with a sharegpt trace"):
        load_scenario(build_parser().parse_args(["run", str(path)]))


def test_a_bad_sharegpt_entry_stops_the_scenario_before_it_runs(tmp_path):
    write(tmp_path, "chats.json", '[\n{"conversations": [{"from": "human", "value": 3}]}\n]')
    path = write(tmp_path, "s.toml", '[cost]\nmodel = "linear"\n[workload]\n'
                 'arrival = { process = "constant", rate = 1.0 }\n'
                 'trace = { path = "chats.json", format = "sharegpt" }\n')
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path))
    assert str(info.value).startswith(f"{path}: {tmp_path / 'chats.json'}: line 2: entry 0: ")


def test_a_sharegpt_trace_at_a_tiny_rate_is_refused_by_its_span(tmp_path):
    write(tmp_path, "chats.json", json.dumps(SHAREGPT))
    path = write(tmp_path, "s.toml", '[cost]\nmodel = "linear"\n[workload]\n'
                 'arrival = { process = "poisson", rate = 1e-12 }\n'
                 'trace = { path = "chats.json", format = "sharegpt" }\n')
    with pytest.raises(ScenarioError, match="workload.arrival.rate: the trace's 3 requests would "
                                            "span about 3e\\+12 s"):
        check_scenario(scenarios.load(path))
