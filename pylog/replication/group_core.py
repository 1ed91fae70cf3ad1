"""What every part of the group coordinator shares: its state, routing and writes to ``__consumer_offsets``.

:class:`CoordinatorCore` holds the coordinator's state (the loaded offsets
partitions, the groups, the appends in flight, counters and expiry settings),
finds a group's offsets partition, writes records to it with ``acks=all``
(:meth:`~CoordinatorCore._append`, answered through
:meth:`~CoordinatorCore.on_produce_response`), and holds the checks that
membership, offsets and admin requests all apply (unknown or stale members, a
group being deleted, removal of an Empty group without offsets). The request
handlers are in :mod:`pylog.replication.group_membership` and
:mod:`pylog.replication.group_offsets`, put together by
:class:`pylog.replication.group_coordinator.GroupCoordinator`.

Complexity: O(1) per helper except :meth:`~CoordinatorCore._subscribed_topics` (O(members)).
Thread-safety: none; the broker's loop thread drives it.
"""
from __future__ import annotations

import logging
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from pylog.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    RequestTimedOutError,
    UnknownMemberIdError,
)
from pylog.replication import offsets_topic as ot
from pylog.replication.group_state import DEAD, EMPTY, Group
from pylog.replication.messages import ACKS_ALL, Outbox, ProduceRequest, ProduceResponse
from pylog.record import Record
from pylog.record.codec import encode_batch

log = logging.getLogger(__name__)


class CoordinatorCore:
    """The coordinator's shared state and helpers (see the module docstring)."""

    #: Kafka's ``offsets.retention.minutes`` (7 days) in ms: see :meth:`_expire_offsets`
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    #: Kafka's ``offsets.retention.check.interval.ms``: how often :meth:`tick` looks for expired offsets
    offsets_retention_check_interval_ms: int = 600_000
    _next_expiry_check_ms: int = -1
    #: offsets expired, and groups removed (Empty without offsets) by expiry or OffsetDelete, since start
    expired_offsets: int = 0
    expired_groups: int = 0

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
        #: (offsets partition, producer id) -> the producer's TxnOffsetCommit appends in flight there: each a
        #: one-element list holding None, or the outcome (True commit, False abort) of a marker that came meanwhile
        self._txn_appends: Dict[Tuple[int, int], List[List[Optional[bool]]]] = {}
        #: (offsets partition, producer id) -> the highest producer epoch seen there in TxnOffsetCommits,
        #: records and markers since the partition was loaded: an older epoch is a zombie's
        #: (``InvalidProducerEpochError``, the partition's check in Kafka; see :meth:`_on_txn_offset_commit`)
        self._producer_epochs: Dict[Tuple[int, int], int] = {}
        #: offsets partition -> the highest record offset known in it (positions for appends answered
        #: without a base offset)
        self._log_pos: Dict[int, int] = {}

    def partition_of(self, group_id: str) -> int:
        return ot.partition_for_group(group_id, self.num_partitions)

    def _not_here(self, group_id: str) -> Optional[Tuple[type, str]]:
        p = self.partition_of(group_id)
        if p not in self.loaded:
            return (NotCoordinatorError, f"broker {self.broker_id} is not the coordinator of group {group_id!r} "
                    f"({ot.OFFSETS_TOPIC}-{p})")
        return None

    def _append(self, partition: int, records: List[Record], out: Outbox,
                done: Callable[[ProduceResponse, Outbox, int], None],
                producer: Optional[Tuple[int, int, int]] = None) -> None:
        """Write ``records`` to our own offsets partition with acks=all; ``done`` runs on the response.

        ``producer``: ``(producer id, epoch, now_ms)`` of a TxnOffsetCommit: the records go as one
        *transactional* batch of that producer (Kafka's ``storeOffsets`` with a producer id), without a
        sequence (Kafka appends it with origin COORDINATOR, which checks no sequence).
        """
        self._corr += 1
        self._pending[self._corr] = done
        data: Sequence[object] = records
        if producer is not None:
            pid, epoch, now_ms = producer
            data = bytes(encode_batch(records, now_ms=now_ms, producer_id=pid, producer_epoch=epoch, transactional=True))
        out.send(self.broker_id, ProduceRequest(topic=ot.OFFSETS_TOPIC, partition=partition, records=data,
                                                acks=ACKS_ALL, timeout_ms=self.request_timeout_ms,
                                                correlation_id=self._corr))

    def _positions(self, resp: ProduceResponse, n: int) -> List[int]:
        """The offsets of the ``n`` records an acknowledged append wrote (from its base offset; one past the
        highest known offset of the partition when the answer has none, as a test's hand-made answer)."""
        base = resp.base_offset
        known = self._log_pos.get(resp.partition, -1)
        if base < 0:
            base = known + 1
        self._log_pos[resp.partition] = max(known, base + n - 1)
        return list(range(base, base + n))

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

    def on_produce_response(self, resp: ProduceResponse, now_ms: int) -> Outbox:
        out = Outbox()
        done = self._pending.pop(resp.correlation_id, None)
        if done is not None:
            done(resp, out, now_ms)
        return out

    def owns_correlation(self, correlation_id: int) -> bool:
        return correlation_id in self._pending

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

    def _existing_group(self, group_id: str) -> Tuple[Optional[Group], Optional[Tuple[type, str]]]:
        """The group an admin request (DeleteGroups, OffsetDelete) names, and the error to answer with, if any:
        not the coordinator, no such group, or the group is being deleted."""
        err = self._not_here(group_id)
        g = self.groups.get(group_id)
        if err is None and g is None:
            err = (GroupIdNotFoundError, f"group {group_id!r} does not exist")
        if err is None and g is not None and g.state == DEAD:
            err = self._being_deleted(g)
        return g, err

    @staticmethod
    def _being_deleted(g: Group) -> Tuple[type, str]:
        return (CoordinatorNotAvailableError, f"group {g.group_id!r} is being deleted (its tombstones are being "
                f"written to {ot.OFFSETS_TOPIC}-{g.partition}); retry")

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

    def _maybe_dead(self, g: Group, now_ms: int, out: Outbox) -> bool:
        """An Empty group without offsets (and no commit in flight) is removed, as Kafka's cleanup makes it
        Dead; a group that ever had a generation gets a tombstone for its metadata too."""
        if g.state != EMPTY or g.members or g.offsets or g.pending_commits or g.pending_members or \
                g.pending_txn or g.txn_in_flight or self.groups.get(g.group_id) is not g:
            return False
        g.transition_to(DEAD)
        del self.groups[g.group_id]
        self._delay_until.pop(g.group_id, None)
        self.expired_groups += 1
        log.info("group %r: removed (Empty, no offsets left)", g.group_id)
        if g.generation > 0:
            self._append(g.partition, [Record(None, key=ot.encode_group_metadata_key(g.group_id))], out,
                         lambda r, o, n: None)
        return True

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
