"""One group, two kinds of clients: offsets committed over the wire by a real Kafka client are what
pylog's in-process consumer and ``cluster.list_group_offsets`` see, and the other way round; and a
real client and an in-process consumer can be members of the same group at once (one coordinator)."""
from __future__ import annotations

import time
from typing import Dict, List, Tuple

import pytest

from pylog.client.consumer import OffsetAndMetadata

from .group_clients import Clients

TOPIC = "mixed"
GROUP = "shared"
PARTITIONS = 3
PER_PARTITION = 10
WAIT_S = 60.0  # a liveness bound only


def _produce(cluster, start: int, n: int) -> None:
    p = cluster.producer(acks="all")
    futures = [p.send(TOPIC, f"{part}:{i}".encode(), partition=part)
               for part in range(PARTITIONS) for i in range(start, start + n)]
    for f in futures:
        f.result(30)


def _values(recs) -> List[Tuple[int, int]]:
    return sorted((p, off) for p, off, _ in recs)


@pytest.mark.parametrize("kind", ["kafka-python", "confluent-kafka", "aiokafka"])
def test_offsets_cross_between_a_real_client_and_the_in_process_consumer(pylog_kafka, kind):
    cluster = pylog_kafka
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    _produce(cluster, 0, PER_PARTITION)
    clients = Clients(kind, cluster.bootstrap_servers)
    try:
        # 1. the real client reads everything and commits 4 per partition, with a metadata string
        m = clients.member(GROUP, TOPIC, "wire", threaded=False)
        got: List[Tuple[int, int, bytes]] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < PARTITIONS * PER_PARTITION:
            got += m.poll()
            assert time.monotonic() < deadline, f"{kind} read {len(got)} records"
        assert _values(got) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
        _commit_at(m, kind, {p: 4 for p in range(PARTITIONS)}, f"by-{kind}")
        clients.close(m)
        seen = cluster.list_group_offsets(GROUP)
        # Byte for byte as the client sent it: confluent-kafka-python passes its metadata string to
        # librdkafka with the C string's NUL (a Kafka broker stores that NUL too).
        sent = f"by-{kind}" + ("\x00" if kind == "confluent-kafka" else "")
        assert {tp: (v.offset, v.metadata) for tp, v in seen.items()} == {
            (TOPIC, p): (4, sent) for p in range(PARTITIONS)}

        # 2. the in-process consumer resumes from those offsets and commits its own, with metadata
        c = cluster.consumer(group_id=GROUP, topics=[TOPIC], auto_offset_reset="earliest",
                             enable_auto_commit=False)
        mine: List[Tuple[int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while len(mine) < PARTITIONS * (PER_PARTITION - 4):
            mine += [(r.partition, r.offset) for r in c.poll(timeout=0.2)]
            assert time.monotonic() < deadline, f"the in-process consumer read {mine}"
        assert sorted(mine) == [(p, o) for p in range(PARTITIONS) for o in range(4, PER_PARTITION)]
        c.commit({(TOPIC, p): OffsetAndMetadata(PER_PARTITION - 1, "by-pylog", -1) for p in range(PARTITIONS)})
        c.close(autocommit=False)

        # 3. the real client sees pylog's commit: it reads from offset 9 on, and reads new records
        _produce(cluster, PER_PARTITION, 2)
        m = clients.member(GROUP, TOPIC, "wire-again", threaded=False)
        assert _committed(m, kind) == {p: (PER_PARTITION - 1, "by-pylog") for p in range(PARTITIONS)}
        again: List[Tuple[int, int, bytes]] = []
        deadline = time.monotonic() + WAIT_S
        while len(again) < PARTITIONS * 3:
            again += m.poll()
            assert time.monotonic() < deadline, f"{kind} read {again} after the in-process commit"
        assert _values(again) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION - 1, PER_PARTITION + 2)]
    finally:
        clients.close_all()


def _commit_at(m, kind: str, offsets: Dict[int, int], metadata: str) -> None:
    """Commit explicit offsets with a metadata string through the client's own API."""
    if kind == "kafka-python":
        from kafka.structs import OffsetAndMetadata as KOffset, TopicPartition

        m.c.commit({TopicPartition(TOPIC, p): KOffset(o, metadata, -1) for p, o in offsets.items()})
    elif kind == "confluent-kafka":
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(TOPIC, p, o, metadata=metadata) for p, o in offsets.items()]
        assert all(tp.error is None for tp in m.c.commit(offsets=tps, asynchronous=False))
    else:
        from aiokafka.structs import OffsetAndMetadata as AOffset, TopicPartition

        m.loop.run(m.c.commit({TopicPartition(TOPIC, p): AOffset(o, metadata) for p, o in offsets.items()}))


def _committed(m, kind: str) -> Dict[int, Tuple[int, str]]:
    """{partition: (offset, metadata)} as the client's own committed-offsets call reports them."""
    if kind == "kafka-python":
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=m.c.config["bootstrap_servers"])
        try:
            rows = admin.list_group_offsets(GROUP)
        finally:
            admin.close()
        rows = rows.get(GROUP, rows)
        return {tp.partition: (v.offset, v.metadata) for tp, v in rows.items()}
    if kind == "confluent-kafka":
        from confluent_kafka import TopicPartition

        return {tp.partition: (tp.offset, tp.metadata) for tp in
                m.c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)}
    from aiokafka.structs import TopicPartition

    async def get():
        out = {}
        for p in range(PARTITIONS):
            tp = TopicPartition(TOPIC, p)
            out[p] = await m.c.committed(tp)
        return out

    offsets = m.loop.run(get())  # aiokafka's committed() gives the offset; the metadata through its admin client
    from aiokafka.admin import AIOKafkaAdminClient

    async def admin_rows():
        a = AIOKafkaAdminClient(bootstrap_servers=m.bootstrap)
        await a.start()
        try:
            return await a.list_consumer_group_offsets(GROUP)
        finally:
            await a.close()

    rows = m.loop.run(admin_rows())
    return {tp.partition: (offsets[tp.partition], v.metadata) for tp, v in rows.items()}


def test_a_real_client_and_an_in_process_consumer_share_one_group(pylog_kafka):
    """kafka-python and pylog's consumer in one group: the coordinator splits the partitions between them
    (both speak the consumer protocol's range assignor), and each reads only its own."""
    cluster = pylog_kafka
    cluster.create_topic(TOPIC, partitions=4, replication_factor=3)
    p = cluster.producer(acks="all")
    for f in [p.send(TOPIC, f"{part}:0".encode(), partition=part) for part in range(4)]:
        f.result(30)
    clients = Clients("kafka-python", cluster.bootstrap_servers)
    inproc = cluster.consumer(group_id=GROUP, topics=[TOPIC], client_id="inproc", session_timeout_ms=6_000,
                              heartbeat_interval_ms=300, max_poll_interval_ms=20_000)
    try:
        wire = clients.member(GROUP, TOPIC, "wire")  # on its own thread: it must rejoin while we poll pylog's
        deadline = time.monotonic() + WAIT_S
        while True:
            inproc.poll(timeout=0.1)
            wire.take()
            d = cluster.describe_group(GROUP)
            mine = {pp for _, pp in inproc.assignment()}
            theirs = wire.assignment()
            if d.state == "Stable" and len(d.members) == 2 and mine | theirs == {0, 1, 2, 3} and not mine & theirs:
                break
            assert time.monotonic() < deadline, (d, mine, theirs)
        assert len(mine) == len(theirs) == 2
        assert sorted(m.client_id for m in d.members) == ["inproc", "wire"]
    finally:
        inproc.close(autocommit=False)
        clients.close_all()
