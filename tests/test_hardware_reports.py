"""The hardware model among the rest of the tool: a cluster's pools checked before any run and
described pool by pool, a sweep's changing figures in the report, overrides and sweeps that
would change nothing refused, --variant loading that variant alone, a prefill replica's
requests counted, and a report written for a config never resolved against its GPU."""

from __future__ import annotations

import json

import pytest

import reports
import scenarios
import sim
from reports.describe import config_rows
from scenarios import ScenarioError
from helpers.hardware import write_hardware
from sim.checks import check_scenario

POOLS = """[cluster]
router = "round_robin"
[[cluster.pools]]
name = "big"
replicas = 1
set = {{ "hardware.tp" = 2 }}
[[cluster.pools]]
name = "old"
replicas = 2
set = {{ "hardware.gpu" = "{gpu}" }}
"""


def write(tmp_path, extra="") -> str:
    return write_hardware(tmp_path, extra=extra)


def test_a_pools_hardware_is_checked_before_any_run_and_placed_at_its_set(tmp_path):
    path = write(tmp_path, POOLS.format(gpu="a100"))
    with pytest.raises(ScenarioError, match=r"hw.toml: cluster.pools\[1\].set: hardware.gpu: "
                                            "unknown GPU 'a100'"):
        check_scenario(scenarios.load(path))


def test_a_cluster_of_pools_is_described_and_recorded_pool_by_pool(tmp_path):
    scenario = scenarios.load(write(tmp_path, POOLS.format(gpu="a100-80gb-sxm")))
    results = sim.simulate(scenario)
    out = reports.write_report(scenario, results, tmp_path / "out").out_dir
    rows = config_rows(results[0][0].config)
    assert rows["cluster"].startswith("3 replicas in pools `big` (1), `old` (2) behind a "
                                      "`round_robin` router")
    assert rows["hardware"].startswith("pool `big` (1 replica): 2 x NVIDIA H100")
    assert "pool `old` (2 replicas): 1 x NVIDIA A100" in rows["hardware"]
    assert rows["engine"].count("KV blocks") == 2
    record = json.loads((out / "summary.json").read_text())["hardware"]
    assert record["replicas"] == 3
    assert [(r["pool"], r["replicas"], r["gpu"], r["tp"]) for r in record["pools"]] == \
        [("big", 1, "h100-sxm", 2), ("old", 2, "a100-80gb-sxm", 1)]
    pools = results[0][0].config.hardware.derived["pools"]
    assert rows["engine"] == "; ".join(
        f"pool `{p['pool']}`: {p['kv_blocks']:,} KV blocks of 16 tokens (derived from the GPU's "
        f"memory), max_num_seqs 32, max_num_batched_tokens 2048, prefix caching on"
        for p in pools)
    fixed = scenarios.load(write(tmp_path, POOLS.format(gpu="a100-80gb-sxm").replace(
        '"hardware.tp" = 2', '"hardware.tp" = 2, "engine.num_kv_blocks" = 2000')))
    [(spec, _)] = [(sim.build.resolved_spec(s), None) for s in fixed.runs()]
    assert config_rows(spec.config)["engine"].startswith(
        "pool `big`: 2,000 KV blocks of 16 tokens, max_num_seqs")  # given, not derived


def test_a_base_no_pool_runs_need_not_fit(tmp_path):
    pools = ('[cluster]\nrouter = "round_robin"\n[[cluster.pools]]\nname = "h100"\n'
             'replicas = 1\nset = { "hardware.gpu" = "h100-sxm", "hardware.tp" = 4 }\n'
             '[[cluster.pools]]\nname = "h200"\nreplicas = 1\n'
             'set = { "hardware.gpu" = "h200", "hardware.tp" = 2 }\n')
    scenario = scenarios.load(write_hardware(tmp_path, model="meta-llama/Llama-3.1-70B",
                                             gpu="l4", extra=pools))
    check_scenario(scenario)  # 70B does not fit one L4, the base's GPU; no replica runs it
    [(spec, recorder)] = sim.simulate(scenario)
    assert recorder.num_requests == 30
    hardware = config_rows(spec.config)["hardware"]
    assert "`l4`" not in hardware and "pool `h200` (1 replica): 2 x NVIDIA H200" in hardware


