"""A small program written the kafka-python way runs unchanged on pylog's in-process clients.

Only the construction differs (``cluster.producer(...)`` / ``cluster.consumer(...)`` instead of
``KafkaProducer(bootstrap_servers=...)`` / ``KafkaConsumer(...)``); every call after that is
kafka-python's, with kafka-python's own ``TopicPartition`` and ``OffsetAndMetadata``
(docs/kafka-python-idioms.md lists what works and what differs). Real time, one broker.
"""
from __future__ import annotations

import json

from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

import pylog

N = 30


# ---- the kafka-python-style program (nothing pylog-specific below this line) -------------------
def produce(producer):
    futures = [producer.send("orders", value={"id": i, "item": "book"}, key=str(i % 3),
                             headers=[("source", b"test")]) for i in range(N)]
    producer.flush()
    metadata = [f.get(timeout=10) for f in futures]
    return [(m.topic, m.partition, m.offset) for m in metadata]


def consume_all(consumer, want):
    consumer.subscribe(["orders"])
    seen = []
    rounds = 0
    while len(seen) < want and rounds < 600:
        rounds += 1
        batch = consumer.poll(timeout_ms=500)
        for tp, messages in batch.items():
            for message in messages:
                assert tp == TopicPartition(message.topic, message.partition)
                seen.append((message.partition, message.offset, message.key, message.value["id"],
                             dict(message.headers)))
    consumer.commit()
    return seen


def rewind_and_inspect(consumer):
    partitions = [TopicPartition("orders", p) for p in sorted(consumer.partitions_for_topic("orders"))]
    consumer.assign(partitions)
    ends = consumer.end_offsets(partitions)
    starts = consumer.beginning_offsets(partitions)
    committed = {tp: consumer.committed(tp) for tp in partitions}
    first = min(partitions, key=lambda tp: -ends[tp])  # the partition with the most records
    for tp in partitions:
        consumer.seek(tp, 0)
    consumer.seek(first, 1)
    consumer.pause(*[tp for tp in partitions if tp != first])
    replay = []
    for message in consumer:  # stops after consumer_timeout_ms without a record
        replay.append((message.partition, message.offset))
    paused = consumer.paused()
    consumer.resume(*paused)
    consumer.commit({first: OffsetAndMetadata(ends[first], "rewound", -1)})
    return ends, starts, committed, first, replay, paused, consumer.committed(first), consumer.position(first)


# ---- the test -----------------------------------------------------------------------------------
def test_kafka_python_style_program(tmp_path):
    with pylog.Cluster(tmp_path, brokers=1) as cluster:
        cluster.create_topic("orders", partitions=3, replication_factor=1)
        producer = cluster.producer(value_serializer=lambda v: json.dumps(v).encode(), key_serializer=str.encode)
        written = produce(producer)
        producer.close()
        assert sorted(o for _t, _p, o in written if _p == written[0][1])[0] == 0
        per_partition = {}
        for _t, p, o in written:
            per_partition.setdefault(p, []).append(o)
        assert all(offs == list(range(len(offs))) for offs in per_partition.values())

        consumer = cluster.consumer(group_id="billing", enable_auto_commit=False,
                                    value_deserializer=lambda b: json.loads(b.decode()),
                                    key_deserializer=bytes.decode)
        seen = consume_all(consumer, N)
        consumer.close()
        assert sorted(s[3] for s in seen) == list(range(N))
        assert all(s[4] == {"source": b"test"} and s[2] == str(s[3] % 3) for s in seen)

        consumer = cluster.consumer(group_id="billing", enable_auto_commit=False, consumer_timeout_ms=1000,
                                    value_deserializer=lambda b: json.loads(b.decode()))
        ends, starts, committed, first, replay, paused, recommitted, position = rewind_and_inspect(consumer)
        consumer.close()
        counts = {TopicPartition("orders", p): len(o) for p, o in per_partition.items()}
        assert ends == {tp: counts.get(tp, 0) for tp in ends} and set(starts.values()) == {0}
        assert committed == ends  # consume_all committed everything it read
        assert replay == [(first.partition, o) for o in range(1, ends[first])]  # only the unpaused partition
        assert paused == {tp for tp in ends if tp != first}
        assert recommitted == ends[first] and position == ends[first]
