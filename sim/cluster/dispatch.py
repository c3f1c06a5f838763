"""The cluster's front end: which replica each new request goes to, on the replicas' loads as
reported, and the log of every send and finish that those loads are made of.
"""

from __future__ import annotations

from ..replica import Replica


class Dispatch:
    """The cluster's front end (`SimState.router`): routes each new request with `policy`
    on the replicas' loads as of `report_delay_s` ago, and logs every send and finish."""

    in_flight = 0  # requests on their way between replicas: none without disaggregation

    def __init__(self, env, replicas: list[Replica], policy, report_delay_s: float):
        self.env = env
        self.replicas = replicas
        self.policy = policy
        self.report_delay_s = report_delay_s
        self.replica_of: dict[int, Replica] = {}  # seq_id -> its replica, until it is done

    def route(self, seq) -> Replica:
        seen_s = self.env.now - self.report_delay_s
        loads = [replica.kv_log.at(seen_s) for replica in self.replicas]
        return self.send(seq, self.replicas[self.policy.choose(seq, loads)])

    def send(self, seq, replica: Replica) -> Replica:
        self.replica_of[seq.seq_id] = replica
        replica.kv_log.sent(self.env.now)
        return replica

    def done(self, seq) -> None:
        self.replica_of.pop(seq.seq_id).kv_log.done(self.env.now)
