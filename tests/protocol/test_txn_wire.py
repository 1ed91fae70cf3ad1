"""The transaction APIs on the wire against a live cluster, request by request (raw frames built and read
with kafka-python's schema classes): ApiVersions lists them, FindCoordinator type 1 names the leader of
the id's ``__transaction_state`` partition, a whole transaction (InitProducerId, AddPartitionsToTxn,
a transactional Produce, EndTxn) at every served version, several transactions at one epoch (no
KIP-890 bump for EndTxn < 5: the client would not know the new epoch), the fence answered with each
version's code, a transactional batch to a partition not in the transaction refused (KIP-890 part 1,
INVALID_TXN_STATE before Produce v11), and read_committed Fetch/ListOffsets around an open and an
aborted transaction."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
)

from pylog.protocol import codec
from pylog.record.batch import iter_batches
from pylog.record.codec import encode_batch
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC, partition_for_transactional_id

from .test_groups_wire import Conn

C = codec.ERROR_CODES
TOPIC = "t"
#: a liveness bound only
WAIT_S = 60.0


@pytest.fixture
def kc(pylog_kafka):
    pylog_kafka.transaction_state_partitions = 5  # as the fixture's __consumer_offsets: quicker to create
    pylog_kafka.create_topic(TOPIC, partitions=2, replication_factor=3)
    return pylog_kafka


def txn_coordinator(cluster: Any, tid: str, version: int = 3) -> Conn:
    """FindCoordinator type 1 until the coordinator is there (the first lookup creates the topic)."""
    c = Conn(cluster, 0)
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            resp = c.call(FindCoordinatorRequest, version, key=tid, key_type=1)
            if resp.error_code == 0:
                break
            assert resp.error_code in (C["COORDINATOR_NOT_AVAILABLE"], C["NOT_COORDINATOR"],
                                       C["COORDINATOR_LOAD_IN_PROGRESS"]), resp
            assert time.monotonic() < deadline, resp
            time.sleep(0.05)
    finally:
        c.close()
    parts = cluster.metadata.topics[TRANSACTION_STATE_TOPIC].partitions
    assert resp.node_id == cluster.leader_of(TRANSACTION_STATE_TOPIC, partition_for_transactional_id(tid, parts))
    assert (resp.host, resp.port) == cluster.kafka_server.address_of(resp.node_id)
    return Conn(cluster, resp.node_id)


def retry(fn: Any, code: Any = lambda r: r.error_code) -> Any:
    """Call ``fn()`` again while it answers a retriable coordinator error (``code(response)``)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        r = fn()
        if code(r) not in (C["CONCURRENT_TRANSACTIONS"], C["COORDINATOR_LOAD_IN_PROGRESS"]):
            return r
        assert time.monotonic() < deadline, r
        time.sleep(0.02)


def init(co: Conn, tid: str, version: int) -> Tuple[int, int]:
    r = retry(lambda: co.call(InitProducerIdRequest, version, transactional_id=tid, transaction_timeout_ms=60_000))
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


def add(co: Conn, tid: str, pid: int, epoch: int, version: int, parts: List[int]) -> Dict[int, int]:
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic

    def codes(r: Any) -> Dict[int, int]:
        return {p.partition_index: p.partition_error_code for t in r.results_by_topic_v3_and_below
                for p in t.results_by_partition}

    r = retry(lambda: co.call(AddPartitionsToTxnRequest, version, v3_and_below_transactional_id=tid,
                              v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                              v3_and_below_topics=[T(version=version, name=TOPIC, partitions=parts)]),
              code=lambda r: max(codes(r).values()))
    return codes(r)


def end(co: Conn, tid: str, pid: int, epoch: int, version: int, commit: bool) -> int:
    return retry(lambda: co.call(EndTxnRequest, version, transactional_id=tid, producer_id=pid,
                                 producer_epoch=epoch, committed=commit)).error_code


def produce(cluster: Any, partition: int, values: List[bytes], *, pid: int = -1, epoch: int = -1, seq: int = -1,
            tid: Optional[str] = None, version: int = 8) -> Tuple[int, int]:
    """(error code, base offset) of one batch produced to ``partition``'s leader."""
    batch = bytes(encode_batch(values, now_ms=int(time.time() * 1000), producer_id=pid, producer_epoch=epoch,
                               base_sequence=seq, transactional=tid is not None))
    T = ProduceRequest.TopicProduceData
    c = Conn(cluster, cluster.leader_of(TOPIC, partition))
    try:
        r = c.call(ProduceRequest, version, transactional_id=tid, acks=-1, timeout_ms=30_000, topic_data=[
            T(version=version, name=TOPIC, partition_data=[T.PartitionProduceData(version=version, index=partition,
                                                                                 records=batch)])])
    finally:
        c.close()
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def fetch(cluster: Any, partition: int, isolation: int, version: int = 11) -> Any:
    T = FetchRequest.FetchTopic
    c = Conn(cluster, cluster.leader_of(TOPIC, partition))
    try:
        r = c.call(FetchRequest, version, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                   isolation_level=isolation, topics=[T(version=version, topic=TOPIC, partitions=[
                       T.FetchPartition(version=version, partition=partition, fetch_offset=0,
                                        partition_max_bytes=1 << 20)])])
    finally:
        c.close()
    return r.responses[0].partitions[0]


