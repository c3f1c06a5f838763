"""The hardware cost model: catalogs that add up, operator counts equal to the NumPy engine's own
matmuls, and a calibration that reproduces from the shipped measurements and fits them (in
scenarios, KV capacity, refusals and runs: test_hardware_scenarios.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sim.costs.hardware import (engine_architecture, gpu_spec, gpus, layer_op_times,
                                model_architecture, models)
from sim.costs.hardware.calibration import (MATMULS, calibrate, operator_rows,
                                            read_measured)
from sim.costs.hardware.catalog import DATA
from sim.costs.hardware.operators import attention_counts, lm_head_counts, matmul_counts

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