@pytest.mark.parametrize("args, message", [
    ({"overrides": ["hardware.gpu=b200"]}, "--set hardware.gpu: changes no run: every variant "
                                           "(a, b) sets again what it sets, after it"),
    ({"sweep": {"hardware.gpu": ["h100-sxm", "h200"]}},
     "the sweep of hardware.gpu replaces all that the variants set (a, b), leaving them "
     "differing in name only"),
])
def test_an_override_or_sweep_every_variant_sets_again_is_refused(tmp_path, args, message):
    variants = ('[[variants]]\nname = "a"\nset = { "hardware.gpu" = "h100-sxm" }\n'
                '[[variants]]\nname = "b"\nset = { "hardware.gpu" = "h200" }\n')
    with pytest.raises(ScenarioError) as info:
        scenarios.load(write(tmp_path, variants), **args)
    assert message in str(info.value)


@pytest.mark.parametrize("args", [
    {"sweep": {"engine.max_num_seqs": [8, 16]}},  # the variants still differ in their GPU
    {"overrides": ["engine.max_num_batched_tokens=4096"]},  # a table variant's merges around it
    {"overrides": [("workload.arrival", {"process": "gamma", "rate": 4.0, "cv": 2.0})]},
    {"overrides": ["hardware.tp=1"]},  # restates the file's own value: harmless
    {"overrides": ["workload.num_requests=10"]},
])
def test_an_override_or_sweep_the_variants_leave_a_part_of_is_accepted(tmp_path, args):
    variants = ('[[variants]]\nname = "a"\nset = { "hardware.gpu" = "h100-sxm", '
                '"engine.max_num_seqs" = 16, "workload.arrival.rate" = 2.0 }\n'
                '[[variants]]\nname = "b"\nset = { "hardware.gpu" = "h200", engine = '
                '{ max_num_seqs = 32 }, "workload.arrival.rate" = 3.0 }\n')
    assert len(scenarios.load(write(tmp_path, variants), **args).runs()) >= 2


@pytest.mark.parametrize("variant, sweep, message", [
    ('"model.config" = "CONFIG"', {"model.name": ["meta-llama/Llama-3.1-8B", "Qwen/Qwen3-8B"]},
     "model.config: --sweep model.name replaces it at every point (a model's name and config"),
    # the config in a table beside a key the sweep leaves
    ('model = { config = "CONFIG", max_seq_len = 2048 }', {"model.name": ["Qwen/Qwen3-8B"]},
     "model.config: --sweep model.name replaces it"),
    # the sweep's names in tables merged into the model's
    ('"model.config" = "CONFIG"', {"model": [{"name": "Qwen/Qwen3-8B"}]},
     "model.config: --sweep model replaces it"),
    ('"workload.trace.path" = "trace.csv"', {"workload.trace.name": ["azure-code", "azure-conv"]},
     "workload.trace.path: --sweep workload.trace.name replaces it at every point (a trace's "
     "name and path"),
])
def test_a_variants_key_that_a_sweep_replaces_through_another_is_refused(tmp_path, variant,
                                                                         sweep, message):
    """A model's name replaces its config, a trace's name its path: a sweep of one, after the
    variants, would leave a variant's other unread, without a word (a sweep of the key a
    variant sets is plain to see: taken)."""
    config = tmp_path / "config.json"
    config.write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": 1024, '
                      '"num_hidden_layers": 2, "num_attention_heads": 8, '
                      '"intermediate_size": 2048, "vocab_size": 1000}')
    variants = ('[[variants]]\nname = "a"\nset = { "hardware.gpu" = "h100-sxm" }\n'
                '[[variants]]\nname = "b"\nset = { "hardware.gpu" = "h200", '
                f'{variant.replace("CONFIG", str(config))} }}\n')
    with pytest.raises(ScenarioError) as info:
        scenarios.load(write(tmp_path, variants), sweep=sweep)
    assert f"variant 'b': {message}" in str(info.value)
    assert "so the variant's value changes no run; drop it" in str(info.value)


