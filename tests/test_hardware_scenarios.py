"""The hardware cost model in scenarios: KV capacity as each framework derives it from memory
(vLLM's, TensorRT-LLM's and SGLang's fractions), one-line refusals of what cannot run or does not
fit (naming the smallest TP that does), and runs: decode runs bit for bit, more GPUs sooner."""

from __future__ import annotations

import re

import numpy as np
import pytest

import scenarios
from scenarios import ScenarioError
from sim.checks import check_scenario
from sim.costs.hardware import hardware_setup
from sim.runner import run_config


# --- scenarios: KV capacity and bad input ---------------------------------------------------

HARDWARE = """
[model]
name = "{model}"
max_seq_len = {max_seq_len}
[hardware]
gpu = "{gpu}"
tp = {tp}
[cost]
model = "hardware"
[engine]
max_num_seqs = 64
max_num_batched_tokens = 4096
[scheduler]
chunked_prefill = true
[workload]
num_requests = 200
arrival = {{ process = "poisson", rate = 8.0 }}
prompt_tokens = {{ dist = "uniform", low = 100, high = 2000 }}
output_tokens = {{ dist = "uniform", low = 10, high = 200 }}
"""


def write(tmp_path, model="meta-llama/Llama-3.1-8B", gpu="h100-sxm", tp=1, max_seq_len=4096,
          extra=""):
    path = tmp_path / "hw.toml"
    path.write_text(HARDWARE.format(model=model, gpu=gpu, tp=tp, max_seq_len=max_seq_len) + extra)
    return path


def test_auto_kv_blocks_are_what_the_gpu_memory_leaves(tmp_path):
    config = scenarios.load(write(tmp_path)).base
    setup = hardware_setup(config)
    plan = setup.plan
    assert plan.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # layers x KV heads x head_dim x fp16
    assert plan.usable == 80 * 2**30 * 0.9
    assert plan.weights == pytest.approx(8.03e9 * 2, rel=0.01)
    assert setup.kv_blocks == int((plan.usable - plan.weights - plan.activations
                                   - plan.non_torch) // (16 * plan.kv_bytes_per_token))
    four = hardware_setup(scenarios.load(write(tmp_path, tp=4)).base)
    assert four.plan.kv_bytes_per_token == plan.kv_bytes_per_token / 4
    assert four.kv_blocks > 4 * setup.kv_blocks  # weights split four ways too


def test_tensorrt_llms_fraction_is_of_the_memory_the_weights_and_activations_leave(tmp_path):
    """vLLM's gpu_memory_utilization is of the whole memory; TensorRT-LLM's
    free_gpu_memory_fraction of what is left after the weights, the activations and the memory
    outside the allocator: at 0.9 it keeps 10% of that free, not 10% of the GPU."""
    config = scenarios.load(write(tmp_path)).base
    vllm, trt = (hardware_setup(config.updated({"hardware.framework": framework}))
                 for framework in ("vllm", "trtllm"))
    assert (trt.plan.weights, trt.plan.activations) == (vllm.plan.weights, vllm.plan.activations)
    assert trt.plan.kv_bytes == pytest.approx(0.9 * (80 * 2**30 - trt.plan.needed))
    assert vllm.plan.kv_bytes == pytest.approx(0.9 * 80 * 2**30 - vllm.plan.needed)
    assert trt.kv_blocks == int(trt.plan.kv_bytes // (16 * trt.plan.kv_bytes_per_token)) \
        > vllm.kv_blocks


def test_a_hardware_run_reports_the_model_gpu_and_kv_capacity(tmp_path):
    from reports.describe import what_was_run
    from sim.runner import simulate

    [(spec, recorder)] = simulate(scenarios.load(write(tmp_path, tp=2)))
    rows = dict(what_was_run(scenarios.load(write(tmp_path, tp=2)), [spec]))
    assert rows["model"].startswith("`meta-llama/Llama-3.1-8B`")
    assert "2 x NVIDIA H100" in rows["hardware"] and "fp16" in rows["hardware"]
    assert "(derived from the GPU's memory)" in rows["engine"]
    assert spec.config.engine.num_kv_blocks == recorder.kv_blocks_total
    columns = recorder.request_columns()
    assert len(columns["finish_s"]) == 200
    # a bench of the same scenario resolves no model (the server is what runs): its name alone
    unresolved = scenarios.load(write(tmp_path, tp=2))
    rows = dict(what_was_run(unresolved, unresolved.runs()))
    assert rows["model"] == "`meta-llama/Llama-3.1-8B`" and "hardware" not in rows


@pytest.mark.parametrize("edit, message", [
    ({"model": "meta-llama/Llama-3-8B"}, "model.name: unknown model 'meta-llama/Llama-3-8B' "
                                         "(nearest: meta-llama/Llama-3.1-8B"),
    ({"gpu": "h100"}, "hardware.gpu: unknown GPU 'h100' (nearest: "),
    ({"model": "meta-llama/Llama-2-70b-hf", "gpu": "a100-80gb-sxm"},
     "does not fit on a100-80gb-sxm at tp = 1 (fp16): it needs 1"),
    ({"tp": 3}, "hardware.tp = 3 does not divide the model's 32 attention heads; use one of "
                "1, 2, 4, 8"),
    ({"gpu": "l4", "max_seq_len": 131072}, "model.max_seq_len: meta-llama/Llama-3.1-8B's "
                                           "131,072 tokens are more than the KV cache holds"),
])
def test_what_cannot_run_is_refused_in_one_line(tmp_path, edit, message):
    path = write(tmp_path, **edit)
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path))
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"{path}: ") and message in text


