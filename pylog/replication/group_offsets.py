"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, expiry (KIP-211), deleted topics, and
transactional offsets (TxnOffsetCommit, the markers' :meth:`GroupOffsets.complete_txn`, require-stable).

A commit is appended to the group's ``__consumer_offsets`` partition with
``acks=all`` and becomes visible to OffsetFetch (and is answered) only once
that append is acknowledged. Expiry tombstones offsets older than
``offsets_retention_ms`` and removes Empty groups left without offsets. A
TxnOffsetCommit is appended as a transactional batch of its producer and waits
(``Group.pending_txn``) for the producer's marker: COMMIT applies each offset
unless a newer record wrote it, ABORT drops them (docs/consumer-groups.md).

Complexity: O(partitions committed) per request; expiry O(offsets) per check.
Durability: a commit is acknowledged only once the offsets partition's ISR has it.
Thread-safety: none; the broker's loop thread.
"""
from __future__ import annotations

import logging
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from pylog.errors import (
    GroupSubscribedToTopicError,
    InvalidProducerEpochError,
    InvalidRequestError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_core import CoordinatorCore
from pylog.replication.group_state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    STABLE,
    TP,
    Group,
    PendingTxnOffset,
    commit_done,
    commit_started,
    txn_commit_done,
    txn_commit_started,
)
from pylog.replication.messages import Outbox, ProduceResponse
from pylog.replication.txn_messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from pylog.record import Record

log = logging.getLogger(__name__)


class GroupOffsets(CoordinatorCore):
    """The offset requests of the coordinator (a part of :class:`~pylog.replication.group_coordinator.GroupCoordinator`)."""

    def _on_commit(self, src: object, req: gm.OffsetCommitRequest, now_ms: int, out: Outbox) -> None:
        def fail(error: type, message: str) -> None:
            out.send(src, gm.OffsetCommitResponse(req.correlation_id, error=error, message=message))

        err = self._not_here(req.group_id)
        if err is not None:
            return fail(*err)
        g = self.groups.get(req.group_id)
        if g is not None and g.state == DEAD:
            return fail(*self._being_deleted(g))
        standalone = req.generation_id < 0 and not req.member_id
        if standalone and (g is None or not g.members):
            if g is None:
                g = self.groups[req.group_id] = Group(req.group_id, self.partition_of(req.group_id))
        elif standalone and req.group_instance_id is None:
            assert g is not None
            return fail(UnknownMemberIdError, f"group {req.group_id!r} has members (generation "
                        f"{g.generation}): a commit without a member id is refused")
        else:
            err = self._member_error(g, req.group_id, req.member_id, req.generation_id, req.group_instance_id)
            if err is not None:
                return fail(*err)
            assert g is not None
            if g.state == COMPLETING_REBALANCE:
                return fail(RebalanceInProgressError, f"group {req.group_id!r} is completing a rebalance")
            m = g.members[req.member_id]
            m.deadline_ms = now_ms + m.session_timeout_ms
        values = {(t, p): ot.OffsetCommitValue(off, epoch, meta or "", now_ms) for t, p, off, epoch, meta in req.offsets}
        records = [Record(ot.encode_offset_commit_value(v), key=ot.encode_offset_commit_key(req.group_id, t, p))
                   for (t, p), v in values.items()]
        if not records:
            out.send(src, gm.OffsetCommitResponse(req.correlation_id))
            return
        group = g

        def stored(resp: ProduceResponse, o: Outbox, n: int) -> None:
            commit_done(group, values)
            if resp.error is not None:
                error, message = self._append_error(resp)
                o.send(src, gm.OffsetCommitResponse(req.correlation_id, error=error, message=message))
                return
            positions = self._positions(resp, len(values))
            if self.groups.get(group.group_id) is group:
                for (tp, v), pos in zip(values.items(), positions):
                    # Kafka's onOffsetCommitAppend: a newer record (a transactional offset whose COMMIT came
                    # first) is not replaced by an older one
                    if group.offset_positions.get(tp, -1) <= pos:
                        group.offsets[tp] = v
                        group.offset_positions[tp] = pos
                        group.written_by[tp] = seq
            o.send(src, gm.OffsetCommitResponse(req.correlation_id))

        g.commits_started += 1
        seq = g.commits_started
        commit_started(g, values)
        self._append(g.partition, records, out, stored)

    def _on_offset_fetch(self, src: object, req: gm.OffsetFetchRequest, out: Outbox) -> None:
        err = self._not_here(req.group_id)
        if err is not None:
            out.send(src, gm.OffsetFetchResponse(req.correlation_id, error=err[0], message=err[1]))
            return
        g = self.groups.get(req.group_id)
        have = g.offsets if g is not None else {}
        wanted = list(req.partitions) if req.partitions is not None else sorted(have)
        rows = []
        unstable: List[Tuple[str, int, Optional[type]]] = []
        for tp in wanted:
            if req.require_stable and g is not None and (tp in g.pending_commits or g.has_pending_txn(tp)):
                # KIP-447 (Kafka's hasPendingOffsetCommitsForTopicPartition): a transactional offset waits for
                # its marker, or a commit for its append; the consumer retries
                unstable.append((tp[0], tp[1], UnstableOffsetCommitError))
                rows.append((tp[0], tp[1], -1, -1, ""))
                continue
            v = have.get(tp)
            rows.append((tp[0], tp[1], v.offset, v.leader_epoch, v.metadata) if v is not None else (tp[0], tp[1], -1, -1, ""))
        out.send(src, gm.OffsetFetchResponse(req.correlation_id, offsets=tuple(rows), partition_errors=tuple(unstable)))

    # ------------------------------------------------------------ transactions
    def _on_txn_offset_commit(self, src: object, req: TxnOffsetCommitRequest, now_ms: int, out: Outbox) -> None:
        """Kafka's TxnOffsetCommit: the offsets go to the group's offsets partition as a transactional batch
        of the producer (acks=all) and wait there, invisible to OffsetFetch, for the producer's marker
        (:meth:`complete_txn`). Answered once the append is acknowledged."""
        def fail(error: type, message: str) -> None:
            out.send(src, TxnOffsetCommitResponse(req.correlation_id, error=error, message=message))

        err = self._not_here(req.group_id)
        if err is not None:
            return fail(*err)
        g = self.groups.get(req.group_id)
        if g is not None and g.state == DEAD:
            return fail(*self._being_deleted(g))
        # Kafka's validateOffsetCommit(isTransactional = true): the member and generation are checked only
        # when the request names them; no "members only" rule for an anonymous transactional commit
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            err = self._member_error(g, req.group_id, req.member_id, req.generation_id, req.group_instance_id)
            if err is not None:
                return fail(*err)
        pid, epoch = req.producer_id, req.producer_epoch
        if pid < 0 or epoch < 0:
            return fail(InvalidRequestError, f"TxnOffsetCommit for group {req.group_id!r}: producer id {pid} / "
                        f"epoch {epoch} is not a transactional producer's")
        known = self._producer_epochs.get((g.partition if g is not None else self.partition_of(req.group_id), pid), -1)
        if epoch < known:
            return fail(InvalidProducerEpochError, f"TxnOffsetCommit for group {req.group_id!r}: producer {pid} "
                        f"epoch {epoch} is older than epoch {known} (fenced)")
        if g is None:  # as Kafka: a transactional commit creates the group's state
            g = self.groups[req.group_id] = Group(req.group_id, self.partition_of(req.group_id))
        self._producer_epochs[(g.partition, pid)] = epoch
        values = {(t, p): ot.OffsetCommitValue(off, le, meta or "", now_ms) for t, p, off, le, meta in req.offsets}
        if not values:
            out.send(src, TxnOffsetCommitResponse(req.correlation_id))
            return
        records = [Record(ot.encode_offset_commit_value(v), key=ot.encode_offset_commit_key(req.group_id, t, p))
                   for (t, p), v in values.items()]
        group = g
        outcome: List[Optional[bool]] = [None]  # set by complete_txn if the producer's marker comes first
        slot = (g.partition, pid)
        self._txn_appends.setdefault(slot, []).append(outcome)

        def stored(resp: ProduceResponse, o: Outbox, n: int) -> None:
            txn_commit_done(group, values)
            mine = self._txn_appends.get(slot, [])
            for i, x in enumerate(mine):
                if x is outcome:
                    del mine[i]
                    break
            if not mine:
                self._txn_appends.pop(slot, None)
            if resp.error is not None:
                error, message = self._append_error(resp)
                o.send(src, TxnOffsetCommitResponse(req.correlation_id, error=error, message=message))
                return
            positions = self._positions(resp, len(values))
            if self.groups.get(group.group_id) is group and outcome[0] is not False:
                written = {tp: (v, pos, seq) for (tp, v), pos in zip(values.items(), positions)}
                if outcome[0] is None:
                    group.pending_txn.setdefault(pid, {}).update(written)
                else:  # the COMMIT came while this append was in flight
                    self._materialize(group, written)
            o.send(src, TxnOffsetCommitResponse(req.correlation_id))

        g.commits_started += 1
        seq = g.commits_started
        txn_commit_started(g, values)
        self._append(g.partition, records, out, stored, producer=(pid, epoch, now_ms))

    def complete_txn(self, partition: int, producer_id: int, committed: bool, now_ms: int, *,
                     producer_epoch: int = -1) -> Outbox:
        """A COMMIT (``committed``) or ABORT marker of ``producer_id`` is committed on ``__consumer_offsets``
        partition ``partition``: that producer's pending transactional offsets of the partition's groups
        become their committed offsets (each only over an older record: Kafka's rule for a mix of
        transactional and plain commits) or are dropped (Kafka's ``handleTxnCompletion``). A TxnOffsetCommit
        of the producer still in flight takes the same outcome when its append is acknowledged.
        ``producer_epoch`` (optional, -1 unknown): the producer's epoch on the partition after the marker;
        a later TxnOffsetCommit of an older epoch is refused (``InvalidProducerEpochError``).

        Complexity: O(groups of the partition + offsets completed). Nothing is written.
        """
        out = Outbox()
        if partition not in self.loaded:
            return out
        if producer_epoch >= 0:
            key = (partition, producer_id)
            self._producer_epochs[key] = max(self._producer_epochs.get(key, -1), producer_epoch)
        for outcome in self._txn_appends.get((partition, producer_id), ()):
            outcome[0] = committed
        for g in self.groups.values():
            if g.partition != partition:
                continue
            pending = g.pending_txn.pop(producer_id, None)
            if pending and committed:
                self._materialize(g, pending)
            if pending:
                log.debug("group %r: transactional offsets of producer %d %s: %s", g.group_id, producer_id,
                          "committed" if committed else "aborted", sorted(pending))
        return out

    @staticmethod
    def _materialize(g: Group, written: Dict[TP, PendingTxnOffset]) -> None:
        """Committed transactional offsets replace the group's offsets written by older records (Kafka's
        ``completePendingTxnOffsetCommit``: kept only if no offset or ``olderThan``)."""
        for tp, (v, pos, seq) in written.items():
            if tp not in g.offsets or g.offset_positions.get(tp, -1) < pos:
                g.offsets[tp] = v
                g.offset_positions[tp] = pos
                g.written_by[tp] = seq

    def _on_offset_delete(self, src: object, req: gm.OffsetDeleteRequest, now_ms: int, out: Outbox) -> None:
        """Kafka's OffsetDelete: a consumer group may drop offsets of topics none of its members subscribes to
        (``GroupSubscribedToTopicError`` per partition otherwise); any other group only while Empty."""
        def fail(error: type, message: str) -> None:
            out.send(src, gm.OffsetDeleteResponse(req.correlation_id, error=error, message=message))

        g, err = self._existing_group(req.group_id)
        if err is not None:
            return fail(*err)
        assert g is not None
        rows: List[Tuple[str, int, Optional[type], str]] = []
        subscribed = self._subscribed_topics(g)
        if subscribed is not None:
            eligible = []
            for t, p in req.partitions:
                if t in subscribed:
                    rows.append((t, p, GroupSubscribedToTopicError,
                                 f"group {req.group_id!r} is subscribed to topic {t!r}: offset of {t}-{p} kept"))
                else:
                    eligible.append((t, p))
        elif g.state == EMPTY:
            eligible = list(req.partitions)
        else:
            return fail(NonEmptyGroupError, f"group {req.group_id!r} has {len(g.members)} members "
                        f"(state {g.state}): its offsets cannot be deleted")
        # A partition whose OffsetCommit append is in flight is deleted too (as Kafka's removeOffsets drops
        # pending commits): that append is in the log before the tombstone, so the commit must not come back
        # in memory when it is acknowledged after the tombstone was written.
        gone = sorted(tp for tp in dict.fromkeys(eligible)
                      if tp in g.offsets or tp in g.pending_commits or g.has_pending_txn(tp))
        rows.extend((t, p, None, "") for t, p in eligible)
        if not gone:
            out.send(src, gm.OffsetDeleteResponse(req.correlation_id, partition_errors=tuple(rows)))
            return
        group = g
        cut = g.commits_started  # commits started after this OffsetDelete land after its tombstones: they stay

        def stored(resp: ProduceResponse, o: Outbox, n: int) -> None:
            if resp.error is not None:
                error, message = self._append_error(resp)
                o.send(src, gm.OffsetDeleteResponse(req.correlation_id, error=error, message=message))
                return
            if self.groups.get(group.group_id) is group:
                for tp in gone:
                    if tp in group.offsets and group.written_by.get(tp, 0) <= cut:
                        del group.offsets[tp]
                        group.written_by.pop(tp, None)
                        group.offset_positions.pop(tp, None)
                    group.drop_pending_txn(tp, cut)
                self._maybe_dead(group, n, o)
            o.send(src, gm.OffsetDeleteResponse(req.correlation_id, partition_errors=tuple(rows)))

        self._append(g.partition, [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p)) for t, p in gone],
                     out, stored)

    def _expiry_base(self, g: Group) -> Optional[Callable[[ot.OffsetCommitValue], int]]:
        """KIP-211: from when an offset's retention counts, or None when the group's offsets do not expire now.

        * a group with a protocol type, Empty: from when it became empty (or the commit, if later or if
          the empty time is unknown);
        * a Stable consumer group: from the commit, and only for topics no member subscribes to;
        * a group that only commits (no protocol type, no members): from the commit;
        * otherwise (rebalancing, non-consumer protocols with members): never.
        """
        if g.protocol_type is not None:
            if g.state == EMPTY:
                since = g.empty_since_ms
                return lambda v: max(since, v.commit_timestamp) if since >= 0 else v.commit_timestamp
            if g.state == STABLE and g.protocol_type == "consumer":
                return lambda v: v.commit_timestamp
            return None
        return None if g.members else (lambda v: v.commit_timestamp)

    def _expire_offsets(self, now_ms: int, out: Outbox) -> None:
        """Every ``offsets_retention_check_interval_ms``: tombstone expired offsets, drop dead groups.

        Expired offsets leave memory at once and get tombstones (acks=all, not waited for, as Kafka's
        cleanup): if an append fails, a later load brings them back and they expire again.
        """
        if now_ms < self._next_expiry_check_ms:
            return
        self._next_expiry_check_ms = now_ms + self.offsets_retention_check_interval_ms
        retention = self.offsets_retention_ms
        for g in list(self.groups.values()):
            if g.partition not in self.loaded or g.state == DEAD:
                continue
            base = self._expiry_base(g)
            if base is None:
                continue
            keep = self._subscribed_topics(g) if g.members else None
            if g.members and keep is None:
                continue  # subscriptions unknown: keep everything
            expired = []
            for tp, v in g.offsets.items():
                # (not while a transactional offset of tp is pending, as Kafka's new coordinator: its
                # tombstone would delete the pending offset too when the log is loaded)
                if tp in g.pending_commits or (keep is not None and tp[0] in keep) or g.has_pending_txn(tp):
                    continue
                if (now_ms >= v.expire_timestamp if v.expire_timestamp >= 0 else now_ms - base(v) >= retention):
                    expired.append(tp)
            for tp in expired:
                del g.offsets[tp]
                g.written_by.pop(tp, None)
                g.offset_positions.pop(tp, None)
            self.expired_offsets += len(expired)
            if expired:
                log.info("group %r: %d offsets expired (KIP-211)", g.group_id, len(expired))
                self._append(g.partition, [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p))
                                           for t, p in sorted(expired)], out, lambda r, o, n: None)
            self._maybe_dead(g, now_ms, out)

    def _tombstoned(self, g: Group, tps: List[TP]) -> Callable[[ProduceResponse, Outbox, int], None]:
        """When tombstones of ``tps`` are acknowledged: a TxnOffsetCommit of one of them started before the
        tombstones and acknowledged since is deleted too (its record is before the tombstone in the log)."""
        cut = g.commits_started

        def done(resp: ProduceResponse, o: Outbox, n: int) -> None:
            if resp.error is None and self.groups.get(g.group_id) is g:
                for tp in tps:
                    g.drop_pending_txn(tp, cut)
                self._maybe_dead(g, n, o)
        return done

    def on_topics_deleted(self, topics: Iterable[str], now_ms: int) -> Outbox:
        """Topics were deleted: every loaded group forgets its committed offsets of their partitions
        and tombstones them in ``__consumer_offsets`` (Kafka's ``onPartitionsDeleted``); a group left
        Empty without offsets is removed. Groups whose offsets partition this broker does not lead
        now are not touched (their coordinator does it when it gets the same notice).
        """
        out = Outbox()
        gone = set(topics)
        for g in list(self.groups.values()):
            if g.partition not in self.loaded or g.state == DEAD:
                continue
            pending = {tp for slot in g.pending_txn.values() for tp in slot} | set(g.txn_in_flight)
            dropped = sorted(tp for tp in set(g.offsets) | pending if tp[0] in gone)
            for tp in dropped:
                g.offsets.pop(tp, None)
                g.written_by.pop(tp, None)
                g.offset_positions.pop(tp, None)
                g.drop_pending_txn(tp)
            if dropped:
                self._append(g.partition, [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p))
                                           for t, p in dropped], out, self._tombstoned(g, dropped))
                self._maybe_dead(g, now_ms, out)
        return out

