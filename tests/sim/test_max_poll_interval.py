"""max_poll_interval_ms on a simulated cluster: a member that stops polling leaves the group, its
partitions go to the other member, its late commit is refused, and its next poll rejoins."""
from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from pylog.cluster import Cluster
from pylog.errors import CommitFailedError, IllegalGenerationError, InvalidConfigurationError
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

TOPIC = "jobs"
MAX_POLL = 2_000
OPTS = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, max_poll_interval_ms=MAX_POLL,
            enable_auto_commit=False, fetch_max_wait_ms=100)


def coordinator(c: Cluster, group: str):
    n = c.store.topics[OFFSETS_TOPIC].partitions
    return c.brokers[c.leader_of(OFFSETS_TOPIC, partition_for_group(group, n))].coordinator


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_member_that_stops_polling_leaves_and_its_partitions_move(tmp_path, strategy):
    c = Cluster(tmp_path, brokers=3, seed=51)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        producer = c.producer(acks="all")
        heard: List[Tuple[str, List[Tuple[str, int]]]] = []

        class Listener:
            def on_partitions_lost(self, parts):
                heard.append(("lost", parts))

        slow = c.consumer("g", [TOPIC], partition_assignment_strategy=strategy, rebalance_listener=Listener(), **OPTS)
        fast = c.consumer("g", [TOPIC], partition_assignment_strategy=strategy, **OPTS)
        got: Dict[str, List[Tuple[int, int]]] = {"slow": [], "fast": []}
        for _ in range(100):
            got["slow"] += [(r.partition, r.offset) for r in slow.poll(0.05)]
            got["fast"] += [(r.partition, r.offset) for r in fast.poll(0.05)]
            if len(slow.assignment()) == 1 and len(fast.assignment()) == 1:
                break
        (slow_tp,) = slow.assignment()
        group = coordinator(c, "g").groups["g"]
        # Kafka's rule: the JoinGroup rebalance timeout is max.poll.interval.ms
        assert {m.rebalance_timeout_ms for m in group.members.values()} == {MAX_POLL}
        for i in range(10):
            producer.send(TOPIC, b"a%d" % i, partition=slow_tp[1]).result()
        for _ in range(20):
            last_poll = c.now_ms  # the poll timer restarts when poll is called
            got["slow"] += [(r.partition, r.offset) for r in slow.poll(0.05)]
        assert sorted(o for p, o in got["slow"] if p == slow_tp[1]) == list(range(10))
        slow.commit()
        assert slow.committed(*slow_tp) == 10
        slow_member, generation = slow.member_id, slow.generation
        for i in range(10, 20):  # records the slow member will never see
            producer.send(TOPIC, b"a%d" % i, partition=slow_tp[1])
        # only the fast member polls now; the slow one's loop keeps heartbeating, but its poll timer runs out
        for _ in range(200):
            got["fast"] += [(r.partition, r.offset) for r in fast.poll(0.05)]
            if set(fast.assignment()) == {(TOPIC, 0), (TOPIC, 1)} and \
                    sorted(o for p, o in got["fast"] if p == slow_tp[1]) == list(range(10, 20)):
                break
        assert set(fast.assignment()) == {(TOPIC, 0), (TOPIC, 1)}
        # the fast member resumed the slow one's partition at its committed offset and got the rest
        assert sorted(o for p, o in got["fast"] if p == slow_tp[1]) == list(range(10, 20))
        assert c.now_ms - last_poll > MAX_POLL  # it left because of the poll timer (sessions were alive)
        assert slow_member not in coordinator(c, "g").groups["g"].members  # it sent LeaveGroup
        assert slow.assignment() == []  # and stopped reading the partitions
        # its late commit (of offsets from the old generation) is refused, naming group and partition
        with pytest.raises(CommitFailedError, match=rf"{TOPIC}-{slow_tp[1]}.*'g'.*generation {generation}"):
            slow.commit({slow_tp: 15})
        with pytest.raises(IllegalGenerationError):  # CommitFailedError is a stale-generation error
            slow.commit()
        assert fast.committed(*slow_tp) == 10
        # the next poll rejoins: the group is shared again and the slow member reads again
        for i in range(20, 30):
            producer.send(TOPIC, b"b%d" % i, partition=slow_tp[1])
            producer.send(TOPIC, b"b%d" % i, partition=1 - slow_tp[1])
        wanted = {(slow_tp[1], o) for o in range(30)} | {(1 - slow_tp[1], o) for o in range(10)}
        assert heard == []  # listener calls run on the application's thread, in its next poll
        for _ in range(300):
            got["slow"] += [(r.partition, r.offset) for r in slow.poll(0.05)]
            got["fast"] += [(r.partition, r.offset) for r in fast.poll(0.05)]
            if slow.assignment() and fast.assignment() and wanted <= set(got["slow"]) | set(got["fast"]):
                break
        assert slow.member_id and slow.member_id != slow_member
        assert len(slow.assignment()) == 1 and len(fast.assignment()) == 1
        assert wanted <= set(got["slow"]) | set(got["fast"]), "a record was never delivered"
        slow.commit()  # a member again: its commits are accepted
        assert heard == [("lost", [slow_tp])]
        for cons in (slow, fast):
            cons._check()
    finally:
        c.close()


