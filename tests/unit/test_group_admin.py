"""The consumer-group admin API (Cluster.list_groups / describe_group / list_group_offsets / delete_group /
delete_group_offsets / alter_group_offsets): on simulated clusters, through coordinator failover, from a
second process over the shared queue's socket, and the coordinator's handlers driven by hand."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import pylog.cluster
from pylog.client.admin import GroupListing
from pylog.cluster import Cluster
from pylog.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InvalidGroupIdError,
    InvalidOffsetError,
    NonEmptyGroupError,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_coordinator import EMPTY, STABLE
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

from coordinator_harness import GROUP, Harness


TOPIC = "events"
OPTS = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, rebalance_timeout_ms=4_000,
            enable_auto_commit=False, fetch_max_wait_ms=100)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def coordinator_of(c: Cluster, group: str) -> int:
    return c.leader_of(OFFSETS_TOPIC, partition_for_group(group, c.store.topics[OFFSETS_TOPIC].partitions))


def consume_all(consumer, n: int) -> list:
    got: list = []
    for _ in range(200):
        got += consumer.poll(0.2)
        if len(got) >= n:
            break
    assert len(got) == n
    return got


def fill(c: Cluster, topic: str, partitions: int, per_partition: int) -> None:
    p = c.producer(acks="all")
    for i in range(partitions * per_partition):
        p.send(topic, b"%d" % i, partition=i % partitions).result()


def offsets(c: Cluster, group: str) -> dict:
    return {tp: v.offset for tp, v in c.list_group_offsets(group).items()}


def test_lifecycle_of_a_consumer_group(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=3)
    try:
        assert c.list_groups() == []  # no __consumer_offsets yet
        with pytest.raises(GroupIdNotFoundError, match="'billing'"):
            c.describe_group("billing")
        assert c.list_group_offsets("billing") == {}
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        c.create_topic("other", partitions=1, replication_factor=3)
        fill(c, TOPIC, 2, 5)
        a = c.consumer("billing", [TOPIC], client_id="worker-a", **OPTS)
        b = c.consumer("billing", [TOPIC], client_id="worker-b", **OPTS)
        for _ in range(100):
            a.poll(0.1)
            b.poll(0.1)
            if a.assignment() and b.assignment() and a.generation == b.generation:
                break
        a.commit({(TOPIC, 0): 4})
        b.commit({(TOPIC, 1): 2})

        assert c.list_groups() == [GroupListing("billing", STABLE, "consumer")]
        d = c.describe_group("billing")
        assert (d.group_id, d.state, d.protocol_type, d.protocol, d.generation) == ("billing", STABLE, "consumer",
                                                                                    "range", a.generation)
        by_client = {m.client_id: m for m in d.members}
        assert set(by_client) == {"worker-a", "worker-b"}
        assert sorted(by_client["worker-a"].assignment) == sorted(a.assignment())
        assert sorted(by_client["worker-b"].assignment) == sorted(b.assignment())
        assert {m.member_id for m in d.members} == {a.member_id, b.member_id} and d.leader in {a.member_id, b.member_id}
        assert offsets(c, "billing") == {(TOPIC, 0): 4, (TOPIC, 1): 2}

        # a group with members: no delete, no alter, no OffsetDelete of a subscribed topic
        with pytest.raises(NonEmptyGroupError, match="'billing'"):
            c.delete_group("billing")
        with pytest.raises(NonEmptyGroupError, match="'billing'"):
            c.alter_group_offsets("billing", {(TOPIC, 0): 0})
        with pytest.raises(GroupSubscribedToTopicError, match=f"'{TOPIC}'"):
            c.delete_group_offsets("billing", [(TOPIC, 0)])
        assert offsets(c, "billing") == {(TOPIC, 0): 4, (TOPIC, 1): 2}
        # ... but an offset of a topic nobody subscribes to may go
        a.commit({("other", 0): 1})
        assert offsets(c, "billing")[("other", 0)] == 1
        c.delete_group_offsets("billing", [("other", 0)])
        assert ("other", 0) not in offsets(c, "billing")

        a.close()
        b.close()
        d = c.describe_group("billing")
        assert d.state == EMPTY and d.members == () and d.leader == ""
        assert c.list_groups() == [GroupListing("billing", EMPTY, "consumer")]
        c.alter_group_offsets("billing", {(TOPIC, 0): 1, (TOPIC, 1): 0})
        assert offsets(c, "billing") == {(TOPIC, 0): 1, (TOPIC, 1): 0}
        c.delete_group_offsets("billing", [(TOPIC, 1)])
        assert offsets(c, "billing") == {(TOPIC, 0): 1}
        # a new member starts from the altered offset
        again = c.consumer("billing", [TOPIC], **OPTS)
        got = consume_all(again, 4 + 5)
        assert sorted((r.partition, r.offset) for r in got) == [(0, o) for o in range(1, 5)] + [(1, o) for o in range(5)]
        again.close()

        c.delete_group("billing")
        assert c.list_groups() == []
        assert c.list_group_offsets("billing") == {}
        with pytest.raises(GroupIdNotFoundError, match="'billing'"):
            c.describe_group("billing")
        with pytest.raises(GroupIdNotFoundError, match="'billing'"):
            c.delete_group("billing")
        c._check()
    finally:
        c.close()


def test_deletions_survive_a_coordinator_failover(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=8)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        c.alter_group_offsets("gone", {(TOPIC, 0): 3, (TOPIC, 1): 4})
        c.alter_group_offsets("trimmed", {(TOPIC, 0): 5, (TOPIC, 1): 6})
        assert [g.group_id for g in c.list_groups()] == ["gone", "trimmed"]
        assert all(g.state == EMPTY and g.protocol_type == "" for g in c.list_groups())
        c.delete_group("gone")
        c.delete_group_offsets("trimmed", [(TOPIC, 0)])
        for group in ("gone", "trimmed"):
            old = coordinator_of(c, group)
            c.stop_broker(old, clean=False)
            c.advance(5_000)
            assert coordinator_of(c, group) != old
            c.start_broker(old)
            c.advance(2_000)
        assert [g.group_id for g in c.list_groups()] == ["trimmed"]
        assert c.list_group_offsets("gone") == {}
        assert offsets(c, "trimmed") == {(TOPIC, 1): 6}
        c._check()
    finally:
        c.close()


def test_list_groups_covers_every_coordinator_and_survives_a_broker_crash(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=21)
    try:
        c.create_topic(TOPIC, partitions=1, replication_factor=3)
        names = [f"g{i}" for i in range(12)]
        for i, g in enumerate(names):
            c.alter_group_offsets(g, {(TOPIC, 0): i})
        coordinators = {coordinator_of(c, g) for g in names}
        assert len(coordinators) > 1  # the groups really are spread over brokers
        assert [g.group_id for g in c.list_groups()] == sorted(names)
        victim = sorted(coordinators)[0]
        c.stop_broker(victim, clean=False)
        assert [g.group_id for g in c.list_groups()] == sorted(names)  # waits for the new leaders
        assert {g: offsets(c, g) for g in names} == {g: {(TOPIC, 0): i} for i, g in enumerate(names)}
    finally:
        c.close()


def test_bad_group_ids_are_refused(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=1)
    try:
        for bad in ("", None, 3):
            with pytest.raises(InvalidGroupIdError):
                c.describe_group(bad)  # type: ignore[arg-type]
        c.create_topic(TOPIC)
        with pytest.raises(InvalidOffsetError, match=f"{TOPIC}-0"):
            c.alter_group_offsets("g", {(TOPIC, 0): -1})
    finally:
        c.close()


# ------------------------------------------------------- the coordinator by hand
def _stable_member(h: Harness, topics=("t",), assignment=(("t", 0),)) -> str:
    sub = ot.encode_subscription(list(topics))
    h.join("a", protocols=(("range", sub),))
    (resp,) = h.take("a")
    me = resp.member_id
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=resp.generation_id, member_id=me,
                                    assignments=((me, ot.encode_assignment(list(assignment))),)))
    assert h.take("a")[0].error is None
    return me


def test_coordinator_offset_delete_refuses_subscribed_topics_and_tombstones_the_rest():
    h = Harness()
    me = _stable_member(h)
    h.send("a", gm.OffsetCommitRequest(GROUP, h.next(), generation_id=1, member_id=me,
                                       offsets=(("t", 0, 5, -1, ""), ("u", 0, 6, -1, ""))))
    assert h.take("a")[0].error is None
    h.send("x", gm.OffsetDeleteRequest(GROUP, h.next(), partitions=(("t", 0), ("u", 0), ("u", 1))))
    (resp,) = h.take("x")
    assert resp.error is None
    errors = {(t, p): e for t, p, e, _ in resp.partition_errors}
    assert errors == {("t", 0): GroupSubscribedToTopicError, ("u", 0): None, ("u", 1): None}
    assert set(h.co.groups[GROUP].offsets) == {("t", 0)}
    assert (ot.encode_offset_commit_key(GROUP, "u", 0), None) in h.log
    assert (ot.encode_offset_commit_key(GROUP, "t", 0), None) not in h.log
    # unknown group / not the coordinator
    h.send("x", gm.OffsetDeleteRequest("nope", h.next(), partitions=(("t", 0),)))
    assert h.take("x")[0].error is GroupIdNotFoundError


def test_coordinator_describe_hides_assignments_while_rebalancing_and_lists_loaded_groups_only():
    h = Harness()
    me = _stable_member(h)
    h.send("x", gm.DescribeGroupsRequest(GROUP, h.next()))
    (d,) = h.take("x")
    assert d.state == STABLE and ot.decode_assignment(d.members[0][3]) == [("t", 0)] and d.leader == me
    h.join("b", protocols=(("range", ot.encode_subscription(["t"])),))  # a second member: rebalance
    h.send("x", gm.DescribeGroupsRequest(GROUP, h.next()))
    (d,) = h.take("x")
    assert d.state not in (STABLE, EMPTY) and all(m[3] == b"" for m in d.members)
    h.send("x", gm.ListGroupsRequest(h.next()))
    (lst,) = h.take("x")
    assert lst.groups == ((GROUP, "consumer", h.co.groups[GROUP].state),) and lst.partitions == (0,)
    h.deliver(h.co.unload(0))
    h.send("x", gm.ListGroupsRequest(h.next()))
    (lst,) = h.take("x")
    assert lst.groups == () and lst.partitions == ()


# ------------------------------------------------------------ a second process
CLIENT = textwrap.dedent(
    """
    import json, sys
    import pylog
    q = pylog.open(sys.argv[1])
    out = {"role": q.role, "groups": [list(g) for g in q.list_groups()]}
    d = q.describe_group("billing")
    out["describe"] = [d.state, [[m.client_id, [list(tp) for tp in m.assignment]] for m in d.members]]
    out["offsets"] = sorted([t, p, v.offset] for (t, p), v in q.list_group_offsets("billing").items())
    q.alter_group_offsets("set-by-client", {("jobs", 0): 2})
    try:
        q.delete_group("billing")
    except Exception as exc:
        out["delete"] = type(exc).__name__
    print(json.dumps(out))
    q.close()
    """
)


def test_a_client_process_of_the_shared_queue_uses_the_admin_api(tmp_path):
    q = pylog.open(str(tmp_path))
    try:
        assert q.role == "owner"
        q.create_topic("jobs")
        p = q.producer()
        for i in range(3):
            p.send("jobs", b"%d" % i).result(30)
        c = q.consumer("billing", ["jobs"], client_id="biller", enable_auto_commit=False)
        got = []
        while len(got) < 3:
            got += c.poll(1.0)
        c.commit()
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        res = subprocess.run([sys.executable, "-c", CLIENT, str(tmp_path)], capture_output=True, text=True,
                             timeout=120, env=env, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["role"] == "client"
        assert out["groups"] == [["billing", STABLE, "consumer"]]
        assert out["describe"] == [STABLE, [["biller", [["jobs", 0]]]]]
        assert out["offsets"] == [["jobs", 0, 3]]
        assert out["delete"] == "NonEmptyGroupError"
        assert {tp: v.offset for tp, v in q.list_group_offsets("set-by-client").items()} == {("jobs", 0): 2}
        c.close()
    finally:
        q.close()
