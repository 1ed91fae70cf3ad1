"""Topic admin through the public API: delete_topic, create_partitions, alter_topic_config, topic_config,
list_topics, create_topic(exist_ok) - on simulated (seeded) and real-time clusters, with their bad inputs."""
from __future__ import annotations

import os

import pytest

import pylog
from pylog.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)


def _dirs(cluster, b):
    return sorted(n for n in os.listdir(os.path.join(cluster.path, f"broker-{b}")) if not n.startswith(".")
                  and "checkpoint" not in n)


def test_delete_topic_renames_every_replica_then_removes_it_and_the_name_can_be_reused(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=11)
    try:
        c.create_topic("orders", partitions=2, replication_factor=3)
        c.create_topic("keep", partitions=1, replication_factor=3)
        p = c.producer()
        for i in range(6):
            p.send("orders", b"v%d" % i, partition=i % 2).result()
        c.delete_topic("orders")
        assert c.list_topics() == ["keep"]
        for b in range(3):
            names = _dirs(c, b)
            assert "orders-0" not in names and "orders-1" not in names
            deleting = [n for n in names if n.startswith("orders-") and n.endswith("-delete")]
            assert len(deleting) == 2, names  # renamed Kafka-style, removed after file_delete_delay_ms
            assert all(n.split(".")[0] in ("orders-0", "orders-1") and len(n.split(".")[1]) == 32 + 7
                       for n in deleting)
        assert c.store.deleting == {}  # every replica confirmed
        c.advance(c.config.file_delete_delay_ms + 500)
        for b in range(3):
            assert _dirs(c, b) == ["keep-0"]
        with pytest.raises(UnknownTopicOrPartitionError):
            p.send("orders", b"x").result()
        with pytest.raises(UnknownTopicOrPartitionError):
            c.describe("orders")
        c.create_topic("orders", partitions=1, replication_factor=3)
        assert c.describe("orders")[0].high_watermark == 0  # a new, empty topic: nothing came back
        assert c.producer().send("orders", b"new").result().offset == 0  # (a new producer: docs/topics.md)
        c._check()
    finally:
        c.close()


def test_delete_topic_bad_inputs(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=1, seed=3)
    try:
        with pytest.raises(UnknownTopicOrPartitionError, match="'nope'"):
            c.delete_topic("nope")
        with pytest.raises(InvalidTopicError):
            c.delete_topic("bad/name")
        c.consumer(group_id="g", topics=[])  # creates __consumer_offsets
        with pytest.raises(InvalidTopicError, match="internal"):
            c.delete_topic("__consumer_offsets")
        assert "__consumer_offsets" in c.list_topics(include_internal=True)
        assert "__consumer_offsets" not in c.list_topics()
    finally:
        c.close()


def test_delete_topic_with_a_stopped_broker_completes_when_it_restarts(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=5)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=1)
        c.producer().send("t", b"x").result()
        c.stop_broker(2, clean=True)
        c.delete_topic("t")
        assert c.store.deleting == {"t": {2: [0]}}
        assert "t-0" in _dirs(c, 2)  # the stopped broker's copy is still there
        with pytest.raises(TopicAlreadyExistsError, match="marked for deletion"):
            c.create_topic("t", partitions=1)
        c.start_broker(2)
        c.advance(3_000)
        assert c.store.deleting == {}
        assert not [n for n in _dirs(c, 2) if n.startswith("t-")]
        c.create_topic("t", partitions=1, replication_factor=3)
    finally:
        c.close()


