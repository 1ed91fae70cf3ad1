"""Consumer groups on a simulated cluster: churn, generations, stale commits, coordinator failover."""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

import pytest

from pylog.client._node import ClientFuture, ClientNode
from pylog.cluster import Cluster
from pylog.errors import IllegalGenerationError, PylogError, UnknownMemberIdError
from pylog.replication import group_messages as gm
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

from group_churn import drain, harvest, wait_for_sends

TOPIC = "events"
GROUP_OPTS = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, rebalance_timeout_ms=4_000,
                  enable_auto_commit=False, fetch_max_wait_ms=100)


def check_ownership(consumers) -> None:
    """No partition is owned by two members in one generation."""
    owner: Dict[Tuple[int, Tuple[str, int]], str] = {}
    for c in consumers:
        for generation, member, parts in c.assignment_history:
            for tp in parts:
                prev = owner.setdefault((generation, tp), member)
                assert prev == member, f"generation {generation}: {tp} owned by {prev} and {member}"


def coordinator_of(c: Cluster, group: str) -> int:
    n = c.store.topics[OFFSETS_TOPIC].partitions
    return c.leader_of(OFFSETS_TOPIC, partition_for_group(group, n))


@pytest.mark.parametrize("seed,auto_commit", [(11, False), (12, True)])
def test_churn_delivers_every_record_at_least_once_and_never_shares_a_partition(tmp_path, seed, auto_commit):
    """Members join, one leaves, one crashes, one joins; commits after processing (or auto-commit in poll)."""
    c = Cluster(tmp_path, brokers=3, seed=seed)
    try:
        c.create_topic(TOPIC, partitions=6, replication_factor=3, min_insync_replicas=2)
        producer = c.producer(acks="all")
        acked: Set[Tuple[int, int]] = set()
        pending: List[ClientFuture] = []
        delivered: Set[Tuple[int, int]] = set()
        live: List = []
        everyone: List = []
        refused: List[str] = []
        n = [0]

        def round_(steps: int) -> None:
            for _ in range(steps):
                for _ in range(3):
                    n[0] += 1
                    pending.append(producer.send(TOPIC, b"v%d" % n[0], key=b"k%d" % n[0]))
                for cons in list(live):
                    recs = cons.poll(0.05)
                    for r in recs:  # process, then commit: at-least-once
                        delivered.add((r.partition, r.offset))
                    if recs and not auto_commit:
                        try:
                            cons.commit()
                        except PylogError as exc:  # fenced by a rebalance: the commit is refused
                            refused.append(type(exc).__name__)
                harvest(pending, acked)
                c._check(deep=False)
                check_ownership(everyone)

        def add() -> None:
            opts = dict(GROUP_OPTS, enable_auto_commit=auto_commit, auto_commit_interval_ms=200)
            cons = c.consumer("churn", [TOPIC], **opts)
            live.append(cons)
            everyone.append(cons)

        add()
        round_(20)
        add()
        add()
        round_(30)
        leaving = live.pop(1)
        leaving.close()  # commits nothing more (auto-commit off), leaves at once
        round_(20)
        crashed = live.pop(0)
        crashed._crash()  # no LeaveGroup: its session times out
        survivor = live[0]
        start = c.now_ms
        for _ in range(100):
            round_(5)
            c.advance(50)
            if set(survivor.assignment()) == {(TOPIC, p) for p in range(6)}:
                break
        assert set(survivor.assignment()) == {(TOPIC, p) for p in range(6)}, "the crashed member was never expired"
        # it took a session timeout (counted from its last heartbeat, at most one interval before the crash)
        assert c.now_ms - start >= GROUP_OPTS["session_timeout_ms"] - GROUP_OPTS["heartbeat_interval_ms"]
        add()
        round_(40)
        wait_for_sends(pending, acked)
        drain(live, delivered, acked, commit=not auto_commit)  # the survivors own every partition and catch up
        check_ownership(everyone)
        missing = sorted(acked - delivered)
        assert not missing, f"acknowledged records never delivered: {missing[:10]}"
        final = [set(cons.assignment()) for cons in live]
        assert set().union(*final) == {(TOPIC, p) for p in range(6)}
        assert sum(len(f) for f in final) == 6
        generations = {g for cons in everyone for g, _, _ in cons.assignment_history}
        assert len(generations) >= 5, generations  # joins, a leave and a crash each started a new generation
        for cons in everyone:
            cons._check()
        c._check()
    finally:
        c.close()


