"""Leader-side idempotence through the ReplicaManager (sans-I/O): duplicates, gaps, fencing, InitProducerId, follower state."""
from __future__ import annotations

import os

from pylog.errors import BrokerNotAvailableError, InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from pylog.replication.messages import (
    FetchRequest,
    InitProducerIdRequest,
    LeaderAndIsrRequest,
    PartitionState,
    ProduceRequest,
    ProduceResponse,
)
from pylog.replication.replica_manager import ReplicaManager
from pylog.record import encode_batch


def leader_rm(tmp_path, block=(100, 3)) -> ReplicaManager:
    rm = ReplicaManager(0, os.path.join(tmp_path, "broker-0"), clock_ms=lambda: 0)
    st = PartitionState("t", 0, (0,), 0, 0, (0,), 0, 1)
    rm.handle(9, LeaderAndIsrRequest(9, 1, (st,), -1, (), block), 0)
    return rm


def batch(pid, epoch, seq, n=2, tag=b"v"):
    return bytes(encode_batch([tag + b"%d" % i for i in range(n)], now_ms=1000, producer_id=pid,
                              producer_epoch=epoch, base_sequence=seq))


def produce(rm, data, corr=1) -> ProduceResponse:
    out = rm.handle("client", ProduceRequest("t", 0, data, 1, 500, corr), 0).items
    assert len(out) == 1
    return out[0][1]


def test_duplicate_returns_original_offsets_and_appends_nothing(tmp_path):
    rm = leader_rm(tmp_path)
    a, b = batch(5, 0, 0), batch(5, 0, 2)
    assert produce(rm, a).base_offset == 0
    assert produce(rm, b).base_offset == 2
    again = produce(rm, a, corr=3)  # a retry of the first batch, byte for byte
    assert again.error is None and again.base_offset == 0
    p = rm.partitions[("t", 0)]
    assert p.log_end_offset == 4 and p.duplicates == 1


def test_gap_and_fenced_epoch_are_refused(tmp_path):
    rm = leader_rm(tmp_path)
    assert produce(rm, batch(5, 1, 0)).error is None
    r = produce(rm, batch(5, 1, 5))
    assert r.error is OutOfOrderSequenceError and "expected 2" in r.message and "t-0" in r.message
    assert produce(rm, batch(5, 0, 2)).error is InvalidProducerEpochError
    assert produce(rm, batch(5, 2, 3)).error is OutOfOrderSequenceError  # a new epoch starts at 0
    assert produce(rm, batch(5, 2, 0)).error is None
    assert rm.partitions[("t", 0)].log_end_offset == 4


def test_a_request_carries_exactly_one_batch(tmp_path):
    rm = leader_rm(tmp_path)
    r = produce(rm, batch(5, 0, 0) + batch(5, 0, 2))
    assert r.error is InvalidRecordError and rm.partitions[("t", 0)].log_end_offset == 0


def test_init_producer_id_hands_out_the_granted_block(tmp_path):
    rm = leader_rm(tmp_path, block=(100, 2))
    ids = [rm.handle("c", InitProducerIdRequest(i), 0).items[0][1] for i in range(3)]
    assert [(r.producer_id, r.producer_epoch) for r in ids[:2]] == [(100, 0), (101, 0)]
    assert ids[2].error is BrokerNotAvailableError  # block used up: the client tries another broker
    # The same block repeated in a later LeaderAndIsr does not reset the cursor; a new one does.
    st = rm.partitions[("t", 0)]
    rm.handle(9, LeaderAndIsrRequest(9, 1, (), -1, (), (100, 2)), 0)
    assert rm.handle("c", InitProducerIdRequest(9), 0).items[0][1].error is BrokerNotAvailableError
    rm.handle(9, LeaderAndIsrRequest(9, 1, (), -1, (), (500, 10)), 0)
    assert rm.handle("c", InitProducerIdRequest(10), 0).items[0][1].producer_id == 500
    assert st.role == "leader"


def test_follower_builds_the_same_state_and_dedups_after_failover(tmp_path):
    leader = leader_rm(tmp_path)
    st = PartitionState("t", 0, (0, 1), 0, 0, (0, 1), 0, 1)
    leader.handle(9, LeaderAndIsrRequest(9, 2, (st,)), 0)
    follower = ReplicaManager(1, os.path.join(tmp_path, "broker-1"), clock_ms=lambda: 0)
    follower.handle(9, LeaderAndIsrRequest(9, 2, (st,)), 0)
    a = batch(7, 0, 0, n=3)
    assert produce(leader, a).base_offset == 0
    fetched = leader.handle(1, FetchRequest(1, "t", 0, 0, 0, 1), 0).items[0][1]
    fp = follower.partitions[("t", 0)]
    fp.follower_state = "fetching"
    fp.on_fetch_response(FetchRequest(1, "t", 0, 0, 0, 1), fetched, 0)
    assert fp.log_end_offset == 3
    assert {pid: list(e.batches) for pid, e in fp.producer_state.producers.items()} == {
        pid: list(e.batches) for pid, e in leader.partitions[("t", 0)].producer_state.producers.items()}
    # Failover: the follower leads and recognises the retry.
    st2 = PartitionState("t", 0, (0, 1), 1, 1, (1,), 1, 1)
    follower.handle(9, LeaderAndIsrRequest(9, 3, (st2,)), 0)
    r = produce(follower, a, corr=5)
    assert r.error is None and r.base_offset == 0 and fp.log_end_offset == 3


def test_isr_shrink_and_expand_are_counted(tmp_path):
    from pylog.replication.messages import AlterPartitionResponse
    from pylog.replication.partition import Partition
    from pylog.storage.log import Log

    p = Partition(0, Log.open(os.path.join(tmp_path, "b0", "t-0"), clock_ms=lambda: 0), replica_lag_time_max_ms=1_000)
    st = PartitionState("t", 0, (0, 1, 2), 0, 0, (0, 1, 2), 0, 1)
    p.apply_state(st, 0)
    alter = p.maybe_shrink_isr(5_000)  # followers 1 and 2 never fetched
    assert alter is not None and alter.new_isr == (0,)
    shrunk = PartitionState("t", 0, (0, 1, 2), 0, 0, (0,), 1, 1)
    assert p.on_alter_partition_response(AlterPartitionResponse("t", 0, None, "", shrunk), 5_000)
    assert (p.isr_shrinks, p.isr_expands) == (1, 0)
    p.handle_fetch(FetchRequest(1, "t", 0, 0, 0, 1), 6_000)
    grown = PartitionState("t", 0, (0, 1, 2), 0, 0, (0, 1), 2, 1)
    assert p.on_alter_partition_response(AlterPartitionResponse("t", 0, None, "", grown), 6_000)
    assert (p.isr_shrinks, p.isr_expands) == (1, 1)
    # A stale response (older partition epoch) changes nothing and counts nothing.
    assert not p.on_alter_partition_response(AlterPartitionResponse("t", 0, None, "", shrunk), 6_000)
    assert (p.isr_shrinks, p.isr_expands) == (1, 1)
    p.log.close()