def test_deleting_a_consumed_topic_revokes_it_and_deletes_the_groups_offsets(tmp_path):
    """A consumer subscribed to a deleted topic loses its partitions (rebalance), nothing crashes, and
    the group's committed offsets of that topic are gone (Kafka's onPartitionsDeleted)."""
    c = pylog.Cluster(str(tmp_path), brokers=1)  # real time
    try:
        c.create_topic("gone", partitions=2, replication_factor=1)
        c.create_topic("stays", partitions=1, replication_factor=1)
        p = c.producer()
        for i in range(4):
            p.send("gone", b"g%d" % i, partition=i % 2).result(30)
        p.send("stays", b"s").result(30)
        revoked = []

        class Listener:
            def on_partitions_revoked(self, parts):
                revoked.extend(parts)

            def on_partitions_assigned(self, parts):
                pass

        consumer = c.consumer(group_id="g", topics=["gone", "stays"], auto_offset_reset="earliest",
                              enable_auto_commit=False)
        consumer.subscribe(["gone", "stays"], listener=Listener())
        got = []
        for _ in range(100):
            got += consumer.poll(timeout=0.2)
            if len(got) >= 5:
                break
        assert len(got) == 5
        consumer.commit()
        assert set(c.list_group_offsets("g")) == {("gone", 0), ("gone", 1), ("stays", 0)}
        c.delete_topic("gone")
        for _ in range(100):
            consumer.poll(timeout=0.1)  # must not raise
            if consumer.assignment() == [("stays", 0)] and set(c.list_group_offsets("g")) == {("stays", 0)}:
                break
        assert consumer.assignment() == [("stays", 0)]
        assert {tp for tp in revoked if tp[0] == "gone"} == {("gone", 0), ("gone", 1)}
        assert set(c.list_group_offsets("g")) == {("stays", 0)}
        p.send("stays", b"s2").result(30)
        more = []
        for _ in range(100):
            more += consumer.poll(timeout=0.2)
            if more:
                break
        assert [r.value for r in more] == [b"s2"]
    finally:
        c.close()


def test_create_partitions_grows_the_topic_and_producers_and_consumers_see_it(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=2)
    try:
        c.create_topic("t", partitions=2, replication_factor=2)
        consumer = c.consumer(topics=["t"], auto_offset_reset="earliest")  # no group: reads every partition
        c.create_partitions("t", 4)
        assert [r.partition for r in c.describe("t")] == [0, 1, 2, 3]
        assert all(r.leader >= 0 and len(r.replicas) == 2 for r in c.describe("t"))
        meta = c.producer().send("t", b"v", partition=3).result()
        assert (meta.partition, meta.offset) == (3, 0)
        got = []
        for _ in range(50):
            got += consumer.poll(timeout=0.2)
            if got:
                break
        assert [(r.partition, r.value) for r in got] == [(3, b"v")]
        assert sorted(consumer.assignment()) == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]
        for bad in (4, 3, 0):
            with pytest.raises(InvalidPartitionsError, match="4 partitions"):
                c.create_partitions("t", bad)
        with pytest.raises(InvalidPartitionsError):
            c.create_partitions("t", "5")
        with pytest.raises(UnknownTopicOrPartitionError):
            c.create_partitions("nope", 9)
        c._check()
    finally:
        c.close()


def test_alter_topic_config_takes_dotted_and_snake_names_and_applies_to_running_logs(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=2, seed=4)
    try:
        c.create_topic("t", partitions=1, replication_factor=2, config={"retention.ms": 5_000})
        assert c.topic_config("t")["retention_ms"] == 5_000
        c.alter_topic_config("t", {"segment.bytes": "200", "max.message.bytes": 150, "cleanup_policy": "compact",
                                   "min.insync.replicas": "2"})
        cfg = c.topic_config("t")
        assert (cfg["segment_bytes"], cfg["max_message_bytes"], cfg["cleanup_policy"], cfg["min_insync_replicas"]) \
            == (200, 150, "compact", 2)
        assert cfg["retention_ms"] == 5_000  # untouched
        kafka = c.topic_config("t", kafka_names=True)
        assert kafka["segment.bytes"] == 200 and kafka["unclean.leader.election.enable"] is False
        assert kafka["flush.messages"] is None and kafka["index.interval.bytes"] == 4096  # defaults included
        for b in range(2):
            log = c.brokers[b].rm.partitions[("t", 0)].log
            assert (log.config.segment_bytes, log.config.max_message_bytes, log.config.cleanup_policy) \
                == (200, 150, "compact")
        p = c.producer()
        with pytest.raises(pylog.errors.RecordTooLargeError):
            p.send("t", b"x" * 300, key=b"k").result()
        for i in range(6):  # small segments: the running leader rolls at the new segment.bytes
            p.send("t", b"y" * 40, key=b"k%d" % i).result()
        leader = c.brokers[c.leader_of("t", 0)].rm.partitions[("t", 0)].log
        assert len(leader.segments) > 1
        c.alter_topic_config("t", {"retention.ms": None})  # back to the default
        assert c.topic_config("t")["retention_ms"] == pylog.LogConfig().retention_ms
    finally:
        c.close()
    c = pylog.Cluster(str(tmp_path), brokers=2, seed=4)  # the configs survive a restart
    try:
        assert c.topic_config("t")["segment_bytes"] == 200
        assert c.brokers[0].rm.partitions[("t", 0)].log.config.segment_bytes == 200
    finally:
        c.close()