@pytest.mark.parametrize("framework, words", [
    ("vllm", ("55.5 GiB for it, left after the weights and activations", "vLLM's --max-model-len")),
    ("trtllm", ("GiB for it, 0.9 of what the weights and activations leave",
                "trtllm-serve's --max_seq_len")),
    ("sglang", ("GiB for it, left after the weights and the memory outside the allocator in 0.9 "
                "of the memory",
                "SGLang's --context-length"))])
def test_the_kv_refusals_speak_of_the_frameworks_own_sizing(tmp_path, framework, words):
    base = scenarios.load(write(tmp_path)).base.updated({"hardware.framework": framework})
    with pytest.raises(ValueError, match=words[0]):
        hardware_setup(base.updated({"engine.num_kv_blocks": 10**6}))
    with pytest.raises(ValueError, match=words[1]):
        hardware_setup(base.updated({"engine.num_kv_blocks": 8, "model.max_seq_len": 4096}))


def test_sglangs_fraction_holds_the_weights_and_kv_cache_the_activations_beside_it(tmp_path):
    """SGLang's --mem-fraction-static is the share of the memory for the weights and the KV
    pool: its cache is the activations' bytes larger than vLLM's rule leaves."""
    config = scenarios.load(write(tmp_path)).base
    vllm, sglang = (hardware_setup(config.updated({"hardware.framework": framework}))
                    for framework in ("vllm", "sglang"))
    plan = sglang.plan
    assert plan.kv_bytes == pytest.approx(0.9 * 80 * 2**30 - plan.weights - plan.non_torch)
    assert plan.kv_bytes == pytest.approx(vllm.plan.kv_bytes + plan.activations)
    assert sglang.kv_blocks > vllm.kv_blocks


def test_under_tensorrt_llm_a_model_that_does_not_fit_is_set_against_the_whole_memory(tmp_path):
    path = write(tmp_path, model="meta-llama/Llama-2-70b-hf", gpu="a100-80gb-sxm")
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path, ['hardware.framework="trtllm"']))
    text = str(info.value)
    assert "GiB outside the allocator) and it has 80 GiB; the smallest tensor parallelism " \
        "that fits is hardware.tp = 2" in text and "gpu_memory_utilization" not in text


def test_under_sglang_a_model_that_does_not_fit_is_set_against_its_static_share(tmp_path):
    path = write(tmp_path, model="meta-llama/Llama-2-70b-hf", gpu="a100-80gb-sxm")
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path, ['hardware.framework="sglang"']))
    assert "outside the allocator) and 80 GiB x gpu_memory_utilization 0.9 = 72.0 GiB holds " \
        "them and the KV cache (SGLang's mem_fraction_static; the activations are beside it); " \
        "the smallest tensor parallelism that fits is hardware.tp = 2" in str(info.value)


