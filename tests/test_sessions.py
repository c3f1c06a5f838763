"""Multi-turn chat sessions (`workload.sessions`): each turn's prompt is the conversation so far,
conversations are closed loops started by an arrival process, the simulated block keys make the
same prefix-cache decisions as the real engine's hashes of token ids, and bad inputs are
one-line errors naming the key."""

import copy
from pathlib import Path

import numpy as np
import pytest

import scenarios
from engine.executor import NumpyExecutor
from engine.model import ModelConfig, init_params
from engine.records import STEP_COLUMNS
from helpers.configs import resolved
from helpers.cosim import Recording, Replay
from helpers.sessions import CONFIG, SESSIONS, TINY, run_pieces
from scenarios import ScenarioError
from sim.costs import CostModelExecutor, cost_model
from sim.checks import check_scenario
from sim.runner import run_config
from scenarios.arrival import Poisson
from scenarios.lengths import Uniform
from sim.workloads import build_workload, seeded_streams
from sim.workloads.sessions import REJECTED_EARLIER


def config(engine: dict | None = None, **workload):
    cfg = copy.deepcopy(CONFIG)
    cfg["workload"].update(copy.deepcopy(workload))
    cfg["engine"].update(engine or {})
    return resolved(cfg)


WORKLOAD = config().workload


def mean_ttft_s(recorder) -> float:
    cols = recorder.request_columns()
    return float(np.mean(np.subtract(cols["first_token_s"], cols["arrival_s"])))


# --- the plan ------------------------------------------------------------------------------------


def test_each_turn_prompt_grows_by_the_previous_message_and_reply():
    workload = build_workload(WORKLOAD, np.random.default_rng(1))
    plan = workload.sessions
    for c in range(plan.num_conversations):
        turns = plan.requests(c)
        first = turns.start
        assert workload.prompt_tokens[first] == 18 + plan.message_tokens[first]
        for i in turns[1:]:
            assert workload.prompt_tokens[i] == (workload.prompt_tokens[i - 1]
                                                 + workload.output_tokens[i - 1]
                                                 + plan.message_tokens[i])
    assert len(workload) == plan.offset[-1] == sum(len(plan.requests(c))
                                                   for c in range(plan.num_conversations))


def test_draw_order_is_starts_then_turns_then_messages_then_replies():
    plan = build_workload(WORKLOAD, np.random.default_rng(7)).sessions
    rng = np.random.default_rng(7)
    starts = Poisson(40.0).times(rng, 6)
    turns = Uniform(2, 4).sample(rng, 6)
    messages = Uniform(2, 20).sample(rng, int(turns.sum()))
    replies = Uniform(1, 12).sample(rng, int(turns.sum()))
    assert np.array_equal(plan.start_s, starts)
    assert np.array_equal(np.diff(plan.offset), turns)
    assert np.array_equal(plan.message_tokens, messages)
    assert np.array_equal(plan.output_tokens, replies)


def test_block_keys_share_the_system_prompt_and_extend_the_previous_turn():
    plan = build_workload(WORKLOAD, np.random.default_rng(1)).sessions
    bs = 4
    keys = [plan.block_keys(i, bs) for i in range(plan.offset[-1])]
    system_blocks = 18 // bs
    firsts = [keys[plan.offset[c]] for c in range(plan.num_conversations)]
    assert all(k[:system_blocks] == firsts[0][:system_blocks] for k in firsts)
    assert len({k[system_blocks] for k in firsts}) == len(firsts)  # then each its own
    for c in range(plan.num_conversations):
        for i in plan.requests(c)[1:]:
            assert keys[i][:len(keys[i - 1])] == keys[i - 1]
            assert len(keys[i]) == (plan.prompt_tokens[i] + plan.output_tokens[i]) // bs


def test_max_seconds_keeps_whole_the_conversations_that_start_within_it():
    full = build_workload(WORKLOAD, np.random.default_rng(2)).sessions
    cut = build_workload(config(max_seconds=0.08).workload,
                         np.random.default_rng(2)).sessions
    kept = int(np.sum(full.start_s <= full.start_s[0] + 0.08))
    assert 0 < kept < full.num_conversations
    assert cut.num_conversations == kept
    assert np.array_equal(cut.prompt_tokens, full.prompt_tokens[:full.offset[kept]])


# --- the run -------------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_requests():
    assert run_config(config()).request_columns() == run_config(config()).request_columns()


