"""The hardware cost model: catalogs that add up, operator counts equal to the NumPy engine's own
matmuls, a calibration that reproduces from the shipped measurements and fits them, KV capacity
as vLLM derives it, one-line refusals of what cannot run, and decode runs bit for bit."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

import scenarios
from scenarios import ScenarioError
from sim.costs.hardware import (engine_architecture, gpu_spec, gpus, hardware_setup,
                                layer_op_times, model_architecture, models)
from sim.costs.hardware.calibration import (MATMULS, calibrate, operator_rows,
                                            read_measured)
from sim.costs.hardware.catalog import DATA
from sim.costs.hardware.operators import attention_counts, lm_head_counts, matmul_counts
from sim.checks import check_scenario
from sim.runner import run_config

GPU_IDS = ("a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm", "h100-pcie", "h200",
           "l4", "l40s", "a40", "mi300x")
MODEL_IDS = ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf",
             "meta-llama/Llama-2-70b-hf", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B",
             "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-14B",
             "Qwen/Qwen2.5-72B", "codellama/CodeLlama-34b-hf", "microsoft/phi-2")


# --- catalogs -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODEL_IDS)
def test_every_catalog_model_has_its_published_parameter_count(name):
    arch = model_architecture({"name": name})
    assert arch.parameters() == pytest.approx(models()[name]["params"], rel=0.02)
    assert models()[name]["source"].startswith("https://")


def test_the_gpu_catalog_has_every_gpu_with_dense_peaks_and_a_source():
    assert set(GPU_IDS) <= set(gpus())
    for gpu_id in GPU_IDS:
        gpu = gpu_spec(gpu_id)
        assert gpu.memory_bytes > 0 and gpu.bandwidth > 0 and gpu.measured in ("a100", "h100")
        assert gpu.peak_flops("fp16") == gpu.peak_flops("bf16")
        assert gpus()[gpu_id]["source"]
    assert gpu_spec("h100-sxm").peak_flops("fp8") == \
        pytest.approx(2 * gpu_spec("h100-sxm").peak_flops("fp16"), rel=1e-3)
    with pytest.raises(ValueError, match="a100-80gb-sxm has no fp8 tensor cores"):
        gpu_spec("a100-80gb-sxm").peak_flops("fp8")


# --- the operators against the NumPy engine's own matmuls ----------------------------------

class Traced(np.ndarray):
    """An array that logs every matmul it takes part in (and whose results are traced too):
    (the weight's name or None, the operands' shapes, FLOPs, bytes read and written)."""

    log: list = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [x.view(np.ndarray) if isinstance(x, np.ndarray) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(o) for o in kwargs["out"])
        result = getattr(ufunc, method)(*plain, **kwargs)
        if ufunc is np.matmul:
            a, b = plain
            weight = next((getattr(x, "weight", None) for x in inputs
                           if getattr(x, "weight", None)), None)
            batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])) \
                if a.ndim > 2 or b.ndim > 2 else 1
            m = a.shape[-2] if a.ndim > 1 else 1
            flops = 2 * batch * m * a.shape[-1] * b.shape[-1]
            Traced.log.append((weight, flops, a.nbytes + b.nbytes + np.asarray(result).nbytes))
        if isinstance(result, np.ndarray) and result.dtype.kind == "f":
            return result.view(Traced)
        return result


def traced_weight(array: np.ndarray, name: str):
    view = array.view(Traced)
    view.weight = name
    return view


def test_operator_flops_and_bytes_equal_the_engines_own_matmuls():
    from engine.block_manager import BlockManager
    from engine.executor import NumpyExecutor, StepPlan
    from engine.model import ModelConfig, init_params
    from engine.sequence import Sequence

    config = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=48,
                         max_seq_len=256, seed=0)
    manager = BlockManager(64, 16)
    executor = NumpyExecutor(init_params(config), manager, rng=np.random.default_rng(0))
    params = executor.params
    for layer in params["layers"]:
        for key, op in (("Wq", "attn_pre_proj"), ("Wk", "attn_pre_proj"),
                        ("Wv", "attn_pre_proj"), ("Wo", "attn_post_proj"),
                        ("W1", "mlp_up_proj"), ("W2", "mlp_down_proj")):
            layer[key] = traced_weight(layer[key], op)
    params["W_out"] = traced_weight(params["W_out"], "lm_head")

    prompt, decodes, context = 40, 3, 32  # decode contexts a whole number of blocks
    seqs = [Sequence(i, context - 1, 4, prompt_token_ids=list(range(context - 1)), seq_id=i)
            for i in range(decodes)]
    fresh = Sequence(9, prompt, 4, prompt_token_ids=list(range(prompt)), seq_id=9)
    for seq in seqs:  # prefilled, each with one sampled token to decode
        manager.ensure_capacity(seq.seq_id, context)
        executor.execute(StepPlan(step=0, prefills=[(seq, context - 1)], decodes=[]))
        seq.num_computed_tokens = context - 1
        seq.append_token(5)
    manager.ensure_capacity(fresh.seq_id, prompt)
    Traced.log.clear()
    executor.execute(StepPlan(step=1, prefills=[(fresh, prompt)], decodes=seqs))

    rows, arch = prompt + decodes, engine_architecture(config)
    expected = matmul_counts(arch, 1, rows, 4, 4)
    measured = {}
    for weight, flops, nbytes in Traced.log:
        f, b = measured.get(weight, (0, 0))
        measured[weight] = (f + flops, b + nbytes)
    for op, (flops, wbytes, abytes) in expected.items():
        assert measured[op] == (config.n_layers * flops, config.n_layers * (wbytes + abytes)), op
    sampled = 1 + decodes
    f, wb, ab = lm_head_counts(arch, 1, sampled, 4, 4)
    assert measured["lm_head"] == (f, wb + ab)
    (prefill_flops, _), (decode_flops, _) = attention_counts(
        arch, 1, prompt, prompt * prompt, prompt * prompt, 0, decodes, decodes * context, 4, 4)
    assert measured[None][0] == config.n_layers * (prefill_flops + decode_flops)


# --- calibration ------------------------------------------------------------------------------

def test_the_shipped_calibration_is_what_the_shipped_measurements_fit():
    shipped = json.loads((DATA / "calibration.json").read_text())
    assert json.loads(json.dumps(calibrate())) == shipped


@pytest.mark.parametrize("measured, gpu_id", [("a100", "a100-80gb-sxm"), ("h100", "h100-sxm")])
def test_layer_op_times_fit_the_measured_matmuls(measured, gpu_id):
    rows = read_measured("llama2_7b_layer_ops")
    errors = []
    for op, (tp, tokens, seconds) in operator_rows(rows, measured).items():
        if op not in MATMULS:
            continue
        for degree in (1, 2, 4, 8):
            at = tp == degree
            times = layer_op_times("meta-llama/Llama-2-7b-hf", gpu_id, degree, tokens[at],
                                   kernels="roofline")[op]
            errors.append(times / seconds[at] - 1)
    errors = np.abs(np.concatenate(errors))
    assert np.median(errors) < 0.12 and np.quantile(errors, 0.9) < 0.3


def test_layer_op_times_grow_with_tokens_and_shrink_with_tensor_parallelism():
    import sim

    assert sim.layer_op_times is layer_op_times
    tokens = np.array([1, 16, 256, 4096])
    one = layer_op_times("meta-llama/Llama-3.1-8B", "h100-sxm", 1, tokens)
    two = layer_op_times("meta-llama/Llama-3.1-8B", "h100-sxm", 2, tokens)
    assert set(one) >= {"attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_act",
                        "mlp_down_proj", "input_layernorm", "post_attention_layernorm", "add"}
    for op in MATMULS:
        assert np.all(np.diff(one[op]) >= 0)
        assert np.all(two[op] < one[op])
    assert isinstance(layer_op_times("microsoft/phi-2", "l4", 1, 8)["mlp_act"], float)


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
