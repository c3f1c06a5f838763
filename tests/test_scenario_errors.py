"""Scenario files with mistakes: one line for every kind (each naming the file, the variant or
sweep point and the dotted key, or the override that made it), raised before anything runs,
whether the loader finds it or only a built run can; and a key no run reads, refused where it
was given. (Loading what is right: test_scenarios.py.)"""

from __future__ import annotations

import pytest

import scenarios
from helpers.scenario_files import LINEAR, WORKLOAD, load_error, write
from scenarios import ScenarioError
from sim.checks import check_scenario


BAD_FILES = {
    "lognormal without mass": (WORKLOAD.replace("median = 64", "median = 100000"),
                               "workload.prompt_tokens: lognormal(median=100000, sigma=0.5) puts "
                               "only"),
    "unknown top key": ("colour = 1\n" + WORKLOAD, "colour: unknown key"),
    "unknown engine key": ("[engine]\nnum_blocks = 3\n" + WORKLOAD,
                           "engine.num_blocks: unknown key (did you mean 'num_kv_blocks'? "
                           "allowed: block_size, num_kv_blocks"),
    "wrong type": ('[engine]\nblock_size = "16"\n' + WORKLOAD,
                   "engine.block_size: must be a positive integer, got '16'"),
    "float for int": ("seed = 1.5\n" + WORKLOAD, "seed: must be a non-negative integer, got 1.5"),
    "negative rate": (WORKLOAD.replace("rate = 4.0", "rate = -1"),
                      "workload.arrival.rate: must be a positive number, got -1"),
    "unknown process": (WORKLOAD.replace('"poisson"', '"hawkes"'),
                        "workload.arrival.process: must be one of poisson, gamma, constant"),
    "key of another process": (WORKLOAD.replace("rate = 4.0", "rate = 4.0, cv = 2"),
                               "workload.arrival.cv: unknown key for process = 'poisson'"),
    "unknown dist": (WORKLOAD.replace('"uniform"', '"zipf"'),
                     "workload.output_tokens.dist: must be one of fixed, uniform, lognormal"),
    "unknown policy": ('[scheduler]\npolicy = "fifo"\n' + WORKLOAD,
                       "scheduler.policy: must be one of static, continuous, got 'fifo'"),
    "low above high": (WORKLOAD.replace("low = 4", "low = 40"),
                       "workload.output_tokens.low (40) must be <= workload.output_tokens.high"),
    "min above max": (WORKLOAD.replace("max = 512", "min = 600, max = 512"),
                      "workload.prompt_tokens.min (600) must be <= workload.prompt_tokens.max"),
    "missing workload": ("seed = 1\n", "workload: required"),
    "missing length": (WORKLOAD.replace('output_tokens = { dist = "uniform", low = 4, high = 32 }',
                                        ""), "workload.output_tokens: required"),
    "lengths with a trace": ('[workload]\nnum_requests = 3\ntrace = { name = "azure-code" }\n',
                             "workload.num_requests: not allowed"),
    "arrivals with a timed trace": ('[workload]\narrival = { process = "poisson", rate = 1.0 }\n'
                                    'trace = { name = "azure-code" }\n',
                                    "workload.arrival.process: must be 'trace' (or absent)"),
    "trace name and path": ('[workload]\ntrace = { name = "azure-code", path = "a.csv" }\n',
                            "workload.trace.path: not allowed with workload.trace.name"),
    "trace without a file": ('[workload]\ntrace = { format = "csv" }\n',
                             "workload.trace: needs name (a shipped trace: azure-conv, azure-code, "
                             "mooncake-conv) or path (a trace file)"),
    "unknown shipped trace": ('[workload]\ntrace = { name = "sharegpt" }\n',
                              "workload.trace.name: must be one of azure-conv, azure-code, "
                              "mooncake-conv, got 'sharegpt'"),
    "format of a shipped trace": ('[workload]\ntrace = { name = "azure-conv", format = "csv" }\n',
                                  "workload.trace.format: not allowed with workload.trace.name"),
    "unknown trace format": ('[workload]\ntrace = { path = "a.csv", format = "parquet" }\n',
                             "workload.trace.format: must be one of azure, mooncake, csv, jsonl, "
                             "sharegpt"),
    "sharegpt without arrivals": ('[workload]\ntrace = { path = "c.json", format = "sharegpt" }\n',
                                  "workload.arrival: required with a sharegpt trace"),
    "time scale of sharegpt": ('[workload]\narrival = { process = "poisson", rate = 1.0 }\n'
                               'trace = { path = "c.json", format = "sharegpt", time_scale = 2.0 }\n',
                               "workload.trace.time_scale: not allowed with format 'sharegpt'"),
    "tokenizer of a timed trace": ('[workload]\ntrace = { name = "azure-code", tokenizer = "char" }'
                                   '\n', "workload.trace.tokenizer: not allowed with format 'azure'"),
    "unknown tokenizer": ('[workload]\narrival = { process = "poisson", rate = 1.0 }\n'
                          'trace = { path = "c.json", format = "sharegpt", tokenizer = "bpe" }\n',
                          "workload.trace.tokenizer: must be one of char, whitespace"),
    "bad budget": ("[engine]\nmax_num_seqs = 64\nmax_num_batched_tokens = 32\n" + WORKLOAD,
                   "engine.max_num_batched_tokens (32) must be >= engine.max_num_seqs (64)"),
    "bad heads": ("[model]\nn_heads = 3\n" + WORKLOAD, "model.d_model (512) must be divisible"),
    "invalid toml": ("seed = \n" + WORKLOAD, "not valid TOML"),
    "variant unknown key": (WORKLOAD + '[[variants]]\nname = "a"\nsett = {}\n',
                            "variants[0].sett: unknown key (did you mean 'set'? allowed: name, set)"),
    "variant twice": (WORKLOAD + '[[variants]]\nname = "a"\n[[variants]]\nname = "a"\n',
                      "variants[1].name: must be unique"),
    "variant bad value": (WORKLOAD + '[[variants]]\nname = "x"\nset = { "scheduler.policy" = '
                                     '"fifo" }\n', "variant 'x': scheduler.policy: must be one of"),
    "variant unknown key path": (WORKLOAD + '[[variants]]\nname = "x"\nset = { "engine.blocks"'
                                            ' = 3 }\n', "variant 'x': engine.blocks: unknown key"),
    "sweep bad value": (WORKLOAD + '[sweep]\n"workload.arrival.rate" = [1, 0]\n',
                        "sweep workload.arrival.rate=0: workload.arrival.rate: must be a positive"),
    "sweep not a list": (WORKLOAD + '[sweep]\n"workload.arrival.rate" = 3\n',
                         "sweep.workload.arrival.rate: must be a non-empty list"),
    "sweep repeats a number": (WORKLOAD + '[sweep]\n"workload.arrival.rate" = [1, 2, 1.0]\n',
                               "sweep.workload.arrival.rate: gives 1.0 twice"),
    "sweep repeats a table": (WORKLOAD + '[sweep]\n"workload.arrival" = [{ process = "poisson",'
                                         ' rate = 1.0 }, { process = "poisson", rate = 1.0 }]\n',
                              "sweep.workload.arrival: gives {'process': 'poisson', 'rate': 1.0} "
                              "twice"),
}