def test_default_is_kafkas_and_rebalance_timeout_follows_it(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=52)
    try:
        c.create_topic(TOPIC, partitions=1, replication_factor=1)
        a = c.consumer("g", [TOPIC])
        assert a.max_poll_interval_ms == 300_000 and a.rebalance_timeout_ms == 300_000
        b = c.consumer("g", [TOPIC], max_poll_interval_ms=10_000)
        assert b.rebalance_timeout_ms == 10_000
        d = c.consumer("g", [TOPIC], max_poll_interval_ms=10_000, rebalance_timeout_ms=4_000)
        assert d.rebalance_timeout_ms == 4_000 and d.max_poll_interval_ms == 10_000
        for bad in (0, -1, 1.5, True, "300000"):
            with pytest.raises(InvalidConfigurationError, match="max_poll_interval_ms"):
                c.consumer("g", [TOPIC], max_poll_interval_ms=bad)
    finally:
        c.close()


def test_polling_in_time_keeps_membership(tmp_path):
    """A member that polls at intervals just under max_poll_interval_ms never leaves."""
    c = Cluster(tmp_path, brokers=1, seed=53)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=1)
        a = c.consumer("g", [TOPIC], **OPTS)
        for _ in range(20):
            a.poll(0.05)
        member, generation = a.member_id, a.generation
        assert member and len(a.assignment()) == 2
        for _ in range(5):
            c.advance(MAX_POLL - 200)
            a.poll(0)
        assert (a.member_id, a.generation) == (member, generation)
        assert a.commit({(TOPIC, 0): 0}) == {(TOPIC, 0): 0}
    finally:
        c.close()


def test_poll_timer_starts_at_the_first_poll(tmp_path):
    """pylog joins the group when the consumer is created; as in Kafka (whose consumer joins inside its
    first poll and resets the poll timer when the join completes), the time before the first poll does
    not count against max_poll_interval_ms. From the first poll on, it does."""
    c = Cluster(tmp_path, brokers=1, seed=54)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=1)
        c.producer(acks="all").send(TOPIC, b"x", partition=0).result()
        a = c.consumer("g", [TOPIC], **OPTS)
        c.advance(500)  # the loop joins the group meanwhile
        member, generation = a.member_id, a.generation
        assert member and generation >= 1
        c.advance(3 * MAX_POLL)  # created, never polled
        got = []
        for _ in range(10):
            got += a.poll(0.05)
        assert (a.member_id, a.generation) == (member, generation)  # still the member it was
        assert [(r.partition, r.offset) for r in got] == [(0, 0)]
        assert a.commit({(TOPIC, 0): 1}) == {(TOPIC, 0): 1}  # no CommitFailedError
        assert a.committed(TOPIC, 0) == 1
        # once it has polled, the interval counts
        c.advance(MAX_POLL + 500)
        with pytest.raises(CommitFailedError, match=rf"'g'.*generation {generation}"):
            a.commit({(TOPIC, 0): 1})
        a.poll(0.05)  # rejoins as a new member
        for _ in range(40):
            if a.assignment():
                break
            a.poll(0.05)
        assert a.member_id and a.member_id != member and len(a.assignment()) == 2
    finally:
        c.close()
