"""Steps without mixed chunks (`scheduler.enable_mixed_chunk = false`, SGLang's default): a step
runs the prefills that can run, the chunks under way first, then the queue's, alone and with the
whole token budget; the running sequences decode only in a step that has none. Under the
default (vLLM's and TensorRT-LLM's way) the decodes run beside them. Fast-forwarded runs under it
are the step-by-step run's (tests/test_decode_runs.py, `CASES` of tests/helpers/runs.py); on
random servers every request ends and every block comes back (tests/test_sim_loop.py)."""

from __future__ import annotations

import numpy as np
import pytest

import scenarios
from engine.block_manager import BlockManager
from engine.executor import NumpyExecutor
from engine.llm_engine import LLMEngine
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import GREEDY, Sequence
from engine.sequences import make_request
from engine.swap import SwapSpace
from helpers.cluster import SESSIONS, load_config, run_cluster_of
from helpers.runs import LINEAR, drive, records
from reports.section_text import scheduler_text
from scenarios import ScenarioError
from sim.build import build_scheduler
from sim.fastpath import SteadyScheduler
from sim.runner import run_config


def scheduler(mixed: bool, blocks: int = 64, budget: int = 16, chunked: bool = True,
              **config) -> Scheduler:
    return Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=budget,
                                     chunked_prefill=chunked, enable_mixed_chunk=mixed, **config),
                     BlockManager(blocks, 4))


def steps(s: Scheduler, arrivals: dict[int, Sequence], limit: int = 200) -> list[tuple]:
    """Run `s`, adding `arrivals[k]` before step k; each step as (prefills as (id, tokens),
    decoding ids)."""
    return drive(s, arrivals, lambda plan: (
        tuple((seq.request_id, n) for seq, n in plan.prefills),
        tuple(seq.request_id for seq in plan.decodes)), limit)


def test_a_step_with_a_prefill_decodes_nothing_and_decodes_resume_after_it():
    arrivals = {0: Sequence("a", 8, 6), 2: Sequence("b", 8, 3)}
    unmixed = steps(scheduler(False), dict(arrivals))
    assert unmixed[:6] == [
        ((("a", 8),), ()),  # a's prefill (its first token)
        ((), ("a",)),
        ((("b", 8),), ()),  # b arrives: its prefill runs alone, a waits a step
        ((), ("a", "b")),
        ((), ("a", "b")),
        ((), ("a",)),  # b emitted its 3 tokens
    ]
    arrivals = {0: Sequence("a", 8, 6), 2: Sequence("b", 8, 3)}
    mixed = steps(scheduler(True), arrivals)
    assert mixed[2] == ((("b", 8),), ("a",))  # vLLM's way: a decodes beside it
    assert len(unmixed) == len(mixed) + 1  # the step a waited


def test_a_long_prompts_chunks_run_back_to_back_while_the_decodes_wait():
    """The chunks under way are planned first, each step up to the whole budget (16)."""
    arrivals = {0: Sequence("a", 4, 10), 2: Sequence("b", 40, 2)}
    run = steps(scheduler(False), arrivals)
    assert run[2:6] == [((("b", 16),), ()), ((("b", 16),), ()), ((("b", 8),), ()),
                        ((), ("a", "b"))]
    mixed = steps(scheduler(True), {0: Sequence("a", 4, 10), 2: Sequence("b", 40, 2)})
    assert mixed[2:5] == [((("b", 15),), ("a",)), ((("b", 15),), ("a",)),
                          ((("b", 10),), ("a",))]  # 16 less a's decode


def test_without_chunked_prefill_a_prompt_longer_than_the_budget_never_runs_but_is_refused():
    s = scheduler(False, chunked=False)
    assert not s.add(Sequence("long", 20, 2))
    assert "max_num_batched_tokens" in s.rejection_reason(Sequence("long", 20, 2))


