"""Producer: batching by linger_ms / batch_size, flush, close, compression, ordering, retries, partitioning, config."""
from __future__ import annotations

import json
import os
import threading

import pytest

from pylog.client.partitioner import partition_for_key
from pylog.cluster import Cluster
from pylog.errors import (
    InvalidConfigurationError,
    NotEnoughReplicasError,
    ProducerClosedError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pylog.record import compression as codecs
from pylog.record import Record


def leader_log(c: Cluster, topic: str, partition: int = 0):
    return c.brokers[c.leader_of(topic, partition)].rm.partitions[(topic, partition)].log


def batches(c: Cluster, topic: str, partition: int = 0):
    log = leader_log(c, topic, partition)
    return log.read_batches(0, 1 << 30) if log.log_end_offset else []


@pytest.fixture
def sim(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=9)
    c.create_topic("t", partitions=1, replication_factor=1)
    yield c
    c.close()


def test_linger_holds_records_then_sends_one_batch(sim):
    p = sim.producer(acks="all", linger_ms=50)
    futs = [p.send("t", b"r%d" % i) for i in range(20)]
    sim.advance(20)
    assert leader_log(sim, "t").log_end_offset == 0 and not futs[0].done()  # still lingering
    sim.advance(100)
    assert [f.result().offset for f in futs] == list(range(20))
    bs = batches(sim, "t")
    assert len(bs) == 1 and len(bs[0]) == 20  # one batch of 20
    assert [r.value for r in bs[0].records()] == [b"r%d" % i for i in range(20)]


def test_batch_size_closes_batches(sim):
    p = sim.producer(acks="all", batch_size=1_000, linger_ms=10_000)
    futs = [p.send("t", b"x" * 100) for i in range(50)]
    p.flush()
    assert all(f.done() for f in futs)
    sizes = [len(b) for b in batches(sim, "t")]
    assert sum(sizes) == 50
    assert max(sizes) <= 9 and len(sizes) >= 6  # ~110 bytes a record: full at 9 records, not lingering 10 s
    assert sim.now_ms - futs[0]._batch.created_ms < 10_000


def test_flush_sends_lingering_records_and_waits(sim):
    p = sim.producer(acks="all", linger_ms=60_000)
    futs = [p.send("t", b"f%d" % i) for i in range(5)]
    t0 = sim.now_ms
    p.flush()
    assert all(f.done() for f in futs) and sim.now_ms - t0 < 1_000
    assert [f.result().offset for f in futs] == list(range(5))


def test_close_flushes_then_refuses_sends(sim):
    p = sim.producer(acks="all", linger_ms=60_000)
    fut = p.send("t", b"a")
    with p:
        pass  # __exit__ closes: flush first
    assert fut.result().offset == 0
    with pytest.raises(ProducerClosedError):
        p.send("t", b"b")
    p.close()  # idempotent


def test_close_zero_fails_outstanding(sim):
    p = sim.producer(acks="all", linger_ms=60_000)
    futs = [p.send("t", b"a%d" % i) for i in range(3)]
    p.close(0)
    for f in futs:
        assert f.done()
        with pytest.raises(ProducerClosedError):
            f.result()
    assert leader_log(sim, "t").log_end_offset == 0


def test_cluster_close_fails_outstanding(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=4)
    c.create_topic("t", 1, 1)
    p = c.producer(acks="all", linger_ms=60_000)
    fut = p.send("t", b"never")
    c.close()
    with pytest.raises(ProducerClosedError):
        fut.result()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_round_trip(sim, codec):
    if codec != "gzip":
        pytest.importorskip("cramjam")
    p = sim.producer(acks="all", compression_type=codec, linger_ms=5)
    vals = [b"value-%d-" % i * 20 for i in range(100)]
    futs = [p.send("t", v, key=b"k%d" % (i % 3), partition=0, headers=[("h", b"%d" % i)]) for i, v in enumerate(vals)]
    assert [f.result().offset for f in futs] == list(range(100))
    bs = batches(sim, "t")
    assert all(b.compression == codecs.CODECS[codec] for b in bs)
    assert sum(b.info.size for b in bs) < sum(map(len, vals))  # really compressed
    recs = [r for b in bs for r in b.records()]
    assert [r.value for r in recs] == vals
    assert [r.key for r in recs] == [b"k%d" % (i % 3) for i in range(100)]
    assert [tuple(r.headers) for r in recs] == [(("h", b"%d" % i),) for i in range(100)]


def test_keys_go_to_the_java_clients_partition(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=2)
    try:
        c.create_topic("k", partitions=7, replication_factor=1)
        p = c.producer(acks=1)
        for key in (b"21", b"foobar", b"abc", b"user-1", b""):
            assert p.send("k", b"v", key=key).result().partition == partition_for_key(key, 7)
        assert p.send("k", b"v", partition=5).result().partition == 5
    finally:
        c.close()


def test_records_without_key_stick_to_a_partition_until_the_batch_closes(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=8)
    try:
        c.create_topic("s", partitions=4, replication_factor=1)
        p = c.producer(acks="all", batch_size=550, linger_ms=60_000)
        futs = [p.send("s", b"y" * 100) for _ in range(40)]
        p.flush()
        parts = [f.result().partition for f in futs]
        runs = [parts[0]]
        for q in parts[1:]:
            if q != runs[-1]:
                runs.append(q)
        # ~5 records fill a batch; each full batch moves to another partition, never the same one
        assert 6 <= len(runs) <= 10 and all(a != b for a, b in zip(runs, runs[1:]))
        assert len(set(parts)) > 1
    finally:
        c.close()


def test_timestamps_and_metadata(sim):
    p = sim.producer(acks="all")
    ts = sim.now_ms - 5_000
    m = p.send("t", b"v", timestamp=ts).result()
    assert (m.topic, m.partition, m.offset, m.timestamp) == ("t", 0, 0, ts)
    m2 = p.send("t", b"w").result()
    assert m2.offset == 1 and abs(m2.timestamp - sim.now_ms) < 1_000
    assert leader_log(sim, "t").get(0).timestamp == ts
    assert leader_log(sim, "t").get(1).timestamp == m2.timestamp


def test_unknown_topic_and_partition_fail_the_future(sim):
    p = sim.producer()
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        p.send("nope", b"v").result()
    with pytest.raises(UnknownTopicOrPartitionError, match="no partition 3"):
        p.send("t", b"v", partition=3).result()


def test_acks_zero_and_one(sim):
    assert sim.producer(acks=0).send("t", b"z").result().offset == -1  # nobody says where
    p1 = sim.producer(acks=1)
    assert not p1.enable_idempotence  # Kafka 3: idempotence only by default with acks=all
    assert p1.send("t", b"o").result().offset in (0, 1)
    sim.advance(50)
    assert sorted(r.value for r in leader_log(sim, "t").read(0)) == [b"o", b"z"]


def test_invalid_configs():
    class FakeCluster:  # configuration is checked before the cluster is touched
        scheduler = None

    for kwargs in ({"acks": 2}, {"enable_idempotence": True, "acks": 1}, {"enable_idempotence": True, "max_in_flight": 6},
                   {"compression_type": "brotli"}, {"batch_size": 0}, {"linger_ms": -1}, {"transactional_id": ""},
                   {"transactional_id": "x", "acks": 1}):
        with pytest.raises(InvalidConfigurationError):
            from pylog.client.producer import Producer

            Producer(FakeCluster(), **kwargs)


def test_retries_through_not_enough_replicas_then_times_out(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=12)
    try:
        c.create_topic("t", 1, 3, min_insync_replicas=3)
        p = c.producer(acks="all", retry_backoff_ms=100, delivery_timeout_ms=3_000)
        assert p.send("t", b"ok").result().offset == 0
        follower = next(r for r in c.describe("t")[0].replicas if r != c.leader_of("t"))
        c.stop_broker(follower, clean=False)
        c.advance(12_000)  # the ISR shrinks below min_insync_replicas=3
        fut = p.send("t", b"refused")
        with pytest.raises((NotEnoughReplicasError, RequestTimedOutError)):
            fut.result()
        assert p.retries >= 5  # retried with backoff until delivery_timeout_ms
        names = {m.name: m.value for m in p.metrics()}
        assert names["pylog_producer_retries_total"] == p.retries
        assert names["pylog_producer_record_errors_total"] == 1
        assert names["pylog_producer_records_sent_total"] == 1
    finally:
        c.close()


def test_retries_zero_fails_on_the_first_retriable_error(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=13)
    try:
        c.create_topic("t", 1, 1)
        p = c.producer(acks="all", retries=0, request_timeout_ms=200)
        assert p.send("t", b"a").result().offset == 0
        c.transport.partition([0], [p._node.node_id], one_way=True)  # replies lost
        with pytest.raises(RequestTimedOutError):
            p.send("t", b"b").result()
        assert p.retries == 0
    finally:
        c.close()


def test_ordering_with_max_in_flight_across_a_leader_change(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=31)
    try:
        c.create_topic("t", 1, 3, min_insync_replicas=2)
        p = c.producer(acks="all", max_in_flight=5, batch_size=200, request_timeout_ms=500, retry_backoff_ms=30)
        futs = [p.send("t", b"%03d" % i) for i in range(120)]
        c.advance(8)
        c.stop_broker(c.leader_of("t"), clean=True)  # NotLeader mid-stream: in-flight batches retried
        offsets = [f.result().offset for f in futs]
        assert offsets == list(range(120))
        assert [r.value for r in leader_log(c, "t").read(0, 1 << 30)] == [b"%03d" % i for i in range(120)]
    finally:
        c.close()


def test_add_done_callback_and_exception(sim):
    p = sim.producer(acks="all", linger_ms=10)
    seen = []
    f = p.send("t", b"cb")
    f.add_done_callback(lambda fut: seen.append(fut.result().offset))
    assert f.exception() is None and seen == [0]
    f.add_done_callback(lambda fut: seen.append("again"))  # already done: runs at once
    assert seen == [0, "again"]


def test_real_time_threads_share_a_producer(tmp_path):
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("rt", 3, 1)
        p = c.producer(acks="all", linger_ms=2)
        futs = {}

        def worker(n):
            futs[n] = [p.send("rt", b"%d-%d" % (n, i), key=b"%d" % n) for i in range(500)]

        ts = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        p.flush(timeout=60)
        for n, fs in futs.items():
            metas = [f.result(timeout=10) for f in fs]
            assert len({m.partition for m in metas}) == 1  # one key, one partition
            offs = [m.offset for m in metas]
            assert offs == sorted(offs) and len(set(offs)) == 500  # per key in send order
        total = sum(c.describe("rt")[q].high_watermark for q in range(3))
        assert total == 2000
        p.close()
    finally:
        c.close()


def test_waiting_inside_a_callback_is_refused_not_a_deadlock(tmp_path):
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("cb", 1, 1)
        p = c.producer(acks="all", linger_ms=1)
        errors = []

        def cb(fut):
            try:
                p.send("cb", b"inner").result()
            except InvalidConfigurationError as exc:
                errors.append(exc)
            try:
                p.flush()
            except InvalidConfigurationError as exc:
                errors.append(exc)

        p.send("cb", b"outer").add_done_callback(cb)
        p.flush(timeout=30)
        assert len(errors) == 2
        p.close()
    finally:
        c.close()


# ------------------------------------------------------------ topic configs
def test_topic_config_reaches_the_log_and_persists(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=1, log_config={"segment_bytes": 1 << 20})
    try:
        c.create_topic("small", 1, 1, config={"segment_bytes": 4096, "cleanup_policy": "compact"})
        c.create_topic("plain", 1, 1)
        assert leader_log(c, "small").config.segment_bytes == 4096
        assert leader_log(c, "plain").config.segment_bytes == 1 << 20
        with pytest.raises(InvalidConfigurationError, match="bogus"):
            c.create_topic("bad", 1, 1, config={"bogus": 1})
        with pytest.raises(InvalidConfigurationError):
            c.create_topic("bad2", 1, 1, config={"segment_bytes": "big"})
        assert "bad" not in c.store.topics
        p = c.producer(acks="all", batch_size=1_000)
        futs = [p.send("small", b"x" * 200, key=b"k%d" % i) for i in range(60)]
        assert [f.result().offset for f in futs] == list(range(60))
        assert len(leader_log(c, "small").segments) > 1  # rolled at 4 KiB
        d = leader_log(c, "small").dir
        snaps = {n[:20] for n in os.listdir(d) if n.endswith(".snapshot")}
        logs = {n[:20] for n in os.listdir(d) if n.endswith(".log")}
        assert snaps and snaps <= logs  # producer snapshots at rolls, named by the new segment's base (Kafka's)
    finally:
        c.close()
    meta = json.load(open(os.path.join(tmp_path, "cluster-metadata.json")))
    assert {t["name"]: t["configs"] for t in meta["topics"]}["small"] == {"segment_bytes": 4096, "cleanup_policy": "compact"}
    c2 = Cluster(tmp_path, brokers=1, seed=1, log_config={"segment_bytes": 1 << 20})
    try:
        assert c2.store.topics["small"].configs["cleanup_policy"] == "compact"
        assert leader_log(c2, "small").config.segment_bytes == 4096
        # a roll snapshots the producer state (Kafka's .snapshot files next to the segments)
        names = os.listdir(leader_log(c2, "small").dir)
        assert any(n.endswith(".snapshot") for n in names)
    finally:
        c2.close()


def test_metadata_file_without_configs_still_loads(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=1)
    c.create_topic("old", 1, 1)
    c.close()
    path = os.path.join(tmp_path, "cluster-metadata.json")
    meta = json.load(open(path))
    for t in meta["topics"]:
        del t["configs"]
    del meta["next_producer_id"]
    json.dump(meta, open(path, "w"))
    c2 = Cluster(tmp_path, brokers=1, seed=1)
    try:
        assert c2.store.topics["old"].configs == {}
        assert c2.producer().send("old", b"v").result().offset == 0
    finally:
        c2.close()


def test_producer_ids_never_repeat_across_restarts(tmp_path):
    ids = []
    for _ in range(2):
        c = Cluster(tmp_path, brokers=2, seed=3)
        try:
            if "t" not in c.store.topics:
                c.create_topic("t", 1, 2)
            for _ in range(2):
                p = c.producer()
                p.send("t", b"v").result()
                ids.append(p.producer_id)
        finally:
            c.close()
    assert len(set(ids)) == 4 and all(i >= 0 for i in ids)


def test_record_objects_and_bytearray_values(sim):
    p = sim.producer(acks="all")
    buf = bytearray(b"mutable")
    f = p.send("t", buf)
    buf[:] = b"changed"  # the producer copied it at send()
    assert f.result().offset == 0
    assert leader_log(sim, "t").get(0).value == b"mutable"
    assert isinstance(leader_log(sim, "t").get(0), Record)
