"""The read_committed read path (issue 17, the read side): a real in-process cluster (3 brokers, RF 3, min
ISR 2); transactional batches go in through ProduceRequest, markers through WriteTxnMarkersRequest over the
transport (tests/unit/txn_wire.py). A read_committed consumer sees committed transactions
whole and never aborted or open ones, stops at the LSO while a transaction is open, moves its position past
markers and aborted data; read_uncommitted sees every data record; ListOffsets / end_offsets / lag by level;
after a leader failover the new leader's LSO and aborted list are right."""
from __future__ import annotations

from typing import Any, List

import pytest
from txn_wire import PID_A, PID_B, Wire, replica

from pylog.client.types import TopicPartition
from pylog.cluster import Cluster
from pylog.record import iter_batches
from pylog.replication.messages import FetchRequest, FetchResponse

PID_C = 9003


@pytest.fixture
def sim(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=13)
    c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
    yield c
    c.close()


def plain(w: Wire, *values: bytes) -> None:
    w.produce_txn("t", 0, -1, -1, -1, list(values), transactional=False)


def fetch(w: Wire, broker: Any, offset: int, level: int, max_bytes: int = 1 << 20) -> FetchResponse:
    resp = w.call(broker, lambda corr: FetchRequest(-1, "t", 0, offset, -1, corr, max_bytes=max_bytes,
                                                    isolation_level=level))
    assert isinstance(resp, FetchResponse) and resp.error is None, resp
    return resp


def drain(cons: Any, rounds: int = 8) -> List[bytes]:
    got: List[bytes] = []
    for _ in range(rounds):
        got += [r.value for r in cons.poll(0.3)]
    return got


def history(sim: Cluster, w: Wire) -> None:
    """offsets: 0 p0 | 1 a1 2 a2 (A) | 3 b1 (B) | 4 p1 | 5 COMMIT A | 6 c1 (C) | 7 ABORT B | 8 a3 (A)
    | 9 ABORT A | 10 p2 | 11 COMMIT C   (B and A's second transaction aborted)"""
    plain(w, b"p0")
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a1", b"a2"])
    w.produce_txn("t", 0, PID_B, 0, 0, [b"b1"])
    plain(w, b"p1")
    assert w.end_txn("t", 0, PID_A, 0, committed=True) is None
    w.produce_txn("t", 0, PID_C, 0, 0, [b"c1"])
    assert w.end_txn("t", 0, PID_B, 0, committed=False) is None
    w.produce_txn("t", 0, PID_A, 0, 2, [b"a3"])
    assert w.end_txn("t", 0, PID_A, 0, committed=False) is None
    plain(w, b"p2")
    assert w.end_txn("t", 0, PID_C, 0, committed=True) is None


COMMITTED = [b"p0", b"a1", b"a2", b"p1", b"c1", b"p2"]
EVERYTHING = [b"p0", b"a1", b"a2", b"b1", b"p1", b"c1", b"a3", b"p2"]


def test_leader_fetch_fields_by_level(sim):
    w = Wire(sim)
    plain(w, b"p0")
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a1"])
    plain(w, b"p1")
    leader = sim.leader_of("t", 0)
    rc = fetch(w, leader, 0, 1)
    assert (rc.high_watermark, rc.last_stable_offset, rc.aborted_transactions) == (3, 1, ())
    assert [b.base_offset for b in _batches(rc.records)] == [0]  # nothing at or above the LSO
    assert fetch(w, leader, 1, 1).records == b""
    ru = fetch(w, leader, 0, 0)
    assert (ru.last_stable_offset, ru.aborted_transactions) == (-1, ())  # read_uncommitted: not filled
    assert [b.base_offset for b in _batches(ru.records)] == [0, 1, 2]
    assert w.end_txn("t", 0, PID_A, 0, committed=False) is None
    rc = fetch(w, leader, 0, 1)
    assert (rc.last_stable_offset, rc.aborted_transactions) == (4, ((PID_A, 1),))
    # the abort is listed for a fetch from inside the transaction, not for one past its marker
    assert fetch(w, leader, 2, 1).aborted_transactions == ((PID_A, 1),)
    assert fetch(w, leader, 4, 1).aborted_transactions == ()
    # a fetch that ends before the aborted transaction starts does not list it
    assert fetch(w, leader, 0, 1, max_bytes=1).aborted_transactions == ()


def _batches(data: bytes) -> List[Any]:
    return list(iter_batches(data))


def test_read_committed_consumer_sees_committed_transactions_whole(sim):
    w = Wire(sim)
    history(sim, w)
    rc = sim.consumer(None, isolation_level="read_committed", fetch_max_wait_ms=100)
    rc.assign([("t", 0)])
    ru = sim.consumer(None, isolation_level="read_uncommitted", fetch_max_wait_ms=100)
    ru.assign([("t", 0)])
    rc.seek("t", 0, 0)
    ru.seek("t", 0, 0)
    assert drain(rc) == COMMITTED
    assert drain(ru) == EVERYTHING
    # the position moved past the last markers: nothing left to read, no lag
    assert rc.position("t", 0) == 12 and rc.lag() == {("t", 0): 0}
    rc._check()


