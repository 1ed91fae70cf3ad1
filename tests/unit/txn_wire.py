"""A test client for the partition side of transactions: sends ProduceRequests of transactional batches
(built with :mod:`pylog.record`) and WriteTxnMarkersRequests over a cluster's transport, as the
transaction coordinator will, and waits for the answers (simulated clusters)."""
from __future__ import annotations

from typing import Any, List, Optional

from pylog.client._node import ClientNode
from pylog.cluster import Cluster
from pylog.record import Record, encode_batch
from pylog.replication.messages import ACKS_ALL, ProduceRequest
from pylog.replication.txn_coordinator import TxnMarker
from pylog.replication.txn_messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

PID_A, PID_B = 9001, 9002


class Wire:
    """A client node on the cluster's transport that sends one request and waits for its answer."""

    def __init__(self, c: Cluster):
        self.c = c
        self.node = ClientNode("txntest", c.scheduler, c.transport)

    def call(self, dst: Any, make: Any, timeout_ms: int = 60_000) -> Any:
        box: List[Any] = []

        def send() -> None:
            self.node.request(dst, make(self.node.next_corr()), timeout_ms, box.append)

        self.c.scheduler.run_sync(send)
        for _ in range(timeout_ms // 10 + 10):
            if box:
                return box[0]
            self.c.advance(10)
        raise AssertionError(f"no answer from {dst}")

    def produce_txn(self, topic: str, partition: int, pid: int, epoch: int, seq: int, values: List[bytes],
                    transactional: bool = True) -> Any:
        data = bytes(encode_batch([Record(value=v) for v in values], now_ms=self.c.now_ms, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=seq, transactional=transactional))
        leader = self.c.leader_of(topic, partition)
        resp = self.call(leader, lambda corr: ProduceRequest(topic, partition, data, ACKS_ALL, 30_000, corr))
        assert resp.error is None, resp
        return resp

    def markers(self, dst: Any, *markers: TxnMarker) -> WriteTxnMarkersResponse:
        resp = self.call(dst, lambda corr: WriteTxnMarkersRequest(tuple(markers), corr))
        assert isinstance(resp, WriteTxnMarkersResponse)
        return resp

    def end_txn(self, topic: str, partition: int, pid: int, epoch: int, committed: bool,
                coordinator_epoch: int = 0) -> Optional[type]:
        m = TxnMarker(topic, partition, pid, epoch, coordinator_epoch, committed)
        resp = self.markers(self.c.leader_of(topic, partition), m)
        assert [mk for mk, _ in resp.results] == [m]
        return resp.results[0][1]


def replica(c: Cluster, broker: int, topic: str = "t", partition: int = 0) -> Any:
    return c.brokers[broker].rm.partitions[(topic, partition)]