def test_running_sequences_decode_while_the_queue_head_does_not_fit():
    """Admission fails for want of blocks: the step decodes, as a step with no prefill does,
    and the queue's head runs once a finish frees blocks."""
    s = scheduler(False, blocks=6, budget=16)  # 24 slots
    run = steps(s, {0: Sequence("a", 12, 5), 1: Sequence("b", 16, 2)})
    assert run[1] == ((), ("a",))  # b's 16 tokens need 4 blocks; a holds 3 of 6
    prefill_of_b = next(i for i, (prefills, _) in enumerate(run) if prefills == (("b", 16),))
    assert run[prefill_of_b][1] == () and run[prefill_of_b - 1] == ((), ("a",))
    assert s.block_manager.num_used == 0 and s.num_preemptions == 0


@pytest.mark.parametrize("blocks", [9, 12, 40])
def test_greedy_tokens_are_the_same_whether_decodes_wait_or_not(tiny_config, tiny_params,
                                                                 blocks):
    """The real engine: when a token is computed may change, never what it is, under block
    pressure (preemptions) or none."""
    rng = np.random.default_rng(3)
    lengths = [(1, 6), (17, 9), (5, 14), (29, 4), (9, 11), (3, 1), (12, 8)]
    requests = [make_request(f"r{i}", rng.integers(0, tiny_config.vocab_size, size=p).tolist(),
                             n, {"greedy": True}) for i, (p, n) in enumerate(lengths)]
    outputs, preemptions = {}, {}
    for mixed in (True, False):
        bm = BlockManager(blocks, 4)
        s = Scheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=8,
                                      chunked_prefill=True, enable_mixed_chunk=mixed,
                                      max_seq_len=256), bm)
        seqs = [Sequence(r["request_id"], len(r["prompt_token_ids"]), r["max_new_tokens"],
                         prompt_token_ids=r["prompt_token_ids"], sampling=GREEDY)
                for r in requests]
        engine = LLMEngine(s, NumpyExecutor(tiny_params, bm, rng=np.random.default_rng(0)))
        for seq in seqs:
            assert s.add(seq)
        mixed_steps = 0
        for _ in range(2000):  # a scheduler that starves its decodes fails here, not hangs
            if not engine.has_unfinished():
                break
            plan = engine.step().plan
            mixed_steps += bool(plan.prefills and plan.decodes)
        assert not engine.has_unfinished() and bm.num_used == 0
        assert (mixed_steps > 0) == mixed
        outputs[mixed] = [seq.output_token_ids for seq in seqs]
        preemptions[mixed] = s.num_preemptions
    assert outputs[True] == outputs[False]
    if blocks == 9:  # meant to preempt, either way
        assert preemptions[True] > 0 and preemptions[False] > 0
    if blocks == 40:
        assert preemptions[True] == preemptions[False] == 0


WORKLOAD = """
[workload]
num_requests = 80
arrival = { process = "poisson", rate = 30.0 }
prompt_tokens = { dist = "uniform", low = 20, high = 200 }
output_tokens = { dist = "uniform", low = 20, high = 120 }
"""


def load(tmp_path, scheduler_keys: str, name: str = "case.toml"):
    path = tmp_path / name
    path.write_text("[engine]\nmax_num_batched_tokens = 128\nnum_kv_blocks = 400\n"
                    f"[scheduler]\nchunked_prefill = true\n{scheduler_keys}\n"
                    + LINEAR + WORKLOAD)
    return scenarios.load(path).base


def test_a_simulation_without_mixed_chunks_stalls_decodes_and_speeds_prefills(tmp_path):
    """Against the same server with mixed chunks: every step has prefills or decodes, never
    both; the longest gap between two tokens of a request grows (a decode waits for the
    prefills), and a request's first token comes no later on average (its prefill's step
    carries no decode)."""
    runs = {mixed: run_config(load(tmp_path, f"enable_mixed_chunk = {str(mixed).lower()}"))
            for mixed in (True, False)}
    for mixed, rec in runs.items():
        cols = rec.step_columns()
        prefills, decodes = (np.asarray(cols[name]) > 0
                             for name in ("num_prefill_seqs", "num_decode_seqs"))
        assert (prefills & decodes).any() == mixed
        assert set(rec.statuses) == {"finished"}
    ttft = {mixed: np.mean(np.asarray(rec.request_columns()["first_token_s"])
                           - np.asarray(rec.request_columns()["arrival_s"]))
            for mixed, rec in runs.items()}
    assert ttft[False] < ttft[True]
    assert max(runs[False].itl_gaps) > max(runs[True].itl_gaps)


