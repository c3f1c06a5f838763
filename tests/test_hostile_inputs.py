"""Hostile input to the commands, beyond the scenario file: every case is one line naming the key
or the path and a non-zero status, never a traceback, and writes nothing. Sizes that would not
fit in memory together (many runs, many replicas), values that make no sense (a block longer
than the model's context, static batching with chunked prefill, token counts past 2^31, a GPU
with no bandwidth or so little that a step ends past 136 years, a trace in several time zones),
an interruption before the command starts and memory running out while drawing. Also what a
user is told rather than left to find: a dataset smaller than --num-prompts, entries skipped,
and reports that are the same from any working directory.
"""

from __future__ import annotations

import json
from pathlib import Path


from sim.cli import main

SMALL = """
name = "hostile"
[cost]
model = "linear"
[workload]
num_requests = 6
arrival = { process = "poisson", rate = 8.0 }
prompt_tokens = { dist = "uniform", low = 8, high = 32 }
output_tokens = { dist = "fixed", value = 4 }
"""
HARDWARE = """
[model]
name = "meta-llama/Llama-3.1-8B"
max_seq_len = 4096
[hardware]
gpu = { name = "x", memory_gib = 80, memory_bandwidth_gbs = BANDWIDTH, measured = "h100", \
peak_tflops = { fp16 = 900.0 }, interconnect_bandwidth_gbs = 450, interconnect_latency_us = 5 }
[cost]
model = "hardware"
[workload]
num_requests = 4
arrival = { process = "poisson", rate = 1.0 }
prompt_tokens = { dist = "fixed", value = 100 }
output_tokens = { dist = "fixed", value = 10 }
"""
ROOFLINE = 'hardware.kernels="roofline"'  # as a defined GPU has: said without a note
SESSIONS = """
[workload]
arrival = { process = "poisson", rate = 1.0 }
prompt_tokens = { dist = "fixed", value = 4 }
output_tokens = { dist = "fixed", value = 1 }
[workload.sessions]
conversations = 2
turns = TURNS
"""
COSIMULATED_POOLS = SMALL.replace('name = "hostile"', 'name = "hostile"\nmode = "cosimulate"') \
    .replace('[cost]\nmodel = "linear"\n', '') + """[[cluster.pools]]
name = "big"
replicas = 1
set = { "engine.num_kv_blocks" = 100000000 }
[[cluster.pools]]
name = "small"
replicas = 1
"""
ZONES = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97+00:00,10,5\n"
         "2023-11-16 18:17:04.10+05:00,10,5\n")


def cases(tmp_path: Path) -> list:
    """(argv, scenario text, expected fragment of the one line)."""
    zones = tmp_path / "zones.csv"
    zones.write_text(ZONES)
    sweep = ", ".join(str(1 + i) for i in range(20_000))
    return [
        (["--set", "workload.num_requests=200000"], SMALL + f'[sweep]\n"seed" = [{sweep}]\n',
         "the runs would need about"),
        (["--set", "cluster.replicas=100000000", "workload.num_requests=1"], SMALL,
         "cluster.replicas: the run would need about"),
        (["--set", "engine.block_size=100000000"], SMALL,
         "engine.block_size: must be at most model.max_seq_len"),
        # a pool's own engine, on the real engine: its KV cache named by the pool's key
        ([], COSIMULATED_POOLS,
         "cluster.pools[0].set.engine.num_kv_blocks: the run would need about"),
        (["--set", "scheduler.policy=\"static\"", "scheduler.chunked_prefill=true"], SMALL,
         "scheduler.chunked_prefill: static batching prefills each batch whole"),
        (["--set", "workload.output_tokens.value=9223372036854775807"], SMALL,
         "workload.output_tokens.value: must be a whole number from 1 to"),
        ([], HARDWARE.replace("BANDWIDTH", "0"),
         "hardware.gpu.memory_bandwidth_gbs: must be a positive number below 1e+09, got 0"),
        ([], HARDWARE.replace("BANDWIDTH", "nan"),
         "hardware.gpu.memory_bandwidth_gbs: must be a positive number below 1e+09, got nan"),
        ([], HARDWARE.replace("BANDWIDTH", "1e300"),  # no bytes or seconds of inf or nan
         "hardware.gpu.memory_bandwidth_gbs: must be a positive number below 1e+09, got 1e+300"),
        # a GPU so slow, or a step's overhead so long, that time passes 136 years: refused as
        # the step that would pass it is planned (the per-second token peaks never size an
        # array by the run's span)
        (["--set", ROOFLINE], HARDWARE.replace("BANDWIDTH", "1e-9"),
         "a step would end at t = 1.98e+10 s of simulated time, past 4.29e+09 s"),
        (["--set", ROOFLINE, "hardware.step_overhead_s=1e300"],
         HARDWARE.replace("BANDWIDTH", "3350"), "a step would end at t = 1e+300 s"),
        ([], f'[cost]\nmodel = "linear"\n[workload]\ntrace = {{ path = "{zones}" }}\n',
         "is in time zone +05:00, the rows before in +00:00"),
        # what a flag gave is named by the flag
        (["--num-prompts", "100000000"], SMALL,
         "--num-prompts: workload.num_requests: the run would need about"),
        (["--warmup-seconds", "1000"], SMALL,
         "--warmup-seconds: workload.warmup_s: every request arrives within the 1000 s "
         "warm-up"),
        # refused before a plan of that many turns or conversations is built
        ([], SESSIONS.replace("TURNS", "100000000"), "workload.sessions.turns: a conversation "
                                                     "of 100,000,000 turns of at least 5 tokens"),
        (["--num-prompts", "100000000"], SESSIONS.replace("TURNS", "3"),
         "--num-prompts: workload.sessions.conversations: the run would need about"),
        # a distribution of turns sizes the plan before it is built
        (["--num-prompts", "100000000"], SESSIONS.replace(
            "TURNS", '{ dist = "lognormal", median = 3, sigma = 1.0, max = 40 }'),
         "--num-prompts: workload.sessions.conversations: the run would need about"),
        ([], SESSIONS.replace("TURNS", "10\nthink_time_s = 1e9"),
         "workload.sessions.think_time_s: 9 think times of 1e+09 s in a conversation"),
        ([], SMALL.replace("[workload]", "[workload]\npriority = { dist = \"choice\", values = "
                                         "[0, 1], weights = [1e308, 1e308] }"),
         "workload.priority.weights: must have a finite sum"),
    ]


