"""Prefill/decode disaggregation (sim/cluster/disaggregation.py): the KV transfer's time by
hand, TTFT at the prefill replica and the first inter-token gap across the transfer, one link
per prefill replica taking transfers in turn, every request accounted for with no KV block
left held, fast forward equal to step by step, the same records from the same seed, and
one-line errors for bad keys."""

from __future__ import annotations

import numpy as np
import pytest

import reports
import scenarios
import sim
from helpers.cluster import SESSIONS as CLUSTER_SESSIONS, load_config, run_cluster_of
from helpers.runs import records
from scenarios import ScenarioError
from sim.runner import run_config

PROMPT, OUTPUT = 100, 5
TINY_WORKLOAD = f"""
[workload]
num_requests = N
arrival = {{ process = "closed_loop", concurrency = N }}
prompt_tokens = {{ dist = "fixed", value = {PROMPT} }}
output_tokens = {{ dist = "fixed", value = {OUTPUT} }}
"""
TINY_CLUSTER = """
[cluster]
prefill_replicas = 1
decode_replicas = 1
kv_transfer_gbps = 1.0
kv_transfer_latency_s = 0.5
"""
OPEN_WORKLOAD = """
[workload]
num_requests = 150
arrival = { process = "gamma", rate = 16.0, cv = 3.0 }
prompt_tokens = { dist = "lognormal", median = 128, sigma = 0.6, min = 4, max = 1024 }
output_tokens = { dist = "uniform", low = 1, high = 256 }
"""
SESSIONS = """
[cluster]
prefill_replicas = 2
decode_replicas = 2
[engine]
num_kv_blocks = 64
enable_prefix_caching = true""" + CLUSTER_SESSIONS


def tiny_text(n: int) -> str:
    """One prefill and one decode replica, a 1 GB/s link with 0.5 s latency, n requests of
    PROMPT tokens sent at once."""
    return TINY_CLUSTER + TINY_WORKLOAD.replace("N", str(n))


def open_text(router="least_outstanding", decode_router="least_kv", cluster="",
              engine="") -> str:
    """Two prefill and three decode replicas, 96 KV blocks each, bursty arrivals."""
    return (f'[cluster]\nprefill_replicas = 2\ndecode_replicas = 3\nrouter = "{router}"\n'
            f'decode_router = "{decode_router}"\n{cluster}\n[engine]\nnum_kv_blocks = 96\n'
            f'{engine}\n' + OPEN_WORKLOAD)


def transfer_s(config) -> float:
    """The tiny case's transfer by hand: the prompt's float32 K and V rows over 1 GB/s, plus
    0.5 s."""
    model = config.model
    return PROMPT * 2 * model.n_layers * model.d_model * 4 / 1e9 + 0.5


def test_ttft_is_at_the_prefill_replica_and_the_first_gap_includes_the_transfer(tmp_path):
    config = load_config(tmp_path, tiny_text(1))
    recorder = run_config(config)
    request = {k: v[0] for k, v in recorder.request_columns().items()}
    prefill, decode = (r.step_columns(0.0) for r in recorder.replicas)
    assert (request["prefill_replica"], request["replica"]) == (0, 1)
    assert request["kv_transfer_s"] == pytest.approx(transfer_s(config), rel=1e-12)
    assert request["first_token_s"] == prefill["end_s"][0]  # its one step there: the prefill
    assert len(prefill["end_s"]) == 1 and prefill["num_prefill_tokens"][0] == PROMPT
    landed_s = request["first_token_s"] + request["kv_transfer_s"]
    assert decode["start_s"][0] == pytest.approx(landed_s, rel=1e-12)  # it decodes at once
    assert decode["num_prefill_tokens"][0] == 0 and len(decode["end_s"]) == OUTPUT - 1
    gaps = sorted(recorder.itl_gaps)
    assert gaps[-1] == pytest.approx(decode["end_s"][0] - request["first_token_s"], rel=1e-12)
    assert gaps[-1] > request["kv_transfer_s"]
    assert sum(recorder.itl_counts) == OUTPUT - 1
    # what a client behind vLLM's P/D proxy sees first: the decode replica's first token
    assert request["decode_first_token_s"] == decode["end_s"][0]