def test_alter_topic_config_bad_inputs(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=1, seed=1)
    try:
        c.create_topic("t")
        with pytest.raises(InvalidConfigurationError, match="unknown config retention.mss"):
            c.alter_topic_config("t", {"retention.mss": 1})
        with pytest.raises(InvalidConfigurationError, match="segment.bytes"):
            c.alter_topic_config("t", {"segment.bytes": "lots"})
        with pytest.raises(InvalidConfigurationError, match="min.insync.replicas"):
            c.alter_topic_config("t", {"min.insync.replicas": 2})  # above the replication factor
        with pytest.raises(InvalidConfigurationError, match="cleanup_policy"):
            c.alter_topic_config("t", {"cleanup.policy": "shred"})
        with pytest.raises(UnknownTopicOrPartitionError):
            c.alter_topic_config("nope", {"retention.ms": 1})
        with pytest.raises(UnknownTopicOrPartitionError):
            c.topic_config("nope")
        with pytest.raises(InvalidConfigurationError, match="unknown config bogus"):
            c.create_topic("u", config={"bogus": 1})
        assert c.topic_config("t")["retention_ms"] == pylog.LogConfig().retention_ms  # nothing half-applied
        assert c.list_topics() == ["t"]
    finally:
        c.close()


def test_create_topic_exist_ok(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=1, seed=9)
    try:
        c.create_topic("t", partitions=2)
        c.create_topic("t", partitions=5, exist_ok=True)  # quietly: the existing topic is kept
        assert len(c.describe("t")) == 2
        with pytest.raises(TopicAlreadyExistsError):
            c.create_topic("t")
    finally:
        c.close()


def test_deletion_and_partitions_survive_a_restart(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=21)
    c.create_topic("a", partitions=1, replication_factor=3)
    c.create_topic("b", partitions=1, replication_factor=3)
    c.create_partitions("b", 3)
    c.delete_topic("a")
    c.close()
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=21)
    try:
        assert c.list_topics() == ["b"]
        assert len(c.describe("b")) == 3
        c.advance(2_000)
        for b in range(3):
            assert not [n for n in _dirs(c, b) if n.startswith("a-")]
    finally:
        c.close()


def test_a_crash_in_the_middle_of_a_deletion_completes_it_after_restart(tmp_path):
    """Simulated crash: the deletion reached the metadata but no broker acted on it (the controller's
    outbox is dropped), then every broker crashes. The reopened cluster finishes the deletion."""
    c = pylog.Cluster(str(tmp_path), brokers=2, seed=8)
    c.create_topic("t", partitions=2, replication_factor=2)
    c.create_topic("other", partitions=1, replication_factor=2)
    p = c.producer()
    for i in range(4):
        p.send("t", b"%d" % i, partition=i % 2).result()
    c.scheduler.run_sync(lambda: c._controller().delete_topic("t"))  # outbox never sent: "crash" here
    assert "t" not in c.store.topics and c.store.deleting == {"t": {0: [0, 1], 1: [0, 1]}}
    for b in range(2):
        c.stop_broker(b, clean=False)
    c.close()
    for b in range(2):
        assert {"t-0", "t-1"} <= set(_dirs(c, b))  # the data is still on disk
    c = pylog.Cluster(str(tmp_path), brokers=2, seed=8)
    try:
        c.advance(3_000)
        assert c.store.deleting == {}
        assert c.list_topics() == ["other"]
        for b in range(2):
            assert _dirs(c, b) == ["other-0"]
        with pytest.raises(UnknownTopicOrPartitionError):
            c.describe("t")
    finally:
        c.close()


def test_shared_queue_client_forwards_topic_admin_to_the_owner(tmp_path):
    d = str(tmp_path / "q")
    owner = pylog.open(d)
    client = pylog.open(d)
    try:
        assert (owner.role, client.role) == ("owner", "client")
        client.create_topic("t", partitions=1, config={"retention.ms": "60000"})
        client.create_topic("t", exist_ok=True)
        with pytest.raises(TopicAlreadyExistsError):
            client.create_topic("t")
        client.create_partitions("t", 3)
        with pytest.raises(InvalidPartitionsError):
            client.create_partitions("t", 2)
        assert len(owner.describe("t")) == 3
        client.alter_topic_config("t", {"max.message.bytes": 500})
        with pytest.raises(InvalidConfigurationError, match="nope.ms"):
            client.alter_topic_config("t", {"nope.ms": 1})
        assert owner.topic_config("t")["max_message_bytes"] == 500
        assert client.topic_config("t", kafka_names=True)["retention.ms"] == 60000
        consumer = owner.consumer("g", ["t"])
        assert client.list_topics() == ["t"] and "__consumer_offsets" in client.list_topics(include_internal=True)
        client.delete_topic("t")
        assert owner.list_topics() == [] and client.list_topics() == []
        assert not [n for n in os.listdir(os.path.join(d, "broker-0")) if n.startswith("t-") and "." not in n]
        with pytest.raises(UnknownTopicOrPartitionError):
            client.delete_topic("t")
        for _ in range(50):
            consumer.poll(timeout=0.1)  # must not raise
            if not consumer.assignment():
                break
        assert consumer.assignment() == []
    finally:
        client.close()
        owner.close()


