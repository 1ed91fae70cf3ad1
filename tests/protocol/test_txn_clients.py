"""Transactions of real Kafka clients against a pylog cluster (issue 17 item 6).

confluent-kafka (librdkafka): a transactional copier (``init_transactions``, ``begin_transaction``,
``produce``, ``send_offsets_to_transaction`` with a consumer's ``consumer_group_metadata()``,
``commit_transaction``, ``abort_transaction``) and read_committed consumers that see exactly the
committed records (a read_uncommitted consumer sees the aborted ones too, so the filter is what hides
them); the group's offsets are the ones committed with the transaction, and those of an aborted
transaction are not; the last stable offset of a partition with an open transaction stops a
read_committed consumer (watermarks by ListOffsets and Fetch), and a zombie producer with the same
transactional id is fenced. kafka-python 3: the same with its transactional producer and a
read_committed ``KafkaConsumer``. Every wait is a liveness bound (a hang fails the test), never a
timing assertion.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Set, Tuple

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402

IN, OUT = "in", "out"
#: a liveness bound only
WAIT_S = 90.0

Rec = Tuple[int, int, bytes]  # partition, offset, value


@pytest.fixture
def kc(pylog_kafka):
    pylog_kafka.transaction_state_partitions = 5  # as the fixture's __consumer_offsets: quicker to create
    pylog_kafka.create_topic(IN, partitions=2, replication_factor=3)
    pylog_kafka.create_topic(OUT, partitions=3, replication_factor=3)
    return pylog_kafka


def _conf(cluster: Any, **kw: Any) -> Dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, **kw}


def read_all(cluster: Any, topic: str, partitions: int, want: int, isolation: str) -> List[Rec]:
    """Read ``topic`` from the beginning until ``want`` records came (a read past that would find more
    only if the isolation let through what it must not; the callers check the set afterwards)."""
    c = Consumer(_conf(cluster, **{"group.id": f"reader-{isolation}-{time.monotonic_ns()}",
                                   "isolation.level": isolation, "enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: List[Rec] = []
        deadline = time.monotonic() + WAIT_S
        while len(out) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.partition(), m.offset(), m.value()))
        assert len(out) >= want, f"read {len(out)} of {want} records from {topic} ({isolation})"
        return out
    finally:
        c.close()


def produce_plain(cluster: Any, topic: str, values: List[Tuple[int, bytes]]) -> None:
    p = Producer(_conf(cluster, acks="all"))
    for part, v in values:
        p.produce(topic, v, partition=part)
    assert p.flush(WAIT_S) == 0


def txn_producer(cluster: Any, tid: str, **kw: Any) -> Producer:
    p = Producer(_conf(cluster, **{"transactional.id": tid, "transaction.timeout.ms": 60_000, **kw}))
    p.init_transactions(WAIT_S)
    return p


def test_confluent_copier_commits_and_aborts_read_committed_sees_only_committed(kc: Any) -> None:
    produce_plain(kc, IN, [(i % 2, f"in-{i}".encode()) for i in range(20)])
    src = Consumer(_conf(kc, **{"group.id": "copier", "isolation.level": "read_committed",
                                "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    src.assign([TopicPartition(IN, 0, 0), TopicPartition(IN, 1, 0)])
    p = txn_producer(kc, "copier-1")
    committed_out: List[bytes] = []
    aborted_out: List[bytes] = []
    try:
        def copy(n: int) -> List[bytes]:
            got: List[bytes] = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < n and time.monotonic() < deadline:
                m = src.poll(0.5)
                if m is not None:
                    assert m.error() is None, m.error()
                    v = b"out-" + m.value()
                    p.produce(OUT, v, partition=len(got) % 3)
                    got.append(v)
            assert len(got) == n
            return got

        # txn 1: 8 records copied, the source offsets committed with them
        p.begin_transaction()
        committed_out += copy(8)
        p.send_offsets_to_transaction(src.position(src.assignment()), src.consumer_group_metadata(), WAIT_S)
        p.commit_transaction(WAIT_S)
        after_commit = {tp.partition: tp.offset for tp in src.position(src.assignment())}
        # txn 2: 6 records copied, offsets sent, then aborted: neither the records nor the offsets count
        p.begin_transaction()
        aborted_out += copy(6)
        p.send_offsets_to_transaction(src.position(src.assignment()), src.consumer_group_metadata(), WAIT_S)
        # written first (librdkafka's abort purges what it has not sent yet): the records are in the
        # log, and the ABORT markers must hide them from read_committed
        assert p.flush(WAIT_S) == 0
        p.abort_transaction(WAIT_S)
        # txn 3: more records after the aborted ones (a reader past them skipped the aborted ones)
        p.begin_transaction()
        for i in range(6):
            v = f"late-{i}".encode()
            p.produce(OUT, v, partition=i % 3)
            committed_out.append(v)
        p.commit_transaction(WAIT_S)
    finally:
        p.flush(10)
        src.close()

    rc = read_all(kc, OUT, 3, len(committed_out), "read_committed")
    assert sorted(v for _, _, v in rc) == sorted(committed_out)
    assert not {v for _, _, v in rc} & set(aborted_out)
    for part in range(3):  # per partition, in the order produced
        mine = [v for pp, _, v in rc if pp == part]
        assert mine == [v for i, v in enumerate(committed_out[:8]) if i % 3 == part] + \
            [v for i, v in enumerate(committed_out[8:]) if i % 3 == part]
    ru = read_all(kc, OUT, 3, len(committed_out) + len(aborted_out), "read_uncommitted")
    assert sorted(v for _, _, v in ru) == sorted(committed_out + aborted_out)  # they were written, then aborted

    # the group's committed offsets are txn 1's, not the aborted txn 2's
    check = Consumer(_conf(kc, **{"group.id": "copier", "isolation.level": "read_committed"}))
    try:
        got = {tp.partition: tp.offset for tp in check.committed([TopicPartition(IN, 0), TopicPartition(IN, 1)],
                                                                 timeout=WAIT_S)}
    finally:
        check.close()
    assert got == after_commit and sum(max(0, o) for o in got.values()) == 8  # -1001: nothing read there yet


def test_confluent_open_transaction_holds_the_last_stable_offset(kc: Any) -> None:
    produce_plain(kc, OUT, [(0, b"before")])
    p = txn_producer(kc, "holder")
    p.begin_transaction()
    p.produce(OUT, b"open-1", partition=0)
    p.produce(OUT, b"open-2", partition=0)
    assert p.flush(WAIT_S) == 0  # written to the partition, transaction still open
    rc = Consumer(_conf(kc, **{"group.id": "lso-rc", "isolation.level": "read_committed"}))
    ru = Consumer(_conf(kc, **{"group.id": "lso-ru", "isolation.level": "read_uncommitted"}))
    try:
        # ListOffsets LATEST: the LSO under read_committed, the HW otherwise
        assert rc.get_watermark_offsets(TopicPartition(OUT, 0), timeout=WAIT_S) == (0, 1)
        assert ru.get_watermark_offsets(TopicPartition(OUT, 0), timeout=WAIT_S) == (0, 3)
        p.commit_transaction(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while rc.get_watermark_offsets(TopicPartition(OUT, 0), timeout=WAIT_S)[1] < 4:  # the COMMIT marker at 3
            assert time.monotonic() < deadline, "the LSO did not move past the committed transaction"
            time.sleep(0.05)
        assert rc.get_watermark_offsets(TopicPartition(OUT, 0), timeout=WAIT_S) == (0, 4)
    finally:
        rc.close()
        ru.close()
    assert [v for _, _, v in read_all(kc, OUT, 1, 3, "read_committed")] == [b"before", b"open-1", b"open-2"]


def test_confluent_zombie_is_fenced_and_its_transaction_aborted(kc: Any) -> None:
    zombie = txn_producer(kc, "fenced-id")
    zombie.begin_transaction()
    zombie.produce(OUT, b"zombie", partition=1)
    assert zombie.flush(WAIT_S) == 0
    successor = txn_producer(kc, "fenced-id")  # same id: fences the zombie, aborts its open transaction
    successor.begin_transaction()
    successor.produce(OUT, b"successor", partition=1)
    successor.commit_transaction(WAIT_S)
    with pytest.raises(KafkaException) as exc:
        zombie.commit_transaction(WAIT_S)
    err = exc.value.args[0]
    assert err.fatal(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    with pytest.raises(KafkaException):
        zombie.begin_transaction()  # fatal: only close is left
    rc = read_all(kc, OUT, 3, 1, "read_committed")
    assert [v for _, _, v in rc] == [b"successor"]
    ru = read_all(kc, OUT, 3, 2, "read_uncommitted")
    assert sorted(v for _, _, v in ru) == [b"successor", b"zombie"]


# ------------------------------------------------------------------------------------ kafka-python
def test_kafka_python_transactional_producer_and_read_committed_consumer(kc: Any) -> None:
    import kafka
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    if not hasattr(KafkaProducer, "init_transactions"):
        pytest.skip(f"kafka-python {kafka.__version__} has no transactional producer")
    produce_plain(kc, IN, [(0, f"in-{i}".encode()) for i in range(5)])
    p = KafkaProducer(bootstrap_servers=kc.bootstrap_servers, transactional_id="kp-1")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send(OUT, f"kp-commit-{i}".encode(), partition=i % 3)
        p.send_offsets_to_transaction({KTP(IN, 0): OffsetAndMetadata(5, "", -1)}, "kp-group")
        p.commit_transaction()
        p.begin_transaction()
        for i in range(3):
            p.send(OUT, f"kp-abort-{i}".encode(), partition=i % 3)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(OUT, b"kp-last", partition=2)
        p.commit_transaction()
    finally:
        p.close()
    c = KafkaConsumer(bootstrap_servers=kc.bootstrap_servers, isolation_level="read_committed",
                      enable_auto_commit=False, consumer_timeout_ms=int(WAIT_S * 1000))
    try:
        c.assign([KTP(OUT, part) for part in range(3)])
        c.seek_to_beginning()
        got: Set[bytes] = set()
        deadline = time.monotonic() + WAIT_S
        while len(got) < 5 and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                got |= {r.value for r in recs}
        assert got == {b"kp-commit-0", b"kp-commit-1", b"kp-commit-2", b"kp-commit-3", b"kp-last"}
    finally:
        c.close()
    assert read_all(kc, OUT, 3, 8, "read_uncommitted")  # the aborted records are in the log
    assert kc.list_group_offsets("kp-group")[(IN, 0)].offset == 5


# ---------------------------------------------------------------------------------------- aiokafka
def test_aiokafka_transactions_at_version_0(kc: Any) -> None:
    """aiokafka 0.14 speaks v0 of every transaction API (and Fetch/ListOffsets with isolation)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    async def run() -> Set[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=kc.bootstrap_servers, transactional_id="aio-1")
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send(OUT, f"aio-commit-{i}".encode(), partition=i)
                await p.send_offsets_to_transaction({ATP(IN, 1): 2}, "aio-group")
            await p.begin_transaction()
            await p.send_and_wait(OUT, b"aio-abort", partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send(OUT, b"aio-last", partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=kc.bootstrap_servers, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([ATP(OUT, part) for part in range(3)])
            await c.seek_to_beginning()
            got: Set[bytes] = set()
            deadline = time.monotonic() + WAIT_S
            while len(got) < 4 and time.monotonic() < deadline:
                for recs in (await c.getmany(timeout_ms=500)).values():
                    got |= {r.value for r in recs}
            return got
        finally:
            await c.stop()

    assert asyncio.run(run()) == {b"aio-commit-0", b"aio-commit-1", b"aio-commit-2", b"aio-last"}
    assert sorted(v for _, _, v in read_all(kc, OUT, 3, 5, "read_uncommitted"))[0] == b"aio-abort"
    assert kc.list_group_offsets("aio-group")[(IN, 1)].offset == 2
