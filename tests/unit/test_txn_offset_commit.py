"""Transactional offset commits in the group coordinator (issue 17, KIP-98/KIP-447), driven by hand.

TxnOffsetCommit writes a transactional batch of the producer to the group's ``__consumer_offsets``
partition; the offsets wait (invisible to OffsetFetch) until the producer's COMMIT marker makes them the
group's offsets, or its ABORT drops them; a ``require_stable`` OffsetFetch answers
``UnstableOffsetCommitError`` meanwhile. A coordinator that loads the log (a failover) must end in the
same state as the one that served the requests: every test compares both.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_coordinator import GroupCoordinator
from pylog.replication.txn_messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

from coordinator_harness import GROUP, Harness

TP0, TP1 = ("t", 0), ("t", 1)


def txn_commit(h: Harness, pid: int, offsets: Dict[Tuple[str, int], int], *, epoch: int = 0, group: str = GROUP,
               generation: int = -1, member: str = "", instance: Any = None, client: str = "p") -> Any:
    h.send(client, TxnOffsetCommitRequest(f"tx-{pid}", group, pid, epoch, h.next(),
                                          offsets=tuple((t, p, o, -1, "") for (t, p), o in offsets.items()),
                                          generation_id=generation, member_id=member, group_instance_id=instance))
    answers = h.take(client)
    return answers[-1] if answers else None


def plain_commit(h: Harness, offsets: Dict[Tuple[str, int], int]) -> Any:
    h.send("c", gm.OffsetCommitRequest(GROUP, h.next(), offsets=tuple((t, p, o, -1, "") for (t, p), o in offsets.items())))
    return h.take("c")[-1]


def fetch(h: Harness, *tps: Tuple[str, int], stable: bool = False, co: Any = None) -> gm.OffsetFetchResponse:
    target = co if co is not None else h.co
    out = target.handle("f", gm.OffsetFetchRequest(GROUP, h.next(), partitions=tps or None, require_stable=stable), h.now)
    (resp,) = [m for _, m in out.items]
    return resp


def committed(h: Harness, co: Any = None) -> Dict[Tuple[str, int], int]:
    target = co if co is not None else h.co
    g = target.groups.get(GROUP)
    return {} if g is None else {tp: v.offset for tp, v in g.offsets.items()}


def pending(co: GroupCoordinator, group: str = GROUP) -> Dict[int, Dict[Tuple[str, int], int]]:
    g = co.groups.get(group)
    return {} if g is None else {pid: {tp: v[0].offset for tp, v in slot.items()} for pid, slot in g.pending_txn.items()}


def assert_reload_agrees(h: Harness) -> None:
    """A coordinator loading the log now holds the same committed and pending offsets."""
    live_committed, live_pending = committed(h), pending(h.co)
    fresh = GroupCoordinator(0)
    fresh.num_partitions = 1
    fresh.load(0, 1, list(h.entries), h.now)
    assert committed(h, fresh) == live_committed
    assert pending(fresh) == live_pending


def test_pending_offsets_are_invisible_until_the_commit_marker():
    h = Harness()
    resp = txn_commit(h, 7, {TP0: 5, TP1: 6})
    assert isinstance(resp, TxnOffsetCommitResponse) and resp.error is None
    # written as one transactional batch of producer 7 ...
    assert [(e.producer_id, e.transactional) for e in h.entries] == [(7, True), (7, True)]
    assert [ot.decode_key(e.key) for e in h.entries] == [ot.OffsetCommitKey(GROUP, "t", 0), ot.OffsetCommitKey(GROUP, "t", 1)]
    # ... and not visible yet
    assert fetch(h, TP0, TP1).offsets == (("t", 0, -1, -1, ""), ("t", 1, -1, -1, ""))
    assert pending(h.co) == {7: {TP0: 5, TP1: 6}}
    assert_reload_agrees(h)
    h.marker(7, True)
    assert fetch(h, TP0, TP1).offsets == (("t", 0, 5, -1, ""), ("t", 1, 6, -1, ""))
    assert pending(h.co) == {}
    assert_reload_agrees(h)


def test_abort_drops_the_pending_offsets_and_keeps_the_old_ones():
    h = Harness()
    assert plain_commit(h, {TP0: 3}).error is None
    txn_commit(h, 7, {TP0: 9})
    h.marker(7, False)
    assert committed(h) == {TP0: 3} and pending(h.co) == {}
    assert_reload_agrees(h)
    # the producer's next transaction is independent of the aborted one
    txn_commit(h, 7, {TP1: 4}, epoch=1)
    h.marker(7, True, epoch=1)
    assert committed(h) == {TP0: 3, TP1: 4}
    assert_reload_agrees(h)


def test_markers_complete_only_their_producer():
    h = Harness()
    txn_commit(h, 7, {TP0: 1})
    txn_commit(h, 8, {TP1: 2})
    h.marker(8, True)
    assert committed(h) == {TP1: 2} and pending(h.co) == {7: {TP0: 1}}
    assert_reload_agrees(h)
    h.marker(7, False)
    assert committed(h) == {TP1: 2} and pending(h.co) == {}
    assert_reload_agrees(h)


def test_a_plain_commit_written_after_the_transactional_record_wins():
    """Kafka's rule: the offset whose record is later in the log wins, whenever the marker comes."""
    h = Harness()
    txn_commit(h, 7, {TP0: 10})
    assert plain_commit(h, {TP0: 20}).error is None
    h.marker(7, True)
    assert committed(h) == {TP0: 20}
    assert_reload_agrees(h)
    # and a transactional record after a plain one replaces it
    txn_commit(h, 7, {TP0: 30}, epoch=1)
    h.marker(7, True, epoch=1)
    assert committed(h) == {TP0: 30}
    assert_reload_agrees(h)


