"""Attention data parallelism (`hardware.dp`): ranks of tp GPUs that each attend over their own
requests and hold their own KV cache, the experts across every GPU. The scheduler plans the
ranks as one pool whose limits are a rank's times the ranks, a sequence within one rank's; a
step costs its most loaded rank through every operator but the routed experts, which take every
rank's rows; dp = 1 is the model without it, bit for bit."""

from __future__ import annotations

import pytest

import scenarios
from engine.block_manager import BlockManager
from engine.scheduler import Scheduler
from engine.scheduler_config import SchedulerConfig
from engine.sequence import Sequence
from helpers.runs import records
from scenarios import ScenarioError
from sim.build import build_cost, hardware_of
from sim.checks import check_scenario
from sim.costs.hardware.ranks import rank_shape
from sim.costs.shape import StepShape
from sim.runner import run_config

V3 = 'name = "deepseek-ai/DeepSeek-V3"'


def scenario(tmp_path, model=V3, gpu="h200", hardware='tp = 8\ndtype = "fp8"', requests=40,
             prompt=(100, 3000), output=(10, 200), rate=20.0):
    path = tmp_path / "s.toml"
    path.write_text(f'[model]\n{model}\nmax_seq_len = 4096\n[hardware]\ngpu = "{gpu}"\n'
                    f'{hardware}\n[cost]\nmodel = "hardware"\n[engine]\nmax_num_seqs = 64\n'
                    f'max_num_batched_tokens = 2048\n[scheduler]\nchunked_prefill = true\n'
                    f'[workload]\nnum_requests = {requests}\n'
                    f'arrival = {{ process = "poisson", rate = {rate} }}\n'
                    f'prompt_tokens = {{ dist = "uniform", low = {prompt[0]}, '
                    f'high = {prompt[1]} }}\n'
                    f'output_tokens = {{ dist = "uniform", low = {output[0]}, '
                    f'high = {output[1]} }}\n')
    return path


def config_of(tmp_path, **kwargs):
    return scenarios.load(scenario(tmp_path, **kwargs)).base


# --- the scheduler: the ranks as one pool -----------------------------------------------------

def pool(ranks: int, blocks: int = 64, chunked: bool = True) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=32, max_seq_len=512,
                             chunked_prefill=chunked, data_parallel_size=ranks)
    return Scheduler(config, BlockManager(blocks, 16))


def test_the_pool_runs_a_ranks_limits_times_the_ranks():
    one, four = pool(1), pool(4)
    for scheduler in (one, four):
        for i in range(12):
            scheduler.add(Sequence(i, 8, max_new_tokens=4))
    assert len(one.schedule().prefills) == 2  # max_num_seqs
    plan = four.schedule()
    assert len(plan.prefills) == 8 and sum(n for _, n in plan.prefills) == 64


def test_a_sequence_prefills_at_most_a_ranks_budget_and_fits_a_ranks_cache():
    scheduler = pool(4)
    scheduler.add(Sequence(0, 100, max_new_tokens=4))
    scheduler.add(Sequence(1, 20, max_new_tokens=4))
    plan = scheduler.schedule()
    assert [n for _, n in plan.prefills] == [32, 20]  # the pool's budget is 128
    plan = scheduler.schedule()
    assert plan.prefills[0][1] == 32
    big = Sequence(2, 300, max_new_tokens=4)  # 19 blocks: more than 64 / 4
    assert not pool(4).add(big)
    assert big.reject_reason == "needs 19 KV blocks, a data-parallel rank's cache has 16"
    assert pool(1).add(Sequence(3, 300, max_new_tokens=4))
    unchunked = Sequence(4, 100, max_new_tokens=4)
    assert not pool(4, chunked=False).add(unchunked)  # a rank's budget, not the pool's
    assert "exceeds max_num_batched_tokens (32)" in unchunked.reject_reason


def test_static_batching_has_no_data_parallel_ranks():
    with pytest.raises(ValueError, match="hardware.dp: attention data parallelism runs under "
                                         "continuous batching"):
        SchedulerConfig(policy="static", data_parallel_size=2)


# --- the step: the most loaded rank and every rank's experts ----------------------------------

def test_the_most_loaded_rank_takes_a_ceiling_share_of_decodes_and_chunks():
    shape = StepShape(prefill_tokens=3000, prefill_attention=3_000_000, prefill_seqs=3,
                      decode_seqs=10, decode_context=20_000, sampled_seqs=12, decoding=1,
                      prefill_square=3_000_000, decode_span=30_000)
    rank = rank_shape(shape, 4)
    assert (rank.decode_seqs, rank.prefill_seqs, rank.sampled_seqs) == (3, 1, 3)
    assert rank.decode_context == pytest.approx(6_000)  # three decodes of the mean context
    assert rank.prefill_tokens == 1000 and rank.prefill_attention == pytest.approx(1_000_000)
    assert rank_shape(StepShape(prefill_tokens=5000, prefill_seqs=1), 8).prefill_tokens == 5000
    assert rank_shape(shape, 1) == shape._replace(prefill_attention=3_000_000.0,
                                                 prefill_context=0.0, decode_context=20_000.0,
                                                 prefill_square=3_000_000.0,
                                                 decode_span=30_000.0)


