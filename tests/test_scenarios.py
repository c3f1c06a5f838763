"""Scenario files: defaults, variants, sweeps, overrides and traces, loaded into a resolved,
frozen configuration. (One-line errors for every kind of mistake: test_scenario_errors.py.)"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

import scenarios
from engine.model import ModelConfig
from helpers.scenario_files import LINEAR, WORKLOAD, load_error, write
from scenarios import DEFAULTS, RunConfig
from scenarios.config import TraceSettings, as_table
from scenarios.arrival import Poisson, TraceArrivals
from scenarios.lengths import Fixed


# --- loading --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", scenarios.builtin_names())
def test_builtin_scenario_loads_with_its_own_name_and_description(name):
    scenario = scenarios.load(name)
    assert scenario.name == name == scenario.path.stem
    assert len(scenario.description) > 40
    assert scenario.runs()


def test_builtins_include_the_documented_scenarios():
    names = set(scenarios.builtin_names())
    assert {"static-vs-continuous", "load-sweep", "kv-pressure", "priority-mix",
            "chunked-prefill", "azure-conv", "azure-code"} <= names
    assert scenarios.DEFAULT_SCENARIO == "static-vs-continuous"
    assert [n for n, _ in scenarios.list_builtin()] == sorted(names)


def test_a_file_with_only_a_workload_gets_every_default(tmp_path):
    scenario = scenarios.load(write(tmp_path, LINEAR + WORKLOAD, "mine.toml"))
    base = scenario.base
    assert scenario.name == "mine" and base.seed == 0 and base.mode == "simulate"
    model = ModelConfig()
    assert base.model == model
    for section in ("engine", "scheduler"):
        assert as_table(getattr(base, section)) == DEFAULTS[section]
    assert base.slo.limits() == DEFAULTS["slo"] | {"e2e_s": None}
    assert base.engine.block_size == 16
    assert base.workload.prompt_tokens.min == 1  # lognormal's default lower bound
    assert base.workload.priority is None and base.workload.trace is None
    [run] = scenario.runs()
    assert run.variant == "default" and run.sweep == {} and run.config == base


def test_variants_override_dotted_keys_and_nothing_else(tmp_path):
    text = LINEAR + WORKLOAD + """
[[variants]]
name = "static"
set = { "scheduler.policy" = "static", "scheduler.max_batch_size" = 8 }
[[variants]]
name = "small-cache"
set = { engine = { num_kv_blocks = 64 } }
"""
    static, small = scenarios.load(write(tmp_path, text)).runs()
    assert as_table(static.config.scheduler) == DEFAULTS["scheduler"] | {"policy": "static",
                                                                         "max_batch_size": 8}
    assert as_table(small.config.engine) == DEFAULTS["engine"] | {"num_kv_blocks": 64}
    assert static.config.workload == small.config.workload


def test_sweep_is_crossed_with_variants_variant_major(tmp_path):
    text = LINEAR + WORKLOAD + """
