"""SGLang's capacity policy (`capacity_scheduler_policy = "new_token_ratio"`,
engine/new_token_ratio.py): a request is admitted only where the free tokens hold it beside a
share of the running requests' future tokens (the new token ratio: 0.7, falling by a 600th of
the way to 0.14 of that in each step that only decodes, set again by a preemption, reset when
the engine idles); a request that ignores EOS, without prefix caching, only where every running
request and it can finish, shortest first. Which request a step short of blocks takes back:
tests/test_sglang_retraction.py. Fast-forwarded runs under it are the step-by-step run's (here
and tests/test_decode_runs.py); on random servers every request ends and every block comes back
(tests/test_sim_loop.py)."""

from __future__ import annotations

import pytest

import scenarios
from engine.block_manager import BlockManager
from engine.new_token_ratio import DECAY, INIT_RATIO, MIN_RATIO, NewTokenRatio, ReservedTokens
from engine.scheduler import Scheduler, SchedulerConfig
from engine.sequence import Sequence
from helpers.runs import LINEAR, config_of, drain, preemptions, records, scheduler
from scenarios import ScenarioError
from sim.runner import run_config

SGLANG = "new_token_ratio"
WORKLOAD = ('[workload]\nnum_requests = 1\narrival = { process = "burst" }\n'
            'prompt_tokens = { dist = "fixed", value = 8 }\n'
            'output_tokens = { dist = "fixed", value = 8 }\n')


def test_the_ratio_falls_to_its_floor_in_600_steps_of_decodes():
    ratio = NewTokenRatio()
    assert ratio.current == INIT_RATIO == 0.7 and MIN_RATIO == pytest.approx(0.098)
    ratio.decay()
    assert ratio.current == pytest.approx(0.7 - 0.602 / 600)
    ratio.decay(598)
    assert ratio.current == pytest.approx(0.098 + 0.602 / 600)
    ratio.decay(2)
    assert ratio.current == MIN_RATIO
    ratio.reset()
    assert ratio.current == INIT_RATIO


def test_many_decays_at_once_give_the_ratio_as_many_one_by_one_give():
    """A fast-forwarded run of decode steps decays once for all of them: bit for bit."""
    at_once, one_by_one = NewTokenRatio(), NewTokenRatio()
    at_once.decay(137)
    for _ in range(137):
        one_by_one.decay()
    assert at_once.current == one_by_one.current


def test_a_preemption_sets_the_share_the_running_have_emitted_plus_20_tokens_each():
    running = [Sequence("a", 8, 100), Sequence("b", 8, 300)]
    running[0].num_output_tokens, running[1].num_output_tokens = 30, 10
    ratio = NewTokenRatio()
    ratio.decay(50)
    ratio.after_preemption(running)
    assert ratio.current == (30 + 10 + 2 * 20) / (100 + 300 + 1)
    ratio.decay()  # it decays from there
    assert ratio.current == pytest.approx(80 / 401 - DECAY)
    running[0].num_output_tokens = 95
    ratio.after_preemption(running)  # at most 1
    assert ratio.current == min(1.0, (95 + 10 + 40) / 401)
    ratio.after_preemption(running[:0] + [Sequence("c", 4, 10)])
    assert ratio.current == 1.0  # 20 / 11
    long = [Sequence("d", 8, 2000), Sequence("e", 8, 2000)]
    long[0].num_output_tokens, long[1].num_output_tokens = 60, 40
    ratio.after_preemption(long)
    assert ratio.current == 140 / 4001  # below the floor until a step decays it
    ratio.decay()
    assert ratio.current == MIN_RATIO


def reserved(blocks: int, running=(), ratio=0.7, caching=True):
    bm = BlockManager(blocks, 4)
    for seq in running:
        bm.ensure_capacity(seq.seq_id, seq.num_computed_tokens)
    return ReservedTokens(bm, list(running), [], ratio, caching)


def decoding(name: str, seq_id: int, prompt: int, max_new: int, emitted: int) -> Sequence:
    seq = Sequence(name, prompt, max_new, seq_id=seq_id, ignore_eos=False)
    seq.num_output_tokens = emitted
    seq.num_computed_tokens = prompt + emitted - 1
    return seq


