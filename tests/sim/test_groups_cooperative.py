"""Cooperative-sticky (KIP-429) consumer groups on a simulated cluster: churn, ownership, stickiness."""
from __future__ import annotations

import random
from typing import Dict, List, Set, Tuple

import pytest

from pylog.client._node import ClientFuture
from pylog.client.consumer_coordinator import MemberState
from pylog.cluster import Cluster
from pylog.errors import InconsistentGroupProtocolError, PylogError
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

from group_churn import harvest, wait_for_sends

TOPIC = "events"
PARTS = 6
COOP = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, rebalance_timeout_ms=4_000,
            enable_auto_commit=False, fetch_max_wait_ms=100, partition_assignment_strategy="cooperative-sticky")

TP = Tuple[str, int]


def check_never_shared(consumers) -> None:
    """No partition is owned by two members at the same moment (ownership events in their global order)."""
    events = sorted((seq, tp, owned, i) for i, c in enumerate(consumers) for seq, _, tp, owned in c.ownership_log)
    holder: Dict[TP, int] = {}
    for seq, tp, owned, i in events:
        if owned:
            assert tp not in holder, (f"{tp} taken by consumer {i} ({consumers[i].member_id}) while consumer "
                                      f"{holder[tp]} ({consumers[holder[tp]].member_id}) still owns it (event {seq})")
            holder[tp] = i
        else:
            assert holder.get(tp) == i, f"consumer {i} released {tp} it did not hold (event {seq})"
            del holder[tp]


