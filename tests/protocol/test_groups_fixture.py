"""The pylog.testing plugin's ``pylog_kafka`` fixture: a real-time 3-broker cluster on loopback that
unchanged Kafka client code talks to (here: the example of the plugin's docstring, and a group)."""
from __future__ import annotations

import time

from pylog.testing import PYLOG_KAFKA_OFFSETS_PARTITIONS


def test_fixture_is_a_real_time_three_broker_cluster_on_loopback(pylog_kafka):
    assert not pylog_kafka.simulated and sorted(pylog_kafka.brokers) == [0, 1, 2]
    servers = pylog_kafka.bootstrap_servers.split(",")
    assert len(servers) == 3 and all(s.startswith("127.0.0.1:") for s in servers)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": pylog_kafka.bootstrap_servers})
    p.produce("orders", b"v")
    assert p.flush(30) == 0  # auto-created, as Kafka does; acks=all: in the ISR once flushed
    assert pylog_kafka.describe("orders")[0].high_watermark == 1


def test_fixture_serves_a_kafka_python_group_with_a_small_offsets_topic(pylog_kafka):
    from kafka import KafkaConsumer

    pylog_kafka.create_topic("events", partitions=2)
    pylog_kafka.producer(acks="all").send("events", b"e", partition=1).result()
    c = KafkaConsumer("events", bootstrap_servers=pylog_kafka.bootstrap_servers, group_id="fixture",
                      auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6_000,
                      heartbeat_interval_ms=300)
    try:
        got = []
        deadline = time.monotonic() + 60  # a liveness bound only
        while not got:
            got = [r.value for recs in c.poll(timeout_ms=1_000).values() for r in recs]
            assert time.monotonic() < deadline
        c.commit()
    finally:
        c.close()
    assert got == [b"e"]
    assert {tp: v.offset for tp, v in pylog_kafka.list_group_offsets("fixture").items()} == {("events", 0): 0,
                                                                                        ("events", 1): 1}
    assert pylog_kafka.store.topics["__consumer_offsets"].partitions == PYLOG_KAFKA_OFFSETS_PARTITIONS
