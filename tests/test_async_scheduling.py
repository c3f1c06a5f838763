"""Async scheduling (`hardware.async_scheduling`): the server's own time hides behind the GPU's,
and a request that arrives while a step runs joins the step after the one already planned."""

from __future__ import annotations

import numpy as np
import pytest

import scenarios
from helpers.runs import records
from sim.costs.hardware import HardwareCost, hardware_setup
from sim.costs.shape import StepShape
from sim.runner import run_config

SERVER = """
[model]
name = "meta-llama/Llama-3.1-8B"
max_seq_len = 4096
[hardware]
gpu = "h100-sxm"
async_scheduling = {overlap}
[cost]
model = "hardware"
[engine]
max_num_seqs = 64
max_num_batched_tokens = 8192
[scheduler]
chunked_prefill = true
[workload]
num_requests = {requests}
arrival = {{ process = "{process}", rate = {rate} }}
prompt_tokens = {prompt}
output_tokens = {{ dist = "fixed", value = {output} }}
"""
FIXED_PROMPT = '{ dist = "fixed", value = 1000 }'


def config(tmp_path, overlap: bool, requests=6, rate=20.0, prompt=FIXED_PROMPT, output=300,
           process="constant"):
    """A Llama-3.1-8B server on one H100 with `requests` requests `rate` a second."""
    path = tmp_path / f"async-{overlap}.toml"
    path.write_text(SERVER.format(overlap=str(overlap).lower(), requests=requests, rate=rate,
                                  prompt=prompt, output=output, process=process))
    return scenarios.load(path).base


def test_the_servers_time_overlaps_the_gpus_or_adds_to_it(tmp_path):
    setup = hardware_setup(config(tmp_path, True))
    decode = StepShape(decode_seqs=8, decode_context=8 * 1500, sampled_seqs=8, decoding=1)
    planned_ahead = HardwareCost(setup, 1e-3, 10e-6, async_scheduling=True)
    in_turn = HardwareCost(setup, 1e-3, 10e-6, async_scheduling=False)
    host = 1e-3 + 8 * 10e-6
    gpu = planned_ahead.step_time(decode)
    assert gpu > host  # eight decodes of an 8B model take milliseconds of GPU time
    assert in_turn.step_time(decode) == pytest.approx(gpu + host, rel=1e-12)
    slow_host = HardwareCost(setup, 0.5, 0.0, async_scheduling=True)
    assert slow_host.step_time(decode) == 0.5  # a server slower than its GPU sets the pace
    arrays = StepShape(decode_seqs=np.array([8, 8]), decode_context=np.array([12000, 12008]),
                       sampled_seqs=np.array([8, 8]), decoding=1)
    assert planned_ahead.step_time(arrays).tolist() == [
        gpu, planned_ahead.step_time(decode._replace(decode_context=12008))]
    assert slow_host.step_time(arrays).tolist() == [0.5, 0.5]


def admission(tmp_path, overlap: bool):
    """(arrival, first scheduled, the step in flight at the arrival, step start times, ends)."""
    recorder = run_config(config(tmp_path, overlap))
    requests, steps = recorder.request_columns(), recorder.step_columns()
    start, end = np.asarray(steps["start_s"]), np.asarray(steps["end_s"])
    arrival = np.asarray(requests["arrival_s"])
    first = np.asarray(requests["first_scheduled_s"])
    in_flight = np.searchsorted(start, arrival, side="right") - 1
    return arrival, first, in_flight, start, end


@pytest.mark.parametrize("overlap", [False, True])
def test_a_request_arriving_during_a_step_joins_the_next_or_the_one_after(tmp_path, overlap):
    arrival, first, in_flight, start, end = admission(tmp_path, overlap)
    assert first[0] == arrival[0] == 0.0  # an idle server schedules a newcomer at once
    later = range(1, len(arrival))  # every 50 ms while the first one decodes for 300 steps
    for i in later:
        k = in_flight[i]
        assert start[k] < arrival[i] < end[k]
        # planned, then run: the next step; planned ahead: the step after it
        assert first[i] == (end[k + 1] if overlap else end[k])


def test_an_idle_server_that_plans_ahead_still_starts_at_the_arrival(tmp_path):
    # each request done long before the next one arrives (1 s apart, 20 tokens)
    recorder = run_config(config(tmp_path, True, requests=4, rate=1.0, output=20))
    columns = recorder.request_columns()
    assert columns["first_scheduled_s"] == columns["arrival_s"]


def test_runs_of_decode_steps_are_the_steps_one_by_one_with_requests_held(tmp_path):
    poisson = config(tmp_path, True, requests=150, rate=12.0, output=120, process="poisson",
                     prompt='{ dist = "fixed", value = 800 }')
    assert records(run_config(poisson)) == records(run_config(poisson, fast_forward=False))


def test_held_requests_that_can_never_run_are_recorded_rejected(tmp_path):
    # prompts of 100 to 7,000 tokens against max_seq_len 4,096, most arriving during a step:
    # those too long are refused when queued, and every request is accounted for
    recorder = run_config(config(tmp_path, True, requests=40,
                                 prompt='{ dist = "uniform", low = 100, high = 7000 }'))
    columns = recorder.request_columns()
    assert sorted(columns["request_id"]) == list(range(40))
    too_long = [p + 300 > 4096 for p in columns["prompt_tokens"]]
    assert [s == "rejected" for s in columns["status"]] == too_long
    assert 5 < sum(too_long) < 35
    assert all(s == "finished" for s, t in zip(columns["status"], too_long) if not t)


def test_replicas_that_plan_ahead_keep_runs_exact_in_a_cluster_and_when_disaggregated():
    # pd-disaggregation's co-located (four replicas behind a router) and 2p2d runs: requests
    # held at prefill and decode replicas, the records the same with and without fast forward
    for spec in scenarios.load("pd-disaggregation", ["workload.num_requests=120"]).runs():
        assert spec.config.hardware.async_scheduling
        fast = run_config(spec.config)
        assert records(fast) == records(run_config(spec.config, fast_forward=False))
        assert sorted(fast.request_columns()["request_id"]) == list(range(120))
