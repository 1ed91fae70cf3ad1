"""Committed-offset expiry (Kafka's offsets.retention.minutes, KIP-211) in simulated time.

* the coordinator by hand: offsets of a group that only commits expire ``retention`` after their commit,
  those of an emptied consumer group ``retention`` after it became empty (also when a new coordinator
  loaded it from the log meanwhile), never before; a Stable group keeps the offsets of topics its members
  subscribe to and loses the others'; a commit in flight is never tombstoned; the tombstones make a fresh
  coordinator forget the offsets and the group;
* a simulated cluster configured with ``offsets_retention_ms``: the same, through the admin API, across a
  coordinator failover, and a member that stays in its group for several retention periods keeps
  its offsets.
"""
from __future__ import annotations

from typing import Any, List

import pytest

from pylog.cluster import Cluster
from pylog.errors import InvalidConfigurationError
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_coordinator import EMPTY, STABLE, GroupCoordinator
from pylog.replication.messages import ProduceRequest, ProduceResponse
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

GROUP = "g"
RETENTION = 10_000
CHECK = 1_000
T0 = 1_000_000


class Harness:
    """One coordinator leading the only offsets partition; appends succeed (or wait while ``hold``)."""

    def __init__(self) -> None:
        self.co = self._fresh()
        self.co.load(0, 0, [], T0)
        self.now = T0
        self.log: List[Any] = []
        self.inbox: dict = {}
        self.corr = 0
        self.hold = False
        self.held: List[ProduceRequest] = []

    @staticmethod
    def _fresh() -> GroupCoordinator:
        co = GroupCoordinator(0)
        co.num_partitions = 1
        co.offsets_retention_ms = RETENTION
        co.offsets_retention_check_interval_ms = CHECK
        return co

    def deliver(self, out) -> None:
        for dst, msg in out.items:
            if isinstance(msg, ProduceRequest):
                if self.hold:
                    self.held.append(msg)
                else:
                    self._append(msg)
            else:
                self.inbox.setdefault(dst, []).append(msg)

    def _append(self, msg: ProduceRequest) -> None:
        self.log.extend((r.key, r.value) for r in msg.records)
        self.deliver(self.co.on_produce_response(
            ProduceResponse(msg.topic, msg.partition, msg.correlation_id, base_offset=0), self.now))

    def release(self) -> None:
        self.hold = False
        held, self.held = self.held, []
        for msg in held:
            self._append(msg)

    def send(self, client: str, msg) -> None:
        self.deliver(self.co.handle(client, msg, self.now))
        self.co._check()

    def take(self, client: str) -> list:
        return self.inbox.pop(client, [])

    def next(self) -> int:
        self.corr += 1
        return self.corr

    def run_until(self, t: int, step: int = 100, member=None) -> None:
        """Tick every ``step`` ms to ``t``; ``member`` (id, generation) heartbeats on the way."""
        while self.now < t:
            self.now = min(t, self.now + step)
            if member is not None:
                self.send("hb", gm.HeartbeatRequest(GROUP, self.next(), generation_id=member[1], member_id=member[0]))
                assert self.take("hb")[0].error is None
            self.deliver(self.co.tick(self.now))
            self.co._check()

    def commit(self, offsets, member: str = "", generation: int = -1) -> None:
        self.send("c", gm.OffsetCommitRequest(GROUP, self.next(), generation_id=generation, member_id=member,
                                              offsets=tuple((t, p, o, -1, "") for (t, p), o in offsets.items())))
        if not self.hold:
            assert self.take("c")[0].error is None

    def offsets(self) -> dict:
        g = self.co.groups.get(GROUP)
        return {} if g is None else {tp: v.offset for tp, v in g.offsets.items()}

    def listed(self) -> tuple:
        self.send("l", gm.ListGroupsRequest(self.next()))
        return self.take("l")[0].groups

    def reload(self) -> GroupCoordinator:
        """A new coordinator loads the log as it is now (a failover)."""
        co = self._fresh()
        co.load(0, 1, list(self.log), self.now)
        self.co = co
        return co

    def join_and_sync(self, topics=("t",)) -> tuple:
        sub = ot.encode_subscription(list(topics))
        self.send("a", gm.JoinGroupRequest(GROUP, self.next(), session_timeout_ms=10_000, rebalance_timeout_ms=1_000,
                                           protocols=(("range", sub),), client_id="a"))
        (resp,) = self.take("a")
        me, gen = resp.member_id, resp.generation_id
        self.send("a", gm.SyncGroupRequest(GROUP, self.next(), generation_id=gen, member_id=me,
                                           assignments=((me, ot.encode_assignment([(topics[0], 0)])),)))
        assert self.take("a")[0].error is None
        return me, gen


