"""The pylog exception tree, named after Kafka's errors.

Every exception pylog raises on purpose is a :class:`PylogError`. Errors about
bad arguments also subclass :class:`ValueError` or :class:`TypeError`, so code
that already catches those keeps working. Messages name what was wrong and
where: the file and byte position, or the topic, partition and offset.

This module also holds the one table that maps the C core's status codes to
exceptions (:func:`native_error`).
"""
from __future__ import annotations

from typing import Optional


class PylogError(Exception):
    """Base class of every error pylog raises on purpose."""

    #: Kafka's protocol error name, when there is one.
    kafka_name: str = ""
    #: True when a client may retry the operation as is (Kafka's RetriableException).
    retriable: bool = False


# ---- storage ---------------------------------------------------------------


class KafkaStorageError(PylogError, OSError):
    """An I/O error in a log directory (Kafka's KafkaStorageException)."""

    kafka_name = "KAFKA_STORAGE_ERROR"
    retriable = True  # as Kafka's (an InvalidMetadataException): the leadership may move off the failing disk


class MetadataStorageError(KafkaStorageError):
    """The controller's metadata (``cluster-metadata.json``) could not be stored.

    The change that needed storing was *not* applied: a controller change counts only once it is
    durable (as a KRaft record counts once the quorum committed it). The controller that hit it
    stops acting and resigns until the store works again (see docs/replication.md).
    """

    retriable = True  # a new controller takes over once the disk accepts writes again


class LogDirLockedError(KafkaStorageError):
    """Another writer (a process, or another object in this one) holds the log directory."""

    retriable = False  # raised when opening, not by a request: waiting does not free the lock


class LogClosedError(PylogError):
    """The log, segment or cluster was used after close()."""


