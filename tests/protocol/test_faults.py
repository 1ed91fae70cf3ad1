"""cluster.inject_fault: Kafka error codes, delays and dropped connections as real clients see them."""
from __future__ import annotations

import time

import pytest

from pylog.errors import InvalidConfigurationError


def _producer(c, **extra):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": c.bootstrap_servers, "acks": "all", "retry.backoff.ms": 10, "linger.ms": 0}
    conf.update(extra)
    return Producer(conf)


def _send(p, value):
    out = []
    p.produce("t", value, on_delivery=lambda e, m: out.append((e, m.offset())))
    assert p.flush(30) == 0
    return out[0]


def test_retriable_error_is_retried_by_the_client(kcluster1):
    kcluster1.create_topic("t")
    f = kcluster1.inject_fault(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=2)
    err, off = _send(_producer(kcluster1), b"x")
    assert err is None and off == 0
    assert f.hits == 2 and not f.active
    assert kcluster1.describe("t")[0].high_watermark == 1  # the failed attempts appended nothing


def test_fatal_error_reaches_the_application_with_kafkas_code(kcluster1):
    from confluent_kafka import KafkaError

    kcluster1.create_topic("t")
    kcluster1.inject_fault(api="Produce", error="MESSAGE_TOO_LARGE", count=1)
    err, _ = _send(_producer(kcluster1), b"x")
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _send(_producer(kcluster1), b"y")[0] is None  # count=1: the next request is served


def test_fault_scoped_to_topic_and_broker(kcluster):
    kcluster.create_topic("t")
    kcluster.create_topic("u")
    leader = kcluster.leader_of("t", 0)
    other = (leader + 1) % 3
    f_other = kcluster.inject_fault(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=None, broker=other)
    f_topic = kcluster.inject_fault(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=None, topic="u")
    assert _send(_producer(kcluster), b"x")[0] is None
    assert f_other.hits == 0 and f_topic.hits == 0  # "t" goes to its leader; neither rule matches
    f_other.remove()
    f_topic.remove()


def test_delay_and_removal(kcluster1):
    kcluster1.create_topic("t")
    p = _producer(kcluster1)
    _send(p, b"warm-up")
    with kcluster1.inject_fault(api="Produce", delay_ms=400, count=None) as f:
        t0 = time.monotonic()
        assert _send(p, b"slow")[0] is None
        assert time.monotonic() - t0 >= 0.4
        assert f.hits == 1
    assert not f.active  # removed by the with block
    _send(p, b"after")
    assert f.hits == 1


def test_dropped_connection_then_recovery(kcluster1):
    from kafka import KafkaConsumer, TopicPartition

    kcluster1.create_topic("t")
    _send(_producer(kcluster1), b"x")
    f = kcluster1.inject_fault(api="Fetch", drop_connection=True, count=1)
    c = KafkaConsumer(bootstrap_servers=kcluster1.bootstrap_servers, enable_auto_commit=False,
                      consumer_timeout_ms=60000, reconnect_backoff_ms=10)
    try:
        c.assign([TopicPartition("t", 0)])
        c.seek(TopicPartition("t", 0), 0)
        assert next(c).value == b"x"  # reconnected and fetched again
    finally:
        c.close()
    assert f.hits == 1


def test_bad_fault_arguments(kcluster1):
    with pytest.raises(InvalidConfigurationError):
        kcluster1.inject_fault(api="NoSuchApi", error="NOT_LEADER_OR_FOLLOWER")
    with pytest.raises(InvalidConfigurationError):
        kcluster1.inject_fault(api="Produce", error="NO_SUCH_ERROR")
    with pytest.raises(InvalidConfigurationError):
        kcluster1.inject_fault(api="Produce")
    with pytest.raises(InvalidConfigurationError):
        kcluster1.inject_fault(api="Produce", error=6, count=0)


def test_inject_fault_needs_a_listener(tmp_path):
    import pylog

    c = pylog.Cluster(tmp_path / "c", brokers=1)
    try:
        with pytest.raises(InvalidConfigurationError):
            c.inject_fault(api="Produce", error="NOT_LEADER_OR_FOLLOWER")
        with pytest.raises(InvalidConfigurationError):
            c.bootstrap_servers
    finally:
        c.close()


def test_acks0_produce_to_a_non_leader_closes_the_connection(kcluster, caplog):
    """Kafka's only signal to an acks=0 producer: the connection closes, and the client refreshes metadata."""
    import logging
    import socket

    from kafka.protocol.producer import ProduceRequest

    caplog.set_level(logging.INFO, logger="pylog.protocol")
    kcluster.create_topic("t", replication_factor=1)
    other = (kcluster.leader_of("t", 0) + 1) % 3
    R = ProduceRequest[9]
    req = R(transactional_id=None, acks=0, timeout_ms=1000, topic_data=[R.TopicProduceData(
        name="t", partition_data=[R.TopicProduceData.PartitionProduceData(index=0, records=b"\0" * 70)])])
    req.with_header(correlation_id=1, client_id="raw")
    with socket.create_connection(kcluster.kafka_server.address_of(other), timeout=10) as s:
        s.sendall(bytes(req.encode(header=True, framed=True)))
        s.settimeout(10)
        assert s.recv(1) == b""
    assert any("not its leader" in r.getMessage() for r in caplog.records)