def test_a_request_fits_beside_the_ratios_share_of_the_running_ones_future_tokens():
    """20 blocks of 4 (80 tokens); a decoding request of 8 + 11 tokens holds 5 blocks and may
    emit 29 more. A request of 8 prompt tokens and 20 outputs needs 8 + 20 + a page = 32 tokens
    below 60 - 29 x ratio: at 0.7 (20.3 reserved) 39.7 are left, so it fits; at 0.98, 31.6,
    so it waits."""
    def fits(ratio):
        a = decoding("a", 0, 8, 40, 11)
        return reserved(20, [a], ratio=ratio).take(Sequence("b", 8, 20, seq_id=1,
                                                            ignore_eos=False), 8, 8)
    assert fits(0.7) and not fits(0.98)
    assert fits(0.96)  # 60 - 27.84 = 32.16 > 32


def test_the_blocks_a_cached_prefix_would_use_are_not_counted_free():
    a = decoding("a", 0, 8, 40, 11)
    b = Sequence("b", 8, 20, seq_id=1, ignore_eos=False)
    assert reserved(20, [a], ratio=0.96).take(b, 8, 8)
    assert not reserved(20, [a], ratio=0.96).take(b, 8, 8, pinned=1)  # 4 tokens fewer


def test_a_prefill_continuing_in_the_step_is_reserved_a_page_and_its_last_chunk_all_it_emits():
    """As SGLang's round admits its chunked request again: a page beyond the chunk's blocks, and
    with the chunk that completes its prompt every token it may emit too (20), not the ratio's
    share. 72 tokens are free; b needs 8 prompt tokens, its outputs and a page below what is
    left."""
    def fits(chunk: int, outputs: int) -> bool:
        bm = BlockManager(20, 4)
        a = Sequence("a", 8, 20, seq_id=0, ignore_eos=False)
        bm.ensure_capacity(a.seq_id, 8)  # its chunk planned, not yet counted
        b = Sequence("b", 8, outputs, seq_id=1, ignore_eos=False)
        chunks = [(a, chunk)] if chunk else []
        return ReservedTokens(bm, [a], chunks, 0.7, True).take(b, 8, 8)
    assert fits(chunk=0, outputs=56)  # not continuing in this step: 68 < 72
    assert not fits(chunk=4, outputs=56)  # a page: 68 < 72 - 4 fails
    assert not fits(chunk=8, outputs=36)  # its last chunk: 48 < 72 - 4 - 20 fails
    assert fits(chunk=8, outputs=35)


def test_a_continuing_chunks_page_is_not_free_for_a_request_that_ignores_eos():
    """Without prefix caching: a (8 prompt tokens, 20 outputs, both ignoring EOS) continues a
    chunk; of the 72 tokens free a page is its, and b's 8 + a page leave 56: a's 20 and then
    b's outputs (a's 8 freed) must leave a token to spare, so b may have 62 outputs, not 63."""
    def fits(outputs: int) -> bool:
        bm = BlockManager(20, 4)
        a = Sequence("a", 8, 20, seq_id=0)
        bm.ensure_capacity(a.seq_id, 8)
        b = Sequence("b", 8, outputs, seq_id=1)
        return ReservedTokens(bm, [a], [(a, 4)], 0.7, False).take(b, 8, 8)
    assert fits(62) and not fits(63)


def test_a_request_admitted_in_a_round_is_reserved_all_its_tokens_the_next_round_a_share():
    """40 blocks of 4: a (8 prompt tokens, up to 120 outputs, may stop at EOS) is admitted,
    and reserved 4 + 120 of the 152 tokens left, so b (8 + 20 + 4) waits; in the next step a
    decodes and only 0.7 x 119 of it is reserved, and b comes in (vLLM's way takes both at
    once)."""
    steps = {}
    for policy in ("max_utilization", SGLANG):
        s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=policy,
                                      max_seq_len=512), BlockManager(40, 4))
        s.add(Sequence("a", 8, 120, ignore_eos=False))
        s.add(Sequence("b", 8, 20, ignore_eos=False))
        steps[policy] = drain(s)[:2]
    assert steps == {"max_utilization": [["a", "b"], []], SGLANG: [["a"], ["b"]]}


