"""The same records read three ways agree: a real Kafka client in a consumer group (confluent-kafka,
over the wire), pylog's in-process group consumer, and the ``pylog`` Spark source reading the cluster
directory after a clean shutdown. Produced by a real client (kafka-python), with keys, headers and gzip."""
from __future__ import annotations

import time
from typing import List, Tuple

import pytest

from spark.conftest import spark  # noqa: F401 - the run's one SparkSession (tests/spark/conftest.py)

pytestmark = pytest.mark.spark

TOPIC = "three-way"
PARTITIONS = 3
N = 300
WAIT_S = 60.0  # a liveness bound only

Row = Tuple[int, int, bytes, bytes, int, Tuple[Tuple[str, bytes], ...]]  # partition, offset, key, value, ts, headers


def test_a_real_client_the_in_process_consumer_and_spark_read_the_same_records(pylog_kafka, spark):  # noqa: F811
    from confluent_kafka import Consumer
    from kafka import KafkaProducer

    cluster = pylog_kafka
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, min_insync_replicas=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", compression_type="gzip",
                             linger_ms=5)
    for i in range(N):
        headers = [("i", str(i).encode())] if i % 2 else []
        producer.send(TOPIC, value=b"v%d" % i, key=b"k%d" % (i % 17), partition=i % PARTITIONS, headers=headers,
                      timestamp_ms=1_700_000_000_000 + i)
    producer.flush()
    producer.close()

    real: List[Row] = []
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "three-way-wire",
                  "auto.offset.reset": "earliest", "session.timeout.ms": 6_000, "heartbeat.interval.ms": 300})
    c.subscribe([TOPIC])
    deadline = time.monotonic() + WAIT_S
    try:
        while len(real) < N:
            for m in c.consume(num_messages=500, timeout=0.2):
                assert m.error() is None, m.error()
                real.append((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1],
                             tuple((k, bytes(v)) for k, v in (m.headers() or []))))
            assert time.monotonic() < deadline, f"confluent-kafka read {len(real)} of {N}"
        c.commit(asynchronous=False)
    finally:
        c.close()

    inproc: List[Row] = []
    pc = cluster.consumer(group_id="three-way-pylog", topics=[TOPIC], auto_offset_reset="earliest")
    deadline = time.monotonic() + WAIT_S
    try:
        while len(inproc) < N:
            inproc += [(r.partition, r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in pc.poll(timeout=0.2)]
            assert time.monotonic() < deadline, f"the in-process consumer read {len(inproc)} of {N}"
    finally:
        pc.close()
    # both groups committed the end of every partition
    ends = {p: sum(1 for i in range(N) if i % PARTITIONS == p) for p in range(PARTITIONS)}
    for group in ("three-way-wire", "three-way-pylog"):
        assert {p: v.offset for (t, p), v in cluster.list_group_offsets(group).items()} == ends, group

    path = cluster.path
    cluster.close()  # a clean shutdown checkpoints the high watermarks the Spark source reads below
    df = (spark.read.format("pylog").option("path", path).option("subscribe", TOPIC)
          .option("includeHeaders", "true").load())
    rows = df.selectExpr("partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "headers").collect()
    from_spark = [(r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"]), r["ts"],
                   tuple((h["key"], bytes(h["value"])) for h in (r["headers"] or []))) for r in rows]

    want = sorted((i % PARTITIONS, i // PARTITIONS, b"k%d" % (i % 17), b"v%d" % i, 1_700_000_000_000 + i,
                   (("i", str(i).encode()),) if i % 2 else ()) for i in range(N))
    assert sorted(real) == want
    assert sorted(inproc) == want
    assert sorted(from_spark) == want
