"""Notes (`sim.notes`): what a run tells its user is said once per command, never per step or
per worker process; a scenario refused gets its one line of error alone; each run keeps its own
notes and its report lists them; `layer_op_times` checks its arguments and says where the
tables do not reach."""

from __future__ import annotations

import numpy as np
import pytest

import scenarios
import sim
from helpers.hardware import write_hardware
from reports.section_text import hardware_text
from scenarios import ScenarioError
from sim import notes
from sim.checks import check_scenario
from sim.parallel import Parallel, run_config_job, run_jobs

A40 = "no measured kernel tables for GPU 'a40'"  # the note of a GPU without tables


def write(tmp_path, variants="") -> str:
    return write_hardware(tmp_path, gpu="a40", extra=variants, requests=6, rate=4.0,
                          prompts=(100, 400), outputs=(10, 40))


@pytest.fixture(autouse=True)
def fresh():
    notes.forget()
    yield
    notes.forget()


def test_a_note_is_printed_once_held_notes_wait_and_collected_ones_are_kept(capsys):
    with notes.collected() as kept:
        notes.say_once("note: a")
        notes.say_once("note: a")
        with notes.held() as held:
            notes.say_once("note: b")
        assert capsys.readouterr().err == "note: a\n"  # b is held
        notes.release(held)
        notes.release(held)
    assert capsys.readouterr().err == "note: b\n"
    assert kept == ["note: a", "note: b"] and held == ["note: b"]


def test_a_hold_inside_a_hold_prints_nothing_and_an_error_leaves_no_holder_open(capsys):
    with notes.held() as outer:
        with notes.held() as inner:
            notes.say_once("note: x")
        notes.release(inner)  # still held by the outer holder
        assert capsys.readouterr().err == ""
        with pytest.raises(RuntimeError), notes.held():
            raise RuntimeError
    assert outer == inner == ["note: x"]
    notes.say_once("note: y")  # no holder left open
    assert capsys.readouterr().err == "note: y\n"


def test_a_refused_scenario_says_its_error_alone_not_the_notes_before_it(tmp_path, capsys):
    bad = '[[variants]]\nname = "a"\n[[variants]]\nname = "b"\nset = { "hardware.tp" = 3 }\n'
    with pytest.raises(ScenarioError, match="variant 'b': hardware.tp = 3 does not divide"):
        check_scenario(scenarios.load(write(tmp_path, bad)))
    assert capsys.readouterr().err == ""
    check_scenario(scenarios.load(write(tmp_path)))  # once every check passed: said
    assert capsys.readouterr().err.count(A40) == 1


def test_workers_notes_are_said_once_by_the_parent_and_kept_by_each_run(tmp_path, capfd):
    scenario = scenarios.load(write(tmp_path), sweep={"workload.num_requests": [4, 5, 6]})
    jobs = [(spec.config, tmp_path) for spec in scenario.runs()]
    recorders = run_jobs(run_config_job, jobs, Parallel(workers=2))
    assert capfd.readouterr().err.count(A40) == 1  # not once per worker process
    for recorder in recorders:
        assert len(recorder.notes) == 1 and A40 in recorder.notes[0]
    serial = run_jobs(run_config_job, jobs, Parallel(workers=1))  # in this process
    assert [r.notes for r in serial] == [r.notes for r in recorders]


def test_the_report_lists_the_runs_notes(tmp_path):
    import reports

    scenario = scenarios.load(write(tmp_path))
    results = sim.simulate(scenario)
    files = reports.write_report(scenario, results, tmp_path / "out")
    text = files.markdown.read_text()
    assert "### Notes from the runs" in text
    [row] = [line for line in text.splitlines() if A40 in line]
    assert row.endswith("| every run |") and "note: " not in row


def test_the_report_gives_the_parallel_layout_in_numbers():
    derived = {"tp": 1, "dp": 8, "ep": 8, "gpu": "h200", "gpu_name": "NVIDIA H200",
               "dtype": "fp8", "kv_dtype": "bf16", "weights_gib_per_gpu": 79.0,
               "kv_gib_per_gpu": 45.6, "kv_tokens": 696_768,
               "kv_bytes_per_token_per_gpu": 70272, "kernel_sources": {}}
    assert hardware_text(derived).startswith(
        "8 x NVIDIA H200 (`h200`): TP 1 x DP 8 (attention data-parallel ranks of 1 GPU), EP 8, "
        "fp8 weights")
    assert ": TP 2, bf16" in hardware_text(derived | {"tp": 2, "dp": 1, "ep": 1,
                                                      "dtype": "bf16"})
    assert "fp8 weights (block-scaled)," in hardware_text(derived | {"activation_scheme": "block"})
    assert "fp8 weights (dynamic activation scales)," in \
        hardware_text(derived | {"activation_scheme": "dynamic"})