def test_require_stable_answers_unstable_while_a_transaction_is_open():
    h = Harness()
    plain_commit(h, {TP0: 3, TP1: 4})
    txn_commit(h, 7, {TP0: 9})
    resp = fetch(h, TP0, TP1, stable=True)
    assert resp.error is None and resp.partition_errors == (("t", 0, UnstableOffsetCommitError),)
    assert resp.offsets == (("t", 0, -1, -1, ""), ("t", 1, 4, -1, ""))
    assert UnstableOffsetCommitError.retriable
    # without require_stable, the committed offset (the transaction's is not visible)
    assert fetch(h, TP0, TP1).offsets == (("t", 0, 3, -1, ""), ("t", 1, 4, -1, ""))
    # all partitions (None) too
    assert fetch(h, stable=True).partition_errors == (("t", 0, UnstableOffsetCommitError),)
    h.marker(7, True)
    resp = fetch(h, TP0, TP1, stable=True)
    assert resp.partition_errors == () and resp.offsets == (("t", 0, 9, -1, ""), ("t", 1, 4, -1, ""))


def test_require_stable_while_the_append_is_in_flight():
    h = Harness()
    h.hold = True
    txn_commit(h, 7, {TP0: 9})
    assert fetch(h, TP0, stable=True).partition_errors == (("t", 0, UnstableOffsetCommitError),)
    h.release()
    assert h.take("p")[-1].error is None
    assert fetch(h, TP0, stable=True).partition_errors == (("t", 0, UnstableOffsetCommitError),)
    h.marker(7, False)
    assert fetch(h, TP0, stable=True).partition_errors == ()


def test_abort_marker_while_the_append_is_in_flight_drops_it():
    """A transaction aborted (timeout, fence) while its TxnOffsetCommit append waits for the ISR."""
    h = Harness()
    h.hold = True
    txn_commit(h, 7, {TP0: 9})
    h.marker(7, False)
    h.release()
    assert h.take("p")[-1].error is None
    assert pending(h.co) == {} and committed(h) == {}
    assert_reload_agrees(h)


