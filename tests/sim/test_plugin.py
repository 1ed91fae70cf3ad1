"""The pylog.testing plugin's pylog_cluster fixture (a 3-broker simulated cluster)."""
from __future__ import annotations

import pytest


def test_fixture_gives_a_simulated_three_broker_cluster(pylog_cluster):
    assert pylog_cluster.simulated and sorted(pylog_cluster.brokers) == [0, 1, 2]
    pylog_cluster.create_topic("orders", partitions=3, replication_factor=3, min_insync_replicas=2)
    producer = pylog_cluster.producer(acks="all")
    meta = producer.send("orders", b"v", key=b"k").result()
    assert meta.topic == "orders" and meta.offset == 0
    leader = pylog_cluster.leader_of("orders", meta.partition)
    pylog_cluster.stop_broker(leader, clean=False)
    meta2 = producer.send("orders", b"v2", key=b"k").result()
    assert meta2.partition == meta.partition and meta2.offset == 1
    assert pylog_cluster.leader_of("orders", meta.partition) != leader
    consumer = pylog_cluster.consumer("g", ["orders"])
    got = []
    for _ in range(10):
        got += consumer.poll(1.0)
        if len(got) == 2:
            break
    assert sorted(r.value for r in got) == [b"v", b"v2"]


@pytest.mark.pylog_seed(99)
def test_fixture_seed_marker(pylog_cluster):
    assert pylog_cluster.seed == 99


def test_acks_and_errors_through_the_facade(pylog_cluster):
    from pylog.errors import NotEnoughReplicasError

    pylog_cluster.create_topic("strict", partitions=1, replication_factor=3, min_insync_replicas=3)
    assert pylog_cluster.producer(acks="all").send("strict", b"ok").result().offset == 0
    pylog_cluster.stop_broker(2 if pylog_cluster.leader_of("strict") != 2 else 1, clean=True)
    p = pylog_cluster.producer(acks="all", delivery_timeout_ms=2_000)
    with pytest.raises(NotEnoughReplicasError, match="min_insync_replicas=3"):
        p.send("strict", b"refused").result()
    assert pylog_cluster.producer(acks=1).send("strict", b"one").result().offset == 1
    assert pylog_cluster.producer(acks=0).send("strict", b"zero").result().offset == -1
    d = pylog_cluster.describe("strict")[0]
    assert len(d.isr) == 2 and d.high_watermark == 1  # under min ISR: the HW does not advance (KAFKA-15583)
