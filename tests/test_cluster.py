"""Clusters of replicas behind a router (sim/cluster/): the routers' decisions on hand-built
loads, what a delayed report shows, and whole runs: every request accounted for, no KV block
left held, fast forward equal to step by step, one replica equal to a single server, the
same files from the same seed, and one-line errors for bad [cluster] tables."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import simpy

import reports
import scenarios
import sim
from helpers.cluster import OPEN, SESSIONS, cluster_text, load_config, run_cluster_of
from helpers.runs import records
from scenarios import ScenarioError
from engine.executor import NumpyExecutor
from sim.cluster.load import LoadLog
from sim.cluster.routers import (AFFINITY_SLACK, Load, LeastKv, LeastOutstanding,
                                 PrefixAffinity, RoundRobin)
from sim.cluster.run import Dispatch
from sim.runner import run_config


def seq(keys=None):
    return SimpleNamespace(block_hashes=keys, seq_id=0)


# --- routers on hand-built loads ---------------------------------------------------------------


def test_round_robin_takes_the_replicas_in_turn_whatever_their_load():
    router, loads = RoundRobin(3), [Load(9, 1.0), Load(0, 0.0), Load(0, 0.0)]
    assert [router.choose(seq(), loads) for _ in range(5)] == [0, 1, 2, 0, 1]


def test_least_outstanding_picks_the_idle_replica():
    loads = [Load(2, 0.1), Load(0, 0.9), Load(1, 0.0)]
    assert LeastOutstanding().choose(seq(), loads) == 1


def test_least_kv_picks_the_emptiest_cache_then_the_fewest_requests():
    assert LeastKv().choose(seq(), [Load(0, 0.5), Load(3, 0.2), Load(1, 0.6)]) == 1
    assert LeastKv().choose(seq(), [Load(2, 0.2), Load(1, 0.2)]) == 1


def test_prefix_affinity_follows_the_longest_prefix_within_its_slack():
    router, idle = PrefixAffinity(), [Load(0, 0.0)] * 3
    assert router.choose(seq(["sys", "a1"]), [Load(1, 0), Load(0, 0), Load(0, 0)]) == 1
    # replica 1 holds the shared "sys": it gets b too, being within the slack
    assert router.choose(seq(["sys", "b1"]), [Load(0, 0), Load(1, 0), Load(1, 0)]) == 1
    busy = [Load(1, 0), Load(AFFINITY_SLACK + 1, 0), Load(0, 0)]
    assert router.choose(seq(["sys", "c1"]), busy) == 2  # too busy: the least busy one
    # each conversation's next turn goes back to the replica that holds it
    assert router.choose(seq(["sys", "c1", "c2"]), [Load(0, 0), Load(0, 0), Load(3, 0)]) == 2
    assert router.choose(seq(["sys", "a1", "a2"]), idle) == 1
    assert router.choose(seq(None), [Load(3, 0), Load(2, 0), Load(1, 0)]) == 2


def test_prefix_affinity_keeps_no_keys_of_requests_that_share_no_prefix():
    router = PrefixAffinity()
    for i in range(3):  # a request's own keys: a range, which nobody else holds
        router.choose(SimpleNamespace(block_hashes=range(-i * 2**32 - 1, -i * 2**32 - 9, -1)),
                      [Load(0, 0), Load(0, 0)])
    assert router.sent_to == {}


TINY_MODEL = "[model]\nd_model = 32\nn_layers = 1\nn_heads = 2\nd_ff = 64\n"


def test_prefix_affinity_follows_real_token_ids_in_cosimulate(tmp_path, monkeypatch):
    # a cosimulated request carries token ids, not keys: the router hashes its prompt's blocks
    # as the replicas' caches do, so conversations go back to the replica holding them. The
    # engine (a tiny model: the routes do not rest on its size) really runs each step; its time
    # is made a fixed function of the step's tokens, so the routes, and the verdict, do not rest
    # on how busy the machine is.
    execute = NumpyExecutor.execute

    def timed(self, plan, **kwargs):
        tokens = sum(n for _, n in plan.prefills) + len(plan.decodes)
        return replace(execute(self, plan, **kwargs), duration_s=1e-2 + 1e-4 * tokens)

    monkeypatch.setattr(NumpyExecutor, "execute", timed)

    def hit_rate(router: str) -> float:
        text = (f'mode = "cosimulate"\n{TINY_MODEL}[engine]\nenable_prefix_caching = true\n'
                f'[cluster]\nreplicas = 3\nrouter = "{router}"\n'
                + SESSIONS.replace("conversations = 30", "conversations = 8")
                .replace("system_prompt_tokens = 256", "system_prompt_tokens = 0"))
        _, recorder, _ = run_cluster_of(load_config(tmp_path, text))
        cols = recorder.request_columns()
        return sum(cols["cached_tokens"]) / sum(cols["prompt_tokens"])

    assert hit_rate("prefix_affinity") > hit_rate("least_outstanding") + 0.1  # 0.75 vs 0.43


def test_a_delayed_report_shows_the_counts_of_that_time():
    log = LoadLog(kv_blocks_total=10)
    log.sent(0.0)
    log.step_started(0.0, 4)
    log.sent(1.0)
    log.step_ended(2.0, 0)
    log.done(3.0)
    assert log.at(-0.5) == Load(0, 0.0)
    assert log.at(0.5) == Load(1, 0.4)
    assert log.at(2.5) == Load(2, 0.0)
    assert log.at(3.0) == Load(1, 0.0)


@pytest.mark.parametrize("delay_s, expected", [(0.0, [0, 1, 0, 1]), (1.0, [0, 0, 0, 0])])
def test_a_router_on_old_reports_sends_a_burst_to_one_replica(delay_s, expected):
    env = simpy.Environment()
    replicas = [SimpleNamespace(index=i, kv_log=LoadLog(10)) for i in range(2)]
    dispatch = Dispatch(env, replicas, LeastOutstanding(), delay_s)
    chosen = [dispatch.route(SimpleNamespace(seq_id=i, block_hashes=None)).index
              for i in range(4)]
    assert chosen == expected


# --- whole runs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "least_kv",
                                    "prefix_affinity"])
def test_every_request_is_served_once_and_no_kv_block_stays_held(tmp_path, router):
    config = load_config(tmp_path, cluster_text(router=router, extra="[engine]\n"
                                                "num_kv_blocks = 64", workload=SESSIONS))
    cluster, recorder, n = run_cluster_of(config)
    assert sorted(recorder.request_columns()["request_id"]) == list(range(n))
    assert set(recorder.request_columns()["status"]) <= {"finished", "rejected"}
    for replica in cluster.replicas:
        assert replica.scheduler.block_manager.num_used == 0
        assert not replica.scheduler.has_unfinished()
        assert replica.kv_log.outstanding == 0


@pytest.mark.parametrize("router, delay_s, workload", [
    ("least_outstanding", 0.0, OPEN.format(n=120, rate=14.0)),
    ("least_kv", 0.0, OPEN.format(n=120, rate=14.0)),
    ("least_kv", 0.05, OPEN.format(n=120, rate=14.0)),
    ("prefix_affinity", 0.0, SESSIONS),
    ("random", 0.0, SESSIONS),
])
def test_fast_forward_records_exactly_the_step_by_step_cluster(tmp_path, router, delay_s,
                                                                 workload):
    config = load_config(tmp_path, cluster_text(
        router=router, extra=f"report_delay_s = {delay_s}\n[engine]\nnum_kv_blocks = 96",
        workload=workload))
    fast = run_config(config)
    slow = run_config(config, fast_forward=False)
    assert records(fast) == records(slow)
    assert len(set(fast.request_columns()["replica"])) > 1  # a cluster, not one busy replica


def test_one_replica_serves_exactly_what_the_single_server_does(tmp_path):
    text = OPEN.format(n=100, rate=8.0)
    single = run_config(load_config(tmp_path, text))
    cluster = run_config(load_config(tmp_path, cluster_text(replicas=1, workload=text)))
    columns = cluster.request_columns()
    assert set(columns.pop("replica")) == {0}
    assert columns == single.request_columns()
    assert list(cluster.itl_gaps) == list(single.itl_gaps)


def test_the_same_seed_writes_the_same_files(tmp_path):
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_text(router="random", workload=OPEN.format(n=40, rate=9.0)))
    scenario = scenarios.load(path)
    written = []
    for out in ("a", "b"):
        import sim

        files = reports.write_report(scenario, sim.simulate(scenario), tmp_path / out)
        written.append({p.name: p.read_bytes() for p in files.files})
    assert written[0] == written[1]
    assert {"replicas.csv", "replicas.png"} <= written[0].keys()
    header = written[0]["replicas.csv"].decode().splitlines()[0]
    assert header.startswith("variant,replica,requests,completed,request_throughput")


def test_a_large_clusters_replicas_chart_names_no_replica_one_by_one(tmp_path):
    # 40 replicas: whole-number ticks, no legend of 40 entries (at thousands, minutes of layout)
    from engine.benchmark import summarize
    from reports.replicas_chart import NAMED_REPLICAS, replicas_figure

    def figure(replicas):
        config = load_config(tmp_path, cluster_text(replicas=replicas,
                                                    workload=OPEN.format(n=50, rate=9.0)))
        recorder = sim.runner.run_config(config)
        run = ("run", recorder, summarize(recorder, {}), 0.0, [""] * replicas)
        return replicas_figure([run])

    small, large = figure(3), figure(NAMED_REPLICAS + 8)
    assert [t.get_text() for t in small.axes[0].get_xticklabels()] == ["0", "1", "2"]
    assert len(large.axes[0].get_xticks()) < 12 and not large.legends
    assert small.legends and len(small.legends[0].get_texts()) == 3


def test_the_prefix_cache_chart_draws_a_cluster_where_only_a_pool_caches(tmp_path):
    from reports.prefix_cache_chart import caching_runs

    text = ('[engine]\nenable_prefix_caching = false\n[cluster]\nrouter = "least_outstanding"\n'
            '[[cluster.pools]]\nname = "cached"\nreplicas = 1\n'
            'set = { "engine.enable_prefix_caching" = true }\n[[cluster.pools]]\nname = "plain"'
            '\nreplicas = 1\n' + SESSIONS.replace("conversations = 30", "conversations = 8"))
    path = tmp_path / "pools.toml"
    path.write_text(text)
    (spec, recorder), = sim.simulate(scenarios.load(path))
    assert [label for label, _ in caching_runs([(spec, recorder)])] == [spec.label]


def test_pools_build_their_replicas_with_their_own_settings(tmp_path):
    text = ('[cluster]\nrouter = "least_kv"\n[[cluster.pools]]\nname = "big"\nreplicas = 1\n'
            'set = { "engine.num_kv_blocks" = 256 }\n[[cluster.pools]]\nname = "small"\n'
            'replicas = 2\nset = { "engine.num_kv_blocks" = 64 }\n' + OPEN.format(n=60, rate=9.0))
    cluster, recorder, _ = run_cluster_of(load_config(tmp_path, text))
    assert [r.kv_blocks_total for r in recorder.replicas] == [256, 64, 64]


def test_pools_named_prefill_and_decode_are_pools_like_any_other(tmp_path):
    """Only disaggregation makes a replica prefill-only, never a pool's name."""
    text = ('[cluster]\nrouter = "least_outstanding"\n[[cluster.pools]]\nname = "prefill"\n'
            'replicas = 2\n[[cluster.pools]]\nname = "decode"\nreplicas = 1\n'
            + OPEN.format(n=30, rate=9.0))
    cluster, recorder, _ = run_cluster_of(load_config(tmp_path, text))
    assert not any(r.scheduler.prefill_only for r in cluster.replicas)
    statuses = [s for r in recorder.replicas for s in r.request_columns()["status"]]
    assert len(statuses) == 30 and set(statuses) == {"finished"}