class Recorder:
    """A rebalance listener that keeps every call."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, List[TP]]] = []

    def on_partitions_revoked(self, parts: List[TP]) -> None:
        self.calls.append(("revoked", parts))

    def on_partitions_assigned(self, parts: List[TP]) -> None:
        self.calls.append(("assigned", parts))

    def on_partitions_lost(self, parts: List[TP]) -> None:
        self.calls.append(("lost", parts))


@pytest.mark.parametrize("seed,failover,auto_commit", [(31, False, False), (32, False, False), (33, False, False),
                                                      (34, True, False), (35, True, False), (36, False, True),
                                                      (37, True, True), (1058, False, False)])
def test_cooperative_churn_never_shares_a_partition_and_delivers_everything(tmp_path, seed, failover, auto_commit):
    """Seeded churn: members join, leave (close) and crash at random moments (and, with
    ``failover``, the group coordinator's broker crashes and restarts); every member processes
    then commits (or auto-commits, which also commits a revoked partition's position before
    giving it up). No partition ever has two owners at once; every acknowledged record is
    delivered at least once; each member's listener saw exactly its ownership changes."""
    rng = random.Random(seed)
    c = Cluster(tmp_path, brokers=3, seed=seed)
    try:
        c.create_topic(TOPIC, partitions=PARTS, replication_factor=3, min_insync_replicas=2)
        producer = c.producer(acks="all")
        acked: Set[Tuple[int, int]] = set()
        pending: List[ClientFuture] = []
        delivered: Set[Tuple[int, int]] = set()
        live: List = []
        everyone: List = []
        listeners: Dict[int, Recorder] = {}
        n = [0]

        def step() -> None:
            for _ in range(3):
                n[0] += 1
                pending.append(producer.send(TOPIC, b"v%d" % n[0], key=b"k%d" % n[0]))
            for cons in list(live):
                recs = cons.poll(0.05)
                for r in recs:
                    delivered.add((r.partition, r.offset))
                if recs and not auto_commit:
                    try:
                        cons.commit()
                    except PylogError:  # a rebalance under way or fenced: redelivered later
                        pass
            harvest(pending, acked)
            check_never_shared(everyone)

        def add() -> None:
            rec = Recorder()
            opts = dict(COOP, enable_auto_commit=auto_commit, auto_commit_interval_ms=200)
            cons = c.consumer("coop", [TOPIC], rebalance_listener=rec, **opts)
            listeners[id(cons)] = rec
            live.append(cons)
            everyone.append(cons)

        add()
        down: List[int] = []
        for _ in range(12):
            action = rng.choice(["join", "join", "leave", "crash", "wait"] + (["failover"] if failover else []))
            if down:
                c.start_broker(down.pop())
            if action == "failover":
                n_parts = c.store.topics[OFFSETS_TOPIC].partitions
                coord = c.leader_of(OFFSETS_TOPIC, partition_for_group("coop", n_parts))
                if coord >= 0:
                    c.stop_broker(coord, clean=False)
                    down.append(coord)
            elif action == "join" and len(live) < 5:
                add()
            elif action == "leave" and len(live) > 1:
                live.pop(rng.randrange(len(live))).close()
            elif action == "crash" and len(live) > 1:
                live.pop(rng.randrange(len(live)))._crash()
            for _ in range(rng.randint(5, 25)):
                step()
        if down:
            c.start_broker(down.pop())
        wait_for_sends(pending, acked)
        # drain: let crashed members expire, the group settle and the survivors catch up
        for _ in range(400):
            step()
            c.advance(20)  # virtual time passes even when every poll returns at once
            owned = [set(cons.assignment()) for cons in live]
            if acked <= delivered and sum(len(o) for o in owned) == PARTS and \
                    max(len(o) for o in owned) - min(len(o) for o in owned) <= 1:
                break
        check_never_shared(everyone)
        missing = sorted(acked - delivered)
        assert not missing, f"seed {seed}: acknowledged records never delivered: {missing[:10]}"
        final = [set(cons.assignment()) for cons in live]
        assert set().union(*final) == {(TOPIC, p) for p in range(PARTS)}
        sizes = [len(f) for f in final]
        assert sum(sizes) == PARTS and max(sizes) - min(sizes) <= 1, sizes
        for cons in everyone:
            if cons in live:
                cons.poll(0)  # run the listener calls still queued
            # the listener heard exactly the changes of ownership (lost/revoked/assigned are incremental)
            rec = listeners[id(cons)]
            held: Set[TP] = set()
            for what, parts in rec.calls:
                if what == "assigned":
                    assert not held & set(parts), (what, parts, held)
                    held |= set(parts)
                else:
                    assert set(parts) <= held, (what, parts, held)
                    held -= set(parts)
            if cons in live:
                assert held == set(cons.assignment())
            cons._check()
        c._check()
    finally:
        c.close()


def test_joining_member_moves_only_what_balance_needs_and_others_keep_consuming(tmp_path):
    """Two members own 3 partitions each; a third joins. Exactly two partitions change hands (one
    from each); the four that stay are never revoked, their positions never reset (no record is
    delivered twice, though nothing was committed), and records keep flowing on them."""
    c = Cluster(tmp_path, brokers=3, seed=41)
    try:
        c.create_topic(TOPIC, partitions=PARTS, replication_factor=3)
        producer = c.producer(acks="all")
        seen: Dict[int, List[Tuple[int, int]]] = {}

        def produce(k: int) -> None:
            for i in range(k):
                producer.send(TOPIC, b"x", partition=i % PARTS)

        rec = Recorder()
        a = c.consumer("g", [TOPIC], rebalance_listener=rec, **COOP)
        b = c.consumer("g", [TOPIC], **COOP)
        members = [a, b]
        for cons in members:
            seen[id(cons)] = []
        for _ in range(200):
            produce(6)
            for cons in members:
                seen[id(cons)] += [(r.partition, r.offset) for r in cons.poll(0.05)]
            if len(a.assignment()) == 3 and len(b.assignment()) == 3:
                break
        before = {id(cons): set(cons.assignment()) for cons in members}
        assert all(len(v) == 3 for v in before.values())
        mark = {id(cons): len(cons.ownership_log) for cons in members}
        a._run_callbacks()  # what the last poll queued
        calls_before = len(rec.calls)
        gen_before = a.generation
        newcomer = c.consumer("g", [TOPIC], **COOP)
        members.append(newcomer)
        seen[id(newcomer)] = []
        for _ in range(300):
            produce(6)
            for cons in members:
                seen[id(cons)] += [(r.partition, r.offset) for r in cons.poll(0.05)]
            if len(newcomer.assignment()) == 2 and all(len(x.assignment()) == 2 for x in (a, b)):
                break
        assert len(newcomer.assignment()) == 2
        for cons in (a, b):
            after = set(cons.assignment())
            assert len(before[id(cons)] - after) == 1 and after < before[id(cons)]
            # the partitions it kept were never released, only the one it gave up
            released = [tp for _, _, tp, owned in list(cons.ownership_log)[mark[id(cons)]:] if not owned]
            assert released == sorted(before[id(cons)] - after)
        assert set(newcomer.assignment()) == (before[id(a)] | before[id(b)]) - set(a.assignment()) - set(b.assignment())
        assert newcomer.generation >= gen_before + 2  # the move took two generations (withheld, then given)
        # the listener heard only the increments: one partition revoked, nothing more assigned
        calls = rec.calls[calls_before:]
        assert ("revoked", sorted(before[id(a)] - set(a.assignment()))) in calls
        assert all(what == "assigned" and parts == [] for what, parts in calls if what != "revoked"), calls
        assert [what for what, _ in calls].count("revoked") == 1, calls
        for _ in range(20):  # and the old members keep reading their kept partitions
            produce(6)
            for cons in members:
                seen[id(cons)] += [(r.partition, r.offset) for r in cons.poll(0.05)]
        for cons in (a, b):
            recs = seen[id(cons)]
            assert len(recs) == len(set(recs)), "a kept partition was re-read from the committed offset"
            for t, p in cons.assignment():
                offsets = sorted(o for pp, o in recs if pp == p)
                assert offsets == list(range(len(offsets))) and len(offsets) > 20
        check_never_shared(members)
    finally:
        c.close()


def test_group_protocol_follows_kafkas_rule(tmp_path):
    """A consumer listing cooperative-sticky and range is eager, so it can join a range group
    (upgrade path); a consumer that only supports cooperative-sticky cannot join a group whose
    members support only range (InconsistentGroupProtocolError)."""
    c = Cluster(tmp_path, brokers=1, seed=42)
    try:
        c.create_topic(TOPIC, partitions=4, replication_factor=1)
        opts = {k: v for k, v in COOP.items() if k != "partition_assignment_strategy"}
        old = c.consumer("g", [TOPIC], partition_assignment_strategy="range", **opts)
        both = c.consumer("g", [TOPIC], partition_assignment_strategy=["cooperative-sticky", "range"], **opts)
        assert not both._cooperative
        for _ in range(60):
            old.poll(0.05)
            both.poll(0.05)
            if old.assignment() and both.assignment():
                break
        assert len(old.assignment()) == len(both.assignment()) == 2
        coop_only = c.consumer("g", [TOPIC], **COOP)
        with pytest.raises(InconsistentGroupProtocolError, match="cooperative-sticky"):
            for _ in range(40):
                coop_only.poll(0.05)
        old.close()
        coop_only.close()
        # with only cooperative-capable members left, the group can move to cooperative-sticky
        fresh = c.consumer("g", [TOPIC], **COOP)
        for _ in range(100):
            fresh.poll(0.05)
            both.poll(0.05)
            if len(fresh.assignment()) + len(both.assignment()) == 4 and fresh.assignment():
                break
        assert sorted(fresh.assignment() + both.assignment()) == [(TOPIC, p) for p in range(4)]
        check_never_shared([old, both, coop_only, fresh])
    finally:
        c.close()


def test_eager_listener_hears_everything_revoked_then_the_new_assignment(tmp_path):
    """The eager protocol's listener calls (kafka-python's): all owned partitions revoked before
    rejoining, then the whole new assignment; the cooperative test above hears only increments."""
    c = Cluster(tmp_path, brokers=1, seed=43)
    try:
        c.create_topic(TOPIC, partitions=4, replication_factor=1)
        opts = dict(COOP, partition_assignment_strategy="range")
        rec = Recorder()
        a = c.consumer("g", [TOPIC], **opts)
        a.subscribe([TOPIC], listener=rec)  # kafka-python's subscribe(topics, listener=...)
        for _ in range(40):
            a.poll(0.05)
            if len(a.assignment()) == 4:
                break
        b = c.consumer("g", [TOPIC], **opts)
        for _ in range(80):
            a.poll(0.05)
            b.poll(0.05)
            if len(a.assignment()) == 2 and len(b.assignment()) == 2:
                break
        a.poll(0)
        every = [(TOPIC, p) for p in range(4)]
        assert rec.calls == [("assigned", every), ("revoked", every), ("assigned", sorted(a.assignment()))]
    finally:
        c.close()


def test_cooperative_subscribe_keeps_the_topics_still_subscribed(tmp_path):
    """subscribe() on a cooperative member gives up only the partitions of topics it drops: adding a
    topic keeps every partition it had (no revocation, no re-read), dropping one revokes just that
    topic's partitions. An eager member revokes everything, as before."""
    c = Cluster(tmp_path, brokers=3, seed=43)
    try:
        c.create_topic("a", partitions=2, replication_factor=3)
        c.create_topic("b", partitions=2, replication_factor=3)
        producer = c.producer(acks="all")

        def produce() -> None:
            for t in ("a", "b"):
                for p in range(2):
                    producer.send(t, b"x", partition=p)

        rec = Recorder()
        cons = c.consumer("g", ["a"], rebalance_listener=rec, **COOP)
        seen: List[Tuple[str, int, int]] = []

        def run(rounds: int) -> None:
            for _ in range(rounds):
                produce()
                seen.extend((r.topic, r.partition, r.offset) for r in cons.poll(0.05))

        run(60)
        assert sorted(cons.assignment()) == [("a", 0), ("a", 1)]
        mark = len(rec.calls)
        cons.subscribe(["a", "b"])
        run(60)
        assert sorted(cons.assignment()) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
        assert not [parts for what, parts in rec.calls[mark:] if what in ("revoked", "lost") and parts], rec.calls
        assert len(seen) == len(set(seen)), "a kept partition was read again from the committed offset"
        for p in range(2):
            offsets = sorted(o for t, pp, o in seen if (t, pp) == ("a", p))
            assert offsets == list(range(len(offsets)))  # no gap either
        mark = len(rec.calls)
        cons.subscribe(["b"])
        run(60)
        assert sorted(cons.assignment()) == [("b", 0), ("b", 1)]
        revoked = [parts for what, parts in rec.calls[mark:] if what == "revoked" and parts]
        assert revoked == [[("a", 0), ("a", 1)]]
        check_never_shared([cons])

        eager_rec = Recorder()
        eager = c.consumer("g2", ["a"], rebalance_listener=eager_rec, **dict(COOP, partition_assignment_strategy="range"))
        for _ in range(60):
            produce()
            eager.poll(0.05)
        assert sorted(eager.assignment()) == [("a", 0), ("a", 1)]
        mark = len(eager_rec.calls)
        eager.subscribe(["a", "b"])
        eager.poll(0.05)
        assert ("revoked", [("a", 0), ("a", 1)]) in eager_rec.calls[mark:]
    finally:
        c.close()


def test_seed_1058_members_awaiting_a_dead_leaders_sync_keep_their_session(tmp_path):
    """Churn seed 1058: the leader crashed with its JoinGroup pending, so the next generation
    completed with a dead leader and the others waited in SyncGroup until its session lapsed. They
    sent no heartbeats there, so the coordinator expired them at the same moment and a newcomer got
    their partitions while they still read them (two owners). Kafka's members heartbeat while
    awaiting SyncGroup: the survivor stays a member, keeps its partitions (never lost nor revoked)
    and the group settles without the dead leader."""
    c = Cluster(tmp_path, brokers=3, seed=1058)
    try:
        c.create_topic(TOPIC, partitions=PARTS, replication_factor=3)
        leader = c.consumer("g", [TOPIC], **COOP)
        for _ in range(60):
            leader.poll(0.05)
            if len(leader.assignment()) == PARTS:
                break
        rec = Recorder()
        survivor = c.consumer("g", [TOPIC], rebalance_listener=rec, **COOP)
        members = [leader, survivor]
        for _ in range(200):
            for cons in members:
                cons.poll(0.05)
            if len(leader.assignment()) == len(survivor.assignment()) == PARTS // 2:
                break
        kept = set(survivor.assignment())
        assert len(kept) == PARTS // 2 and survivor.member_id
        member_id, mark = survivor.member_id, len(survivor.ownership_log)
        newcomer = c.consumer("g", [TOPIC], **COOP)  # a rebalance: the leader rejoins...
        for _ in range(2_000):
            c.advance(1)
            if leader._state is MemberState.JOINING:
                break
        assert leader._state is MemberState.JOINING
        c.advance(2)  # ...its JoinGroup reaches the coordinator, and it dies
        leader._crash()
        members = [survivor, newcomer]
        for _ in range(400):
            for cons in members:
                cons.poll(0.05)
            if len(survivor.assignment()) == len(newcomer.assignment()) == PARTS // 2:
                break
        survivor.poll(0)
        assert survivor.member_id == member_id, "the survivor was expired from the group"
        assert not [parts for what, parts in rec.calls if what == "lost"], rec.calls
        assert set(survivor.assignment()) == kept
        assert not [tp for _, _, tp, owned in list(survivor.ownership_log)[mark:] if not owned]
        assert sorted(survivor.assignment() + newcomer.assignment()) == [(TOPIC, p) for p in range(PARTS)]
        check_never_shared([leader, survivor, newcomer])
    finally:
        c.close()
