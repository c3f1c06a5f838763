"""Trace replay: the shipped Azure traces load with the documented time convention, and
malformed traces are refused with the file and line named."""

import gzip
import warnings

import numpy as np
import pytest

from sim.workloads.traces import load_trace, resolve_path, shipped_trace
from sim.workloads import build_workload
from helpers.configs import resolved

CONV = shipped_trace("azure-conv")
CODE = shipped_trace("azure-code")
AZURE_ROWS = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:00:00.0000000,10,2\n2023-11-16 18:00:01.5000000,20,3\n")


def test_first_rows_of_the_conversation_trace():
    # 2023-11-16 18:15:46.6805900,374,44 / 18:15:50.9951690,396,109 / 18:15:51.2224670,879,55
    trace = load_trace(CONV, max_requests=3)
    assert trace.prompt_tokens.tolist() == [374, 396, 879]
    assert trace.output_tokens.tolist() == [44, 109, 55]
    assert trace.arrival_s == pytest.approx([0.0, 4.314579, 4.541877], abs=1e-9)


def test_time_scale_multiplies_every_inter_arrival_gap():
    plain = load_trace(CODE, max_requests=50)
    fast = load_trace(CODE, max_requests=50, time_scale=0.5)
    assert np.allclose(fast.arrival_s, plain.arrival_s * 0.5, rtol=1e-12, atol=0)
    assert np.array_equal(fast.prompt_tokens, plain.prompt_tokens)


def test_whole_conversation_trace_matches_its_published_summary():
    trace = load_trace(CONV)
    assert len(trace) == 19366
    assert trace.prompt_tokens.mean() == pytest.approx(1155, abs=1)
    assert trace.output_tokens.mean() == pytest.approx(211, abs=1)
    assert 55 * 60 < trace.arrival_s[-1] < 60 * 60
    assert np.all(np.diff(trace.arrival_s) >= 0)


def test_max_requests_larger_than_the_file_keeps_every_row(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(AZURE_ROWS)
    trace = load_trace(path, max_requests=10)
    assert trace.arrival_s.tolist() == [0.0, 1.5] and trace.output_tokens.tolist() == [2, 3]


def test_a_gzip_compressed_file_reads_as_its_content(tmp_path):
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(AZURE_ROWS.encode()))
    trace = load_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 1.5] and trace.prompt_tokens.tolist() == [10, 20]


