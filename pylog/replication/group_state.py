"""The consumer-group state machine's data: :class:`GroupState`, :class:`Group` and :class:`Member`.

Kafka's classic group states (``GroupState`` in Kafka's group coordinator):

* ``Empty`` - no members; offsets may remain (and expire, KIP-211);
* ``PreparingRebalance`` - a join changed the group: waiting for every member to rejoin;
* ``CompletingRebalance`` - the generation is bumped, waiting for the leader's SyncGroup;
* ``Stable`` - every member has its assignment;
* ``Dead`` - removed (deleted, or Empty without offsets), or being deleted.

:data:`TRANSITIONS` lists each state's possible previous states (Kafka's
``validPreviousStates``); :meth:`Group.transition_to` logs each move (logger
``pylog.replication.group_state``, DEBUG). :mod:`pylog.replication.group_membership`
drives the rebalance states, :mod:`pylog.replication.group_offsets` the offsets,
:mod:`pylog.replication.group_coordinator` deletion, load and unload.

Thread-safety: none; the broker's loop thread owns every group.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Mapping, Optional, Tuple

from pylog.replication import offsets_topic as ot

log = logging.getLogger(__name__)

TP = Tuple[str, int]
#: a transactional offset waiting for its marker: the value, the offset of its record in ``__consumer_offsets``
#: and the number of the TxnOffsetCommit that wrote it (``Group.commits_started``; 0: loaded from the log)
PendingTxnOffset = Tuple[ot.OffsetCommitValue, int, int]


class GroupState(str, enum.Enum):
    """A group's state; a ``str`` whose value is Kafka's name (what DescribeGroups and ListGroups report)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:  # Kafka's name in messages and f-strings, on every Python version
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

#: state -> the states a group may move to it from (Kafka's ``validPreviousStates``, plus this coordinator's
#: return of a group whose deletion failed from Dead to Empty)
TRANSITIONS: Mapping[GroupState, FrozenSet[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE, DEAD}),
    PREPARING_REBALANCE: frozenset({EMPTY, STABLE, COMPLETING_REBALANCE}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE, PREPARING_REBALANCE, EMPTY}),
    DEAD: frozenset({EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD}),
}


@dataclass
class Member:
    """One member of a group, with its pending JoinGroup/SyncGroup (answered when the round completes)."""

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
    """One consumer group as its coordinator holds it: state, generation, members, committed offsets."""

    group_id: str
    partition: int
    state: GroupState = EMPTY
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
    #: the ``__consumer_offsets`` offset of the record that wrote each committed offset (Kafka's
    #: ``recordOffset``; -1 unknown): a transactional offset materializes only over an older record
    offset_positions: Dict[TP, int] = field(default_factory=dict)
    #: producer id -> the transactional offsets it wrote (per partition), waiting
    #: for its COMMIT/ABORT marker (Kafka's ``pendingTransactionalOffsetCommits``); invisible to OffsetFetch
    pending_txn: Dict[int, Dict[TP, PendingTxnOffset]] = field(default_factory=dict)
    #: partitions with a TxnOffsetCommit append in flight (count per partition)
    txn_in_flight: Dict[TP, int] = field(default_factory=dict)

    def has_pending_txn(self, tp: TP) -> bool:
        """Whether a transactional offset of ``tp`` waits for its marker or its append. O(producers)."""
        return tp in self.txn_in_flight or any(tp in m for m in self.pending_txn.values())

    def drop_pending_txn(self, tp: TP, up_to: Optional[int] = None) -> None:
        """Forget every producer's pending transactional offset of ``tp`` (only those written by
        TxnOffsetCommits numbered up to ``up_to``, when given: their records precede a tombstone of ``tp``),
        as a tombstone deletes them (Kafka's ``removeOffsets``). O(producers)."""
        for pid in list(self.pending_txn):
            slot = self.pending_txn[pid]
            v = slot.get(tp)
            if v is not None and (up_to is None or v[2] <= up_to):
                del slot[tp]
                if not slot:
                    del self.pending_txn[pid]

    def transition_to(self, state: GroupState, why: str = "") -> None:
        """Move to ``state`` (logged at DEBUG with ``why``). Complexity: O(1)."""
        assert state is self.state or self.state in TRANSITIONS[state], (self.group_id, self.state, state)
        if state is not self.state:
            log.debug("group %r: %s -> %s%s", self.group_id, self.state, state, f" ({why})" if why else "")
        self.state = state

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
        assert all(n > 0 for n in self.txn_in_flight.values()), self.txn_in_flight
        assert all(self.pending_txn.values()), self.pending_txn


def commit_started(g: Group, values: Dict[TP, ot.OffsetCommitValue]) -> None:
    """An OffsetCommit of ``values`` is being appended: offset expiry skips these partitions meanwhile."""
    for tp in values:
        g.pending_commits[tp] = g.pending_commits.get(tp, 0) + 1


def commit_done(g: Group, values: Dict[TP, ot.OffsetCommitValue]) -> None:
    """The append of an OffsetCommit of ``values`` was answered (either way)."""
    for tp in values:
        left = g.pending_commits.get(tp, 0) - 1
        if left > 0:
            g.pending_commits[tp] = left
        else:
            g.pending_commits.pop(tp, None)


def txn_commit_started(g: Group, values: Dict[TP, ot.OffsetCommitValue]) -> None:
    """A TxnOffsetCommit of ``values`` is being appended (require-stable fetches and expiry see it)."""
    for tp in values:
        g.txn_in_flight[tp] = g.txn_in_flight.get(tp, 0) + 1


def txn_commit_done(g: Group, values: Dict[TP, ot.OffsetCommitValue]) -> None:
    """The append of a TxnOffsetCommit of ``values`` was answered (either way)."""
    for tp in values:
        left = g.txn_in_flight.get(tp, 0) - 1
        if left > 0:
            g.txn_in_flight[tp] = left
        else:
            g.txn_in_flight.pop(tp, None)


__all__ = ["Group", "GroupState", "Member", "PendingTxnOffset", "TRANSITIONS", "commit_done", "commit_started",
           "txn_commit_started", "txn_commit_done",
           "EMPTY", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "STABLE", "DEAD"]
