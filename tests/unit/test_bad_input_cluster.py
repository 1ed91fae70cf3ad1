"""The bad-input matrix for the cluster (issue 6), one test per row.

Simulated clusters (a seed: virtual time, in-process brokers on real files).
Each row: a named pylog.errors exception, nothing created or acknowledged
that should not be, and the cluster usable afterwards.
"""
from __future__ import annotations

import errno
import os
from typing import Dict, Iterator, List, Tuple

import pytest

from pylog import errors
from pylog.cluster import Cluster


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "c", brokers=3, seed=11, log_config={"flush_messages": 1})
    try:
        yield c
    finally:
        c.close()


def _partition_dirs(c: Cluster) -> List[str]:
    return sorted(n for b in range(3) for n in os.listdir(os.path.join(c.path, f"broker-{b}")) if not n.startswith("."))


def _read_all(c: Cluster, topic: str) -> Dict[int, bytes]:
    cons = c.consumer(None, [topic], fetch_max_wait_ms=50)
    got: Dict[int, bytes] = {}
    for _ in range(20):
        for r in cons.poll(0.2):
            got[r.offset] = r.value
    return got


@pytest.mark.parametrize("name", ["", "..", ".", "a/b", "../escape", "x" * 250, "a b", 7, None])
def test_create_topic_with_a_bad_name(cluster: Cluster, name: object) -> None:
    with pytest.raises(errors.InvalidTopicError) as info:
        cluster.create_topic(name, partitions=2)  # type: ignore[arg-type]
    assert "topic" in str(info.value)
    assert _partition_dirs(cluster) == [] and not cluster.store.topics
    cluster.create_topic("ok", partitions=1)  # the cluster is still usable
    assert _partition_dirs(cluster)


def test_create_topic_with_an_unknown_config_name(cluster: Cluster) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        cluster.create_topic("t", config={"retention_hours": 1})
    assert "retention_hours" in str(info.value) and "'t'" in str(info.value)
    assert _partition_dirs(cluster) == [] and "t" not in cluster.store.topics


@pytest.mark.parametrize("kwargs, what", [
    ({"partitions": "3"}, "partitions"),
    ({"partitions": 0}, "partitions"),
    ({"partitions": 2.0}, "partitions"),
    ({"replication_factor": "2"}, "replication_factor"),
    ({"replication_factor": 4}, "replication_factor"),
    ({"min_insync_replicas": "1"}, "min_insync_replicas"),
    ({"min_insync_replicas": 4}, "min_insync_replicas"),
    ({"config": {"retention_ms": "1d"}}, "retention_ms"),
    ({"config": {"segment_bytes": -1}}, "segment_bytes"),
])
def test_create_topic_with_wrong_types_or_ranges(cluster: Cluster, kwargs: dict, what: str) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        cluster.create_topic("t", **kwargs)
    assert what in str(info.value)
    assert _partition_dirs(cluster) == [] and "t" not in cluster.store.topics


def test_oversized_record_names_topic_and_partition(cluster: Cluster) -> None:
    cluster.create_topic("big", partitions=2, replication_factor=3, config={"max_message_bytes": 1000})
    p = cluster.producer(acks="all")
    with pytest.raises(errors.RecordTooLargeError) as info:
        p.send("big", b"x" * 5000, partition=1).result()
    assert "big-1" in str(info.value) and "max_message_bytes=1000" in str(info.value)
    assert p.send("big", b"small", partition=1).result().offset == 0  # usable afterwards
    assert _read_all(cluster, "big") == {0: b"small"}


