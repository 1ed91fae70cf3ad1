"""TxnOffsetCommit on a real in-process cluster (3 brokers, ``__consumer_offsets`` RF 3): the request over the
transport to the group coordinator, the COMMIT/ABORT markers through WriteTxnMarkersRequest to the offsets
partition's leader (as the transaction coordinator sends them), OffsetFetch with and without require_stable,
a read_committed consumer, and a coordinator failover in the middle (the new leader loads the
transactional records and the markers from the log)."""
from __future__ import annotations

from typing import Any, List

import pytest

from pylog.client._node import ClientNode
from pylog.cluster import Cluster
from pylog.errors import InvalidProducerEpochError, UnstableOffsetCommitError
from pylog.replication import group_messages as gm
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group
from pylog.replication.txn_coordinator import TxnMarker
from pylog.replication.txn_messages import TxnOffsetCommitRequest, WriteTxnMarkersRequest

GROUP = "copier"
PID_A, PID_B = 4242, 4343


class Wire:
    """A client node on the cluster's transport: one request, wait for its answer (simulated time)."""

    def __init__(self, c: Cluster):
        self.c = c
        self.node = ClientNode("txngroup-test", c.scheduler, c.transport)

    def call(self, dst: Any, make: Any, timeout_ms: int = 60_000) -> Any:
        box: List[Any] = []
        self.c.scheduler.run_sync(lambda: self.node.request(dst, make(self.node.next_corr()), timeout_ms, box.append))
        for _ in range(timeout_ms // 10 + 10):
            if box:
                return box[0]
            self.c.advance(10)
        raise AssertionError(f"no answer from {dst}")

    def partition(self) -> int:
        return partition_for_group(GROUP, self.c.store.topics[OFFSETS_TOPIC].partitions)

    def coordinator(self) -> int:
        for _ in range(300):
            ask = next(b for b, broker in sorted(self.c.brokers.items()) if broker.running)
            resp = self.call(ask, lambda corr: gm.FindCoordinatorRequest(GROUP, corr))
            if resp.error is None and self.c.brokers[resp.node_id].running:
                return resp.node_id
            self.c.advance(100)
        raise AssertionError("no group coordinator")

    def fetch(self, *tps: Any, stable: bool = False) -> gm.OffsetFetchResponse:
        for _ in range(200):
            resp = self.call(self.coordinator(), lambda corr: gm.OffsetFetchRequest(GROUP, corr, partitions=tps,
                                                                                    require_stable=stable))
            if resp.error is None:
                return resp
            self.c.advance(100)  # a coordinator still loading after a failover
        raise AssertionError("OffsetFetch kept failing")

    def txn_commit(self, pid: int, offsets: Any, epoch: int = 0) -> Any:
        return self.call(self.coordinator(), lambda corr: TxnOffsetCommitRequest(
            f"tx-{pid}", GROUP, pid, epoch, corr, offsets=tuple((t, p, o, -1, "") for (t, p), o in offsets.items())))

    def marker(self, pid: int, committed: bool, coordinator_epoch: int = 0, epoch: int = 0) -> Any:
        p = self.partition()
        m = TxnMarker(OFFSETS_TOPIC, p, pid, epoch, coordinator_epoch, committed)
        resp = self.call(self.c.leader_of(OFFSETS_TOPIC, p), lambda corr: WriteTxnMarkersRequest((m,), corr))
        return resp.results[0][1]


@pytest.fixture
def sim(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=17)
    c.create_topic("in", partitions=2, replication_factor=3)
    c.ensure_offsets_topic()
    yield c
    c.close()


def test_txn_offsets_commit_on_the_marker_and_survive_a_coordinator_failover(sim):
    w = Wire(sim)
    assert w.txn_commit(PID_A, {("in", 0): 10, ("in", 1): 11}).error is None
    # not visible yet; unstable for a require_stable fetch
    assert w.fetch(("in", 0), ("in", 1)).offsets == (("in", 0, -1, -1, ""), ("in", 1, -1, -1, ""))
    resp = w.fetch(("in", 0), ("in", 1), stable=True)
    assert resp.partition_errors == (("in", 0, UnstableOffsetCommitError), ("in", 1, UnstableOffsetCommitError))
    # the COMMIT marker on the offsets partition's leader materializes them (marker_listener -> complete_txn)
    assert w.marker(PID_A, True) is None
    resp = w.fetch(("in", 0), ("in", 1), stable=True)
    assert resp.partition_errors == () and resp.offsets == (("in", 0, 10, -1, ""), ("in", 1, 11, -1, ""))

    # a second transaction stays open across a crash of the coordinator's broker
    assert w.txn_commit(PID_B, {("in", 0): 20}).error is None
    old = w.coordinator()
    sim.stop_broker(old, clean=False)
    new = w.coordinator()
    assert new != old
    # the new coordinator loaded the committed offsets and the open transaction from the log
    assert w.fetch(("in", 0), ("in", 1)).offsets == (("in", 0, 10, -1, ""), ("in", 1, 11, -1, ""))
    assert w.fetch(("in", 0), stable=True).partition_errors == (("in", 0, UnstableOffsetCommitError),)
    # its ABORT (from the new leader; a fence: epoch 1) drops the pending offset
    assert w.marker(PID_B, False, coordinator_epoch=1, epoch=1) is None
    resp = w.fetch(("in", 0), stable=True)
    assert resp.partition_errors == () and resp.offsets == (("in", 0, 10, -1, ""),)
    # the fenced producer's late TxnOffsetCommit (epoch 0) is refused
    assert w.txn_commit(PID_B, {("in", 0): 30}).error is InvalidProducerEpochError
    assert w.fetch(("in", 0), stable=True).partition_errors == ()
    sim.start_broker(old)


def test_read_committed_consumer_waits_for_stable_offsets(sim):
    w = Wire(sim)
    assert w.txn_commit(PID_A, {("in", 0): 7}).error is None
    plain = sim.consumer(group_id=GROUP, enable_auto_commit=False)
    committed = sim.consumer(group_id=GROUP, enable_auto_commit=False, isolation_level="read_committed")
    try:
        assert plain.committed("in", 0) is None  # read_uncommitted: the last committed offset, none yet
        with pytest.raises(UnstableOffsetCommitError, match="in-0 in group 'copier' is not stable"):
            committed.committed("in", 0, timeout=1.0)  # retried until the timeout, then raised
        assert w.marker(PID_A, True) is None
        assert committed.committed("in", 0) == 7
        assert plain.committed("in", 0) == 7
    finally:
        plain.close()
        committed.close()
