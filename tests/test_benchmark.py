"""Metrics against hand-computed runs, and the pooled ITL against per-request token times."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.benchmark import (aggregate_throughput, inter_token_latency, latency_percentiles,
                              request_metrics, summarize, time_to_first_token,
                              weighted_percentile)
from engine.block_manager import BlockManager
from engine.llm_engine import LLMEngine
from engine.vllm_figures import latency_std, peak_figures, vllm_summary
from engine.records import RunRecorder
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence


def run_engine(executor_factory, seqs, *, num_blocks=8, block_size=4, step_s=1.0, **config):
    """Simulated-clock run (each step lasts step_s, or step_s(i)); returns recorder and the
    end time of every token of every request."""
    bm = BlockManager(num_blocks, block_size)
    config.setdefault("max_num_seqs", 4)
    scheduler = Scheduler(SchedulerConfig(**config), bm)
    executor = executor_factory(bm)
    recorder = RunRecorder(num_blocks)
    engine = LLMEngine(scheduler, executor, recorder, timing="executor")
    pending = sorted(seqs, key=lambda s: s.arrival_s)
    token_times = {s.request_id: [] for s in seqs}
    now, i = pending[0].arrival_s, 0
    while i < len(pending) or engine.has_unfinished():
        while i < len(pending) and pending[i].arrival_s <= now:
            engine.add_request(pending[i])
            i += 1
        executor.step_s = step_s(recorder.num_steps) if callable(step_s) else step_s
        out = engine.step(now)
        if not out.ran:
            now = pending[i].arrival_s
            continue
        for seq in [s for s, _ in out.plan.prefills] + out.plan.decodes:
            if seq.last_token_step == out.plan.step:
                token_times[seq.request_id].append(out.end_s)
        now = out.end_s
    return recorder, token_times


def test_latency_percentiles_interpolate_linearly():
    assert latency_percentiles([1, 2, 3, 4], (50, 90)) == {50: 2.5, 90: pytest.approx(3.7)}


def test_latency_percentiles_of_nothing_are_nan_not_zero():
    assert all(math.isnan(v) for v in latency_percentiles([]).values())
    with pytest.raises(ValueError, match="NaN"):
        latency_percentiles([1.0, math.nan])


def test_metric_building_blocks_on_hand_values():
    assert time_to_first_token(2.0, 2.75) == pytest.approx(0.75)
    assert inter_token_latency([1.0, 1.5, 2.25]).tolist() == [0.5, 0.75]
    assert inter_token_latency([3.0]).size == 0
    assert aggregate_throughput(2, 8, 4, 2.0) == {
        "request_throughput": 1.0, "output_throughput": 2.0, "total_token_throughput": 6.0}
    with pytest.raises(ValueError, match="duration_s"):
        aggregate_throughput(1, 1, 1, 0.0)


def test_summary_of_a_hand_computed_run(fake_executor):
    # Both arrive at 0; steps last 1 s. Step 0 prefills both (first tokens at 1; "one" is done),
    # steps 1 and 2 decode "three" (tokens at 2 and 3).
    recorder, _ = run_engine(fake_executor, [Sequence("three", 4, 3), Sequence("one", 4, 1)])
    s = summarize(recorder, slo={"tpot_s": 0.5})
    assert (s["completed"], s["rejected"], s["duration_s"]) == (2, 0, 3.0)
    assert s["ttft_mean_s"] == 1.0 and s["e2e_max_s"] == 3.0 and s["e2e_mean_s"] == 2.0
    assert s["tpot_mean_s"] == 1.0 and s["tpot_p99_s"] == 1.0  # "one" has no TPOT
    assert s["itl_mean_s"] == 1.0 and s["itl_max_s"] == 1.0
    assert s["queue_max_s"] == 0.0
    assert s["request_throughput"] == pytest.approx(2 / 3)
    assert s["output_throughput"] == pytest.approx(4 / 3)
    assert s["total_token_throughput"] == pytest.approx(12 / 3)
    assert s["goodput"] == pytest.approx(1 / 3)  # only "one" meets TPOT <= 0.5 s
    assert s["mean_batch_size"] == pytest.approx(4 / 3)  # 2, 1, 1 sequences
    assert s["kv_util_max"] == 0.25 and s["preemptions"] == 0


def test_request_metrics_follow_the_definitions():
    cols = {"arrival_s": [0.0, 1.0], "first_scheduled_s": [0.5, 1.0],
            "first_token_s": [1.0, 3.0], "finish_s": [4.0, 3.0], "output_tokens": [4, 1]}
    m = request_metrics(cols)
    assert m["ttft_s"].tolist() == [1.0, 2.0] and m["e2e_s"].tolist() == [4.0, 2.0]
    assert m["queue_s"].tolist() == [0.5, 0.0]
    assert m["tpot_s"][0] == 1.0 and math.isnan(m["tpot_s"][1])


def test_goodput_counts_requests_meeting_every_slo(fake_executor):
    recorder, _ = run_engine(fake_executor, [Sequence("three", 4, 3), Sequence("one", 4, 1)])
    assert summarize(recorder, {"ttft_s": 0.5})["goodput"] == 0.0
    assert summarize(recorder, {"e2e_s": 2.0, "ttft_s": 1.0})["goodput"] == pytest.approx(1 / 3)
    assert summarize(recorder)["goodput"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="slo"):
        summarize(recorder, {"latency": 1.0})


def test_pooled_itl_equals_every_request_gap_even_across_preemptions(fake_executor):
    durations = np.random.default_rng(3).uniform(0.1, 2.0, size=500)
    seqs = [Sequence(f"r{i}", 3 + i, 5 + i % 3, arrival_s=0.3 * i) for i in range(6)]
    recorder, times = run_engine(fake_executor, seqs, num_blocks=6, block_size=2,
                                 step_s=lambda k: float(durations[k]))
    assert summarize(recorder)["preemptions"] > 0
    expected = np.sort(np.concatenate([inter_token_latency(t) for t in times.values()]))
    pooled = np.sort(np.repeat(recorder.itl_gaps, recorder.itl_counts))
    np.testing.assert_allclose(pooled, expected, rtol=0, atol=1e-12)


def test_peak_figures_of_a_hand_computed_run(fake_executor):
    # first tokens of both at 1 s, then "three"'s at 2 and 3 s; both in flight from 0 to 1 s
    recorder, _ = run_engine(fake_executor, [Sequence("three", 4, 3), Sequence("one", 4, 1)])
    assert peak_figures(recorder) == {"max_output_tokens_per_s": 2.0,
                                      "max_concurrent_requests": 2}
    # nothing counted, nothing at its peak
    assert peak_figures(recorder, warmup_s=1e6) == {"max_output_tokens_per_s": 0.0,
                                                    "max_concurrent_requests": 0}


@pytest.mark.parametrize("warmup_s", [0.0, 1.0])
def test_peak_figures_equal_vllms_bucketing_of_every_token(fake_executor, warmup_s):
    # vLLM's own rule on every request's token times: one-second buckets from the first
    # counted request's arrival; requests in flight over [arrival, finish)
    durations = np.random.default_rng(5).uniform(0.05, 0.6, size=800)
    seqs = [Sequence(f"r{i}", 3 + i % 5, 4 + i % 7, arrival_s=0.37 * i) for i in range(12)]
    recorder, times = run_engine(fake_executor, seqs, num_blocks=10, block_size=2,
                                 step_s=lambda k: float(durations[k]))
    assert summarize(recorder)["preemptions"] > 0
    cols = recorder.request_columns()
    kept = [i for i, a in enumerate(cols["arrival_s"]) if a >= warmup_s]
    origin = min(cols["arrival_s"][i] for i in kept)
    tokens = [t for ts in times.values() for t in ts if t >= warmup_s]
    buckets = np.bincount(np.floor(np.asarray(tokens) - origin).astype(int))
    spans = [(cols["arrival_s"][i], cols["finish_s"][i]) for i in kept]
    in_flight = max(sum(a <= t < f for a, f in spans) for t, _ in spans)
    assert peak_figures(recorder, warmup_s) == {"max_output_tokens_per_s": buckets.max(),
                                                "max_concurrent_requests": in_flight}


def test_an_empty_run_summarizes_to_nan_not_zero():
    s = summarize(RunRecorder(8))
    assert s["completed"] == 0 and math.isnan(s["ttft_p50_s"]) and math.isnan(s["itl_mean_s"])
    assert math.isnan(s["request_throughput"]) and math.isnan(s["mean_batch_size"])


def test_vllm_summary_uses_vllm_names_in_milliseconds(fake_executor):
    recorder, _ = run_engine(fake_executor, [Sequence("three", 4, 3), Sequence("one", 4, 1)])
    v = vllm_summary(summarize(recorder), latency_std(recorder))
    assert v["mean_ttft_ms"] == 1000.0 and v["median_e2el_ms"] == 2000.0
    assert v["p99_itl_ms"] == 1000.0 and v["duration"] == 3.0 and v["completed"] == 2
    assert v["failed"] == 0 and v["std_ttft_ms"] == 0.0 and v["std_e2el_ms"] == 1000.0
    assert {"request_throughput", "output_throughput", "total_token_throughput",
            "request_goodput", "mean_tpot_ms", "p90_ttft_ms", "p95_tpot_ms"} <= set(v)
    assert math.isnan(vllm_summary(summarize(recorder))["std_ttft_ms"])  # not given: NaN
    peaks = vllm_summary(summarize(recorder), peaks=peak_figures(recorder))
    assert (peaks["max_output_tokens_per_s"], peaks["max_concurrent_requests"]) == (2.0, 2)


def test_latency_std_is_numpys_population_std_and_itl_is_token_weighted(fake_executor):
    seqs = [Sequence(f"r{i}", 4 + i, 2 + 3 * i, arrival_s=0.5 * i) for i in range(5)]
    recorder, times = run_engine(fake_executor, seqs, num_blocks=32,
                                 step_s=lambda i: 0.1 + 0.07 * (i % 4))
    std = latency_std(recorder)
    metrics = request_metrics(recorder.request_columns())
    for name in ("ttft", "tpot", "e2e", "queue"):
        assert std[f"{name}_std_s"] == pytest.approx(np.std(metrics[f"{name}_s"]), rel=1e-12)
    gaps = np.concatenate([inter_token_latency(t) for t in times.values()])
    assert std["itl_std_s"] == pytest.approx(np.std(gaps), rel=1e-9)
    assert max(recorder.itl_counts) > 1  # the gaps shared by a batch weigh by their tokens


def test_latency_std_counts_what_summarize_counts_after_a_warmup(fake_executor):
    seqs = [Sequence(f"r{i}", 4, 3 + i, arrival_s=1.0 * i) for i in range(6)]
    recorder, _ = run_engine(fake_executor, seqs, num_blocks=32)
    warm = latency_std(recorder, warmup_s=2.5)
    columns = recorder.request_columns()
    kept = np.asarray(columns["arrival_s"]) >= 2.5
    ttft = request_metrics(columns)["ttft_s"][kept]
    assert warm["ttft_std_s"] == pytest.approx(np.std(ttft), rel=1e-12)
    assert math.isnan(latency_std(recorder, warmup_s=1e6)["ttft_std_s"])  # nothing counted


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=12),
       counts=st.lists(st.integers(0, 5), min_size=12, max_size=12),
       q=st.floats(0, 100))
def test_weighted_percentile_equals_percentile_of_the_expanded_data(values, counts, q):
    counts = counts[: len(values)]
    expanded = np.repeat(values, counts)
    got = weighted_percentile(values, counts, q)
    if expanded.size == 0:
        assert math.isnan(got)
    else:
        assert got == np.percentile(expanded, q)  # the same arithmetic, bit for bit


def test_weighted_percentile_takes_several_q_at_once():
    got = weighted_percentile([4.0, 1.0, 3.0], [1, 2, 1], [0, 50, 90, 100])
    np.testing.assert_allclose(got, np.percentile([1, 1, 3, 4], [0, 50, 90, 100]))
