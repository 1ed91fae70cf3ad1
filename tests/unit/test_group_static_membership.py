"""Static membership (KIP-345) in the sans-I/O GroupCoordinator, driven by hand.

Kafka's rules (GroupCoordinator ``updateStaticMemberAndRebalance``, ``validateCurrentMember``,
``onCompleteJoin``; GroupMetadata ``replaceStaticMember``): a static member rejoining with an unknown
member id replaces its old member id; in Stable with an unchanged protocol there is no rebalance, the
new id is persisted and the member is answered with the old leader id; the old id is fenced.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from pylog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    NotCoordinatorError,
    NotLeaderError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_coordinator import COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE

from coordinator_harness import GROUP, Harness

RANGE = (("range", b"r"),)


def join(h: Harness, client: str, instance: Optional[str], member: str = "", protocols=RANGE,
         rebalance_ms: int = 1_000) -> None:
    h.send(client, gm.JoinGroupRequest(GROUP, h.next(), member_id=member, session_timeout_ms=10_000,
                                       rebalance_timeout_ms=rebalance_ms, protocols=protocols, client_id=client,
                                       group_instance_id=instance))


def stable_group(h: Harness, instances: Dict[str, Optional[str]]) -> Dict[str, str]:
    """Clients join (static when an instance id is given), the leader assigns partition i to client i;
    returns client -> member id."""
    ids: Dict[str, str] = {}
    last: Dict[str, gm.JoinGroupResponse] = {}
    for client, instance in instances.items():
        join(h, client, instance)  # a newcomer: the members so far rejoin
        for prev in ids:
            join(h, prev, instances[prev], member=ids[prev])
        for c in list(ids) + [client]:
            last[c] = h.take(c)[-1]
            assert last[c].error is None, last[c]
        ids[client] = last[client].member_id
    leader = last[client].leader
    assert len({r.generation_id for r in last.values()}) == 1
    generation = h.co.groups[GROUP].generation
    plan = tuple((ids[c], ot.encode_assignment([("t", i)])) for i, c in enumerate(instances))
    for client in instances:
        mine = plan if ids[client] == leader else ()
        h.send(client, gm.SyncGroupRequest(GROUP, h.next(), generation_id=generation, member_id=ids[client],
                                           assignments=mine, group_instance_id=instances[client]))
    for i, client in enumerate(instances):
        (sync,) = h.take(client)
        assert sync.error is None and ot.decode_assignment(sync.assignment) == [("t", i)]
    assert h.co.groups[GROUP].state == STABLE
    return ids


def last_group_record(h: Harness) -> ot.GroupMetadataValue:
    values = [v for k, v in h.log if isinstance(ot.decode_key(k), ot.GroupMetadataKey)]
    return ot.decode_group_metadata_value(values[-1])


def heartbeat(h: Harness, client: str, member: str, instance: Optional[str], generation: int):
    h.send(client, gm.HeartbeatRequest(GROUP, h.next(), generation_id=generation, member_id=member,
                                       group_instance_id=instance))
    return h.take(client)[-1]


def test_static_rejoin_in_stable_replaces_the_member_without_a_rebalance():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": "i-b"})
    g = h.co.groups[GROUP]
    generation, rebalances, leader = g.generation, h.co.rebalances, g.leader
    join(h, "b2", "i-b")  # b restarted: a new process, no member id
    (resp,) = h.take("b2")
    new = resp.member_id
    assert resp.error is None and resp.generation_id == generation and resp.protocol_name == "range"
    assert new != ids["b"] and new.startswith("i-b-")
    assert resp.leader == leader == ids["a"] and resp.members == ()
    assert h.co.rebalances == rebalances and g.state == STABLE and g.generation == generation
    assert list(g.members) == [ids["a"], new] and g.static_members == {"i-a": ids["a"], "i-b": new}
    # the new member id is in __consumer_offsets, with its instance id (GroupMetadataValue v3)
    rec = last_group_record(h)
    assert [(m.member_id, m.group_instance_id) for m in rec.members] == [(ids["a"], "i-a"), (new, "i-b")]
    assert rec.generation == generation and ot.decode_assignment(rec.members[1].assignment) == [("t", 1)]
    # it syncs and gets the old member's assignment
    h.send("b2", gm.SyncGroupRequest(GROUP, h.next(), generation_id=generation, member_id=new,
                                     group_instance_id="i-b"))
    (sync,) = h.take("b2")
    assert sync.error is None and ot.decode_assignment(sync.assignment) == [("t", 1)]
    assert heartbeat(h, "b2", new, "i-b", generation).error is None
    assert heartbeat(h, "a", ids["a"], "i-a", generation).error is None  # the leader noticed nothing


def test_old_member_id_is_fenced_on_every_request():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": "i-b"})
    generation = h.co.groups[GROUP].generation
    join(h, "b2", "i-b")
    new = h.take("b2")[0].member_id
    old = ids["b"]
    for req in (gm.HeartbeatRequest(GROUP, h.next(), generation_id=generation, member_id=old, group_instance_id="i-b"),
                gm.SyncGroupRequest(GROUP, h.next(), generation_id=generation, member_id=old, group_instance_id="i-b"),
                gm.OffsetCommitRequest(GROUP, h.next(), generation_id=generation, member_id=old,
                                       offsets=(("t", 1, 5, -1, ""),), group_instance_id="i-b"),
                gm.JoinGroupRequest(GROUP, h.next(), member_id=old, protocols=RANGE, group_instance_id="i-b"),
                gm.LeaveGroupRequest(GROUP, h.next(), member_id=old, group_instance_id="i-b")):
        h.send("b", req)
        (resp,) = h.take("b")
        assert resp.error is FencedInstanceIdError, (type(req).__name__, resp)
        assert GROUP in resp.message and old in resp.message and "i-b" in resp.message and new in resp.message
    g = h.co.groups[GROUP]
    assert ("t", 1) not in g.offsets and new in g.members and g.generation == generation and g.state == STABLE
    # an instance id nobody holds: unknown member
    h.send("x", gm.HeartbeatRequest(GROUP, h.next(), generation_id=generation, member_id=new, group_instance_id="i-z"))
    (resp,) = h.take("x")
    assert resp.error is UnknownMemberIdError and "i-z" in resp.message


def test_replacing_the_leader_moves_leadership_but_answers_with_the_old_leader_id():
    """Kafka (JoinGroup < v9): the new member must not run the assignor of a Stable group, so its answer
    names the old leader id; the coordinator's leader is the new member id."""
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": "i-b"})
    generation = h.co.groups[GROUP].generation
    join(h, "a2", "i-a")
    (resp,) = h.take("a2")
    assert resp.error is None and resp.leader == ids["a"] != resp.member_id and resp.members == ()
    g = h.co.groups[GROUP]
    assert g.leader == resp.member_id and g.generation == generation and g.state == STABLE
    assert last_group_record(h).leader == resp.member_id
    # a later rebalance is led by the new member id, which then gets every subscription
    join(h, "c", None)
    join(h, "a2", "i-a", member=resp.member_id)
    join(h, "b", "i-b", member=ids["b"])
    ra = h.take("a2")[-1]
    assert ra.generation_id == generation + 1 and ra.leader == resp.member_id and len(ra.members) == 3