def test_the_simulator_counts_decodes_step_by_step_without_mixed_chunks(tmp_path):
    """Steady decoders are counted in bulk only where every step decodes them."""
    config = load(tmp_path, "enable_mixed_chunk = false")
    assert type(build_scheduler(config, 256, steady=True)) is Scheduler
    assert type(build_scheduler(load(tmp_path, "", "mixed.toml"), 256,
                                steady=True)) is SteadyScheduler


@pytest.mark.parametrize("keys, words", [
    ("enable_mixed_chunk = 1", "scheduler.enable_mixed_chunk"),
    ('enable_mixed_chunk = false\npolicy = "static"', "static batching never mixes"),
    ("enable_mixed_chunk = false\nbatch_wait_timeout_iters = 4\n"
     "batch_wait_max_tokens_ratio = 0.5", "never share a step with decodes"),
])
def test_a_wrong_or_contradicting_setting_is_refused_in_one_line(tmp_path, keys, words):
    with pytest.raises(ScenarioError, match=words) as info:
        load(tmp_path, keys)
    assert "\n" not in str(info.value)


def test_the_report_says_that_prefills_run_alone(tmp_path):
    assert "prefills run alone" in scheduler_text(load(tmp_path, "enable_mixed_chunk = false")
                                                  .scheduler)
    assert "alone" not in scheduler_text(load(tmp_path, "", "mixed.toml").scheduler)


def never_mixed(recorder) -> bool:
    cols = recorder.step_columns()
    prefills, decodes = (np.asarray(cols[name]) > 0
                         for name in ("num_prefill_seqs", "num_decode_seqs"))
    return not (prefills & decodes).any()


def test_swapped_out_sequences_come_back_in_a_step_of_decodes(tmp_path):
    """A swapped-out sequence whose KV is whole decodes as it is readmitted: in a step of
    decodes, never beside a prefill, and the fast-forwarded run is the step-by-step one."""
    path = tmp_path / "swap.toml"
    path.write_text("[engine]\nmax_num_batched_tokens = 128\nnum_kv_blocks = 48\n"
                    "swap_blocks = 64\n[scheduler]\nchunked_prefill = true\n"
                    "preemption = \"swap\"\nenable_mixed_chunk = false\n" + LINEAR + WORKLOAD)
    config = scenarios.load(path).base
    fast, slow = run_config(config), run_config(config, fast_forward=False)
    assert records(fast) == records(slow)
    assert sum(fast.step_columns()["preemptions"]) > 0 and never_mixed(fast)
    assert set(fast.statuses) == {"finished"}


def test_a_decode_engine_without_mixed_chunks_takes_in_every_transferred_request(tmp_path):
    """Prefill/decode disaggregation: a transferred request's KV is reserved and readmitted
    in a step of decodes; every request finishes, fast-forwarded or not."""
    text = ("[cluster]\nprefill_replicas = 1\ndecode_replicas = 2\n[engine]\nnum_kv_blocks = 64\n"
            "[scheduler]\nenable_mixed_chunk = false\n" + SESSIONS)
    config = load_config(tmp_path, text)
    fast = run_cluster_of(config)
    slow = run_cluster_of(config, fast_forward=False)
    mixed = run_cluster_of(config.updated({"scheduler.enable_mixed_chunk": True}))
    cols = fast[1].request_columns()
    assert len(cols["request_id"]) == fast[2] and records(fast[1]) == records(slow[1])
    # those too long for a replica are refused on arrival either way; the rest all finish
    steps_ = fast[1].step_columns()
    prefills, decodes, running = (np.asarray(steps_[name]) for name in (
        "num_prefill_seqs", "num_decode_seqs", "num_running"))
    assert never_mixed(fast[1]) and (decodes[prefills == 0] == running[prefills == 0]).all()
    mixed_cols = mixed[1].request_columns()
    statuses = dict(zip(mixed_cols["request_id"], mixed_cols["status"]))
    assert dict(zip(cols["request_id"], cols["status"])) == statuses
    assert set(statuses.values()) == {"finished", "rejected"}