def test_offsets_of_a_group_that_only_commits_expire_after_commit_time_plus_retention():
    h = Harness()
    h.commit({("t", 0): 5})
    h.run_until(T0 + 4_000)
    h.commit({("t", 1): 7})  # committed later: expires later
    h.run_until(T0 + RETENTION - 1)
    assert h.offsets() == {("t", 0): 5, ("t", 1): 7}
    h.run_until(T0 + RETENTION + CHECK)
    assert h.offsets() == {("t", 1): 7}
    assert (ot.encode_offset_commit_key(GROUP, "t", 0), None) in h.log
    assert h.listed() == ((GROUP, "", EMPTY),)
    h.run_until(T0 + 4_000 + RETENTION + CHECK)
    assert h.offsets() == {} and GROUP not in h.co.groups
    assert h.listed() == ()  # an expired group without offsets is gone
    assert h.co.expired_offsets == 2
    h.reload()
    assert GROUP not in h.co.groups  # the tombstones keep it gone


def test_offsets_of_an_emptied_consumer_group_expire_retention_after_it_became_empty_even_across_a_reload():
    h = Harness()
    me, gen = h.join_and_sync()
    h.commit({("t", 0): 3}, member=me, generation=gen)
    # the member stays well past the commit's retention: nothing expires while it is there
    h.run_until(T0 + 3 * RETENTION, member=(me, gen))
    assert h.offsets() == {("t", 0): 3}
    assert h.co.groups[GROUP].state == STABLE
    h.send("a", gm.LeaveGroupRequest(GROUP, h.next(), member_id=me))
    emptied = h.now
    assert h.co.groups[GROUP].state == EMPTY
    h.run_until(emptied + RETENTION // 2)
    h.reload()  # a failover in the middle: the new coordinator knows when the group became empty
    assert h.co.groups[GROUP].empty_since_ms == emptied
    h.run_until(emptied + RETENTION - 1)
    assert h.offsets() == {("t", 0): 3}
    h.run_until(emptied + RETENTION + CHECK)
    assert h.offsets() == {} and h.listed() == ()
    # offsets and metadata have tombstones: yet another coordinator does not bring the group back
    assert (ot.encode_group_metadata_key(GROUP), None) in h.log
    h.reload()
    assert GROUP not in h.co.groups


def test_a_stable_group_keeps_its_subscribed_topics_offsets_and_loses_the_others():
    h = Harness()
    me, gen = h.join_and_sync(topics=("t",))
    h.commit({("t", 0): 1, ("u", 0): 2}, member=me, generation=gen)
    h.run_until(T0 + RETENTION + CHECK, member=(me, gen))
    assert h.offsets() == {("t", 0): 1}
    h.run_until(T0 + 5 * RETENTION, member=(me, gen))
    assert h.offsets() == {("t", 0): 1} and h.co.groups[GROUP].state == STABLE


def test_an_empty_group_without_offsets_disappears_at_the_next_check():
    h = Harness()
    me, gen = h.join_and_sync()
    h.send("a", gm.LeaveGroupRequest(GROUP, h.next(), member_id=me))
    assert h.listed() == ((GROUP, "consumer", EMPTY),)
    h.run_until(h.now + CHECK + 1)
    assert h.listed() == ()
    assert (ot.encode_group_metadata_key(GROUP), None) in h.log


def test_a_commit_in_flight_is_not_tombstoned_by_expiry():
    h = Harness()
    h.commit({("t", 0): 1})
    h.run_until(T0 + RETENTION - 10)
    h.hold = True
    h.commit({("t", 0): 2})  # appended, not yet acknowledged
    h.run_until(T0 + RETENTION + 2 * CHECK)
    assert h.offsets() == {("t", 0): 1}  # the old value stays until the new one is stored
    assert not any(v is None for _, v in h.log) and not any(
        m.records[0].value is None for m in h.held)  # no tombstone behind the commit
    h.release()
    assert h.take("c")[0].error is None
    assert h.offsets() == {("t", 0): 2}
    h.run_until(T0 + 2 * RETENTION - 100)
    assert h.offsets() == {("t", 0): 2}
    h.run_until(T0 + 2 * RETENTION + CHECK)
    assert h.offsets() == {}


def test_a_version_1_value_expires_at_its_own_expire_timestamp():
    key = ot.encode_offset_commit_key(GROUP, "t", 0)
    v1 = (ot._Writer().i16(1).i64(9).string("").i64(T0).i64(T0 + 500).done())  # Kafka 0.10's explicit expiry
    co = Harness._fresh()
    co.load(0, 0, [(key, v1)], T0)
    assert co.groups[GROUP].offsets[("t", 0)].expire_timestamp == T0 + 500
    co.tick(T0 + 400)
    assert ("t", 0) in co.groups[GROUP].offsets
    co._next_expiry_check_ms = 0
    out = co.tick(T0 + 500)
    assert GROUP not in co.groups
    assert any(isinstance(m, ProduceRequest) and (key, None) in [(r.key, r.value) for r in m.records]
               for _, m in out.items)


# ------------------------------------------------------------------ a cluster
TOPIC = "events"
OPTS = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, rebalance_timeout_ms=4_000,
            enable_auto_commit=False, fetch_max_wait_ms=100)