def test_failed_append_leaves_nothing_pending():
    h = Harness()
    h.hold = True
    txn_commit(h, 7, {TP0: 9})
    from pylog.errors import NotEnoughReplicasError
    h.release(NotEnoughReplicasError)
    (resp,) = h.take("p")
    assert resp.error is CoordinatorNotAvailableError  # retriable: the producer looks the coordinator up again
    assert pending(h.co) == {} and not h.co.groups[GROUP].txn_in_flight


def test_member_generation_and_instance_checks():
    h = Harness()
    h.join("a")
    a = h.take("a")[0].member_id
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=a, assignments=((a, b""),)))
    h.take("a")
    assert txn_commit(h, 7, {TP0: 1}, generation=1, member="nobody").error is UnknownMemberIdError
    assert txn_commit(h, 7, {TP0: 1}, generation=0, member=a).error is IllegalGenerationError
    assert txn_commit(h, 7, {TP0: 1}, generation=-1, member=a).error is IllegalGenerationError
    assert txn_commit(h, 7, {TP0: 1}, generation=1, member=a).error is None
    # Kafka's validateOffsetCommit(isTransactional=true): no member named, no check (old clients)
    assert txn_commit(h, 8, {TP1: 1}).error is None
    assert pending(h.co) == {7: {TP0: 1}, 8: {TP1: 1}}
    assert len(h.entries) == 1 + 2  # the group metadata, then one record per accepted commit


def test_fenced_static_member():
    h = Harness()
    h.send("a", gm.JoinGroupRequest(GROUP, h.next(), session_timeout_ms=10_000, rebalance_timeout_ms=1_000,
                                    protocols=(("range", b"r"),), client_id="a", group_instance_id="i1"))
    old = h.take("a")[0].member_id
    h.send("a", gm.SyncGroupRequest(GROUP, h.next(), generation_id=1, member_id=old, assignments=((old, b""),),
                                    group_instance_id="i1"))
    h.take("a")
    # a restart with the same instance id takes the slot over under a new member id
    h.send("b", gm.JoinGroupRequest(GROUP, h.next(), session_timeout_ms=10_000, rebalance_timeout_ms=1_000,
                                    protocols=(("range", b"r"),), client_id="b", group_instance_id="i1"))
    new = h.take("b")[-1].member_id
    assert new != old
    assert txn_commit(h, 7, {TP0: 1}, generation=1, member=old, instance="i1").error is FencedInstanceIdError
    assert txn_commit(h, 7, {TP0: 1}, generation=1, member=new, instance="i1").error is None


def test_unknown_group_is_created_and_unknown_member_of_unknown_group_is_refused():
    h = Harness()
    assert txn_commit(h, 7, {TP0: 1}, group="other", generation=3, member="m").error is UnknownMemberIdError
    assert "other" not in h.co.groups
    assert txn_commit(h, 7, {TP0: 1}, group="fresh").error is None
    g = h.co.groups["fresh"]
    assert g.state == "Empty" and not g.offsets and list(g.pending_txn) == [7]
    assert_reload_agrees(h)
    # an Empty group with only pending offsets is not removed by the expiry check
    h.tick(h.co.offsets_retention_check_interval_ms + 1)
    assert "fresh" in h.co.groups


def test_an_older_producer_epoch_is_fenced():
    h = Harness()
    assert txn_commit(h, 7, {TP0: 1}, epoch=3).error is None
    assert txn_commit(h, 7, {TP0: 2}, epoch=2).error is InvalidProducerEpochError
    assert pending(h.co) == {7: {TP0: 1}}
    # a coordinator that loaded the log knows the epoch too
    co = h.reload()
    h.co = co
    assert txn_commit(h, 7, {TP0: 2}, epoch=2).error is InvalidProducerEpochError


