"""Static group membership (KIP-345, ``group_instance_id``) on simulated clusters.

A static member that restarts within its session timeout takes its old slot
back (same generation, same partitions, nobody else rebalances); a dynamic
group rebalances twice for the same restart; the replaced member id is fenced
(``FencedInstanceIdError``); a static member away past its session timeout is
expired; two live consumers with one instance id: the older is fenced for good.
"""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import pytest

from pylog.client._node import ClientFuture, ClientNode
from pylog.cluster import Cluster
from pylog.errors import FencedInstanceIdError, InvalidConfigurationError, PylogError
from pylog.replication import group_messages as gm
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

TOPIC = "events"
GROUP = "static"
PARTS = {(TOPIC, p) for p in range(6)}
OPTS = dict(session_timeout_ms=6_000, heartbeat_interval_ms=300, rebalance_timeout_ms=4_000,
            enable_auto_commit=False, fetch_max_wait_ms=100)


class Listener:
    """Records every rebalance-listener call."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, List[Tuple[str, int]]]] = []

    def on_partitions_revoked(self, parts):
        self.calls.append(("revoked", list(parts)))

    def on_partitions_assigned(self, parts):
        self.calls.append(("assigned", list(parts)))

    def on_partitions_lost(self, parts):
        self.calls.append(("lost", list(parts)))


def coordinator_of(c: Cluster) -> int:
    return c.leader_of(OFFSETS_TOPIC, partition_for_group(GROUP, c.store.topics[OFFSETS_TOPIC].partitions))


def raw_request(c: Cluster, node: ClientNode, dst: int, msg) -> object:
    fut = ClientFuture(c.scheduler)
    node.request(dst, msg, 10_000, lambda resp: fut.set_result(resp))
    return fut.result()


class Run:
    """A producer writing steadily, consumers polling and committing after processing (at-least-once)."""

    def __init__(self, c: Cluster, **options) -> None:
        self.c = c
        self.options = dict(OPTS, **options)
        self.producer = c.producer(acks="all")
        self.pending: List[ClientFuture] = []
        self.acked: Set[Tuple[int, int]] = set()
        self.delivered: Set[Tuple[int, int]] = set()
        self.live: list = []
        self.n = 0

    def consumer(self, instance: Optional[str], **options):
        listener = Listener()
        cons = self.c.consumer(GROUP, [TOPIC], group_instance_id=instance, rebalance_listener=listener,
                               **dict(self.options, **options))
        cons.listener = listener
        self.live.append(cons)
        return cons

    def harvest(self) -> None:
        for f in list(self.pending):
            if f.done():
                self.pending.remove(f)
                if f.exception() is None:
                    m = f.result()
                    self.acked.add((m.partition, m.offset))

    def step(self, produce: bool = True) -> None:
        if produce:
            for _ in range(3):
                self.n += 1
                self.pending.append(self.producer.send(TOPIC, b"v%d" % self.n, key=b"k%d" % self.n))
        for cons in list(self.live):
            recs = cons.poll(0.05)
            for r in recs:
                self.delivered.add((r.partition, r.offset))
            if recs:
                cons.commit()
        self.harvest()

    def settle(self, want: int, limit: int = 200) -> None:
        """Steps until ``want`` live members are Stable in one generation and own every partition once."""
        for _ in range(limit):
            self.step()
            gens = {cons.generation for cons in self.live}
            owned = [set(cons.assignment()) for cons in self.live]
            if len(self.live) == want and len(gens) == 1 and all(owned) and \
                    sum(map(len, owned)) == len(PARTS) and set().union(*owned) == PARTS:
                return
        raise AssertionError(f"the group did not settle: {[(x.generation, x.assignment()) for x in self.live]}")

    def drain(self) -> None:
        for f in self.pending:
            try:
                f.result()
            except PylogError:
                pass
        self.harvest()
        for _ in range(300):
            self.step(produce=False)
            if self.acked <= self.delivered:
                break
        missing = sorted(self.acked - self.delivered)
        assert not missing, f"acknowledged records never delivered: {missing[:10]}"


def check_coordinator_view(c: Cluster) -> None:
    """The group as its coordinator has it: every partition assigned to exactly one member."""
    d = c.describe_group(GROUP)
    assert d.state == "Stable"
    owned = [tp for m in d.members for tp in m.assignment]
    assert sorted(owned) == sorted(PARTS), d


def restart_one(c: Cluster, static: bool, **options):
    """Three members; member 1 commits, closes and is restarted (same instance id when static) well
    within the session timeout. Returns (run, the generation before, the closed member's partitions,
    the old consumer, the new consumer, the other two)."""
    c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
    run = Run(c, **options)
    members = [run.consumer(f"host-{i}" if static else None) for i in range(3)]
    run.settle(3)
    for _ in range(10):
        run.step()
    before = members[0].generation
    victim = members[1]
    victim_parts = set(victim.assignment())
    victim.old_member_id = victim.member_id  # (close() forgets it)
    victim.commit()
    victim.close()
    run.live.remove(victim)
    for _ in range(10):  # about half a second: the others keep reading, well within the session timeout
        run.step()
    fresh = run.consumer("host-1" if static else None)
    run.settle(3)
    others = [members[0], members[2]]
    return run, before, victim_parts, victim, fresh, others


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_static_member_restart_keeps_the_generation_and_its_partitions(tmp_path, strategy):
    c = Cluster(tmp_path, brokers=3, seed=345)
    try:
        run, before, victim_parts, victim, fresh, others = restart_one(
            c, static=True, partition_assignment_strategy=strategy)
        coordinator = c.brokers[coordinator_of(c)].coordinator
        rebalances = coordinator.rebalances
        assert fresh.generation == before
        assert all(o.generation == before for o in others)
        assert set(fresh.assignment()) == victim_parts and fresh.member_id != victim.old_member_id
        # nobody else noticed: one assignment each, no revocation, no loss
        for o in others:
            assert [what for what, _ in o.listener.calls] == ["assigned"], o.listener.calls
            assert len(o.assignment_history) == 1
        assert fresh.listener.calls == [("assigned", sorted(victim_parts))]
        d = c.describe_group(GROUP)
        assert d.generation == before
        by_instance = {m.group_instance_id: m for m in d.members}
        assert set(by_instance) == {"host-0", "host-1", "host-2"}
        assert by_instance["host-1"].member_id == fresh.member_id
        assert set(by_instance["host-1"].assignment) == victim_parts
        # the new member starts where the closed one committed, and the group goes on without rebalancing
        for _ in range(20):
            run.step()
        run.drain()
        check_coordinator_view(c)
        assert coordinator.rebalances == rebalances
        assert all(o.generation == before for o in run.live)
        c._check()
    finally:
        c.close()


def test_dynamic_member_restart_rebalances(tmp_path):
    """The contrast: without group_instance_id the same restart costs two rebalances (leave, join)."""
    c = Cluster(tmp_path, brokers=3, seed=345)
    try:
        run, before, victim_parts, victim, fresh, others = restart_one(c, static=False)
        assert fresh.generation >= before + 2
        assert all(o.generation == fresh.generation for o in others)
        # Eager members give up everything when they rejoin; one still rejoining for the leave when
        # the join starts the next rebalance rejoins once for both (as in Kafka), so it revokes at
        # least once - which of the two happens depends on the seeded interleaving (3 of 12 seeds
        # merge them, different ones as replication timing changes).
        for o in others:
            assert [what for what, _ in o.listener.calls].count("revoked") >= 1, o.listener.calls
        assert all(m.group_instance_id is None for m in c.describe_group(GROUP).members)
        run.drain()
        check_coordinator_view(c)
    finally:
        c.close()


def test_replaced_member_id_is_fenced(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=346)
    try:
        run, before, victim_parts, victim, fresh, others = restart_one(c, static=True)
        old = victim.old_member_id
        assert old
        node = ClientNode("zombie", c.scheduler, c.transport)
        coord = coordinator_of(c)
        requests = [
            gm.HeartbeatRequest(GROUP, node.next_corr(), generation_id=before, member_id=old,
                                group_instance_id="host-1"),
            gm.OffsetCommitRequest(GROUP, node.next_corr(), generation_id=before, member_id=old,
                                   offsets=((TOPIC, sorted(victim_parts)[0][1], 0, -1, ""),),
                                   group_instance_id="host-1"),
            gm.SyncGroupRequest(GROUP, node.next_corr(), generation_id=before, member_id=old,
                                group_instance_id="host-1"),
            gm.JoinGroupRequest(GROUP, node.next_corr(), member_id=old, protocols=(("range", b""),),
                                group_instance_id="host-1"),
            gm.LeaveGroupRequest(GROUP, node.next_corr(), member_id=old, group_instance_id="host-1"),
        ]
        committed = {tp: fresh.committed(*tp) for tp in victim_parts}
        for req in requests:
            resp = raw_request(c, node, coord, req)
            assert resp.error is FencedInstanceIdError, (type(req).__name__, resp)
            assert "host-1" in resp.message and old in resp.message and GROUP in resp.message
        # none of them changed anything: same member, same generation, same offsets
        assert {tp: fresh.committed(*tp) for tp in victim_parts} == committed
        d = c.describe_group(GROUP)
        assert d.generation == before and fresh.member_id in {m.member_id for m in d.members}
        for _ in range(10):
            run.step()
        assert fresh.generation == before and set(fresh.assignment()) == victim_parts
    finally:
        c.close()


def test_static_member_away_past_its_session_timeout_is_expired(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=347)
    try:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
        run = Run(c)
        members = [run.consumer(f"host-{i}") for i in range(3)]
        run.settle(3)
        before = members[0].generation
        victim = members[1]
        victim.close()  # a static member sends no LeaveGroup: its slot waits for it
        run.live.remove(victim)
        gone_at = c.now_ms
        run.step()
        assert c.describe_group(GROUP).generation == before  # (no LeaveGroup: still its slot)
        run.settle(2, limit=1000)
        waited = c.now_ms - gone_at
        # expired by its session timeout (counted from its last heartbeat, at most one interval before)
        assert waited >= OPTS["session_timeout_ms"] - OPTS["heartbeat_interval_ms"], waited
        assert members[0].generation > before
        d = c.describe_group(GROUP)
        assert {m.group_instance_id for m in d.members} == {"host-0", "host-2"}
        check_coordinator_view(c)
        # the instance id is free again: a consumer with it is a new member (it joins by a rebalance)
        after = members[0].generation
        back = run.consumer("host-1")
        run.settle(3)
        assert back.generation > after and back.assignment()
        run.drain()
        c._check()
    finally:
        c.close()


def test_two_live_consumers_with_one_instance_id_fence_the_older(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=348)
    try:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
        run = Run(c)
        a, other = run.consumer("twin"), run.consumer("solo")
        run.settle(2)
        generation = a.generation
        a_parts = set(a.assignment())
        run.live.remove(a)  # a is alive but not polled for a moment (a GC pause, say)
        b = run.consumer("twin")  # a second process misconfigured with the same instance id
        run.settle(2)
        assert b.generation == generation and set(b.assignment()) == a_parts
        # a's commit is refused (whether a heard of the fencing from a heartbeat already or from this commit)
        with pytest.raises(FencedInstanceIdError, match="twin"):
            a.commit({tp: 10_000 for tp in a_parts})
        assert all((b.committed(*tp) or 0) < 10_000 for tp in a_parts)  # (b commits what it reads)
        # fenced for good: no partitions, poll and commit raise, no rejoin that would fence b in turn
        assert a.assignment() == []
        for _ in range(3):
            with pytest.raises(FencedInstanceIdError):
                a.poll(0.5)
        assert a.listener.calls == [("assigned", sorted(a_parts)), ("lost", sorted(a_parts))]
        with pytest.raises(FencedInstanceIdError):
            a.commit()
        for _ in range(20):
            run.step()
        assert b.generation == generation and set(b.assignment()) == a_parts
        assert [what for what, _ in b.listener.calls] == ["assigned"]
        assert [what for what, _ in other.listener.calls] == ["assigned"]
        check_coordinator_view(c)
        # in every generation the coordinator handed each partition to one member id
        d = c.describe_group(GROUP)
        assert {m.member_id for m in d.members} == {b.member_id, other.member_id}
        run.drain()
        a.close()
        c._check()
    finally:
        c.close()


def test_a_fenced_consumer_learns_it_from_its_heartbeat(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=349)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        a = c.consumer(GROUP, [TOPIC], group_instance_id="twin", **OPTS)
        for _ in range(40):
            a.poll(0.1)
            if len(a.assignment()) == 2:
                break
        assert len(a.assignment()) == 2
        b = c.consumer(GROUP, [TOPIC], group_instance_id="twin", **OPTS)
        for _ in range(40):
            b.poll(0.1)
            if len(b.assignment()) == 2:
                break
        assert len(b.assignment()) == 2
        c.advance(2 * OPTS["heartbeat_interval_ms"])  # a's loop heartbeats meanwhile
        assert a.assignment() == []
        with pytest.raises(FencedInstanceIdError) as info:
            a.poll(0.1)
        assert "'twin'" in str(info.value) and GROUP in str(info.value)
        assert len(b.assignment()) == 2 and b.poll(0.1) == []
    finally:
        c.close()


@pytest.mark.parametrize("bad", ["", 5, b"host", "host 1", "x" * 250, ".", "..", "h/1"])
def test_bad_group_instance_id_is_refused(tmp_path, bad):
    c = Cluster(tmp_path, brokers=1, seed=350)
    try:
        with pytest.raises(InvalidConfigurationError, match="group_instance_id"):
            c.consumer(GROUP, [TOPIC], group_instance_id=bad)
        assert OFFSETS_TOPIC not in c.store.topics  # checked before anything was created
    finally:
        c.close()


def test_group_instance_id_needs_a_group(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=351)
    try:
        with pytest.raises(InvalidConfigurationError, match="needs a group_id"):
            c.consumer(None, [TOPIC], group_instance_id="host-1")
        ok = c.consumer(GROUP, [TOPIC], group_instance_id="x" * 249)
        assert ok.group_instance_id == "x" * 249
        ok.close()
    finally:
        c.close()


def test_static_member_back_from_a_poll_timeout_within_its_session_takes_its_slot_back(tmp_path):
    """A poll timeout makes a static member give up its partitions locally but send no LeaveGroup (Kafka:
    only dynamic members leave); polling again within the session timeout rejoins into its own slot."""
    c = Cluster(tmp_path, brokers=3, seed=352)
    try:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
        run = Run(c)
        slow, other = run.consumer("slow", max_poll_interval_ms=2_000), run.consumer("steady")
        run.settle(2)
        generation, parts, member = slow.generation, set(slow.assignment()), slow.member_id
        run.live.remove(slow)
        for _ in range(25):  # 2.5 s of the others' polling: past slow's poll timeout, within its session
            run.step()
            c.advance(100)
        assert slow.assignment() == []  # it let go of its partitions when its poll timer expired
        assert c.describe_group(GROUP).generation == generation  # ... but kept its slot
        run.live.append(slow)
        run.settle(2)
        assert slow.generation == generation and set(slow.assignment()) == parts and slow.member_id != member
        assert [what for what, _ in other.listener.calls] == ["assigned"]
        assert slow.listener.calls == [("assigned", sorted(parts)), ("lost", sorted(parts)),
                                       ("assigned", sorted(parts))]
        run.drain()
        check_coordinator_view(c)
    finally:
        c.close()


def test_admin_removes_a_static_member_at_once(tmp_path):
    from pylog.errors import UnknownMemberIdError

    c = Cluster(tmp_path, brokers=3, seed=353)
    try:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
        run = Run(c, session_timeout_ms=600_000)  # its session alone would keep the slot for ten minutes
        members = [run.consumer(f"host-{i}") for i in range(3)]
        run.settle(3)
        before = members[0].generation
        gone = members[1]
        gone.close()
        run.live.remove(gone)
        admin = c.group_admin()  # the facade's own GroupAdmin
        assert "host-1" in {m.group_instance_id for m in c.describe_group(GROUP).members}  # (no LeaveGroup)
        c.remove_group_members(GROUP, ["host-1"])  # the Cluster facade over GroupAdmin
        d = c.describe_group(GROUP)  # gone at once, and the group rebalances without it
        assert {m.group_instance_id for m in d.members} == {"host-0", "host-2"} and d.state == "PreparingRebalance"
        run.settle(2)
        assert members[0].generation > before
        check_coordinator_view(c)
        with pytest.raises(UnknownMemberIdError, match="'host-1'"):
            admin.remove_group_members(GROUP, ["host-1"])
        with pytest.raises(InvalidConfigurationError):
            admin.remove_group_members(GROUP, ["bad id"])
        run.drain()
    finally:
        c.close()


def test_a_coordinator_failover_keeps_the_instance_ids(tmp_path):
    """The instance ids are in the GroupMetadata record (v3): after the coordinator's broker crashes, its
    successor still lets a restarted static member take its slot back without a rebalance."""
    c = Cluster(tmp_path, brokers=3, seed=354)
    try:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
        run = Run(c, session_timeout_ms=20_000)
        members = [run.consumer(f"host-{i}") for i in range(3)]
        run.settle(3)
        generation = members[0].generation
        old = coordinator_of(c)
        c.stop_broker(old, clean=False)
        for _ in range(50):
            run.step()
            c.advance(100)
        new = coordinator_of(c)
        assert new != old
        assert c.brokers[new].coordinator.groups[GROUP].static_members.keys() == {"host-0", "host-1", "host-2"}
        victim = members[1]
        parts = set(victim.assignment())
        victim.close()
        run.live.remove(victim)
        back = run.consumer("host-1")
        run.settle(3)
        assert back.generation == generation and set(back.assignment()) == parts
        assert all(m.generation == generation for m in run.live)
        assert {m.group_instance_id: m.member_id for m in c.describe_group(GROUP).members}["host-1"] == back.member_id
        c.start_broker(old)
        run.drain()
        check_coordinator_view(c)
    finally:
        c.close()


def test_restarted_static_leader_keeps_leading(tmp_path):
    """The leader restarts: its new member id is the group's leader (it was told the old id, so it ran
    no assignor for the Stable group); the next rebalance is led by it and includes everyone."""
    c = Cluster(tmp_path, brokers=3, seed=355)
    try:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
        run = Run(c)
        members = [run.consumer(f"host-{i}") for i in range(3)]
        run.settle(3)
        generation = members[0].generation
        leader_id = c.describe_group(GROUP).leader
        (leader,) = [m for m in members if m.member_id == leader_id]
        parts = set(leader.assignment())
        leader.commit()
        leader.close()
        run.live.remove(leader)
        back = run.consumer(leader.group_instance_id)
        run.settle(3)
        d = c.describe_group(GROUP)
        assert back.generation == generation and set(back.assignment()) == parts
        assert d.leader == back.member_id != leader_id
        newcomer = run.consumer("host-3")
        run.settle(4)
        d = c.describe_group(GROUP)
        assert d.generation > generation and d.leader == back.member_id
        assert newcomer.assignment() and len({m.generation for m in run.live}) == 1
        run.drain()
        check_coordinator_view(c)
    finally:
        c.close()