def test_an_override_whose_change_every_variant_undoes_is_refused(tmp_path, capsys):
    from sim.cli import main

    variants = ('[[variants]]\nname = "a"\nset = { "workload.arrival.rate" = 2.0 }\n'
                '[[variants]]\nname = "b"\nset = { "workload.arrival.rate" = 3.0 }\n')
    same_process = ("workload.arrival", {"process": "poisson", "rate": 20.0})
    with pytest.raises(ScenarioError, match="workload.arrival: changes no run"):
        scenarios.load(write(tmp_path, variants), [same_process])
    # as --request-rate writes it (its gaps rescaled as vLLM's, a change of its own): its rate,
    # which every variant sets again, is still refused, not dropped
    assert main(["run", str(write(tmp_path, variants)), "--request-rate", "20", "--out",
                 str(tmp_path / "out")]) == 2
    assert "--request-rate: changes no run: every variant (a, b) sets again" in \
        capsys.readouterr().err


def test_a_lone_variants_own_problem_is_placed_in_it(tmp_path):
    bad = '[[variants]]\nname = "bad"\nset = { "hardware.tp" = 3 }\n'
    with pytest.raises(ScenarioError, match="hw.toml: variant 'bad': hardware.tp = 3"):
        check_scenario(scenarios.load(write(tmp_path, bad)))
    split = ('[cluster]\nkv_transfer_gbps = 45.0\n[[variants]]\nname = "split"\nset = { '
             '"cluster.prefill_replicas" = 1, "cluster.decode_replicas" = 1, '
             '"engine.max_num_seqs" = 0 }\n')
    with pytest.raises(ScenarioError, match="hw.toml: variant 'split': engine.max_num_seqs"):
        scenarios.load(write(tmp_path, split))


def test_a_sweep_every_pool_sets_again_is_refused(tmp_path):
    path = write(tmp_path, POOLS.format(gpu="a100-80gb-sxm").replace(
        '"hardware.tp" = 2', '"hardware.tp" = 2, "hardware.gpu" = "h200"'))
    with pytest.raises(ScenarioError, match="--sweep hardware.gpu: every pool of \\[cluster\\] "
                                            "sets hardware.gpu again"):
        scenarios.load(path, sweep={"hardware.gpu": ["h100-sxm", "l40s"]})
    with pytest.raises(ScenarioError, match="sweep.hardware.tp: gives 2.0 twice"):
        scenarios.load(write(tmp_path), sweep={"hardware.tp": [2, 2.0]})


def test_a_variant_key_every_pool_sets_again_is_refused(tmp_path):
    # the pools' set applies last: the variants would run the same, under different names
    path = write(tmp_path, POOLS.format(gpu="a100-80gb-sxm").replace(
        '"hardware.tp" = 2', '"hardware.tp" = 2, "hardware.gpu" = "h200"')
        + '[[variants]]\nname = "h100"\nset = { "hardware.gpu" = "h100-sxm" }\n'
          '[[variants]]\nname = "l40s"\nset = { "hardware.gpu" = "l40s" }\n')
    with pytest.raises(ScenarioError, match="variant 'h100': hardware.gpu: every pool of "
                                            "\\[cluster\\] sets it again"):
        scenarios.load(path)
    # pools of their own, from the command line, leave the GPU to the variants
    pools = ('cluster.pools=[{name = "a", replicas = 1, set = {"hardware.tp" = 2}}, '
             '{name = "b", replicas = 2}]')
    assert len(scenarios.load(path, [pools]).runs()) == 2