def test_a_static_rejoin_that_changes_the_selected_protocol_rebalances():
    h = Harness()
    both = (("range", b"r"), ("roundrobin", b"o"))
    join(h, "a", "i-a", protocols=both)
    a = h.take("a")[0].member_id
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=a, assignments=((a, b""),)))
    assert h.take("a")[0].error is None
    join(h, "b", "i-b", protocols=both)
    join(h, "a", "i-a", member=a, protocols=both)
    b = h.take("b")[-1].member_id
    h.take("a")
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=2, member_id=a, assignments=()))
    h.send("b", gm.SyncGroupRequest(GROUP, h.next(), generation_id=2, member_id=b))
    g = h.co.groups[GROUP]
    assert g.state == STABLE and g.protocol == "range"
    h.take("a"), h.take("b")
    join(h, "b2", "i-b", protocols=(("roundrobin", b"o2"),))  # the vote would now pick roundrobin
    assert h.take("b2") == [] and g.state == PREPARING_REBALANCE
    assert heartbeat(h, "a", a, "i-a", 2).error is RebalanceInProgressError
    join(h, "a", "i-a", member=a, protocols=both)
    ra, rb = h.take("a")[-1], h.take("b2")[-1]
    assert ra.generation_id == rb.generation_id == 3 and ra.protocol_name == "roundrobin"
    assert b not in g.members and rb.member_id in g.members


def test_static_rejoin_while_completing_rebalance_fences_the_old_sync_and_rebalances():
    h = Harness()
    join(h, "a", "i-a")
    a = h.take("a")[-1].member_id
    join(h, "b", "i-b")
    join(h, "a", "i-a", member=a)
    ra, rb = h.take("a")[-1], h.take("b")[-1]
    g = h.co.groups[GROUP]
    assert g.state == COMPLETING_REBALANCE
    h.send("b", gm.SyncGroupRequest(GROUP, h.next(), generation_id=rb.generation_id, member_id=rb.member_id,
                                    group_instance_id="i-b"))
    assert h.take("b") == []  # waits for the leader's assignment
    join(h, "b2", "i-b")
    (fenced,) = h.take("b")
    assert fenced.error is FencedInstanceIdError and rb.member_id in fenced.message
    assert g.state == PREPARING_REBALANCE
    join(h, "a", "i-a", member=ra.member_id)
    a2, b2 = h.take("a")[-1], h.take("b2")[-1]
    assert a2.generation_id == b2.generation_id == rb.generation_id + 1
    assert sorted(m for m, _ in a2.members) == sorted([ra.member_id, b2.member_id])