def test_each_turn_is_sent_think_time_after_the_previous_one_finished():
    recorder = run_config(config())
    cols = recorder.request_columns()
    plan = build_workload(WORKLOAD, seeded_streams(5)["workload"]).sessions
    arrival, finish = np.array(cols["arrival_s"]), np.array(cols["finish_s"])
    order = np.argsort(cols["request_id"])
    arrival, finish = arrival[order], finish[order]
    for c in range(plan.num_conversations):
        turns = plan.requests(c)
        assert np.allclose(arrival[turns.start + 1:turns.stop],
                           finish[turns.start:turns.stop - 1] + 0.05, rtol=0, atol=1e-12)
        assert arrival[turns.start] == arrival[0] + plan.start_s[c] - plan.start_s[0]


def test_fast_forward_gives_the_same_records_as_stepping_one_by_one():
    """A finish can start a turn: runs of decode steps stop there."""
    fast, slow = run_config(config()), run_config(config(), fast_forward=False)
    assert fast.request_columns() == slow.request_columns()
    steps_fast, steps_slow = fast.step_columns(), slow.step_columns()
    for name in STEP_COLUMNS:
        if name != "kv_blocks_cached":  # a run records its first step's for all its steps
            assert list(steps_fast[name]) == list(steps_slow[name]), name


def test_prefix_caching_lowers_the_mean_time_to_first_token():
    cfg = config(sessions=dict(SESSIONS, system_prompt_tokens=200))
    cached = run_config(cfg)
    uncached = run_config(cfg.updated({"engine.enable_prefix_caching": False}))
    assert sum(cached.step_columns()["cached_tokens"]) > 0
    assert mean_ttft_s(cached) < 0.8 * mean_ttft_s(uncached)


def test_after_a_rejected_turn_the_later_turns_are_recorded_as_rejected():
    cfg = config(sessions=dict(SESSIONS, turns=6),
                 engine={"num_kv_blocks": 24})  # 96 tokens: later turns outgrow the cache
    recorder = run_config(cfg)
    plan = build_workload(cfg.workload, seeded_streams(5)["workload"]).sessions
    assert sorted(recorder.request_ids) == list(range(6 * 6))
    status = dict(zip(recorder.request_ids, recorder.statuses))
    reasons = recorder.reject_reasons
    for c in range(plan.num_conversations):
        turns = list(plan.requests(c))
        rejected = [i for i in turns if status[i] == "rejected"]
        assert rejected and all(status[i] == "finished" for i in turns[:turns.index(rejected[0])])
        assert "KV blocks" in reasons[rejected[0]]
        assert rejected == turns[turns.index(rejected[0]):]
        assert all(reasons[i] == REJECTED_EARLIER for i in rejected[1:])


# --- simulated keys against the real engine's hashes ---------------------------------------------


@pytest.mark.parametrize("num_kv_blocks, under_pressure", [(40, True), (400, False)])
def test_simulated_block_keys_make_the_real_engines_caching_decisions_step_for_step(
        num_kv_blocks, under_pressure):
    """Fed the real engine's measured step times, a simulated run (block keys, no token ids)
    schedules, caches and evicts exactly as the real engine hashing its token ids does: under
    pressure (cached blocks evicted, sequences preempted) and with every block kept."""
    cfg = config(sessions=dict(SESSIONS, conversations=8),
                 arrival={"process": "poisson", "rate": 400.0},
                 output_tokens={"dist": "uniform", "low": 8, "high": 24},
                 engine={"num_kv_blocks": num_kv_blocks})
    params = init_params(ModelConfig(**TINY))
    recording = []

    def live(bm):
        recording.append(Recording(NumpyExecutor(params, bm, rng=np.random.default_rng(0))))
        return recording[0]

    real, real_bm = run_pieces(cfg, live, real=True)
    simulated, sim_bm = run_pieces(cfg, lambda bm: Replay(recording[0].durations), real=False)
    a, b = real.step_columns(), simulated.step_columns()
    for name in ("num_prefill_tokens", "num_prefill_seqs", "num_decode_seqs", "kv_blocks_used",
                 "preemptions", "cached_tokens", "kv_blocks_cached"):
        assert list(a[name]) == list(b[name]), name
    assert real.request_columns() == simulated.request_columns()
    prompt_tokens = sum(real.request_columns()["prompt_tokens"])
    assert sum(a["cached_tokens"]) > 0.3 * prompt_tokens
    assert (real_bm.evictions > 0 and sum(a["preemptions"]) > 0) == under_pressure
    for bm in (real_bm, sim_bm):  # every block back: free or cached for a later prompt
        bm.check_invariants()
        assert bm.num_used == 0 and bm.num_free == bm.num_blocks


