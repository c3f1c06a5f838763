"""Golden summaries: every built-in scenario, shortened by overrides, reproduces the summary
committed in tests/golden/<name>.json (to float formatting, rel 1e-9); and each built-in, at full
size, shows what its description says.

Regenerate after an intended change (a new default profile, a scheduler fix) with
`python tests/golden/regenerate.py`, and review the diff.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import scenarios
import sim
from engine.benchmark import latency_percentiles, request_metrics, summarize
from sim.build import resolved_spec

GOLDEN_DIR = Path(__file__).parent / "golden"
# Overrides that keep each golden run small (the full scenarios are exercised below).
SHORTEN = {
    "static-vs-continuous": ["workload.num_requests=80"],
    "load-sweep": ["workload.num_requests=40"],
    "kv-pressure": ["workload.num_requests=60"],
    "admission-policies": ["workload.num_requests=60"],
    "priority-mix": ["workload.num_requests=80"],
    "chunked-prefill": ["workload.num_requests=30"],
    "azure-conv": ["workload.trace.max_requests=120"],
    "azure-code": ["workload.trace.max_requests=120"],
    "llama3-8b-h100": ["workload.trace.max_requests=300"],
    "llama2-70b-a100-tp4": ["workload.num_requests=60"],
    "gpu-compare": ["workload.num_requests=100"],
    "prefix-caching": ["workload.sessions.conversations=20"],
    "mooncake-conv": ["workload.trace.max_requests=150"],
    "router-compare": ["workload.sessions.conversations=40"],
    "capacity-search": ["workload.num_requests=100"],
    "pd-disaggregation": ["workload.num_requests=120"],
    "fp8-kv": ["workload.num_requests=60"],
    "gpu-generations": ["workload.num_requests=60"],
    "moe-deepseek-h200": ["workload.num_requests=60"],
}


def golden_summary(name: str) -> dict:
    """The summaries of a shortened built-in scenario, JSON-ready (NaN as None)."""
    scenario = scenarios.load(name, SHORTEN[name])
    runs = [{"variant": spec.variant, "sweep": spec.sweep,
             "summary": {k: None if isinstance(v, float) and math.isnan(v) else v
                         for k, v in summarize(recorder, spec.config.slo.limits()).items()}}
            for spec, recorder in sim.simulate(scenario)]
    return {"scenario": name, "overrides": SHORTEN[name], "runs": runs}


def assert_same_summary(actual: dict, expected: dict, where: str) -> None:
    assert actual.keys() == expected.keys(), where
    for key, want in expected.items():
        got = actual[key]
        if want is None:
            assert got is None, f"{where}: {key} = {got}, golden NaN"
        elif isinstance(want, int):
            assert got == want, f"{where}: {key} = {got}, golden {want}"
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), f"{where}: {key}"


@pytest.mark.parametrize("name", scenarios.builtin_names())
def test_builtin_scenario_reproduces_its_golden_summary(name):
    path = GOLDEN_DIR / f"{name}.json"
    assert name in SHORTEN, f"add {name} to SHORTEN and run tests/golden/regenerate.py"
    assert path.is_file(), f"{path} is missing: run python tests/golden/regenerate.py"
    expected = json.loads(path.read_text())
    actual = golden_summary(name)
    assert expected["overrides"] == actual["overrides"]
    assert [(r["variant"], r["sweep"]) for r in actual["runs"]] == \
        [(r["variant"], r["sweep"]) for r in expected["runs"]]
    for got, want in zip(actual["runs"], expected["runs"]):
        assert_same_summary(got["summary"], want["summary"], f"{name} {want['variant']}")


# --- each built-in shows what it says (full size) -------------------------------------------------


def full_run(name: str, overrides=()) -> dict:
    """{label: (spec, recorder, summary)} of the whole scenario (with `overrides`)."""
    return {spec.label: (spec, rec, summarize(rec, spec.config.slo.limits()))
            for spec, rec in sim.simulate(scenarios.load(name, list(overrides)))}


def test_continuous_batching_beats_static_at_the_default_load():
    runs = full_run("static-vs-continuous")
    static, continuous = runs["static"][2], runs["continuous"][2]
    assert continuous["ttft_p50_s"] < static["ttft_p50_s"] / 20  # static's queue keeps growing
    assert continuous["ttft_p99_s"] < static["ttft_p99_s"] / 5
    assert continuous["request_throughput"] > 1.1 * static["request_throughput"]
    assert continuous["output_throughput"] > 1.1 * static["output_throughput"]
    assert static["completed"] == continuous["completed"] == 500


def test_the_load_sweep_has_a_knee():
    summaries = [s for _, _, s in full_run("load-sweep").values()]
    ttft = [s["ttft_p50_s"] for s in summaries]
    throughput = [s["output_throughput"] for s in summaries]
    assert ttft[-1] > 20 * ttft[0]  # latency leaves its floor...
    assert ttft[3] < 2 * ttft[0]  # ...only past the middle of the sweep
    assert throughput[3] > 3 * throughput[0]  # throughput grows with load
    assert throughput[-1] < 1.05 * throughput[-2]  # and levels off at saturation


def test_a_smaller_kv_cache_preempts_more():
    runs = full_run("kv-pressure")
    preemptions = [runs[v][2]["preemptions"] for v in ("512-blocks", "128-blocks", "64-blocks")]
    assert preemptions[0] == 0 < preemptions[1] < preemptions[2]
    small, large = runs["64-blocks"][2], runs["512-blocks"][2]
    assert small["ttft_p50_s"] > 10 * large["ttft_p50_s"]
    assert small["request_throughput"] < 0.9 * large["request_throughput"]


def test_sglangs_admission_preempts_a_fraction_of_vllms_and_queues_less_than_trtllms():
    runs = {variant: summary for variant, (_, _, summary)
            in full_run("admission-policies").items()}
    vllm, sglang, trtllm = runs["vllm"], runs["sglang"], runs["trtllm"]
    assert {s["completed"] for s in runs.values()} == {300}
    assert vllm["preemptions"] > 4 * sglang["preemptions"] > 40 > 0 == trtllm["preemptions"]
    # the reserved share falls as the requests decode: well below TensorRT-LLM's wait
    assert vllm["ttft_p50_s"] < sglang["ttft_p50_s"] < 0.6 * trtllm["ttft_p50_s"]
    assert vllm["request_throughput"] > sglang["request_throughput"] \
        > trtllm["request_throughput"]
    # fewer sequences at once, and fewer recomputations among the decodes
    assert vllm["tpot_p50_s"] > sglang["tpot_p50_s"] > trtllm["tpot_p50_s"]


def test_the_priority_queue_serves_urgent_requests_first():
    runs = full_run("priority-mix")

    def urgent_ttft_p50(label):
        _, recorder, _ = runs[label]
        columns = recorder.request_columns()
        ttft = request_metrics(columns)["ttft_s"][np.asarray(columns["priority"]) == 0]
        return latency_percentiles(ttft[~np.isnan(ttft)], (50,))[50]

    assert urgent_ttft_p50("priority") < urgent_ttft_p50("fcfs") / 5


def test_chunked_prefill_keeps_inter_token_latency_low():
    runs = full_run("chunked-prefill")
    whole, chunked = runs["whole-prompt"][2], runs["chunked-256"][2]
    assert chunked["itl_p99_s"] < whole["itl_p99_s"] / 3
    assert chunked["ttft_p50_s"] < whole["ttft_p50_s"]


def test_a_smaller_token_budget_keeps_the_azure_replays_decoding_and_queues_code_less():
    for name, rejected in (("azure-conv", 74), ("azure-code", 277)):
        runs = full_run(name)
        big, small = runs["budget-2048"][2], runs["budget-512"][2]
        assert big["rejected"] == small["rejected"] == rejected  # past the 4,096-token context
        assert small["itl_p99_s"] < 0.8 * big["itl_p99_s"]  # decodes between prompt chunks
        assert small["ttft_p99_s"] < big["ttft_p99_s"]
    assert small["ttft_p50_s"] < big["ttft_p50_s"] / 2  # the code's bursts of long prompts


def test_continuous_batching_on_an_h100_keeps_up_with_the_real_trace_and_static_does_not():
    runs = full_run("llama3-8b-h100")
    static, continuous = runs["static"][2], runs["continuous"][2]
    assert static["completed"] == continuous["completed"] == 19366
    assert continuous["ttft_p50_s"] < static["ttft_p50_s"] / 20  # static waits for its batch
    assert continuous["e2e_p50_s"] < static["e2e_p50_s"] / 2
    spec = runs["continuous"][0]
    assert spec.config.engine.num_kv_blocks > 20_000  # what 80 GB leave after 16 GB


def test_four_a100s_serving_llama2_70b_saturate_between_3_and_5_requests_per_second():
    summaries = [s for _, _, s in full_run("llama2-70b-a100-tp4").values()]
    ttft = [s["ttft_p50_s"] for s in summaries]
    achieved = [s["request_throughput"] for s in summaries]
    assert ttft[4] < 2 * ttft[0]  # 3 requests/s: still near the floor
    assert ttft[-1] > 10 * ttft[-2]  # 5 requests/s: the queue grows for the whole run, at 4 not
    assert achieved[-2] > 0.95 * 4.0 and achieved[-1] < 0.95 * 5.0  # keeps up to 4, not 5


def test_gpus_rank_by_memory_bandwidth_and_the_l40s_falls_behind():
    runs = full_run("gpu-compare")
    e2e = {name: runs[name][2]["e2e_p50_s"] for name in ("h200", "h100", "a100-80gb", "l40s")}
    assert e2e["h200"] < e2e["h100"] < e2e["a100-80gb"] < e2e["l40s"]
    assert runs["h100"][2]["request_throughput"] > 0.98 * 7.0  # keeps up with the arrivals
    assert runs["l40s"][2]["request_throughput"] < 0.8 * 7.0
    assert runs["l40s"][2]["preemptions"] > 0 == runs["h100"][2]["preemptions"]


def test_prefix_caching_serves_multi_turn_chat_with_a_fraction_of_the_ttft():
    runs = full_run("prefix-caching")
    off, on = runs["no-caching"][2], runs["prefix-caching"][2]
    assert off["completed"] == on["completed"] == 599 and on["rejected"] == 0
    assert on["prefix_cache_hit_rate"] > 0.9 and off["prefix_cache_hit_rate"] == 0.0
    assert on["ttft_p50_s"] < off["ttft_p50_s"] / 100  # without it the queue keeps growing
    assert on["request_throughput"] > 1.5 * off["request_throughput"]


def test_the_mooncake_trace_reuses_more_of_its_prefixes_with_more_kv_memory():
    runs = {(spec.variant, spec.config.hardware.tp): summary
            for spec, _, summary in full_run("mooncake-conv").values()}
    hit = {tp: runs["prefix-caching", tp]["prefix_cache_hit_rate"] for tp in (2, 4)}
    assert 0.03 < hit[2] < hit[4] < 0.21  # the trace's own reuse: 21% of prompt tokens
    for tp in (2, 4):
        assert runs["no-caching", tp]["prefix_cache_hit_rate"] == 0.0
        assert runs["prefix-caching", tp]["ttft_p50_s"] < runs["no-caching", tp]["ttft_p50_s"]


def test_load_aware_routers_cut_the_ttft_tail_and_prefix_affinity_the_prefill():
    runs = {variant: summary for variant, (_, _, summary) in full_run("router-compare").items()}
    assert {s["completed"] for s in runs.values()} == {1232}
    robin, least = runs["round_robin"], runs["least_outstanding"]
    assert least["ttft_p99_s"] < 0.9 * robin["ttft_p99_s"]  # bursts spread by load
    assert runs["random"]["ttft_p99_s"] > 2 * robin["ttft_p99_s"]  # random piles them up
    affinity = runs["prefix_affinity"]
    assert affinity["prefix_cache_hit_rate"] > robin["prefix_cache_hit_rate"] + 0.15
    assert affinity["ttft_p50_s"] < robin["ttft_p50_s"] / 3


def test_splitting_prefill_from_decode_cuts_the_inter_token_tail_and_costs_ttft():
    runs = {variant: summary for variant, (_, _, summary)
            in full_run("pd-disaggregation").items()}
    colocated, split = runs["co-located"], runs["split-2p2d"]
    assert colocated["completed"] == split["completed"] == 600
    assert split["itl_p99_s"] < colocated["itl_p99_s"] / 3  # no prefill chunk in a decode step
    assert split["tpot_p99_s"] < 0.9 * colocated["tpot_p99_s"]  # 11.9 ms against 13.9
    assert split["ttft_p99_s"] > colocated["ttft_p99_s"]  # half the GPUs prefill


def test_an_fp8_kv_cache_holds_twice_the_tokens_and_keeps_up_where_bf16_falls_behind():
    runs = full_run("fp8-kv")
    (bf16_spec, _, bf16), (fp8_spec, _, fp8) = runs["bf16-kv"], runs["fp8-kv"]
    blocks = [resolved_spec(spec).config.engine.num_kv_blocks for spec in (bf16_spec, fp8_spec)]
    assert abs(blocks[1] - 2 * blocks[0]) <= 2  # one byte an element instead of two
    assert bf16["preemptions"] > 0 == fp8["preemptions"]
    assert bf16["request_throughput"] < 0.95 * 0.9 < 0.98 * 0.9 < fp8["request_throughput"]
    assert fp8["ttft_p99_s"] < bf16["ttft_p50_s"] / 5  # bf16's queue grows for the whole run


def test_deepseek_v3_on_eight_h200s_by_tensor_expert_and_attention_data_parallelism():
    runs = full_run("moe-deepseek-h200")
    (tp_spec, _, tp), (_, _, ep), (dp_spec, _, dp) = runs["tp8"], runs["tp8-ep8"], runs["dp8-ep8"]
    derived = resolved_spec(tp_spec).config.hardware.derived
    assert {derived["kernel_sources"][op] for op in ("moe_experts", "decode_attention",
                                                     "mla_down_proj")} == {"measured"}
    assert derived["kv_tokens"] > 500_000 and derived["weights_gib_per_gpu"] < 100
    assert tp["completed"] == ep["completed"] == 800
    # vLLM 0.24's measured fused-MoE kernels on H200: the TP-split Triton kernel beats the
    # expert-parallel CUTLASS one at these batches, so every token comes out sooner
    assert tp["tpot_p50_s"] < 0.9 * ep["tpot_p50_s"]
    assert tp["ttft_p99_s"] < ep["ttft_p99_s"]
    # eight ranks of one GPU each cache their own sequences' latents, where TP 8 caches each
    # sequence's on all eight GPUs
    ranks = resolved_spec(dp_spec).config.hardware.derived
    assert ranks["dp"] == 8 and 8 * ranks["kv_tokens"] > 4 * derived["kv_tokens"]
    # at 4 requests a second every layout keeps up and TP 8's tokens come soonest (a rank
    # attends and runs its dense layers on one GPU)
    assert dp["completed"] == 800 and tp["tpot_p50_s"] < 0.8 * dp["tpot_p50_s"]
    # at 8 a second TP 8 falls behind, where the ranks keep their queues short
    busy = {label: summary for label, (_, _, summary)
            in full_run("moe-deepseek-h200", ["workload.arrival.rate=8"]).items()}
    assert busy["tp8"]["ttft_p50_s"] > 5 * busy["dp8-ep8"]["ttft_p50_s"]
    assert busy["dp8-ep8"]["request_throughput"] > busy["tp8"]["request_throughput"]


def test_newer_gpu_generations_serve_more_at_the_slo_and_the_b200_costs_least_a_token():
    from sim.parallel import Parallel
    from sim.search import search, search_scenario

    result = search(search_scenario(scenarios.load("gpu-generations")), Parallel())
    rows = {point.spec.variant: row for point, row in zip(result.points, result.rows())}
    capacity_per_gpu = {name: row["capacity_per_gpu"] for name, row in rows.items()}
    hopper = (capacity_per_gpu["h100-x4"], capacity_per_gpu["h200-x2"])
    assert capacity_per_gpu["a100-x4"] < min(hopper) <= max(hopper) < capacity_per_gpu["b200-x1"]
    dollars = {name: row["dollars_per_million_tokens"] for name, row in rows.items()}
    assert min(dollars, key=dollars.get) == "b200-x1"
    assert max(dollars, key=dollars.get) == "a100-x4"
