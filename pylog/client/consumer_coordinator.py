"""The consumer's group client (Kafka's ``ConsumerCoordinator``): membership, rebalances and commits.

Owns: the member's place in its group - the coordinator's node, the member
id and generation, the :class:`MemberState` (``UNJOINED`` -> ``JOINING`` ->
``SYNCING`` -> ``STABLE``), the assignors and whether rebalances are
cooperative (KIP-429), the last assignment (the sticky assignors' user
data), fencing of a static member (KIP-345) and the poll-timeout leave - and
the offset commits and fetches with the coordinator, numbered so that a
commit is never resent after a newer one of the same partition.

It is one of the three parts :class:`~pylog.client.consumer.Consumer` is
built from (with :class:`~pylog.client.subscription.SubscriptionState` and
:class:`~pylog.client.fetcher.Fetcher`): the consumer inherits it, and its
methods work on the consumer's own attributes. What it uses from the other
parts is declared under ``TYPE_CHECKING``, what the facade provides in
:class:`~pylog.client.consumer_base.ConsumerBase`. The protocol itself (Kafka's
AbstractCoordinator rules, eager and cooperative rebalances, static
membership) is described in the :mod:`pylog.client.consumer` docstring and
docs/consumer-groups.md.

Complexity: O(1) per heartbeat; O(partitions) per rebalance or commit; the
group leader runs the assignor over the whole group.
Durability: a commit is durable once acknowledged (acks=all on the offsets
partition's ISR); the member id and generation live in memory only.
Thread-safety: loop thread only (the facade marshals calls there).
"""
from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Pattern, Sequence, Tuple

from pylog.client._node import ClientFuture
from pylog.client.assignors import COOPERATIVE, Assignor, get_assignor, rebalance_protocol
from pylog.client.assignors import decode_subscription as decode_member_subscription
from pylog.client.assignors import encode_subscription as encode_member_subscription
from pylog.client.consumer_base import ConsumerBase
from pylog.client.subscription import TP
from pylog.client.types import OffsetAndMetadata
from pylog.errors import (
    CommitFailedError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnknownMemberIdError,
)
from pylog.replication import group_messages as gm
from pylog.replication import offsets_topic as ot
from pylog.replication.messages import NO_LEADER

logger = logging.getLogger(__name__)

_RETRIABLE_GROUP_ERRORS = ("NotCoordinatorError", "CoordinatorNotAvailableError", "CoordinatorLoadInProgressError",
                           "RequestTimedOutError", "NotEnoughReplicasError")


class MemberState(enum.Enum):
    """Where a group member is in the JoinGroup/SyncGroup protocol (Kafka's ``MemberState``)."""

    #: no JoinGroup in progress and no assignment from the group (also after leaving or a fence)
    UNJOINED = "unjoined"
    #: JoinGroup sent, waiting for its answer
    JOINING = "joining"
    #: SyncGroup sent, waiting for the assignment (heartbeats go on)
    SYNCING = "syncing"
    #: holds its generation's assignment
    STABLE = "stable"


