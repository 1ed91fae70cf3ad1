"""Kafka's consumer essentials on pylog's clients: offsets_for_times, beginning/end offsets, pause/resume,
(de)serializers, TopicPartition/OffsetAndMetadata (pylog's and kafka-python's), poll(timeout_ms=...).

Simulated clusters (virtual time): replayable, no timing in the assertions.
"""
from __future__ import annotations

import json

import kafka.structs as kstructs
import pytest

import pylog
from pylog.cluster import Cluster
from pylog.errors import (
    InvalidConfigurationError,
    InvalidOffsetError,
    SerializationError,
    UnknownTopicOrPartitionError,
)

TP = pylog.TopicPartition
T0 = 1_700_000_000_000


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=11)
    c.create_topic("t", partitions=2, replication_factor=1)
    yield c
    c.close()


def fill(c, n=20, partition=0):
    """``n`` records with timestamps T0, T0+10, ..., keys k<i>, values v<i>."""
    p = c.producer(acks="all")
    metas = [p.send("t", b"v%d" % i, key=b"k%d" % i, partition=partition, timestamp=T0 + 10 * i) for i in range(n)]
    out = [m.result().offset for m in metas]
    p.close()
    return out


def drain(cons, want, rounds=60):
    got = []
    for _ in range(rounds):
        got += cons.poll(0.2)
        if len(got) >= want:
            break
    return got


def test_offsets_for_times_beginning_and_end_offsets(cluster):
    fill(cluster, 20)
    cons = cluster.consumer()  # no assignment needed
    ends = cons.end_offsets([TP("t", 0), ("t", 1)])
    assert ends == {TP("t", 0): 20, TP("t", 1): 0} and all(type(k) is TP for k in ends)
    assert cons.beginning_offsets([kstructs.TopicPartition("t", 0)]) == {("t", 0): 0}
    found = cons.offsets_for_times({TP("t", 0): T0 + 55, ("t", 1): T0, kstructs.TopicPartition("t", 0): T0 + 55})
    assert found[TP("t", 0)] == pylog.OffsetAndTimestamp(6, T0 + 60, found[TP("t", 0)].leader_epoch)
    assert found[TP("t", 0)].leader_epoch >= 0
    assert found[TP("t", 1)] is None  # an empty partition has no record that late
    assert cons.offsets_for_times({("t", 0): T0})[("t", 0)].offset == 0
    assert cons.offsets_for_times({("t", 0): T0 + 190})[("t", 0)].offset == 19
    assert cons.offsets_for_times({("t", 0): T0 + 191}) == {("t", 0): None}  # later than every record
    cons.close()


@pytest.mark.parametrize(
    "arg,error,message",
    [
        ({("t", 0): -5}, InvalidConfigurationError, r"target time for t-0 is -5; it cannot be negative"),
        ({("t", 0): "yesterday"}, InvalidConfigurationError, r"t-0 must be an int of milliseconds"),
        ({("t", 0): True}, InvalidConfigurationError, r"must be an int"),
        ({("t", 9): 1}, UnknownTopicOrPartitionError, r"t-9 does not exist \(topic 't' has 2 partitions\)"),
        ({("nope", 0): 1}, UnknownTopicOrPartitionError, r"nope-0 does not exist"),
        ({"t": 1}, InvalidConfigurationError, r"TopicPartition or a \(topic, partition\) pair"),
        ([("t", 0)], InvalidConfigurationError, r"takes a dict"),
    ],
)
def test_offsets_for_times_bad_input(cluster, arg, error, message):
    cons = cluster.consumer()
    with pytest.raises(error, match=message):
        cons.offsets_for_times(arg)
    cons.close()