def test_a_request_ignoring_eos_waits_until_every_running_one_and_it_can_finish():
    """16 blocks of 4 (64 tokens), requests of 8 prompt tokens and 13 outputs that ignore EOS:
    a and b come in together, c waits until after 8 steps a and b have 5 tokens to go each:
    32 tokens free, less c's 8 + a page, hold 3 x 5 with 3 to spare, then b's 5 after a ends.
    A step earlier they had 6 to go: 20 - 18 <= 3. vLLM's way takes all three at once."""
    runs = {}
    for policy in ("max_utilization", SGLANG):
        s = scheduler(policy, blocks=16, max_num_batched_tokens=64)
        for name in "abc":
            s.add(Sequence(name, 8, 13))
        steps = drain(s)
        runs[policy] = ([step for step in steps if step][:2], steps.index(["c"]) + 1
                        if ["c"] in steps else None, s.num_preemptions)
    assert runs[SGLANG] == ([["a", "b"], ["c"]], 9, 0)
    assert runs["max_utilization"][0][0] == ["a", "b", "c"]


def test_the_worked_example_of_preemption_md_runs_as_under_no_evict():
    """docs/scheduler/preemption.md: a, b, c (4 prompt tokens, 6 outputs) in 4 blocks of 4; b
    waits for a to finish (a page and a's 6 outputs reserved of the 12 tokens left, b's 4 and a
    page do not fit in the 2 that remain), c for b."""
    s = scheduler(SGLANG, blocks=4)
    for name in "abc":
        s.add(Sequence(name, 4, 6))
    steps = drain(s)
    assert [i for i, step in enumerate(steps) if step] == [0, 6, 12]
    assert len(steps) == 18 and s.num_preemptions == 0


def test_an_idle_engine_runs_its_head_where_its_first_chunk_fits():
    """8 + 13 tokens that ignore EOS in 6 blocks of 4: 24 - 12 - 13 leaves no token to spare,
    so SGLang's rule never admits it; alone, it runs (it fits: 20 rows stored, 5 blocks)."""
    s = scheduler(SGLANG, blocks=6)
    s.add(Sequence("a", 8, 13))
    assert drain(s)[0] == ["a"]


def test_the_ratio_falls_in_steps_that_only_decode_and_starts_over_when_the_engine_idles():
    s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=SGLANG,
                                  max_num_batched_tokens=64, chunked_prefill=True),
                  BlockManager(40, 4))
    s.add(Sequence("a", 8, 5))
    ratios = []
    for _ in range(5):
        plan = s.schedule()
        ratios.append((bool(plan.prefills), s.new_token_ratio.decays))
        s.postprocess(plan)
    assert ratios == [(True, 0), (False, 1), (False, 2), (False, 3), (False, 4)]
    assert not s.has_unfinished() and s.new_token_ratio.decays == 0  # reset as a finished
    assert s.new_token_ratio.current == INIT_RATIO


def test_a_prefill_only_engine_idles_once_it_has_handed_off_its_last_request():
    s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=SGLANG),
                  BlockManager(40, 4))
    s.prefill_only = True
    s.add(Sequence("a", 8, 50, ignore_eos=False))
    s.new_token_ratio.start = 0.05  # as after a preemption
    plan = s.schedule()
    s.postprocess(plan)
    assert plan.handed_off and not s.has_unfinished()
    assert s.new_token_ratio.current == INIT_RATIO


def test_the_ratio_goes_on_where_the_running_list_empties_while_requests_wait():
    """100 blocks of 4: a (4 + up to 300 tokens, may stop early) decodes 299 steps alone, the
    ratio falling to 0.7 - 299 x 0.602 / 600 = 0.40; b (4 + 390) fits only an empty cache and
    waits for it, c (4 + 150) behind it. When a ends, the engine is not idle (they wait): b
    comes in on the decayed ratio, and in the next step c, 4 + 150 + a page below 392 - 0.40 x
    389; on a ratio started over (0.7 x 389 = 272) c would wait for b to end."""
    s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=SGLANG,
                                  max_num_batched_tokens=512, max_seq_len=512),
                  BlockManager(100, 4))
    s.add(Sequence("a", 4, 300, ignore_eos=False))
    s.postprocess(s.schedule())
    s.add(Sequence("b", 4, 390, ignore_eos=False))
    s.add(Sequence("c", 4, 150, ignore_eos=False))
    steps = drain(s)
    assert steps.index(["b"]) == 299 and steps.index(["c"]) == 300


