"""A wire ProduceRequest for many partitions becomes one internal MultiProduceRequest (one append pass and
one answer in the broker, as Kafka's ReplicaManager.appendRecords), with per-partition results."""
from __future__ import annotations

from collections import Counter

from pylog.replication.messages import MultiProduceRequest, ProduceRequest


def test_wire_produce_for_four_partitions_is_one_internal_request(kcluster1):
    from kafka import KafkaProducer

    kcluster1.create_topic("t", partitions=4)
    seen: Counter = Counter()
    orig = kcluster1.transport.send

    def send(src, dst, msg):
        if isinstance(msg, MultiProduceRequest):
            seen["multi"] += 1
            seen["parts"] += len(msg.parts)
        elif isinstance(msg, ProduceRequest) and msg.topic == "t":
            seen["single"] += 1
        return orig(src, dst, msg)

    kcluster1.transport.send = send
    p = KafkaProducer(bootstrap_servers=kcluster1.bootstrap_servers, acks=1, linger_ms=5_000)
    try:
        futs = [p.send("t", b"v%d" % part, partition=part) for part in range(4)]
        p.flush(timeout=60)  # the four batches, one broker: one wire request
        mds = [f.get(timeout=60) for f in futs]
    finally:
        p.close(timeout=10)
    assert [(m.partition, m.offset) for m in mds] == [(part, 0) for part in range(4)]
    assert seen == Counter({"multi": 1, "parts": 4}), seen
    for part in range(4):
        log = kcluster1.brokers[0].rm.partitions[("t", part)].log
        assert [r.value for r in log.read(0, 1 << 20)] == [b"v%d" % part]
