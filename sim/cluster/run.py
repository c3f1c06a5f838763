"""Run a resolved config with a `[cluster]`: replicas of the engine behind a router, in one
SimPy environment.

Each replica is an engine of its own (its `Scheduler`, block manager, executor and
`RunRecorder`), built from the config, or from its pool's config (the scenario with the pool's
`set` applied), and run by its own engine process (`sim.loop.engine`). One arrival process (or
closed loop, or set of conversations) feeds them through the `Dispatch`, which asks the router
for each request's replica with the replicas' loads as reported `report_delay_s` ago. With
`prefill_replicas` and `decode_replicas` (`disaggregation.py`) the first replicas prefill and
the others decode, and a `Disaggregation` moves each request's KV from one to the other.
"""

from __future__ import annotations

import simpy

from engine.llm_engine import LLMEngine
from engine.cluster_records import ClusterRecorder
from engine.records import RunRecorder
from scenarios import RunConfig

from ..build import build_server, hardware_of, sequence_maker
from ..loop import run_engines
from ..replica import Replica
from ..workloads import build_workload
from .disaggregation import Disaggregation, kv_link
from .dispatch import Dispatch
from .load import LoadLog
from .routers import make_router


def replica_configs(config: RunConfig) -> list[tuple[str, RunConfig]]:
    """(pool name, config) of each replica: `cluster.replicas` copies of the config (pool
    name empty), each pool's replicas with its `set` applied, pool after pool, or the
    prefill replicas' copies ("prefill") then the decode replicas' ("decode")."""
    cluster = config.cluster
    if cluster.prefill_replicas:
        return [("prefill", config)] * cluster.prefill_replicas + \
            [("decode", config)] * cluster.decode_replicas
    if not cluster.pools:
        return [("", config)] * cluster.replicas
    return [(pool.name, pooled) for pool, pooled in config.pool_configs()
            for _ in range(pool.replicas)]


class Cluster:
    """The replicas of a config with a `[cluster]`, each with its `LoadLog`, in one SimPy
    environment. Replica 0 runs on the seed's "jitter" stream (or `jitter_rng`), replica i on
    its i-th child stream; `random` routes with the seed's "router" stream. `steady`: as
    `sim.build.build_server`'s."""

    def __init__(self, config: RunConfig, mode: str, streams: dict, cost=None, jitter_rng=None,
                 steady: bool = False):
        configs = replica_configs(config)
        jitter = jitter_rng or streams["jitter"]
        self.env = simpy.Environment()
        self.replicas = []
        for index, ((pool, replica_config), rng) in enumerate(
                zip(configs, [jitter, *jitter.spawn(len(configs) - 1)])):
            scheduler, executor, self.model = build_server(replica_config, mode, streams,
                                                           cost, rng, steady)
            scheduler.prefill_only = index < config.cluster.prefill_replicas
            block_size = scheduler.block_manager.block_size  # one in a cluster
            recorder = RunRecorder(scheduler.block_manager.num_blocks)
            llm = LLMEngine(scheduler, executor, recorder, timing="executor")
            self.replicas.append(Replica(llm, index, LoadLog(scheduler.block_manager.num_blocks)))
        cluster = config.cluster
        self.prefill_replicas = cluster.prefill_replicas
        if not self.prefill_replicas:
            self.dispatch = Dispatch(self.env, self.replicas, make_router(
                cluster.router, len(configs), streams["router"], block_size),
                cluster.report_delay_s)
            return
        prefill, decode = (self.replicas[:self.prefill_replicas],
                           self.replicas[self.prefill_replicas:])
        self.dispatch = Disaggregation(
            self.env, prefill, decode,
            make_router(cluster.router, len(prefill), streams["router"], block_size),
            make_router(cluster.decode_router, len(decode), streams["router"], block_size),
            cluster.report_delay_s, kv_link(config, hardware_of(config)))

    def block_manager(self):
        """A block manager of the cluster's, one that caches prefixes if any does (requests
        then carry their block keys)."""
        managers = [replica.scheduler.block_manager for replica in self.replicas]
        return next((bm for bm in managers if bm.prefix_caching), managers[0])

    def run(self, workload, make_sequence, progress: bool = False,
            fast_forward: bool = True) -> ClusterRecorder:
        """Simulate `workload` (`make_sequence(index, arrival_s)` builds a request) to the
        end."""
        bm = self.replicas[0].scheduler.block_manager
        unrouted = RunRecorder(bm.num_blocks, bm.block_size)
        run_engines(self.env, self.replicas, make_sequence, arrival_s=workload.arrival_s,
                    closed_loop=workload.closed_loop, sessions=workload.sessions,
                    num_requests=len(workload), progress=progress, fast_forward=fast_forward,
                    router=self.dispatch, refused=unrouted)
        return ClusterRecorder([r.engine.recorder for r in self.replicas], unrouted,
                               self.prefill_replicas,
                               [r.kv_log.kv_series() for r in self.replicas])


def run_cluster(config: RunConfig, mode: str, streams: dict, base_dir=None, *,
                progress: bool = False, cost=None, jitter_rng=None,
                fast_forward: bool = True, steady: bool | None = None) -> ClusterRecorder:
    """Simulate a config with a `[cluster]` to the end (`sim.runner.run_config`'s
    arguments)."""
    workload = build_workload(config.workload, streams["workload"], base_dir)
    cluster = Cluster(config, mode, streams, cost, jitter_rng,
                      fast_forward if steady is None else steady)
    make = sequence_maker(workload, mode, streams, cluster.model, cluster.block_manager())
    return cluster.run(workload, make, progress, fast_forward)
