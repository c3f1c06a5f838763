"""Clusters of replicas (`sim/cluster/`) for the tests: an open workload and a multi-turn one
as TOML, a resolved config from TOML text, and a whole cluster run."""

from __future__ import annotations

import scenarios
from sim.cluster import Cluster
from sim.build import run_mode, sequence_maker
from sim.workloads import build_workload, seeded_streams

OPEN = """
[workload]
num_requests = {n}
arrival = {{ process = "gamma", rate = {rate}, cv = 3.0 }}
prompt_tokens = {{ dist = "lognormal", median = 128, sigma = 0.6, min = 4, max = 1024 }}
output_tokens = {{ dist = "uniform", low = 16, high = 256 }}
"""
SESSIONS = """
[workload]
arrival = { process = "poisson", rate = 1.0 }
prompt_tokens = { dist = "uniform", low = 20, high = 120 }
output_tokens = { dist = "uniform", low = 40, high = 160 }
[workload.sessions]
conversations = 30
turns = { dist = "uniform", low = 2, high = 5 }
system_prompt_tokens = 256
think_time_s = 0.5
"""


def load_config(tmp_path, text: str, overrides=()):
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return scenarios.load(path, overrides).base


def cluster_text(replicas: int = 3, router: str = "least_outstanding", extra: str = "",
                 workload: str = OPEN.format(n=80, rate=9.0)) -> str:
    return f'[cluster]\nreplicas = {replicas}\nrouter = "{router}"\n{extra}\n' + workload


def run_cluster_of(config, fast_forward: bool = True):
    """(Cluster, ClusterRecorder) of a resolved config with a [cluster]."""
    mode, streams = run_mode(config), seeded_streams(config.seed)
    cluster = Cluster(config, mode, streams)
    workload = build_workload(config.workload, streams["workload"])
    make = sequence_maker(workload, mode, streams, cluster.model, cluster.block_manager())
    return cluster, cluster.run(workload, make, fast_forward=fast_forward), len(workload)