def test_partial_prefills_that_hold_every_block_go_on_by_preempting():
    """A chunk cut to the free blocks never leaves one token either; and where the prefills
    under way hold every block, none decoding to free one, the first goes on as a mixed step's
    chunk does, preempting from the end (SGLang, which reserves a request's tokens when it
    admits it, never gets there)."""
    s = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64,
                                  chunked_prefill=True, enable_mixed_chunk=False),
                  BlockManager(9, 16))
    assert s.add(Sequence("A", 129, 1)) and s.add(Sequence("B", 50, 1))
    run = []
    for _ in range(20):
        if not s.has_unfinished():
            break
        plan = s.schedule()
        run.append(([(seq.request_id, n) for seq, n in plan.prefills],
                    [seq.request_id for seq in plan.preempted]))
        s.postprocess(plan)
    assert run == [([("A", 64)], []),
                   ([("A", 63), ("B", 1)], []),  # 63: not 64, which would leave A one token
                   ([("B", 15)], []),  # A skipped: 1 free slot would leave it one token
                   ([("A", 2)], ["B"]),  # nothing else can run: A preempts B
                   ([("B", 50)], [])]
    assert not s.has_unfinished() and s.block_manager.num_used == 0


def test_a_prefill_is_never_cut_one_token_short_of_its_first_token():
    """SGLang goes on with a chunked request's last token as a prefill; a chunk leaving one
    token to a decode would hold the first token back for a step without prefills."""
    arrivals = {0: Sequence("a", 17, 2)} | {k: Sequence(f"b{k}", 16, 2) for k in range(1, 8)}
    run = steps(scheduler(False), arrivals)
    assert run[0] == ((("a", 15),), ())  # not 16: its last token would wait for a decode
    assert run[1] == ((("a", 2), ("b1", 14)), ())  # a's first token; b1 leaves 2 in turn
    mixed = steps(scheduler(True), {0: Sequence("a", 17, 2)})
    assert mixed[:2] == [((("a", 16),), ()), ((), ("a",))]  # vLLM's way: a decode computes it


def test_without_mixed_chunks_a_step_of_decodes_decodes_every_running_sequence():
    """Swap preemption: a sequence swapped back in joins a step of decodes, and every running
    sequence whose prefill is done decodes in it; a step with a prefill decodes none."""
    bm, swap = BlockManager(6, 4), SwapSpace(16)
    s = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=16,
                                  chunked_prefill=True, enable_mixed_chunk=False,
                                  preemption="swap"), bm, swap)
    for name, prompt, out in (("a", 4, 4), ("b", 7, 5), ("c", 8, 8)):
        assert s.add(Sequence(name, prompt, out))
    swapped_in = 0
    for _ in range(200):
        if not s.has_unfinished():
            break
        plan = s.schedule()
        if plan.prefills:
            assert not plan.decodes
        elif plan.decodes:
            running = {seq.request_id for seq in s.running if not seq.is_prefilling}
            assert {seq.request_id for seq in plan.decodes} == running
        if plan.preempted and plan.decodes:  # the blocks just freed are not a newcomer's
            assert not plan.swapped_in
        swapped_in += len(plan.swapped_in)
        s.postprocess(plan)
    assert not s.has_unfinished() and bm.num_used == 0 and swapped_in > 0


@pytest.mark.parametrize("mixed", [True, False])
def test_data_parallel_ranks_share_the_pools_budget_a_chunk_one_ranks(mixed):
    """Two ranks of 16 tokens a step: two 16-token prompts prefill in one step, a 40-token one
    in chunks of at most 16; and a chunk under way leaves the rest of the budget to the
    queue."""
    s = scheduler(mixed, data_parallel_size=2)
    run = steps(s, {0: Sequence("a", 16, 2), 1: Sequence("x", 16, 2)})
    assert run[0] == ((("a", 16),), ())
    s = scheduler(mixed, blocks=128, data_parallel_size=2)
    for name, prompt in (("a", 16), ("b", 16), ("c", 40)):
        assert s.add(Sequence(name, prompt, 2))
    plan = s.schedule()
    assert [(seq.request_id, n) for seq, n in plan.prefills] == [("a", 16), ("b", 16)]
    s.postprocess(plan)
    plan = s.schedule()
    assert ("c", 16) in [(seq.request_id, n) for seq, n in plan.prefills]
    s = scheduler(mixed, blocks=64)
    assert s.add(Sequence("long", 26, 2))
    s.postprocess(s.schedule())  # its first 16 tokens
    assert s.add(Sequence("short", 6, 2))
    plan = s.schedule()
    assert [(seq.request_id, n) for seq, n in plan.prefills] == [("long", 10), ("short", 6)]