def test_pools_given_by_an_override_or_a_variant_shadow_keys_as_the_files_do(tmp_path):
    # judged against the pools each variant runs, wherever they were given
    both = ('cluster.pools=[{name = "a", replicas = 1, set = {"engine.max_num_seqs" = 4}}, '
            '{name = "b", replicas = 1, set = {"engine.max_num_seqs" = 8}}]')
    with pytest.raises(ScenarioError, match="--sweep engine.max_num_seqs: every pool of "
                                            "\\[cluster\\] sets engine.max_num_seqs again"):
        scenarios.load(write(tmp_path), [both], sweep={"engine.max_num_seqs": [2, 3]})
    with pytest.raises(ScenarioError, match="--set engine.max_num_seqs: every pool"):
        scenarios.load(write(tmp_path), [both, "engine.max_num_seqs=2"])
    pooled = ('[cluster]\nrouter = "least_kv"\n[[cluster.pools]]\nname = "x"\nreplicas = 2\n'
              '[[variants]]\nname = "plain"\n[[variants]]\nname = "pooled"\n'
              'set = { ' + both.replace("=[", " = [", 1).replace("cluster.pools", '"cluster.pools"')
              + ' }\n')
    path = write(tmp_path, pooled)
    with pytest.raises(ScenarioError, match="--sweep engine.max_num_seqs: every pool"):
        scenarios.load(path, sweep={"engine.max_num_seqs": [2, 3]}, variant="pooled")
    # the plain variant's one pool reads it: the sweep changes its runs
    assert len(scenarios.load(path, sweep={"engine.max_num_seqs": [2, 3]}).runs()) == 4


def test_a_report_describes_variants_whose_rows_differ_in_kind(tmp_path):
    # a variant with pools (each pool's kernels in its hardware row) beside one without; a
    # cluster beside a single server: each setting some variant lacks says what it has instead
    from reports.describe import variant_table, what_was_run

    pooled = ('[[variants]]\nname = "single"\nset = { "hardware.tp" = 2 }\n[[variants]]\n'
              'name = "pooled"\nset = { "cluster" = { router = "round_robin", pools = ['
              '{ name = "h", replicas = 1, set = { "hardware.gpu" = "h200" } }, { name = "a", '
              'replicas = 1, set = { "hardware.gpu" = "a100-80gb-sxm" } }] } }\n')
    scenario = scenarios.load(write(tmp_path, pooled))
    specs = [sim.build.resolved_spec(spec) for spec in scenario.runs()]
    rows = dict(what_was_run(scenario, specs))
    assert rows["cluster"] == rows["kernels"] == "differs by variant: see Variants below"
    header, table = variant_table(scenario, specs)
    cells = dict(zip(header, table[1]))
    assert cells["kernels"] == "in each pool's hardware" and "pool `h`" in cells["hardware"]
    assert dict(zip(header, table[0]))["cluster"] == "none: one server"
    # a variant on the hardware model beside one that is not: no hardware, hence no kernels
    mixed = tmp_path / "mixed.toml"
    mixed.write_text('[cost]\nmodel = "linear"\n[workload]\nnum_requests = 6\narrival = { '
                     'process = "poisson", rate = 5.0 }\nprompt_tokens = { dist = "fixed", '
                     'value = 20 }\noutput_tokens = { dist = "fixed", value = 10 }\n'
                     '[[variants]]\nname = "linear"\n[[variants]]\nname = "gpu"\nset = { '
                     '"cost.model" = "hardware", "model" = { name = "meta-llama/Llama-3.1-8B" '
                     '}, "hardware.gpu" = "h100-sxm" }\n')
    scenario = scenarios.load(mixed)
    specs = [sim.build.resolved_spec(spec) for spec in scenario.runs()]
    header, table = variant_table(scenario, specs)
    assert dict(zip(header, table[0]))["kernels"] == "none (not the hardware model)"