def case_file(tmp_path, text: str):
    """A case's text written as a scenario file, under the linear cost model unless it names
    one."""
    return write(tmp_path, text + "\n" + LINEAR if "[cost]" not in text else text)


@pytest.mark.parametrize("case", BAD_FILES)
def test_a_bad_file_is_one_line_naming_the_file_and_key(tmp_path, case):
    text, expected = BAD_FILES[case]
    path = case_file(tmp_path, text)
    message = load_error(path)
    assert message.startswith(f"{path}: ")
    assert expected in message


# Found where the simulator builds a run (a file it reads, a distribution it draws from): the
# scenario loader is data and schema only, and the same one-line error comes from
# `sim.checks.check_scenario`, which every command calls before the first run starts.
BAD_WHEN_BUILT = {
    "missing trace file": ('[workload]\ntrace = { path = "no/such/trace.csv" }\n',
                           "workload.trace.path: file not found: no/such/trace.csv"),
    "unknown profile": ('[cost]\nprofile = "nope"\n' + WORKLOAD, "cost.profile: no shipped profile"),
    "missing profile file": ('[cost]\nprofile = "no/such.json"\n' + WORKLOAD,
                             "cost.profile: file not found: no/such.json"),
}


def check_error(path, overrides=()) -> str:
    scenario = scenarios.load(path, overrides)  # the schema accepts it
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenario)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("case", BAD_WHEN_BUILT)
def test_what_only_a_built_run_can_tell_is_one_line_naming_the_file_and_key(tmp_path, case):
    text, expected = BAD_WHEN_BUILT[case]
    path = case_file(tmp_path, text)
    message = check_error(path)
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_a_problem_found_when_built_names_the_variant_and_sweep_point(tmp_path):
    path = write(tmp_path, LINEAR + WORKLOAD + '[[variants]]\nname = "a"\n[[variants]]\n'
                 'name = "b"\nset = { "cost.model" = "profile", "cost.profile" = "nope" }\n'
                 '[sweep]\n"workload.arrival.rate" = [1, 2]\n')
    assert check_error(path).startswith(
        f"{path}: variant 'b': sweep workload.arrival.rate=1: cost.profile: no shipped profile")