def test_no_kv_block_leaks_with_rejections_and_preemptions():
    cfg = config(sessions=dict(SESSIONS, conversations=12, turns=6),
                 engine={"num_kv_blocks": 30})
    cost = cost_model(cfg.cost, cfg.model)
    recorder, bm = run_pieces(cfg, lambda bm: CostModelExecutor(cost, None, bm.block_size), real=False)
    assert "rejected" in recorder.statuses and sum(recorder.step_columns()["preemptions"]) > 0
    bm.check_invariants()
    assert bm.num_used == 0 and bm.num_free == bm.num_blocks


# --- one-line refusals ---------------------------------------------------------------------------

TOML = """
[cost]
model = "linear"
[workload]
arrival = { process = "poisson", rate = 4.0 }
prompt_tokens = { dist = "uniform", low = 10, high = 40 }
output_tokens = { dist = "uniform", low = 4, high = 32 }
[workload.sessions]
conversations = 20
turns = { dist = "uniform", low = 2, high = 8 }
system_prompt_tokens = 100
think_time_s = 5.0
"""

BAD_AT_LOAD = {
    "num_requests": (("workload.num_requests=50",),
                     "workload.num_requests: not allowed with workload.sessions"),
    "closed loop": (('workload.arrival={process="closed_loop", concurrency=4}',),
                    "workload.arrival.process: 'closed_loop' cannot start the conversations"),
    "trace arrivals": (('workload.arrival={process="trace"}',),
                       "workload.arrival.process: 'trace' cannot start the conversations"),
    "trace": (('workload.trace={name="azure-conv"}',),
              "workload.trace: not allowed with workload.sessions"),
    "zero turns": (("workload.sessions.turns=0",),
                   "workload.sessions.turns: must be a positive integer or a length distribution"),
    "bad turns table": (('workload.sessions.turns={dist="uniform", low=2}',),
                        "workload.sessions.turns.high: required"),
    "negative system prompt": (("workload.sessions.system_prompt_tokens=-1",),
                               "workload.sessions.system_prompt_tokens: must be a whole number "
                               "of tokens from 0"),
    "negative think time": (("workload.sessions.think_time_s=-1.0",),
                            "workload.sessions.think_time_s: must be a non-negative number"),
    "unknown key": (("workload.sessions.users=3",), "workload.sessions.users: unknown key"),
    "turns range": (('workload.sessions.turns={dist="uniform", low=5, high=2}',),
                    "workload.sessions.turns.low (5) must be <= workload.sessions.turns.high"),
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "chat.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", BAD_AT_LOAD)
def test_a_bad_sessions_workload_is_refused_at_load_in_one_line(tmp_path, case):
    overrides, expected = BAD_AT_LOAD[case]
    with pytest.raises(ScenarioError) as info:
        scenarios.load(write(tmp_path, TOML), overrides)
    assert "\n" not in str(info.value) and expected in str(info.value)


BAD_WHEN_CHECKED = {
    "serve": (('mode="serve"',), "workload.sessions is supported in modes simulate and "
                                 "cosimulate only"),
}


@pytest.mark.parametrize("case", BAD_WHEN_CHECKED)
def test_a_sessions_workload_the_run_cannot_serve_is_refused_before_it_starts(tmp_path, case):
    overrides, expected = BAD_WHEN_CHECKED[case]
    scenario = scenarios.load(write(tmp_path, TOML), overrides)
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenario)
    assert "\n" not in str(info.value) and expected in str(info.value)


def test_the_turn_past_max_seq_len_is_named_with_what_to_lower(tmp_path):
    scenario = scenarios.load(write(tmp_path, TOML), ("model.max_seq_len=400",))
    with pytest.raises(ScenarioError) as info:
        check_scenario(scenario)
    message = str(info.value)
    for key in ("workload.sessions.turns", "workload.sessions.system_prompt_tokens",
                "workload.prompt_tokens", "workload.output_tokens", "max_seq_len of 400"):
        assert key in message


def test_a_good_sessions_scenario_passes_every_check(tmp_path):
    scenario = scenarios.load(write(tmp_path, TOML))
    check_scenario(scenario)
    assert scenario.base.workload.sessions.turns == Uniform(2, 8)


def test_a_warm_up_past_every_conversation_is_said_not_silently_empty(capsys):
    """Conversations are sent as earlier turns end, so only the run knows that each was sent
    within the warm-up: it says so once, and the report lists it."""
    from sim import notes

    notes.forget()
    recorder = run_config(config(warmup_s=10_000.0))
    assert len(recorder.notes) == 1 and "every request was sent within the 10000 s warm-up" \
        in recorder.notes[0]
    assert capsys.readouterr().err.count("none is counted") == 1
    last_s = max(run_config(config()).request_columns()["arrival_s"])
    assert not run_config(config(warmup_s=last_s / 2)).notes  # some counted: nothing to say