def coordinator_of(c: Cluster, group: str) -> int:
    return c.leader_of(OFFSETS_TOPIC, partition_for_group(group, c.store.topics[OFFSETS_TOPIC].partitions))


def test_cluster_expires_offsets_of_an_empty_group_and_they_stay_expired_after_failover(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=4, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1_000)
    try:
        c.create_topic(TOPIC, partitions=1, replication_factor=3)
        p = c.producer()
        for i in range(4):
            p.send(TOPIC, b"%d" % i).result()
        gone = c.consumer("gone", [TOPIC], **OPTS)
        stays = c.consumer("stays", [TOPIC], **OPTS)
        for consumer in (gone, stays):
            got: list = []
            while len(got) < 4:
                got += consumer.poll(0.5)
            consumer.commit()
        gone.close()
        emptied = c.now_ms
        c.advance(50_000)
        assert {tp: v.offset for tp, v in c.list_group_offsets("gone").items()} == {(TOPIC, 0): 4}
        c.advance(emptied + 60_000 + 2_000 - c.now_ms)
        assert c.list_group_offsets("gone") == {}
        assert [g.group_id for g in c.list_groups()] == ["stays"]
        # "stays" has a live member (heartbeating from the loop) for many retention periods
        c.advance(200_000)
        assert {tp: v.offset for tp, v in c.list_group_offsets("stays").items()} == {(TOPIC, 0): 4}
        assert c.describe_group("stays").state == STABLE
        # the coordinator of "gone" fails over: the new one read the tombstones
        old = coordinator_of(c, "gone")
        c.stop_broker(old, clean=False)
        c.advance(5_000)
        assert coordinator_of(c, "gone") != old
        assert c.list_group_offsets("gone") == {}
        assert "gone" not in [g.group_id for g in c.list_groups()]
        assert {tp: v.offset for tp, v in c.list_group_offsets("stays").items()} == {(TOPIC, 0): 4}
        fresh = c.consumer("gone", [TOPIC], **OPTS)  # a new member of "gone" starts over (earliest)
        got = []
        while len(got) < 4:
            got += fresh.poll(0.5)
        assert [r.offset for r in got] == [0, 1, 2, 3]
        stays.close()
        fresh.close()
        c._check()
    finally:
        c.close()


def test_retention_settings_are_checked(tmp_path):
    with pytest.raises(InvalidConfigurationError, match="offsets_retention_ms"):
        Cluster(tmp_path, brokers=1, seed=1, offsets_retention_ms=0)
