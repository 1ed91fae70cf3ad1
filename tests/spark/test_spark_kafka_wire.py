"""The same records read three ways agree (issue 16): a real Kafka client over the wire, pylog's
in-process consumer, and the ``pylog`` Spark source on the cluster directory."""
from __future__ import annotations

import time

import pytest

import pylog

pytestmark = pytest.mark.spark


def test_wire_inprocess_and_spark_reads_agree(spark, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    path = str(tmp_path / "cluster")
    c = pylog.Cluster(path, brokers=3, listen="127.0.0.1:0")
    try:
        c.create_topic("w", partitions=2, replication_factor=2)
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "compression.type": "zstd",
                      "linger.ms": 5, "enable.idempotence": True})
        for i in range(300):
            p.produce("w", value=f"v{i}".encode(), key=f"k{i % 7}".encode())
        assert p.flush(30) == 0
        hws = {part.partition: part.high_watermark for part in c.describe("w")}
        assert sum(hws.values()) == 300
        wire = set()
        co = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "unused", "enable.auto.commit": False})
        co.assign([TopicPartition("w", q, 0) for q in (0, 1)])
        deadline = time.monotonic() + 60
        while len(wire) < 300 and time.monotonic() < deadline:
            m = co.poll(0.5)
            if m is not None and m.error() is None:
                wire.add((m.partition(), m.offset(), m.key(), m.value()))
        co.close()
        mine = set()
        pc = c.consumer()
        pc.assign([("w", 0), ("w", 1)])
        deadline = time.monotonic() + 60
        while len(mine) < 300 and time.monotonic() < deadline:
            for r in pc.poll(timeout=0.5):
                mine.add((r.partition, r.offset, r.key, r.value))
        pc.close()
    finally:
        c.close()  # a clean stop checkpoints the high watermarks Spark reads below
    rows = spark.read.format("pylog").option("path", path).option("subscribe", "w").load() \
        .select("partition", "offset", "key", "value").collect()
    via_spark = {(r[0], r[1], bytes(r[2]), bytes(r[3])) for r in rows}
    assert len(wire) == 300 and wire == mine == via_spark