@pytest.mark.parametrize("name, data, message", [
    ("t.csv.gz", b"TIMESTAMP,ContextTokens", "not a whole gzip file"),
    ("t.csv.gz", gzip.compress(AZURE_ROWS.encode())[:-12], "not a whole gzip file"),
    ("t.csv", b"\x00\x81\xfe" * 20, "not UTF-8 text"),
    ("t.csv", b"", "line 1: expected the header TIMESTAMP,ContextTokens,GeneratedTokens"),
    ("t.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n", "the trace has no requests"),
])
def test_unreadable_files_are_one_line_naming_them(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(ValueError, match=message) as info:
        load_trace(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("rows, message", [
    ("2023-11-16 18:00:00.0,10,0\n", r"line 2: GeneratedTokens must be >= 1, got 0"),
    ("2023-11-16 18:00:00.0,0,5\n", r"line 2: ContextTokens must be >= 1"),
    ("2023-11-16 18:00:01.0,10,5\n2023-11-16 18:00:00.0,10,5\n", r"line 3: TIMESTAMP .* earlier"),
    # backwards by less than a microsecond (NumPy reads microseconds): still out of order
    ("2023-11-16 18:17:03.9799609,10,5\n2023-11-16 18:17:03.9799601,10,5\n",
     r"line 3: TIMESTAMP .* earlier"),
    ("2023-11-16 18:00:00.0,10,5\n\n", r"line 3: an empty line; a CSV trace is one request a "
                                        r"line"),
    ("2023-11-16 18:00:00.0,ten,5\n", r"line 2: malformed row"),
    ("2023-11-16 18:00:00.0,10\n", r"line 2: expected 3 fields"),
    # a bare number is no timestamp (NumPy would read it as a year)
    ("1700000000,10,5\n", r"line 2: TIMESTAMP '1700000000' is not a date and time"),
    ("20231116,10,5\n", r"line 2: TIMESTAMP '20231116' is not a date and time"),
    # a zone NumPy would convert (with a warning) or misread: refused, never guessed
    ("2023-11-16 18:17:03 UTC,100,10\n", r"line 2: malformed row"),
    ("2023-11-16 18:17:03 +05:00,100,10\n", r"line 2: malformed row"),
    ("2023-11-16T18:17:03.123+0530Z,10,5\n", r"line 2: malformed row"),
    ("2023-11-16 18:00:00.0,1_000,5\n", r"line 2: malformed row"),
])
def test_bad_rows_are_refused_with_the_line_named(tmp_path, rows, message):
    path = tmp_path / "bad.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning printed beside the error would be a second line
        with pytest.raises(ValueError, match=message):
            load_trace(path)


def test_one_zone_written_four_ways_is_one_zone_and_a_fraction_of_zeros_is_none(tmp_path):
    path = tmp_path / "zones.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03Z,10,5\n"
                    "2023-11-16 18:17:04+00:00,10,5\n2023-11-16 18:17:05.5+0000,10,5\n"
                    "2023-11-16 18:17:05.5000000-00:00,10,5\n")
    assert load_trace(path).arrival_s.tolist() == [0.0, 1.0, 2.5, 2.5]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0000000,10,5\n"
                    "2023-11-16 18:17:03,10,5\n")  # isoformat() leaves out a zero fraction
    assert load_trace(path).arrival_s.tolist() == [0.0, 0.0]


def test_a_device_is_not_a_trace_file():
    with pytest.raises(FileNotFoundError, match="/dev/null is not a regular file"):
        resolve_path("/dev/null")


def test_wrong_header_is_refused(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("time,prompt,output\n1,2,3\n")
    with pytest.raises(ValueError, match="line 1: expected the header TIMESTAMP,ContextTokens"):
        load_trace(path)


def test_relative_path_is_found_beside_the_scenario_when_not_in_the_cwd(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    (tmp_path / "t.csv").write_text(AZURE_ROWS)
    monkeypatch.chdir(tmp_path / "sub")
    assert resolve_path("t.csv", base_dir=tmp_path) == tmp_path / "t.csv"
    with pytest.raises(FileNotFoundError) as info:
        resolve_path("sub/nope.csv", base_dir=tmp_path)
    # the folders it was looked for in, each once: the current one, the scenario's, the root
    from scenarios.paths import REPO_ROOT
    assert str(info.value) == (f"workload.trace.path: file not found: sub/nope.csv (looked in "
                               f"{tmp_path / 'sub'}, {tmp_path}, {REPO_ROOT})")
    with pytest.raises(FileNotFoundError, match=f"{tmp_path} is a folder; give a file in it"):
        resolve_path(tmp_path)


def test_trace_workload_takes_lengths_from_the_trace_and_draws_priorities():
    spec = {"num_requests": None, "arrival": {"process": "trace"}, "prompt_tokens": None,
            "output_tokens": None, "priority": {"dist": "choice", "values": [0, 1],
                                                "weights": [1, 1]},
            "trace": {"path": str(CODE), "format": "azure", "time_scale": 2.0, "max_requests": 100}}
    w = build_workload(resolved({"workload": spec}).workload, np.random.default_rng(0))
    trace = load_trace(CODE, time_scale=2.0, max_requests=100)
    assert np.array_equal(w.prompt_tokens, trace.prompt_tokens)
    assert np.array_equal(w.arrival_s, trace.arrival_s)
    assert set(w.priority.tolist()) == {0, 1}
