"""The cluster's periodic log maintenance: compaction of compacted topics and consumer-aware retention, on every replica."""
from __future__ import annotations

from pylog.cluster import Cluster
from pylog.replication.partition import records_equal_below


def _logs(c, topic, partition=0):
    return {b: c.brokers[b].rm.partitions[(topic, partition)].log for b in c.brokers if c.brokers[b].running}


def test_compacted_topic_is_cleaned_on_every_replica_and_reads_the_latest_values(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=21)
    try:
        c.create_topic("state", partitions=1, replication_factor=3, min_insync_replicas=2,
                       config={"cleanup_policy": "compact", "segment_bytes": 2048, "log_cleanup_interval_ms": 0,
                               "min_cleanable_dirty_ratio": 0.01})
        prod = c.producer(acks="all", linger_ms=0)
        latest = {}
        for i in range(300):
            key = b"k%d" % (i % 10)
            meta = prod.send("state", b"value-%d" % i, key=key).result()
            latest[key] = (meta.offset, b"value-%d" % i)
        before = {b: sum(1 for _ in log.read(0)) for b, log in _logs(c, "state").items()}
        assert set(before.values()) == {300}
        c.advance(3 * Cluster.log_maintenance_check_ms)
        logs = _logs(c, "state")
        for b, log in logs.items():
            recs = list(log.read(0))
            assert len(recs) < 300, f"broker {b} was not compacted"
            assert log.cleaner_checkpoint is not None and log.cleaner_checkpoint > 0
            seen = {}
            offsets = [r.offset for r in recs]
            assert offsets == sorted(offsets)
            for r in recs:
                seen[r.key] = (r.offset, r.value)
            assert seen == latest, f"broker {b} lost a latest value"
        # Replicas keep agreeing above what they cleaned, and the cluster invariants hold.
        leader = c.leader_of("state")
        for b, log in logs.items():
            assert records_equal_below(logs[leader], log, 300) is None
        c._check()
        assert not c.maintenance_errors
    finally:
        c.close()


def test_consumer_aware_retention_keeps_what_the_slowest_named_group_has_not_committed(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=22)
    try:
        c.create_topic("jobs", partitions=1, replication_factor=3, min_insync_replicas=2,
                       config={"retention_ms": 1_000, "segment_bytes": 1024, "log_cleanup_interval_ms": 0,
                               "retention_protect_groups": ["slow"]})
        prod = c.producer(acks="all", linger_ms=0)
        for i in range(200):
            prod.send("jobs", b"job-%03d" % i).result()
        slow = c.consumer(group_id="slow", topics=["jobs"], enable_auto_commit=False)
        got = []
        while len(got) < 50:
            got += slow.poll(timeout=1.0, max_records=50 - len(got))
        slow.commit()
        assert slow.committed("jobs", 0) == 50
        c.advance(3 * Cluster.log_maintenance_check_ms)
        for b, log in _logs(c, "jobs").items():
            start = log.log_start_offset
            assert 0 < start <= 50, f"broker {b}: log start {start}"
            assert [r.offset for r in log.read(50)][:1] == [50]
        # The group moves on: retention follows (the active segment always stays).
        while len(got) < 200:
            got += slow.poll(timeout=1.0)
        slow.commit()
        c.advance(3 * Cluster.log_maintenance_check_ms)
        for b, log in _logs(c, "jobs").items():
            assert log.log_start_offset > 50, f"broker {b}: log start {log.log_start_offset}"
            assert log.log_start_offset <= 200
        assert not c.maintenance_errors
    finally:
        c.close()