@pytest.mark.parametrize("extra, message", [
    ("", "cluster.replicas: must be a positive integer, got 0"),
    ('router = "nearest"', "cluster.router: must be one of round_robin, random, "
                           "least_outstanding, least_kv, prefix_affinity, got 'nearest'"),
    ("report_delay_s = -1.0", "cluster.report_delay_s: must be a non-negative number"),
    ('router = "prefix_affinity"\n[engine]\nenable_prefix_caching = false',
     "engine.enable_prefix_caching: must be true with cluster.router = 'prefix_affinity'"),
])
def test_a_bad_cluster_table_is_one_line_naming_the_key(tmp_path, extra, message):
    text = f"[cluster]\nreplicas = {1 if extra else 0}\n{extra}\n" + OPEN.format(n=10, rate=1.0)
    with pytest.raises(ScenarioError) as error:
        load_config(tmp_path, text)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("text, message", [
    ('[cluster]\n[[cluster.pools]]\nname = "a"\nreplicas = 0\n',
     "cluster.pools[0].replicas: must be a positive integer, got 0"),
    ('[cluster]\n[[cluster.pools]]\nname = "a"\nreplicas = 1\nset = { "workload.num_requests"'
     ' = 3 }\n', "cluster.pools[0].set.workload.num_requests: a pool sets keys of hardware, "
                 "engine, scheduler only"),
    ('[cluster]\n[[cluster.pools]]\nname = "a"\nreplicas = 1\nset = { "engine.max_num_seqs"'
     ' = 0 }\n', "cluster.pools[0].set: engine.max_num_seqs: must be a positive integer"),
    ('mode = "serve"\n[cluster]\nreplicas = 2\n', "cluster: runs in modes simulate and "
                                                  "cosimulate only"),
])
def test_bad_pools_and_modes_are_refused_before_anything_runs(tmp_path, text, message):
    with pytest.raises(ScenarioError) as error:
        load_config(tmp_path, text + OPEN.format(n=10, rate=1.0))
    assert message in str(error.value) and "\n" not in str(error.value)