def test_a_zombie_after_its_fencing_marker_is_refused():
    h = Harness()
    assert txn_commit(h, 7, {TP0: 1}).error is None
    h.marker(7, False, epoch=1)  # fenced: the ABORT carries the bumped epoch
    assert txn_commit(h, 7, {TP0: 2}, epoch=0).error is InvalidProducerEpochError
    assert txn_commit(h, 7, {TP0: 3}, epoch=1).error is None
    assert pending(h.co) == {7: {TP0: 3}}
    assert_reload_agrees(h)


def test_loader_skips_a_zombie_record_behind_its_fence():
    key = ot.encode_offset_commit_key(GROUP, "t", 0)
    val = ot.encode_offset_commit_value(ot.OffsetCommitValue(5, -1, "", 0))
    entries = [ot.LogEntry(None, None, 0, 7, 1, True, False),   # the fencing ABORT (epoch bumped to 1)
               ot.LogEntry(key, val, 1, 7, 0, True),            # the zombie's record at epoch 0
               ot.LogEntry(None, None, 2, 7, 1, True, True)]    # the new epoch's COMMIT
    co = GroupCoordinator(0)
    co.num_partitions = 1
    co.load(0, 1, entries, 0)
    assert GROUP not in co.groups


def test_offset_delete_and_delete_group_drop_pending_offsets_for_good():
    h = Harness()
    txn_commit(h, 7, {TP0: 1, TP1: 2})
    h.send("x", gm.OffsetDeleteRequest(GROUP, h.next(), partitions=(TP0,)))
    assert h.take("x")[-1].partition_errors == (("t", 0, None, ""),)
    assert pending(h.co) == {7: {TP1: 2}}
    assert_reload_agrees(h)
    h.send("x", gm.DeleteGroupsRequest(GROUP, h.next()))
    assert h.take("x")[-1].error is None
    h.marker(7, True)  # the transaction commits after the deletion: nothing comes back
    assert GROUP not in h.co.groups
    fresh = h.reload()
    assert GROUP not in fresh.groups


def test_dead_group_refuses_txn_offset_commits():
    h = Harness()
    plain_commit(h, {TP0: 1})
    h.hold = True
    h.send("x", gm.DeleteGroupsRequest(GROUP, h.next()))
    assert txn_commit(h, 7, {TP0: 2}).error is CoordinatorNotAvailableError
    h.release()


# --------------------------------------------------------------------------- model
# Random interleavings of plain commits, transactional commits of three producers, markers, OffsetDelete,
# held appends and reloads, against a model that reads the log the simplest way: a committed offset is
# the latest record (by log offset) of a plain commit or of a committed transaction, unless a tombstone
# came later; a producer's transactional records belong to its transaction up to its next marker.

def model(entries) -> Tuple[Dict[Tuple[str, int], int], Dict[int, Dict[Tuple[str, int], int]]]:
    # the outcome of each transactional record: the first marker of its producer after it
    outcome: Dict[int, Any] = {}
    open_records: Dict[int, list] = {}
    for i, e in enumerate(entries):
        if e.marker is not None:
            for j in open_records.pop(e.producer_id, []):
                outcome[j] = e.marker
        elif e.transactional:
            open_records.setdefault(e.producer_id, []).append(i)
    best: Dict[Tuple[str, int], Tuple[int, Any]] = {}
    deleted_at: Dict[Tuple[str, int], int] = {}
    pend: Dict[int, Dict[Tuple[str, int], Tuple[int, int]]] = {}
    for i, e in enumerate(entries):
        if e.key is None:
            continue
        k = ot.decode_key(e.key)
        tp = (k.topic, k.partition)
        if e.value is None:
            deleted_at[tp] = i
            best.pop(tp, None)
            continue
        v = ot.decode_offset_commit_value(e.value).offset
        if e.transactional:
            if outcome.get(i) is None:
                pend.setdefault(e.producer_id, {})[tp] = (i, v)
            continue
        best[tp] = (i, v)
    for i, e in enumerate(entries):
        if e.transactional and e.key is not None and outcome.get(i) is True:
            k = ot.decode_key(e.key)
            tp = (k.topic, k.partition)
            # materialized when its marker came: over an older record only, and gone if a tombstone followed
            if deleted_at.get(tp, -1) > i:
                continue
            if tp not in best or best[tp][0] < i:
                best[tp] = (i, ot.decode_offset_commit_value(e.value).offset)
    pending_view = {pid: {tp: v for tp, (i, v) in slot.items() if deleted_at.get(tp, -1) < i}
                    for pid, slot in pend.items()}
    return {tp: v for tp, (i, v) in best.items()}, {pid: s for pid, s in pending_view.items() if s}


