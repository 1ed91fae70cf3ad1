"""Admin APIs through real admin clients: CreateTopics, DescribeConfigs, DeleteTopics, CreatePartitions."""
from __future__ import annotations

import socket
import struct

import pytest

import pylog
from pylog.protocol.handlers.core import supported_api_keys

HAS_DELETE = hasattr(pylog.Cluster, "delete_topic")
HAS_CREATE_PARTITIONS = hasattr(pylog.Cluster, "create_partitions")


def test_create_topics_configs_and_errors(kcluster):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    a = AdminClient({"bootstrap.servers": kcluster.bootstrap_servers})
    fs = a.create_topics([NewTopic("a", 3, 2, config={"cleanup.policy": "compact", "min.insync.replicas": "2",
                                                       "retention.ms": "60000"}),
                          NewTopic("b", -1, -1)])
    for f in fs.values():
        assert f.result(30) is None
    cfg = kcluster.store.topics["a"]
    assert (cfg.partitions, cfg.replication_factor, cfg.min_insync_replicas) == (3, 2, 2)
    assert cfg.configs["cleanup_policy"] == "compact" and cfg.configs["retention_ms"] == 60000
    assert (kcluster.store.topics["b"].partitions, kcluster.store.topics["b"].replication_factor) == (1, 3)
    errors = {}
    for name, topic in (("a", NewTopic("a", 1, 1)), ("bad", NewTopic("x" * 300, 1, 1)),
                        ("rf", NewTopic("c", 1, 4)), ("conf", NewTopic("d", 1, 1, config={"no.such.config": "1"}))):
        try:
            list(a.create_topics([topic]).values())[0].result(30)
        except Exception as exc:  # confluent's KafkaException carrying Kafka's code
            errors[name] = exc.args[0].code()
    assert errors == {"a": KafkaError.TOPIC_ALREADY_EXISTS, "bad": KafkaError.TOPIC_EXCEPTION,
                      "rf": KafkaError.INVALID_REPLICATION_FACTOR, "conf": KafkaError.INVALID_CONFIG}
    assert "d" not in kcluster.store.topics
    (res,) = a.describe_configs([ConfigResource("topic", "a")]).values()
    entries = res.result(30)
    assert entries["cleanup.policy"].value == "compact"
    assert entries["retention.ms"].value == "60000"
    assert entries["min.insync.replicas"].value == "2"
    assert entries["segment.bytes"].value == str(1 << 30)  # defaults are listed too, as Kafka does
    assert entries["segment.bytes"].is_default


def test_metadata_auto_creates_topics(kcluster):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=kcluster.bootstrap_servers, acks="all")
    try:
        assert p.send("auto", b"v").get(timeout=30).offset == 0
    finally:
        p.close()
    assert kcluster.store.topics["auto"].partitions == kcluster.num_partitions == 1


def test_auto_create_off(tmp_path):
    from kafka import KafkaConsumer

    c = pylog.Cluster(tmp_path / "c", brokers=1, listen="127.0.0.1:0", auto_create_topics=False)
    try:
        k = KafkaConsumer(bootstrap_servers=c.bootstrap_servers)
        try:
            assert not k.partitions_for_topic("nope")
        finally:
            k.close()
        assert "nope" not in c.store.topics
    finally:
        c.close()


def test_delete_topics_and_create_partitions_advertised_iff_served(kcluster1):
    keys = {r.api_key for r in supported_api_keys(kcluster1.kafka_server)}
    assert (20 in keys) == HAS_DELETE and (37 in keys) == HAS_CREATE_PARTITIONS
    if not HAS_DELETE:  # a DeleteTopics request is refused like any unserved API: the connection closes
        with socket.create_connection(kcluster1.kafka_server.address_of(0), timeout=10) as s:
            frame = struct.pack(">hhih", 20, 4, 1, -1) + struct.pack(">i", 0) + struct.pack(">i", 1000)
            s.sendall(struct.pack(">i", len(frame)) + frame)
            assert s.recv(1) == b""


@pytest.mark.skipif(not HAS_DELETE, reason="runs once Cluster.delete_topic exists (the topics branch)")
def test_delete_topics(kcluster):
    from confluent_kafka.admin import AdminClient

    kcluster.create_topic("gone", partitions=2)
    a = AdminClient({"bootstrap.servers": kcluster.bootstrap_servers})
    for f in a.delete_topics(["gone"]).values():
        assert f.result(30) is None
    assert "gone" not in kcluster.store.topics
    try:
        list(a.delete_topics(["gone"]).values())[0].result(30)
        raise AssertionError("deleting an unknown topic succeeded")
    except Exception as exc:
        assert exc.args[0].code() == 3  # UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.skipif(not HAS_CREATE_PARTITIONS, reason="runs once Cluster.create_partitions exists (the topics branch)")
def test_create_partitions(kcluster):
    from confluent_kafka.admin import AdminClient, NewPartitions

    kcluster.create_topic("grow", partitions=1)
    a = AdminClient({"bootstrap.servers": kcluster.bootstrap_servers})
    for f in a.create_partitions([NewPartitions("grow", 4)]).values():
        assert f.result(30) is None
    assert kcluster.store.topics["grow"].partitions == 4
    try:
        list(a.create_partitions([NewPartitions("grow", 2)]).values())[0].result(30)
        raise AssertionError("shrinking succeeded")
    except Exception as exc:
        assert exc.args[0].code() == 37  # INVALID_PARTITIONS