class CorruptRecordError(PylogError):
    """Bytes on disk (or in a buffer) fail validation: size, magic, CRC or a record field.

    Attributes:
        path: the file concerned, when known.
        position: byte position of the bad batch in that file, when known.
    """

    kafka_name = "CORRUPT_MESSAGE"

    def __init__(self, message: str, path: Optional[str] = None, position: Optional[int] = None):
        where = []
        if path is not None:
            where.append(f"file {path}")
        if position is not None:
            where.append(f"byte position {position}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.path = path
        self.position = position


class CorruptIndexError(CorruptRecordError):
    """An index or time index file is invalid; recovery rebuilds it from the log."""


class CorruptCheckpointError(CorruptRecordError):
    """A checkpoint file does not follow Kafka's checkpoint text format."""


class InvalidRecordError(PylogError, TypeError):
    """A record given to append() is not valid (wrong type, bad header, ...)."""

    kafka_name = "INVALID_RECORD"


class RecordTooLargeError(PylogError, ValueError):
    """A batch is larger than ``max_message_bytes`` (or a segment can hold)."""

    kafka_name = "MESSAGE_TOO_LARGE"


class InvalidConfigurationError(PylogError, ValueError):
    """A configuration value is out of range, of the wrong type, or unknown."""

    kafka_name = "INVALID_CONFIG"


class InvalidTopicError(PylogError, ValueError):
    """A topic name breaks Kafka's rules: [a-zA-Z0-9._-], 1..249 chars, not '.' or '..'."""

    kafka_name = "INVALID_TOPIC_EXCEPTION"


class OffsetOutOfRangeError(PylogError, ValueError):
    """An offset is below the log start offset or above the log end offset."""

    kafka_name = "OFFSET_OUT_OF_RANGE"


class InvalidOffsetError(PylogError, ValueError):
    """An append or index entry would not keep offsets strictly increasing."""


# ---- replication and clients ------------------------------------------------


class FetchSessionIdNotFoundError(PylogError):
    """A replica fetch named a fetch session the leader does not hold (KIP-227): send a full fetch."""

    kafka_name = "FETCH_SESSION_ID_NOT_FOUND"


class InvalidFetchSessionEpochError(PylogError):
    """A replica fetch carried the wrong epoch of its fetch session (KIP-227): send a full fetch."""

    kafka_name = "INVALID_FETCH_SESSION_EPOCH"


class UnknownTopicOrPartitionError(PylogError, KeyError):
    """The topic or partition does not exist."""

    kafka_name = "UNKNOWN_TOPIC_OR_PARTITION"

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class TopicAlreadyExistsError(PylogError, ValueError):
    kafka_name = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(PylogError, ValueError):
    """A partition count that is not allowed (Kafka's INVALID_PARTITIONS): e.g. ``create_partitions``
    with a total not above the topic's current count."""

    kafka_name = "INVALID_PARTITIONS"


class NotLeaderError(PylogError):
    """The broker is not the leader of the partition (NOT_LEADER_OR_FOLLOWER)."""

    kafka_name = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class LeaderNotAvailableError(PylogError):
    kafka_name = "LEADER_NOT_AVAILABLE"
    retriable = True


class NotEnoughReplicasError(PylogError):
    """acks=all and the ISR is smaller than min_insync_replicas: nothing was appended."""

    kafka_name = "NOT_ENOUGH_REPLICAS"
    retriable = True


class NotEnoughReplicasAfterAppendError(PylogError):
    """acks=all: appended, but the ISR shrank below min_insync_replicas before it was committed."""

    kafka_name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class RequestTimedOutError(PylogError):
    kafka_name = "REQUEST_TIMED_OUT"
    retriable = True


class NetworkError(PylogError):
    """The connection to a broker was lost with the request in flight: whether the broker handled it is
    unknown (Kafka's NetworkException, from a DisconnectException). Retriable: the client reconnects."""

    kafka_name = "NETWORK_EXCEPTION"
    retriable = True


class FencedLeaderEpochError(PylogError):
    """A request carried a leader epoch older than the partition's current one."""

    kafka_name = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpochError(PylogError):
    kafka_name = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class StaleControllerEpochError(PylogError):
    kafka_name = "STALE_CONTROLLER_EPOCH"


class BrokerNotAvailableError(PylogError):
    kafka_name = "BROKER_NOT_AVAILABLE"
    retriable = True


class OutOfOrderSequenceError(PylogError):
    kafka_name = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(PylogError):
    kafka_name = "INVALID_PRODUCER_EPOCH"


class ProducerClosedError(PylogError):
    """``send`` after ``close()``, or a record still unacknowledged when its producer closed."""

    kafka_name = "PRODUCER_CLOSED"


class NativeError(PylogError):
    """The C core reported a status that is a bug in pylog, not in the input."""


# ---- consumer groups ---------------------------------------------------------


class CoordinatorNotAvailableError(PylogError):
    """No broker currently hosts the group's coordinator (its offsets partition has no leader)."""

    kafka_name = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class NotCoordinatorError(PylogError):
    """The broker asked is not the coordinator of the group (any more)."""

    kafka_name = "NOT_COORDINATOR"
    retriable = True


class CoordinatorLoadInProgressError(PylogError):
    """The coordinator is still loading the group's offsets partition."""

    kafka_name = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class UnstableOffsetCommitError(PylogError):
    """OffsetFetch with ``require_stable`` (KIP-447, a ``read_committed`` consumer): a transactional offset
    of the partition waits for its transaction's marker, or a commit for its append. Retriable: the
    consumer asks again until the offset is settled."""

    kafka_name = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


class IllegalGenerationError(PylogError):
    """A group request carried a generation other than the group's current one (a stale member)."""

    kafka_name = "ILLEGAL_GENERATION"


class CommitFailedError(IllegalGenerationError):
    """Kafka's CommitFailedException: the commit cannot complete because this member left (a
    ``max_poll_interval_ms`` poll timeout) or was fenced, and its partitions may be another member's."""


class UnknownMemberIdError(PylogError):
    """The member id is not (or no longer) a member of the group."""

    kafka_name = "UNKNOWN_MEMBER_ID"


class MemberIdRequiredError(PylogError):
    """JoinGroup v4+ (KIP-394): a new dynamic member must join again with the member id this answer gives it
    (the coordinator keeps it pending until then, so a member that never returns is never in a rebalance)."""

    kafka_name = "MEMBER_ID_REQUIRED"


class RebalanceInProgressError(PylogError):
    """The group is rebalancing: the member must rejoin."""

    kafka_name = "REBALANCE_IN_PROGRESS"


class InconsistentGroupProtocolError(PylogError, ValueError):
    """A member's protocol type or assignors do not match the group's."""

    kafka_name = "INCONSISTENT_GROUP_PROTOCOL"


class GroupIdNotFoundError(PylogError, KeyError):
    """The group does not exist."""

    kafka_name = "GROUP_ID_NOT_FOUND"

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class NonEmptyGroupError(PylogError):
    """The group still has members (it cannot be deleted)."""

    kafka_name = "NON_EMPTY_GROUP"


class NoOffsetForPartitionError(PylogError):
    """No committed offset for a partition and ``auto_offset_reset="none"`` (Kafka's NoOffsetForPartitionException)."""


class InvalidGroupIdError(PylogError, ValueError):
    """An operation needs a ``group_id`` (e.g. commit) and the consumer has none."""

    kafka_name = "INVALID_GROUP_ID"


class GroupSubscribedToTopicError(PylogError):
    """OffsetDelete refused: the group's members are subscribed to the partition's topic."""

    kafka_name = "GROUP_SUBSCRIBED_TO_TOPIC"


class FencedInstanceIdError(PylogError):
    """A static member (KIP-345 ``group_instance_id``) was replaced by a newer member with the same
    instance id: this member's requests are refused for good (not retriable; close the consumer)."""

    kafka_name = "FENCED_INSTANCE_ID"


class BufferExhaustedError(PylogError, TimeoutError):
    """``send`` waited ``max_block_ms`` for room in the producer's ``buffer_memory`` (Kafka's
    BufferExhaustedException): records are produced faster than the cluster acknowledges them."""

    retriable = True


class SerializationError(PylogError, ValueError):
    """A producer's ``key_serializer``/``value_serializer`` or a consumer's ``key_deserializer``/
    ``value_deserializer`` raised or returned something unusable (Kafka's SerializationException);
    the message names the topic, partition and offset where known."""


# ---- the one table from C status codes to exceptions ------------------------

#: The C core's status names that mean "these bytes are not a valid batch".
CORRUPT_STATUS_NAMES = ("PLG_ETRUNCATED", "PLG_ECORRUPT", "PLG_ECRC", "PLG_EMAGIC")
#: The C core's status name for offsets out of order.
ORDER_STATUS_NAME = "PLG_EORDER"


def native_error(
    rc: int,
    name: str,
    reason: str,
    what: str,
    path: Optional[str] = None,
    position: Optional[int] = None,
) -> PylogError:
    """Return the exception for C status ``rc`` (named ``name``, described by ``reason``) raised while doing ``what``.

    Corrupt or truncated input becomes :class:`CorruptRecordError` naming
    ``path`` and ``position``; out-of-order offsets :class:`InvalidOffsetError`;
    anything else :class:`NativeError` (a pylog bug). :mod:`pylog._native`
    passes the name and reason in, so this module imports nothing of pylog.

    >>> type(native_error(-3, "PLG_ECRC", "crc mismatch", "scan", path="x.log", position=0)).__name__
    'CorruptRecordError'
    """
    if name in CORRUPT_STATUS_NAMES:
        return CorruptRecordError(f"{what}: {reason}", path=path, position=position)
    if name == ORDER_STATUS_NAME:
        return InvalidOffsetError(f"{what}: {reason}")
    return NativeError(f"{what}: {reason} (status {rc})")


# ---- transactions (issue 17) ------------------------------------------------
# What a transactional producer does with each error, as Kafka's TransactionManager does:
# *retriable*: retry the same request after a back-off; *abortable*: the current transaction
# must be aborted (abort_transaction()), then the producer may go on; *fatal*: the producer
# can only be closed (a new one, re-initialized, may take over the transactional id).


class ProducerFencedError(PylogError):
    """Another producer initialized the same transactional id with a newer epoch (or an EndTxn
    came from an earlier transaction's epoch): this producer is a zombie. Fatal: close it."""

    kafka_name = "PRODUCER_FENCED"


class InvalidTxnStateError(PylogError):
    """The request does not fit the transaction's state (e.g. EndTxn(commit) while the
    coordinator is completing an abort, or EndTxn with no transaction open). Fatal."""

    kafka_name = "INVALID_TXN_STATE"


class TransactionAbortableError(PylogError):
    """KIP-890: the transaction cannot go on (e.g. data for a partition that was never added
    to it); abortable: abort the transaction and start a new one."""

    kafka_name = "TRANSACTION_ABORTABLE"


class ConcurrentTransactionsError(PylogError):
    """The coordinator is still completing the previous transaction of this transactional id
    (or fencing it for a new InitProducerId). Retriable: back off and retry."""

    kafka_name = "CONCURRENT_TRANSACTIONS"
    retriable = True


class TransactionCoordinatorFencedError(PylogError):
    """A transaction marker came with a coordinator epoch older than the one the partition has
    already seen: it was sent by a coordinator that has since been replaced. Fatal for that
    (stale) coordinator's marker write; clients never see it."""

    kafka_name = "TRANSACTION_COORDINATOR_FENCED"


class InvalidTransactionTimeoutError(PylogError, ValueError):
    """``transaction_timeout_ms`` is not in ``1..transaction_max_timeout_ms``. Fatal (fix the configuration)."""

    kafka_name = "INVALID_TRANSACTION_TIMEOUT"


class InvalidProducerIdMappingError(PylogError):
    """The producer id in the request is not the one the coordinator holds for this transactional
    id. Abortable when the producer can bump its epoch (KIP-360), else fatal (Kafka's
    ``abortableErrorIfPossible``)."""

    kafka_name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidRequestError(PylogError, ValueError):
    """A request that is malformed as such (e.g. an empty transactional id). Fatal."""

    kafka_name = "INVALID_REQUEST"


class TransactionAbortedError(PylogError):
    """A record of a transaction that was aborted before the record was sent (Kafka's
    TransactionAbortedException): ``abort_transaction()`` fails every batch not yet sent with it."""

    kafka_name = "TRANSACTION_ABORTED"


class TransactionalIdAuthorizationFailedError(PylogError):
    """The client may not use this transactional id (Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
    pylog has no ACLs and never raises it itself; a Kafka-protocol peer may answer it. Fatal."""

    kafka_name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class TransactionalIdNotFoundError(PylogError):
    """``describe_transactions`` of a transactional id its coordinator does not know (never
    initialized, or expired): Kafka's TRANSACTIONAL_ID_NOT_FOUND."""

    kafka_name = "TRANSACTIONAL_ID_NOT_FOUND"


class StaleBrokerEpochError(PylogError):
    """A broker's request to the controller named a registration (incarnation, Kafka's broker
    epoch) that is not the broker's current one: it restarted since, so the request belongs to
    its previous life (Kafka's STALE_BROKER_EPOCH)."""

    kafka_name = "STALE_BROKER_EPOCH"
