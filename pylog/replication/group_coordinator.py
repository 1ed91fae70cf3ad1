"""The group coordinator: membership, generations and committed offsets of consumer groups (sans-I/O).

One :class:`GroupCoordinator` runs on every broker and serves the groups whose
``__consumer_offsets`` partition (:func:`~pylog.replication.offsets_topic.partition_for_group`)
that broker leads. It follows Kafka's classic group protocol (incremental
cooperative rebalancing, KIP-429, is client-side: the coordinator runs the same
rounds, see :mod:`pylog.client.assignors`):

* **Join.** A member sends JoinGroup; a new member gets a member id. A join
  that changes the group moves it to *PreparingRebalance*; the rebalance
  completes when every known member has rejoined, or when the longest
  ``rebalance_timeout_ms`` expires (members that did not rejoin are removed).
  Completing bumps the *generation*, picks the leader and the protocol
  (assignor) every member supports, and answers every JoinGroup; the leader's
  answer lists every member's subscription (*CompletingRebalance*).
* **Sync.** The leader computes the assignment client-side and sends it in its
  SyncGroup; the coordinator writes the group's metadata (members,
  assignments, generation) to the offsets partition with ``acks=all`` and then
  answers every member's SyncGroup with its share (*Stable*).
* **Heartbeat.** Members heartbeat; a member silent for ``session_timeout_ms``
  is removed and the group rebalances. LeaveGroup removes a member at once.
* **Static members** (KIP-345, ``group_instance_id``): ``Group.static_members``
  maps each instance id to the member id holding it; a static member
  rejoining with no member id takes over its old slot under a new member id
  (no rebalance when Stable and the selected protocol is unchanged), and
  requests from the replaced member id get ``FencedInstanceIdError``
  (:meth:`_replace_static_member`, :meth:`_current_member_error`). Static
  members that miss a rebalance are kept; only their session timeout (or an
  admin LeaveGroup by instance id) removes them. The map is persisted in the
  GroupMetadata record (v3 carries ``group_instance_id``).
* **Member id first** (KIP-394, JoinGroup v4+ over the Kafka protocol: a request with
  ``require_known_member_id``): a new dynamic member without a member id gets
  ``MemberIdRequiredError`` carrying a fresh id, kept in ``Group.pending_members``
  (not a member: it holds up no rebalance) until it joins with that id, leaves,
  or its session timeout passes. The in-process consumer joins in one step.
* **Offsets.** OffsetCommit is accepted from a member of the current
  generation (``IllegalGenerationError`` otherwise, ``UnknownMemberIdError``
  for an unknown member), or with generation -1 from a standalone consumer
  when the group has no members. The commit is appended to the offsets
  partition as a ProduceRequest with ``acks=all`` sent to this broker itself;
  only once that append is acknowledged is the offset visible to OffsetFetch
  and the commit answered.
* **Transactional offsets** (issue 17): TxnOffsetCommit appends the offsets as a
  transactional batch of the producer; they wait per producer id, invisible to
  OffsetFetch, until :meth:`complete_txn` (the broker calls it when the producer's
  COMMIT/ABORT marker is committed on the offsets partition) makes them the group's
  offsets or drops them. ``OffsetFetch(require_stable=True)`` answers
  ``UnstableOffsetCommitError`` meanwhile (KIP-447). See docs/consumer-groups.md.
* **Failover.** When this broker becomes leader of an offsets partition it
  :meth:`load` s the partition's log (last value per key wins; a null value is
  a tombstone); when it stops leading, :meth:`unload` drops those groups and
  answers anything pending with ``NotCoordinatorError`` so clients look the
  coordinator up again.

* **Admin.** ListGroups, DescribeGroups, OffsetDelete (and DeleteGroups, an
  OffsetCommit with generation -1 for altering offsets) serve
  :mod:`pylog.client.admin`. A deletion wins over commits started before it
  (their partitions are tombstoned too) and the group is *Dead* while
  DeleteGroups' tombstones are written (requests get the retriable
  ``CoordinatorNotAvailableError``), as in Kafka; see docs/consumer-groups.md.
* **Offset expiry** (KIP-211): every ``offsets_retention_check_interval_ms``
  :meth:`tick` tombstones offsets older than ``offsets_retention_ms`` (from
  when an Empty group became empty, or from the commit), and removes Empty
  groups left without offsets (:meth:`_expire_offsets`).

The coordinator is split by concept: :mod:`.group_state` (the states,
:class:`Group`, :class:`Member`), :mod:`.group_core` (shared state and the
writes to the offsets partition), :mod:`.group_membership` (join, sync,
heartbeat, leave, rebalances), :mod:`.group_offsets` (commit, fetch, delete,
expiry); this module dispatches requests and holds admin, timers, load and unload.

Inputs: :meth:`handle` (a request), :meth:`on_produce_response`,
:meth:`tick` (timers), :meth:`load` / :meth:`unload`, :meth:`complete_txn`; each returns an
:class:`~pylog.replication.messages.Outbox`.

Complexity: O(members) per group event; O(records) to load a partition.
Durability: a commit is acknowledged only after the offsets partition's ISR
has it (acks=all); it survives any ``RF - min_insync_replicas`` broker crashes.
A transactional offset is as durable once acknowledged; whether it counts is
decided by its producer's marker in the same log, so a crash never changes it.
Thread-safety: none; the broker's one loop thread drives it.
"""
from __future__ import annotations

