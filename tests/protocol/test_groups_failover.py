"""The group coordinator's broker crashes under a group of real clients: its ``__consumer_offsets``
partition fails over, the new leader loads the group from the log, the members find it (NOT_COORDINATOR
or a closed connection, then FindCoordinator) and go on; no committed offset goes back, no record is lost."""
from __future__ import annotations

import time
from typing import Dict, Set, Tuple

import pytest

from pylog.replication import offsets_topic as ot

from .group_clients import KINDS, Clients

TOPIC = "failover"
GROUP = "survivors"
PARTITIONS = 4
WAIT_S = 90.0  # a liveness bound only


def _coordinator(cluster) -> int:
    n = cluster.store.topics[ot.OFFSETS_TOPIC].partitions
    return cluster.leader_of(ot.OFFSETS_TOPIC, ot.partition_for_group(GROUP, n))


@pytest.fixture
def cluster(tmp_path):
    """As ``pylog_kafka``, with a 2 s broker session so the controller fails a crashed broker over fast."""
    import pylog

    c = pylog.Cluster(tmp_path / "c", brokers=3, listen="127.0.0.1:0", session_timeout_ms=2_000)
    c.offsets_topic_partitions = 5
    try:
        yield c
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_members_follow_the_coordinator_when_its_broker_crashes(cluster, kind):
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, min_insync_replicas=2)
    producer = cluster.producer(acks="all")
    sent = 0

    def produce(n: int) -> None:
        nonlocal sent
        futures = [producer.send(TOPIC, b"%d" % i, partition=i % PARTITIONS) for i in range(sent, sent + n)]
        for f in futures:
            f.result(30)
        sent += n

    clients = Clients(kind, cluster.bootstrap_servers)
    read: Set[Tuple[int, int]] = set()
    try:
        members = [clients.member(GROUP, TOPIC, "m1"), clients.member(GROUP, TOPIC, "m2")]

        def drain_until(total: int) -> None:
            deadline = time.monotonic() + WAIT_S
            while len(read) < total:
                for m in members:
                    recs, _ = m.take()
                    read.update((p, off) for p, off, _ in recs)
                assert time.monotonic() < deadline, f"{kind}: read {len(read)} of {total}"

        produce(40)
        drain_until(40)
        # every member commits after each poll: wait for the commits to cover what was read
        deadline = time.monotonic() + WAIT_S
        while sum(v.offset for v in cluster.list_group_offsets(GROUP).values()) < 40:
            for m in members:
                m.take()
            assert time.monotonic() < deadline
        before: Dict[Tuple[str, int], int] = {tp: v.offset for tp, v in cluster.list_group_offsets(GROUP).items()}
        victim = _coordinator(cluster)
        cluster.stop_broker(victim, clean=False)
        produce(40)  # acks=all with min ISR 2: waits for the partitions the victim led to fail over
        drain_until(80)
        deadline = time.monotonic() + WAIT_S
        while sum(v.offset for v in cluster.list_group_offsets(GROUP).values()) < 80:
            for m in members:
                m.take()
            assert time.monotonic() < deadline, cluster.list_group_offsets(GROUP)
        after = {tp: v.offset for tp, v in cluster.list_group_offsets(GROUP).items()}
        assert all(after[tp] >= off for tp, off in before.items())
        assert _coordinator(cluster) != victim
        assert read == {(i % PARTITIONS, i // PARTITIONS) for i in range(80)}
        # the group settles on the new coordinator with both members (a member whose heartbeat went to
        # the dead coordinator may rejoin after the commits above: the state is polled, not sampled once)
        deadline = time.monotonic() + WAIT_S
        while True:
            d = cluster.describe_group(GROUP)
            if d.state == "Stable" and sorted(m.client_id for m in d.members) == ["m1", "m2"]:
                break
            assert time.monotonic() < deadline, d
            for m in members:
                m.take()
        cluster.start_broker(victim)
    finally:
        clients.close_all()