def test_a_decode_engine_readmits_transferred_kv_in_a_step_of_decodes_not_a_prefills():
    """Disaggregation: KV that came in from the prefill engine waits out a step that prefills
    (a recomputation, here a request queued after it), then joins a step of decodes."""
    prefill = Scheduler(SchedulerConfig(max_seq_len=64), BlockManager(32, 4))
    prefill.prefill_only = True
    decode = scheduler(False, blocks=32)
    running, moved = Sequence("running", 8, 20), Sequence("moved", 8, 4)
    assert decode.add(running)
    decode.postprocess(decode.schedule())  # running's prefill
    prefill.add(moved)
    prefill.postprocess(prefill.schedule())  # prefilled and handed off
    decode.add_transferred(moved)
    plan = decode.schedule()
    assert plan.kv_requested == [moved] and [s.request_id for s in plan.decodes] == ["running"]
    decode.postprocess(plan)
    decode.kv_landed(moved)
    assert decode.add(Sequence("recomputed", 6, 2))
    plan = decode.schedule()  # the prefill runs alone; the KV that came in waits
    assert [(s.request_id, n) for s, n in plan.prefills] == [("recomputed", 6)]
    assert not plan.decodes and not plan.swapped_in
    decode.postprocess(plan)
    plan = decode.schedule()
    assert [s.request_id for s in plan.swapped_in] == ["moved"]
    assert {s.request_id for s in plan.decodes} == {"running", "recomputed", "moved"}


def test_a_step_of_decodes_that_preempted_readmits_nothing():
    """As in a mixed step: the blocks just freed are the victim's to win back, so KV that came
    in waits for the next step even where it holds its blocks already."""
    prefill = Scheduler(SchedulerConfig(max_seq_len=64), BlockManager(32, 4))
    prefill.prefill_only = True
    decode = scheduler(False, blocks=8)
    for name in ("r1", "r2"):
        assert decode.add(Sequence(name, 8, 6))
    decode.postprocess(decode.schedule())  # both prefills: 4 of 8 blocks
    moved = Sequence("moved", 4, 4)
    prefill.add(moved)
    prefill.postprocess(prefill.schedule())
    decode.add_transferred(moved)
    plan = decode.schedule()  # r1 and r2 take a block each, moved's 2 are reserved: none free
    assert plan.kv_requested == [moved]
    decode.postprocess(plan)
    for _ in range(3):  # rows 9 to 11 fit their third blocks
        decode.postprocess(decode.schedule())
    decode.kv_landed(moved)
    plan = decode.schedule()  # row 12: r1 needs a block, r2 is preempted for it
    assert [s.request_id for s in plan.preempted] == ["r2"]
    assert [s.request_id for s in plan.decodes] == ["r1"] and not plan.swapped_in
    decode.postprocess(plan)  # r1's last token
    plan = decode.schedule()  # r2's recomputation runs alone
    assert [(s.request_id, n) for s, n in plan.prefills] == [("r2", 13)]
    assert not plan.swapped_in
    decode.postprocess(plan)
    plan = decode.schedule()
    assert [s.request_id for s in plan.swapped_in] == ["moved"]
    assert [s.request_id for s in plan.decodes] == ["moved"]  # r2's recomputation was its last


def test_a_budget_of_one_token_a_step_still_runs_every_prompt():
    """At `max_num_batched_tokens = 1` a prompt goes a token a step, its last one too (a
    decode computes it where no other budget is left): nothing waits forever."""
    s = Scheduler(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=1, chunked_prefill=True,
                                  enable_mixed_chunk=False), BlockManager(8, 4))
    run = steps(s, {0: Sequence("a", 3, 2), 1: Sequence("b", 2, 1)})
    assert run[:4] == [((("a", 1),), ()), ((("a", 1),), ()), ((), ("a",)), ((), ("a",))]
    assert ((("b", 1),), ()) in run and not s.has_unfinished()