import logging
from typing import Dict, Iterable, Optional, Tuple, Union

from pylog.errors import CorruptRecordError, GroupIdNotFoundError, NonEmptyGroupError, NotCoordinatorError
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.group_membership import GroupMembership
from pylog.replication.group_offsets import GroupOffsets
from pylog.replication.group_state import (  # some only re-exported: importers name them from this module
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    TP,
    Group,
    GroupState,
    Member,
)
from pylog.replication.messages import Outbox, ProduceResponse
from pylog.replication.txn_messages import TxnOffsetCommitRequest
from pylog.record import Record

log = logging.getLogger(__name__)


class GroupCoordinator(GroupMembership, GroupOffsets):
    """The coordinator role of broker ``broker_id`` (see the module docstring).

    ``request_timeout_ms`` bounds the appends to the offsets partition.
    """

    def handle(self, src: object, msg: object, now_ms: int) -> Outbox:
        """Answer one group request (FindCoordinator is answered by the broker)."""
        out = Outbox()
        if self._handle_admin(src, msg, now_ms, out):
            return out
        if isinstance(msg, gm.JoinGroupRequest):
            self._on_join(src, msg, now_ms, out)
        elif isinstance(msg, gm.SyncGroupRequest):
            self._on_sync(src, msg, now_ms, out)
        elif isinstance(msg, gm.HeartbeatRequest):
            self._on_heartbeat(src, msg, now_ms, out)
        elif isinstance(msg, gm.LeaveGroupRequest):
            self._on_leave(src, msg, now_ms, out)
        elif isinstance(msg, gm.OffsetCommitRequest):
            self._on_commit(src, msg, now_ms, out)
        elif isinstance(msg, gm.OffsetFetchRequest):
            self._on_offset_fetch(src, msg, out)
        elif isinstance(msg, gm.DeleteGroupsRequest):
            self._on_delete(src, msg, now_ms, out)
        elif isinstance(msg, TxnOffsetCommitRequest):
            self._on_txn_offset_commit(src, msg, now_ms, out)
        return out

    def tick(self, now_ms: int) -> Outbox:
        """Expire silent members (session timeout) and overdue rebalances (rebalance timeout)."""
        out = Outbox()
        for g in list(self.groups.values()):
            for mid, deadline in list(g.pending_members.items()):
                if now_ms >= deadline:  # handed a member id, never joined with it (Kafka removes it too)
                    del g.pending_members[mid]
            for mid, m in list(g.members.items()):
                if mid in g.members and m.join is None and now_ms >= m.deadline_ms:
                    self._remove_member(g, mid, now_ms, out, f"missed its session timeout ({m.session_timeout_ms} ms)")
            self._maybe_complete_join(g, now_ms, out)
        self._expire_offsets(now_ms, out)
        return out

    def load(self, partition: int, leader_epoch: int,
             entries: Iterable[Union[Tuple[Optional[bytes], Optional[bytes]], ot.LogEntry]], now_ms: int) -> Outbox:
        """Rebuild the groups of ``partition`` from its log, in offset order: :class:`~pylog.replication.offsets_topic.LogEntry`
        items (or plain ``(key, value)`` pairs: records outside any transaction, at increasing offsets).

        As Kafka's loader (``GroupMetadataManager.loadGroupsAndOffsets``, and the replay of Kafka's new
        coordinator for the tombstones): the last value per key wins, a null value is a tombstone; a
        transactional offset record waits in its producer's pending offsets until the producer's marker:
        COMMIT makes each one the committed offset unless a newer record (higher offset) wrote it, ABORT
        drops them; a plain tombstone also deletes the pending transactional offsets of its partition;
        those still without a marker at the end stay pending. A transactional record of an epoch older
        than its producer's last marker (a fenced zombie's, appended behind the fence) is skipped.
        """
        out = self.unload(partition)
        offsets: Dict[str, Dict[TP, Tuple[ot.OffsetCommitValue, int]]] = {}
        metas: Dict[str, Optional[ot.GroupMetadataValue]] = {}
        pending: Dict[int, Dict[str, Dict[TP, Tuple[ot.OffsetCommitValue, int]]]] = {}
        marker_epochs: Dict[int, int] = {}
        last = -1
        for entry in entries:
            e = entry if isinstance(entry, ot.LogEntry) else ot.LogEntry(entry[0], entry[1])
            pos = e.offset if e.offset >= 0 else last + 1
            last = max(last, pos)
            pid = e.producer_id
            if pid >= 0 and (e.transactional or e.marker is not None):
                self._producer_epochs[(partition, pid)] = max(self._producer_epochs.get((partition, pid), -1),
                                                              e.producer_epoch)
            if e.marker is not None:
                if pid < 0:
                    continue
                marker_epochs[pid] = max(marker_epochs.get(pid, -1), e.producer_epoch)
                done = pending.pop(pid, None)
                if done and e.marker:
                    for gid, tps in done.items():
                        slot = offsets.setdefault(gid, {})
                        for tp, (v, at) in tps.items():
                            cur = slot.get(tp)
                            if cur is None or cur[1] < at:
                                slot[tp] = (v, at)
                continue
            key, value = e.key, e.value
            if key is None:
                continue
            try:
                k = ot.decode_key(key)
                if isinstance(k, ot.OffsetCommitKey):
                    tp = (k.topic, k.partition)
                    if e.transactional and pid >= 0:
                        if e.producer_epoch < marker_epochs.get(pid, -1):
                            continue
                        if value is None:
                            pending.get(pid, {}).get(k.group, {}).pop(tp, None)
                        else:
                            pending.setdefault(pid, {}).setdefault(k.group, {})[tp] = \
                                (ot.decode_offset_commit_value(value), pos)
                        continue
                    slot = offsets.setdefault(k.group, {})
                    if value is None:
                        slot.pop(tp, None)
                        for by_group in pending.values():
                            by_group.get(k.group, {}).pop(tp, None)
                    else:
                        slot[tp] = (ot.decode_offset_commit_value(value), pos)
                else:
                    if value is None:
                        # As Kafka's loader: a group tombstone removes the group's metadata only. Its offsets
                        # have their own tombstones (written before it); one that has none stays.
                        metas[k.group] = None
                    else:
                        metas[k.group] = ot.decode_group_metadata_value(value)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"{ot.OFFSETS_TOPIC}-{partition} offset {pos}: {exc}") from None
        self._log_pos[partition] = max(self._log_pos.get(partition, -1), last)
        waiting: Dict[str, Dict[int, Dict[TP, Tuple[ot.OffsetCommitValue, int, int]]]] = {}
        for pid, by_group in pending.items():
            for gid, tps in by_group.items():
                if tps:
                    waiting.setdefault(gid, {})[pid] = {tp: (v, at, 0) for tp, (v, at) in tps.items()}
        # A group exists if it has metadata or offsets left (all its offsets tombstoned: gone, as in Kafka).
        for gid in {g for g, o in offsets.items() if o} | {g for g, v in metas.items() if v is not None} | set(waiting):
            g = Group(gid, partition)
            loaded = offsets.get(gid, {})
            g.offsets = {tp: v for tp, (v, _) in loaded.items()}
            g.offset_positions = {tp: at for tp, (_, at) in loaded.items()}
            g.pending_txn = waiting.get(gid, {})
            meta = metas.get(gid)
            if meta is not None:
                g.generation = meta.generation
                g.protocol_type = meta.protocol_type or None
                g.protocol = meta.protocol
                for mm in meta.members:
                    protos = ((meta.protocol, mm.subscription),) if meta.protocol else ()
                    g.members[mm.member_id] = Member(mm.member_id, mm.client_id, mm.client_host, mm.session_timeout,
                                                     mm.rebalance_timeout, meta.protocol_type, protos,
                                                     now_ms + mm.session_timeout, assignment=mm.assignment,
                                                     group_instance_id=mm.group_instance_id)
                    if mm.group_instance_id is not None:
                        g.static_members[mm.group_instance_id] = mm.member_id
                if g.members:
                    g.leader = meta.leader if meta.leader in g.members else next(iter(g.members))
                    g.transition_to(STABLE)
                else:
                    g.empty_since_ms = meta.current_state_timestamp
            self.groups[gid] = g
        self.loaded[partition] = leader_epoch
        log.info("broker %d: coordinator of %s-%d at leader epoch %d: %d groups loaded", self.broker_id,
                 ot.OFFSETS_TOPIC, partition, leader_epoch, sum(g.partition == partition for g in self.groups.values()))
        return out

    def unload(self, partition: int) -> Outbox:
        """Stop serving ``partition``'s groups; pending joins and syncs get ``NotCoordinatorError``."""
        out = Outbox()
        self.loaded.pop(partition, None)
        self._producer_epochs = {k: v for k, v in self._producer_epochs.items() if k[0] != partition}
        why = f"broker {self.broker_id} no longer leads {ot.OFFSETS_TOPIC}-{partition}"
        for gid in [gid for gid, g in self.groups.items() if g.partition == partition]:
            g = self.groups.pop(gid)
            for m in g.members.values():
                if m.join is not None:
                    out.send(m.join[0], gm.JoinGroupResponse(m.join[1], error=NotCoordinatorError, message=why))
                if m.sync is not None:
                    out.send(m.sync[0], gm.SyncGroupResponse(m.sync[1], error=NotCoordinatorError, message=why))
        return out

    def _handle_admin(self, src: object, msg: object, now_ms: int, out: Outbox) -> bool:
        """ListGroups, DescribeGroups, OffsetDelete; False for any other message."""
        if isinstance(msg, gm.ListGroupsRequest):
            rows = tuple(sorted((g.group_id, g.protocol_type or "", g.state) for g in self.groups.values()
                                if g.partition in self.loaded and g.state != DEAD))
            out.send(src, gm.ListGroupsResponse(msg.correlation_id, groups=rows, partitions=tuple(sorted(self.loaded))))
        elif isinstance(msg, gm.DescribeGroupsRequest):
            self._on_describe(src, msg, out)
        elif isinstance(msg, gm.OffsetDeleteRequest):
            self._on_offset_delete(src, msg, now_ms, out)
        else:
            return False
        return True

    def _on_describe(self, src: object, req: gm.DescribeGroupsRequest, out: Outbox) -> None:
        err = self._not_here(req.group_id)
        g = self.groups.get(req.group_id)
        if err is None and g is None:
            err = (GroupIdNotFoundError, f"group {req.group_id!r} does not exist")
        if err is not None:
            out.send(src, gm.DescribeGroupsResponse(req.correlation_id, error=err[0], message=err[1]))
            return
        assert g is not None
        # As Kafka: assignments only while Stable (during a rebalance they belong to an ended generation).
        stable = g.state == STABLE
        members = tuple((m.member_id, m.client_id, m.client_host, m.assignment if stable else b"",
                         m.group_instance_id) for m in g.members.values())
        metadata = tuple(m.metadata(g.protocol) if stable else b"" for m in g.members.values())
        out.send(src, gm.DescribeGroupsResponse(req.correlation_id, state=g.state, protocol_type=g.protocol_type or "",
                                                protocol=g.protocol or "", generation_id=g.generation,
                                                leader=g.leader or "", members=members, member_metadata=metadata))

    def _on_delete(self, src: object, req: gm.DeleteGroupsRequest, now_ms: int, out: Outbox) -> None:
        g, err = self._existing_group(req.group_id)
        if err is None and g is not None and g.members:
            err = (NonEmptyGroupError, f"group {req.group_id!r} has {len(g.members)} members")
        if err is not None:
            out.send(src, gm.DeleteGroupsResponse(req.correlation_id, error=err[0], message=err[1]))
            return
        assert g is not None
        # As Kafka (removeAllOffsets drops pending commits too): the tombstones cover the partitions whose
        # OffsetCommit append is still in flight. That append went to the log before these tombstones, so
        # after a reload (or once compaction has dropped the group's metadata tombstone) it stays deleted.
        # Until the tombstones are acknowledged the group is Dead: commits and joins get a retriable error
        # (Kafka's answer for a Dead group), so nothing lands behind the tombstones of a group that then
        # disappears from memory.
        doomed = sorted(set(g.offsets) | set(g.pending_commits) | set(g.txn_in_flight) |
                        {tp for slot in g.pending_txn.values() for tp in slot})
        records = [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p)) for t, p in doomed]
        records.append(Record(None, key=ot.encode_group_metadata_key(g.group_id)))
        g.transition_to(DEAD)
        group = g

        def stored(resp: ProduceResponse, o: Outbox, n: int) -> None:
            mine = self.groups.get(group.group_id) is group
            if resp.error is not None:
                if mine:
                    group.transition_to(EMPTY)  # not deleted (maybe partly written): a retry deletes it again
                error, message = self._append_error(resp)
                o.send(src, gm.DeleteGroupsResponse(req.correlation_id, error=error, message=message))
                return
            if mine:
                del self.groups[group.group_id]
                self._delay_until.pop(group.group_id, None)
            o.send(src, gm.DeleteGroupsResponse(req.correlation_id))

        self._append(g.partition, records, out, stored)

    def _check(self) -> None:
        for gid, g in self.groups.items():
            assert g.group_id == gid
            assert g.partition in self.loaded, (gid, g.partition)
            g._check()


__all__ = ["GroupCoordinator", "Group", "GroupState", "Member", "EMPTY", "PREPARING_REBALANCE", "COMPLETING_REBALANCE",
           "STABLE", "DEAD"]