def test_every_ranks_rows_meet_in_the_measured_experts_and_their_exchange(tmp_path):
    """The routed experts of a step of 64 decodes over eight ranks of one GPU cost what the
    tables measured for DeepSeek-V3's fused MoE kernel at 64 tokens over 1 x EP 8, plus the
    exchange of the 64 rows over the eight GPUs, in every expert layer."""
    from sim.costs.hardware.kernels import KernelTables

    ranks = build_cost(config_of(tmp_path, hardware='tp = 1\ndp = 8\nep = 8\ndtype = "fp8"'))
    arch, tables = ranks.arch, KernelTables("h200")
    ranks.step_time(StepShape(decode_seqs=64, decode_context=64 * 2000, sampled_seqs=64,
                              decoding=1))
    moe = tables.moe(64, arch.d_model, arch.moe_d_ff, arch.experts_per_token, arch.n_experts,
                     1, 8, "fp8_block", "power_law_1.01")
    exchange = tables.all_reduce(64, arch.d_model, 8)
    assert ranks._experts_list[64] == pytest.approx(arch.moe_layers * (moe + exchange),
                                                    rel=1e-12)
    assert "8 data-parallel ranks of 1" in ranks.source


def test_a_chunk_is_never_split_over_ranks(tmp_path):
    """One long chunk and a short one: the most loaded rank still prefills about the long one
    (at least the token-weighted mean chunk), so adding the short one does not make the step
    cheaper than the long one alone."""
    ranks = build_cost(config_of(tmp_path, hardware='tp = 1\ndp = 8\nep = 8\ndtype = "fp8"'))
    alone = StepShape(prefill_tokens=2048, prefill_attention=2048 * 2048, prefill_seqs=1,
                      sampled_seqs=1, prefill_square=2048 * 2048)
    both = StepShape(prefill_tokens=2064, prefill_attention=2048 * 2048 + 16 * 16,
                     prefill_seqs=2, sampled_seqs=2, prefill_square=2048 * 2048 + 16 * 16)
    assert rank_shape(both, 8).prefill_tokens >= 2032
    assert ranks.step_time(both) > 0.98 * ranks.step_time(alone)


def test_a_run_with_ranks_fast_forwarded_is_the_run_step_by_step(tmp_path):
    config = config_of(tmp_path, hardware='tp = 2\ndp = 4\nep = 8\ndtype = "fp8"',
                       requests=120, output=(100, 400), rate=40.0)
    assert records(run_config(config)) == records(run_config(config, fast_forward=False))


# --- memory: a latent cache each rank holds alone --------------------------------------------

def test_ranks_hold_eight_latent_caches_where_tensor_parallelism_holds_one(tmp_path):
    """DeepSeek-V3's latent KV is whole on every GPU: TP 8 keeps one copy of each sequence on
    all eight, eight ranks of TP 1 keep eight different sets of sequences, at the price of the
    attention and dense weights on every GPU."""
    tp8 = hardware_of(config_of(tmp_path))
    dp8 = hardware_of(config_of(tmp_path, hardware='tp = 1\ndp = 8\nep = 8\ndtype = "fp8"'))
    assert dp8.plan.kv_bytes_per_token == tp8.plan.kv_bytes_per_token
    assert dp8.plan.weights > tp8.plan.weights
    assert dp8.kv_blocks * dp8.dp > 4 * tp8.kv_blocks
    assert dp8.describe()["dp"] == 8


# --- refusals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("model, hardware, message", [
    (V3, 'tp = 2\ndp = 4\nep = 2\ndtype = "fp8"',
     "hardware.ep: must be 1 (experts split by tensor parallelism) or hardware.tp x hardware.dp "
     "= 8 (whole experts across the GPUs), got 2"),
    (V3, 'tp = 4\ndp = 4\ndtype = "fp8"', "hardware.dp: 4 data-parallel ranks of hardware.tp "
                                          "= 4 GPUs make 16; at most 8 (one node)"),
    ('name = "meta-llama/Llama-3.1-8B"', "tp = 1\ndp = 2",
     "hardware.dp = 2: meta-llama/Llama-3.1-8B has no experts, so its data-parallel ranks "
     "would never meet; run them as replicas (cluster.replicas) with hardware.dp = 1"),
    (V3, 'tp = 1\ndp = 0\ndtype = "fp8"', "hardware.dp: must be an integer from 1 to 8"),
])
def test_an_impossible_layout_is_one_line(tmp_path, model, hardware, message):
    path = scenario(tmp_path, model=model, hardware=hardware)
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_layout_too_small_names_what_would_fit_within_a_node(tmp_path):
    path = scenario(tmp_path, gpu="h100-sxm", hardware='tp = 2\ndp = 4\nep = 8\ndtype = "fp8"')
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenarios.load(path))
    assert ("no tensor parallelism of 4 data-parallel ranks up to 2 fits: use a GPU with more "
            "memory or fewer ranks") in str(info.value)  # fp8 already, and no nvfp4 on an H100
