"""A hybrid's linear-attention states in memory: the KV cache counts the full layers alone;
SGLang and TensorRT-LLM set `max_num_seqs` states aside, vLLM's running sequences take theirs
from the KV blocks (the block manager counts them); fast forward equals step by step with
them; the report names them; prefix caching is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

import scenarios
import sim
from helpers.hybrid import QWEN35, QWEN35_DENSE, STATE_PER_LAYER, qwen35_scenario
from helpers.model_scenario import refusal, scenario
from helpers.runs import records
from sim.costs.hardware import hardware_setup, model_architecture
from sim.costs.hardware.memory import NON_TORCH_BYTES
from sim.notes import collected
from sim.runner import run_config


def test_the_cache_holds_the_full_layers_keys_and_memory_sets_states_aside(tmp_path):
    """A token's keys and values in the 15 full layers alone (an fp8 cache, the 2 key-value
    heads of 256 replicated to one a GPU at TP 8); a sequence's state in the 45 others. Under
    SGLang the plan sets max_num_seqs (64) of them aside before the KV cache; under vLLM each
    running sequence's state takes 98 KV blocks of 16 tokens of 15 KiB (a bf16 cache) while it
    runs; and under vLLM with another capacity policy, set aside, with a note."""
    arch = model_architecture({"config": QWEN35})
    assert arch.kv_bytes_per_token(8, 1) == 15 * 2 * 1 * 256
    assert arch.state_bytes_per_seq(8, 2) == 45 * STATE_PER_LAYER
    pooled = hardware_setup(scenarios.load(qwen35_scenario(tmp_path)).base)
    assert (pooled.plan.states, pooled.state_blocks) == (0, 98)
    assert -(-45 * STATE_PER_LAYER // (16 * 15360)) == 98
    assert pooled.describe()["state_blocks"] == 98
    setup = hardware_setup(scenarios.load(qwen35_scenario(tmp_path, "sglang")).base)
    assert (setup.plan.states, setup.state_blocks) == (64 * 45 * STATE_PER_LAYER, 0)
    assert pooled.kv_blocks > setup.kv_blocks
    policy = ['scheduler.capacity_scheduler_policy = "guaranteed_no_evict"']
    with collected() as said:
        hardware_setup(scenarios.load(qwen35_scenario(tmp_path)).base)
        setup = hardware_setup(scenarios.load(qwen35_scenario(tmp_path), policy).base)
    assert setup.plan.states == 64 * 45 * STATE_PER_LAYER
    assert [note for note in said if "states are set aside" in note] == [
        f"note: hardware: {QWEN35}'s linear-attention states are set aside for "
        f"engine.max_num_seqs = 64 sequences (1.4 GiB a GPU beside "
        f"{setup.kv_blocks * 16 * 15360 / 2**30:.1f} GiB of KV cache); vLLM takes each state "
        f"from its KV blocks only while its request runs, so with fewer running it caches more "
        f"tokens than here (docs/sim/hardware.md, \"KV capacity from memory\")"]
    bf16 = hardware_setup(scenarios.load(qwen35_scenario(tmp_path), [
        'model.state_dtype = "bf16"', *policy]).base)
    assert bf16.plan.states < setup.plan.states and bf16.kv_blocks > setup.kv_blocks
    described = setup.describe()
    assert described["states_gib_per_gpu"] == pytest.approx(setup.plan.states / 2**30)


def test_each_memory_rule_sets_the_states_aside(tmp_path):
    """vLLM's rule (the states set aside under a capacity policy not its own; under its own
    they take KV blocks): the KV cache is what the fraction of the memory leaves after the
    weights, activations, the memory outside the allocator and the states; TensorRT-LLM's: the
    fraction of what those leave; SGLang's: the fraction less the weights, the outside and the
    states (the activations beside it)."""
    memory = 141 * 2**30
    for framework in ("vllm", "trtllm", "sglang"):
        plan = hardware_setup(scenarios.load(qwen35_scenario(tmp_path, framework), [
            'scheduler.capacity_scheduler_policy = "guaranteed_no_evict"']).base).plan
        states, fixed = plan.states, plan.weights + NON_TORCH_BYTES
        assert states == 64 * 45 * STATE_PER_LAYER
        expected = {"vllm": 0.9 * memory - fixed - plan.activations - states,
                    "trtllm": 0.9 * (memory - fixed - plan.activations - states),
                    "sglang": 0.9 * memory - fixed - states}[framework]
        assert plan.kv_bytes == pytest.approx(expected, rel=1e-12)
        assert plan.needed == pytest.approx(fixed + plan.activations + states)


@pytest.mark.parametrize("framework, kernels, blocks", [
    ("vllm", "measured", "auto"), ("sglang", "measured", "auto"), ("vllm", "roofline", "auto"),
    ("vllm", "measured", 1200)])  # at most about 6 sequences, each state 98 blocks: preemptions
def test_fast_forward_is_step_by_step_for_a_hybrid(tmp_path, framework, kernels, blocks):
    path = qwen35_scenario(tmp_path, framework, kernels, requests=40)
    if blocks != "auto":  # outputs that outgrow the blocks left: decodes preempt
        path.write_text(path.read_text().replace("low = 10, high = 100", "low = 800, "
                                                 "high = 1600"))
    config = scenarios.load(path, [f"engine.num_kv_blocks = {blocks!r}".replace("'", '"')]).base
    fast, slow = run_config(config), run_config(config, fast_forward=False)
    assert records(fast) == records(slow)
    if blocks != "auto":
        assert sum(fast.request_columns()["preemptions"]) > 0
        steps = fast.step_columns()  # every running sequence's state holds its 98 blocks
        assert all(used >= 98 * running for used, running in
                   zip(steps["kv_blocks_used"], steps["num_running"]))


@pytest.mark.parametrize("setting", [
    ["engine.swap_blocks = 3000", 'scheduler.preemption = "swap"'],  # swapped out: states back
    ["cluster.prefill_replicas = 1", "cluster.decode_replicas = 1"],  # a decode replica
])                                  # reserves a sequence's blocks and its state as its KV comes
def test_states_in_a_tight_pool_swapped_and_disaggregated(tmp_path, setting):
    """Under vLLM, 1,200 blocks of which each running sequence's state takes 98: swapped out
    and back, or handed from a prefill replica to a decode replica, every request finishes, and
    fast forward equals step by step."""
    path = qwen35_scenario(tmp_path, requests=40)
    path.write_text(path.read_text().replace("low = 10, high = 100", "low = 800, high = 1600"))
    config = scenarios.load(path, ["engine.num_kv_blocks = 1200", *setting]).base
    fast, slow = run_config(config), run_config(config, fast_forward=False)
    assert records(fast) == records(slow)
    finished = fast.request_columns()["finish_s"]
    assert len(finished) == 40 and all(f == f for f in finished)
    if "swap" in setting[0]:  # preempted, swapped out and back
        assert sum(fast.request_columns()["preemptions"]) > 0


def test_one_request_of_max_seq_len_must_fit_beside_its_state(tmp_path):
    """Qwen3.5-397B's 16,384 tokens take 1,024 blocks of 16 and its state 98 more: 1,122
    blocks hold one such request, 1,121 are refused, naming what they hold."""
    path = qwen35_scenario(tmp_path)
    assert hardware_setup(scenarios.load(path, ["engine.num_kv_blocks = 1122"]).base)
    with pytest.raises(ValueError) as info:
        hardware_setup(scenarios.load(path, ["engine.num_kv_blocks = 1121"]).base)
    assert "than the KV cache holds on h200 at tp = 8 (16,368 tokens)" in str(info.value)


def test_a_hybrid_runs_and_its_report_names_its_layers_and_states(tmp_path):
    [(spec, recorder)] = sim.simulate(scenarios.load(qwen35_scenario(tmp_path, requests=10)))
    assert spec.config.model.linear_layers == 45 and spec.config.model.state_dtype == "fp32"
    assert len(recorder.request_columns()["finish_s"]) == 10
    from reports.section_text import hardware_text, model_text
    assert "45 linear-attention layers (64 state matrices of 128 x 128)" in \
        model_text(spec.config.model)
    assert "a running sequence's linear-attention state taking 98 of its blocks" in \
        hardware_text(spec.config.hardware.derived)
    [(spec, _)] = sim.simulate(scenarios.load(qwen35_scenario(tmp_path, "sglang", requests=4)))
    assert "GiB of linear-attention states" in hardware_text(spec.config.hardware.derived)


def test_prefix_caching_with_linear_layers_is_refused_in_one_line(tmp_path):
    assert ("engine.enable_prefix_caching: " in refusal(tmp_path, model=f'config = "{QWEN35}"',
                                                         gpu="h200", tp=8,
                                                         hardware='dtype = "fp8"\nep = 8'))


def test_states_that_do_not_fit_name_max_num_seqs(tmp_path):
    """Qwen3.5-27B in bf16 on one H100 with 256 sequences: under TensorRT-LLM their fp32
    states (147 MiB each), set aside, leave no room for a KV block, and the refusal names them
    and engine.max_num_seqs; under vLLM, whose running sequences take their states from the KV
    blocks, it runs, 256 sequences held back by the blocks their states take."""
    path = scenario(tmp_path, model=f'config = "{QWEN35_DENSE}"', gpu="h100-sxm",
                    hardware='dtype = "bf16"', requests=40)
    text = path.read_text().replace("max_num_seqs = 64\n", "max_num_seqs = 256\n"
                                    "enable_prefix_caching = false\n")
    Path(path).write_text(text.replace("rate = 4.0", "rate = 400.0"))
    with pytest.raises(ValueError) as info:
        hardware_setup(scenarios.load(path, ['hardware.framework = "trtllm"']).base)
    message = str(info.value)
    assert "GiB of linear-attention states for engine.max_num_seqs = 256 sequences" in message
    assert "or use a smaller engine.max_num_seqs (the linear-attention states)" in message
    config = scenarios.load(path).base
    setup = hardware_setup(config)
    assert setup.plan.states == 0 and setup.state_blocks == -(-48 * (
        48 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 48 * 128) * 2) // (16 * 16 * 2 * 4 * 256 * 2))
    recorder = run_config(config)
    assert len(recorder.request_columns()["finish_s"]) == 40


def test_a_state_takes_its_blocks_while_its_sequence_holds_any():
    """The block manager of a pool that holds states: a sequence's state takes its blocks with
    its first KV block (all or nothing) and gives them back with its last."""
    from engine.block_manager import BlockManager, OutOfBlocksError

    bm = BlockManager(20, 4, state_blocks=3)
    assert bm.blocks_to_hold(7, 9) == 3 + 3
    bm.ensure_capacity(7, 9)
    assert (len(bm.block_tables[7]), bm.num_free, bm.num_used) == (3, 14, 6)
    bm.allocate_block(7)
    assert (bm.num_free, bm.blocks_to_hold(7, 17)) == (13, 1)
    bm.allocate_blocks([8, 8, 9])
    assert (bm.num_free, bm.num_used) == (4, 16)
    with pytest.raises(OutOfBlocksError):
        bm.ensure_capacity(10, 5)  # two blocks and a state of 3: 5 asked, 4 free
    with pytest.raises(OutOfBlocksError):
        bm.allocate_blocks([10, 11])  # two blocks and two states
    assert bm.num_free == 4 and 10 not in bm.block_tables  # all or nothing
    bm.ensure_capacity(10, 4)  # one block and its state: the last 4
    assert bm.num_free == 0
    with pytest.raises(OutOfBlocksError):
        bm.allocate_block(7)
    bm.check_invariants()
    bm.free_sequence(10)
    bm.free_sequence(7)
    assert (bm.num_free, bm.num_used) == (11, 9)
    bm.free_sequence(8)
    bm.free_sequence(9)
    assert bm.num_free == 20
    bm.check_invariants()