def raw_request(c: Cluster, node: ClientNode, dst: int, msg) -> object:
    fut = ClientFuture(c.scheduler)
    node.request(dst, msg, 10_000, lambda resp: fut.set_result(resp))
    return fut.result()


def test_commit_from_stale_generation_is_refused(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=21)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        a = c.consumer("g", [TOPIC], **GROUP_OPTS)
        a.poll(1.0)
        old_generation, member = a.generation, a.member_id
        assert old_generation >= 1 and member
        b = c.consumer("g", [TOPIC], **GROUP_OPTS)
        for _ in range(40):
            a.poll(0.1)
            b.poll(0.1)
            if a.generation > old_generation and a.assignment() and b.assignment():
                break
        assert a.generation > old_generation
        node = ClientNode("zombie", c.scheduler, c.transport)
        coord = coordinator_of(c, "g")
        stale = gm.OffsetCommitRequest("g", node.next_corr(), generation_id=old_generation, member_id=member,
                                       offsets=((TOPIC, 0, 5, -1, ""),))
        resp = raw_request(c, node, coord, stale)
        assert resp.error is IllegalGenerationError and "generation" in resp.message
        unknown = gm.OffsetCommitRequest("g", node.next_corr(), generation_id=a.generation, member_id="nobody",
                                         offsets=((TOPIC, 0, 5, -1, ""),))
        assert raw_request(c, node, coord, unknown).error is UnknownMemberIdError
        # a standalone (generation -1) commit is refused while the group has members
        standalone = gm.OffsetCommitRequest("g", node.next_corr(), offsets=((TOPIC, 0, 5, -1, ""),))
        assert raw_request(c, node, coord, standalone).error is UnknownMemberIdError
        assert a.committed(TOPIC, 0) is None  # none of the refused commits landed
        # the current generation commits fine
        owner = a if (TOPIC, 0) in a.assignment() else b
        assert owner.commit({(TOPIC, 0): 3}) == {(TOPIC, 0): 3}
        assert a.committed(TOPIC, 0) == 3
    finally:
        c.close()


def test_zombie_member_commit_refused_after_its_session_expired(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=22)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        p = c.producer(acks="all")
        for i in range(4):
            p.send(TOPIC, b"%d" % i, partition=i % 2).result()
        a = c.consumer("g", [TOPIC], **GROUP_OPTS)
        got = []
        for _ in range(20):
            got += a.poll(0.2)
        assert len(got) == 4
        c.transport.isolate(a._node.node_id)  # a long GC pause: no heartbeats reach the coordinator
        b = c.consumer("g", [TOPIC], **GROUP_OPTS)
        got_b = []
        for _ in range(100):
            got_b += b.poll(0.1)
            if set(b.assignment()) == {(TOPIC, 0), (TOPIC, 1)}:
                break
        assert set(b.assignment()) == {(TOPIC, 0), (TOPIC, 1)}  # a was expired; b owns everything
        c.transport.heal()
        with pytest.raises((UnknownMemberIdError, IllegalGenerationError)):
            a.commit({(TOPIC, 0): 2, (TOPIC, 1): 2})
        assert b.committed(TOPIC, 0) is None
        check_ownership([a, b])
    finally:
        c.close()


