"""KIP-394 in the sans-I/O GroupCoordinator: JoinGroup v4+ hands a new dynamic member its id first
(MEMBER_ID_REQUIRED); the member joins with it; a pending id that never comes back expires."""
from __future__ import annotations

from pylog.errors import InconsistentGroupProtocolError, MemberIdRequiredError, UnknownMemberIdError
from pylog.replication import group_messages as gm
from pylog.replication.group_coordinator import COMPLETING_REBALANCE, EMPTY, STABLE

from coordinator_harness import GROUP, Harness


def _join(h: Harness, client: str, member: str = "", *, require: bool = True, instance=None) -> None:
    h.send(client, gm.JoinGroupRequest(GROUP, h.next(), member_id=member, session_timeout_ms=10_000,
                                       rebalance_timeout_ms=1_000, protocols=(("range", b"r"),), client_id=client,
                                       group_instance_id=instance, require_known_member_id=require))


def test_new_dynamic_member_gets_its_id_first_and_joins_with_it():
    h = Harness()
    _join(h, "a")
    (first,) = h.take("a")
    assert first.error is MemberIdRequiredError and first.member_id
    g = h.co.groups[GROUP]
    assert g.state == EMPTY and not g.members and list(g.pending_members) == [first.member_id]
    _join(h, "a", first.member_id)
    (resp,) = h.take("a")
    assert resp.error is None and resp.member_id == first.member_id == resp.leader and resp.generation_id == 1
    assert not g.pending_members and list(g.members) == [first.member_id] and g.state == COMPLETING_REBALANCE


def test_a_pending_member_does_not_hold_up_a_rebalance_and_expires_after_its_session_timeout():
    h = Harness()
    _join(h, "a")
    a = h.take("a")[0].member_id
    _join(h, "a", a)
    h.take("a")
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=a, assignments=((a, b"x"),)))
    assert h.take("a")[0].assignment == b"x" and h.co.groups[GROUP].state == STABLE
    _join(h, "b")  # b gets an id and never comes back: the group stays Stable, a keeps its generation
    b = h.take("b")[0].member_id
    h.send("a", gm.HeartbeatRequest(GROUP, h.next(), generation_id=1, member_id=a))
    assert h.take("a")[0].error is None and h.co.groups[GROUP].state == STABLE
    h.tick(5_000)
    h.send("a", gm.HeartbeatRequest(GROUP, h.next(), generation_id=1, member_id=a))
    h.take("a")
    h.tick(5_001)
    assert b not in h.co.groups[GROUP].pending_members
    _join(h, "b", b)  # too late: the id expired
    assert h.take("b")[0].error is UnknownMemberIdError


def test_a_pending_member_may_leave_and_static_or_in_process_members_skip_the_round_trip():
    h = Harness()
    _join(h, "a")
    a = h.take("a")[0].member_id
    h.send("a", gm.LeaveGroupRequest(GROUP, h.next(), member_id=a))
    assert h.take("a")[0].error is None and not h.co.groups[GROUP].pending_members
    _join(h, "s", instance="static-1")  # KIP-345 members are identified by their instance id
    (rs,) = h.take("s")
    assert rs.error is None and rs.generation_id == 1
    _join(h, "c", require=False)  # the in-process consumer (and JoinGroup v0-v3) joins at once
    h.tick(1_000)
    assert h.take("c")[-1].error is None


def test_sync_names_the_protocol_and_a_mismatch_is_inconsistent():
    h = Harness()
    _join(h, "a", require=False)
    a = h.take("a")[0].member_id
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=a, assignments=((a, b"x"),),
                                    protocol_type="consumer", protocol_name="roundrobin"))
    (bad,) = h.take("a")
    assert bad.error is InconsistentGroupProtocolError and "roundrobin" in bad.message
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=a, assignments=((a, b"x"),),
                                    protocol_type="consumer", protocol_name="range"))
    (ok,) = h.take("a")
    assert ok.error is None and (ok.assignment, ok.protocol_type, ok.protocol_name) == (b"x", "consumer", "range")
