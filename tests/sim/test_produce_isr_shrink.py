"""Issue 14 item 8: a pending acks=all produce is answered NotEnoughReplicasAfterAppend as soon as the ISR
shrinks below min_insync_replicas (Kafka's checkEnoughReplicasReachOffset outcome), not after its timeout."""
from __future__ import annotations

import pytest

from pylog import errors
from pylog.cluster import Cluster


def test_pending_acks_all_produce_fails_with_not_enough_replicas_after_append_when_isr_shrinks(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=4, replica_lag_time_max_ms=2_000)
    try:
        leader = c.store.controller_id  # the leader is the controller: its ISR shrink is never cut off
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2, start_index=leader)
        assert c.leader_of("t") == leader
        followers = [b for b in c.brokers if b != leader]
        p = c.producer(acks="all", retries=0, request_timeout_ms=30_000)
        assert p.send("t", b"first", partition=0).result().offset == 0
        c.partition_network(followers, [leader], one_way=True)  # the followers' fetches are lost
        fut = p.send("t", b"second", partition=0)
        # Before the fix the request waited out its 30 s timeout: RequestTimedOutError.
        with pytest.raises(errors.NotEnoughReplicasAfterAppendError, match="shrank below min_insync_replicas"):
            fut.result()
        assert list(c.describe("t")[0].isr) == [leader]
        # It is in the leader's log (appended), and is committed once the ISR grows back.
        c.heal_network()
        c.scheduler.wait_until(lambda: len(c.store.partitions[("t", 0)].isr) == 3, 60_000)
        c.advance(1_000)
        info = c.describe("t")[0]
        assert sorted(info.isr) == sorted(c.brokers) and info.high_watermark == 2
        c._check()
    finally:
        c.close()