[[variants]]
name = "a"
[[variants]]
name = "b"
set = { "scheduler.queue" = "priority" }
[sweep]
"workload.arrival.rate" = [1, 2.5, 8]
"""
    runs = scenarios.load(write(tmp_path, text)).runs()
    assert [(r.variant, r.sweep["workload.arrival.rate"]) for r in runs] == [
        ("a", 1), ("a", 2.5), ("a", 8), ("b", 1), ("b", 2.5), ("b", 8)]
    assert [r.config.workload.arrival.rate for r in runs] == [1, 2.5, 8] * 2
    assert {r.config.scheduler.queue for r in runs[3:]} == {"priority"}
    assert runs[0].label == "a (rate=1)"


def test_unquoted_sweep_keys_mean_the_same_dotted_keys(tmp_path):
    quoted = scenarios.load(write(tmp_path, LINEAR + WORKLOAD +
                                  '[sweep]\n"engine.num_kv_blocks" = [64, 128]\n', "q.toml"))
    bare = scenarios.load(write(tmp_path, LINEAR + WORKLOAD +
                                "[sweep]\nengine.num_kv_blocks = [64, 128]\n", "b.toml"))
    assert quoted.sweep == bare.sweep == {"engine.num_kv_blocks": [64, 128]}


def test_a_table_naming_its_kind_replaces_the_old_table(tmp_path):
    path = write(tmp_path, LINEAR + WORKLOAD)
    scenario = scenarios.load(path, ['workload.prompt_tokens={dist = "fixed", value = 100}',
                                     "workload.arrival={rate = 9}"])
    assert scenario.base.workload.prompt_tokens == Fixed(100)
    assert scenario.base.workload.arrival == Poisson(9)  # merged


def test_set_values_are_toml_with_plain_strings_allowed(tmp_path):
    scenario = scenarios.load(write(tmp_path, LINEAR + WORKLOAD), [
        "scheduler.policy=\"continuous\"", "scheduler.chunked_prefill=true", "seed=7",
        "slo.ttft_s=0.25", 'description="quoted text"', ("engine.num_kv_blocks", 96)])
    base = scenario.base
    assert base.scheduler.policy == "continuous"
    assert base.scheduler.chunked_prefill is True
    assert base.seed == 7 and base.slo.ttft_s == 0.25
    assert base.description == "quoted text" and base.engine.num_kv_blocks == 96
    assert scenario.overrides[0] == ("scheduler.policy", "continuous")


def test_set_changes_the_base_and_variants_still_win(tmp_path):
    text = LINEAR + WORKLOAD + '[[variants]]\nname = "s"\nset = { "scheduler.policy" = "static" }\n' \
                               '[[variants]]\nname = "c"\n'
    runs = scenarios.load(write(tmp_path, text), ["scheduler.policy=continuous",
                                                  "workload.num_requests=5"]).runs()
    assert [r.config.scheduler.policy for r in runs] == ["static", "continuous"]
    assert {r.config.workload.num_requests for r in runs} == {5}


def test_trace_scenario_resolves_its_path_and_replaces_arrivals_and_lengths():
    workload = scenarios.load("azure-conv").base.workload
    assert Path(workload.trace.path).is_absolute()
    assert Path(workload.trace.path).is_file()
    assert workload.arrival == TraceArrivals()
    assert workload.num_requests is workload.prompt_tokens is None
    assert workload.trace.max_requests <= 5000


def test_a_shipped_trace_is_named_and_a_file_of_ones_own_given_by_path(tmp_path):
    named = scenarios.load(write(tmp_path, '[workload]\ntrace = { name = "mooncake-conv" }\n'
                                 + LINEAR)).base.workload.trace
    assert named.format == "mooncake"
    assert Path(named.path).name == "mooncake_conversation.jsonl.gz"
    (tmp_path / "mine.csv.gz").write_bytes(b"")
    own = scenarios.load(write(tmp_path, '[workload]\ntrace = { path = "mine.csv.gz", format = '
                               '"csv" }\n' + LINEAR, "own.toml")).base.workload.trace
    assert own == TraceSettings(name=None, path=str(tmp_path / "mine.csv.gz"), format="csv",
                                time_scale=1.0, max_requests=None)


@pytest.mark.parametrize("overrides", [
    ['workload.trace={ path = "mine.csv", format = "csv" }'],
    ['workload.trace.path="mine.csv"', 'workload.trace.format="csv"'],
])
def test_an_override_switches_a_shipped_trace_for_a_file_and_back(tmp_path, overrides):
    (tmp_path / "mine.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,4,2\n")
    path = write(tmp_path, '[workload]\ntrace = { name = "azure-conv" }\n' + LINEAR)
    own = scenarios.load(path, overrides).base.workload.trace
    assert (own.name, own.path, own.format) == (None, str(tmp_path / "mine.csv"), "csv")
    own_file = write(tmp_path, '[workload]\ntrace = { path = "mine.csv", format = "csv" }\n'
                     + LINEAR, "own.toml")
    for back in (['workload.trace={ name = "azure-code" }'], ['workload.trace.name="azure-code"']):
        trace = scenarios.load(own_file, back).base.workload.trace
        assert trace.name == "azure-code" and trace.format == "azure"


def test_a_sharegpt_trace_gives_lengths_and_the_arrival_process_gives_times(tmp_path):
    text = ('[workload]\narrival = { process = "poisson", rate = 2.0 }\n'
            'trace = { path = "c.json", format = "sharegpt", max_requests = 50 }\n' + LINEAR)
    workload = scenarios.load(write(tmp_path, text)).base.workload
    assert workload.arrival == Poisson(2.0)
    assert workload.num_requests is None
    trace = workload.trace
    assert (trace.format, trace.max_requests, trace.tokenizer, trace.shuffle) == \
        ("sharegpt", 50, "char", True)


def test_a_resolved_config_cannot_be_changed_in_place_only_copied(tmp_path):
    scenario = scenarios.load(write(tmp_path, LINEAR + WORKLOAD))
    with pytest.raises(FrozenInstanceError):
        scenario.runs()[0].config.engine.block_size = 1
    changed = scenario.base.updated({"engine.block_size": 32})
    assert changed.engine.block_size == 32 and scenario.runs()[0].config.engine.block_size == 16
    assert RunConfig.from_dict(scenario.base.to_dict()) == scenario.base


def test_a_builtins_name_is_the_builtin_beside_a_folder_or_file_of_that_name(tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kv-pressure").mkdir()  # an output folder named after the scenario
    (tmp_path / "load-sweep").write_text("not a scenario")
    assert scenarios.load("kv-pressure").name == "kv-pressure"
    assert scenarios.load("load-sweep").name == "load-sweep"
    assert load_error("./load-sweep").startswith("load-sweep: not valid TOML")


def test_an_unknown_scenario_lists_the_builtins():
    message = load_error("no-such-scenario")
    assert message.startswith("no-such-scenario: no such scenario file or built-in")
    assert "static-vs-continuous" in message


def test_scenarios_are_data_and_schema_and_never_import_the_simulator():
    import subprocess
    import sys

    code = ("import sys, scenarios\n"
            "for name in scenarios.builtin_names():\n"
            "    scenarios.load(name)\n"
            "loaded = sorted(m for m in sys.modules if m == 'sim' or m.startswith('sim.'))\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True)
