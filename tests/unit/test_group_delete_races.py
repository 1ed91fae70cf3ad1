"""DeleteGroups and OffsetDelete racing OffsetCommits whose appends are still in flight (the coordinator
driven by hand): what the coordinator answers and keeps in memory must be what a coordinator that loads
the log after a failover finds, also once compaction has dropped the tombstones (Kafka's cleaner does
after ``delete_retention_ms``)."""
from __future__ import annotations

from typing import Dict, Tuple

from pylog.errors import CoordinatorNotAvailableError, GroupIdNotFoundError, NotEnoughReplicasError
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_coordinator import DEAD, EMPTY, GroupCoordinator

from coordinator_harness import GROUP, Harness


def commit(h: Harness, client: str, offsets: Dict[Tuple[str, int], int]) -> None:
    """A standalone (generation -1) commit, as ``assign()`` consumers and ``alter_group_offsets`` send."""
    h.send(client, gm.OffsetCommitRequest(GROUP, h.next(), generation_id=-1, member_id="",
                                          offsets=tuple((t, p, o, -1, "") for (t, p), o in offsets.items())))


def offsets_of(co: GroupCoordinator) -> Dict[Tuple[str, int], int]:
    g = co.groups.get(GROUP)
    return {} if g is None else {tp: v.offset for tp, v in g.offsets.items()}


def after_failover(h: Harness, compacted: bool) -> Dict[Tuple[str, int], int]:
    """The group's offsets as a coordinator loading the log now sees them (None: no group at all)."""
    saved = h.co
    try:
        co = h.reload(compacted=compacted)
        return offsets_of(co) if GROUP in co.groups else None  # type: ignore[return-value]
    finally:
        h.co = saved


def test_delete_groups_tombstones_a_commit_still_in_flight():
    h = Harness()
    commit(h, "c", {("t", 0): 5})
    assert h.take("c")[0].error is None
    h.hold = True
    commit(h, "c", {("t", 1): 7})  # written to the log, not acknowledged yet
    h.send("admin", gm.DeleteGroupsRequest(GROUP, h.next()))
    h.release()
    assert h.take("c")[0].error is None  # the commit happened before the delete...
    assert h.take("admin")[0].error is None
    assert GROUP not in h.co.groups  # ...which removed it with the rest
    assert after_failover(h, compacted=False) is None
    # once the cleaner has dropped the tombstones, nothing of the group may come back either
    assert after_failover(h, compacted=True) is None
    assert (ot.encode_offset_commit_key(GROUP, "t", 1), None) in h.log


def test_a_commit_while_delete_groups_is_being_written_is_refused_retriably_and_lands_after_it():
    h = Harness()
    commit(h, "c", {("t", 0): 5})
    assert h.take("c")[0].error is None
    h.hold = True
    h.send("admin", gm.DeleteGroupsRequest(GROUP, h.next()))
    commit(h, "c", {("t", 0): 9})
    (resp,) = h.take("c")
    assert resp.error is CoordinatorNotAvailableError and resp.error.retriable and repr(GROUP) in resp.message
    assert h.co.groups[GROUP].state == DEAD
    # a second DeleteGroups (e.g. the admin's retry), an OffsetDelete and a JoinGroup wait as well
    h.send("admin2", gm.DeleteGroupsRequest(GROUP, h.next()))
    h.send("admin2", gm.OffsetDeleteRequest(GROUP, h.next(), partitions=(("t", 0),)))
    h.join("j")
    assert [r.error for r in h.take("admin2") + h.take("j")] == [CoordinatorNotAvailableError] * 3
    h.send("l", gm.ListGroupsRequest(h.next()))
    assert h.take("l")[0].groups == ()
    h.release()
    assert h.take("admin")[0].error is None
    assert GROUP not in h.co.groups
    assert after_failover(h, compacted=False) is None and after_failover(h, compacted=True) is None
    # the retried commit lands after the tombstones: a new group with just that offset, in memory and log
    commit(h, "c", {("t", 0): 9})
    assert h.take("c")[0].error is None
    assert offsets_of(h.co) == {("t", 0): 9}
    assert after_failover(h, compacted=False) == {("t", 0): 9} == after_failover(h, compacted=True)


def test_a_failed_delete_groups_leaves_the_group_as_it_was():
    h = Harness()
    commit(h, "c", {("t", 0): 5})
    assert h.take("c")[0].error is None
    h.hold = True
    h.send("admin", gm.DeleteGroupsRequest(GROUP, h.next()))
    h.release(error=NotEnoughReplicasError)
    assert h.take("admin")[0].error is CoordinatorNotAvailableError  # retriable: the admin tries again
    assert h.co.groups[GROUP].state == EMPTY and offsets_of(h.co) == {("t", 0): 5}
    commit(h, "c", {("t", 0): 6})
    assert h.take("c")[0].error is None
    h.send("admin", gm.DeleteGroupsRequest(GROUP, h.next()))
    assert h.take("admin")[0].error is None and GROUP not in h.co.groups
    h.send("admin", gm.DeleteGroupsRequest(GROUP, h.next()))
    assert h.take("admin")[0].error is GroupIdNotFoundError
    assert after_failover(h, compacted=False) is None and after_failover(h, compacted=True) is None


def test_offset_delete_removes_a_commit_still_in_flight_and_keeps_a_later_one():
    h = Harness()
    commit(h, "c", {("u", 0): 5, ("u", 1): 1})
    assert h.take("c")[0].error is None
    h.hold = True
    commit(h, "c", {("u", 0): 8, ("u", 2): 3})  # in flight when the OffsetDelete comes
    h.send("admin", gm.OffsetDeleteRequest(GROUP, h.next(), partitions=(("u", 0), ("u", 2))))
    commit(h, "c2", {("u", 2): 4})  # after the OffsetDelete: lands after its tombstones and stays
    h.release()
    assert h.take("c")[0].error is None and h.take("c2")[0].error is None
    (resp,) = h.take("admin")
    assert resp.error is None and {(t, p): e for t, p, e, _ in resp.partition_errors} == {("u", 0): None,
                                                                                          ("u", 2): None}
    assert offsets_of(h.co) == {("u", 1): 1, ("u", 2): 4}
    assert after_failover(h, compacted=False) == offsets_of(h.co) == after_failover(h, compacted=True)