def test_pause_resume_paused(cluster):
    fill(cluster, 10, partition=0)
    fill(cluster, 10, partition=1)
    cons = cluster.consumer(max_poll_records=3)
    cons.assign([TP("t", 0), TP("t", 1)])
    first = cons.poll(1.0)  # some records buffered for both partitions
    assert first
    cons.pause(TP("t", 1))
    assert cons.paused() == {TP("t", 1)}
    pos1 = cons.position("t", 1)
    got = drain(cons, 10)
    assert {r.partition for r in got} <= {0}  # nothing of the paused partition is returned
    assert cons.position("t", 1) == pos1
    cons.resume(kstructs.TopicPartition("t", 1))
    assert cons.paused() == set()
    rest = drain(cons, 10 - pos1)
    ones = [r.offset for r in first + got + rest if r.partition == 1]
    assert ones == list(range(10))  # every record of t-1 exactly once, in order, across the pause
    with pytest.raises(UnknownTopicOrPartitionError, match=r"t-5 is not assigned to this consumer"):
        cons.pause(("t", 5))
    cons.assign([TP("t", 0)])
    with pytest.raises(UnknownTopicOrPartitionError, match=r"t-1 is not assigned"):
        cons.pause(TP("t", 1))
    with pytest.raises(InvalidConfigurationError, match="TopicPartition or a"):
        cons.pause("t")
    cons.close()


def test_pause_is_dropped_when_a_partition_is_given_up(cluster):
    cons = cluster.consumer()
    cons.assign([("t", 0), ("t", 1)])
    cons.pause(("t", 0), ("t", 1))
    cons.assign([("t", 1)])
    cons.assign([("t", 0), ("t", 1)])
    assert cons.paused() == set()
    cons.close()


def test_serializers_and_deserializers(cluster):
    p = cluster.producer(value_serializer=lambda v: json.dumps(v).encode(), key_serializer=str.encode)
    p.send("t", {"n": 1}, key="a", partition=0).result()
    p.send("t", None, key="tomb", partition=0).result()  # None stays null: no serializer call
    p.send("t", {"n": 2}, partition=0).result()
    with pytest.raises(SerializationError, match=r"value_serializer raised TypeError.*topic 't'"):
        p.send("t", {"n": {1, 2}}, partition=0)
    bad = cluster.producer(value_serializer=lambda v: v)
    with pytest.raises(SerializationError, match=r"value_serializer returned int, not bytes"):
        bad.send("t", 5)
    p.close()
    bad.close()
    cons = cluster.consumer(value_deserializer=lambda b: json.loads(b.decode()), key_deserializer=bytes.decode)
    cons.assign([("t", 0)])
    got = drain(cons, 3)
    assert [(r.key, r.value) for r in got] == [("a", {"n": 1}), ("tomb", None), (None, {"n": 2})]
    cons.close()
    broken = cluster.consumer(value_deserializer=lambda b: 1 / 0)
    broken.assign([("t", 0)])
    with pytest.raises(SerializationError, match=r"value_deserializer raised ZeroDivisionError.*offset 0 of t-0"):
        drain(broken, 1)
    broken.close()
    with pytest.raises(InvalidConfigurationError, match="value_deserializer must be a callable"):
        cluster.consumer(value_deserializer="json")
    with pytest.raises(InvalidConfigurationError, match="bootstrap_servers: an in-process producer"):
        cluster.producer(bootstrap_servers="localhost:9092")


