"""Group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalances and static members.

The rebalance half of the classic group protocol (see
:mod:`pylog.replication.group_coordinator` for the whole): joins move a group
to PreparingRebalance, the last rejoin (or the rebalance timeout) completes
the join round (a new generation, a leader, a protocol every member supports:
CompletingRebalance), the leader's SyncGroup is written to the offsets
partition and then answers every member (Stable). Static members (KIP-345)
keep their slot across restarts; KIP-394 hands new dynamic members an id first.

Complexity: O(members) per event. Thread-safety: none; the broker's loop thread.
"""
from __future__ import annotations

import logging
from typing import Dict, Optional

from pylog.errors import (
    FencedInstanceIdError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from pylog.replication import group_messages as gm
from pylog.replication.group_core import CoordinatorCore
from pylog.replication.group_state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, Group, Member
from pylog.replication.messages import Outbox, ProduceResponse

log = logging.getLogger(__name__)


class GroupMembership(CoordinatorCore):
    """The membership requests of the coordinator (a part of :class:`~pylog.replication.group_coordinator.GroupCoordinator`)."""

    def _new_member_id(self, client_id: str, now_ms: int, instance_id: Optional[str] = None) -> str:
        """A fresh member id; a static member's starts with its instance id (Kafka's ``generateMemberId``)."""
        self._ids += 1
        return f"{instance_id or client_id or 'member'}-{self.broker_id}.{now_ms}.{self._ids}"

    def _on_join(self, src: object, req: gm.JoinGroupRequest, now_ms: int, out: Outbox) -> None:
        def fail(error: type, message: str) -> None:
            out.send(src, gm.JoinGroupResponse(req.correlation_id, error=error, message=message, member_id=req.member_id))

        err = self._not_here(req.group_id)
        if err is not None:
            return fail(*err)
        if not req.protocols:
            return fail(InconsistentGroupProtocolError, f"group {req.group_id!r}: JoinGroup without protocols")
        g = self.groups.get(req.group_id)
        if g is not None and g.state == DEAD:
            return fail(*self._being_deleted(g))
        if g is None:
            if req.member_id:
                return fail(UnknownMemberIdError, f"member {req.member_id!r} is unknown to group {req.group_id!r}")
            g = self.groups[req.group_id] = Group(req.group_id, self.partition_of(req.group_id))
        if not req.member_id and req.group_instance_id is None and req.require_known_member_id:
            # KIP-394 (Kafka's doNewMemberJoinGroup with requireKnownMemberId): hand out the member id
            # first; the member joins with it, so a client that never comes back never delays a rebalance.
            mid = self._new_member_id(req.client_id, now_ms)
            g.pending_members[mid] = now_ms + req.session_timeout_ms
            out.send(src, gm.JoinGroupResponse(req.correlation_id, error=MemberIdRequiredError,
                                               message=f"group {req.group_id!r}: join again with member id {mid!r}",
                                               member_id=mid))
            return
        if g.members:
            names = {n for n, _ in req.protocols}
            common = set.intersection(names, *({n for n, _ in m.protocols} for m in g.members.values()))
            if req.protocol_type != g.protocol_type or not common:
                return fail(InconsistentGroupProtocolError,
                            f"group {req.group_id!r} uses protocol type {g.protocol_type!r} with assignors "
                            f"{sorted(n for n, _ in next(iter(g.members.values())).protocols)}; member offered "
                            f"{req.protocol_type!r} {sorted(names)}")
        pending = req.member_id in g.pending_members and req.group_instance_id is None
        if req.member_id and not pending:
            err = self._current_member_error(g, req.group_id, req.member_id, req.group_instance_id)
            if err is not None:
                return fail(*err)
        instance = req.group_instance_id
        if not req.member_id and instance is not None and instance in g.static_members:
            self._replace_static_member(g, src, req, now_ms, out)
        elif not req.member_id or pending:
            if pending:
                del g.pending_members[req.member_id]
            new_id = req.member_id if pending else self._new_member_id(req.client_id, now_ms, instance)
            m = Member(new_id, req.client_id, req.client_host or str(src),
                       req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type, tuple(req.protocols),
                       now_ms + req.session_timeout_ms, group_instance_id=instance)
            g.members[m.member_id] = m
            if instance is not None:
                g.static_members[instance] = m.member_id
            if g.protocol_type is None or len(g.members) == 1:
                g.protocol_type = req.protocol_type
            m.join = (src, req.correlation_id)
            self._prepare_rebalance(g, now_ms, out, f"member {m.member_id} joined")
        else:
            m = g.members[req.member_id]
            changed = tuple(req.protocols) != m.protocols
            m.protocols = tuple(req.protocols)
            m.session_timeout_ms, m.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
            m.deadline_ms = now_ms + m.session_timeout_ms
            m.join = (src, req.correlation_id)
            if g.state == STABLE and not changed and m.member_id != g.leader:
                # A follower rejoining with the same metadata gets the current generation back.
                m.join = None
                out.send(src, gm.JoinGroupResponse(req.correlation_id, generation_id=g.generation,
                                                   protocol_name=g.protocol, leader=g.leader or "",
                                                   member_id=m.member_id, protocol_type=g.protocol_type))
                return
            if g.state != PREPARING_REBALANCE:
                self._prepare_rebalance(g, now_ms, out, f"member {m.member_id} rejoined")
        self._maybe_complete_join(g, now_ms, out)

    @staticmethod
    def _rename_member(g: Group, old_id: str, new_id: str) -> Member:
        """Give member ``old_id`` the id ``new_id``, keeping its place in the member order (and leadership)."""
        m = g.members[old_id]
        g.members = {(new_id if mid == old_id else mid): mm for mid, mm in g.members.items()}
        m.member_id = new_id
        if g.leader == old_id:
            g.leader = new_id
        if m.group_instance_id is not None:
            g.static_members[m.group_instance_id] = new_id
        return m

    def _replace_static_member(self, g: Group, src: object, req: gm.JoinGroupRequest, now_ms: int,
                               out: Outbox) -> None:
        """KIP-345: a static member rejoins with an unknown member id (e.g. after a restart): it takes over
        the old member's slot - assignment, leadership, place - under a new member id, and the old member id
        is fenced (its pending JoinGroup/SyncGroup get ``FencedInstanceIdError`` now, its later requests too).

        As Kafka's ``updateStaticMemberAndRebalance``: in *Stable*, if the protocol the group would select
        is unchanged, there is no rebalance: the group metadata (with the new member id) is written and the
        member gets the current generation, with the *old* leader id as leader so it never runs the assignor
        (it then syncs and gets its old assignment); if the write fails, the replacement is undone and the
        member gets the error. If the selected protocol would change, or in *CompletingRebalance* (the
        leader may be assigning to the old member id), the group rebalances; in *PreparingRebalance* the
        join simply waits for the rebalance to complete.
        """
        instance = req.group_instance_id
        assert instance is not None
        old_id = g.static_members[instance]
        m = g.members[old_id]
        fenced = (f"group {g.group_id!r}: member {old_id!r} is fenced: a new member joined with its group "
                  f"instance id {instance!r}")
        if m.join is not None:
            out.send(m.join[0], gm.JoinGroupResponse(m.join[1], error=FencedInstanceIdError, message=fenced,
                                                     member_id=old_id))
            m.join = None
        if m.sync is not None:
            out.send(m.sync[0], gm.SyncGroupResponse(m.sync[1], error=FencedInstanceIdError, message=fenced))
            m.sync = None
        leader_before = g.leader
        was = (m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms, m.client_id, m.client_host, m.deadline_ms)
        new_id = self._new_member_id(req.client_id, now_ms, instance)
        self._rename_member(g, old_id, new_id)
        m.protocols = tuple(req.protocols)
        m.session_timeout_ms, m.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        m.client_id, m.client_host = req.client_id, req.client_host or str(src)
        m.deadline_ms = now_ms + m.session_timeout_ms
        join = m.join = (src, req.correlation_id)
        if g.state == STABLE and self._select_protocol(g) == g.protocol:
            generation = g.generation

            def stored(resp: ProduceResponse, o: Outbox, n: int) -> None:
                # A rebalance started meanwhile (it answers this join when it completes), or answered it
                # already, or the group is gone: nothing to do here.
                if self.groups.get(g.group_id) is not g or g.members.get(new_id) is not m or m.join != join or \
                        g.state != STABLE or g.generation != generation:
                    return
                m.join = None
                if resp.error is not None:
                    # Kafka: the new member id could not be persisted: undo the replacement.
                    self._rename_member(g, new_id, old_id)
                    m.protocols, m.session_timeout_ms, m.rebalance_timeout_ms, m.client_id, m.client_host, _ = was
                    m.deadline_ms = n + m.session_timeout_ms
                    error, message = self._append_error(resp)
                    o.send(src, gm.JoinGroupResponse(req.correlation_id, error=error, message=message))
                    return
                m.deadline_ms = n + m.session_timeout_ms
                o.send(src, gm.JoinGroupResponse(req.correlation_id, generation_id=g.generation,
                                                 protocol_name=g.protocol, leader=leader_before or "",
                                                 member_id=new_id, protocol_type=g.protocol_type))

            self._append(g.partition, [self._group_metadata_record(g, now_ms)], out, stored)
        elif g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, now_ms, out, f"static member {new_id} (group instance id {instance!r}) "
                                    f"replaced member {old_id} during {g.state}")

    def _prepare_rebalance(self, g: Group, now_ms: int, out: Outbox, reason: str) -> None:
        if g.state == COMPLETING_REBALANCE:
            for m in g.members.values():  # the leader's assignment is for a generation that is over
                if m.sync is not None:
                    out.send(m.sync[0], gm.SyncGroupResponse(m.sync[1], error=RebalanceInProgressError,
                                                             message=f"group {g.group_id!r} is rebalancing: {reason}"))
                    m.sync = None
        delay = self.initial_rebalance_delay_ms if g.state == EMPTY else 0
        g.transition_to(PREPARING_REBALANCE, reason)
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0)
        g.rebalance_deadline_ms = now_ms + max(timeout, delay)
        self._delay_until[g.group_id] = now_ms + delay

    def _maybe_complete_join(self, g: Group, now_ms: int, out: Outbox) -> None:
        if g.state != PREPARING_REBALANCE:
            return
        delay_until = self._delay_until.get(g.group_id, 0)
        everyone = all(m.join is not None for m in g.members.values())
        if (everyone and now_ms >= delay_until) or now_ms >= g.rebalance_deadline_ms:
            self._complete_join(g, now_ms, out)

    def _complete_join(self, g: Group, now_ms: int, out: Outbox) -> None:
        # Dynamic members that did not rejoin within the rebalance timeout are removed; static ones stay
        # (Kafka's onCompleteJoin): only their session timeout (or an admin LeaveGroup) removes them.
        for mid in [mid for mid, m in g.members.items() if m.join is None and m.group_instance_id is None]:
            del g.members[mid]
        if g.members and all(m.join is None for m in g.members.values()):
            # Only absent static members: wait for one to rejoin or for their sessions to expire (Kafka
            # postpones the join the same way).
            g.rebalance_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in g.members.values())
            return
        g.generation += 1
        self.rebalances += 1
        if not g.members:
            g.transition_to(EMPTY)
            g.leader, g.protocol = None, None
            g.empty_since_ms = now_ms
            self._append(g.partition, [self._group_metadata_record(g, now_ms)], out, lambda r, o, n: None)
            return
        if g.leader not in g.members or g.members[g.leader].join is None:
            g.leader = next(mid for mid, m in g.members.items() if m.join is not None)
        g.protocol = self._select_protocol(g)
        g.transition_to(COMPLETING_REBALANCE)
        everyone = tuple((mid, m.metadata(g.protocol)) for mid, m in g.members.items())
        instances = tuple(m.group_instance_id for m in g.members.values())
        for m in g.members.values():
            m.deadline_ms = now_ms + m.session_timeout_ms  # (as Kafka: a static member away gets a new session)
            if m.join is None:
                continue  # a static member that did not rejoin: the leader assigns to it all the same
            src, corr = m.join
            m.join = None
            leader = m.member_id == g.leader
            out.send(src, gm.JoinGroupResponse(corr, generation_id=g.generation, protocol_name=g.protocol,
                                               leader=g.leader, member_id=m.member_id,
                                               members=everyone if leader else (), protocol_type=g.protocol_type,
                                               member_instance_ids=instances if leader else ()))

    @staticmethod
    def _select_protocol(g: Group) -> str:
        """The protocol every member supports with the most first-preference votes (Kafka's vote)."""
        members = list(g.members.values())
        common = set.intersection(*({n for n, _ in m.protocols} for m in members))
        votes: Dict[str, int] = {}
        for m in members:
            first = next(n for n, _ in m.protocols if n in common)
            votes[first] = votes.get(first, 0) + 1
        leader_order = [n for n, _ in g.members[g.leader].protocols]  # type: ignore[index]
        return max(votes, key=lambda n: (votes[n], -leader_order.index(n) if n in leader_order else 0))

    def _on_sync(self, src: object, req: gm.SyncGroupRequest, now_ms: int, out: Outbox) -> None:
        def fail(error: type, message: str) -> None:
            out.send(src, gm.SyncGroupResponse(req.correlation_id, error=error, message=message))

        err = self._not_here(req.group_id)
        if err is not None:
            return fail(*err)
        g = self.groups.get(req.group_id)
        err = self._member_error(g, req.group_id, req.member_id, req.generation_id, req.group_instance_id)
        if err is not None:
            return fail(*err)
        assert g is not None
        for what, given, have in (("protocol type", req.protocol_type, g.protocol_type),
                                  ("protocol", req.protocol_name, g.protocol)):
            if given is not None and given != have:  # SyncGroup v5+ names them (Kafka's validateSyncGroup)
                return fail(InconsistentGroupProtocolError, f"group {req.group_id!r} has {what} {have!r}; "
                            f"member {req.member_id!r} synced with {given!r}")
        m = g.members[req.member_id]
        m.deadline_ms = now_ms + m.session_timeout_ms
        if g.state == PREPARING_REBALANCE:
            return fail(RebalanceInProgressError, f"group {req.group_id!r} is rebalancing")
        if g.state == STABLE:
            out.send(src, gm.SyncGroupResponse(req.correlation_id, assignment=m.assignment,
                                               protocol_type=g.protocol_type, protocol_name=g.protocol))
            return
        m.sync = (src, req.correlation_id)
        if req.member_id != g.leader:
            return
        assignments = dict(req.assignments)
        for mid, mm in g.members.items():
            mm.assignment = assignments.get(mid, b"")
        generation = g.generation

        def stored(resp: ProduceResponse, o: Outbox, n: int) -> None:
            if g.state != COMPLETING_REBALANCE or g.generation != generation or self.groups.get(g.group_id) is not g:
                return
            if resp.error is None:
                g.transition_to(STABLE)
                for mm in g.members.values():
                    if mm.sync is not None:
                        o.send(mm.sync[0], gm.SyncGroupResponse(mm.sync[1], assignment=mm.assignment,
                                                                protocol_type=g.protocol_type,
                                                                protocol_name=g.protocol))
                        mm.sync = None
                return
            error, message = self._append_error(resp)
            for mm in g.members.values():
                if mm.sync is not None:
                    o.send(mm.sync[0], gm.SyncGroupResponse(mm.sync[1], error=error, message=message))
                    mm.sync = None
            self._prepare_rebalance(g, n, o, f"storing the assignment failed: {message}")

        self._append(g.partition, [self._group_metadata_record(g, now_ms)], out, stored)

    def _on_heartbeat(self, src: object, req: gm.HeartbeatRequest, now_ms: int, out: Outbox) -> None:
        err = self._not_here(req.group_id)
        g = self.groups.get(req.group_id)
        if err is None:
            err = self._member_error(g, req.group_id, req.member_id, req.generation_id, req.group_instance_id)
        if err is None:
            assert g is not None
            m = g.members[req.member_id]
            m.deadline_ms = now_ms + m.session_timeout_ms
            if g.state == PREPARING_REBALANCE:
                err = (RebalanceInProgressError, f"group {req.group_id!r} is rebalancing (generation {g.generation})")
        if err is not None:
            out.send(src, gm.HeartbeatResponse(req.correlation_id, error=err[0], message=err[1]))
        else:
            out.send(src, gm.HeartbeatResponse(req.correlation_id))

    def _on_leave(self, src: object, req: gm.LeaveGroupRequest, now_ms: int, out: Outbox) -> None:
        """LeaveGroup from a member; with no member id and a ``group_instance_id``, the admin removal of that
        static member (Kafka's removeMembersFromConsumerGroup)."""
        err = self._not_here(req.group_id)
        g = self.groups.get(req.group_id)
        member_id = req.member_id
        if err is None and g is not None and member_id in g.pending_members and req.group_instance_id is None:
            del g.pending_members[member_id]  # KIP-394: a member that was handed an id leaves before joining
            out.send(src, gm.LeaveGroupResponse(req.correlation_id))
            return
        if err is None and not member_id and req.group_instance_id is not None:
            member_id = g.static_members.get(req.group_instance_id, "") if g is not None else ""
            if not member_id:
                err = (UnknownMemberIdError, f"group {req.group_id!r} has no member with group instance id "
                       f"{req.group_instance_id!r}")
        elif err is None:
            err = self._current_member_error(g, req.group_id, member_id, req.group_instance_id)
        if err is not None:
            out.send(src, gm.LeaveGroupResponse(req.correlation_id, error=err[0], message=err[1]))
            return
        assert g is not None
        self._remove_member(g, member_id, now_ms, out, "left the group" if req.member_id else
                            f"was removed (group instance id {req.group_instance_id!r})")
        out.send(src, gm.LeaveGroupResponse(req.correlation_id))

    def _remove_member(self, g: Group, member_id: str, now_ms: int, out: Outbox, why: str) -> None:
        m = g.members.pop(member_id)
        log.info("group %r: member %s removed: %s", g.group_id, member_id, why)
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == member_id:
            del g.static_members[m.group_instance_id]
        for pending, resp in ((m.join, gm.JoinGroupResponse), (m.sync, gm.SyncGroupResponse)):
            if pending is not None:
                out.send(pending[0], resp(pending[1], error=UnknownMemberIdError,
                                          message=f"member {member_id!r} {why}"))
        if g.leader == member_id:
            g.leader = next(iter(g.members), None)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, now_ms, out, f"member {member_id} {why}")
        if g.state == PREPARING_REBALANCE:
            if not g.members:
                self._complete_join(g, now_ms, out)
            else:
                self._maybe_complete_join(g, now_ms, out)