def test_a_problem_found_when_built_is_blamed_on_the_override_that_made_it(tmp_path):
    path = write(tmp_path, LINEAR + WORKLOAD)
    assert check_error(path, ["cost.model=profile", "cost.profile=nope"]).startswith(
        f"{path}: --set: cost.profile: no shipped profile")
    bad = write(tmp_path, '[cost]\nprofile = "nope"\n' + WORKLOAD, "bad.toml")
    assert check_error(bad, ["seed=3"]).startswith(f"{bad}: cost.profile: no shipped profile")


def test_bad_set_values_name_the_file_the_override_and_the_key(tmp_path):
    path = write(tmp_path, LINEAR + WORKLOAD)
    cases = {"workload.arrival.rate=-2": "--set: workload.arrival.rate: must be a positive number",
             "engine.blocks=3": "--set: engine.blocks: unknown key",
             "scheduler.policy=fifo": "--set: scheduler.policy: must be one of static, continuous",
             "scheduler.chunked_prefill=yes": "--set: scheduler.chunked_prefill: must be true or false",
             "engine.block_size.x=1": "--set: engine.block_size: must be a positive integer",
             "workload.arrival.rate.x=1": "--set: workload.arrival.rate: is a value, not a table",
             "seed": "--set: seed: --set expects KEY=VALUE",
             "sweep.x=[1]": "--set: sweep.x: variants and sweep cannot be overridden"}
    for override, expected in cases.items():
        message = load_error(path, [override])
        assert message.startswith(f"{path}: ") and expected in message, (override, message)


def test_a_mistake_of_the_file_is_blamed_on_the_file_even_with_set(tmp_path):
    path = write(tmp_path, LINEAR + WORKLOAD.replace("rate = 4.0", "rate = -1"))
    message = load_error(path, ["seed=3"])
    assert message == f"{path}: workload.arrival.rate: must be a positive number, got -1"


def test_set_can_repair_what_the_file_lacks(tmp_path):
    path = write(tmp_path, '[cost]\nprofile = "nope"\n' + WORKLOAD)
    assert scenarios.load(path, ["cost.model=linear"]).base.cost.model == "linear"


@pytest.mark.parametrize("text, overrides, message", [
    # the fitted profile reads no linear coefficient: given anywhere, it is refused
    (WORKLOAD, ["cost.prefill_token_s=0.01"], "case.toml: --set: cost.prefill_token_s: read "
     "with cost.model = 'linear' only, and no run has it (cost.model is 'profile')"),
    (WORKLOAD + "[cost]\ndecode_seq_s = 0.01\n", [],
     "case.toml: cost.decode_seq_s: read with cost.model = 'linear' only"),
    (WORKLOAD + LINEAR + "profile = \"default\"\n", [],
     "case.toml: cost.profile: read with cost.model = 'profile' only, and no run has it "
     "(cost.model is 'linear')"),
    (WORKLOAD + '[[variants]]\nname = "big"\nset = { "scheduler.max_batch_size" = 64 }\n', [],
     "case.toml: variant 'big': scheduler.max_batch_size: read with scheduler.policy = "
     "'static' only, and no run has it (scheduler.policy is 'continuous')"),
])
def test_a_key_no_run_reads_is_refused_where_it_was_given(tmp_path, text, overrides, message):
    assert message in load_error(write(tmp_path, text), overrides)


