"""Requests and responses of the group protocol (Kafka's FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DeleteGroups) plus ListOffsets.

Plain frozen dataclasses of ints, strings, bytes and tuples, so they pickle
(a client in another process reaches the broker through a socket bridge).
Errors travel as in :mod:`pylog.replication.messages`: ``error`` is ``None``
or a :class:`~pylog.errors.PylogError` subclass, ``message`` says why.

Every request carries ``correlation_id``; its response echoes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from pylog.replication.messages import ErrorType

NO_GENERATION = -1
NO_MEMBER = ""
#: ListOffsetsRequest.timestamp: the log start (earliest) or the end visible to consumers (latest).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@dataclass(frozen=True)
class GroupRequest:
    """Base of every request the group coordinator answers."""

    group_id: str
    correlation_id: int


@dataclass(frozen=True)
class FindCoordinatorRequest(GroupRequest):
    pass


@dataclass(frozen=True)
class FindCoordinatorResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    node_id: int = -1


@dataclass(frozen=True)
class JoinGroupRequest(GroupRequest):
    member_id: str = NO_MEMBER
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    protocol_type: str = "consumer"
    #: (assignor name, metadata) in the member's order of preference
    protocols: Tuple[Tuple[str, bytes], ...] = ()
    client_id: str = ""
    #: KIP-345 static membership: the member's ``group.instance.id`` (None: a dynamic member)
    group_instance_id: Optional[str] = None
    #: KIP-394 (JoinGroup v4+): a dynamic member without a member id first gets ``MemberIdRequiredError``
    #: with a member id, and joins for real with that id (the in-process consumer does not ask for this)
    require_known_member_id: bool = False
    #: KIP-800 (JoinGroup v8+): why the member joins, for the coordinator's log; not stored
    reason: Optional[str] = None
    #: the member's host as DescribeGroups shows it (Kafka: "/127.0.0.1"); None: the transport source
    client_host: Optional[str] = None


@dataclass(frozen=True)
class JoinGroupResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    generation_id: int = NO_GENERATION
    protocol_name: Optional[str] = None
    leader: str = ""
    member_id: str = ""
    #: the leader alone gets every member's (member_id, metadata) for the chosen protocol
    members: Tuple[Tuple[str, bytes], ...] = ()
    #: the group's protocol type (JoinGroup v7+ answers it)
    protocol_type: Optional[str] = None
    #: ``group_instance_id`` (or None) of each of ``members``, in the same order (JoinGroup v5+)
    member_instance_ids: Tuple[Optional[str], ...] = ()


@dataclass(frozen=True)
class SyncGroupRequest(GroupRequest):
    generation_id: int = NO_GENERATION
    member_id: str = NO_MEMBER
    #: the leader's (member_id, ConsumerProtocolAssignment bytes); empty from followers
    assignments: Tuple[Tuple[str, bytes], ...] = ()
    group_instance_id: Optional[str] = None
    #: SyncGroup v5+: the group's protocol type and protocol as the member knows them (None: not checked)
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None


@dataclass(frozen=True)
class SyncGroupResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    assignment: bytes = b""
    #: the group's protocol type and protocol (SyncGroup v5+ answers them), on success
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None


@dataclass(frozen=True)
class HeartbeatRequest(GroupRequest):
    generation_id: int = NO_GENERATION
    member_id: str = NO_MEMBER
    group_instance_id: Optional[str] = None


@dataclass(frozen=True)
class HeartbeatResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""


@dataclass(frozen=True)
class LeaveGroupRequest(GroupRequest):
    """``member_id`` "" with a ``group_instance_id``: remove that static member (Kafka's admin removal)."""

    member_id: str = NO_MEMBER
    group_instance_id: Optional[str] = None


@dataclass(frozen=True)
class LeaveGroupResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""


@dataclass(frozen=True)
class OffsetCommitRequest(GroupRequest):
    """``generation_id`` -1 with ``member_id`` "": a standalone (assign()) consumer's commit."""

    generation_id: int = NO_GENERATION
    member_id: str = NO_MEMBER
    #: (topic, partition, offset, leader_epoch, metadata)
    offsets: Tuple[Tuple[str, int, int, int, str], ...] = ()
    group_instance_id: Optional[str] = None


@dataclass(frozen=True)
class OffsetCommitResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""


@dataclass(frozen=True)
class OffsetFetchRequest(GroupRequest):
    #: None: every partition the group has an offset for
    partitions: Optional[Tuple[Tuple[str, int], ...]] = None
    #: KIP-447 (Kafka's ``RequireStable``, OffsetFetch v7+): a partition whose transactional offset waits for
    #: its marker (or whose commit waits for its append) is answered with ``UnstableOffsetCommitError``
    require_stable: bool = False


@dataclass(frozen=True)
class OffsetFetchResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    #: (topic, partition, offset, leader_epoch, metadata); offset -1: nothing committed (or an error below)
    offsets: Tuple[Tuple[str, int, int, int, str], ...] = ()
    #: (topic, partition, error) of the partitions answered with an error (``UnstableOffsetCommitError``)
    partition_errors: Tuple[Tuple[str, int, ErrorType], ...] = ()


@dataclass(frozen=True)
class DeleteGroupsRequest(GroupRequest):
    """Delete an empty group: its offsets and metadata get tombstones in ``__consumer_offsets``."""


@dataclass(frozen=True)
class DeleteGroupsResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""


@dataclass(frozen=True)
class ListOffsetsRequest:
    """Kafka's ListOffsets for one partition: ``timestamp`` -2 earliest, -1 latest (the HW), or a time in ms
    (>= 0): the earliest offset below the HW whose timestamp is at or after it (offset -1 when there is none).
    With ``isolation_level`` 1 (read_committed) the last stable offset stands for the HW in both."""

    topic: str
    partition: int
    timestamp: int
    correlation_id: int
    isolation_level: int = 0


@dataclass(frozen=True)
class ListOffsetsResponse:
    topic: str
    partition: int
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    offset: int = -1
    leader_epoch: int = -1
    #: for a lookup by time: the found record's timestamp (-1 with offset -1: no record at or after the time)
    timestamp: int = -1



# ------------------------------------------------------------- group admin
@dataclass(frozen=True)
class ListGroupsRequest:
    """Kafka's ListGroups: the groups this broker coordinates (every broker is asked)."""

    correlation_id: int


@dataclass(frozen=True)
class ListGroupsResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    #: (group_id, protocol_type ("" for offsets-only groups), state)
    groups: Tuple[Tuple[str, str, str], ...] = ()
    #: the ``__consumer_offsets`` partitions whose groups this answer covers
    partitions: Tuple[int, ...] = ()


@dataclass(frozen=True)
class DescribeGroupsRequest(GroupRequest):
    """Kafka's DescribeGroups for one group."""


@dataclass(frozen=True)
class DescribeGroupsResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    state: str = ""
    protocol_type: str = ""
    protocol: str = ""
    generation_id: int = NO_GENERATION
    leader: str = ""
    #: (member_id, client_id, client_host, assignment bytes, group_instance_id or None)
    members: Tuple[Tuple[str, str, str, bytes, Optional[str]], ...] = ()
    #: each member's metadata for the group's protocol (its subscription), in the order of ``members``;
    #: empty while the group is not Stable (Kafka's DescribeGroups ``MemberMetadata``)
    member_metadata: Tuple[bytes, ...] = ()


@dataclass(frozen=True)
class OffsetDeleteRequest(GroupRequest):
    """Kafka's OffsetDelete: remove the group's committed offsets of ``partitions``."""

    partitions: Tuple[Tuple[str, int], ...] = ()


@dataclass(frozen=True)
class OffsetDeleteResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    #: (topic, partition, error or None, message) per requested partition
    partition_errors: Tuple[Tuple[str, int, ErrorType, str], ...] = ()


__all__ = [
    "GroupRequest", "FindCoordinatorRequest", "FindCoordinatorResponse", "JoinGroupRequest", "JoinGroupResponse",
    "SyncGroupRequest", "SyncGroupResponse", "HeartbeatRequest", "HeartbeatResponse", "LeaveGroupRequest",
    "LeaveGroupResponse", "OffsetCommitRequest", "OffsetCommitResponse", "OffsetFetchRequest",
    "OffsetFetchResponse", "DeleteGroupsRequest", "DeleteGroupsResponse", "ListOffsetsRequest",
    "ListOffsetsResponse", "NO_GENERATION", "NO_MEMBER", "EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP",
]
__all__ += ["ListGroupsRequest", "ListGroupsResponse", "DescribeGroupsRequest", "DescribeGroupsResponse",
            "OffsetDeleteRequest", "OffsetDeleteResponse"]