def test_each_hostile_case_is_one_line_and_writes_nothing(tmp_path, capsys):
    for i, (argv, text, fragment) in enumerate(cases(tmp_path)):
        scenario = tmp_path / f"case{i}.toml"
        scenario.write_text(text)
        out = tmp_path / f"out{i}"
        status = main(["run", str(scenario), "--out", str(out), "--quiet", *argv])
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert status != 0 and len(lines) == 1 and "Traceback" not in err, (i, err)
        assert fragment in lines[0], (i, lines[0])
        assert not out.exists()


def test_an_interruption_before_the_command_starts_is_one_line(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("sim.cli.build_parser", interrupted)  # as while importing or parsing
    assert main(["run"]) == 130
    assert capsys.readouterr().err.strip() == "servesim: interrupted; nothing written"


def test_memory_running_out_while_drawing_is_one_line_and_keeps_nothing(tmp_path, capsys,
                                                                        monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("reports.writer._json", exhausted)
    scenario = tmp_path / "small.toml"
    scenario.write_text(SMALL)
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 1
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("servesim: error: out of memory; nothing written")
    assert not (tmp_path / "out").exists()


def test_a_dataset_smaller_than_num_prompts_and_its_skipped_entries_are_told(tmp_path, capsys):
    data = tmp_path / "chats.json"
    data.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi"}]},
        {"conversations": [{"from": "human", "value": "a question alone"}]},
        {"conversations": [{"from": "human", "value": "two and two"},
                           {"from": "gpt", "value": "four"}]}]))
    scenario = tmp_path / "chats.toml"
    scenario.write_text(f'[cost]\nmodel = "linear"\n[workload]\ntrace = {{ path = "{data}", '
                        f'format = "sharegpt" }}\narrival = {{ process = "poisson", rate = 2.0 }}\n')
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--num-prompts", "10", "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "chats.json holds 2 requests, fewer than the 10 asked for" in err[0]
    assert "chats.json: 1 entry holds no request" in err[1] and len(err) == 2
    report = (out / "report.md").read_text()
    assert "fewer than the 10 asked for" in report and "1 entry holds no request" in report


def test_reports_are_the_same_from_any_working_directory(tmp_path, monkeypatch):
    scenario = tmp_path / "small.toml"
    scenario.write_text(SMALL)
    written = []
    for where in (tmp_path, tmp_path / "elsewhere"):
        where.mkdir(exist_ok=True)
        monkeypatch.chdir(where)
        out = tmp_path / f"out-{len(written)}"
        assert main(["run", str(scenario), "--out", str(out), "--quiet"]) == 0
        written.append({p.name: p.read_bytes() for p in out.iterdir()
                        if p.name not in ("manifest.json",)})
    assert written[0] == written[1]
    for builtin in ("kv-pressure",):
        monkeypatch.chdir(tmp_path)
        out = tmp_path / "builtin"
        assert main(["run", builtin, "--num-prompts", "5", "--out", str(out), "--quiet"]) == 0
        assert "(`scenarios/kv-pressure.toml`)" in (out / "report.md").read_text()


def test_charts_that_fail_to_draw_are_one_line_and_keep_nothing(tmp_path, capsys, monkeypatch):
    import reports.charts

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(reports.charts, "make_charts", exhausted)  # in the chart process too
    scenario = tmp_path / "small.toml"
    scenario.write_text(SMALL)
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 1
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("servesim: error: ") and "nothing written" in line
    assert "MemoryError" in line or "out of memory" in line
    assert not (tmp_path / "out").exists()