def test_a_swept_key_no_run_reads_is_refused_and_one_a_search_grid_makes_read_is_not(
        tmp_path):
    sweep = '[sweep]\n"scheduler" = [{ max_batch_size = 4 }, { max_batch_size = 8 }]\n'
    assert "[sweep]: scheduler.max_batch_size: read with scheduler.policy = 'static' only" in \
        load_error(write(tmp_path, WORKLOAD + sweep))
    grid = ('[scheduler]\nmax_batch_size = 8\n[search]\nrate = { low = 1.0, high = 8.0 }\n'
            'grid = { "scheduler.policy" = ["static", "continuous"] }\n')
    assert scenarios.load(write(tmp_path, WORKLOAD + grid, "grid.toml")).base.search is not None


def test_the_swap_bandwidth_is_not_read_under_the_hardware_model(tmp_path):
    path = write(tmp_path, '[model]\nname = "meta-llama/Llama-3.1-8B"\n[hardware]\n'
                 'gpu = "h100-sxm"\n[cost]\nmodel = "hardware"\n' + WORKLOAD)
    swap = ['scheduler.preemption="swap"', "engine.swap_blocks=64"]
    assert load_error(path, swap + ["cost.swap_bandwidth_gbs=5"]).endswith(
        "--set: cost.swap_bandwidth_gbs: read with scheduler.preemption = 'swap' only, and not "
        "with cost.model = 'hardware' (the GPU's host_bandwidth_gbs is read instead): no run "
        "reads it; drop it")
    assert scenarios.load(path, swap).specs  # the host link's own speed
    # the file's own bandwidth, left unread by an override of the cost model, as asked
    numpy = write(tmp_path, '[scheduler]\npreemption = "swap"\n[engine]\nswap_blocks = 64\n'
                  '[cost]\nswap_bandwidth_gbs = 5.0\n' + WORKLOAD, "numpy.toml")
    assert scenarios.load(numpy, ['cost.model="hardware"', 'hardware.gpu="h100-sxm"',
                                  'model.name="meta-llama/Llama-3.1-8B"']).specs


def test_an_override_some_variants_set_again_and_the_others_do_not_read_is_refused(tmp_path):
    variants = ('[[variants]]\nname = "a"\nset = { "scheduler.max_batch_size" = 32, '
                '"scheduler.policy" = "static" }\n[[variants]]\nname = "b"\n')
    path = write(tmp_path, WORKLOAD + variants)
    assert load_error(path, ["scheduler.max_batch_size=8"]).endswith(
        "--set scheduler.max_batch_size: changes no run: a sets it again after it, b does not "
        "read it; drop it, or set it in the variants")
    # swept or searched over the policy, b reads it at some points: taken
    swept = scenarios.load(path, ["scheduler.max_batch_size=8"],
                           sweep={"scheduler.policy": ["continuous", "static"]})
    assert {spec.config.scheduler.max_batch_size for spec in swept.specs} == {32, 8}
    grid = write(tmp_path, WORKLOAD + '[slo]\nttft_s = 1.0\n[search]\nrate = { low = 0.5, '
                 'high = 8.0 }\ngrid = { "scheduler.policy" = ["continuous", "static"] }\n'
                 + variants.replace(', "scheduler.policy" = "static"', ""), "grid.toml")
    assert scenarios.load(grid, ["scheduler.max_batch_size=8"]).specs
    # a grid over another setting (what swap_blocks is read under) changes nothing of that
    other = write(tmp_path, WORKLOAD + '[engine]\nswap_blocks = 64\n[slo]\nttft_s = 1.0\n'
                  '[search]\nrate = { low = 0.5, high = 8.0 }\n'
                  'grid = { "scheduler.preemption" = ["recompute", "swap"] }\n' + variants,
                  "other.toml")
    assert "a sets it again after it, b does not read it" in load_error(
        other, ["scheduler.max_batch_size=8"])


def test_a_key_some_run_reads_is_taken_though_other_runs_ignore_it(tmp_path):
    # the static variant reads the base's batch size; the continuous one ignores it
    path = write(tmp_path, WORKLOAD + "[scheduler]\nmax_batch_size = 4\n"
                 '[[variants]]\nname = "static"\nset = { "scheduler.policy" = "static" }\n'
                 '[[variants]]\nname = "continuous"\n')
    static, _ = scenarios.load(path).runs()
    assert static.config.scheduler.max_batch_size == 4
