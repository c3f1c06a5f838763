"""The simulator's entry points: `run_config` in each mode and `simulate` over a scenario file."""

import copy

import numpy as np
import pytest

import sim
from dataclasses import replace

from helpers.configs import resolved
from sim.runner import run_config

TINY = {"vocab_size": 64, "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64,
        "max_seq_len": 256}
CONFIG = {
    "name": "r", "description": "", "seed": 0, "mode": "simulate", "model": TINY,
    "engine": {"block_size": 8, "num_kv_blocks": 64, "max_num_seqs": 8,
               "max_num_batched_tokens": 128, "enable_prefix_caching": False},
    "scheduler": {"policy": "continuous", "queue": "fcfs", "chunked_prefill": False,
                  "max_batch_size": 8, "batch_timeout_s": 0.0},
    "cost": {"model": "linear", "profile": "default", "step_overhead_s": 1e-3,
             "prefill_token_s": 1e-5, "decode_seq_s": 1e-4, "context_token_s": 1e-7},
    "workload": {"num_requests": 12, "arrival": {"process": "poisson", "rate": 200.0},
                 "prompt_tokens": {"dist": "uniform", "low": 2, "high": 40},
                 "output_tokens": {"dist": "uniform", "low": 1, "high": 8},
                 "priority": None, "trace": None},
    "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
}


def config(mode="simulate", engine: dict | None = None, **workload):
    cfg = copy.deepcopy(CONFIG)
    cfg["mode"] = mode
    cfg["workload"].update(workload)
    cfg["engine"].update(engine or {})
    return resolved(cfg)


def test_serve_mode_runs_the_real_engine_on_the_wall_clock():
    rec = run_config(config("serve"))
    assert rec.statuses == ["finished"] * 12
    assert rec.num_steps > 0 and len(rec.submit_lag_s) == 12


def test_serve_mode_refuses_a_closed_loop_with_think_time():
    with pytest.raises(ValueError, match="a closed loop with think time is supported in modes "
                                         "simulate and cosimulate"):
        run_config(config("serve", arrival={"process": "closed_loop", "concurrency": 2,
                                            "think_time_s": 0.5}))


def test_a_served_variant_with_think_time_is_refused_before_any_variant_serves(tmp_path,
                                                                              capsys):
    from sim.cli import main

    path = tmp_path / "served.toml"
    path.write_text('mode = "serve"\n[workload]\nnum_requests = 4\n'
                    'arrival = { process = "poisson", rate = 50.0 }\n'
                    'prompt_tokens = { dist = "fixed", value = 8 }\n'
                    'output_tokens = { dist = "fixed", value = 2 }\n'
                    '[[variants]]\nname = "open"\n[[variants]]\nname = "thinking"\n'
                    'set = { "workload.arrival" = { process = "closed_loop", concurrency = 2, '
                    'think_time_s = 0.5 } }\n')
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--jobs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: {path}: variant 'thinking': ") and \
        "a closed loop with think time is supported in modes simulate" in err
    assert not out.exists()


def test_serve_mode_serves_a_closed_loop_without_think_time_as_capped_slots():
    rec = run_config(config("serve", arrival={"process": "closed_loop", "concurrency": 2,
                                              "think_time_s": 0.0}))
    assert rec.statuses == ["finished"] * 12


def test_live_cost_model_cosimulates():
    cfg = config()
    rec = run_config(replace(cfg, cost=replace(cfg.cost, model="live")))
    linear = run_config(config())
    arrivals = lambda r: sorted(zip(r.request_columns()["request_id"],
                                    r.request_columns()["arrival_s"]))
    assert arrivals(rec) == arrivals(linear)
    first_step_s = lambda r: r.step_columns()["end_s"][0] - r.step_columns()["start_s"][0]
    assert first_step_s(rec) != first_step_s(linear)  # measured, not the linear formula


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="mode must be one of simulate, cosimulate, serve"):
        run_config(replace(config(), mode="fast"))


