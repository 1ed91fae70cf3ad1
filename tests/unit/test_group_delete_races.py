"""DeleteGroups and OffsetDelete racing OffsetCommits whose appends are still in flight (the coordinator
driven by hand): what the coordinator answers and keeps in memory must be what a coordinator that loads
the log after a failover finds, also once compaction has dropped the tombstones (Kafka's cleaner does
after ``delete_retention_ms``)."""
from __future__ import annotations

from typing import Dict, Tuple

from pylog.client._node import ClientNode
from pylog.cluster import Cluster
from pylog.errors import CoordinatorNotAvailableError, GroupIdNotFoundError, NotEnoughReplicasError
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_coordinator import DEAD, EMPTY, GroupCoordinator
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

from coordinator_harness import GROUP, Harness

TOPIC = "events"


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


def test_simulated_commit_during_a_slow_delete_does_not_come_back_after_failover(tmp_path):
    """A follower of the group's offsets partition is slow, so DeleteGroups waits for its tombstones; a
    standalone commit arriving meanwhile is refused retriably (before the fix: answered OK, missing from
    the coordinator's memory, and back after a failover). Retried, it lands after the deletion, and a
    failover changes nothing the admin API shows."""
    c = Cluster(tmp_path, brokers=3, seed=71)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        c.alter_group_offsets(GROUP, {(TOPIC, 0): 3})
        p = partition_for_group(GROUP, c.store.topics[OFFSETS_TOPIC].partitions)
        (row,) = [r for r in c.describe(OFFSETS_TOPIC) if r.partition == p]
        follower = next(b for b in row.isr if b != row.leader)
        c.transport.slow(follower, 1_000)  # acks=all appends to the offsets partition now take seconds
        node = c.scheduler.run_sync(lambda: ClientNode("committer", c.scheduler, c.transport))
        answers: list = []

        def send_commit() -> None:
            req = gm.OffsetCommitRequest(GROUP, node.next_corr(), offsets=((TOPIC, 1, 7, -1, ""),))
            node.request(row.leader, req, 10_000, answers.append)

        c.scheduler.call_later(300, send_commit)  # while the DeleteGroups below waits for its tombstones
        start = c.now_ms
        c.delete_group(GROUP)
        assert c.now_ms - start > 300  # the commit came while the deletion was in flight
        c.advance(5_000)
        assert len(answers) == 1
        assert c.list_group_offsets(GROUP) == {}
        fail_over(c, row.leader)
        assert c.list_group_offsets(GROUP) == {}  # the deletion held
        assert answers[0].error is CoordinatorNotAvailableError and repr(GROUP) in answers[0].message
        # the committer retries (as commit() and the admin client do): the group comes back with that offset
        c.transport.slow(follower, 0)
        c.alter_group_offsets(GROUP, {(TOPIC, 1): 7})
        before = {tp: v.offset for tp, v in c.list_group_offsets(GROUP).items()}
        assert before == {(TOPIC, 1): 7}
        fail_over(c, c.leader_of(OFFSETS_TOPIC, p))
        assert {tp: v.offset for tp, v in c.list_group_offsets(GROUP).items()} == before
        c._check()
    finally:
        c.close()


def fail_over(c: Cluster, broker: int) -> None:
    """Crash ``broker`` (the group's coordinator) so another broker loads the offsets partition; restart it."""
    c.stop_broker(broker, clean=False)
    c.advance(5_000)
    c.start_broker(broker)
    c.advance(2_000)
