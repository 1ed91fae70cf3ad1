"""A follower follows its leader's log start offset (Kafka's LeaderOffsetIncremented), never past its HW."""
from __future__ import annotations

from pylog.cluster import Cluster
from pylog.replication.partition import records_equal_below


def test_followers_advance_their_log_start_to_the_leaders(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=5)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        prod = c.producer(acks="all")
        for i in range(20):
            prod.send("t", b"v%d" % i).result()
        leader = c.leader_of("t", 0)
        parts = {b: c.brokers[b].rm.partitions[("t", 0)] for b in range(3)}
        assert all(p.log.log_start_offset == 0 for p in parts.values())
        # Retention / deleteRecords on the leader only (as the leader's own maintenance would).
        parts[leader].log.delete_records_before(12)
        prod.send("t", b"after").result()
        c.advance(2_000)
        for b, p in parts.items():
            assert p.log.log_start_offset == 12, (b, p.log.log_start_offset)
            assert [r.offset for r in p.log.read(12)][:1] == [12]
            assert p.log.log_end_offset == 21
        # The replicas still agree on everything they both keep.
        followers = [b for b in parts if b != leader]
        assert records_equal_below(parts[leader].log, parts[followers[0]].log, 21) is None
        # A consumer starting from the beginning begins at the new log start.
        cons = c.consumer(group_id="g", topics=["t"])
        got = []
        while len(got) < 9:
            got += cons.poll(timeout=1.0)
        assert [r.offset for r in got] == list(range(12, 21))
    finally:
        c.close()


def test_records_equal_below_skips_what_retention_removed_on_one_replica(tmp_path):
    c = Cluster(tmp_path, brokers=2, seed=6)
    try:
        c.create_topic("t", partitions=1, replication_factor=2, min_insync_replicas=2)
        prod = c.producer(acks="all")
        for i in range(10):
            prod.send("t", b"v%d" % i).result()
        a, b = (c.brokers[i].rm.partitions[("t", 0)].log for i in range(2))
        assert records_equal_below(a, b, 10) is None
        # A difference above both starts is still found.
        leader = c.leader_of("t", 0)
        follower_log = b if leader == 0 else a
        leader_log = a if leader == 0 else b
        # Only the follower dropped its first records: the compared range starts at 5.
        follower_log.delete_records_before(5)
        assert records_equal_below(leader_log, follower_log, 10) is None
    finally:
        c.close()
