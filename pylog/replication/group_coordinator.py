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

Inputs: :meth:`handle` (a request), :meth:`on_produce_response`,
:meth:`tick` (timers), :meth:`load` / :meth:`unload`; each returns an
:class:`~pylog.replication.messages.Outbox`.

Complexity: O(members) per group event; O(records) to load a partition.
Durability: a commit is acknowledged only after the offsets partition's ISR
has it (acks=all); it survives any ``RF - min_insync_replicas`` broker crashes.
Thread-safety: none; the broker's one loop thread drives it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from pylog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.messages import ACKS_ALL, Outbox, ProduceRequest, ProduceResponse
from pylog.record import Record

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

TP = Tuple[str, int]


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Tuple[Tuple[str, bytes], ...]
    deadline_ms: int
    join: Optional[Tuple[object, int]] = None  # (source, correlation id) of a pending JoinGroup
    sync: Optional[Tuple[object, int]] = None  # of a pending SyncGroup
    assignment: bytes = b""
    #: KIP-345: the member's ``group.instance.id`` (None: a dynamic member)
    group_instance_id: Optional[str] = None

    def metadata(self, protocol: Optional[str]) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class Group:
    group_id: str
    partition: int
    state: str = EMPTY
    generation: int = 0
    protocol_type: Optional[str] = None
    protocol: Optional[str] = None
    leader: Optional[str] = None
    members: Dict[str, Member] = field(default_factory=dict)
    offsets: Dict[TP, ot.OffsetCommitValue] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    #: when the group last became Empty (its GroupMetadata ``current_state_timestamp``); -1: unknown
    empty_since_ms: int = -1
    #: partitions with an OffsetCommit append in flight (count per partition): offset expiry skips them
    pending_commits: Dict[TP, int] = field(default_factory=dict)
    #: OffsetCommits started so far, and which of them wrote each in-memory offset (0: loaded from the
    #: log): an OffsetDelete removes the values of commits started before it, never of later ones
    commits_started: int = 0
    written_by: Dict[TP, int] = field(default_factory=dict)
    #: KIP-345: group.instance.id -> the member id that currently holds it (Kafka's ``staticMembers``)
    static_members: Dict[str, str] = field(default_factory=dict)
    #: KIP-394: member ids handed out with ``MemberIdRequiredError`` and not yet used to join -> the time
    #: (ms) they expire (their session timeout), as Kafka's ``pendingMembers``; never in a rebalance
    pending_members: Dict[str, int] = field(default_factory=dict)

    def _check(self) -> None:
        assert self.state in (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD), self.state
        if self.state in (COMPLETING_REBALANCE, STABLE):
            assert self.members and self.leader in self.members, (self.group_id, self.leader)
        if self.state in (EMPTY, DEAD):
            assert not self.members, self.group_id
        assert self.generation >= 0
        assert all(n > 0 for n in self.pending_commits.values()), self.pending_commits
        for instance, mid in self.static_members.items():
            assert mid in self.members and self.members[mid].group_instance_id == instance, (instance, mid)
        assert all(m.group_instance_id is None or self.static_members.get(m.group_instance_id) == mid
                   for mid, m in self.members.items()), self.static_members
        assert not (set(self.pending_members) & set(self.members)), self.pending_members