# --- layer_op_times: its arguments checked ----------------------------------------------------

LLAMA = "meta-llama/Llama-3.1-8B"
GPU = {"name": "x", "memory_gib": 80, "memory_bandwidth_gbs": 3000, "peak_tflops": {"bf16": 900},
       "interconnect_bandwidth_gbs": 400, "interconnect_latency_us": 10, "measured": "h100"}


@pytest.mark.parametrize("args, kwargs, message", [
    ((LLAMA, "h100-sxm", 0, 512), {}, "tp must be an integer from 1 to 8, got 0"),
    ((LLAMA, "h100-sxm", True, 512), {}, "tp must be an integer from 1 to 8, got True"),
    ((LLAMA, "h100-sxm", 2.0, 512), {}, "tp must be an integer from 1 to 8, got 2.0"),
    ((LLAMA, "h100-sxm", 16, 512), {}, "tp must be an integer from 1 to 8, got 16"),
    ((LLAMA, "h100-sxm", 1, 0), {}, "num_tokens must be a whole number of tokens >= 1"),
    ((LLAMA, "h100-sxm", 1, 0.5), {}, "num_tokens must be a whole number of tokens >= 1"),
    ((LLAMA, "h100-sxm", 1, "512"), {}, "num_tokens must be a whole number of tokens >= 1"),
    ((LLAMA, "h100-sxm", 1, [4, float("nan")]), {}, "num_tokens must be a whole number"),
    ((LLAMA, "h100-sxm", 1, None), {}, "num_tokens must be a whole number of tokens >= 1"),
    ((LLAMA, "h100-sxm", 1, 512), {"framework": "tensorrt"},
     "framework must be one of vllm, sglang, trtllm, got 'tensorrt'"),
    ((LLAMA, "h100-sxm", 1, 512), {"kernels": "measurd"}, "kernels must be one of None, "),
    ((LLAMA, "h100-sxm", 1, 512), {"dtype": "mxfp4"}, "mxfp4 quantizes a mixture of experts'"),
    ((LLAMA, "h100-sxm", 1, 512), {"activation_scheme": "dynamic"},
     '"dynamic" applies to fp8 weights'),
    ((None, "h100-sxm", 1, 512), {}, "model must be a catalog id or a dict of architecture keys"),
    (({"hidden": 4096}, "h100-sxm", 1, 512), {}, "model: unknown key 'hidden' (allowed: name, "),
    ((LLAMA, None, 1, 512), {}, "gpu must be a catalog id or a table of GPU keys, got None"),
    (("mistralai/Mixtral-8x7B-v0.1", "h100-sxm", 2, 512), {"ep": -2},
     "ep must be an integer from 1 to 8, got -2"),
    ((LLAMA, dict(GPU, measured=["h100"]), 1, 512), {},
     "hardware.gpu.measured: must be a string, got ['h100']"),
    ((LLAMA, dict(GPU, memory_bandwith_gbs=3000), 1, 512), {},
     "hardware.gpu.memory_bandwith_gbs: unknown key (nearest: memory_bandwidth_gbs"),
    (({"name": LLAMA, "gated_mlp": "no"}, "h100-sxm", 1, 512), {},
     "model.gated_mlp must be true or false, got 'no'"),
    (({"name": LLAMA, "d_ff": 14337}, "h100-sxm", 2, 512), {},
     "hardware.tp = 2 does not divide the model's MLP width (14337); use one of 1"),
    (({"name": "mistralai/Mixtral-8x7B-v0.1", "moe_d_ff": 14337}, "h100-sxm", 2, 512), {},
     "hardware.ep = 1 splits each expert over hardware.tp = 2 GPUs, which does not divide its "
     "width (14337); use hardware.ep = 2 (whole experts)"),
    (({"config": "/nowhere/config.json"}, "h100-sxm", 1, 512), {},
     "model.config: file not found: /nowhere/config.json"),
])
def test_layer_op_times_refuses_what_it_cannot_cost(args, kwargs, message):
    with pytest.raises(ValueError) as info:
        sim.layer_op_times(*args, **kwargs)
    assert message in str(info.value)


