"""The sans-I/O GroupCoordinator driven by hand: protocol choice, rebalance timeout, load from records."""
from __future__ import annotations

from pylog.errors import InconsistentGroupProtocolError, RebalanceInProgressError, UnknownMemberIdError
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_coordinator import COMPLETING_REBALANCE, EMPTY, STABLE, GroupCoordinator

from coordinator_harness import GROUP, Harness


def test_first_member_joins_syncs_and_commits_then_a_reload_restores_everything():
    h = Harness()
    h.join("a")
    (resp,) = h.take("a")
    assert resp.error is None and resp.generation_id == 1 and resp.leader == resp.member_id
    assert resp.members == ((resp.member_id, b"r"),) and resp.protocol_name == "range"
    me = resp.member_id
    assert h.co.groups[GROUP].state == COMPLETING_REBALANCE
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=me,
                                    assignments=((me, ot.encode_assignment([("t", 0)])),)))
    (sync,) = h.take("a")
    assert ot.decode_assignment(sync.assignment) == [("t", 0)] and h.co.groups[GROUP].state == STABLE
    h.send("a", gm.OffsetCommitRequest(GROUP, h.next(), generation_id=1, member_id=me, offsets=(("t", 0, 9, 2, "m"),)))
    assert h.take("a")[0].error is None
    # the log holds the group's metadata and the offset, in Kafka's layout
    keys = [ot.decode_key(k) for k, _ in h.log]
    assert ot.GroupMetadataKey(GROUP) in keys and ot.OffsetCommitKey(GROUP, "t", 0) in keys
    fresh = GroupCoordinator(1)
    fresh.num_partitions = 1
    fresh.load(0, 1, h.log, 50)
    g = fresh.groups[GROUP]
    assert g.state == STABLE and g.generation == 1 and list(g.members) == [me]
    assert g.offsets[("t", 0)].offset == 9 and g.offsets[("t", 0)].leader_epoch == 2
    assert ot.decode_assignment(g.members[me].assignment) == [("t", 0)]


def test_protocol_vote_and_inconsistent_protocols():
    h = Harness()
    h.join("a", protocols=(("roundrobin", b"1"), ("range", b"2")))
    a = h.take("a")[0].member_id
    h.join("b", protocols=(("range", b"3"),))
    h.join("a", member=a, protocols=(("roundrobin", b"1"), ("range", b"2")))
    ra, rb = h.take("a")[-1], h.take("b")[-1]
    assert ra.generation_id == rb.generation_id == 2
    assert ra.protocol_name == rb.protocol_name == "range"  # the only one both support
    assert dict(ra.members)[rb.member_id] == b"3" and dict(ra.members)[a] == b"2"
    h.join("c", protocols=(("sticky", b""),))
    (rc,) = h.take("c")
    assert rc.error is InconsistentGroupProtocolError


def test_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout():
    h = Harness()
    h.join("a", rebalance_ms=2_000)
    a = h.take("a")[0].member_id
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=a, assignments=((a, b""),)))
    h.take("a")
    h.join("b", rebalance_ms=2_000)
    h.send("a", gm.HeartbeatRequest(GROUP, h.next(), generation_id=1, member_id=a))
    assert h.take("a")[0].error is RebalanceInProgressError  # a is told to rejoin ... and never does
    h.tick(1_000)
    assert h.take("b") == []  # still waiting for a
    h.tick(1_500)
    (rb,) = h.take("b")
    assert rb.error is None and rb.generation_id == 2 and [m for m, _ in rb.members] == [rb.member_id]
    h.send("a", gm.HeartbeatRequest(GROUP, h.next(), generation_id=1, member_id=a))
    assert h.take("a")[0].error is UnknownMemberIdError


def test_last_member_leaving_empties_the_group_and_standalone_commits_are_allowed_again():
    h = Harness()
    h.join("a")
    a = h.take("a")[0].member_id
    h.send("x", gm.OffsetCommitRequest(GROUP, h.next(), offsets=(("t", 0, 1, -1, ""),)))
    assert h.take("x")[0].error is UnknownMemberIdError  # the group has a member
    h.send("a", gm.LeaveGroupRequest(GROUP, h.next(), member_id=a))
    assert h.take("a")[-1].error is None
    assert h.co.groups[GROUP].state == EMPTY and h.co.groups[GROUP].generation == 2
    h.send("x", gm.OffsetCommitRequest(GROUP, h.next(), offsets=(("t", 0, 1, -1, ""),)))
    assert h.take("x")[0].error is None
    h.send("x", gm.OffsetFetchRequest(GROUP, h.next()))
    assert h.take("x")[0].offsets == (("t", 0, 1, -1, ""),)


def test_a_group_tombstone_on_reload_removes_the_metadata_not_untombstoned_offsets():
    """Kafka's loader: a group tombstone drops the group's metadata; each offset goes only with its own tombstone."""
    meta = ot.encode_group_metadata_value(ot.GroupMetadataValue(
        protocol_type="consumer", generation=3, protocol="range", leader=None, current_state_timestamp=-1,
        members=()))
    log = [
        (ot.encode_group_metadata_key("kept"), meta),
        (ot.encode_offset_commit_key("kept", "t", 0), ot.encode_offset_commit_value(ot.OffsetCommitValue(5))),
        (ot.encode_offset_commit_key("kept", "t", 1), ot.encode_offset_commit_value(ot.OffsetCommitValue(6))),
        (ot.encode_offset_commit_key("kept", "t", 1), None),  # this offset's own tombstone
        (ot.encode_group_metadata_key("kept"), None),
        (ot.encode_group_metadata_key("gone"), meta),
        (ot.encode_offset_commit_key("gone", "t", 0), ot.encode_offset_commit_value(ot.OffsetCommitValue(7))),
        (ot.encode_offset_commit_key("gone", "t", 0), None),
        (ot.encode_group_metadata_key("gone"), None),
    ]
    co = GroupCoordinator(1)
    co.num_partitions = 1
    co.load(0, 1, log, 50)
    assert set(co.groups) == {"kept"}
    g = co.groups["kept"]
    assert g.state == EMPTY and g.generation == 0 and {tp: v.offset for tp, v in g.offsets.items()} == {("t", 0): 5}
