"""Routers: which replica of a cluster a new request goes to.

A router sees only what a real one would: each replica's `Load` as reported (requests
outstanding, KV blocks in use) and the request itself (its prefix-cache block keys, or the
hashes of its prompt's token blocks where it has real token ids). It never
reads a replica's scheduler, and draws random numbers only from the generator it is given.
Policies, by `cluster.router`:

- `round_robin`: replicas in turn, whatever their load;
- `random`: a uniform draw from the seed's "router" stream;
- `least_outstanding`: the fewest requests outstanding (sent, not finished); ties to the
  lowest index;
- `least_kv`: the smallest share of KV blocks in use, then as `least_outstanding`;
- `prefix_affinity`: the replica known to hold the longest prefix of the request's block keys
  (the router remembers which replicas it sent each key to; it does not see evictions), among
  the replicas with at most `AFFINITY_SLACK` more requests outstanding than the least busy
  one; then as `least_outstanding`. A request without keys goes as `least_outstanding`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from engine.block_hashes import block_hashes, own_keys
from scenarios.defaults import ROUTERS

# prefix_affinity: how much busier than the least busy replica a replica holding a request's
# prefix may be and still get it. Without a bound every new conversation would follow the
# shared system prompt to one replica; with 0 it would be least_outstanding.
AFFINITY_SLACK = 4


class Load(NamedTuple):
    """A replica's load as the router sees it."""

    outstanding: int  # requests sent to it and not finished
    kv_use: float  # KV blocks in use / KV blocks


def least_outstanding(loads: list[Load], among=None) -> int:
    """The replica (of `among`, default all) with the fewest requests outstanding."""
    among = range(len(loads)) if among is None else among
    return min(among, key=lambda i: (loads[i].outstanding, i))


class RoundRobin:
    def __init__(self, num_replicas: int):
        self.num_replicas = num_replicas
        self.next = 0

    def choose(self, seq, loads: list[Load]) -> int:
        chosen, self.next = self.next, (self.next + 1) % self.num_replicas
        return chosen


class Random:
    def __init__(self, num_replicas: int, rng: np.random.Generator):
        self.num_replicas = num_replicas
        self.rng = rng

    def choose(self, seq, loads: list[Load]) -> int:
        return int(self.rng.integers(self.num_replicas))


class LeastOutstanding:
    def choose(self, seq, loads: list[Load]) -> int:
        return least_outstanding(loads)


class LeastKv:
    def choose(self, seq, loads: list[Load]) -> int:
        return min(range(len(loads)), key=lambda i: (loads[i].kv_use, loads[i].outstanding, i))


class PrefixAffinity:
    """Remembers, for every block key, the replicas it sent a request holding it to (a bit
    mask); a replica holds a request's prefix up to the first key it was never sent. A request
    with real token ids (cosimulate) is keyed by hashing its prompt's full blocks of
    `block_size` tokens, as the replicas' prefix caches hash them."""

    def __init__(self, block_size: int | None = None):
        self.block_size = block_size
        self.sent_to: dict = {}  # block key -> bit mask of replicas

    def choose(self, seq, loads: list[Load]) -> int:
        keys = seq.block_hashes
        if self.block_size and keys is not None and seq.prompt_token_ids is not None:
            keys = block_hashes(seq, self.block_size, len(seq.prompt_token_ids) // self.block_size)
        keys = keys or ()
        if own_keys(keys):  # a request that shares no prefix: nothing to follow
            keys = ()
        least = min(load.outstanding for load in loads)
        near = [i for i, load in enumerate(loads) if load.outstanding <= least + AFFINITY_SLACK]
        depth = self.prefix_depths(keys, len(loads))
        deepest = max(depth[i] for i in near)
        chosen = least_outstanding(loads, [i for i in near if depth[i] == deepest])
        for key in keys:
            self.sent_to[key] = self.sent_to.get(key, 0) | 1 << chosen
        return chosen

    def prefix_depths(self, keys, num_replicas: int) -> list[int]:
        """How many of the leading `keys` each replica was sent."""
        depth, holding = [0] * num_replicas, (1 << num_replicas) - 1
        for n, key in enumerate(keys):
            still = holding & self.sent_to.get(key, 0)
            for i in range(num_replicas):
                if holding >> i & 1 and not still >> i & 1:
                    depth[i] = n
            holding = still
            if not holding:
                return depth
        for i in range(num_replicas):
            if holding >> i & 1:
                depth[i] = len(keys)
        return depth


def make_router(name: str, num_replicas: int, rng: np.random.Generator,
                block_size: int | None = None):
    """The router `cluster.router` names, for `num_replicas` replicas; `rng`: the seed's
    "router" stream (only `random` draws from it); `block_size`: the replicas' KV block size
    (`prefix_affinity` hashes real token ids in blocks of it)."""
    routers = {"round_robin": lambda: RoundRobin(num_replicas),
               "random": lambda: Random(num_replicas, rng),
               "least_outstanding": LeastOutstanding,
               "least_kv": LeastKv,
               "prefix_affinity": lambda: PrefixAffinity(block_size)}
    assert tuple(routers) == ROUTERS
    if name not in routers:
        raise ValueError(f"cluster.router must be one of {', '.join(ROUTERS)}, got {name!r}")
    return routers[name]()