@pytest.mark.parametrize("where", ["write", "fsync"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("rf, acks", [(3, "all"), (1, 1)])
def test_disk_error_on_the_leader(tmp_path, where: str, err: int, rf: int, acks: object) -> None:
    """ENOSPC/EIO on the leader's write or fsync: KafkaStorageError is retriable (as Kafka's), so the
    producer retries until ``delivery_timeout_ms`` and then fails the send with the storage error
    (its errno, naming the partition) - itself, or named as the last error of the timeout; nothing
    unacknowledged becomes visible, every acknowledged record stays readable, and the partition
    takes new records afterwards."""
    c = Cluster(tmp_path / "c", brokers=3, seed=7, log_config={"flush_messages": 1})
    try:
        c.create_topic("t", partitions=1, replication_factor=rf)
        p = c.producer(acks=acks, delivery_timeout_ms=3_000, request_timeout_ms=1_000)
        acked: List[Tuple[int, bytes]] = [(p.send("t", b"a%d" % i).result().offset, b"a%d" % i) for i in range(3)]
        disk = c.brokers[c.leader_of("t", 0)].disk
        disk.fail_errno = err
        if where == "write":
            disk.fail_write_after = disk.writes
        else:
            disk.fail_fsync_after = disk.fsyncs
        try:
            with pytest.raises((errors.KafkaStorageError, errors.RequestTimedOutError)) as info:
                p.send("t", b"never-acked").result()
        finally:
            disk.fail_write_after = disk.fail_fsync_after = None
        assert p.retries >= 1
        if isinstance(info.value, errors.RequestTimedOutError):
            assert "last error: KafkaStorageError" in str(info.value)
        # The error crossed the transport as Kafka's error code plus message: the errno is in the text.
        assert os.strerror(err) in str(info.value) and "t-0" in str(info.value)
        c.advance(3_000)
        # The same producer goes on (an idempotent one starts a new producer id after the failure).
        r = p.send("t", b"after").result()
        acked.append((r.offset, b"after"))
        assert _read_all(c, "t") == dict(acked)
    finally:
        c.close()


# ---- client kwargs (the clients are being rewritten: these rows pin what must hold)

@pytest.mark.parametrize("kwargs", [{"acks": 2}, {"acks": "most"}, {"batch_size": "x"}])
def test_producer_bad_values(cluster: Cluster, kwargs: dict) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        cluster.producer(**kwargs)
    assert list(kwargs)[0] in str(info.value)


@pytest.mark.parametrize("kwargs", [
    {"acks": True}, {"acks": 1.0}, {"linger_ms": -1}, {"linger_ms": "5"}, {"max_in_flight": 0},
    {"request_timeout_ms": 0}, {"delivery_timeout_ms": -5}, {"retries": -1}, {"retry_backoff_ms": None},
    {"compression_type": "brotli"}, {"enable_idempotence": "yes"}, {"idempotence": 1},
])
def test_producer_wrong_types_or_ranges(cluster: Cluster, kwargs: dict) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        cluster.producer(**kwargs)
    assert list(kwargs)[0] in str(info.value)


def test_producer_unknown_kwarg_is_refused(cluster: Cluster) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        cluster.producer(acks="all", lingerms=5)
    msg = str(info.value)
    assert "lingerms" in msg and "linger_ms" in msg and "batch_size" in msg  # the known ones are listed


def test_consumer_unknown_kwarg_is_refused(cluster: Cluster) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        cluster.consumer(None, ["t"], auto_offset_rest="earliest")
    msg = str(info.value)
    assert "auto_offset_rest" in msg and "auto_offset_reset" in msg and "fetch_max_wait_ms" in msg


@pytest.mark.parametrize("kwargs", [
    {"fetch_max_wait_ms": "x"}, {"fetch_max_wait_ms": -1}, {"request_timeout_ms": -1}, {"session_timeout_ms": 0},
    {"heartbeat_interval_ms": True}, {"rebalance_timeout_ms": 1.5}, {"retry_backoff_ms": -100},
    {"auto_commit_interval_ms": -1}, {"max_partition_fetch_bytes": 0}, {"consumer_timeout_ms": -1},
    {"consumer_timeout_ms": "1s"}, {"auto_offset_reset": "bogus"}, {"isolation_level": "bogus"},
    {"max_poll_records": 0}, {"max_poll_records": "10"}, {"enable_auto_commit": "false"},
    {"client_id": 3}, {"partition_assignment_strategy": ["sticky-ish"]}, {"topics": [""]}, {"topics": [b"t"]},
    {"topics": 5}, {"pattern": 5},
])
def test_consumer_wrong_types_or_ranges(cluster: Cluster, kwargs: dict) -> None:
    cluster.create_topic("t", partitions=1)
    with pytest.raises(errors.InvalidConfigurationError) as info:
        cluster.consumer(None, **kwargs)
    name = list(kwargs)[0]
    assert ("assignor" if name == "partition_assignment_strategy" else name) in str(info.value)


def test_consumer_topics_as_one_str_is_one_topic(cluster: Cluster) -> None:
    """``topics="big"`` subscribes to the topic ``big``, never to ``b``, ``i``, ``g`` (in the
    constructor and in subscribe())."""
    for name in ("big", "b", "i", "g"):
        cluster.create_topic(name, partitions=1)
    p = cluster.producer(acks="all")
    for name in ("big", "b", "i", "g"):
        p.send(name, name.encode(), partition=0).result()
    cons = cluster.consumer(None, "big", fetch_max_wait_ms=50)
    assert cons.assignment() == [("big", 0)]
    got = [(r.topic, r.value) for _ in range(10) for r in cons.poll(0.2)]
    assert got == [("big", b"big")]
    cons.subscribe("g")
    assert cons.assignment() == [("g", 0)]


# ---- the Spark reader's subscribe option (validated on the driver before any Spark job)

@pytest.mark.parametrize("topics", ["", " , ", ","])
def test_spark_subscribe_without_a_topic(tmp_path, topics: str) -> None:
    from pylog.spark.layout import select_partitions

    with pytest.raises(errors.InvalidConfigurationError) as info:
        select_partitions(str(tmp_path), {"subscribe": topics} if topics else {"subscribe": topics, "assign": ""})
    assert "subscribe" in str(info.value)


@pytest.mark.parametrize("name", ["..", "../outside", "a/b", "x" * 250, "/etc"])
def test_spark_subscribe_to_a_bad_name_selects_nothing_outside(tmp_path, name: str) -> None:
    """Names are matched against the partitions listed under the path, never joined into a path:
    ``..`` or ``a/b`` cannot reach outside the log dir."""
    import pylog
    from pylog.spark.layout import select_partitions

    inner = tmp_path / "logs"
    with pylog.Log.open(str(inner / "good-0")) as lg:
        lg.append([b"x"])
    with pylog.Log.open(str(tmp_path / "outside-0")) as lg:  # a sibling of the log dir
        lg.append([b"y"])
    lenient = {"failonunknowntopic": "false"}
    assert select_partitions(str(inner), {"subscribe": name, **lenient}) == []
    assert select_partitions(str(inner), {"subscribe": f"{name},good", **lenient}) == [("good", 0)]
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="failOnUnknownTopic=false"):
        select_partitions(str(inner), {"subscribe": f"{name},good"})


# ---- issue 14, item 7: wrong errors (each used to be a bare TypeError/KeyError/ValueError/OSError)

@pytest.mark.parametrize("log_config, key", [
    ({"segment_bytes": 0}, "segment_bytes"),
    ({"segmentbytes": 1 << 20}, "segmentbytes"),
    ({"retention_ms": "1d"}, "retention_ms"),
    ({"flush_messages": 1.5}, "flush_messages"),
])
def test_cluster_refuses_a_bad_log_config_at_construction(tmp_path, log_config: dict, key: str) -> None:
    """Refused before anything starts (it used to be accepted, and create_topic then waited 30 s
    and left a half-created topic)."""
    with pytest.raises(errors.InvalidConfigurationError) as info:
        Cluster(tmp_path / "c", brokers=3, seed=1, log_config=log_config)
    assert key in str(info.value) and "log_config" in str(info.value)
    assert not os.path.exists(tmp_path / "c" / "cluster-metadata.json")


def test_cluster_refuses_a_log_config_that_is_not_a_dict(tmp_path) -> None:
    with pytest.raises(errors.InvalidConfigurationError, match="log_config must be a dict"):
        Cluster(tmp_path / "c", brokers=1, seed=1, log_config=[("segment_bytes", 4096)])  # type: ignore[arg-type]


@pytest.mark.parametrize("loss", [2.0, -0.1, 1.0, "0.1"])
def test_cluster_refuses_a_bad_loss(tmp_path, loss: object) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        Cluster(tmp_path / "c", brokers=1, seed=1, loss=loss)  # type: ignore[arg-type]
    assert "loss" in str(info.value)


def test_simulation_refuses_a_bad_loss(tmp_path) -> None:
    from pylog.simulation import SimConfig, Simulation

    with pytest.raises(errors.InvalidConfigurationError) as info:
        Simulation(str(tmp_path), SimConfig(loss=2.0, duration_ms=100))
    assert "loss" in str(info.value) and "2.0" in str(info.value)


@pytest.mark.parametrize("call", ["stop_broker", "start_broker"])
@pytest.mark.parametrize("broker", [99, -1, "0", None, True])
def test_stop_or_start_an_unknown_broker(cluster: Cluster, call: str, broker: object) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        getattr(cluster, call)(broker)
    assert repr(broker) in str(info.value) and "brokers [0, 1, 2]" in str(info.value)
    assert all(b.running for b in cluster.brokers.values())


def test_leader_of_an_unknown_partition(cluster: Cluster) -> None:
    cluster.create_topic("t", partitions=1)
    with pytest.raises(errors.UnknownTopicOrPartitionError, match="'t'-3"):
        cluster.leader_of("t", 3)


@pytest.mark.parametrize("headers, what", [
    (5, "headers must be a list"),
    ("k=v", "headers must be a list"),
    ([("k", "v")], "header 0"),
    ([(b"k", b"v")], "header 0"),
    ([("k", b"v", b"x")], "header 0"),
])
def test_send_with_bad_headers_sends_nothing(cluster: Cluster, headers: object, what: str) -> None:
    cluster.create_topic("t", partitions=1)
    p = cluster.producer()
    with pytest.raises(errors.InvalidRecordError) as info:
        p.send("t", b"v", headers=headers)  # type: ignore[arg-type]
    assert what in str(info.value)
    assert p.send("t", b"ok", headers=[("k", b"v")]).result().offset == 0  # nothing was written before


@pytest.mark.parametrize("records", [5, 1.5, object()])
def test_log_append_of_a_non_list(tmp_path, records: object) -> None:
    import pylog

    with pylog.Log.open(str(tmp_path / "t-0")) as lg:
        with pytest.raises(errors.InvalidConfigurationError) as info:
            lg.append(records)  # type: ignore[arg-type]
        assert "list of records" in str(info.value) and "t-0" in str(info.value)
        assert lg.log_end_offset == 0


@pytest.mark.parametrize("kwarg", ["leader_epoch", "producer_id", "producer_epoch", "base_sequence"])
def test_log_append_with_a_non_int_argument(tmp_path, kwarg: str) -> None:
    import pylog

    with pylog.Log.open(str(tmp_path / "t-0")) as lg:
        with pytest.raises(errors.InvalidConfigurationError) as info:
            lg.append([b"v"], **{kwarg: "x"})
        assert kwarg in str(info.value) and "'x'" in str(info.value)
        assert lg.log_end_offset == 0


@pytest.mark.parametrize("ts", ["yesterday", 1.5, None, True])
def test_log_offset_for_time_needs_an_int(tmp_path, ts: object) -> None:
    import pylog

    with pylog.Log.open(str(tmp_path / "t-0")) as lg:
        lg.append([b"v"])
        with pytest.raises(errors.InvalidConfigurationError) as info:
            lg.offset_for_time(ts)  # type: ignore[arg-type]
        assert "offset_for_time" in str(info.value) and "t-0" in str(info.value)


def test_cluster_whose_metadata_disk_is_full_raises_a_storage_error(tmp_path, monkeypatch) -> None:
    """The very first metadata write (the controller's claim) fails: a MetadataStorageError (a
    KafkaStorageError) naming the file, not a bare OSError or a 10 s "no controller" timeout."""
    from pylog.storage.fileio import FileIO

    def full(self, path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(FileIO, "write_file_atomic", full)
    with pytest.raises(errors.KafkaStorageError) as info:
        Cluster(tmp_path / "c", brokers=1, seed=1)
    assert isinstance(info.value, errors.MetadataStorageError)
    assert "cluster-metadata.json" in str(info.value) and "No space left" in str(info.value)


def test_disk_full_on_close_is_a_storage_error(tmp_path) -> None:
    c = Cluster(tmp_path / "c", brokers=1, seed=1)
    c.create_topic("t", partitions=1, replication_factor=1)
    c.producer().send("t", b"v").result()
    disk = c.brokers[0].disk
    disk.fail_errno = errno.ENOSPC
    disk.fail_write_after = disk.writes
    disk.fail_fsync_after = disk.fsyncs
    with pytest.raises(errors.KafkaStorageError) as info:
        c.close()
    assert "broker 0" in str(info.value)