def test_layer_op_times_past_the_tables_reach_is_the_roofline_from_where_they_end(capsys):
    """Past the reach, the roofline's growth from the tables' time where they end (65,536
    rows: 2 x the largest measured GEMM rows, 32,768), not its level; said once."""
    pytest.importorskip("aiconfigurator_core")
    tokens = np.array([[512, 65537]])
    measured = sim.layer_op_times(LLAMA, "h100-sxm", 1, tokens, kernels="measured")
    roofline = sim.layer_op_times(LLAMA, "h100-sxm", 1, tokens, kernels="roofline")
    assert measured["mlp_up_proj"].shape == (1, 2)
    assert measured["mlp_up_proj"][0, 0] != roofline["mlp_up_proj"][0, 0]
    edge = sim.layer_op_times(LLAMA, "h100-sxm", 1, 65536, kernels="measured")["mlp_up_proj"]
    edge_roofline = sim.layer_op_times(LLAMA, "h100-sxm", 1, 65536,
                                       kernels="roofline")["mlp_up_proj"]
    assert measured["mlp_up_proj"][0, 1] == pytest.approx(
        roofline["mlp_up_proj"][0, 1] * edge / edge_roofline, rel=1e-12)
    err = capsys.readouterr().err
    assert err.count("past the measured tables' reach") == 1 and "mlp_up_proj" in err
    assert measured["mlp_up_proj"][0, 0] == sim.layer_op_times(
        LLAMA, "h100-sxm", 1, 512, kernels="measured")["mlp_up_proj"]
    # asked alone, a row count past the reach gets the same
    assert measured["mlp_up_proj"][0, 1] == sim.layer_op_times(
        LLAMA, "h100-sxm", 1, 65537, kernels="measured")["mlp_up_proj"]


def test_layer_op_times_below_a_tables_first_rows_is_the_same_alone_or_beside_others():
    """SGLang's MXFP4 experts of gpt-oss at TP 2 x EP 2 on the RTX PRO 6000 are measured from
    1,024 tokens (reached from 512): below, the roofline meets them where they start, whatever
    else is asked for with it."""
    pytest.importorskip("aiconfigurator_core")

    def experts(tokens):
        return sim.layer_op_times("openai/gpt-oss-120b", "rtx-pro-6000", 2, tokens,
                                  dtype="mxfp4", ep=2, framework="sglang",
                                  kernels="measured")["moe_experts"]

    alone = experts(100)
    assert experts(np.array([100, 600]))[0] == alone == experts(np.array([100, 5000]))[0]
    assert experts(511) < experts(512) < 1.01 * experts(511)


def test_no_step_time_drops_where_the_tables_end(tmp_path):
    """vLLM's fp8 experts of Mixtral at TP 2 on the H200 are measured up to 16,384 tokens,
    reached to 32,768, and timed there at several times the roofline's: a step of one token
    more must not take a fifth of the time."""
    pytest.importorskip("aiconfigurator_core")
    from sim.costs.hardware.cost import HardwareCost
    from sim.costs.hardware.setup import hardware_setup
    from sim.costs.shape import StepShape

    mixtral = "mistralai/Mixtral-8x7B-v0.1"
    experts = sim.layer_op_times(mixtral, "h200", 2, np.array([32768, 32769]), dtype="fp8",
                                 kernels="measured")["moe_experts"]
    assert experts[0] <= experts[1] < 1.001 * experts[0]
    path = write_hardware(tmp_path, model=mixtral, gpu="h200", max_seq_len=32768,
                          hardware='tp = 2\ndtype = "fp8"')
    cost = HardwareCost(hardware_setup(scenarios.load(path).base))

    def prefill(tokens: int) -> float:
        return cost.step_time(StepShape(prefill_tokens=tokens, prefill_seqs=1, sampled_seqs=1,
                                        prefill_attention=tokens * tokens,
                                        prefill_square=tokens * tokens))

    assert prefill(32768) <= prefill(32769) < 1.01 * prefill(32768)  # its attention: 0.3%


def test_a_step_is_said_past_the_tables_reach_only_once_one_is_costed(tmp_path, capsys):
    """The tables grow to twice the largest step asked for: a step of 16,384 rows, which vLLM
    0.14's A100 GEMMs (up to 8,192 rows) reach, says nothing; one of 16,385 says so, once."""
    pytest.importorskip("aiconfigurator_core")
    from sim.costs.hardware.cost import HardwareCost
    from sim.costs.hardware.setup import hardware_setup
    from sim.costs.shape import StepShape

    path = write_hardware(tmp_path, gpu="a100-80gb-sxm", hardware='dtype = "bf16"')
    cost = HardwareCost(hardware_setup(scenarios.load(path).base))
    capsys.readouterr()

    def prefill(tokens: int) -> StepShape:
        return StepShape(prefill_tokens=tokens, prefill_seqs=1, sampled_seqs=1,
                         prefill_attention=tokens * tokens, prefill_square=tokens * tokens)

    cost.step_time(prefill(16_384))
    assert "reach" not in capsys.readouterr().err
    for _ in range(2):
        cost.step_time(prefill(16_385))
    err = capsys.readouterr().err
    assert err.count("steps of 16,385 rows or more are past the measured tables' reach") == 1
    assert "mlp_up_proj" in err and "lm_head" not in err