@pytest.mark.parametrize("max_bytes", [1, 200])
def test_small_fetches_cut_transactions_anywhere(sim, max_bytes):
    """One batch (or a few) per fetch: an aborted transaction's marker comes in a later fetch than its
    records, a fetch begins inside one; the result is the same."""
    w = Wire(sim)
    history(sim, w)
    rc = sim.consumer(None, isolation_level="read_committed", fetch_max_wait_ms=100,
                      max_partition_fetch_bytes=max_bytes)
    rc.assign([("t", 0)])
    rc.seek("t", 0, 0)
    assert drain(rc, 20) == COMMITTED
    assert rc.position("t", 0) == 12
    for start, want in ((3, [b"p1", b"c1", b"p2"]), (8, [b"p2"])):  # from inside aborted transactions
        rc.seek("t", 0, start)
        assert drain(rc, 12) == want, start


def test_consumer_stops_at_the_lso_and_continues_after_the_marker(sim):
    w = Wire(sim)
    plain(w, b"p0")
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a1"])
    plain(w, b"p1")
    rc = sim.consumer(None, isolation_level="read_committed", fetch_max_wait_ms=500)
    rc.assign([("t", 0)])
    rc.seek("t", 0, 0)
    ru = sim.consumer(None, fetch_max_wait_ms=100)
    ru.assign([("t", 0)])
    ru.seek("t", 0, 0)
    assert drain(rc) == [b"p0"]
    assert rc.position("t", 0) == 1  # stopped at the open transaction's first offset
    assert rc.lag() == {("t", 0): 0} and rc.highwater("t", 0) == 3
    assert drain(ru) == [b"p0", b"a1", b"p1"]
    assert rc.end_offsets([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 1}
    assert ru.end_offsets([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 3}
    assert w.end_txn("t", 0, PID_A, 0, committed=True) is None
    assert drain(rc) == [b"a1", b"p1"]
    assert rc.position("t", 0) == 4
    assert rc.end_offsets([TopicPartition("t", 0)]) == {TopicPartition("t", 0): 4}
    # an open transaction aborted later: nothing of it, the position past its marker
    w.produce_txn("t", 0, PID_B, 0, 0, [b"b1", b"b2"])
    assert drain(rc) == [] and rc.position("t", 0) == 4
    assert w.end_txn("t", 0, PID_B, 0, committed=False) is None
    assert drain(rc) == [] and rc.position("t", 0) == 7  # b1 b2 at 4-5, the marker at 6
    rc._check()


def test_reset_to_latest_under_read_committed_is_the_lso(sim):
    w = Wire(sim)
    plain(w, b"p0")
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a1"])
    rc = sim.consumer(None, isolation_level="read_committed", auto_offset_reset="latest", fetch_max_wait_ms=100)
    rc.assign([("t", 0)])
    assert rc.position("t", 0) == 1
    assert w.end_txn("t", 0, PID_A, 0, committed=True) is None
    assert drain(rc) == [b"a1"]


def test_parked_read_committed_fetch_waits_for_the_lso_not_the_hw(sim):
    """A read_committed fetch parked at the LSO stays parked while the HW moves under an open transaction
    (nothing new to read) and is answered when the marker's commit moves the LSO."""
    w = Wire(sim)
    w.produce_txn("t", 0, PID_A, 0, 0, [b"a1"])
    leader = sim.leader_of("t", 0)
    rm = sim.brokers[leader].rm
    box: List[Any] = []
    sim.scheduler.run_sync(lambda: w.node.request(
        leader, FetchRequest(-1, "t", 0, 0, -1, 4242, max_wait_ms=60_000, isolation_level=1), 120_000, box.append))
    sim.advance(50)
    assert box == [] and len(rm.delayed_fetch.get(("t", 0), [])) == 1
    plain(w, b"p1")  # the HW moves to 2; the LSO stays at 0
    sim.advance(50)
    assert replica(sim, leader).high_watermark == 2
    assert box == [], box  # still parked
    assert w.end_txn("t", 0, PID_A, 0, committed=True) is None
    sim.advance(50)
    assert len(box) == 1 and box[0].last_stable_offset == 3
    assert [b.base_offset for b in _batches(box[0].records)] == [0, 1, 2]


@pytest.mark.parametrize("clean", [True, False])
def test_new_leader_after_failover_has_the_lso_and_aborted_list(sim, clean):
    w = Wire(sim)
    history(sim, w)
    w.produce_txn("t", 0, PID_B, 0, 1, [b"open"])  # offset 12, left open
    plain(w, b"p3")
    old = sim.leader_of("t", 0)
    before = fetch(w, old, 0, 1)
    assert before.last_stable_offset == 12
    assert sorted(before.aborted_transactions) == [(PID_A, 8), (PID_B, 3)]
    sim.stop_broker(old, clean=clean)
    for _ in range(200):
        sim.advance(100)
        new = sim.leader_of("t", 0)
        if new is not None and new >= 0 and new != old and replica(sim, new).is_leader:
            break
    assert new != old
    # the followers replicated the markers: their .txnindex and open transactions are the leader's
    for b in sim.brokers:
        if b != old:
            assert [(a.producer_id, a.first_offset, a.last_offset) for a in replica(sim, b).log.aborted_transactions(0, 14)] \
                == [(PID_B, 3, 7), (PID_A, 8, 9)], b
    after = fetch(w, new, 0, 1)
    assert after.last_stable_offset == 12
    assert after.aborted_transactions == before.aborted_transactions
    rc = sim.consumer(None, isolation_level="read_committed", fetch_max_wait_ms=100)
    rc.assign([("t", 0)])
    rc.seek("t", 0, 0)
    assert drain(rc) == COMMITTED
    assert w.end_txn("t", 0, PID_B, 0, committed=False, coordinator_epoch=1) is None
    assert drain(rc) == [b"p3"]