def test_a_sweep_of_another_cluster_key_leaves_the_pools_judged(tmp_path):
    # the pools set engine.max_num_seqs at every point of a router or delay sweep
    path = write(tmp_path, POOLS.format(gpu="a100-80gb-sxm").replace(
        '"hardware.tp" = 2', '"hardware.tp" = 2, "engine.max_num_seqs" = 4').replace(
        'replicas = 2\nset = {', 'replicas = 2\nset = { "engine.max_num_seqs" = 8,'))
    with pytest.raises(ScenarioError, match="sweep engine.max_num_seqs: every pool"):
        scenarios.load(path, sweep={"engine.max_num_seqs": [2, 3],
                                    "cluster.report_delay_s": [0.0, 0.01]})
    with pytest.raises(ScenarioError, match="--set engine.max_num_seqs: every pool"):
        scenarios.load(path, ["engine.max_num_seqs=2"],
                       sweep={"cluster.router": ["round_robin", "least_kv"]})


def test_variant_loads_that_variant_alone(tmp_path):
    variants = ('[[variants]]\nname = "good"\n'
                '[[variants]]\nname = "bad"\nset = { "hardware.tp" = 3 }\n')
    with pytest.raises(ScenarioError, match="variant 'bad': hardware.tp = 3"):
        check_scenario(scenarios.load(write(tmp_path, variants)))
    good = scenarios.load(write(tmp_path, variants), variant="good")
    check_scenario(good)
    assert [spec.variant for spec in good.runs()] == ["good"]
    with pytest.raises(ScenarioError, match="--variant nope: the scenario's variants are good, "
                                            "bad"):
        scenarios.load(write(tmp_path, variants), variant="nope")


def test_with_one_variant_its_settings_are_the_bases_so_its_keys_may_be_set(tmp_path):
    overrides = ["cluster.decode_router=least_kv", "workload.num_requests=20"]
    with pytest.raises(ScenarioError, match="cluster.decode_router: only with "
                                            "cluster.prefill_replicas"):
        scenarios.load("pd-disaggregation", overrides)  # the co-located variant cannot
    scenario = scenarios.load("pd-disaggregation", overrides, variant="split-2p2d")
    assert scenario.base.cluster.decode_router == "least_kv"
    one = ('[cluster]\nkv_transfer_gbps = 45.0\n[[variants]]\nname = "split"\n'
           'set = { "cluster.prefill_replicas" = 1, "cluster.decode_replicas" = 1 }\n')
    [spec] = scenarios.load(write(tmp_path, one)).runs()
    assert spec.config.cluster.kv_transfer_gbps == 45.0


def test_what_a_sweep_changes_is_said_and_listed_run_by_run(tmp_path):
    scenario = scenarios.load(write(tmp_path), sweep={"hardware.gpu": ["h100-sxm", "h200"]})
    results = sim.simulate(scenario)
    text = reports.write_report(scenario, results, tmp_path / "out").markdown.read_text()
    engine = next(line for line in text.splitlines() if line.startswith("| engine |"))
    assert "(at the first sweep point; it changes with the sweep: see Sweep below)" in engine
    blocks = [config_rows(spec.config)["engine"].split(" KV blocks")[0] for spec, _ in results]
    assert blocks[0] != blocks[1]
    assert "What changes with the sweep, run by run:" in text
    assert all(f"| {b} KV blocks" in text for b in blocks)  # the H200's too


def test_a_sweep_whose_keys_change_nothing_else_lists_no_run_by_run_table():
    from reports.describe import sweep_table

    scenario = scenarios.load("load-sweep")
    assert scenario.sweep and sweep_table(scenario, scenario.runs()) is None


def test_variant_on_the_command_line_loads_that_variant_alone_with_flags_too(tmp_path):
    from sim.cli import main

    variants = ('[[variants]]\nname = "good"\n'
                '[[variants]]\nname = "bad"\nset = { "hardware.tp" = 3 }\n')
    out = tmp_path / "out"
    assert main(["run", write(tmp_path, variants), "--variant", "good", "--num-prompts", "8",
                 "--out", str(out), "--quiet"]) == 0
    assert json.loads((out / "summary.json").read_text())["num_prompts"] == 8