def test_a_prefill_replica_link_moves_one_request_at_a_time_in_turn(tmp_path):
    config = load_config(tmp_path, tiny_text(2))
    columns = run_config(config).request_columns()
    one = transfer_s(config)  # both prefill in one step and leave together
    assert sorted(columns["kv_transfer_s"]) == pytest.approx([one, 2 * one], rel=1e-12)


def test_kv_moves_only_once_the_decode_replica_has_room_and_is_held_until_read(tmp_path):
    # each replica's cache holds one request (10 blocks of 16 tokens; one needs 7 to 9): the
    # prefill replica keeps r0's blocks until its KV is read, so r1 prefills only then; the
    # decode replica reserves r1's blocks only once r0 has finished there, and only then does
    # r1's KV move (as vLLM's connectors move KV: into blocks reserved for it)
    config = load_config(tmp_path, tiny_text(2) + "[engine]\nnum_kv_blocks = 10\n",
                         ['workload.output_tokens={dist = "fixed", value = 40}'])
    columns = run_config(config).request_columns()
    r0, r1 = ({k: columns[k][i] for k in columns} for i in sorted(
        range(2), key=lambda i: columns["first_token_s"][i]))
    one = transfer_s(config)
    assert r0["kv_transfer_s"] == pytest.approx(one, rel=1e-12)
    landed0 = r0["first_token_s"] + r0["kv_transfer_s"]
    assert r1["first_scheduled_s"] == pytest.approx(landed0, rel=1e-12)
    assert r0["finish_s"] > r1["first_token_s"]  # r1 waits for decode blocks, not the link
    assert r1["first_token_s"] + r1["kv_transfer_s"] == pytest.approx(r0["finish_s"] + one,
                                                                      rel=1e-12)


@pytest.mark.parametrize("engine", ["", 'swap_blocks = 8\n[scheduler]\npreemption = "swap"'])
def test_a_step_that_only_preempts_is_a_step(tmp_path, engine):
    # 7 blocks of 4: the second request's blocks are reserved while its KV is on the (slow)
    # link, and the first, growing, preempts itself with nothing else to run: a zero-token
    # step, recorded as one (vLLM's), after which the first is readmitted
    text = ("[cluster]\nprefill_replicas = 1\ndecode_replicas = 1\n"
            "kv_transfer_latency_s = 0.5\n[engine]\nnum_kv_blocks = 7\nblock_size = 4\n"
            + engine + "\n" + TINY_WORKLOAD.replace("N", "2").replace(
                f"value = {PROMPT}", "value = 8").replace(f"value = {OUTPUT}", "value = 12"))
    cluster, recorder, _ = run_cluster_of(load_config(tmp_path, text))
    columns = recorder.request_columns()
    assert columns["status"] == ["finished"] * 2 and sum(columns["preemptions"]) == 1
    decode = recorder.replicas[1].step_columns()
    assert 1 in decode["preemptions"]
    for replica in cluster.replicas:
        assert replica.scheduler.block_manager.num_used == 0


