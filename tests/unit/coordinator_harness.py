"""A sans-I/O GroupCoordinator driven by hand, for the coordinator and group-admin tests."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from pylog.replication import group_messages as gm
from pylog.replication.group_coordinator import GroupCoordinator
from pylog.replication.messages import ProduceRequest, ProduceResponse

GROUP = "g"


class Harness:
    """One coordinator leading every offsets partition; appends are kept as the partition's log.

    An append is written and acknowledged at once, or, while ``hold`` is set, written to the log at
    once (as the leader appends before waiting for its ISR) and acknowledged by :meth:`release`.
    """

    def __init__(self) -> None:
        self.co = GroupCoordinator(0)
        self.co.num_partitions = 1
        self.co.load(0, 0, [], 0)
        self.now = 0
        self.log: List[Tuple[bytes, Any]] = []
        self.inbox: Dict[str, List[Any]] = {}
        self.corr = 0
        self.hold = False
        self.held: List[ProduceRequest] = []

    def deliver(self, out) -> None:
        for dst, msg in out.items:
            if isinstance(msg, ProduceRequest):
                self.log.extend((r.key, r.value) for r in msg.records)
                if self.hold:
                    self.held.append(msg)
                else:
                    self._ack(msg)
            else:
                self.inbox.setdefault(dst, []).append(msg)

    def _ack(self, msg: ProduceRequest, error: Any = None) -> None:
        resp = (ProduceResponse(msg.topic, msg.partition, msg.correlation_id, error=error, message="injected")
                if error is not None else ProduceResponse(msg.topic, msg.partition, msg.correlation_id, base_offset=0))
        self.deliver(self.co.on_produce_response(resp, self.now))
        self.co._check()

    def release(self, error: Any = None) -> None:
        """Acknowledge the held appends in order (or fail them all with ``error``); stop holding."""
        self.hold = False
        held, self.held = self.held, []
        for msg in held:
            self._ack(msg, error)

    def reload(self, compacted: bool = False) -> GroupCoordinator:
        """A new coordinator loads the log as it is now (a failover); ``compacted``: as the cleaner leaves
        it once tombstones are past ``delete_retention_ms`` (last value per key, tombstones gone)."""
        entries = list(self.log)
        if compacted:
            last = {k: i for i, (k, _) in enumerate(entries)}
            entries = [(k, v) for i, (k, v) in enumerate(entries) if last[k] == i and v is not None]
        co = GroupCoordinator(0)
        co.num_partitions = 1
        co.load(0, 1, entries, self.now)
        self.co = co
        return co

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