ops = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.sampled_from([TP0, TP1]), st.integers(0, 99)),
    st.tuples(st.just("txn"), st.sampled_from([7, 8, 9]), st.sampled_from([TP0, TP1]), st.integers(0, 99)),
    st.tuples(st.just("marker"), st.sampled_from([7, 8, 9]), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from([TP0, TP1])),
    st.tuples(st.just("reload"),),
), max_size=25)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_random_histories_match_the_log_model_and_a_reload(history):
    h = Harness()
    for op in history:
        if op[0] == "plain":
            plain_commit(h, {op[1]: op[2]})
        elif op[0] == "txn":
            assert txn_commit(h, op[1], {op[2]: op[3]}).error is None
        elif op[0] == "marker":
            h.marker(op[1], op[2])
        elif op[0] == "delete":
            h.send("x", gm.OffsetDeleteRequest(GROUP, h.next(), partitions=(op[1],)))
            h.take("x")
        else:
            h.co = h.reload()
        want_committed, want_pending = model(h.entries)
        assert committed(h) == want_committed, op
        assert pending(h.co) == want_pending, op
        assert_reload_agrees(h)


def test_commit_marker_while_the_append_is_in_flight_applies_on_the_acknowledgement():
    h = Harness()
    h.hold = True
    txn_commit(h, 7, {TP0: 9})
    h.marker(7, True)
    h.release()
    assert committed(h) == {TP0: 9} and pending(h.co) == {}
    assert_reload_agrees(h)


def test_expiry_keeps_an_offset_with_a_pending_transactional_offset():
    h = Harness()
    h.co.offsets_retention_ms = 1_000
    h.co.offsets_retention_check_interval_ms = 1_000
    plain_commit(h, {TP0: 1, TP1: 2})
    txn_commit(h, 7, {TP0: 5})
    h.tick(5_000)
    assert committed(h) == {TP0: 1}  # TP1 expired; TP0 waits for the transaction
    assert_reload_agrees(h)
    h.marker(7, False)
    h.tick(1_000)
    assert GROUP not in h.co.groups  # expired, and the group left without offsets is gone
    assert GROUP not in h.reload().groups


def test_deleted_topic_drops_pending_offsets_even_if_the_transaction_commits():
    h = Harness()
    txn_commit(h, 7, {TP0: 5, ("u", 0): 6})
    h.deliver(h.co.on_topics_deleted(["t"], h.now))
    assert pending(h.co) == {7: {("u", 0): 6}}
    h.marker(7, True)
    assert committed(h) == {("u", 0): 6}
    assert_reload_agrees(h)


def test_deleted_topic_while_the_append_is_in_flight():
    h = Harness()
    h.hold = True
    txn_commit(h, 7, {TP0: 5})
    h.deliver(h.co.on_topics_deleted(["t"], h.now))  # its tombstone is written after the record
    h.release()
    assert pending(h.co) == {}
    h.marker(7, True)
    assert committed(h) == {}
    assert_reload_agrees(h)


def test_deleted_topic_then_the_commit_marker_before_the_tombstones_are_acknowledged():
    h = Harness()
    txn_commit(h, 7, {TP0: 5})
    h.hold = True
    h.deliver(h.co.on_topics_deleted(["t"], h.now))
    h.marker(7, True)  # the marker is after the tombstone in the log
    h.release()
    assert committed(h) == {} and pending(h.co) == {}
    assert_reload_agrees(h)