def test_a_static_batch_all_preempted_is_a_step_of_no_tokens_and_no_padding():
    # blocks held outside the running list (as KV coming in holds them) leave the batch's
    # last sequence no block: it preempts itself, and the step runs no row, padded or not
    from engine.block_manager import BlockManager
    from engine.scheduler import Scheduler, SchedulerConfig
    from engine.sequence import Sequence

    bm = BlockManager(6, 4)
    scheduler = Scheduler(SchedulerConfig(policy="static", max_batch_size=2, max_seq_len=64), bm)
    for seq in (Sequence("a", 4, 2), Sequence("b", 4, 12)):
        scheduler.add(seq)
    for _ in range(2):  # both prefill; a finishes
        scheduler.postprocess(scheduler.schedule())
    bm.ensure_capacity(999, bm.num_free * 4)  # every free block held elsewhere
    plan = scheduler.schedule()
    while not plan.preempted:
        scheduler.postprocess(plan)
        plan = scheduler.schedule()
    assert plan.step >= 0 and not plan.is_empty  # a step, recorded as one
    assert (plan.prefills, plan.decodes, plan.padding_seqs) == ([], [], 0)


def test_a_static_decode_replica_batches_what_has_landed(tmp_path):
    config = load_config(tmp_path, tiny_text(6) + '[scheduler]\npolicy = "static"\n'
                                                  'max_batch_size = 4\n')
    columns = run_config(config).request_columns()
    assert columns["status"] == ["finished"] * 6


def test_a_prefill_replica_reports_the_blocks_it_freed_once_its_kv_was_read(tmp_path):
    cluster, _, _ = run_cluster_of(load_config(tmp_path, tiny_text(2)))
    prefill = cluster.replicas[0]
    assert prefill.kv_log.at(float("inf")).kv_use == 0  # not the blocks of its last hand-off


@pytest.mark.parametrize("router, decode_router, engine", [
    ("round_robin", "least_kv", ""),
    ("least_kv", "least_outstanding", ""),
    ("least_outstanding", "least_kv", 'swap_blocks = 256\n[scheduler]\npreemption = "swap"'),
])
def test_every_request_is_served_once_and_no_kv_block_stays_held(tmp_path, router,
                                                                 decode_router, engine):
    config = load_config(tmp_path, open_text(router, decode_router, engine=engine))
    cluster, recorder, num_requests = run_cluster_of(config)
    columns = recorder.request_columns()
    assert sorted(columns["request_id"]) == list(range(num_requests))
    assert set(columns["status"]) == {"finished"}
    moved = [r for r, t in zip(columns["replica"], columns["kv_transfer_s"]) if t == t]
    assert set(moved) == {2, 3, 4} and set(columns["prefill_replica"]) == {0, 1}
    assert sum(columns["preemptions"]) > 0  # the decode replicas' KV runs short
    for replica in cluster.replicas:
        assert replica.scheduler.block_manager.num_used == 0
        assert not replica.scheduler.has_unfinished()
        assert replica.kv_log.outstanding == 0
    assert cluster.dispatch.in_flight == 0
    from reports.replicas_chart import _throughputs

    bars = _throughputs(recorder, 10.0, 0.0)  # prefill bars: what each prefilled
    assert sum(bars[:2]) == pytest.approx(sum(bars[2:])) and min(bars) > 0
    for i, replica in enumerate(recorder.replicas):  # the reports' log of each one's KV use
        times, used = recorder.kv_used(i)
        steps = replica.step_columns(recorder.origin_s())
        assert np.all(np.diff(times) >= 0) and used[-1] == 0
        at_starts = used[np.searchsorted(times, steps["start_s"], side="right") - 1]
        assert list(at_starts) == list(steps["kv_blocks_used"])  # each step's plan, as recorded


# sessions over a slow link (linear costs: no async scheduling), so that KV lands while a
# decode replica's run of steps, planned ahead, is under way
SLOW_LINK_SESSIONS = """
[cluster]
prefill_replicas = 1
decode_replicas = 1
kv_transfer_gbps = 0.5
[cost]
model = "linear"
[engine]
num_kv_blocks = 64
enable_prefix_caching = true
block_size = 16""" + CLUSTER_SESSIONS


@pytest.mark.parametrize("text", [open_text(), open_text(cluster="report_delay_s = 0.05"),
                                  SESSIONS, SLOW_LINK_SESSIONS])