def test_groupless_and_assigned_consumers_of_a_deleted_topic_go_on(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=2, seed=13)
    try:
        c.create_topic("gone", partitions=2, replication_factor=2)
        c.create_topic("stays", partitions=1, replication_factor=2)
        p = c.producer()
        p.send("gone", b"g", partition=0).result()
        sub = c.consumer(topics=["gone", "stays"], auto_offset_reset="earliest")
        pinned = c.consumer(auto_offset_reset="earliest")
        pinned.assign([("gone", 0), ("stays", 0)])
        assert [r.value for r in sub.poll(timeout=1.0)] == [b"g"]
        assert [r.value for r in pinned.poll(timeout=1.0)] == [b"g"]
        c.delete_topic("gone")
        c.advance(500)
        assert sub.assignment() == [("stays", 0)]
        p.send("stays", b"s").result()
        assert [r.value for r in sub.poll(timeout=1.0)] == [b"s"]
        assert [r.value for r in pinned.poll(timeout=1.0)] == [b"s"]  # the deleted partition: nothing, no error
        # what the brokers answer for it: Kafka's UNKNOWN_TOPIC_OR_PARTITION, not "not the leader"
        from pylog.replication.messages import FetchRequest, ProduceRequest

        for b in c.brokers.values():
            out = c.scheduler.run_sync(lambda b=b: b.rm.handle("probe", FetchRequest(-1, "gone", 0, 0, -1, 1), c.now_ms))
            assert out.items[0][1].error is UnknownTopicOrPartitionError
            out = c.scheduler.run_sync(lambda b=b: b.rm.handle("probe", ProduceRequest("gone", 1, [b"x"], 1, 1000, 2),
                                                                c.now_ms))
            assert out.items[0][1].error is UnknownTopicOrPartitionError
    finally:
        c.close()


def test_a_topics_file_delete_delay_ms_keeps_its_renamed_directories_that_long(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=1, seed=17)
    try:
        c.create_topic("slow", config={"file.delete.delay.ms": 60_000})
        c.create_topic("fast")
        c.delete_topic("slow")
        c.delete_topic("fast")
        c.advance(5_000)
        left = [n for n in _dirs(c, 0) if n.endswith("-delete")]
        assert len(left) == 1 and left[0].startswith("slow-0.")
        c.advance(60_000)
        assert [n for n in _dirs(c, 0) if n.endswith("-delete")] == []
    finally:
        c.close()


def test_a_producer_of_a_topic_recreated_smaller_fails_the_missing_partition_at_once(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=1, seed=19)
    try:
        c.create_topic("t", partitions=2)
        p = c.producer()
        p.send("t", b"a", partition=1).result()
        c.delete_topic("t")
        c.create_topic("t", partitions=1)
        with pytest.raises(UnknownTopicOrPartitionError, match="no partition 1 now"):
            p.send("t", b"b", partition=1).result()
        assert p.send("t", b"c", partition=0).result().offset == 0
    finally:
        c.close()


def test_create_topic_when_the_controller_is_lost_after_the_wait(tmp_path) -> None:
    # Regression (found by mypy): the controller id read after the wait could be None - a bare
    # KeyError out of create_topic instead of the wait's LeaderNotAvailableError.
    from pylog.cluster import Cluster
    from pylog.errors import LeaderNotAvailableError

    c = Cluster(str(tmp_path / "c"), brokers=1, seed=3)
    try:
        c._wait = lambda *args, **kwargs: None  # the wait saw a controller...
        c.store.controller_id = None  # ...which is gone when the call runs
        with pytest.raises(LeaderNotAvailableError, match="no active controller"):
            c.create_topic("t")
        assert "t" not in c.store.topics
    finally:
        c.close()
