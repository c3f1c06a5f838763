"""Prefill/decode disaggregation (DistServe, Splitwise): `cluster.prefill_replicas` replicas
only prefill, `cluster.decode_replicas` only decode, and each request's KV moves between them.

The router (`cluster.router`) sends a new request to a prefill replica. There it prefills and
samples its first token (its TTFT), then its scheduler (`prefill_only`) releases it, keeping
its blocks until its KV has been read, and it is handed to a decode replica chosen by
`cluster.decode_router` (`least_kv` or `least_outstanding`, on the decode replicas' loads as
reported), whose queue it joins (`Scheduler.add_transferred`). As vLLM's KV connectors do, the
decode replica reserves blocks for all its tokens when it reaches the head of the queue
(`StepPlan.kv_requested`), and only then is its KV, the computed tokens' rows (with prefix
caching, but those of the prefix the decode replica has cached itself), moved, over its
prefill replica's one link, one transfer at a time in the order they were asked for: tokens x
KV bytes a token / bandwidth + latency. With tensor parallelism every GPU moves its shard over
its own link at once, so a token's bytes are one GPU's. When the KV lands, the prefill replica
frees its blocks and the decode replica readmits the request as a swapped-out sequence is
(`Scheduler.kv_landed`): no prefill, and it decodes as soon as it fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from engine.records import KvTransfer
from scenarios.defaults import KV_TRANSFER_GBPS, KV_TRANSFER_LATENCY_S

from ..replica import Replica
from .dispatch import Dispatch


@dataclass(frozen=True)
class KvLink:
    """A prefill replica's link to the decode replicas."""

    bytes_per_token: float  # KV bytes of one token (one GPU's shard with tensor parallelism)
    bandwidth_gbps: float  # GB/s
    latency_s: float

    def transfer_s(self, tokens: int) -> float:
        """Seconds to move the KV of `tokens` tokens, once the link is free."""
        return tokens * self.bytes_per_token / (self.bandwidth_gbps * 1e9) + self.latency_s


def kv_link(config, hardware=None) -> KvLink:
    """The KV link of a resolved config: with cost.model "hardware" (`hardware`: its
    `HardwareSetup`) the GPU's interconnect and KV bytes per token per GPU, else the NumPy
    engine's float32 K and V rows over `KV_TRANSFER_GBPS`; `cluster.kv_transfer_gbps` and
    `kv_transfer_latency_s` override either."""
    if hardware is None:
        model = config.model
        per_token = 2 * model.n_layers * model.d_model * 4  # K and V, float32
        bandwidth, latency = KV_TRANSFER_GBPS, KV_TRANSFER_LATENCY_S
    else:
        per_token = hardware.plan.kv_bytes_per_token
        bandwidth = hardware.gpu.interconnect_bandwidth_gbs
        latency = hardware.gpu.interconnect_latency_us * 1e-6
    cluster = config.cluster
    return KvLink(per_token, _given(cluster.kv_transfer_gbps, bandwidth),
                  _given(cluster.kv_transfer_latency_s, latency))


def _given(value, default):
    return default if value is None else value


class Disaggregation(Dispatch):
    """The front end of a disaggregated cluster (`SimState.router`): routes new requests to
    the `prefill` replicas, and moves each request a prefill replica hands off to one of the
    `decode` replicas (`decode_policy`) over that prefill replica's `KvLink`."""

    def __init__(self, env, prefill: list[Replica], decode: list[Replica], policy,
                 decode_policy, report_delay_s: float, link: KvLink):
        super().__init__(env, prefill, policy, report_delay_s)
        self.decode = decode
        self.decode_policy = decode_policy
        self.link = link
        self.links = [simpy.Resource(env, capacity=1) for _ in prefill]  # FIFO, one at a time
        self.in_flight = 0  # sent to a prefill replica, neither done nor landed at a decode one

    def route(self, seq) -> Replica:
        self.in_flight += 1
        return super().route(seq)

    def done(self, seq) -> None:
        if seq.kv_transfer is None:  # it never left its prefill replica
            self.in_flight -= 1
        super().done(seq)

    def hand_off(self, seq, prefill: Replica, state) -> None:
        """`seq` sampled its first token at `prefill` (which let it go): note its times there,
        choose its decode replica and start moving its KV."""
        now = self.env.now
        super().done(seq)
        recorder = prefill.engine.recorder
        first_scheduled_s = recorder.step_times_s(seq.first_scheduled_step)[0]
        first_token_s = recorder.step_times_s(seq.first_token_step)[1]
        seq.kv_transfer = KvTransfer(prefill.index, first_scheduled_s, first_token_s, now)
        seq.forget_steps()
        loads = [replica.kv_log.at(now - self.report_delay_s) for replica in self.decode]
        self.send(seq, self.decode[self.decode_policy.choose(seq, loads)]).receive(seq)

    def fetch(self, seq, decode: Replica, state) -> None:
        """`decode` reserved blocks for `seq`: move its KV there from its prefill replica."""
        prefill = self.replicas[seq.kv_transfer.prefill_replica]
        self.env.process(self._move(seq, prefill, decode, state))

    def _move(self, seq, prefill: Replica, decode: Replica, state):
        """Wait for the prefill replica's link, move the KV; the prefill replica frees its
        blocks, the decode replica readmits the request."""
        tokens = decode.scheduler.tokens_to_move(seq)  # those it has not cached
        with self.links[prefill.index].request() as turn:
            yield turn
            yield self.env.timeout(self.link.transfer_s(tokens))
        seq.kv_transfer = seq.kv_transfer._replace(arrived_s=self.env.now)
        self.in_flight -= 1
        prefill.scheduler.kv_sent(seq)
        prefill.kv_log.kv_changed(self.env.now, prefill.scheduler.block_manager.num_used)
        prefill.wake()  # its freed blocks may admit what waits there
        decode.landed(seq)
        if state.drained():  # the last one: idle engines may end
            state.wake_all()