def test_fast_forward_records_exactly_the_step_by_step_cluster(tmp_path, text):
    config = load_config(tmp_path, text)
    assert records(run_config(config)) == records(run_config(config, fast_forward=False))


def test_a_prefill_replicas_bar_counts_what_it_prefilled_beside_requests_never_sent(tmp_path):
    """A conversation's turns after a rejected one are never sent to a replica: they have no
    prefill replica, and the chart's bars count only finished requests."""
    from reports.replicas_chart import _throughputs

    config = load_config(tmp_path, SESSIONS.replace("num_kv_blocks = 64", "num_kv_blocks = 40"))
    _, recorder, _ = run_cluster_of(config)
    columns = recorder.request_columns()
    assert "" in columns["prefill_replica"]  # some turns never sent
    bars = _throughputs(recorder, 10.0, 0.0)
    assert sum(bars[:2]) == pytest.approx(sum(bars[2:])) and sum(bars) > 0


def test_replicas_csv_says_what_each_prefill_replica_prefilled_as_its_bar_does(tmp_path):
    from reports.replica_table import replicas_table
    from reports.replicas_chart import _throughputs
    from reports.tables import run_summaries

    path = tmp_path / "split.toml"
    path.write_text(open_text())
    results = sim.simulate(scenarios.load(path))
    (spec, recorder), = results
    summary, = run_summaries(results)
    table = replicas_table(results, [summary])
    bars = _throughputs(recorder, summary["duration_s"], spec.config.workload.warmup_s)
    assert list(table["prefilled_throughput"]) == pytest.approx(bars[:2] + [0.0] * 3)
    assert min(table["prefilled_throughput"][:2]) > 0


def test_the_same_seed_gives_the_same_records(tmp_path):
    config = load_config(tmp_path, open_text(router="random"))
    assert records(run_config(config)) == records(run_config(config))


@pytest.mark.parametrize("cluster, message", [
    ("prefill_replicas = 0\ndecode_replicas = 1",
     "cluster.prefill_replicas: must be a positive integer, got 0"),
    ("prefill_replicas = 1\ndecode_replicas = 0",
     "cluster.decode_replicas: must be a positive integer, got 0"),
    ("prefill_replicas = 1", "cluster.decode_replicas: required (a positive integer) with "
                             "cluster.prefill_replicas"),
    ("replicas = 2\nprefill_replicas = 1\ndecode_replicas = 1",
     "cluster.replicas: not allowed with cluster.prefill_replicas and decode_replicas"),
    ('prefill_replicas = 1\ndecode_replicas = 1\n[[cluster.pools]]\nname = "a"\nreplicas = 1',
     "cluster.pools: not allowed with cluster.prefill_replicas and decode_replicas"),
    ("prefill_replicas = 1\ndecode_replicas = 1\nkv_transfer_gbps = 0",
     "cluster.kv_transfer_gbps: must be a positive number"),
    ("prefill_replicas = 1\ndecode_replicas = 1\nkv_transfer_latency_s = -1",
     "cluster.kv_transfer_latency_s: must be a non-negative number"),
    ('prefill_replicas = 1\ndecode_replicas = 1\ndecode_router = "random"',
     "cluster.decode_router: must be one of least_kv, least_outstanding"),
    ("replicas = 2\nkv_transfer_gbps = 10", "cluster.kv_transfer_gbps: only with "
                                            "cluster.prefill_replicas and decode_replicas"),
])
def test_a_bad_disaggregation_key_is_one_line_naming_it(tmp_path, cluster, message):
    text = f"[cluster]\n{cluster}\n" + TINY_WORKLOAD.replace("N", "1")
    with pytest.raises(ScenarioError) as error:
        load_config(tmp_path, text)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("mode", ["serve", "cosimulate"])
def test_disaggregation_runs_in_simulate_mode_only(tmp_path, mode):
    with pytest.raises(ScenarioError) as error:
        load_config(tmp_path, f'mode = "{mode}"\n' + tiny_text(1))
    assert "cluster.prefill_replicas: runs in mode simulate only" in str(error.value)