def test_topic_partition_and_offset_and_metadata_accepted_everywhere(cluster):
    fill(cluster, 10)
    cons = cluster.consumer(group_id="g", enable_auto_commit=False)
    ktp = kstructs.TopicPartition("t", 0)
    cons.assign([ktp])
    assert cons.assignment() == [TP("t", 0)] and cons.assignment()[0].topic == "t"
    assert cons.position(ktp) == 0 and cons.position("t", 0) == 0
    cons.seek(ktp, 4)
    assert cons.position(TP("t", 0)) == 4
    cons.seek(partition=ktp, offset=6)  # kafka-python's keywords
    assert drain(cons, 4)[0].offset == 6
    cons.seek(TP("t", 0), pylog.OffsetAndMetadata(2))
    assert cons.position(ktp, timeout_ms=5_000) == 2
    cons.commit({ktp: kstructs.OffsetAndMetadata(7, "from kafka-python", -1)})
    assert cons.committed(ktp) == 7
    assert cons.committed(TP("t", 0), metadata=True) == pylog.OffsetAndMetadata(7, "from kafka-python", -1)
    cons.commit({TP("t", 0): pylog.OffsetAndMetadata(8, "mine")})
    assert cons.committed("t", 0) == 8
    cons.commit({("t", 0): 9})
    assert cons.committed(ktp) == 9
    cons.seek_to_end(ktp)
    assert cons.position(ktp) == 10
    cons.seek_to_beginning(TP("t", 0))
    assert cons.position(ktp) == 0
    assert cons.highwater(ktp) in (None, 10) and cons.highwater("t", 0) == cons.highwater(ktp)
    for bad, error, message in [
        (lambda: cons.commit({ktp: -1}), InvalidOffsetError, r"offset to commit for t-0 must be an int >= 0"),
        (lambda: cons.commit({"t": 1}), InvalidConfigurationError, r"a key of offsets must be a TopicPartition"),
        (lambda: cons.commit([ktp]), InvalidConfigurationError, r"offsets must be a dict"),
        (lambda: cons.seek(ktp), InvalidConfigurationError, r"no offset given for t-0"),
        (lambda: cons.seek("t", "0", 1), InvalidConfigurationError, r"an int partition"),
        (lambda: cons.assign(("t", 0)), InvalidConfigurationError, r"must be a collection of TopicPartitions"),
        (lambda: cons.assign([("t", -1)]), InvalidConfigurationError, r"partition of 't' must be an int >= 0"),
        (lambda: cons.position(ktp, 3), InvalidConfigurationError, r"too many arguments"),
        (lambda: cons.poll(timeout_ms=-1), InvalidConfigurationError, r"timeout_ms must be a number >= 0"),
        (lambda: cons.poll(1.0, timeout_ms=5), InvalidConfigurationError, r"not both"),
    ]:
        with pytest.raises(error, match=message):
            bad()
    cons.close()


def test_poll_timeout_ms_and_the_per_partition_view(cluster):
    fill(cluster, 5, partition=0)
    fill(cluster, 3, partition=1)
    cons = cluster.consumer(topics=["t"])
    got = []
    for _ in range(60):
        batch = cons.poll(timeout_ms=200)
        got += batch
        if len(got) >= 8:
            break
    assert sorted((r.partition, r.offset) for r in got) == [(0, i) for i in range(5)] + [(1, i) for i in range(3)]
    cons.seek_to_beginning()
    res = drain(cons, 8)
    assert isinstance(cons.poll(timeout_ms=0), pylog.PollResult)
    whole = pylog.PollResult(res)
    by = dict(whole.items())
    assert set(by) == {TP("t", 0), TP("t", 1)} and [r.offset for r in by[TP("t", 1)]] == [0, 1, 2]
    assert whole[("t", 0)] == by[TP("t", 0)] and whole.get(kstructs.TopicPartition("t", 1)) == by[TP("t", 1)]
    assert whole[0] is res[0] and list(whole.values()) == list(by.values()) and set(whole.keys()) == set(by)
    assert cons.topics() == {"t"} and cons.partitions_for_topic("t") == {0, 1} and cons.partitions_for_topic("x") is None
    cons.close()


def test_listener_and_commit_results_carry_topic_partitions(cluster):
    fill(cluster, 3)
    seen = []

    class Listener:
        def on_partitions_assigned(self, assigned):
            seen.extend((tp.topic, tp.partition) for tp in assigned)  # kafka-python listeners read .topic

    cons = cluster.consumer(group_id="lg", topics=["t"], rebalance_listener=Listener(), enable_auto_commit=False)
    drain(cons, 3)
    cons.poll(0)  # listener calls run on the caller's thread at the next poll
    assert sorted(seen) == [("t", 0), ("t", 1)]
    done = cons.commit()
    assert done and all(type(k) is TP for k in done) and done[TP("t", 0)] == 3
    cons.close()