def test_coordinator_crash_new_coordinator_has_the_committed_offsets(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=31)
    try:
        c.create_topic(TOPIC, partitions=3, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        for i in range(30):
            p.send(TOPIC, b"%d" % i, partition=i % 3).result()
        a = c.consumer("billing", [TOPIC], **GROUP_OPTS)
        got = []
        while len(got) < 15:
            got += a.poll(0.5, max_records=15 - len(got))
        committed = a.commit()
        assert sum(committed.values()) == 15
        old = coordinator_of(c, "billing")
        c.stop_broker(old, clean=False)
        c.advance(5_000)  # the controller moves the offsets partition's leadership
        new = coordinator_of(c, "billing")
        assert new != old
        assert c.brokers[new].coordinator is not None
        assert {tp: a.committed(*tp) for tp in committed} == committed
        # the member carries on with the new coordinator: more records, another commit
        more = []
        for _ in range(40):
            more += a.poll(0.2)
            if len(got) + len(more) >= 30:
                break
        assert sorted((r.partition, r.offset) for r in got + more) == sorted((i % 3, i // 3) for i in range(30))
        assert sum(a.commit().values()) == 30
        a.close()
        c.start_broker(old)
        c.advance(5_000)
        fresh = c.consumer("billing", [TOPIC], **GROUP_OPTS)
        assert fresh.poll(1.0) == []  # everything was committed: nothing to redeliver
        assert all(fresh.position(TOPIC, q) == 10 for q in range(3))
        c._check()
    finally:
        c.close()


def test_group_deletion_writes_tombstones_and_a_reload_forgets_the_group(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=41)
    try:
        c.create_topic(TOPIC, partitions=1, replication_factor=3)
        a = c.consumer("gone", [TOPIC], **GROUP_OPTS)
        a.poll(0.5)
        a.commit({(TOPIC, 0): 7})
        a.close()
        node = ClientNode("admin", c.scheduler, c.transport)
        coord = coordinator_of(c, "gone")
        resp = raw_request(c, node, coord, gm.DeleteGroupsRequest("gone", node.next_corr()))
        assert resp.error is None, resp.message
        again = raw_request(c, node, coord, gm.OffsetFetchRequest("gone", node.next_corr(), partitions=((TOPIC, 0),)))
        assert again.offsets == ((TOPIC, 0, -1, -1, ""),)
        # the tombstones are in the log: the next coordinator does not resurrect the offset
        c.stop_broker(coord, clean=False)
        c.advance(5_000)
        coord2 = coordinator_of(c, "gone")
        resp2 = raw_request(c, node, coord2, gm.OffsetFetchRequest("gone", node.next_corr(), partitions=((TOPIC, 0),)))
        assert resp2.error is None and resp2.offsets == ((TOPIC, 0, -1, -1, ""),)
    finally:
        c.close()


def test_coordinator_crash_mid_run_keeps_members_and_delivers_everything(tmp_path):
    """The coordinator's broker dies while two members consume and commit: the new coordinator loads the
    group's metadata, so the members keep their generation (no rebalance), and nothing acked is missed."""
    c = Cluster(tmp_path, brokers=3, seed=0)
    try:
        c.create_topic(TOPIC, partitions=4, replication_factor=3, min_insync_replicas=2)
        producer = c.producer(acks="all")
        acked: Set[Tuple[int, int]] = set()
        pending: List[ClientFuture] = []
        delivered: Set[Tuple[int, int]] = set()
        members = [c.consumer("fo", [TOPIC], **GROUP_OPTS) for _ in range(2)]
        n = [0]

        def step(k: int) -> None:
            for _ in range(k):
                n[0] += 1
                pending.append(producer.send(TOPIC, b"%d" % n[0]))
                for m in members:
                    recs = m.poll(0.05)
                    delivered.update((r.partition, r.offset) for r in recs)
                    if recs:
                        try:
                            m.commit()
                        except PylogError:
                            pass
                harvest(pending, acked)
                check_ownership(members)

        step(30)
        generation = max(m.generation for m in members)
        coord = coordinator_of(c, "fo")
        c.stop_broker(coord, clean=False)
        step(60)
        assert coordinator_of(c, "fo") != coord
        assert max(m.generation for m in members) == generation  # membership survived the failover
        c.start_broker(coord)
        step(30)
        members.append(c.consumer("fo", [TOPIC], **GROUP_OPTS))
        step(60)
        wait_for_sends(pending, acked)
        drain(members, delivered, acked, commit=False)
        assert not acked - delivered
        owned = [set(m.assignment()) for m in members]
        assert set().union(*owned) == {(TOPIC, p) for p in range(4)} and sum(map(len, owned)) == 4
        assert max(m.generation for m in members) == generation + 1  # only the third member's join rebalanced
        c._check()
    finally:
        c.close()
