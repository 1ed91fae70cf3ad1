"""A sans-I/O GroupCoordinator driven by hand, for the coordinator and group-admin tests."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from pylog.replication import group_messages as gm
from pylog.replication.group_coordinator import GroupCoordinator
from pylog.replication.messages import ProduceRequest, ProduceResponse

GROUP = "g"


class Harness:
    """One coordinator leading every offsets partition; appends succeed and are kept as the partition's log."""

    def __init__(self) -> None:
        self.co = GroupCoordinator(0)
        self.co.num_partitions = 1
        self.co.load(0, 0, [], 0)
        self.now = 0
        self.log: List[Tuple[bytes, Any]] = []
        self.inbox: Dict[str, List[Any]] = {}
        self.corr = 0

    def deliver(self, out) -> None:
        for dst, msg in out.items:
            if isinstance(msg, ProduceRequest):
                self.log.extend((r.key, r.value) for r in msg.records)
                self.deliver(self.co.on_produce_response(
                    ProduceResponse(msg.topic, msg.partition, msg.correlation_id, base_offset=0), self.now))
            else:
                self.inbox.setdefault(dst, []).append(msg)

    def send(self, client: str, msg) -> None:
        self.deliver(self.co.handle(client, msg, self.now))
        self.co._check()

    def take(self, client: str) -> List[Any]:
        return self.inbox.pop(client, [])

    def next(self) -> int:
        self.corr += 1
        return self.corr

    def join(self, client: str, member: str = "", protocols=(("range", b"r"),), rebalance_ms: int = 1_000) -> None:
        self.send(client, gm.JoinGroupRequest(GROUP, self.next(), member_id=member, session_timeout_ms=10_000,
                                              rebalance_timeout_ms=rebalance_ms, protocols=protocols, client_id=client))

    def tick(self, ms: int) -> None:
        self.now += ms
        self.deliver(self.co.tick(self.now))
        self.co._check()