def test_a_failed_write_undoes_the_replacement():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": "i-b"})
    g = h.co.groups[GROUP]
    generation = g.generation
    h.hold = True
    join(h, "b2", "i-b")
    assert h.take("b2") == []  # answered once the new member id is stored
    h.release(NotLeaderError)
    (resp,) = h.take("b2")
    assert resp.error in (NotCoordinatorError, CoordinatorNotAvailableError) and resp.member_id == ""
    assert list(g.members) == [ids["a"], ids["b"]] and g.static_members == {"i-a": ids["a"], "i-b": ids["b"]}
    assert g.members[ids["b"]].client_id == "b" and g.state == STABLE and g.generation == generation
    assert heartbeat(h, "b", ids["b"], "i-b", generation).error is None  # the old member carries on


def test_a_rebalance_started_during_the_write_answers_the_replacement():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": "i-b"})
    generation = h.co.groups[GROUP].generation
    h.hold = True
    join(h, "b2", "i-b")
    h.hold = False
    join(h, "c", None)  # a new member: the group rebalances while the write is in flight
    join(h, "a", "i-a", member=ids["a"])
    rb2 = h.take("b2")
    assert len(rb2) == 1 and rb2[0].generation_id == generation + 1  # answered by the rebalance
    h.release()  # the write's acknowledgement comes after: no second answer
    assert h.take("b2") == []
    assert h.co.groups[GROUP].static_members["i-b"] == rb2[0].member_id


def test_failover_keeps_the_instance_ids_and_a_restart_after_it_needs_no_rebalance():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": None})
    g = h.reload().groups[GROUP]
    assert g.static_members == {"i-a": ids["a"]}
    assert g.members[ids["a"]].group_instance_id == "i-a" and g.members[ids["b"]].group_instance_id is None
    generation, rebalances = g.generation, h.co.rebalances
    join(h, "a2", "i-a")
    (resp,) = h.take("a2")
    assert resp.error is None and resp.generation_id == generation and h.co.rebalances == rebalances
    assert g.static_members == {"i-a": resp.member_id}
    h.send("a2", gm.SyncGroupRequest(GROUP, h.next(), generation_id=generation, member_id=resp.member_id,
                                     group_instance_id="i-a"))
    assert ot.decode_assignment(h.take("a2")[0].assignment) == [("t", 0)]


def test_static_member_missing_a_rebalance_stays_until_its_session_expires():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": "i-b", "c": None})
    generation = h.co.groups[GROUP].generation
    join(h, "d", None)  # a newcomer: everyone must rejoin; only a does
    join(h, "a", "i-a", member=ids["a"])
    h.tick(1_001)  # past the rebalance timeout
    g = h.co.groups[GROUP]
    ra, rd = h.take("a")[-1], h.take("d")[-1]
    assert ra.generation_id == rd.generation_id == generation + 1
    # the dynamic member that did not rejoin is gone; the static one stays, and the leader assigns to it
    assert ids["c"] not in g.members and ids["b"] in g.members
    assert {m for m, _ in ra.members} == {ids["a"], ids["b"], rd.member_id}
    assert h.take("b") == []  # (it sent no JoinGroup: nothing to answer)
    # b comes back in time with its member id: the stale generation tells it to rejoin; it does
    assert heartbeat(h, "b", ids["b"], "i-b", generation).error is not None
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=generation + 1, member_id=ids["a"],
                                    assignments=tuple((m, b"") for m, _ in ra.members), group_instance_id="i-a"))
    h.send("d", gm.SyncGroupRequest(GROUP, h.next(), generation_id=generation + 1, member_id=rd.member_id))
    assert g.state == STABLE
    # ... or it does not: its session timeout (renewed when the join completed) removes it
    for _ in range(10):
        h.tick(1_000)
        heartbeat(h, "a", ids["a"], "i-a", g.generation)
        heartbeat(h, "d", rd.member_id, None, g.generation)
    assert ids["b"] not in g.members and "i-b" not in g.static_members and g.state == PREPARING_REBALANCE


def test_only_absent_static_members_postpone_the_join_until_their_sessions_expire():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": "i-b"})
    generation = h.co.groups[GROUP].generation
    h.send("a", gm.LeaveGroupRequest(GROUP, h.next(), member_id="", group_instance_id="i-x"))
    assert h.take("a")[0].error is UnknownMemberIdError
    # b is removed by the admin (by instance id): a rebalance that a never joins
    h.send("admin", gm.LeaveGroupRequest(GROUP, h.next(), member_id="", group_instance_id="i-b"))
    assert h.take("admin")[0].error is None
    g = h.co.groups[GROUP]
    assert list(g.members) == [ids["a"]] and g.static_members == {"i-a": ids["a"]}
    assert g.state == PREPARING_REBALANCE
    h.tick(1_001)  # the rebalance timeout: nobody rejoined, the static member keeps the group waiting
    assert g.state == PREPARING_REBALANCE and g.generation == generation and ids["a"] in g.members
    h.tick(10_000)  # a's session expires: the group is empty
    assert not g.members and g.state == "Empty" and g.generation == generation + 1


def test_describe_shows_the_instance_ids():
    h = Harness()
    ids = stable_group(h, {"a": "i-a", "b": None})
    h.send("x", gm.DescribeGroupsRequest(GROUP, h.next()))
    (d,) = h.take("x")
    rows: List[Tuple] = list(d.members)
    assert [(r[0], r[4]) for r in rows] == [(ids["a"], "i-a"), (ids["b"], None)]