@pytest.mark.parametrize("changes, message", [
    ({"hardware.gpu_memory_utilization": 0.01, "engine.max_num_batched_tokens": 131072},
     "no tensor parallelism up to 8 fits: use a larger hardware.gpu_memory_utilization, "),
    ({"hardware.gpu_memory_utilization": 0.95, "engine.max_num_batched_tokens": 65536},
     "hardware.gpu_memory_utilization: SGLang keeps a step's activations beside its "
     "mem_fraction_static share, and "),
    ({"hardware.framework": "tensorrt"}, "hardware.framework: must be one of vllm, trtllm, "
                                         "sglang, got 'tensorrt'")])
def test_sglangs_share_refuses_what_cannot_fit_beside_it(tmp_path, changes, message):
    """Under SGLang a step's activations are beside the fraction: only a larger one lets the
    weights fit, and a fraction that leaves them no room is refused; a framework servesim does
    not know is one line too."""
    config = scenarios.load(write(tmp_path)).base.updated({"hardware.framework": "sglang"})
    with pytest.raises(ValueError, match=re.escape(message)):
        hardware_setup(config.updated(changes))


def test_a_model_that_does_not_fit_names_the_smallest_tp_that_does(tmp_path):
    path = write(tmp_path, model="meta-llama/Llama-2-70b-hf", gpu="a100-80gb-sxm")
    with pytest.raises(ScenarioError, match="the smallest tensor parallelism that fits is "
                                            "hardware.tp = 2"):
        check_scenario(scenarios.load(path))


@pytest.mark.parametrize("text, message", [
    ('[model]\nname = "microsoft/phi-2"\n[cost]\nmodel = "profile"\n', "model.name: only with "
                                                                         "cost.model = 'hardware'"),
    ('[engine]\nnum_kv_blocks = "auto"\n', 'engine.num_kv_blocks: "auto" derives the KV blocks'),
    ('[hardware]\ngpu = "h100-sxm"\n', "hardware: only with cost.model = 'hardware'"),
    ('[cost]\nmodel = "hardware"\n[model]\nname = "microsoft/phi-2"\n', "hardware.gpu: required"),
    ('mode = "serve"\n[cost]\nmodel = "hardware"\n[hardware]\ngpu = "l4"\n',
     "mode: cost.model = 'hardware' simulates a GPU"),
    ('[cost]\nmodel = "hardware"\n[hardware]\ngpu = "l4"\ntp = 9\n',
     "hardware.tp: must be an integer from 1 to 8"),
    ('[cost]\nmodel = "hardware"\n[hardware]\ngpu = "l4"\n[model]\nd_model = 64\n',
     "model.n_layers: required with cost.model = 'hardware' unless model.name"),
])
def test_hardware_keys_elsewhere_are_refused_naming_the_key(tmp_path, text, message):
    path = tmp_path / "s.toml"
    path.write_text(text + '[workload]\nnum_requests = 4\narrival = { process = "poisson", '
                           'rate = 1.0 }\nprompt_tokens = { dist = "fixed", value = 8 }\n'
                           'output_tokens = { dist = "fixed", value = 8 }\n')
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        scenarios.load(path)


def test_fp8_on_a_gpu_without_it_is_refused(tmp_path):
    path = write(tmp_path, gpu="a100-80gb-sxm", extra="")
    text = path.read_text().replace('tp = 1', 'tp = 1\ndtype = "fp8"')
    path.write_text(text)
    with pytest.raises(ScenarioError, match="hardware.dtype: a100-80gb-sxm has no fp8"):
        check_scenario(scenarios.load(path))


# --- the simulation ---------------------------------------------------------------------------

def test_hardware_decode_runs_are_bit_for_bit_the_steps_one_by_one(tmp_path):
    config = scenarios.load(write(tmp_path, tp=2)).base
    fast = run_config(config)
    slow = run_config(config, fast_forward=False)
    assert fast.request_columns() == slow.request_columns()
    assert fast.step_columns() == slow.step_columns()


def test_more_gpus_serve_the_same_requests_sooner(tmp_path):
    def e2e(tp):
        columns = run_config(scenarios.load(write(tmp_path, tp=tp)).base).request_columns()
        return np.median(np.subtract(columns["finish_s"], columns["arrival_s"]))

    assert e2e(4) < e2e(1)