def test_after_a_long_decode_the_ratio_lets_in_what_a_preemption_then_takes_back():
    """a (4 prompt tokens, up to 700 outputs) decodes alone for 600 steps: the ratio falls to
    its floor. Requests that may stop early then come in on a tenth of their future tokens,
    until the cache runs short and a step takes back, in SGLang's order, as many as it must:
    that step sets the ratio from the running ones' outputs, plus 20 tokens each, over their
    max_new_tokens."""
    s = Scheduler(SchedulerConfig(max_num_seqs=8, capacity_scheduler_policy=SGLANG,
                                  max_num_batched_tokens=256, max_seq_len=1024),
                  BlockManager(200, 4))
    s.add(Sequence("a", 4, 700, ignore_eos=False))
    for _ in range(601):
        s.postprocess(s.schedule())
    assert s.new_token_ratio.current == MIN_RATIO
    for name in "bcd":
        s.add(Sequence(name, 4, 150, ignore_eos=False))
    checked = 0
    while s.has_unfinished():
        # SGLang takes back the decoding request with the fewest outputs, of those the longest
        # prompt, of those the last in running order
        order = sorted(((seq.num_output_tokens, -seq.prompt_len, -i), seq)
                       for i, seq in enumerate(s.running) if not seq.is_prefilling)
        plan = s.schedule()
        assert plan.preempted == [seq for _, seq in order[:len(plan.preempted)]]
        if plan.preempted:
            emitted = sum(seq.num_output_tokens for seq in s.running)
            most = sum(seq.max_new_tokens for seq in s.running)
            assert s.new_token_ratio.current == min(
                1.0, (emitted + 20 * len(s.running)) / (most + 1))
            checked += 1
        s.postprocess(plan)
    assert checked and s.num_preemptions


def pressed(tmp_path, policy: str):
    """60 requests of up to 400 prompt and 200 output tokens, 20 a second, in 32 blocks."""
    return config_of(tmp_path, "[engine]\nnum_kv_blocks = 32\n" + LINEAR, rate=20.0).updated(
        {"scheduler.capacity_scheduler_policy": policy, "model.max_seq_len": 1024,
         "workload.output_tokens": {"dist": "uniform", "low": 20, "high": 200}})


def test_under_kv_pressure_sglangs_admission_preempts_far_less_than_vllms(tmp_path):
    counts = {}
    for policy in ("max_utilization", SGLANG):
        recorder = run_config(pressed(tmp_path, policy))
        assert recorder.statuses.count("finished") == 60
        counts[policy] = preemptions(recorder)
    assert 0 < counts[SGLANG] < counts["max_utilization"] / 4


def test_fast_forward_under_sglangs_admission_is_the_step_by_step_run(tmp_path):
    """Runs of decode steps are taken only while nothing waits (the ratio falls in each), and
    decay the ratio once for all their steps; preemptions included."""
    config = pressed(tmp_path, SGLANG)
    fast = run_config(config)
    assert records(fast) == records(run_config(config, fast_forward=False))
    assert preemptions(fast) > 0


@pytest.mark.parametrize("text, message", [
    ('policy = "static"\n', "SGLang's admission is continuous batching's"),
    ('preemption = "swap"\n[engine]\nswap_blocks = 8\n',
     "SGLang takes requests back by recompute"),
    ('[cluster]\nprefill_replicas = 1\ndecode_replicas = 1\n',
     "its prefill and decode servers reserve otherwise"),
    ('batch_wait_timeout_iters = 20\n', "batch waiting is TensorRT-LLM's"),
])
def test_what_sglangs_admission_is_not_modelled_with_is_refused_in_one_line(tmp_path, text,
                                                                           message):
    path = tmp_path / "s.toml"
    path.write_text(f'[scheduler]\ncapacity_scheduler_policy = "{SGLANG}"\n' + text
                    + WORKLOAD)
    with pytest.raises(ScenarioError) as info:
        scenarios.load(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "scheduler.capacity_scheduler_policy" in str(info.value)


def test_data_parallel_ranks_are_refused_where_sglang_reserves_each_apart():
    with pytest.raises(ValueError, match="reserves each attention data-parallel rank's cache"):
        SchedulerConfig(capacity_scheduler_policy=SGLANG, data_parallel_size=2)


def test_the_report_names_sglangs_admission():
    from reports.section_text import scheduler_text

    config = SchedulerConfig(capacity_scheduler_policy=SGLANG)
    assert scheduler_text(config).endswith(
        "first-come-first-served queue; SGLang's admission (a request is admitted only where "
        "the KV cache holds it beside a decaying share of the running requests' future tokens)")