class ConsumerCoordinator(ConsumerBase):
    """Group membership and offset commits of one consumer (a part of :class:`Consumer`)."""

    if TYPE_CHECKING:  # provided by the other parts (the facade's own: ConsumerBase)
        _topics: Optional[List[str]]
        _pattern: Optional[Pattern[str]]
        _manual: bool
        _assignment: List[TP]
        _positions: Dict[TP, int]

        def _matched_topics(self) -> List[str]: ...
        def _partition_counts(self, topics: Sequence[str]) -> Dict[str, int]: ...
        def _tell_listener(self, what: str, parts: Sequence[TP]) -> None: ...
        def _revoke(self, parts: Sequence[TP]) -> None: ...
        def _revoke_all(self, why: Optional[str] = None) -> None: ...
        def _set_assignment(self, parts: Sequence[TP]) -> None: ...
        def _send_fetches(self) -> None: ...

    def _init_coordinator(self, assignors: Sequence[Assignor]) -> None:
        self._assignors = list(assignors)
        #: KIP-429: keep partitions across a rebalance, give up only those that move
        self._cooperative = rebalance_protocol(self._assignors) == COOPERATIVE
        #: set once a newer member with the same group_instance_id fenced this one: poll/commit raise it
        self._fenced: Optional[FencedInstanceIdError] = None
        #: positions at the moment a poll timeout made this member leave; None while polling in time
        self._poll_expired: Optional[Dict[TP, int]] = None
        self._expired_detail = ""
        self.member_id = gm.NO_MEMBER
        self.generation = gm.NO_GENERATION
        self._coordinator: Optional[int] = None
        self._finding = False
        self._state = MemberState.UNJOINED
        self._rejoin = False
        self._joined_topics: Tuple[str, ...] = ()
        self._joined_counts: Dict[str, int] = {}
        self._last_heartbeat = 0
        self._hb_inflight = False
        #: (partitions, generation) of the last SyncGroup answer: the eager sticky assignor's user data
        self._last_assignment: Optional[Tuple[List[Tuple[str, int]], int]] = None
        #: (generation, member_id, assignment) after every completed rebalance (tests check ownership)
        self.assignment_history: List[Tuple[int, str, Tuple[TP, ...]]] = []
        self.rebalances = 0
        # Commit ordering (docs/consumer-groups.md, "Commit order"): every commit issued gets the next number;
        # per partition, the number of the newest commit issued for it. A commit is never sent again once a
        # newer one of any of its partitions was issued: arriving after it, it would move the offset back.
        self._commit_seq = 0
        self._commit_issued: Dict[TP, int] = {}

    def _give_up(self, parts: List[TP]) -> None:
        """Hand ``parts`` back in an orderly way: auto-commit their positions (when enabled), tell
        the listener they are revoked, then stop fetching them."""
        if self.enable_auto_commit:
            self._commit_internal({tp: self._positions[tp] for tp in parts if tp in self._positions}, None, auto=True)
        self._tell_listener("revoked", parts)
        self._revoke(parts)

    def _coordinate(self) -> None:
        """Drive group membership one step (on the loop): find the coordinator, join, sync, heartbeat."""
        if self._closed:
            return
        if self.group_id is None or self._manual:
            if self.group_id is None and not self._manual and (self._topics or self._pattern is not None):
                want = [(t, p) for t, n in self._partition_counts(self._matched_topics()).items() for p in range(n)]
                if set(want) != set(self._assignment):
                    self._set_assignment(want)
            return
        if self._topics is None and self._pattern is None:
            return
        if self._fenced is not None:
            return  # fatal: another consumer holds our group_instance_id (see _on_fenced)
        now = self._now()
        if self._poll_expired is not None:
            return  # left the group after a poll timeout: the next poll() rejoins
        if self._last_poll_ms is not None and (self.member_id or self._state != MemberState.UNJOINED) and \
                now - self._last_poll_ms > self.max_poll_interval_ms:
            self._on_poll_timeout(now)
            return
        if self._state == MemberState.STABLE:
            topics = tuple(self._matched_topics())
            if topics != self._joined_topics or self._partition_counts(topics) != self._joined_counts:
                self._rejoin = True  # the subscription now covers other topics or partitions
        if self._coordinator is None:
            if not self._finding and now >= self._next_attempt:
                self._find_coordinator()
            return
        if self._rejoin and self._state in (MemberState.UNJOINED, MemberState.STABLE):
            if now >= self._next_attempt:
                self._join()
            return
        # Heartbeats go on while the SyncGroup answer is awaited (Kafka's heartbeat thread runs in
        # COMPLETING_REBALANCE too): the coordinator expires a member whose session lapses while it
        # waits there (e.g. for a leader that died), while this member still reads its partitions.
        if self._state in (MemberState.STABLE, MemberState.SYNCING) and not self._hb_inflight and \
                now - self._last_heartbeat >= self.heartbeat_interval_ms:
            self._heartbeat()

    def _on_poll_timeout(self, now: int) -> None:
        """``poll`` was not called within ``max_poll_interval_ms``: leave the group (Kafka's heartbeat
        thread does the same), so the coordinator gives the partitions to the other members at once.

        The partitions are dropped here (this consumer fetches on the loop, so it would keep reading
        them); the listener hears ``on_partitions_lost`` and a commit fails with
        :class:`CommitFailedError` until the next ``poll`` rejoins.
        """
        self._poll_expired = {tp: self._positions[tp] for tp in self._assignment if tp in self._positions}
        self._expired_detail = (f"member {self.member_id!r} of group {self.group_id!r} (generation "
                                f"{self.generation}) left the group: {now - (self._last_poll_ms or 0)} ms since the last "
                                f"poll() exceeds max_poll_interval_ms={self.max_poll_interval_ms}")
        self._leave_group()
        self._rejoin = False
        self._revoke_all("lost")

    def _resume_after_poll_timeout(self) -> None:
        """The first ``poll`` after a poll timeout: rejoin as a new member."""
        if self._poll_expired is not None:
            self._poll_expired = None
            self._rejoin = True
            self._coordinate()

    def _coordinator_lost(self, why: str = "") -> None:
        self._coordinator = None
        self._next_attempt = self._now() + self.retry_backoff_ms
        if self._state in (MemberState.JOINING, MemberState.SYNCING):
            # The rebalance in progress went through that coordinator (a commit or heartbeat
            # found it gone): start it again with the next one; a late JoinGroup/SyncGroup
            # answer from the old one is then ignored.
            self._state = MemberState.UNJOINED
            self._rejoin = True

    def _find_coordinator(self) -> None:
        assert self.group_id is not None
        cfg = self.store.topics.get(ot.OFFSETS_TOPIC)
        target = None
        if cfg is not None:
            st = self.store.partitions.get((ot.OFFSETS_TOPIC, ot.partition_for_group(self.group_id, cfg.partitions)))
            if st is not None and st.leader != NO_LEADER:
                target = st.leader
        if target is None:
            target = self.store.controller_id
        if target is None:
            self._next_attempt = self._now() + self.retry_backoff_ms
            return
        self._finding = True

        def done(resp: Any) -> None:
            self._finding = False
            if resp is None or resp.error is not None:
                self._next_attempt = self._now() + self.retry_backoff_ms
                return
            self._coordinator = resp.node_id
            self._coordinate()

        self._node.request(target, gm.FindCoordinatorRequest(self.group_id, self._node.next_corr()),
                           self.request_timeout_ms, done)

    def _handle_group_error(self, error: type, message: str = "") -> None:
        """What a group error means for this member (Kafka's AbstractCoordinator rules)."""
        name = error.__name__
        if error is FencedInstanceIdError:
            self._on_fenced(message)
            return
        if name in _RETRIABLE_GROUP_ERRORS:
            self._coordinator_lost()
        elif error is UnknownMemberIdError:
            self.member_id, self.generation = gm.NO_MEMBER, gm.NO_GENERATION
        elif error is IllegalGenerationError:
            self.generation = gm.NO_GENERATION
        if error in (UnknownMemberIdError, IllegalGenerationError) and self._assignment:
            # Fenced: the group may have given these partitions to others already. Eager or cooperative,
            # they are lost at once (Kafka's onPartitionsLost), not kept and fetched until the JoinGroup.
            self._revoke_all("lost")
        self._next_attempt = self._now() + self.retry_backoff_ms
        if self._state != MemberState.UNJOINED:
            self._state = MemberState.UNJOINED
        self._rejoin = True

    def _on_fenced(self, message: str) -> None:
        """KIP-345: a newer consumer joined with this one's ``group_instance_id``. Fatal, as in Kafka: the
        partitions are lost at once, the consumer stops taking part in the group (rejoining would fence
        the other one in turn), and ``poll``/``commit`` raise :class:`FencedInstanceIdError` until closed."""
        if self._fenced is not None:
            return
        self._fenced = FencedInstanceIdError(
            f"consumer with group_instance_id {self.group_instance_id!r} (member {self.member_id!r}, group "
            f"{self.group_id!r}) was fenced by a newer member with the same group instance id: {message}")
        if self._assignment:
            self._revoke_all("lost")
        self.member_id, self.generation = gm.NO_MEMBER, gm.NO_GENERATION
        self._state = MemberState.UNJOINED
        self._rejoin = False
        self._signal()

    def _join(self) -> None:
        """Send JoinGroup. Eager: commit (auto-commit) and give up every partition first.
        Cooperative: give up only partitions no longer subscribed; the rest are kept (and keep
        being fetched) and listed as owned in the subscription, with the generation."""
        assert self.group_id is not None and self._coordinator is not None
        topics = tuple(self._matched_topics())
        counts = self._partition_counts(topics)
        if self._assignment and (self.generation < 0 or not self.member_id):
            self._revoke_all("lost")  # fenced or left: whatever it held may belong to others now
        if self._cooperative:
            gone = [tp for tp in self._assignment if tp[1] >= counts.get(tp[0], 0)]
            if gone:
                self._give_up(gone)
            sub = encode_member_subscription(list(topics), sorted(self._assignment), self.generation)
        else:
            if self._assignment and self.enable_auto_commit and self.generation >= 0:
                self._commit_internal(None, None, auto=True)
            self._revoke_all("revoked")
            sub = ot.encode_subscription(list(topics))
        if not self._cooperative and self._last_assignment is not None:
            # the eager sticky assignor's user data: the last assignment and its generation (Kafka's
            # StickyAssignor.subscriptionUserData), kept across revocations and fencing
            protocols = tuple((a.name, ot.encode_subscription(list(topics), a.subscription_user_data(
                *self._last_assignment))) for a in self._assignors)
        else:
            protocols = tuple((a.name, sub) for a in self._assignors)
        self._state = MemberState.JOINING
        self._rejoin = False
        self._joined_topics = topics
        self._joined_counts = counts
        req = gm.JoinGroupRequest(self.group_id, self._node.next_corr(), member_id=self.member_id,
                                  session_timeout_ms=self.session_timeout_ms,
                                  rebalance_timeout_ms=self.rebalance_timeout_ms, protocol_type="consumer",
                                  protocols=protocols, client_id=self.client_id,
                                  group_instance_id=self.group_instance_id)
        self._node.request(self._coordinator, req, self.rebalance_timeout_ms + 5_000, self._on_join)

    def _lost_during_rebalance(self) -> None:
        """A JoinGroup/SyncGroup got no answer: rejoin, through a coordinator looked up again."""
        self._state = MemberState.UNJOINED
        self._rejoin = True
        self._coordinator_lost()

    def _on_join(self, resp: Any) -> None:
        if self._closed or self._state != MemberState.JOINING:
            return
        if resp is None:
            self._lost_during_rebalance()
            return
        if resp.error is not None:
            if resp.error is InconsistentGroupProtocolError:
                self._error = resp.error(resp.message)
                self._signal()
            self._handle_group_error(resp.error, resp.message)
            return
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        assignments: Tuple[Tuple[str, bytes], ...] = ()
        if resp.leader == resp.member_id:
            subs = {mid: decode_member_subscription(meta) for mid, meta in resp.members}
            topics = sorted({t for s in subs.values() for t in s.topics})
            assignor = get_assignor(resp.protocol_name)
            plan = assignor.assign_members(self._partition_counts(topics), subs)
            assignments = tuple((mid, ot.encode_assignment(parts)) for mid, parts in plan.items())
        self._state = MemberState.SYNCING
        self._last_heartbeat = self._now()  # the JoinGroup answer restarted the session on the coordinator
        req = gm.SyncGroupRequest(self.group_id, self._node.next_corr(), generation_id=self.generation,  # type: ignore[arg-type]
                                  member_id=self.member_id, assignments=assignments,
                                  group_instance_id=self.group_instance_id)
        assert self._coordinator is not None
        self._node.request(self._coordinator, req, self.rebalance_timeout_ms + 5_000, self._on_sync)

    def _on_sync(self, resp: Any) -> None:
        if self._closed or self._state != MemberState.SYNCING:
            return
        if resp is None:
            self._lost_during_rebalance()
            return
        if resp.error is not None:
            self._handle_group_error(resp.error, resp.message)
            return
        parts = ot.decode_assignment(resp.assignment)
        self._state = MemberState.STABLE
        self._last_heartbeat = self._now()
        self.rebalances += 1
        self.assignment_history.append((self.generation, self.member_id, tuple(sorted(parts))))
        self._last_assignment = (sorted(parts), self.generation)
        if self._cooperative:
            # KIP-429: revoke only what this generation took away, then rejoin at once so the
            # next generation can hand it to its new owner; keep reading everything else.
            new, old = set(parts), set(self._assignment)
            revoked = [tp for tp in self._assignment if tp not in new]
            added = [tp for tp in parts if tp not in old]
            if revoked:
                self._give_up(revoked)
                self._rejoin = True
            self._tell_listener("assigned", added)
        else:
            self._tell_listener("assigned", parts)
        self._set_assignment(parts)
        self._changed.set()
        self._send_fetches()

    def _heartbeat(self) -> None:
        assert self.group_id is not None and self._coordinator is not None
        self._hb_inflight = True
        self._last_heartbeat = self._now()
        generation, member = self.generation, self.member_id
        req = gm.HeartbeatRequest(self.group_id, self._node.next_corr(), generation_id=generation, member_id=member,
                                  group_instance_id=self.group_instance_id)

        def done(resp: Any) -> None:
            self._hb_inflight = False
            if self._closed or self._state not in (MemberState.STABLE, MemberState.SYNCING) or self.generation != generation or \
                    self.member_id != member:  # (a static member's new id keeps the generation)
                return
            if resp is None:
                self._coordinator_lost()
                return
            if resp.error is not None:
                if resp.error is RebalanceInProgressError:
                    if self._state == MemberState.STABLE:  # while syncing, the SyncGroup answer says so too
                        self._rejoin = True
                        self._coordinate()
                else:
                    self._handle_group_error(resp.error, resp.message)

        self._node.request(self._coordinator, req, self.request_timeout_ms, done)

    def _leave_group(self, answered: Optional[Callable[[], None]] = None) -> bool:
        """Leave the group (close, unsubscribe, assign, poll timeout). A static member sends no LeaveGroup
        (Kafka's rule for ``group.instance.id``): it keeps its slot until its session times out, so a
        restart within ``session_timeout_ms`` causes no rebalance; it only forgets its member id.
        Returns whether a LeaveGroup was sent; ``answered()`` runs when it is answered or times out."""
        sent = False
        if self.group_id is not None and self.member_id and self._coordinator is not None and \
                self.group_instance_id is None:
            req = gm.LeaveGroupRequest(self.group_id, self._node.next_corr(), member_id=self.member_id)
            self._node.request(self._coordinator, req, self.request_timeout_ms,
                               (lambda resp: answered()) if answered is not None else (lambda resp: None))
            sent = True
        self.member_id, self.generation = gm.NO_MEMBER, gm.NO_GENERATION
        self._state = MemberState.UNJOINED
        return sent

    def _fetch_committed(self, tps: Sequence[TP], callback: Callable[[Optional[Dict[TP, Optional[OffsetAndMetadata]]],
                                                                       Optional[BaseException]], None]) -> None:
        """OffsetFetch from the coordinator (looked up first when unknown); ``callback(result, error)``."""
        if self.group_id is None:
            callback({tp: None for tp in tps}, None)
            return
        if self._coordinator is None:
            if not self._finding:
                self._find_coordinator()
            callback(None, CoordinatorNotAvailableError(f"coordinator of group {self.group_id!r} not known yet"))
            return
        # KIP-447: a read_committed consumer asks for stable offsets only (Kafka's requireStable), so it does
        # not start from an offset that a pending transaction is about to replace
        stable = getattr(self, "isolation_level", "read_uncommitted") == "read_committed"
        req = gm.OffsetFetchRequest(self.group_id, self._node.next_corr(), partitions=tuple(tps), require_stable=stable)

        def done(resp: Any) -> None:
            if resp is None:
                self._coordinator_lost()
                callback(None, RequestTimedOutError(f"OffsetFetch for group {self.group_id!r} timed out"))
                return
            if resp.error is not None:
                if resp.error.__name__ in _RETRIABLE_GROUP_ERRORS:
                    self._coordinator_lost()
                callback(None, resp.error(resp.message))
                return
            errors = getattr(resp, "partition_errors", ())
            if errors:  # UnstableOffsetCommitError (retriable): as Kafka's, the whole fetch is tried again
                t, p, error = errors[0]
                callback(None, (error or CoordinatorNotAvailableError)(
                    f"committed offset of {t}-{p} in group {self.group_id!r} is not stable yet "
                    f"({len(errors)} partitions; a transaction's offsets wait for its marker)"))
                return
            callback({(t, p): (OffsetAndMetadata(o, m, e) if o >= 0 else None) for t, p, o, e, m in resp.offsets}, None)

        self._node.request(self._coordinator, req, self.request_timeout_ms, done)

    def _commit_internal(self, offsets: Optional[Dict[TP, Any]], future: Optional[ClientFuture], *, auto: bool = False,
                         deadline: Optional[int] = None, seq: int = 0) -> None:
        """On the loop: send an OffsetCommit (retrying retriable errors until ``deadline``, unless a newer
        commit of one of its partitions was issued meanwhile). ``seq``: this commit's number (0: a new one)."""
        if self.group_id is None:
            if future is not None:
                future.set_exception(InvalidGroupIdError("commit needs a group_id (this consumer has none)"))
            return
        if self._fenced is not None and not self._manual:
            if future is not None:
                future.set_exception(self._fenced)
            return
        if self._poll_expired is not None and not self._manual:
            what = sorted(offsets if offsets is not None else self._poll_expired)
            if future is not None:
                future.set_exception(CommitFailedError(
                    f"commit of {', '.join(f'{t}-{p}' for t, p in what) or 'no partitions'} refused: "
                    f"{self._expired_detail}; the group may have given them to another member. Call poll() "
                    f"to rejoin, or raise max_poll_interval_ms / lower max_poll_records"))
            return
        if offsets is None:
            offsets = {tp: self._positions[tp] for tp in self._assignment if tp in self._positions}
        rows = []
        for tp, v in offsets.items():
            if isinstance(v, OffsetAndMetadata):
                rows.append((tp[0], tp[1], v.offset, v.leader_epoch, v.metadata))
            else:
                rows.append((tp[0], tp[1], int(v), -1, ""))
        if not rows:
            if future is not None:
                future.set_result({})
            return
        deadline = deadline if deadline is not None else self._now() + self.request_timeout_ms
        plain = {tp: (v.offset if isinstance(v, OffsetAndMetadata) else int(v)) for tp, v in offsets.items()}
        if not seq:
            self._commit_seq += 1
            seq = self._commit_seq
            for tp in offsets:
                self._commit_issued[tp] = seq

        def retry(err: BaseException) -> None:
            if self._closed or self._now() >= deadline or auto:
                if future is not None:
                    future.set_exception(err)
                return
            newer = sorted(tp for tp in offsets if self._commit_issued.get(tp, 0) > seq)
            if newer:
                # Kafka's rule (its consumer never resends a commit once a newer one was sent): this one,
                # arriving after the newer commit, would move the offsets back.
                if future is not None:
                    future.set_exception(type(err)(
                        f"{err}; not retried: a newer commit of {', '.join(f'{t}-{p}' for t, p in newer)} was "
                        f"issued since, and this one arriving after it would move the offset back"))
                return
            self.scheduler.call_later(self.retry_backoff_ms,
                                      lambda: self._commit_internal(offsets, future, deadline=deadline, seq=seq))

        if self._coordinator is None:
            if not self._finding:
                self._find_coordinator()
            retry(CoordinatorNotAvailableError(f"coordinator of group {self.group_id!r} not found"))
            return
        if self._manual or self._state != MemberState.STABLE and self.generation < 0:
            generation, member = gm.NO_GENERATION, gm.NO_MEMBER
        else:
            generation, member = self.generation, self.member_id
        req = gm.OffsetCommitRequest(self.group_id, self._node.next_corr(), generation_id=generation,
                                     member_id=member, offsets=tuple(rows),
                                     group_instance_id=self.group_instance_id if member else None)

        def done(resp: Any) -> None:
            if resp is None:
                lost = self._node.failure
                self._coordinator_lost()
                retry(lost if lost is not None else
                      RequestTimedOutError(f"OffsetCommit for group {self.group_id!r} timed out"))
                return
            if resp.error is not None:
                err = resp.error(resp.message)
                if resp.error.__name__ in _RETRIABLE_GROUP_ERRORS:
                    self._coordinator_lost()
                    retry(err)
                    return
                if resp.error is FencedInstanceIdError:
                    if member == self.member_id:  # (not about an older member id of this same consumer)
                        self._handle_group_error(resp.error, resp.message)
                        err = self._fenced or err
                elif resp.error in (IllegalGenerationError, UnknownMemberIdError):
                    if generation == self.generation:  # (not a late answer about an older generation)
                        self._handle_group_error(resp.error)
                elif resp.error is RebalanceInProgressError and not self._cooperative:
                    # (cooperative: the rebalance under way completes on its own; rejoining after
                    # it would only start another one)
                    self._rejoin = True
                if future is not None:
                    future.set_exception(err)
                return
            if future is not None:
                future.set_result(plain)

        self._node.request(self._coordinator, req, self.request_timeout_ms, done)



__all__ = ["ConsumerCoordinator", "MemberState"]