def test_a_decode_replicas_own_keys_registered_when_preempted_are_those_registered_as_they_fill(
        tmp_path, monkeypatch):
    """A request's own keys are registered when it is preempted: those of the blocks it filled
    on this replica and of those that came in, as when every block is registered as it fills
    or lands (the same records, but the count of blocks cached)."""
    from helpers.runs import own_keys_both_ways

    config = load_config(tmp_path, open_text(cluster="", engine="enable_prefix_caching = true"))
    lazy, eager = own_keys_both_ways(lambda: run_config(config), monkeypatch)
    assert sum(lazy["step.preemptions"]) > 0
    assert lazy == eager


def test_a_decode_engine_takes_the_prefix_it_has_cached_and_asks_only_for_the_rest():
    """As vLLM's NIXL connector reads only the blocks the decode instance lacks: the second
    prompt shares two full blocks with the first, whose transferred blocks the decode engine
    cached once they came in."""
    from engine.prefix_cache import PrefixCachingBlockManager
    from engine.scheduler import Scheduler, SchedulerConfig
    from engine.sequence import Sequence

    def engine(prefill_only: bool) -> Scheduler:
        scheduler = Scheduler(SchedulerConfig(max_seq_len=64), PrefixCachingBlockManager(16, 4))
        scheduler.prefill_only = prefill_only
        return scheduler

    prefill, decode = engine(True), engine(False)
    # 15 tokens each: three full blocks of 4, the first two the same; then a 12-token prompt
    # of a's three blocks, of which it finds two (vLLM's decode instance always computes, so
    # reads, the prompt's last token)
    a = Sequence("a", 15, 8, block_hashes=[1, 2, 3])
    b = Sequence("b", 15, 4, block_hashes=[1, 2, 9])
    c = Sequence("c", 12, 4, block_hashes=[1, 2, 3])
    moved = []
    for seq in (a, b, c):
        prefill.add(seq)
        prefill.postprocess(prefill.schedule())  # prefilled and handed off
        decode.add_transferred(seq)
        assert decode.schedule().kv_requested == [seq]
        moved.append(decode.tokens_to_move(seq))
        decode.kv_landed(seq)
        prefill.kv_sent(seq)
        decode.postprocess(decode.schedule())  # readmitted: it decodes
    assert moved == [15, 15 - 2 * 4, 12 - 2 * 4]
    tables = decode.block_manager.block_tables
    assert tables[b.seq_id][:2] == tables[a.seq_id][:2]  # the blocks a brought, shared
    assert tables[b.seq_id][2] != tables[a.seq_id][2]
    assert decode.block_manager.num_cached == 5  # a's three, b's last, c's last (a copy)
    assert prefill.block_manager.num_used == 0


def test_requests_csv_orders_its_columns_the_same_whatever_the_variants_order(tmp_path):
    # co-located replicas have no prefill replica or transfer: their rows leave them empty
    path = tmp_path / "mixed.toml"
    path.write_text('name = "mixed"\n' + TINY_WORKLOAD.replace("N", "4") + """
[[variants]]
name = "co-located"
set = { "cluster.replicas" = 2 }
[[variants]]
name = "split"
set = { "cluster.prefill_replicas" = 1, "cluster.decode_replicas" = 1 }
""")
    scenario = scenarios.load(path)
    runs = sim.simulate(scenario)
    for results in (runs, runs[::-1]):
        table = reports.requests_table(results)
        assert list(table.columns[:6]) == ["variant", "replica", "prefill_replica",
                                           "kv_transfer_s", "decode_first_token_s",
                                           "request_id"]
        assert table.loc[table["variant"] == "co-located", "kv_transfer_s"].isna().all()
        assert table.loc[table["variant"] == "split", "kv_transfer_s"].notna().all()
