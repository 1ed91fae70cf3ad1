"""Requests and responses of the transaction protocol, in process (issue 17).

Kafka's FindCoordinator (key type TRANSACTION), InitProducerId with a
transactional id, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn
and WriteTxnMarkers, and the admin's DescribeTransactions and ListTransactions, with Kafka's field names, as plain frozen dataclasses of
ints, strings, bools and tuples (so they pickle), in the style of
:mod:`pylog.replication.messages`: ``error`` is ``None`` or a
:class:`~pylog.errors.PylogError` subclass, ``message`` says why, and every
response echoes its request's ``correlation_id``.

Reused rather than duplicated: the responses of FindCoordinator and
InitProducerId (:class:`~pylog.replication.group_messages.FindCoordinatorResponse`,
:class:`~pylog.replication.messages.InitProducerIdResponse`), the coordinator's
:class:`~pylog.replication.txn_coordinator.TxnMarker` (one marker per partition)
and ``TopicPartition`` pairs of :mod:`pylog.replication.txn_log`.

:class:`InitProducerIdRequest` here *extends* the idempotent producer's
:class:`pylog.replication.messages.InitProducerIdRequest` with Kafka's
transactional fields (as Kafka has one InitProducerId API): a broker that
dispatches on the base class routes a request with a ``transactional_id`` to
its transaction coordinator.

Which coordinator answers: FindCoordinator(TRANSACTION), InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn and EndTxn go to the transaction
coordinator of the transactional id; TxnOffsetCommit goes to the *group*
coordinator of ``group_id`` (found with the group FindCoordinator);
WriteTxnMarkers goes from the transaction coordinator to each partition's leader.

Owns: message shapes only. Complexity: O(fields). Durability: none.
Thread-safety: immutable values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from pylog.replication import messages as _messages
from pylog.replication.group_messages import NO_GENERATION, NO_MEMBER, FindCoordinatorResponse
from pylog.replication.messages import ErrorType, InitProducerIdResponse
from pylog.replication.txn_coordinator import TxnMarker
from pylog.replication.txn_log import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition

#: FindCoordinator key types (Kafka's ``CoordinatorType``)
COORDINATOR_TYPE_GROUP = 0
COORDINATOR_TYPE_TRANSACTION = 1
#: Kafka's ``transaction.timeout.ms`` default (1 min)
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """What a consumer hands to ``send_offsets_to_transaction`` (Kafka's ConsumerGroupMetadata):
    the group and the member's generation, member id and static instance id, so the group
    coordinator can refuse a TxnOffsetCommit from a member that was fenced by a rebalance."""

    group_id: str
    generation_id: int = NO_GENERATION
    member_id: str = NO_MEMBER
    group_instance_id: Optional[str] = None


@dataclass(frozen=True)
class FindTransactionCoordinatorRequest:
    """Kafka's FindCoordinator with ``key_type`` TRANSACTION (1): which broker coordinates
    ``transactional_id`` (the leader of its ``__transaction_state`` partition). Answered by
    :class:`~pylog.replication.group_messages.FindCoordinatorResponse`."""

    transactional_id: str
    correlation_id: int
    key_type: int = COORDINATOR_TYPE_TRANSACTION


@dataclass(frozen=True)
class InitProducerIdRequest(_messages.InitProducerIdRequest):
    """InitProducerId with a transactional id (Kafka's v3+ fields; see the module docstring).

    ``producer_id``/``producer_epoch``: the producer's current id and epoch when it asks for an
    epoch bump after an abortable error (KIP-360), else -1/-1. Answered by
    :class:`~pylog.replication.messages.InitProducerIdResponse`.
    """

    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class AddPartitionsToTxnRequest:
    """Add ``partitions`` to the open transaction (opening one if none is), before their first
    transactional batch is sent. ``verify_only`` (KIP-890 part 1, broker to coordinator): only
    ask whether each partition is in the transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: Tuple[TopicPartition, ...]
    correlation_id: int
    verify_only: bool = False


@dataclass(frozen=True)
class AddPartitionsToTxnResponse:
    """``error``: the whole request's error (the coordinator answers one for all partitions);
    ``partition_errors``: per partition ``(topic, partition, error)``, for ``verify_only``."""

    correlation_id: int
    error: ErrorType = None
    message: str = ""
    partition_errors: Tuple[Tuple[str, int, ErrorType], ...] = ()


@dataclass(frozen=True)
class AddOffsetsToTxnRequest:
    """The ``__consumer_offsets`` partition of ``group_id`` joins the transaction, so the
    offsets a TxnOffsetCommit writes there are committed or aborted with it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    correlation_id: int


@dataclass(frozen=True)
class AddOffsetsToTxnResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""


@dataclass(frozen=True)
class TxnOffsetCommitRequest:
    """Offsets committed inside the transaction, to the group coordinator of ``group_id``: they
    become visible to the group when the transaction's COMMIT marker reaches the offsets partition.

    ``generation_id``, ``member_id``, ``group_instance_id``: the consumer's group metadata
    (Kafka's TxnOffsetCommit v3+, KIP-447), so a member fenced by a rebalance cannot commit.
    ``offsets``: ``(topic, partition, offset, leader_epoch, metadata)`` as in OffsetCommit.
    """

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    correlation_id: int
    offsets: Tuple[Tuple[str, int, int, int, str], ...] = ()
    generation_id: int = NO_GENERATION
    member_id: str = NO_MEMBER
    group_instance_id: Optional[str] = None


@dataclass(frozen=True)
class TxnOffsetCommitResponse:
    """``error``: the request's error; ``partition_errors``: ``(topic, partition, error)`` where one
    partition failed alone."""

    correlation_id: int
    error: ErrorType = None
    message: str = ""
    partition_errors: Tuple[Tuple[str, int, ErrorType], ...] = ()


@dataclass(frozen=True)
class EndTxnRequest:
    """Commit (``committed`` True) or abort the open transaction.

    ``client_transaction_version``: Kafka's ``clientTransactionVersion`` of the request (the
    Kafka-protocol listener: 2 for EndTxn v5+, 0 for older versions, whose clients do not learn a
    bumped epoch); the coordinator bumps the epoch (KIP-890) only for 2. None: the coordinator's
    own version (pylog's client, which reads the new epoch from :class:`EndTxnResponse`)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    correlation_id: int
    client_transaction_version: Optional[int] = None


@dataclass(frozen=True)
class EndTxnResponse:
    """KIP-890 (EndTxn v5): ``producer_id``/``producer_epoch`` are the ones the next transaction
    uses (the coordinator bumped the epoch, or moved to a new producer id when the epoch ran out);
    -1 when the coordinator does not bump."""

    correlation_id: int
    error: ErrorType = None
    message: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class WriteTxnMarkersRequest:
    """The transaction coordinator asks a partition leader to append ``markers`` (COMMIT/ABORT
    control batches, each with the producer id, epoch and coordinator epoch)."""

    markers: Tuple[TxnMarker, ...]
    correlation_id: int


@dataclass(frozen=True)
class WriteTxnMarkersResponse:
    """Per marker ``(marker, error)``; ``None``: the leader appended it (the coordinator then calls
    ``on_marker_written``); :class:`~pylog.errors.TransactionCoordinatorFencedError`: a newer
    coordinator wrote there already (this one stops)."""

    correlation_id: int
    results: Tuple[Tuple[TxnMarker, ErrorType], ...] = ()


@dataclass(frozen=True)
class DescribeTransactionsRequest:
    """Kafka's DescribeTransactions (KIP-664), sent to the coordinator of each id: the coordinator's
    state of ``transactional_ids``. Answered by :class:`DescribeTransactionsResponse`."""

    transactional_ids: Tuple[str, ...]
    correlation_id: int


@dataclass(frozen=True)
class TransactionStateRow:
    """One described transactional id (Kafka's ``DescribeTransactionsResponse.TransactionState``):
    ``error`` per id (NotCoordinatorError, TransactionalIdNotFoundError, InvalidRequestError), else
    the state's Kafka name (``Ongoing``, ``PrepareCommit``, ...), producer id and epoch, timeout, the
    transaction's start time (-1: none open) and its partitions."""

    transactional_id: str
    error: ErrorType = None
    message: str = ""
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    partitions: Tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class DescribeTransactionsResponse:
    correlation_id: int
    transactions: Tuple[TransactionStateRow, ...] = ()


@dataclass(frozen=True)
class ListTransactionsRequest:
    """Kafka's ListTransactions (KIP-664, ``duration_filter_ms`` from KIP-994), sent to every broker:
    the transactional ids it coordinates, filtered by state name and producer id (empty: all) and
    by running time (-1: all). Answered by :class:`ListTransactionsResponse`."""

    correlation_id: int
    state_filters: Tuple[str, ...] = ()
    producer_id_filters: Tuple[int, ...] = ()
    duration_filter_ms: int = -1


@dataclass(frozen=True)
class ListTransactionsResponse:
    """``transactions``: ``(transactional_id, producer_id, state name)`` each; ``unknown_state_filters``:
    filters that name no state (Kafka's field); ``partitions``: the ``__transaction_state`` partitions
    whose ids the answer covers (pylog's addition: the admin merges the brokers' answers once every
    partition is covered, as for ListGroups)."""

    correlation_id: int
    error: ErrorType = None
    message: str = ""
    transactions: Tuple[Tuple[str, int, str], ...] = ()
    unknown_state_filters: Tuple[str, ...] = ()
    partitions: Tuple[int, ...] = ()


__all__ = [
    "COORDINATOR_TYPE_GROUP", "COORDINATOR_TYPE_TRANSACTION", "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "ConsumerGroupMetadata", "FindTransactionCoordinatorRequest", "FindCoordinatorResponse",
    "InitProducerIdRequest", "InitProducerIdResponse", "AddPartitionsToTxnRequest", "AddPartitionsToTxnResponse",
    "AddOffsetsToTxnRequest", "AddOffsetsToTxnResponse", "TxnOffsetCommitRequest", "TxnOffsetCommitResponse",
    "EndTxnRequest", "EndTxnResponse", "WriteTxnMarkersRequest", "WriteTxnMarkersResponse", "TxnMarker",
    "DescribeTransactionsRequest", "DescribeTransactionsResponse", "TransactionStateRow", "ListTransactionsRequest",
    "ListTransactionsResponse",
]
