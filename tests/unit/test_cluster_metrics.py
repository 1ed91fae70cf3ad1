"""Cluster.metrics(): cluster, partition, replica, log and client samples, and their Prometheus page."""
from __future__ import annotations

from pylog.cluster import Cluster
from pylog.metrics import find, render_prometheus


def test_cluster_metrics_follow_the_cluster_state(tmp_path):
    # A lagging replica leaves the ISR (by its leader) long before the controller
    # would notice a dead broker, so the leaders' ISR shrinks are what is counted.
    c = Cluster(tmp_path, brokers=3, seed=11, replica_lag_time_max_ms=2_000, session_timeout_ms=60_000)
    try:
        c.create_topic("orders", partitions=2, replication_factor=3, min_insync_replicas=2)
        prod = c.producer(acks="all")
        for i in range(10):
            prod.send("orders", b"v%d" % i, partition=i % 2).result()
        m = c.metrics()
        assert find(m, "pylog_cluster_brokers_running") == 3
        assert find(m, "pylog_cluster_under_replicated_partitions") == 0
        assert find(m, "pylog_cluster_offline_partitions") == 0
        for p in (0, 1):
            assert find(m, "pylog_partition_high_watermark", topic="orders", partition=p) == 5
            assert find(m, "pylog_partition_isr_size", topic="orders", partition=p) == 3
            leader = c.leader_of("orders", p)
            assert find(m, "pylog_partition_leader", topic="orders", partition=p) == leader
            # The leader's log counted the five appended records.
            assert find(m, "pylog_log_appended_records_total", broker=leader, topic="orders", partition=p) == 5
            assert find(m, "pylog_log_end_offset", broker=leader, topic="orders", partition=p) == 5
        assert find(m, "pylog_producer_records_sent_total") == 10

        # Crash a follower of partition 0 that is not the controller: partition 0's
        # leader drops it from the ISR (and counts the shrink).
        leader0 = c.leader_of("orders", 0)
        follower = next(b for b in range(3) if b not in (leader0, c.store.controller_id))
        c.stop_broker(follower, clean=False)
        # A caught-up replica stays in sync while nothing is written (Kafka's rule): write.
        fast = c.producer(acks=1)
        for i in range(2):
            fast.send("orders", b"w%d" % i, partition=0).result()
        c.advance(10_000)
        m = c.metrics()
        assert find(m, "pylog_cluster_brokers_running") == 2
        assert find(m, "pylog_cluster_under_replicated_partitions") >= 1
        assert find(m, "pylog_cluster_under_min_isr_partitions") == 0
        assert find(m, "pylog_partition_isr_size", topic="orders", partition=0) == 2
        assert find(m, "pylog_replica_isr_shrinks_total", broker=leader0, topic="orders", partition=0) == 1
        assert find(m, "pylog_replica_isr_expands_total", broker=leader0, topic="orders", partition=0) == 0
        assert not any(x.label("broker") == str(follower) for x in m if x.name == "pylog_replica_log_end_offset")

        # Then the leader of partition 0: a new leader with a higher epoch; below min ISR now.
        victim = c.leader_of("orders", 0)
        epoch = find(m, "pylog_partition_leader_epoch", topic="orders", partition=0)
        c.stop_broker(victim, clean=False)
        c.advance(90_000)
        m = c.metrics()
        new_leader = c.leader_of("orders", 0)
        assert new_leader not in (victim, follower, -1)
        assert find(m, "pylog_partition_leader", topic="orders", partition=0) == new_leader
        assert find(m, "pylog_partition_leader_epoch", topic="orders", partition=0) > epoch
        assert find(m, "pylog_cluster_under_min_isr_partitions") >= 1

        page = render_prometheus(m)
        assert "# TYPE pylog_cluster_under_replicated_partitions gauge" in page
        assert f'pylog_partition_leader{{topic="orders",partition="0"}} {new_leader}\n' in page
    finally:
        c.close()
