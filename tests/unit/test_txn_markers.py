"""WriteTxnMarkers on the partition leaders (issue 17, the partition side): a real in-process cluster (3
brokers, RF 3, min ISR 2); transactional batches go in through ProduceRequest and COMMIT/ABORT markers
through WriteTxnMarkersRequest sent over the transport, as the transaction coordinator sends them."""
from __future__ import annotations

from typing import Any, List

import pytest
from txn_wire import PID_A, PID_B, Wire, replica

from pylog.cluster import Cluster
from pylog.errors import (
    InvalidProducerEpochError,
    KafkaStorageError,
    NotLeaderError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
)
from pylog.replication.txn_coordinator import TxnMarker
from pylog.replication.messages import StopReplicaRequest
from pylog.replication.txn_messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse


@pytest.fixture
def sim(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=11)
    c.create_topic("t", partitions=2, replication_factor=3, min_insync_replicas=2)
    yield c
    c.close()


def control_offsets(part: Any) -> List[int]:
    log = part.log
    return [b.base_offset for b in log.read_batches(0, 1 << 20) if b.is_control]


def test_marker_is_answered_once_committed_and_replicated(sim):
    w = Wire(sim)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a", b"b"])
    leader = sim.leader_of("t", 0)
    lead = replica(sim, leader)
    assert lead.last_stable_offset == 0  # the open transaction holds the LSO at its first offset
    assert w.end_txn("t", 0, PID_A, 0, committed=True) is None
    # answered only once the HW passed the marker (acks=all): every ISR member has it
    assert lead.high_watermark == 3 and lead.last_stable_offset == 3
    sim.advance(1_000)  # the followers learn the HW
    for b in sim.brokers:
        assert control_offsets(replica(sim, b)) == [2], b
        ps = replica(sim, b).log.producer_state
        assert ps.first_unstable_offset is None, b
        # the HW passed the marker: the completed transaction is forgotten (onHighWatermarkUpdated)
        assert not ps.unreplicated, (b, ps.unreplicated)


def test_marker_answer_waits_for_the_isr(sim):
    """acks=all: with the followers cut off the marker is appended but not answered, until the request
    times out (RequestTimedOutError)."""
    w = Wire(sim)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a"])
    leader = sim.leader_of("t", 0)
    others = [b for b in sim.brokers if b != leader]
    sim.partition_network([leader], others)
    m = TxnMarker("t", 0, PID_A, 0, 0, True)
    box: List[Any] = []
    sim.scheduler.run_sync(lambda: w.node.request(leader, WriteTxnMarkersRequest((m,), 999), 120_000, box.append))
    sim.advance(2_000)
    assert box == []  # appended, not committed: no answer yet
    assert control_offsets(replica(sim, leader)) == [1]
    sim.advance(40_000)  # past request_timeout_ms (30 s); the ISR cannot shrink (controller unreachable)
    assert len(box) == 1 and box[0].results[0][1] is RequestTimedOutError, box


def test_marker_to_a_follower_gets_not_leader(sim):
    w = Wire(sim)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a"])
    follower = next(b for b in sim.brokers if b != sim.leader_of("t", 0))
    m = TxnMarker("t", 0, PID_A, 0, 0, True)
    resp = w.markers(follower, m)
    assert resp.results == ((m, NotLeaderError),)
    assert control_offsets(replica(sim, follower)) == []
    # an unknown partition too
    m2 = TxnMarker("nope", 0, PID_A, 0, 0, True)
    assert w.markers(follower, m2).results == ((m2, NotLeaderError),)