def test_same_seed_same_arrivals_and_lengths_in_every_mode():
    runs = {mode: run_config(config(mode)).request_columns()
            for mode in ("simulate", "cosimulate", "serve")}
    ref = runs["simulate"]
    key = lambda cols, name: dict(zip(cols["request_id"], cols[name]))
    for cols in runs.values():
        for name in ("arrival_s", "prompt_tokens", "output_tokens"):
            assert key(cols, name) == key(ref, name)


def test_simulate_runs_every_variant_of_a_scenario_file(tmp_path):
    path = tmp_path / "two.toml"
    path.write_text("""
name = "two"
seed = 4
[model]
vocab_size = 64
d_model = 32
n_layers = 2
n_heads = 2
d_ff = 64
max_seq_len = 256
[cost]
model = "linear"
[workload]
num_requests = 40
arrival = { process = "poisson", rate = 5.0 }
prompt_tokens = { dist = "uniform", low = 4, high = 60 }
output_tokens = { dist = "fixed", value = 6 }
[[variants]]
name = "static"
set = { "scheduler.policy" = "static" }
[[variants]]
name = "continuous"
""")
    runs = sim.simulate(str(path))
    assert [spec.variant for spec, _ in runs] == ["static", "continuous"]
    for _, rec in runs:
        assert rec.statuses == ["finished"] * 40
    static, continuous = (np.nanmean(rec.request_columns()["finish_s"]) for _, rec in runs)
    assert static != continuous


def test_progress_bar_is_harmless_off_a_terminal(capsys):
    rec = run_config(config(), progress=True)  # pytest's stderr is not a terminal: bar disabled
    assert rec.statuses == ["finished"] * 12
    assert "simulating" not in capsys.readouterr().err


def test_a_request_preempted_by_recompute_finds_its_own_blocks_cached_as_in_the_engine():
    """Prefix caching on and no prefix shared (random prompts): a request's blocks match no
    other's, but readmitted after a preemption by recompute it finds its own still cached, as
    the real engine's hashes of its tokens do; with caching off it computes them all again."""
    cfg = config(num_requests=60, arrival={"process": "poisson", "rate": 500.0},
                 output_tokens={"dist": "uniform", "low": 1, "high": 60},
                 engine={"enable_prefix_caching": True, "num_kv_blocks": 16})
    cached = run_config(cfg)
    steps, requests = cached.step_columns(), cached.request_columns()
    assert sum(steps["preemptions"]) > 0
    assert sum(steps["cached_tokens"]) > 0  # found again on readmission
    assert set(requests["cached_tokens"]) == {0}  # never at a first admission: nothing shared
    off = run_config(replace(cfg, engine=replace(cfg.engine, enable_prefix_caching=False)))
    assert sum(off.step_columns()["cached_tokens"]) == 0
    assert sum(off.step_columns()["num_prefill_tokens"]) > sum(steps["num_prefill_tokens"])


@pytest.mark.parametrize("scheduler, engine", [
    ({}, {}), ({"preemption": "swap"}, {"swap_blocks": 6}),  # a swap space too small for all
    ({"preemption": "swap", "queue": "priority", "chunked_prefill": True}, {"swap_blocks": 3}),
])
def test_own_keys_registered_at_preemption_find_what_keys_registered_as_blocks_fill_do(
        monkeypatch, scheduler, engine):
    """A request's own keys (a range) are registered when it is preempted, those of the blocks
    it filled since it was admitted (not those a swap-in brought back): nobody else can find
    them, so every record is the same as with every block registered as it fills, but the
    count of blocks cached."""
    from helpers.runs import own_keys_both_ways

    cfg = config(num_requests=60, arrival={"process": "poisson", "rate": 500.0},
                 output_tokens={"dist": "uniform", "low": 1, "high": 60},
                 engine={"enable_prefix_caching": True, "num_kv_blocks": 20} | engine)
    cfg = replace(cfg, scheduler=replace(cfg.scheduler, **scheduler))
    lazy, eager = own_keys_both_ways(lambda: run_config(cfg), monkeypatch)
    assert sum(lazy["step.cached_tokens"]) > 0 and sum(lazy["step.preemptions"]) > 0
    assert lazy == eager
