"""The requests and responses replicas, controllers and clients exchange.

Named after Kafka's protocol messages and fields. Errors travel as pylog
exception classes (``error``: ``None`` or a :class:`PylogError` subclass) plus
a message. The transports in this package are in-process, so messages are
plain frozen dataclasses.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import List, Optional, Sequence, Tuple, Type

from pylog.errors import PylogError

ErrorType = Optional[Type[PylogError]]


NO_LEADER = -1
ACKS_ALL = -1


@dataclass(frozen=True)
class PartitionState:
    """The controller's record of one partition (Kafka's LeaderAndIsr / PartitionRegistration)."""

    topic: str
    partition: int
    replicas: Tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: Tuple[int, ...]
    partition_epoch: int
    min_insync_replicas: int = 1
    #: KIP-966's eligible leader replicas: members removed while the ISR was below min ISR
    #: (the HW was frozen, so they hold every committed record). Electable when no ISR member is.
    elr: Tuple[int, ...] = ()


@dataclass(frozen=True)
class LeaderAndIsrRequest:
    """``broker_incarnation`` is the registration the controller addressed (KIP-380's broker epoch):
    a broker that restarted since ignores it, so state meant for its predecessor - which may have
    had data this one lost - is never acted on. -1: the broker never registered."""

    controller_id: int
    controller_epoch: int
    states: Tuple[PartitionState, ...]
    broker_incarnation: int = -1
    #: per-topic LogConfig overrides of the topics in ``states``: ``((topic, ((key, value), ...)), ...)``
    topic_configs: Tuple[Tuple[str, Tuple[Tuple[str, object], ...]], ...] = ()
    #: a block of producer ids ``(first, count)`` this broker may hand out (KIP-730's block, pushed
    #: with the metadata; a broker also asks for one with :class:`AllocateProducerIdsRequest`, and
    #: ignores a block older than one it took); ``(-1, 0)``: none
    producer_id_block: Tuple[int, int] = (-1, 0)


def _dict_init(cls: type) -> type:
    """Give a frozen dataclass an ``__init__`` that fills the instance ``__dict__`` directly.

    The generated ``__init__`` of a frozen dataclass sets each field through
    ``object.__setattr__`` (about 4x slower); the produce and fetch messages are
    made several times per replicated batch. Same signature and defaults (taken
    from the fields), and the instance is as frozen afterwards: equality,
    hash, repr, ``dataclasses.replace`` and pickling are unchanged.
    """
    fs = fields(cls)
    assert all(f.default_factory is MISSING for f in fs) and not hasattr(cls, "__post_init__")
    params = ", ".join(f.name if f.default is MISSING else f"{f.name}=_default_{f.name}" for f in fs)
    body = "".join(f"    d[{f.name!r}] = {f.name}\n" for f in fs)
    namespace = {f"_default_{f.name}": f.default for f in fs if f.default is not MISSING}
    exec(f"def __init__(self, {params}):\n    d = self.__dict__\n{body}", namespace)  # noqa: S102
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[misc]
    return cls


@_dict_init
@dataclass(frozen=True)
class ProduceRequest:
    """``records``: encoded RecordBatch v2 bytes (what the producer sends; carries the producer id,
    epoch and base sequence), or a list of values / :class:`Record` for the leader to encode.

    ``transactional_id``: the producer's transactional id when ``records`` is a transactional
    batch (Kafka's ProduceRequest field): the leader verifies with the transaction coordinator
    that the partition is in the producer's open transaction before appending it (KIP-890
    part 1, :mod:`pylog.replication.replica_manager`). None: no verification."""

    topic: str
    partition: int
    records: Sequence[object]
    acks: int
    timeout_ms: int
    correlation_id: int
    transactional_id: Optional[str] = None


@_dict_init
@dataclass(frozen=True)
class ProduceResponse:
    topic: str
    partition: int
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    base_offset: int = -1
    timestamp: int = -1


@_dict_init
@dataclass(frozen=True)
class MultiProduceRequest:
    """One produce request carrying batches of many partitions led by one broker (Kafka's ProduceRequest
    with its ``topic_data``; the sender drains every ready batch for a leader into one, as Kafka's
    ``Sender.sendProduceRequests``). ``parts``: one :class:`ProduceRequest` per batch, in the order the
    leader appends them (two of one partition keep their order); their own ``acks``/``timeout_ms`` equal
    this request's. Answered (unless ``acks`` is 0) by one :class:`MultiProduceResponse` once every
    part has its answer: with acks=all, once every part is committed, refused or timed out."""

    parts: Tuple[ProduceRequest, ...]
    acks: int
    timeout_ms: int
    correlation_id: int


@_dict_init
@dataclass(frozen=True)
class MultiProduceResponse:
    """The answer to a :class:`MultiProduceRequest`: ``parts[i]`` answers the request's ``parts[i]``
    (per-partition offsets and errors, as Kafka's per-partition ``PartitionProduceResponse``)."""

    correlation_id: int
    parts: Tuple[ProduceResponse, ...]
    error: ErrorType = None  # never set: errors are per part (a field for ClientNode's generic checks)


@dataclass(frozen=True)
class InitProducerIdRequest:
    """An idempotent producer asks any broker for a producer id and epoch (Kafka's InitProducerId)."""

    correlation_id: int
    transactional_id: Optional[str] = None


@dataclass(frozen=True)
class InitProducerIdResponse:
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class AllocateProducerIdsRequest:
    """A broker asks the controller for a block of producer ids (Kafka's AllocateProducerIds, KIP-730):
    it has none left, or fewer than a tenth of a block. ``broker_incarnation`` is its registration
    (Kafka's broker epoch): the controller refuses a request of a previous incarnation."""

    broker_id: int
    broker_incarnation: int
    correlation_id: int


@dataclass(frozen=True)
class AllocateProducerIdsResponse:
    """The controller's answer: ``[producer_id_start, producer_id_start + producer_id_len)``, stored in
    the cluster metadata before it was sent (so never handed out again, whoever is controller next)."""

    correlation_id: int
    error: ErrorType = None
    message: str = ""
    producer_id_start: int = -1
    producer_id_len: int = 0
    #: the incarnation the block was granted to (the broker drops a block meant for another one)
    broker_incarnation: int = -1


@_dict_init
@dataclass(frozen=True)
class FetchRequest:
    """A follower (``replica_id >= 0``, reads to the LEO) or consumer (``-1``, reads below the HW) fetch.

    ``isolation_level`` (consumers only; Kafka's field): 0 read_uncommitted, 1 read_committed - the
    leader then reads only below the last stable offset and lists the aborted transactions
    (:class:`FetchResponse`). A follower's fetch ignores it."""

    replica_id: int
    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int
    correlation_id: int
    max_bytes: int = 1 << 20
    max_wait_ms: int = 0
    log_start_offset: int = 0
    #: the follower broker's incarnation (Kafka's broker epoch, KIP-903): an ISR expansion
    #: based on a fetch from an earlier incarnation is refused by the controller
    replica_incarnation: int = -1
    isolation_level: int = 0


@_dict_init
@dataclass(frozen=True)
class FetchResponse:
    """A leader's answer to a :class:`FetchRequest`.

    Under read_committed (``isolation_level`` 1) ``records`` holds only batches below
    ``last_stable_offset`` (the LSO: Kafka's field) and ``aborted_transactions`` lists
    ``(producer_id, first_offset)`` of every aborted transaction whose records may be among them
    (its ABORT marker at or after the fetch offset, its first offset before the end of the
    fetched data; :func:`pylog.storage.aborted_txns.collect_aborted_transactions`), in marker
    order. Under read_uncommitted and for followers both keep their defaults (-1 and ``()``)."""

    topic: str
    partition: int
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    leader_epoch: int = -1
    last_stable_offset: int = -1
    aborted_transactions: Tuple[Tuple[int, int], ...] = ()


@dataclass(frozen=True)
class ReplicaFetchRequest:
    """One follower broker's fetch from one leader broker for all the partitions it follows there
    (Kafka's ``ReplicaFetcherThread`` request, with a KIP-227 fetch session).

    ``session_id == 0``: a full fetch; ``partitions`` is every partition the follower wants, and
    the leader opens a new session (answering with its id). Otherwise an incremental fetch of
    session ``session_id`` at ``session_epoch`` (1, 2, ... for the requests after the full one):
    ``partitions`` holds only the partitions that are new to the session or whose fetch offset,
    log start or leader epoch changed; ``forgotten`` the partitions to drop. Each entry is the
    per-partition :class:`FetchRequest` the follower would have sent alone (its correlation id
    unused).
    """

    replica_id: int
    replica_incarnation: int
    correlation_id: int
    session_id: int
    session_epoch: int
    partitions: Tuple["FetchRequest", ...]
    forgotten: Tuple[Tuple[str, int], ...] = ()
    max_wait_ms: int = 0


@dataclass(frozen=True)
class ReplicaFetchResponse:
    """The answer to a :class:`ReplicaFetchRequest`: ``error`` set for the session itself
    (:class:`~pylog.errors.FetchSessionIdNotFoundError`, ...: the follower starts again with a full
    fetch); else ``partitions`` has ``(fetch_offset, response)`` for every partition of a full fetch,
    and in an incremental one only those with records, an error, or a new HW, log start or leader
    epoch. ``fetch_offset`` is the offset the leader served from (the session's)."""

    correlation_id: int
    session_id: int
    partitions: Tuple[Tuple[int, "FetchResponse"], ...] = ()
    error: ErrorType = None
    message: str = ""


@dataclass(frozen=True)
class OffsetsForLeaderEpochRequest:
    replica_id: int
    topic: str
    partition: int
    current_leader_epoch: int
    leader_epoch: int
    correlation_id: int


@dataclass(frozen=True)
class OffsetsForLeaderEpochResponse:
    topic: str
    partition: int
    correlation_id: int
    error: ErrorType = None
    message: str = ""
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True)
class AlterPartitionRequest:
    broker_id: int
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: Tuple[int, ...]
    #: (replica, incarnation whose fetch made it eligible) for each replica being added
    added_incarnations: Tuple[Tuple[int, int], ...] = ()


@dataclass(frozen=True)
class AlterPartitionResponse:
    topic: str
    partition: int
    error: ErrorType = None
    message: str = ""
    state: Optional[PartitionState] = None
    #: the request answered (its ``new_isr`` and ``partition_epoch``), so the leader can tell the
    #: answer to its current proposal from an answer to an older copy
    proposal: Tuple[int, ...] = ()
    request_partition_epoch: int = -1


@dataclass(frozen=True)
class BrokerHeartbeat:
    """Liveness plus the partition epochs the broker has applied (so the controller can resend
    any LeaderAndIsr it missed, as a KRaft broker catches up on the metadata log)."""

    broker_id: int
    incarnation: int
    want_shutdown: bool = False
    partition_epochs: Tuple[Tuple[str, int, int], ...] = ()
    #: the previous incarnation crashed (no clean shutdown): it may have lost unflushed data
    unclean_restart: bool = False


@dataclass(frozen=True)
class HeartbeatResponse:
    controller_epoch: int
    should_shut_down: bool = False
    leads: int = 0


@dataclass(frozen=True)
class StopReplicaRequest:
    """Stop serving a replica; with ``delete_partition`` (topic deletion) also remove it from disk:
    Kafka renames the directory ``<topic>-<partition>.<uuid>-delete`` at once and deletes it after
    ``delete_delay_ms`` (-1: the broker's ``file_delete_delay_ms``)."""

    controller_epoch: int
    topic: str
    partition: int
    delete_partition: bool = False
    delete_delay_ms: int = -1


@dataclass(frozen=True)
class StopReplicaResponse:
    """A broker removed its replica of ``topic``-``partition`` from its log directory (renamed for
    deletion, or it had none): the controller stops asking."""

    broker_id: int
    topic: str
    partition: int
    error: ErrorType = None
    message: str = ""


@dataclass(frozen=True)
class TopicsDeleted:
    """The controller tells every broker that ``topics`` are gone: the group coordinators drop the
    committed offsets of their partitions (Kafka's GroupCoordinator.onPartitionsDeleted)."""

    controller_epoch: int
    topics: Tuple[str, ...]


@dataclass
class Outbox:
    """Messages a state machine wants sent: ``(destination, message)`` pairs."""

    items: List[Tuple[object, object]] = field(default_factory=list)

    def send(self, dst: object, msg: object) -> None:
        self.items.append((dst, msg))

    def extend(self, other: "Outbox") -> None:
        self.items.extend(other.items)
