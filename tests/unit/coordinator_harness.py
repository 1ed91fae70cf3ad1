"""A sans-I/O GroupCoordinator driven by hand, for the coordinator and group-admin tests."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from pylog.record import iter_batches
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
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
        #: the partition's log with offsets, batch headers and transaction markers (what a reload reads)
        self.entries: List[ot.LogEntry] = []
        self.inbox: Dict[str, List[Any]] = {}
        self.corr = 0
        self.hold = False
        self.held: List[ProduceRequest] = []
        self.bases: Dict[int, int] = {}

    def deliver(self, out) -> None:
        for dst, msg in out.items:
            if isinstance(msg, ProduceRequest):
                base = len(self.entries)
                if isinstance(msg.records, (bytes, bytearray)):  # a TxnOffsetCommit's transactional batch
                    (batch,) = iter_batches(msg.records)
                    head = (batch.producer_id, batch.producer_epoch, batch.is_transactional)
                    records = batch.records()
                else:
                    head, records = (-1, -1, False), list(msg.records)
                self.log.extend((r.key, r.value) for r in records)
                self.entries.extend(ot.LogEntry(r.key, r.value, base + i, *head) for i, r in enumerate(records))
                self.bases[msg.correlation_id] = base
                if self.hold:
                    self.held.append(msg)
                else:
                    self._ack(msg)
            else:
                self.inbox.setdefault(dst, []).append(msg)

    def marker(self, producer_id: int, committed: bool, epoch: int = 0) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` is written and committed on the partition."""
        self.entries.append(ot.LogEntry(None, None, len(self.entries), producer_id, epoch, True, committed))
        self.deliver(self.co.complete_txn(0, producer_id, committed, self.now, producer_epoch=epoch))
        self.co._check()

    def _ack(self, msg: ProduceRequest, error: Any = None) -> None:
        base = self.bases.pop(msg.correlation_id)
        resp = (ProduceResponse(msg.topic, msg.partition, msg.correlation_id, error=error, message="injected")
                if error is not None else ProduceResponse(msg.topic, msg.partition, msg.correlation_id, base_offset=base))
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
        entries: List[Any] = list(self.entries)
        if compacted:
            pairs = list(self.log)
            last = {k: i for i, (k, _) in enumerate(pairs)}
            entries = [(k, v) for i, (k, v) in enumerate(pairs) if last[k] == i and v is not None]
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