class GroupCoordinator:
    """The coordinator role of broker ``broker_id`` (see the module docstring).

    ``request_timeout_ms`` bounds the appends to the offsets partition.
    """

    def __init__(self, broker_id: int, *, request_timeout_ms: int = 30_000, initial_rebalance_delay_ms: int = 0,
                 incarnation: int = 0):
        self.broker_id = broker_id
        self.request_timeout_ms = request_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        #: offsets partition -> the leader epoch whose log was loaded
        self.loaded: Dict[int, int] = {}
        self.num_partitions = ot.DEFAULT_OFFSETS_PARTITIONS
        self.groups: Dict[str, Group] = {}
        self._pending: Dict[int, Callable[[ProduceResponse, Outbox, int], None]] = {}
        # Apart from the replica manager's ids (bit 62), and unique across the broker's incarnations:
        # an append answered after a crash must not complete a request of the restarted coordinator.
        self._corr = (1 << 62) | (incarnation << 32)
        self._ids = 0
        self.rebalances = 0
        self._delay_until: Dict[str, int] = {}  # group.initial.rebalance.delay.ms per group

    # ------------------------------------------------------------- helpers
    def partition_of(self, group_id: str) -> int:
        return ot.partition_for_group(group_id, self.num_partitions)

    def _not_here(self, group_id: str) -> Optional[Tuple[type, str]]:
        p = self.partition_of(group_id)
        if p not in self.loaded:
            return (NotCoordinatorError, f"broker {self.broker_id} is not the coordinator of group {group_id!r} "
                    f"({ot.OFFSETS_TOPIC}-{p})")
        return None

    def _append(self, partition: int, records: List[Record], out: Outbox,
                done: Callable[[ProduceResponse, Outbox, int], None]) -> None:
        """Write ``records`` to our own offsets partition with acks=all; ``done`` runs on the response."""
        self._corr += 1
        self._pending[self._corr] = done
        out.send(self.broker_id, ProduceRequest(topic=ot.OFFSETS_TOPIC, partition=partition, records=records,
                                                acks=ACKS_ALL, timeout_ms=self.request_timeout_ms,
                                                correlation_id=self._corr))

    @staticmethod
    def _append_error(resp: ProduceResponse) -> Tuple[type, str]:
        """Kafka's mapping of a failed offsets-topic append to the error the client sees."""
        if resp.error in (NotLeaderError,):
            return NotCoordinatorError, f"lost leadership of {ot.OFFSETS_TOPIC}-{resp.partition}: {resp.message}"
        if resp.error in (NotEnoughReplicasError, NotEnoughReplicasAfterAppendError, RequestTimedOutError):
            return CoordinatorNotAvailableError, f"{ot.OFFSETS_TOPIC}-{resp.partition}: {resp.message}"
        return resp.error or CoordinatorNotAvailableError, resp.message

    def _group_metadata_record(self, g: Group, now_ms: int) -> Record:
        members = tuple(
            ot.MemberMetadata(m.member_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms,
                              m.metadata(g.protocol), m.assignment, m.group_instance_id)
            for m in g.members.values()
        )
        value = ot.GroupMetadataValue(g.protocol_type or "", g.generation, g.protocol, g.leader, now_ms, members)
        return Record(ot.encode_group_metadata_value(value), key=ot.encode_group_metadata_key(g.group_id))

    # -------------------------------------------------------------- dispatch
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
        return out

    def on_produce_response(self, resp: ProduceResponse, now_ms: int) -> Outbox:
        out = Outbox()
        done = self._pending.pop(resp.correlation_id, None)
        if done is not None:
            done(resp, out, now_ms)
        return out

    def owns_correlation(self, correlation_id: int) -> bool:
        return correlation_id in self._pending

    # ------------------------------------------------------------------ join
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
    def _current_member_error(g: Optional[Group], group_id: str, member_id: str,
                              instance_id: Optional[str]) -> Optional[Tuple[type, str]]:
        """Kafka's ``validateCurrentMember``: a request naming ``instance_id`` must come from the member id
        that holds it now (else ``FencedInstanceIdError``: a newer member took it over; or
        ``UnknownMemberIdError`` when nobody holds it), and ``member_id`` must be a member."""
        if instance_id is not None:
            current = g.static_members.get(instance_id) if g is not None else None
            if current is not None and current != member_id:
                return (FencedInstanceIdError, f"group {group_id!r}: member {member_id!r} with group instance id "
                        f"{instance_id!r} is fenced: the instance id now belongs to member {current!r}")
            if current is None:
                return (UnknownMemberIdError, f"group {group_id!r}: no member holds group instance id "
                        f"{instance_id!r} (member {member_id!r} is unknown)")
        if g is None or member_id not in g.members:
            return (UnknownMemberIdError, f"member {member_id!r} is unknown to group {group_id!r}")
        return None

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
        g.state = PREPARING_REBALANCE
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
            g.state, g.leader, g.protocol = EMPTY, None, None
            g.empty_since_ms = now_ms
            self._append(g.partition, [self._group_metadata_record(g, now_ms)], out, lambda r, o, n: None)
            return
        if g.leader not in g.members or g.members[g.leader].join is None:
            g.leader = next(mid for mid, m in g.members.items() if m.join is not None)
        g.protocol = self._select_protocol(g)
        g.state = COMPLETING_REBALANCE
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

    # ------------------------------------------------------------------ sync
    def _member_error(self, g: Optional[Group], group_id: str, member_id: str, generation: int,
                      instance_id: Optional[str] = None) -> Optional[Tuple[type, str]]:
        err = self._current_member_error(g, group_id, member_id, instance_id)
        if err is not None:
            return err
        assert g is not None
        if generation != g.generation:
            return (IllegalGenerationError, f"group {group_id!r}: generation {generation} of member {member_id!r} "
                    f"is not the current generation {g.generation}")
        return None

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
                g.state = STABLE
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

    # ------------------------------------------------------------ heartbeat
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

    # --------------------------------------------------------------- offsets
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
            _commit_done(group, values)
            if resp.error is not None:
                error, message = self._append_error(resp)
                o.send(src, gm.OffsetCommitResponse(req.correlation_id, error=error, message=message))
                return
            if self.groups.get(group.group_id) is group:
                group.offsets.update(values)
                for tp in values:
                    group.written_by[tp] = seq
            o.send(src, gm.OffsetCommitResponse(req.correlation_id))

        g.commits_started += 1
        seq = g.commits_started
        _commit_started(g, values)
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
        for tp in wanted:
            v = have.get(tp)
            rows.append((tp[0], tp[1], v.offset, v.leader_epoch, v.metadata) if v is not None else (tp[0], tp[1], -1, -1, ""))
        out.send(src, gm.OffsetFetchResponse(req.correlation_id, offsets=tuple(rows)))

    def _on_delete(self, src: object, req: gm.DeleteGroupsRequest, now_ms: int, out: Outbox) -> None:
        err = self._not_here(req.group_id)
        g = self.groups.get(req.group_id)
        if err is None and g is None:
            err = (GroupIdNotFoundError, f"group {req.group_id!r} does not exist")
        if err is None and g is not None and g.state == DEAD:
            err = self._being_deleted(g)
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
        doomed = sorted(set(g.offsets) | set(g.pending_commits))
        records = [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p)) for t, p in doomed]
        records.append(Record(None, key=ot.encode_group_metadata_key(g.group_id)))
        g.state = DEAD
        group = g

        def stored(resp: ProduceResponse, o: Outbox, n: int) -> None:
            mine = self.groups.get(group.group_id) is group
            if resp.error is not None:
                if mine:
                    group.state = EMPTY  # not deleted (maybe partly written): a retry deletes it again
                error, message = self._append_error(resp)
                o.send(src, gm.DeleteGroupsResponse(req.correlation_id, error=error, message=message))
                return
            if mine:
                del self.groups[group.group_id]
                self._delay_until.pop(group.group_id, None)
            o.send(src, gm.DeleteGroupsResponse(req.correlation_id))

        self._append(g.partition, records, out, stored)

    @staticmethod
    def _being_deleted(g: Group) -> Tuple[type, str]:
        return (CoordinatorNotAvailableError, f"group {g.group_id!r} is being deleted (its tombstones are being "
                f"written to {ot.OFFSETS_TOPIC}-{g.partition}); retry")

    # ----------------------------------------------------------------- timers
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

    # ----------------------------------------------------------- load/unload
    def load(self, partition: int, leader_epoch: int, entries: Iterable[Tuple[Optional[bytes], Optional[bytes]]],
             now_ms: int) -> Outbox:
        """Rebuild the groups of ``partition`` from its log (``(key, value)`` pairs in offset order)."""
        out = self.unload(partition)
        offsets: Dict[str, Dict[TP, ot.OffsetCommitValue]] = {}
        metas: Dict[str, Optional[ot.GroupMetadataValue]] = {}
        for key, value in entries:
            if key is None:
                continue
            k = ot.decode_key(key)
            if isinstance(k, ot.OffsetCommitKey):
                slot = offsets.setdefault(k.group, {})
                if value is None:
                    slot.pop((k.topic, k.partition), None)
                else:
                    slot[(k.topic, k.partition)] = ot.decode_offset_commit_value(value)
            else:
                if value is None:
                    # As Kafka's loader: a group tombstone removes the group's metadata only. Its offsets
                    # have their own tombstones (written before it); one that has none stays.
                    metas[k.group] = None
                else:
                    metas[k.group] = ot.decode_group_metadata_value(value)
        # A group exists if it has metadata or offsets left (all its offsets tombstoned: gone, as in Kafka).
        for gid in {g for g, o in offsets.items() if o} | {g for g, v in metas.items() if v is not None}:
            g = Group(gid, partition)
            g.offsets = offsets.get(gid, {})
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
                    g.state = STABLE
                else:
                    g.empty_since_ms = meta.current_state_timestamp
            self.groups[gid] = g
        self.loaded[partition] = leader_epoch
        return out

    def unload(self, partition: int) -> Outbox:
        """Stop serving ``partition``'s groups; pending joins and syncs get ``NotCoordinatorError``."""
        out = Outbox()
        self.loaded.pop(partition, None)
        why = f"broker {self.broker_id} no longer leads {ot.OFFSETS_TOPIC}-{partition}"
        for gid in [gid for gid, g in self.groups.items() if g.partition == partition]:
            g = self.groups.pop(gid)
            for m in g.members.values():
                if m.join is not None:
                    out.send(m.join[0], gm.JoinGroupResponse(m.join[1], error=NotCoordinatorError, message=why))
                if m.sync is not None:
                    out.send(m.sync[0], gm.SyncGroupResponse(m.sync[1], error=NotCoordinatorError, message=why))
        return out

    # ------------------------------------------------------------ group admin
    #: Kafka's ``offsets.retention.minutes`` (7 days) in ms: see :meth:`_expire_offsets`
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    #: Kafka's ``offsets.retention.check.interval.ms``: how often :meth:`tick` looks for expired offsets
    offsets_retention_check_interval_ms: int = 600_000
    _next_expiry_check_ms: int = -1
    #: offsets expired, and groups removed (Empty without offsets) by expiry or OffsetDelete, since start
    expired_offsets: int = 0
    expired_groups: int = 0

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

    @staticmethod
    def _subscribed_topics(g: Group) -> Optional[Set[str]]:
        """Topics the members of a ``consumer`` group subscribe to (None: not a consumer group, or unreadable)."""
        if g.protocol_type != "consumer":
            return None
        topics: Set[str] = set()
        for m in g.members.values():
            meta = m.metadata(g.protocol) if g.protocol is not None else (m.protocols[0][1] if m.protocols else b"")
            try:
                topics.update(ot.decode_subscription(meta)[0])
            except Exception:
                return None
        return topics

    def _on_offset_delete(self, src: object, req: gm.OffsetDeleteRequest, now_ms: int, out: Outbox) -> None:
        """Kafka's OffsetDelete: a consumer group may drop offsets of topics none of its members subscribes to
        (``GroupSubscribedToTopicError`` per partition otherwise); any other group only while Empty."""
        def fail(error: type, message: str) -> None:
            out.send(src, gm.OffsetDeleteResponse(req.correlation_id, error=error, message=message))

        err = self._not_here(req.group_id)
        g = self.groups.get(req.group_id)
        if err is None and g is None:
            err = (GroupIdNotFoundError, f"group {req.group_id!r} does not exist")
        if err is None and g is not None and g.state == DEAD:
            err = self._being_deleted(g)
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
        gone = sorted(tp for tp in dict.fromkeys(eligible) if tp in g.offsets or tp in g.pending_commits)
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
                self._maybe_dead(group, n, o)
            o.send(src, gm.OffsetDeleteResponse(req.correlation_id, partition_errors=tuple(rows)))

        self._append(g.partition, [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p)) for t, p in gone],
                     out, stored)

    def _maybe_dead(self, g: Group, now_ms: int, out: Outbox) -> bool:
        """An Empty group without offsets (and no commit in flight) is removed, as Kafka's cleanup makes it
        Dead; a group that ever had a generation gets a tombstone for its metadata too."""
        if g.state != EMPTY or g.members or g.offsets or g.pending_commits or g.pending_members or \
                self.groups.get(g.group_id) is not g:
            return False
        g.state = DEAD
        del self.groups[g.group_id]
        self._delay_until.pop(g.group_id, None)
        self.expired_groups += 1
        if g.generation > 0:
            self._append(g.partition, [Record(None, key=ot.encode_group_metadata_key(g.group_id))], out,
                         lambda r, o, n: None)
        return True

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
                if tp in g.pending_commits or (keep is not None and tp[0] in keep):
                    continue
                if (now_ms >= v.expire_timestamp if v.expire_timestamp >= 0 else now_ms - base(v) >= retention):
                    expired.append(tp)
            for tp in expired:
                del g.offsets[tp]
                g.written_by.pop(tp, None)
            self.expired_offsets += len(expired)
            if expired:
                self._append(g.partition, [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p))
                                           for t, p in sorted(expired)], out, lambda r, o, n: None)
            self._maybe_dead(g, now_ms, out)

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
            dropped = sorted(tp for tp in g.offsets if tp[0] in gone)
            for tp in dropped:
                del g.offsets[tp]
                g.written_by.pop(tp, None)
            if dropped:
                self._append(g.partition, [Record(None, key=ot.encode_offset_commit_key(g.group_id, t, p))
                                           for t, p in dropped], out, lambda r, o, n: None)
                self._maybe_dead(g, now_ms, out)
        return out

    def _check(self) -> None:
        for gid, g in self.groups.items():
            assert g.group_id == gid
            assert g.partition in self.loaded, (gid, g.partition)
            g._check()


def _commit_started(g: Group, values: Dict[TP, ot.OffsetCommitValue]) -> None:
    for tp in values:
        g.pending_commits[tp] = g.pending_commits.get(tp, 0) + 1


def _commit_done(g: Group, values: Dict[TP, ot.OffsetCommitValue]) -> None:
    for tp in values:
        left = g.pending_commits.get(tp, 0) - 1
        if left > 0:
            g.pending_commits[tp] = left
        else:
            g.pending_commits.pop(tp, None)


__all__ = ["GroupCoordinator", "Group", "Member", "EMPTY", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "STABLE", "DEAD"]