def latest(cluster: Any, partition: int, isolation: int) -> int:
    T = ListOffsetsRequest.ListOffsetsTopic
    c = Conn(cluster, cluster.leader_of(TOPIC, partition))
    try:
        r = c.call(ListOffsetsRequest, 4, replica_id=-1, isolation_level=isolation, topics=[
            T(version=4, name=TOPIC, partitions=[T.ListOffsetsPartition(version=4, partition_index=partition,
                                                                        timestamp=-1, current_leader_epoch=-1)])])
    finally:
        c.close()
    p = r.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def test_api_versions_lists_the_transaction_apis(kc: Any) -> None:
    c = Conn(kc, 1)
    keys = {k.api_key: (k.min_version, k.max_version) for k in c.call(ApiVersionsRequest, 3).api_keys}
    c.close()
    assert {k: keys[k] for k in (22, 24, 25, 26, 28)} == {22: (0, 4), 24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3)}
    assert 27 not in keys


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_transactions_at_one_epoch_with_each_version(kc: Any, version: int) -> None:
    """Commit, abort, commit at one epoch (EndTxn < 5: no bump), through a transactional Produce each."""
    tid = f"wire-{version}"
    co = txn_coordinator(kc, tid, version=min(3, max(1, version)))
    pid, epoch = init(co, tid, min(version, 4) if version else 0)
    seq = 0
    expect: List[bytes] = []
    for i, commit in enumerate((True, False, True)):
        assert add(co, tid, pid, epoch, version, [0]) == {0: 0}
        vals = [f"v{version}-{i}-{j}".encode() for j in range(3)]
        code, _ = produce(kc, 0, vals, pid=pid, epoch=epoch, seq=seq, tid=tid)
        assert code == 0
        seq += len(vals)
        assert end(co, tid, pid, epoch, version, commit) == 0
        if commit:
            expect += vals
        # the epoch did not move: the next request at it is accepted (asserted by the next round's add)
    co.close()
    # every marker in: the control batches follow each transaction
    deadline = time.monotonic() + WAIT_S
    while latest(kc, 0, 1) < 12:  # 3 x (3 records + 1 marker)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    p = fetch(kc, 0, isolation=1)
    assert p.error_code == 0 and p.last_stable_offset == 12 and p.high_watermark == 12
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 4)]
    batches = list(iter_batches(bytes(p.records)))
    assert [b.base_offset for b in batches] == [0, 3, 4, 7, 8, 11]
    assert all(b.producer_id == pid and b.producer_epoch == epoch for b in batches)


@pytest.mark.parametrize("version, fenced", [(0, "INVALID_PRODUCER_EPOCH"), (1, "INVALID_PRODUCER_EPOCH"),
                                             (2, "PRODUCER_FENCED"), (3, "PRODUCER_FENCED")])
def test_a_zombie_gets_each_versions_fence_code(kc: Any, version: int, fenced: str) -> None:
    tid = f"zombie-{version}"
    co = txn_coordinator(kc, tid)
    pid, epoch = init(co, tid, 4)
    assert add(co, tid, pid, epoch, version, [1]) == {1: 0}
    code, _ = produce(kc, 1, [b"zombie"], pid=pid, epoch=epoch, seq=0, tid=tid)
    assert code == 0
    pid2, epoch2 = init(co, tid, 4)  # a successor: fences the zombie, aborts its transaction
    assert pid2 == pid and epoch2 > epoch
    assert end(co, tid, pid, epoch, version, True) == C[fenced]
    r = co.call(AddPartitionsToTxnRequest, version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(version=version, name=TOPIC, partitions=[0])])
    assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == C[fenced]
    # InitProducerId v3 with the zombie's (id, epoch) (KIP-360): fenced, INVALID_PRODUCER_EPOCH before v4
    for v, name in ((3, "INVALID_PRODUCER_EPOCH"), (4, "PRODUCER_FENCED")):
        r = co.call(InitProducerIdRequest, v, transactional_id=tid, transaction_timeout_ms=60_000, producer_id=pid,
                    producer_epoch=epoch)
        assert r.error_code == C[name], (v, r)
    co.close()
    # the zombie's record is aborted: a read_committed fetch lists it as aborted
    deadline = time.monotonic() + WAIT_S
    while latest(kc, 1, 1) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    p = fetch(kc, 1, isolation=1)
    assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 0)]


def test_open_transaction_holds_the_lso_and_unadded_partition_is_refused(kc: Any) -> None:
    tid = "open"
    co = txn_coordinator(kc, tid)
    pid, epoch = init(co, tid, 4)
    assert produce(kc, 0, [b"plain"])[0] == 0
    assert add(co, tid, pid, epoch, 3, [0]) == {0: 0}
    assert produce(kc, 0, [b"open-1", b"open-2"], pid=pid, epoch=epoch, seq=0, tid=tid) == (0, 1)
    # KIP-890 part 1: partition 1 was never added (Kafka answers INVALID_TXN_STATE before Produce v11)
    assert produce(kc, 1, [b"sneaky"], pid=pid, epoch=epoch, seq=0, tid=tid)[0] == C["INVALID_TXN_STATE"]
    assert latest(kc, 0, 0) == 3 and latest(kc, 0, 1) == 1
    rc, ru = fetch(kc, 0, 1), fetch(kc, 0, 0)
    assert (rc.high_watermark, rc.last_stable_offset) == (3, 1)
    assert [b.base_offset for b in iter_batches(bytes(rc.records))] == [0]  # below the LSO only
    assert [b.base_offset for b in iter_batches(bytes(ru.records))] == [0, 1]
    assert rc.aborted_transactions == [] and ru.aborted_transactions is None
    assert end(co, tid, pid, epoch, 3, True) == 0
    co.close()
    deadline = time.monotonic() + WAIT_S
    while latest(kc, 0, 1) < 4:
        assert time.monotonic() < deadline
        time.sleep(0.05)