def test_a_prefill_replica_counts_the_requests_it_prefilled():
    scenario = scenarios.load("pd-disaggregation", ["workload.num_requests=60"],
                              variant="split-2p2d")
    results = sim.simulate(scenario)
    table = reports.writer.replicas_table(results, reports.tables.run_summaries(results))
    prefill = table[table["pool"] == "prefill"]
    decode = table[table["pool"] == "decode"]
    assert prefill["requests"].sum() == decode["requests"].sum() == 60
    assert (prefill["requests"] > 0).all() and prefill["completed"].sum() == 0


def test_the_engine_row_is_each_data_parallel_ranks_and_static_batching_has_no_budget():
    """Eight attention data-parallel ranks each hold the engine's KV blocks and limits (a
    quarter of TP 8's blocks is not a quarter of its capacity); static batching prefills a
    batch whole, whatever max_num_batched_tokens says."""
    [dp] = scenarios.load("moe-deepseek-h200", variant="dp8-ep8").runs()
    config = sim.build.resolved_spec(dp).config
    blocks = config.engine.num_kv_blocks
    assert config_rows(config)["engine"].startswith(
        f"each of 8 data-parallel ranks: {blocks:,} KV blocks of 16 tokens (derived")
    [static] = scenarios.load("static-vs-continuous", variant="static").runs()
    rows = config_rows(static.config)
    assert "each batch prefilled whole (max_num_batched_tokens does not apply)" in \
        rows["scheduler"] and not rows["engine"].startswith("each")


def test_a_disaggregated_runs_report_says_whose_first_token_its_ttft_is(tmp_path):
    scenario = scenarios.load("pd-disaggregation", ["workload.num_requests=30"])
    out = reports.write_report(scenario, sim.simulate(scenario), tmp_path / "out").out_dir
    markdown = (out / "report.md").read_text()
    assert "TTFT is the prefill replica's first token" in markdown
    assert "`decode_first_token_s - arrival_s` in requests.csv" in markdown
    alone = scenarios.load("kv-pressure", ["workload.num_requests=10"])
    out = reports.write_report(alone, sim.simulate(alone), tmp_path / "alone").out_dir
    assert "prefill replica" not in (out / "report.md").read_text()


def test_a_config_not_resolved_against_its_gpu_is_described(tmp_path):
    config = scenarios.load("llama3-8b-h100").runs()[0].config  # "auto" blocks, as bench has it
    assert config_rows(config)["engine"].startswith("KV blocks of 16 tokens: 'auto' (from the "
                                                    "GPU's memory)")


def test_kernels_the_variants_share_are_described_once(tmp_path):
    """Variants differing in their KV cache alone run the same measured kernels: the report's
    kernels row says which once, and the Variants table gives each one's hardware without
    them; a variant on another GPU gives its own."""
    pytest.importorskip("aiconfigurator_core")
    from reports.describe import variant_table, what_was_run

    variants = ('[[variants]]\nname = "bf16"\nset = { "hardware.kv_dtype" = "bf16" }\n'
                '[[variants]]\nname = "fp8"\nset = { "hardware.kv_dtype" = "fp8" }\n')
    scenario = scenarios.load(write_hardware(tmp_path, hardware='dtype = "bf16"',
                                             extra=variants))
    specs = [sim.build.resolved_spec(spec) for spec in scenario.runs()]
    rows = dict(what_was_run(scenario, specs))
    assert rows["hardware"] == "differs by variant: see Variants below"
    assert rows["kernels"].startswith("vllm 0.24.0 kernels measured on h100-sxm: ")
    header, table = variant_table(scenario, specs)
    assert "kernels" not in header and all("measured" not in " ".join(row) for row in table)
    other = variants.replace('"hardware.kv_dtype" = "fp8"', '"hardware.gpu" = "h200"')
    scenario = scenarios.load(write_hardware(tmp_path, hardware='dtype = "bf16"', extra=other))
    specs = [sim.build.resolved_spec(spec) for spec in scenario.runs()]
    assert dict(what_was_run(scenario, specs))["kernels"] == "differs by variant: see Variants " \
                                                             "below"
    assert "kernels" in variant_table(scenario, specs)[0]