def test_stale_coordinator_epoch_is_fenced_and_old_producer_epoch_refused(sim):
    w = Wire(sim)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a"])
    assert w.end_txn("t", 0, PID_A, 0, committed=False, coordinator_epoch=5) is None
    leader = sim.leader_of("t", 0)
    end = replica(sim, leader).log_end_offset
    # a zombie coordinator (epoch 4) retries a marker: fenced, nothing written
    assert w.end_txn("t", 0, PID_A, 0, committed=True, coordinator_epoch=4) is TransactionCoordinatorFencedError
    # the new coordinator fenced the producer with epoch 1; a marker of epoch 0 is refused
    w.produce_txn("t", 0, PID_A, 1, 0, [b"b"])
    assert w.end_txn("t", 0, PID_A, 0, committed=True, coordinator_epoch=5) is InvalidProducerEpochError
    assert replica(sim, leader).log_end_offset == end + 1  # only the epoch-1 batch was added


def test_one_request_answers_markers_of_several_partitions_in_order(sim):
    w = Wire(sim)
    leaders = {p: sim.leader_of("t", p) for p in (0, 1)}
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a"])
    w.produce_txn("t", 1, PID_A, 0, 0, [b"b"])
    dst = leaders[0]
    ms = (TxnMarker("t", 0, PID_A, 0, 0, True), TxnMarker("t", 1, PID_A, 0, 0, True))
    resp = w.markers(dst, *ms)
    want = (None, None) if leaders[1] == dst else (None, NotLeaderError)
    assert tuple(mk for mk, _ in resp.results) == ms and tuple(e for _, e in resp.results) == want


def test_marker_listener_called_once_per_committed_marker(sim):
    w = Wire(sim)
    heard: List[Any] = []
    for b in sim.brokers:
        sim.brokers[b].rm.marker_listener = lambda *args, b=b: heard.append((b,) + args)
    leader = sim.leader_of("t", 0)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a"])
    w.produce_txn("t", 0, PID_B, 0, 0, [b"b"])
    assert w.end_txn("t", 0, PID_A, 0, committed=True) is None
    assert w.end_txn("t", 0, PID_B, 0, committed=False) is None
    # refused markers are not heard of
    follower = next(b for b in sim.brokers if b != leader)
    w.markers(follower, TxnMarker("t", 0, PID_A, 0, 0, True))
    assert w.end_txn("t", 0, PID_A, 0, committed=True, coordinator_epoch=0) is None  # a retry: a second marker
    sim.advance(1_000)
    assert heard == [(leader, "t", 0, PID_A, True), (leader, "t", 0, PID_B, False), (leader, "t", 0, PID_A, True)]


def test_marker_pending_when_the_leader_stops_gets_not_leader(sim):
    """A marker appended but not yet committed when its replica stops leading is answered NotLeaderError
    (the coordinator retries at the new leader), and the listener does not hear of it."""
    w = Wire(sim)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a"])
    leader = sim.leader_of("t", 0)
    rm = sim.brokers[leader].rm
    heard: List[Any] = []
    rm.marker_listener = lambda *args: heard.append(args)
    sim.partition_network([leader], [b for b in sim.brokers if b != leader])
    box: List[Any] = []
    m = TxnMarker("t", 0, PID_A, 0, 0, True)
    sim.scheduler.run_sync(lambda: w.node.request(leader, WriteTxnMarkersRequest((m,), 4343), 120_000, box.append))
    sim.advance(100)
    assert box == [] and len(rm.delayed_produce[("t", 0)]) == 1
    out = sim.scheduler.run_sync(lambda: rm.handle("controller", StopReplicaRequest(rm.controller_epoch, "t", 0),
                                                   sim.now_ms))
    answers = [msg for _, msg in out.items if isinstance(msg, WriteTxnMarkersResponse)]
    assert len(answers) == 1 and answers[0].results == ((m, NotLeaderError),)
    assert heard == []


@pytest.mark.parametrize("raised", [KafkaStorageError("disk gone"), OSError(5, "EIO")])
def test_failing_disk_answers_kafka_storage_error(sim, raised):
    w = Wire(sim)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a"])
    part = replica(sim, sim.leader_of("t", 0))

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise raised

    part.log.append_marker = fail
    m = TxnMarker("t", 0, PID_A, 0, 0, False)
    assert w.markers(sim.leader_of("t", 0), m).results == ((m, KafkaStorageError),)
