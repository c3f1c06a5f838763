"""Clusters: replicas of the engine behind a router (docs/sim/cluster.md).

`run_cluster(config, ...)` runs a resolved config that has a `[cluster]` table: N identical
replicas (or pools of them with their own GPU, engine and scheduler settings), each with its
own scheduler, block manager and executor, fed by one arrival process through a router
(`routers.py`) that sees each replica's load as reported (`load.py`). It returns a
`ClusterRecorder`: every replica's records, read as one run.
"""

from .run import Cluster, replica_configs, run_cluster

__all__ = ["Cluster", "replica_configs", "run_cluster"]