def test_layer_op_times_keeps_a_measured_latent_blocks_operators_and_says_whose(capsys):
    """A run costs DeepSeek-V3's measured latent-attention block whole, per step; the layer's
    operators still list its projections (the roofline's), and a note says why."""
    pytest.importorskip("aiconfigurator_core")
    args = ("deepseek-ai/DeepSeek-V3", "h200", 8, 64)
    measured = sim.layer_op_times(*args, dtype="fp8")
    roofline = sim.layer_op_times(*args, dtype="fp8", kernels="roofline")
    block = ["mla_down_proj", "mla_q_up_proj", "mla_kv_up_proj", "mla_norm", "attn_post_proj",
             "attn_rope"]
    assert [measured[op] for op in block] == [roofline[op] for op in block]
    assert measured["moe_experts"] != roofline["moe_up_proj"]  # the rest measured
    assert capsys.readouterr().err.count("latent attention is measured as a whole block") == 1
    # SGLang's block leaves its down projection out: a measured GEMM here, and not named
    sglang = sim.layer_op_times(*args, dtype="fp8", framework="sglang",
                                activation_scheme="block")
    assert sglang["mla_down_proj"] != roofline["mla_down_proj"]
    assert sglang["mla_q_up_proj"] == roofline["mla_q_up_proj"]
    err = capsys.readouterr().err
    assert "its mla_q_up_proj, mla_kv_up_proj, mla_norm, attn_post_proj, attn_rope here are " \
        "the roofline's" in err and "mla_down_proj" not in err


def test_a_config_jsons_quantization_other_than_the_scenarios_dtype_is_said(tmp_path, capsys):
    """A config.json's quantization_config is compared with what the scenario costs, and a
    difference said once: the scenario's dtype is costed, not the file's."""
    from helpers.hf_configs import CONFIGS, write_config
    from sim.costs.hardware.setup import hardware_setup

    def note(quantization, hardware):
        table = CONFIGS["Qwen/Qwen3-32B"] | ({"quantization_config": quantization}
                                             if quantization is not None else {})
        write_config(tmp_path, table, "q.json")
        path = write_hardware(tmp_path, model="x", hardware=hardware, gpu="h100-sxm")
        text = open(path).read().replace('name = "x"', 'config = "q.json"')
        open(path, "w").write(text)
        notes.forget()
        capsys.readouterr()
        hardware_setup(scenarios.load(path).base)
        return capsys.readouterr().err

    block = {"quant_method": "fp8", "weight_block_size": [128, 128],
             "activation_scheme": "dynamic"}
    said = note(block, 'tp = 2\ndtype = "bf16"')
    assert said.count("its quantization_config makes the weights hardware.dtype = \"fp8\", "
                      "activation_scheme = \"block\"; costed as the scenario's "
                      "hardware.dtype = \"bf16\"") == 1
    assert "quantization_config" not in note(block, 'dtype = "fp8"\nactivation_scheme = "block"')
    assert "quantization_config" not in note(None, 'tp = 2\ndtype = "bf16"')
    assert "(awq) is a format servesim does not cost; the weights are costed as " \
        "hardware.dtype = \"bf16\"" in note({"quant_method": "awq", "bits": 4},
                                            'tp = 2\ndtype = "bf16"')
    assert "makes the weights hardware.dtype = \"nvfp4\"; costed as the scenario's " \
        "hardware.dtype = \"fp8\", activation_scheme = \"static\"" in note(
            {"quant_method": "modelopt", "quant_algo": "NVFP4"}, 'tp = 2\ndtype = "fp8"')


def test_an_activation_scheme_the_roofline_costs_alike_is_said(tmp_path, capsys):
    """hardware.activation_scheme picks among measured fp8 kernels: where the roofline costs
    the run (a GPU without tables, or kernels = "roofline"), the scheme changes nothing, and a
    scheme set other than the default is said once."""
    from sim.costs.hardware.setup import hardware_setup

    def said(gpu, hardware):
        notes.forget()
        capsys.readouterr()
        hardware_setup(scenarios.load(write_hardware(tmp_path, gpu=gpu,
                                                     hardware=hardware)).base)
        return capsys.readouterr().err

    note = 'hardware.activation_scheme = "dynamic" picks among measured fp8 kernels; the ' \
        'roofline, which costs this run, costs fp8 GEMMs alike under every scheme'
    assert said("h100-pcie", 'dtype = "fp8"\nactivation_scheme = "dynamic"').count(note) == 1
    assert note in said("h100-sxm", 'dtype = "fp8"\nactivation_scheme = "dynamic"\n'
                                    'kernels = "roofline"')
    assert "activation_scheme" not in said("h100-sxm", 'dtype = "fp8"\n'
                                                       'activation_scheme = "dynamic"')
    assert "activation_scheme" not in said("h100-pcie", 'dtype = "fp8"')
