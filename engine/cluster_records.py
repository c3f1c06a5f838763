"""The records of a cluster's replicas read as one run (`ClusterRecorder`): each replica fills
its own `RunRecorder` (`records.py`); every request and step row gets its `replica`, times from
the cluster's first arrival. With prefill/decode disaggregation a request is recorded by its
decode replica, with the `KvTransfer` that brought it there: its first scheduling and first
token at the prefill replica, and the gap from that first token to its second, transfer
included, among the inter-token gaps.
"""

from __future__ import annotations

from array import array

import numpy as np

from .records import NAN, REQUEST_COLUMNS, STEP_COLUMNS, RunRecorder


class ClusterRecorder:
    """The records of a cluster's replicas, one `RunRecorder` each (`replicas[i]` is replica
    i's), read as one run: every request (with its `replica`), every step of every replica
    (with its `replica`) and every inter-token gap, times from the cluster's first arrival.
    `unrouted`: the requests never sent to any replica (a conversation's turns after a
    rejected one); their `replica` is empty. `prefill_replicas`: with disaggregation, how many
    of the first replicas prefill (each request row then has its `prefill_replica` and
    `kv_transfer_s`). `kv_series`: each replica's KV use over time, (times [n] seconds, blocks
    in use from each [n]), between its steps too (a prefill replica holds the blocks of
    requests whose KV is being sent); None where not logged."""

    sees_steps = True

    def __init__(self, replicas: list[RunRecorder], unrouted: RunRecorder,
                 prefill_replicas: int = 0, kv_series: list | None = None):
        self.replicas = replicas
        self.unrouted = unrouted
        self.prefill_replicas = prefill_replicas
        self.kv_series = kv_series
        self.block_size = replicas[0].block_size  # one block size in a cluster
        self.notes: tuple = ()  # what the run told its user, for its report

    @property
    def kv_blocks_total(self) -> int:
        return sum(r.kv_blocks_total for r in self.replicas)

    @property
    def num_steps(self) -> int:
        return sum(r.num_steps for r in self.replicas)

    @property
    def num_requests(self) -> int:
        return sum(r.num_requests for r in self._request_parts())

    @property
    def reject_reasons(self) -> dict:
        return {k: v for r in self._request_parts() for k, v in r.reject_reasons.items()}

    @property
    def itl_gaps(self) -> array:
        return _joined("d", [r.itl_gaps for r in self.replicas])

    @property
    def itl_counts(self) -> array:
        return _joined("q", [r.itl_counts for r in self.replicas])

    def origin_s(self) -> float:
        origins = [r.origin_s() for r in self._request_parts() if r.num_requests]
        return min(origins, default=0.0)

    def failed_end_s(self, warmup_s: float = 0.0) -> float | None:
        return None  # a simulated cluster's requests finish or are rejected

    def itl_end_s(self) -> np.ndarray:
        t0 = self.origin_s()
        return np.concatenate([r.itl_end_s(t0) for r in self.replicas])

    def kv_used(self, replica: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Replica `replica`'s KV use over time, times from the first arrival (`kv_series`),
        or None where it was not logged."""
        if self.kv_series is None:
            return None
        times, used = self.kv_series[replica]
        return times - self.origin_s(), used

    def request_columns(self) -> dict:
        """Request rows of every replica (`replica` first), in arrival order (requests
        arriving at the same instant by replica, then as recorded), times from the cluster's
        first arrival."""
        t0, parts = self.origin_s(), self._request_parts()
        tables = [r.request_columns(t0) for r in parts]
        labels = [[i] * r.num_requests for i, r in enumerate(self.replicas)] + \
            [[""] * self.unrouted.num_requests]
        arrivals = np.concatenate([np.asarray(t["arrival_s"], float) for t in tables])
        order = np.argsort(arrivals, kind="stable").tolist()
        columns = {"replica": [x for part in labels for x in part]}
        if self.prefill_replicas:
            columns |= self._transfer_columns(tables, columns["replica"], t0)
        for name in REQUEST_COLUMNS:
            columns[name] = [x for t in tables for x in t[name]]
        return {name: [values[i] for i in order] for name, values in columns.items()}

    def _transfer_columns(self, tables: list[dict], replica: list, t0: float) -> dict:
        """Each request's `prefill_replica`, `kv_transfer_s` (leaving its prefill replica to
        its KV's arrival, the wait for the link included) and `decode_first_token_s` (its
        first token at its decode replica, from `t0`: when a client behind vLLM's P/D proxy,
        which drops the prefill's token, sees its first); NaN for a request that never left
        (rejected, or done with its first token), in `tables`' order."""
        transfers = {k: v for r in self.replicas for k, v in r.transfers.items()}
        firsts = {k: v for r in self.replicas for k, v in r.decode_first_token.items()}
        request_ids = [x for t in tables for x in t["request_id"]]
        moved = [transfers.get(request_id) for request_id in request_ids]
        return {"prefill_replica": [t.prefill_replica if t else r for t, r in zip(moved, replica)],
                "kv_transfer_s": [t.arrived_s - t.sent_s if t else NAN for t in moved],
                "decode_first_token_s": [firsts.get(request_id, NAN + t0) - t0
                                         for request_id in request_ids]}

    def step_columns(self) -> dict:
        """Step rows of every replica in turn (`replica` first; `kv_blocks_total` per row),
        times from the cluster's first arrival."""
        t0 = self.origin_s()
        tables = [r.step_columns(t0) for r in self.replicas]
        columns = {"replica": np.repeat(np.arange(len(tables)), [len(t["step"]) for t in tables])}
        for name in STEP_COLUMNS:
            columns[name] = np.concatenate([np.frombuffer(t[name], dtype=np.float64)
                                            for t in tables])
        columns["kv_blocks_total"] = np.repeat([r.kv_blocks_total for r in self.replicas],
                                               [r.num_steps for r in self.replicas])
        return columns

    def _request_parts(self) -> list[RunRecorder]:
        return [*self.replicas, self.unrouted]


def _joined(typecode: str, parts) -> array:
    joined = array(typecode)
    for part in parts:
        joined.extend(part)
    return joined
