"""Both facades implement the client/cluster seam (pylog/runtime/cluster_context.py).

At run time: every member the interfaces declare exists on a simulated
:class:`pylog.Cluster`, a real-time one, and on ``pylog.open``'s
:class:`SharedCluster` in both roles (owner and client), and clients built on
nothing but the interface work on each. Statically: this file is in mypy's
``files`` (pyproject.toml), so the typed functions below - which take a
``ClusterContext``/``ServedCluster`` and are called with each facade - are
checked by ``./dev test``'s mypy run; a facade that lost a member or changed
its type fails there.
"""
from __future__ import annotations

import pathlib
from typing import List

import pytest

import pylog
from pylog.client.consumer import Consumer
from pylog.client.producer import Producer
from pylog.cluster import Cluster
from pylog.runtime.cluster_context import ClusterContext, MetadataView, ServedCluster, TopicAdmin, members
from pylog.shared import _CALLS, SharedCluster


def round_trip(cluster: ClusterContext, topic: str, expect: int = 1) -> List[bytes]:
    """Produce one record and read the topic from the start (``expect`` records), through nothing but
    the interface (no facade method)."""
    assert topic in cluster.metadata.topics
    assert cluster.metadata.controller_id in cluster.metadata.brokers
    leader = cluster.metadata.partitions[(topic, 0)].leader
    assert leader in cluster.metadata.brokers
    p = Producer(cluster, acks="all")
    try:
        p.send(topic, b"through the interface").result(30)
    finally:
        p.close()
    c = Consumer(cluster, topics=[topic])
    try:
        got: List[bytes] = []
        while len(got) < expect:
            got += [r.value for r in c.poll(timeout=1.0, max_records=10) if r.value is not None]
        return got
    finally:
        c.close()


def admin(cluster: TopicAdmin, topic: str) -> List[str]:
    """Topic admin through nothing but the interface (mypy checks both facades are a TopicAdmin)."""
    cluster.create_topic(topic, partitions=1, config={"retention.ms": 60_000})
    cluster.create_partitions(topic, 2)
    assert [p.partition for p in cluster.describe(topic)] == [0, 1]
    assert cluster.topic_config(topic)["retention_ms"] == 60_000
    cluster.alter_topic_config(topic, {"retention.ms": None})
    assert cluster.topic_config(topic)["retention_ms"] != 60_000
    assert any(m.name == "pylog_cluster_partitions" for m in cluster.metrics(include_clients=False))
    names = cluster.list_topics()
    cluster.delete_topic(topic)
    assert topic not in cluster.list_topics()
    return names


def served(cluster: ServedCluster) -> List[int]:
    """What the Kafka listener reads of a cluster, typed (mypy checks Cluster is a ServedCluster)."""
    assert cluster.config.replica_lag_time_max_ms > 0 and cluster.num_partitions >= 1
    assert isinstance(cluster.auto_create_topics, bool) and cluster.path
    return sorted(b for b, broker in cluster.brokers.items() if broker.running)


def test_the_interfaces_declare_what_the_clients_use() -> None:
    assert members(MetadataView) == {"brokers", "controller_id", "topics", "partitions"}
    assert members(ClusterContext) == {"scheduler", "transport", "metadata"}
    assert members(TopicAdmin) == {"create_topic", "delete_topic", "create_partitions", "alter_topic_config",
                                   "topic_config", "list_topics", "describe", "metrics", "ensure_offsets_topic",
                                   "ensure_transaction_state_topic"}
    assert members(ServedCluster) - members(ClusterContext) - members(TopicAdmin) == {
        "brokers", "path", "config", "auto_create_topics", "num_partitions", "default_replication_factor",
        "has_offsets_topic"}
    assert _CALLS == members(TopicAdmin)  # what a shared queue's client may ask its owner to run


def test_a_simulated_cluster_implements_both_interfaces(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, brokers=2, seed=11) as cluster:
        for name in sorted(members(ServedCluster)):
            assert hasattr(cluster, name), name
        assert isinstance(cluster, ServedCluster) and isinstance(cluster.metadata, MetadataView)
        assert served(cluster) == [0, 1]
        cluster.create_topic("t", replication_factor=2)
        assert round_trip(cluster, "t") == [b"through the interface"]
        assert admin(cluster, "admin") == ["admin", "t"]
        assert not cluster.has_offsets_topic()
        cluster.ensure_offsets_topic()
        assert cluster.has_offsets_topic()
        cluster.ensure_offsets_topic()  # exists: nothing to do
        assert "__transaction_state" not in cluster.list_topics(include_internal=True)
        cluster.ensure_transaction_state_topic()
        cfg = cluster.store.topics["__transaction_state"]
        assert (cfg.partitions, cfg.replication_factor, cfg.configs) == (5, 2, {"cleanup_policy": "compact"})
        cluster.ensure_transaction_state_topic()  # exists: nothing to do


def test_a_real_time_cluster_implements_both_interfaces(tmp_path: pathlib.Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        assert isinstance(cluster, ServedCluster)
        cluster.create_topic("t")
        assert round_trip(cluster, "t") == [b"through the interface"]


def test_the_shared_queue_implements_the_client_interface_in_both_roles(tmp_path: pathlib.Path) -> None:
    owner = pylog.open(tmp_path)
    assert isinstance(owner, SharedCluster)  # the default: shared by processes
    try:
        client = SharedCluster(tmp_path)  # the directory is owned (by this process): a client of it
        try:
            assert (owner.role, client.role) == ("owner", "client")
            for q in (owner, client):
                for name in sorted(members(ClusterContext) | members(TopicAdmin)):
                    assert hasattr(q, name), name
                assert isinstance(q, ClusterContext) and isinstance(q, TopicAdmin)
                assert isinstance(q.metadata, MetadataView)
                assert not isinstance(q, ServedCluster)  # its brokers may be in another process
            assert admin(client, "by-client") == ["by-client"]  # run by the owner
            assert admin(owner, "by-owner") == ["by-owner"]
            owner.create_topic("jobs")
            assert round_trip(owner, "jobs") == [b"through the interface"]
            assert round_trip(client, "jobs", expect=2) == [b"through the interface"] * 2
            client.ensure_offsets_topic()  # run by the owner, seen in the client's mirror
            assert client.has_offsets_topic() and owner.has_offsets_topic()
            client.ensure_transaction_state_topic()  # run by the owner, seen in the client's mirror
            assert "__transaction_state" in client.metadata.topics
        finally:
            client.close()
    finally:
        owner.close()


def test_an_object_missing_a_member_is_not_a_cluster_context() -> None:
    class NoMetadata:
        scheduler = None
        transport = None

    assert not isinstance(NoMetadata(), ClusterContext)
    with pytest.raises(AttributeError):
        Producer(NoMetadata())  # type: ignore[arg-type]  # mypy refuses it too
