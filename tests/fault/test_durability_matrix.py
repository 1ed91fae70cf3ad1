"""The durability matrix of docs/durability.md: acks x replication x failure, one test per line.

Simulated clusters (seeded; virtual time). ``stop_broker(b, clean=False)``
is a power loss of broker ``b``: its SimDisk drops every byte not fsynced.
A broker *process* crash keeps the page cache, so it loses at most what a
power loss with the same flush policy loses; with ``flush_messages=1`` the
two are the same, which is how the process-crash rows are proven.
"""
from __future__ import annotations

import errno
from typing import Dict, List

import pytest

from pylog.cluster import Cluster


def read_all(c: Cluster, topic: str) -> Dict[int, bytes]:
    cons = c.consumer(None, [topic], fetch_max_wait_ms=50)
    got: Dict[int, bytes] = {}
    for _ in range(30):
        for r in cons.poll(0.2):
            got[r.offset] = r.value
    return got


def _restart(c: Cluster, broker: int) -> None:
    c.start_broker(broker)
    c.advance(8_000)  # the restarted broker rejoins (and, after its predecessor's lease, may lead)


@pytest.mark.parametrize("flush", [None, 1])
def test_acks_all_survives_a_power_loss_of_any_one_broker(tmp_path, flush) -> None:
    """acks=all, RF=3, min.insync.replicas=2, no flush policy: every acknowledged record
    survives a power loss of each broker in turn (another in-sync replica holds it)."""
    cfg = {"flush_messages": flush} if flush else {}
    c = Cluster(tmp_path, brokers=3, seed=21, log_config=cfg)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked: Dict[int, bytes] = {}
        for victim in (c.leader_of("t"), 0, 1, 2):
            for i in range(5):
                v = b"r%d-%d" % (victim, i)
                acked[p.send("t", v).result().offset] = v
            c.stop_broker(victim, clean=False)
            c.advance(5_000)
            _restart(c, victim)
        got = read_all(c, "t")
        assert {o: got.get(o) for o in acked} == acked
    finally:
        c.close()


def test_acks_all_without_flush_can_lose_acknowledged_records_when_every_broker_loses_power(tmp_path) -> None:
    """acks=all promises every in-sync replica's page cache, not its disk: a power loss of all
    replicas at once (no flush policy) loses what no one had fsynced."""
    c = Cluster(tmp_path, brokers=3, seed=22)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked = {p.send("t", b"v%d" % i).result().offset: b"v%d" % i for i in range(10)}
        for b in range(3):
            c.stop_broker(b, clean=False)
        for b in range(3):
            c.start_broker(b)
        c.advance(10_000)
        got = read_all(c, "t")
        assert len(acked) == 10 and set(got) < set(acked)  # lost, and never garbage:
        assert all(got[o] == acked[o] for o in got)
    finally:
        c.close()


def test_acks_all_with_flush_every_message_survives_every_broker_losing_power(tmp_path) -> None:
    """acks=all plus flush_messages=1: each replica fsyncs before acknowledging its fetch position,
    so a power loss of every broker at once loses nothing acknowledged."""
    c = Cluster(tmp_path, brokers=3, seed=23, log_config={"flush_messages": 1})
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked = {p.send("t", b"v%d" % i).result().offset: b"v%d" % i for i in range(10)}
        for b in range(3):
            c.stop_broker(b, clean=False)
        for b in range(3):
            c.start_broker(b)
        c.advance(10_000)
        got = read_all(c, "t")
        assert {o: got.get(o) for o in acked} == acked
    finally:
        c.close()


def test_acks_1_loses_acknowledged_records_on_leader_failover_even_when_fsynced(tmp_path) -> None:
    """acks=1 answers once the leader alone has the record (here fsynced: flush_messages=1, so a
    process crash and a power loss are the same). If the leader dies before a follower copied it,
    a follower becomes leader without it and the old leader truncates it on return."""
    c = Cluster(tmp_path, brokers=3, seed=24, log_config={"flush_messages": 1})
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=1)
        p = c.producer(acks=1)
        first = p.send("t", b"replicated").result().offset
        c.advance(2_000)  # followers copy it
        leader = c.leader_of("t")
        if c.store.controller_id == leader:
            pytest.skip("seed made the leader the controller")  # pragma: no cover - seed 24 does not
        followers = [b for b in range(3) if b != leader]
        c.partition_network([leader], followers)  # followers stop fetching from the leader
        lost = p.send("t", b"acked-by-the-leader-only").result().offset
        c.stop_broker(leader, clean=False)
        c.heal_network()
        c.advance(10_000)  # a follower is elected; then the old leader comes back and truncates
        assert c.leader_of("t") in followers
        _restart(c, leader)
        got = read_all(c, "t")
        assert got[first] == b"replicated"
        assert got.get(lost) != b"acked-by-the-leader-only"
    finally:
        c.close()


def test_acks_1_single_replica_survives_power_loss_with_flush_every_message(tmp_path) -> None:
    """acks=1, RF=1, flush_messages=1: the only copy was fsynced before the answer."""
    c = Cluster(tmp_path, brokers=1, seed=25, log_config={"flush_messages": 1})
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks=1)
        acked = {p.send("t", b"v%d" % i).result().offset: b"v%d" % i for i in range(6)}
        c.stop_broker(0, clean=False)
        _restart(c, 0)
        assert read_all(c, "t") == acked
    finally:
        c.close()


def test_acks_0_reports_success_for_a_record_the_broker_never_stored(tmp_path) -> None:
    """acks=0: the producer does not wait for an answer, so a record the leader failed to write
    (ENOSPC here) is lost silently: no error, no offset."""
    c = Cluster(tmp_path, brokers=1, seed=26)
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks=0)
        p.send("t", b"stored").result()
        c.advance(500)
        disk = c.brokers[0].disk
        disk.fail_errno, disk.fail_write_after = errno.ENOSPC, disk.writes
        meta = p.send("t", b"silently-lost").result()  # no exception
        c.advance(500)
        disk.fail_write_after = None
        assert meta.offset == -1  # acks=0 never learns an offset (Kafka's RecordMetadata too)
        assert list(read_all(c, "t").values()) == [b"stored"]
    finally:
        c.close()


def test_acks_all_below_min_insync_replicas_acknowledges_nothing(tmp_path) -> None:
    """acks=all with fewer in-sync replicas than min.insync.replicas: the send fails and the
    record is not committed (never visible to consumers)."""
    from pylog.errors import NotEnoughReplicasError, RequestTimedOutError

    c = Cluster(tmp_path, brokers=3, seed=27, replica_lag_time_max_ms=2_000)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=3)
        p = c.producer(acks="all", request_timeout_ms=2_000, delivery_timeout_ms=6_000)
        ok = p.send("t", b"ok").result().offset
        leader = c.leader_of("t")
        victim = next(b for b in range(3) if b != leader and b != c.store.controller_id)
        c.stop_broker(victim, clean=False)
        c.advance(5_000)  # the ISR shrinks to 2 < 3
        with pytest.raises((NotEnoughReplicasError, RequestTimedOutError)):
            p.send("t", b"refused").result()
        got = read_all(c, "t")
        assert got[ok] == b"ok" and b"refused" not in got.values()
    finally:
        c.close()
