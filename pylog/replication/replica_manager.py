"""All replicas on one broker: request dispatch, purgatories, follower fetching (Kafka's ReplicaManager).

Sans-I/O: :meth:`ReplicaManager.handle` takes ``(source, message, now_ms)`` and
:meth:`ReplicaManager.tick` takes ``now_ms``; both return an :class:`Outbox` of
``(destination, message)`` pairs for the runtime to send. The destination
:data:`CONTROLLER` means "whichever broker is the active controller".

* A :class:`MultiProduceRequest` (a producer's batches for every partition this
  broker leads) is handled part by part as single produces and answered by one
  :class:`MultiProduceResponse` once every part has its answer.
* Produce with ``acks=all`` waits in the produce purgatory until the HW passes
  the batch (then ``NotEnoughReplicasAfterAppendError`` if the maximal ISR is
  below min ISR, else success), the maximal ISR shrinks below min ISR (the HW
  cannot pass it then: ``NotEnoughReplicasAfterAppendError`` at once), the
  replica stops leading (``NotLeaderError``), or ``timeout_ms`` passes
  (``RequestTimedOutError``).
* Fetches that find nothing wait in the fetch purgatory up to ``max_wait_ms``
  and complete when the leader appends or its HW moves (a read_committed
  consumer fetch: when its last stable offset moves).
* A :class:`~pylog.replication.txn_messages.WriteTxnMarkersRequest` from a
  transaction coordinator: each marker is appended by the leader replica and
  answered like an acks=all produce (the same purgatory), all in one
  :class:`~pylog.replication.txn_messages.WriteTxnMarkersResponse`;
  :attr:`ReplicaManager.marker_listener` hears of each marker committed.
* Followers fetch per leader broker: one :class:`ReplicaFetchRequest` in flight per (follower,
  leader) for all the partitions led there, with a KIP-227 fetch session (only changed partitions
  after the first, full, request; the leader answers only partitions with something new and parks
  the request otherwise). A partition that truncates sends its own OffsetsForLeaderEpoch first.
  Requests are resent (as a full fetch) after ``request_timeout_ms``. A
  follower append or truncation that fails (a failing disk, a batch this
  replica refuses), or a replica that cannot be opened for a LeaderAndIsr, is
  logged and that partition stops fetching (``Partition.fail_fetching``):
  nothing raises out of :meth:`ReplicaManager.handle` or :meth:`ReplicaManager.tick`.
* ISR expiration runs every ``replica_lag_time_max_ms / 2``; the HW
  checkpoint (``replication-offset-checkpoint``) every
  ``hw_checkpoint_interval_ms`` and on clean shutdown.

Complexity: a tick costs O(replicas with something due + brokers) plus, when a parked request is
due, one set lookup per parked replica (no per-partition work when idle); a broker-pair fetch costs
O(partitions listed or dirty), an idle one O(1); the ISR-expiry pass every
``replica_lag_time_max_ms / 2`` is O(partitions). Durability: the HW checkpoint is written
atomically (temp + fsync + rename). Thread-safety: none; one thread drives it.
"""
from __future__ import annotations

import contextlib
import heapq
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from pylog.errors import (
    BrokerNotAvailableError,
    CorruptCheckpointError,
    FetchSessionIdNotFoundError,
    InvalidFetchSessionEpochError,
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderError,
    PylogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pylog.replication.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ACKS_ALL,
    AlterPartitionResponse,
    FetchRequest,
    FetchResponse,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderAndIsrRequest,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    Outbox,
    PartitionState,
    MultiProduceRequest,
    MultiProduceResponse,
    ProduceRequest,
    ProduceResponse,
    StopReplicaRequest,
    StopReplicaResponse,
)
from pylog.replication.partition import FETCHING, FOLLOWER, LEADER, Partition
from pylog.replication.txn_coordinator import TxnMarker
from pylog.replication.txn_messages import AddPartitionsToTxnResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse
from pylog.replication.txn_verification import TxnVerifier
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO
from pylog.storage.log import Log, LogConfig
from pylog.storage.logdir import HW_CHECKPOINT_FILE, LogDir

CONTROLLER = "controller"
#: an AllocateProducerIds unanswered this long is sent again (lost, or the controller moved); a
#: refused one is asked again after the back-off
ALLOCATE_PRODUCER_IDS_RETRY_MS = 1_000
ALLOCATE_PRODUCER_IDS_BACKOFF_MS = 100
_EPOCH_CHANGING = (LeaderAndIsrRequest, AlterPartitionResponse, StopReplicaRequest)
logger = logging.getLogger(__name__)
TP = Tuple[str, int]


@dataclass
class ReplicaManagerConfig:
    """Kafka's broker settings that govern replication (snake_case, same defaults unless noted)."""

    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_wait_ms: int = 500
    replica_fetch_backoff_ms: int = 100
    replica_fetch_max_bytes: int = 1 << 20
    request_timeout_ms: int = 30_000
    hw_checkpoint_interval_ms: int = 5_000
    alter_partition_retry_ms: int = 2_000
    #: how long a leader holds back a fetch-session answer whose only news is a high watermark
    #: (issue 18): the HW rides on the session's next data answer, or goes alone once this long has
    #: passed (at the first tick after it, so up to this + the broker's tick). 0: answered at once.
    #: Kafka has no such wait because its followers learn the HW only with their next fetch (up to
    #: ``replica_fetch_max_wait_ms``); here a follower's HW trails the leader's by at most this + a tick.
    replica_hw_linger_ms: int = 10
    #: how long the directory of a deleted partition (renamed ``<topic>-<p>.<uuid>-delete``) stays
    #: before it is removed (Kafka's ``file.delete.delay.ms``, 60 s there; 1 s here: an embedded
    #: broker has no reader that needs the grace period)
    file_delete_delay_ms: int = 1_000
    #: builds each :class:`Partition` (None: ``Partition``); a test-only seam through which the simulator
    #: injects a known replication bug as a strategy (``pylog.simulation.bugs``), never a class patch
    partition_factory: Optional[Callable[..., Partition]] = None


@dataclass
class _DelayedProduce:
    src: object
    req: ProduceRequest
    required_offset: int
    deadline_ms: int
    base_offset: int
    timestamp: int


class _Gather:
    """The answers collected for one :class:`MultiProduceRequest` from ``src``; sent as one
    :class:`MultiProduceResponse` when the last part is answered."""

    __slots__ = ("src", "correlation_id", "parts", "missing")

    def __init__(self, src: object, correlation_id: int, count: int):
        self.src = src
        self.correlation_id = correlation_id
        self.parts: List[Optional[ProduceResponse]] = [None] * count
        self.missing = count

    def answer(self, index: int, resp: ProduceResponse, out: Outbox) -> None:
        """Record part ``index``'s answer (the first one only); send the whole response after the last."""
        if self.parts[index] is None:
            self.parts[index] = resp
            self.missing -= 1
            if self.missing == 0:
                out.send(self.src, MultiProduceResponse(self.correlation_id, tuple(self.parts)))  # type: ignore[arg-type]  # all set


class _MarkerGather:
    """The answers collected for one :class:`WriteTxnMarkersRequest` from ``src``: each marker is
    handled as an acks=all produce of its partition (the delayed-produce purgatory answers it, with a
    :class:`ProduceResponse`, once the HW passed the marker or it failed), and one
    :class:`WriteTxnMarkersResponse` goes out when every marker has its answer. ``listener`` (the
    replica manager's ``marker_listener``) hears of each marker answered without error."""

    __slots__ = ("src", "correlation_id", "markers", "errors", "missing", "listener")

    def __init__(self, src: object, correlation_id: int, markers: Tuple[TxnMarker, ...],
                 listener: Optional[Callable[[str, int, int, bool], Any]]):
        self.src = src
        self.correlation_id = correlation_id
        self.markers = markers
        self.errors: List[Any] = [None] * len(markers)
        self.missing = len(markers)
        self.listener = listener

    def answer(self, index: int, resp: ProduceResponse, out: Outbox) -> None:
        if self.errors[index] is not None:
            return
        m = self.markers[index]
        if resp.error is None and self.listener is not None:
            try:
                self.listener(m.topic, m.partition, m.producer_id, m.committed)
            except Exception:  # a listener's bug must not stop the replica manager (nothing raises out of handle)
                logger.exception("marker listener failed for %s-%d producer %d (committed=%s)",
                                 m.topic, m.partition, m.producer_id, m.committed)
        self.errors[index] = resp.error or _NO_ERROR
        self.missing -= 1
        if self.missing == 0:
            out.send(self.src, WriteTxnMarkersResponse(self.correlation_id, tuple(
                (mk, None if e is _NO_ERROR else e) for mk, e in zip(self.markers, self.errors))))


#: a marker answered without error (``_MarkerGather.errors`` uses None for "not answered yet")
_NO_ERROR = object()


class _GatherSlot:
    """The ``src`` a part of a :class:`MultiProduceRequest` (or a marker of a
    :class:`WriteTxnMarkersRequest`) is handled with: its answer goes to the gather (:func:`_reply`),
    at index ``index``."""

    __slots__ = ("gather", "index")

    def __init__(self, gather: Any, index: int):
        self.gather = gather
        self.index = index


def _reply(out: Outbox, src: object, resp: ProduceResponse) -> None:
    """Send a produce answer to ``src``, or, for a part of a multi-partition request, record it and send
    the whole response once it is complete. O(1) (O(parts) for the last one)."""
    if src.__class__ is not _GatherSlot:
        out.send(src, resp)
        return
    src.gather.answer(src.index, resp, out)


@dataclass
class _DelayedFetch:
    src: object
    req: FetchRequest
    deadline_ms: int
    #: the HW when it was parked (the LSO for a read_committed consumer fetch): a change answers it
    hw_at_hold: int


class _Fetcher:
    """Follower side: the partitions this broker follows on one leader broker, fetched with one
    :class:`ReplicaFetchRequest` at a time (Kafka's ``ReplicaFetcherThread`` + ``FetchSessionHandler``).

    ``members``: each partition's per-partition request as the follower wants it now; ``known``: what
    the leader's session holds (as last sent); ``changed``: members to list in the next request;
    ``forgotten``: partitions to drop from the leader's session. ``session_id`` 0 means the next
    request is a full fetch."""

    __slots__ = ("leader", "session_id", "epoch", "members", "known", "changed", "forgotten", "inflight",
                 "backoff_until")

    def __init__(self, leader: int):
        self.leader = leader
        self.session_id = 0
        self.epoch = 0
        self.members: Dict[TP, FetchRequest] = {}
        self.known: Dict[TP, FetchRequest] = {}
        self.changed: Set[TP] = set()
        self.forgotten: Set[TP] = set()
        #: ``(correlation id, request, sent at)`` of the one request in flight
        self.inflight: Optional[Tuple[int, ReplicaFetchRequest, int]] = None
        self.backoff_until = 0

    def reset_session(self) -> None:
        """Forget the session: the next request is a full fetch of every member."""
        self.session_id = 0
        self.epoch = 0
        self.known = {}
        self.changed = set(self.members)
        self.forgotten = set()


class _Session:
    """Leader side: one follower broker's fetch session (KIP-227's ``FetchSession``).

    ``parts``: each partition's fetch as the follower last listed it; ``sent``: per partition the
    ``(high watermark, log start, leader epoch)`` last answered; ``dirty``: partitions whose leader
    state may have changed since they were last answered (an append, a HW, ISR or leader change, the
    periodic sweep). A partition neither listed nor dirty is not looked at by a request: its
    follower's fetch state (:class:`~pylog.replication.partition.ReplicaState`) is brought up to
    ``last_fetch_ms`` by :meth:`ReplicaManager._materialize` before anything reads it or the
    partition changes (before an append, before the ISR-expiry pass), which is exactly what a
    per-partition fetch at that time with the same offset would have done."""

    __slots__ = ("replica_id", "incarnation", "session_id", "epoch", "parts", "sent", "dirty", "last_fetch_ms",
                 "parked", "owed", "linger_due")

    def __init__(self, replica_id: int, incarnation: int, session_id: int, now_ms: int):
        self.replica_id = replica_id
        self.incarnation = incarnation
        self.session_id = session_id
        self.epoch = 1
        self.parts: Dict[TP, FetchRequest] = {}
        self.sent: Dict[TP, Tuple[int, int, int]] = {}
        self.dirty: Set[TP] = set()
        self.last_fetch_ms = now_ms
        #: ``(source, correlation id, deadline)`` of a request parked until data arrives or ``max_wait_ms``
        self.parked: Optional[Tuple[object, int, int]] = None
        #: listed partitions whose answer (no data, nothing but a HW) is held back: answered with the
        #: next answer of the session, however little it then says
        self.owed: Set[TP] = set()
        #: when the held-back HW-only answers go out alone (None: nothing held back)
        self.linger_due: Optional[int] = None


class ReplicaManager:
    """The replicas hosted by broker ``broker_id`` in log directory ``log_dir``."""

    def __init__(
        self,
        broker_id: int,
        log_dir: str,
        *,
        file_io: Optional[FileIO] = None,
        clock_ms: Callable[[], int],
        config: Optional[ReplicaManagerConfig] = None,
        log_config: Optional[Dict[str, object]] = None,
        incarnation: int = 0,
    ):
        self.broker_id = broker_id
        self.incarnation = incarnation
        self.log_dir = log_dir
        self.io = file_io or FileIO()
        self.clock_ms = clock_ms
        self.config = config or ReplicaManagerConfig()
        self.log_config = dict(log_config or {})
        self.partitions: Dict[TP, Partition] = {}
        self.controller_epoch = -1
        self.delayed_produce: Dict[TP, List[_DelayedProduce]] = {}
        self.delayed_fetch: Dict[TP, List[_DelayedFetch]] = {}
        #: partitions a produce appended to while fetches were parked on them: the parked fetches
        #: are answered by :meth:`complete_fetch_wakeups`, which the broker runs once after the
        #: messages already queued (so one answer carries every batch appended meanwhile)
        self.fetch_wakeups: Set[TP] = set()
        #: per follower partition, its one request in flight ``(correlation id, request, sent at)``;
        #: entries are only ever inserted fresh (a key not present) at the current time, so the
        #: dict's order is the order of sending and the oldest request is first (see :meth:`tick`)
        self.inflight: Dict[TP, Tuple[int, object, int]] = {}
        self.next_fetch_at: Dict[TP, int] = {}
        # What an idle tick looks at, so that it costs nothing per partition (issue 18):
        #: replicas that may need a follower request sent by a tick: every follower without one in
        #: flight is in here (a superset; :meth:`_maybe_send_follower` drops what it sends for)
        self._may_send: Set[TP] = set()
        #: replicas with an AlterPartition proposal that may need resending
        self._proposing: Set[TP] = set()
        #: (deadline, tp) of parked produces and fetches, lazily cleaned (stale entries are harmless)
        self._produce_deadlines: List[Tuple[int, TP]] = []
        self._fetch_deadlines: List[Tuple[int, TP]] = []
        #: per replica, the position it was added to :attr:`partitions` at: a tick visits the
        #: replicas it acts on in that order, the order of the loop over every replica it replaces
        self._order: Dict[TP, int] = {}
        self._added = 0
        #: bumped by every message that may change a replica's partition epoch or the replica set
        self.epochs_version = 0
        # Per-broker-pair fetching (issue 18): follower side, one fetcher per leader broker; leader
        # side, one fetch session per follower broker. An idle partition costs nothing per request.
        self.fetchers: Dict[int, _Fetcher] = {}
        #: follower replica -> the leader broker whose fetcher holds it
        self._member_of: Dict[TP, int] = {}
        #: leader brokers whose fetcher may have a request to send
        self._fetchers_due: Set[int] = set()
        self.sessions: Dict[int, _Session] = {}
        #: replica ids of parked sessions with a dirty partition (answered by complete_fetch_wakeups / handle)
        self._session_wakeups: Set[int] = set()
        #: (deadline, replica id, session id) of parked sessions, lazily cleaned
        self._session_deadlines: List[Tuple[int, int, int]] = []
        self._next_session = incarnation << 32
        # Correlation ids are unique across this broker's incarnations: a response to a request the
        # previous incarnation sent (still in flight when it crashed) must never match a request of
        # this one. With per-incarnation counters from 0 it did (soak seed 31140): a pre-crash fetch
        # response at offset 13 was taken for the restarted follower's fetch at 10, and appended,
        # leaving a hole at 10-12 below the HW. Kafka gets this from per-connection correlation ids.
        self._corr = incarnation << 32  # below bit 62, which the group coordinator's ids carry
        now = clock_ms()
        self._last_isr_check = now
        self._last_hw_checkpoint = now
        self.io.makedirs(log_dir)
        try:
            self._hw_at_start = checkpoint.read_offsets(self.io, os.path.join(log_dir, HW_CHECKPOINT_FILE))
        except CorruptCheckpointError:
            self._hw_at_start = {}
        self.closed = False
        #: producer id blocks this broker may hand out, oldest first, each ``[next, end]`` (KIP-730):
        #: pushed with LeaderAndIsr, or asked for (AllocateProducerIds) when none is left or a tenth
        #: of a block is; see :meth:`allocate_producer_id`
        self._pid_blocks: List[List[int]] = []
        #: the end of the newest block taken: a block starting below it is one this broker had (a
        #: LeaderAndIsr repeating its block after a newer one came) and is never taken again
        self._pid_high = 0
        #: ask the controller for a block (set when none or few ids are left; cleared by an answer)
        self._pid_wanted = False
        #: the AllocateProducerIds in flight: (correlation id, sent at); the answer to any request
        #: of this incarnation is taken (the high mark keeps a block from being taken twice)
        self._pid_request: Optional[Tuple[int, int]] = None
        self._pid_retry_at = 0
        #: a block is asked for when fewer ids than this are left (a tenth of the last block)
        self._pid_low = 1
        #: KIP-890 part 1: transactional produces wait here until the coordinator verified the partition
        #: is in the transaction (:mod:`pylog.replication.txn_verification`; the broker sets its
        #: ``coordinator_for``)
        self.txn_verifier = TxnVerifier(self._next_corr, self.config.request_timeout_ms)
        #: ``(due_ms, path)`` of renamed directories of deleted partitions, removed by :meth:`tick` (and
        #: by a clean shutdown); those a previous incarnation left behind are found again here and
        #: removed at the first tick (Kafka's LogManager finds them too; their readers are gone)
        self.pending_deletes: List[Tuple[int, str]] = []
        self._deleted_count = 0
        #: per replica, the topic configs (the controller's overrides) its log was opened or last reconfigured with
        self._topic_configs: Dict[TP, Tuple[Tuple[str, object], ...]] = {}
        #: called as ``marker_listener(topic, partition, producer_id, committed)`` (on the thread that
        #: drives this manager) once for every transaction marker this leader appended whose answer is
        #: success (the HW passed it); None: nobody listens. The broker routes ``__consumer_offsets``
        #: markers to its group coordinator through it.
        self.marker_listener: Optional[Callable[[str, int, int, bool], Any]] = None
        #: replicas this incarnation deleted: requests for them get UnknownTopicOrPartitionError
        #: (Kafka's answer for a deleted partition) rather than NotLeaderError
        self.deleted: Set[TP] = set()
        for name in sorted(self.io.listdir(log_dir)):
            if name.endswith("-delete") and os.path.isdir(os.path.join(log_dir, name)):
                self.pending_deletes.append((now, os.path.join(log_dir, name)))

    # ----------------------------------------------------------- partitions
    def log_config_for(self, topic_config: Sequence[Tuple[str, object]] = ()) -> Dict[str, Any]:
        """The broker's log config with a topic's overrides (only keys the storage layer knows: :class:`LogConfig`
        fields, each with its own type)."""
        merged = dict(self.log_config)
        merged.update((k, v) for k, v in topic_config if k in LogConfig._fields)
        return merged

    def get_or_create(self, topic: str, partition: int, topic_config: Sequence[Tuple[str, object]] = ()) -> Partition:
        tp = (topic, partition)
        p = self.partitions.get(tp)
        if p is None:
            log = Log.open(
                os.path.join(self.log_dir, f"{topic}-{partition}"), file_io=self.io, clock_ms=self.clock_ms,
                **self.log_config_for(topic_config),
            )
            if dict(topic_config).get("retention_protect_groups"):
                # Consumer-aware retention: protect everything until the maintenance
                # task has computed the named groups' floor (a roll may run retention first).
                log.retention_protect_from = log.log_start_offset
            p = (self.config.partition_factory or Partition)(
                self.broker_id, log, high_watermark=self._hw_at_start.get(tp, 0),
                replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            )
            log.retention_high_watermark = lambda p=p: p.high_watermark  # retention stays below the HW
            self.partitions[tp] = p
            self.epochs_version += 1
            self._added += 1
            self._order[tp] = self._added
            self.deleted.discard(tp)
        return p

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    # -------------------------------------------------------------- dispatch
    def handle(self, src: object, msg: object, now_ms: int) -> Outbox:
        """Process one incoming message; returns what to send."""
        out = Outbox()
        if self.closed:
            return out
        if msg.__class__ in _EPOCH_CHANGING:
            self.epochs_version += 1  # a replica's partition epoch may change (the heartbeat's cache key)
        if isinstance(msg, ReplicaFetchRequest):
            self._on_replica_fetch(src, msg, now_ms, out)
        elif isinstance(msg, ReplicaFetchResponse):
            if len(msg.partitions) > 1:
                # Appends to many replicas (first batches of an epoch write leader-epoch checkpoints):
                # their syncs run once at the end, before anything this response causes is sent.
                with self._batch_syncs(len(msg.partitions)):
                    self._on_replica_fetch_response(msg, now_ms, out)
            else:
                self._on_replica_fetch_response(msg, now_ms, out)
        elif isinstance(msg, FetchRequest):
            self._on_fetch(src, msg, now_ms, out)
        elif isinstance(msg, ProduceRequest):
            self._on_produce(src, msg, now_ms, out)
        elif isinstance(msg, MultiProduceRequest):
            self._on_multi_produce(src, msg, now_ms, out)
        elif isinstance(msg, FetchResponse):
            self._on_fetch_response(msg, now_ms, out)
        elif isinstance(msg, OffsetsForLeaderEpochRequest):
            p = self.partitions.get((msg.topic, msg.partition))
            if p is None:
                out.send(src, OffsetsForLeaderEpochResponse(msg.topic, msg.partition, msg.correlation_id,
                                                            error=NotLeaderError, message="no such replica"))
            else:
                out.send(src, p.handle_offsets_for_leader_epoch(msg))
        elif isinstance(msg, OffsetsForLeaderEpochResponse):
            self._on_epoch_response(msg, now_ms, out)
        elif isinstance(msg, WriteTxnMarkersRequest):
            self._on_write_txn_markers(src, msg, now_ms, out)
        elif isinstance(msg, InitProducerIdRequest):
            out.send(src, self._init_producer_id(msg))
            self._maybe_request_pids(now_ms, out)
        elif isinstance(msg, AllocateProducerIdsResponse):
            self._on_allocate_producer_ids(msg, now_ms)
        elif isinstance(msg, AddPartitionsToTxnResponse):
            self._on_verification(msg, now_ms, out)
        elif isinstance(msg, LeaderAndIsrRequest):
            self._on_leader_and_isr(msg, now_ms, out)
        elif isinstance(msg, AlterPartitionResponse):
            p = self.partitions.get((msg.topic, msg.partition))
            if p is not None and p.on_alter_partition_response(msg, now_ms):
                self._mark_dirty((msg.topic, msg.partition))
                self._complete_delayed((msg.topic, msg.partition), now_ms, out)
        elif isinstance(msg, StopReplicaRequest) and msg.delete_partition:
            if msg.controller_epoch >= self.controller_epoch:
                self._delete_replica(msg, now_ms, out)
        elif isinstance(msg, StopReplicaRequest):
            if msg.controller_epoch >= self.controller_epoch:
                tp = (msg.topic, msg.partition)
                p = self.partitions.get(tp)
                if p is not None:
                    p.stop()
                    self._leave_fetcher(tp)
                    self._mark_dirty(tp)
                    self._fail_delayed_produce(tp, NotLeaderError, out)
        if self._fetchers_due:
            self._send_fetchers(now_ms, out)
        if self._session_wakeups and msg.__class__ is not ProduceRequest and msg.__class__ is not MultiProduceRequest:
            self._answer_woken_sessions(now_ms, out)
        return out

    def _on_leader_and_isr(self, req: LeaderAndIsrRequest, now_ms: int, out: Outbox) -> None:
        if req.controller_epoch < self.controller_epoch:
            return  # a deposed controller (StaleControllerEpochError in Kafka's response)
        if req.broker_incarnation not in (-1, self.incarnation):
            return  # addressed to this broker's previous incarnation (KIP-380 broker epoch)
        self.controller_epoch = req.controller_epoch
        first, count = req.producer_id_block
        if count > 0:
            self._take_pid_block(first, count)
        topic_configs = dict(req.topic_configs)
        # Every state is applied first with the directory syncs of the whole batch deferred (new
        # partition directories, segment files, leader-epoch checkpoints), then the batch is made
        # durable in one go, and only then do its effects (fetches, answers) leave this broker:
        # what a peer or client learns of a replica is on disk first, as before, at one sync per
        # batch rather than several per partition (docs/durability.md, "Batched directory syncs").
        applied: List[Tuple[PartitionState, str]] = []
        with self._batch_syncs(len(req.states)):
            for st in req.states:
                if self.broker_id not in st.replicas:
                    continue
                try:
                    p = self.get_or_create(st.topic, st.partition, topic_configs.get(st.topic, ()))
                    self._apply_topic_config((st.topic, st.partition), p, topic_configs.get(st.topic, ()))
                    outcome = p.apply_state(st, now_ms)
                except (PylogError, OSError) as exc:
                    # Kafka's makeLeaders/makeFollowers skip a replica on a failing disk (offline here);
                    # the other states still apply, and the controller's resend retries this one.
                    logger.error(
                        "%s-%d: broker %d skipped leader epoch %d (leader %d): its replica failed: %s",
                        st.topic, st.partition, self.broker_id, st.leader_epoch, st.leader, exc)
                    continue
                applied.append((st, outcome))
        for st, outcome in applied:
            tp = (st.topic, st.partition)
            if outcome in ("follower", "leader", "isr"):
                self._mark_dirty(tp)  # the fetch sessions holding it answer its new state
            if outcome == "follower":
                self._fail_delayed_produce(tp, NotLeaderError, out)
                self._complete_delayed_fetch(tp, now_ms, out, force=True)
                self.inflight.pop(tp, None)
                self._leave_fetcher(tp)
                self._may_send.add(tp)
                self.next_fetch_at[tp] = now_ms
                self._maybe_send_follower(tp, now_ms, out)
            elif outcome == "leader":
                self.inflight.pop(tp, None)
                self._leave_fetcher(tp)
                self._complete_delayed(tp, now_ms, out)
            elif outcome == "isr":
                self._complete_delayed(tp, now_ms, out)

    @contextlib.contextmanager
    def _batch_syncs(self, count: int) -> Iterator[None]:
        """The directory syncs (and atomic file replaces) of one LeaderAndIsr batch, or of one broker-pair
        fetch response, of ``count`` partitions, run once at the end (FileIO.batched_dir_syncs).

        A failing sync is logged, never raised (as a failing replica is, above): the replicas
        already applied keep running on the page cache, the failure is Kafka's offline log dir
        that the next checkpoint, roll or flush on that disk reports again."""
        try:
            with self.io.batched_dir_syncs():
                yield
        except OSError as exc:
            logger.error(
                "broker %d: syncing the directories of a batch of %d partitions in %s failed: %s",
                self.broker_id, count, self.log_dir, exc)

    def _apply_topic_config(self, tp: TP, p: Partition, topic_config: Sequence[Tuple[str, object]]) -> None:
        """Give an open log its topic's configs when the controller's differ from those it last applied
        (an altered topic config reaches running replicas with the controller's next LeaderAndIsr)."""
        given = tuple(topic_config)
        if self._topic_configs.get(tp) == given:
            return
        if tp in self._topic_configs:
            p.log.reconfigure(LogConfig.from_kwargs(**self.log_config_for(given)))
        self._topic_configs[tp] = given

    # ------------------------------------------------------ topic deletion
    def _delete_replica(self, msg: StopReplicaRequest, now_ms: int, out: Outbox) -> None:
        """Stop the replica, close its log, rename its directory ``<topic>-<p>.<uuid>-delete`` (removed
        after ``file_delete_delay_ms``, or at the next start), drop its checkpoint entries; confirm to
        the controller. Idempotent: a replica that is not open or on disk is confirmed as removed.
        """
        tp = (msg.topic, msg.partition)
        p = self.partitions.pop(tp, None)
        self._order.pop(tp, None)
        self._hw_at_start.pop(tp, None)
        self._topic_configs.pop(tp, None)
        self.deleted.add(tp)
        error: Optional[type] = None
        text = ""
        try:
            if p is not None:
                p.stop()
                self._fail_delayed_produce(tp, NotLeaderError, out)
                for d in self.delayed_fetch.pop(tp, []):
                    out.send(d.src, FetchResponse(msg.topic, msg.partition, d.req.correlation_id,
                                                  error=UnknownTopicOrPartitionError,
                                                  message=f"{msg.topic}-{msg.partition} was deleted"))
                self.inflight.pop(tp, None)
                self._leave_fetcher(tp)
                self._mark_dirty(tp)
                self.next_fetch_at.pop(tp, None)
                self.fetch_wakeups.discard(tp)
                try:
                    p.log.close()
                except OSError:
                    p.log.abandon()  # its data is being deleted anyway
            src = os.path.join(self.log_dir, f"{msg.topic}-{msg.partition}")
            if os.path.isdir(src):
                self._deleted_count += 1
                tag = uuid.UUID(int=((self.incarnation & ((1 << 64) - 1)) << 64) | self._deleted_count).hex
                dst = f"{src}.{tag}-delete"
                os.rename(src, dst)
                self.io.fsync_dir(self.log_dir)
                delay = msg.delete_delay_ms if msg.delete_delay_ms >= 0 else self.config.file_delete_delay_ms
                self.pending_deletes.append((now_ms + delay, dst))
            ld = LogDir.acquire(self.log_dir, self.io)
            try:
                ld.forget(tp)
                ld.write_checkpoints()
            finally:
                ld.release()
            self.checkpoint_high_watermarks()
        except (PylogError, OSError) as exc:
            error, text = KafkaStorageError, f"broker {self.broker_id}: deleting {msg.topic}-{msg.partition}: {exc}"
            logger.error("%s", text)
        out.send(CONTROLLER, StopReplicaResponse(self.broker_id, msg.topic, msg.partition, error, text))

    def _remove_deleted_dirs(self, now_ms: Optional[int]) -> None:
        """Remove the renamed directories of deleted partitions whose delay has passed (all: None)."""
        if not self.pending_deletes or (now_ms is not None and now_ms < min(due for due, _ in self.pending_deletes)):
            return
        keep = []
        for due, path in self.pending_deletes:
            if now_ms is not None and due > now_ms:
                keep.append((due, path))
                continue
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as exc:  # retried at the next tick's turn
                logger.error("broker %d: removing %s failed: %s",
                                                             self.broker_id, path, exc)
                if now_ms is not None:
                    keep.append((now_ms + self.config.file_delete_delay_ms, path))
        self.pending_deletes = keep

    # -------------------------------------------------------------- produce
    def _init_producer_id(self, req: InitProducerIdRequest) -> InitProducerIdResponse:
        """Hand out the next id of the block the controller granted (epoch 0: a new idempotent producer)."""
        try:
            pid = self.allocate_producer_id()
        except BrokerNotAvailableError as exc:
            return InitProducerIdResponse(req.correlation_id, BrokerNotAvailableError, str(exc))
        return InitProducerIdResponse(req.correlation_id, producer_id=pid, producer_epoch=0)

    def allocate_producer_id(self) -> int:
        """The next producer id of the blocks the controller granted (the idempotent producers' and the
        transaction coordinator's). Raises BrokerNotAvailableError (retriable) when none is left; then,
        and when fewer than a tenth of a block is left, the broker asks the controller for a block
        (AllocateProducerIds, sent by the next :meth:`tick` or InitProducerId; Kafka's
        RPCProducerIdManager prefetches at 90% too). O(1) amortized.

        Never the same id twice: a block is taken only if it starts at or after the end of every
        block taken before (the controller hands blocks out in increasing order, each stored first)."""
        blocks = self._pid_blocks
        while blocks and blocks[0][0] >= blocks[0][1]:
            blocks.pop(0)
        if not blocks:
            self._pid_wanted = True
            raise BrokerNotAvailableError(f"broker {self.broker_id} has no producer ids to hand out "
                                          "(it is asking the controller for a block); try again")
        pid = blocks[0][0]
        blocks[0][0] += 1
        if not self._pid_wanted and self._pids_left() < self._pid_low:
            self._pid_wanted = True
        return pid

    def _pids_left(self) -> int:
        return sum(end - nxt for nxt, end in self._pid_blocks)

    def _take_pid_block(self, first: int, count: int) -> bool:
        """Take block ``[first, first + count)`` unless it is not newer than every block taken (O(1))."""
        if count <= 0 or first < self._pid_high:
            return False
        self._pid_blocks.append([first, first + count])
        self._pid_high = first + count
        self._pid_low = max(1, count // 10)
        self._pid_wanted = self._pids_left() < self._pid_low
        return True

    def _maybe_request_pids(self, now_ms: int, out: Outbox) -> None:
        """Send AllocateProducerIds to the controller if a block is wanted and no request is pending
        (one unanswered for :data:`ALLOCATE_PRODUCER_IDS_RETRY_MS` is sent again: lost, or the
        controller moved)."""
        if not self._pid_wanted or now_ms < self._pid_retry_at:
            return
        if self._pid_request is not None and now_ms - self._pid_request[1] < ALLOCATE_PRODUCER_IDS_RETRY_MS:
            return
        corr = self._next_corr()
        self._pid_request = (corr, now_ms)
        out.send(CONTROLLER, AllocateProducerIdsRequest(self.broker_id, self.incarnation, corr))

    def _on_allocate_producer_ids(self, resp: AllocateProducerIdsResponse, now_ms: int) -> None:
        """The controller's block (or refusal: asked again after a back-off). An answer meant for another
        incarnation of this broker is dropped."""
        if resp.correlation_id >> 32 != self.incarnation:
            return  # not a request of this incarnation
        if self._pid_request is not None and self._pid_request[0] == resp.correlation_id:
            self._pid_request = None
        if resp.error is not None or resp.broker_incarnation != self.incarnation:
            logger.info("broker %d: AllocateProducerIds refused: %s %s", self.broker_id,
                        getattr(resp.error, "__name__", resp.error), resp.message)
            self._pid_retry_at = now_ms + ALLOCATE_PRODUCER_IDS_BACKOFF_MS
            return
        self._take_pid_block(resp.producer_id_start, resp.producer_id_len)

    def _on_multi_produce(self, src: object, req: MultiProduceRequest, now_ms: int, out: Outbox) -> None:
        """Each part appended in order, as if it had come alone; one :class:`MultiProduceResponse` once
        every part has its answer (with acks=all: committed, refused or timed out - Kafka's
        ``DelayedProduce`` over all the request's partitions). O(parts) plus the appends."""
        if req.acks == 0:
            for part in req.parts:
                self._on_produce(src, part, now_ms, out)
            return
        gather = _Gather(src, req.correlation_id, len(req.parts))
        for i, part in enumerate(req.parts):
            self._on_produce(_GatherSlot(gather, i), part, now_ms, out)

    def _on_produce(self, src: object, req: ProduceRequest, now_ms: int, out: Outbox) -> None:
        tp = (req.topic, req.partition)
        p = self.partitions.get(tp)
        acks = req.acks
        if p is None:
            if acks != 0:
                gone = tp in self.deleted
                _reply(out, src, ProduceResponse(req.topic, req.partition, req.correlation_id,
                                              error=UnknownTopicOrPartitionError if gone else NotLeaderError,
                                              message=f"broker {self.broker_id} has no replica of "
                                              f"{req.topic}-{req.partition}" + (" (deleted)" if gone else "")))
            return
        if p.role == LEADER and req.transactional_id is not None:
            held, refused = self.txn_verifier.hold(src, req, p.log.producer_state, now_ms, out)
            if refused is not None:
                self._refuse_produce(refused, out)
            if held:
                return
        self._append_produce(src, req, p, now_ms, out)

    def _refuse_produce(self, refused: Tuple[object, ProduceRequest, type, str], out: Outbox) -> None:
        src, req, error, message = refused
        if req.acks != 0:
            _reply(out, src, ProduceResponse(req.topic, req.partition, req.correlation_id, error=error, message=message))

    def _on_verification(self, resp: AddPartitionsToTxnResponse, now_ms: int, out: Outbox) -> None:
        """The transaction coordinator answered a KIP-890 verification: append or refuse what waited."""
        v = self.txn_verifier
        if not v.owns(resp.correlation_id):
            return
        # the partition of the verification (the response names it in partition_errors, or not at all)
        tp = v.partition_of(resp.correlation_id)
        p = self.partitions.get(tp)
        appends, refused = v.on_response(resp, p.log.producer_state if p is not None else None, now_ms, out)
        for r in refused:
            self._refuse_produce(r, out)
        for i, (src, req) in enumerate(appends):
            p = self.partitions.get(tp)
            if i == 0 and p is not None:
                self._append_produce(src, req, p, now_ms, out)
            else:  # those that waited behind it: checked again (another epoch, or the first failed)
                self._on_produce(src, req, now_ms, out)

    def _append_produce(self, src: object, req: ProduceRequest, p: Partition, now_ms: int, out: Outbox) -> None:
        tp = (req.topic, req.partition)
        acks = req.acks
        if self.sessions:
            self._before_append(tp)
        try:
            res = p.append_as_leader(req.records, acks, now_ms)
        except PylogError as exc:
            if acks != 0:
                _reply(out, src, ProduceResponse(req.topic, req.partition, req.correlation_id, error=type(exc),
                                              message=str(exc)))
            return
        if self.delayed_fetch.get(tp) or self._session_wakeups:
            # The parked fetches see the new data once the messages queued now are handled
            # (complete_fetch_wakeups): a producer's requests in flight are appended first and
            # each follower gets them in one response, not one round per batch.
            self.fetch_wakeups.add(tp)
        if acks != ACKS_ALL:
            if acks != 0:
                _reply(out, src, ProduceResponse(req.topic, req.partition, req.correlation_id,
                                              base_offset=res.base_offset, timestamp=res.max_timestamp))
            self._complete_delayed(tp, now_ms, out, fetches=False)
            return
        if p.high_watermark > res.last_offset and not self.delayed_produce.get(tp):
            # Already committed (the ISR is the leader alone, or a duplicate below the HW) and
            # nothing older waits: answer as the purgatory would at once, without parking it.
            self._answer_produce(p, src, req, res.base_offset, res.max_timestamp, out)
            return
        self.delayed_produce.setdefault(tp, []).append(
            _DelayedProduce(src, req, res.last_offset + 1, now_ms + req.timeout_ms, res.base_offset, res.max_timestamp)
        )
        heapq.heappush(self._produce_deadlines, (now_ms + req.timeout_ms, tp))
        self._complete_delayed(tp, now_ms, out, fetches=False)

    def complete_fetch_wakeups(self, now_ms: int) -> Outbox:
        """Answer the fetches parked on partitions that produces appended to since the last call
        (:attr:`fetch_wakeups`); what to send."""
        out = Outbox()
        wakeups = self.fetch_wakeups
        if wakeups and not self.closed:
            self.fetch_wakeups = set()
            for tp in wakeups:
                self._complete_delayed_fetch(tp, now_ms, out)
            if self._session_wakeups:
                self._answer_woken_sessions(now_ms, out)
        else:
            wakeups.clear()
        return out

    def _answer_produce(self, p: Partition, src: object, r: ProduceRequest, base_offset: int, timestamp: int,
                        out: Outbox) -> None:
        """The answer to an acks=all produce whose offsets the HW has passed (``p`` leads)."""
        if len(p.maximal_isr) >= p.effective_min_isr:
            _reply(out, src, ProduceResponse(r.topic, r.partition, r.correlation_id,
                                          base_offset=base_offset, timestamp=timestamp))
        else:
            _reply(out, src, ProduceResponse(
                r.topic, r.partition, r.correlation_id, error=NotEnoughReplicasAfterAppendError,
                message=f"{r.topic}-{r.partition}: offset {base_offset} appended but the ISR "
                f"{sorted(p.maximal_isr)} shrank below min_insync_replicas={p.min_insync_replicas}"))

    def _complete_delayed(self, tp: TP, now_ms: int, out: Outbox, fetches: bool = True) -> None:
        """Re-check the produce and fetch purgatories of ``tp`` (after a HW or ISR change); the
        fetch purgatory only with ``fetches`` (else :meth:`complete_fetch_wakeups` does)."""
        p = self.partitions.get(tp)
        waiting = self.delayed_produce.get(tp)
        if waiting and p is not None:
            keep = []
            for d in waiting:
                r = d.req
                if p.role != LEADER:
                    _reply(out, d.src, ProduceResponse(r.topic, r.partition, r.correlation_id, error=NotLeaderError,
                                                    message=f"broker {self.broker_id} stopped leading {r.topic}-{r.partition}"))
                elif p.high_watermark >= d.required_offset:
                    self._answer_produce(p, d.src, r, d.base_offset, d.timestamp, out)
                elif len(p.maximal_isr) < p.effective_min_isr:
                    # The ISR shrank below min ISR after the append: the HW stays where it is (KIP-966), so
                    # waiting could only end in a timeout. Answer now, as Kafka <= 3.6 did once its HW passed
                    # the append (checkEnoughReplicasReachOffset): retriable; the records are in the leader's
                    # log and are committed if the ISR grows back (an idempotent retry is then a duplicate).
                    _reply(out, d.src, ProduceResponse(
                        r.topic, r.partition, r.correlation_id, error=NotEnoughReplicasAfterAppendError,
                        message=f"{r.topic}-{r.partition}: offset {d.base_offset} appended but the ISR "
                        f"{sorted(p.maximal_isr)} shrank below min_insync_replicas={p.min_insync_replicas}"))
                elif now_ms >= d.deadline_ms:
                    _reply(out, d.src, ProduceResponse(r.topic, r.partition, r.correlation_id, error=RequestTimedOutError,
                                                    message=f"{r.topic}-{r.partition}: offset {d.base_offset} not "
                                                    f"replicated to the ISR within {r.timeout_ms} ms"))
                else:
                    keep.append(d)
            self.delayed_produce[tp] = keep
        if fetches:
            self._complete_delayed_fetch(tp, now_ms, out)

    def _fail_delayed_produce(self, tp: TP, error: type, out: Outbox) -> None:
        for d in self.delayed_produce.pop(tp, []):
            r = d.req
            _reply(out, d.src, ProduceResponse(r.topic, r.partition, r.correlation_id, error=error,
                                            message=f"broker {self.broker_id} stopped leading {r.topic}-{r.partition}"))

    # ------------------------------------------------------- txn markers
    def _on_write_txn_markers(self, src: object, req: WriteTxnMarkersRequest, now_ms: int, out: Outbox) -> None:
        """The transaction coordinator's WriteTxnMarkers (Kafka's ``handleWriteTxnMarkersRequest``): each
        marker is appended by this broker's leader replica of its partition
        (:meth:`Partition.append_marker`) and answered like an acks=all produce - once the HW passed it
        (then :attr:`marker_listener` hears of it), or failed: NotLeaderError (no replica, not the
        leader, or it stopped leading before the marker was committed), NotEnoughReplicasError,
        TransactionCoordinatorFencedError, InvalidProducerEpochError, KafkaStorageError,
        NotEnoughReplicasAfterAppendError, RequestTimedOutError (not committed within
        ``request_timeout_ms``). One :class:`WriteTxnMarkersResponse` carries every marker's result,
        in the request's order. O(markers) plus the appends."""
        gather = _MarkerGather(src, req.correlation_id, tuple(req.markers), self.marker_listener)
        if not gather.markers:
            out.send(src, WriteTxnMarkersResponse(req.correlation_id, ()))
            return
        timeout = self.config.request_timeout_ms
        for i, m in enumerate(gather.markers):
            slot = _GatherSlot(gather, i)
            tp = (m.topic, m.partition)
            # the purgatory answers a ProduceRequest; this one stands for the marker (acks=all)
            stand_in = ProduceRequest(m.topic, m.partition, (), ACKS_ALL, timeout, req.correlation_id)
            p = self.partitions.get(tp)
            if p is None:
                _reply(out, slot, ProduceResponse(m.topic, m.partition, req.correlation_id, error=NotLeaderError,
                                                  message=f"broker {self.broker_id} has no replica of "
                                                  f"{m.topic}-{m.partition}"))
                continue
            if self.sessions:
                self._before_append(tp)
            try:
                res = p.append_marker(m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch, now_ms)
            except (PylogError, OSError) as exc:
                error = type(exc) if isinstance(exc, PylogError) else KafkaStorageError
                _reply(out, slot, ProduceResponse(m.topic, m.partition, req.correlation_id, error=error,
                                                  message=str(exc)))
                continue
            if self.delayed_fetch.get(tp) or self._session_wakeups:
                self.fetch_wakeups.add(tp)
            if p.high_watermark > res.last_offset and not self.delayed_produce.get(tp):
                self._answer_produce(p, slot, stand_in, res.base_offset, res.max_timestamp, out)
                continue
            self.delayed_produce.setdefault(tp, []).append(
                _DelayedProduce(slot, stand_in, res.last_offset + 1, now_ms + timeout, res.base_offset,
                                res.max_timestamp))
            heapq.heappush(self._produce_deadlines, (now_ms + timeout, tp))
            self._complete_delayed(tp, now_ms, out, fetches=False)

    # ---------------------------------------------------------------- fetch
    def _on_fetch(self, src: object, req: FetchRequest, now_ms: int, out: Outbox) -> None:
        tp = (req.topic, req.partition)
        p = self.partitions.get(tp)
        if p is None:
            gone = tp in self.deleted
            out.send(src, FetchResponse(req.topic, req.partition, req.correlation_id,
                                        error=UnknownTopicOrPartitionError if gone else NotLeaderError,
                                        message=f"broker {self.broker_id} has no replica of {req.topic}-{req.partition}"
                                        + (" (deleted)" if gone else "")))
            return
        hw_before = p.high_watermark
        resp, alter = p.handle_fetch(req, now_ms)
        if alter is not None:
            self._proposing.add(tp)
            out.send(CONTROLLER, alter)
        if p.high_watermark != hw_before:
            self._mark_dirty(tp)
            self._complete_delayed(tp, now_ms, out)
        if resp.error is None and not resp.records and req.max_wait_ms > 0:
            # (read_committed: parked on the LSO, which the HW passing a marker moves)
            held = resp.last_stable_offset if req.isolation_level == 1 and req.replica_id < 0 else p.high_watermark
            self.delayed_fetch.setdefault(tp, []).append(_DelayedFetch(src, req, now_ms + req.max_wait_ms, held))
            heapq.heappush(self._fetch_deadlines, (now_ms + req.max_wait_ms, tp))
            return
        out.send(src, resp)

    def _complete_delayed_fetch(self, tp: TP, now_ms: int, out: Outbox, force: bool = False) -> None:
        held = self.delayed_fetch.pop(tp, None)
        if not held:
            return
        p = self.partitions.get(tp)
        keep: List[_DelayedFetch] = []
        for d in held:
            if p is None:
                continue
            if not force and now_ms < d.deadline_ms and p.role == LEADER:
                if d.req.isolation_level == 1 and d.req.replica_id < 0:
                    # read_committed: wait until the LSO moves (a HW that moves under an open
                    # transaction gives this fetch nothing new)
                    lso = p.last_stable_offset
                    if d.req.fetch_offset >= lso and lso == d.hw_at_hold:
                        keep.append(d)
                        continue
                else:
                    limit = p.log_end_offset if d.req.replica_id >= 0 else p.high_watermark
                    if d.req.fetch_offset >= limit and p.high_watermark == d.hw_at_hold:
                        keep.append(d)
                        continue
            resp, alter = p.handle_fetch(d.req, now_ms)
            if alter is not None:
                self._proposing.add(tp)
                out.send(CONTROLLER, alter)
            out.send(d.src, resp)
        if keep:
            self.delayed_fetch[tp] = keep

    # -------------------------------------------------------- follower side
    def _maybe_send_follower(self, tp: TP, now_ms: int, out: Outbox) -> None:
        """Start what follower ``tp`` needs next: an OffsetsForLeaderEpoch of its own while it
        truncates, else a place in its leader's fetcher (whose request :meth:`_send_fetchers` sends)."""
        p = self.partitions.get(tp)
        if p is None or p.role != FOLLOWER or tp in self.inflight or tp in self._member_of:
            self._may_send.discard(tp)  # a follower again gets here from its LeaderAndIsr
            return
        self._may_send.add(tp)
        if p.leader < 0 or now_ms < self.next_fetch_at.get(tp, 0):
            return
        try:
            req = p.next_follower_request(self._next_corr(), self.config.replica_fetch_max_wait_ms, self.incarnation)
        except (PylogError, OSError) as exc:  # a truncation failed: stop fetching, raise nothing
            p.fail_fetching(p.log_end_offset, exc, "truncation")
            return
        if req is None:
            return
        self._may_send.discard(tp)
        if isinstance(req, FetchRequest):
            f = self.fetchers.get(p.leader)
            if f is None:
                f = self.fetchers[p.leader] = _Fetcher(p.leader)
            f.members[tp] = req
            f.changed.add(tp)
            f.forgotten.discard(tp)
            self._member_of[tp] = p.leader
            self._fetchers_due.add(p.leader)
            return
        self.inflight[tp] = (req.correlation_id, req, now_ms)  # type: ignore[attr-defined]
        out.send(p.leader, req)

    def _leave_fetcher(self, tp: TP) -> None:
        """Take follower ``tp`` out of its fetcher (the leader's session forgets it with the next request)."""
        leader = self._member_of.pop(tp, None)
        if leader is None:
            return
        f = self.fetchers[leader]
        del f.members[tp]
        f.changed.discard(tp)
        if f.known.pop(tp, None) is not None:
            f.forgotten.add(tp)
            self._fetchers_due.add(leader)

    def _send_fetchers(self, now_ms: int, out: Outbox) -> None:
        """Send the next request of every fetcher that has none in flight and something to fetch or
        forget: a full fetch when it has no session, else only the changed partitions (KIP-227).
        O(changed partitions) per request."""
        due, self._fetchers_due = self._fetchers_due, set()
        order = self._order
        for leader in sorted(due):
            f = self.fetchers.get(leader)
            if f is None or f.inflight is not None:
                continue
            if not f.members and not f.forgotten:
                continue  # nothing to fetch; the leader's session lingers until a full fetch replaces it
            if now_ms < f.backoff_until:
                self._fetchers_due.add(leader)  # the tick tries again
                continue
            corr = self._next_corr()
            if f.session_id == 0:
                listed = sorted(f.members, key=lambda tp: order.get(tp, 0))
                req = ReplicaFetchRequest(self.broker_id, self.incarnation, corr, 0, 0,
                                          tuple(f.members[tp] for tp in listed), (), self.config.replica_fetch_max_wait_ms)
                f.known = dict(f.members)
            else:
                listed = sorted(f.changed, key=lambda tp: order.get(tp, 0))
                parts = tuple(f.members[tp] for tp in listed)
                for tp, m in zip(listed, parts):
                    f.known[tp] = m
                req = ReplicaFetchRequest(self.broker_id, self.incarnation, corr, f.session_id, f.epoch, parts,
                                          tuple(sorted(f.forgotten)), self.config.replica_fetch_max_wait_ms)
                f.epoch += 1
            f.changed = set()
            f.forgotten = set()
            f.inflight = (corr, req, now_ms)
            out.send(leader, req)

    def _on_replica_fetch_response(self, resp: ReplicaFetchResponse, now_ms: int, out: Outbox) -> None:
        """Follower side: apply each partition's answer (as the per-partition path does), then send
        the fetcher's next request."""
        leader = next((ld for ld, f in self.fetchers.items()
                       if f.inflight is not None and f.inflight[0] == resp.correlation_id), None)
        if leader is None:
            return  # a response to a request this incarnation gave up on (or never sent)
        f = self.fetchers[leader]
        f.inflight = None
        self._fetchers_due.add(leader)
        if resp.error is not None:
            f.reset_session()  # Kafka's FetchSessionHandler: a session error means a full fetch next
            f.backoff_until = now_ms + self.config.replica_fetch_backoff_ms
            return
        if f.session_id == 0:
            f.session_id, f.epoch = resp.session_id, 1
        backoff = self.config.replica_fetch_backoff_ms
        for fetch_offset, r in resp.partitions:
            tp = (r.topic, r.partition)
            m = f.members.get(tp)
            p = self.partitions.get(tp)
            if m is None or p is None or m.fetch_offset != fetch_offset:
                continue  # left the fetcher, or its entry changed since: the next request lists it
            corrupt_before = p.corrupt_fetches
            try:
                p.on_fetch_response(m, r, now_ms)  # (an append failure is handled inside)
            except (PylogError, OSError) as exc:  # a truncation or log-start move failed
                p.fail_fetching(m.fetch_offset, exc, "fetch response")
            failed = r.error is not None or p.corrupt_fetches != corrupt_before
            if failed:
                self.next_fetch_at[tp] = now_ms + backoff
            if (not failed and p.role == FOLLOWER and p.leader == leader and p.follower_state == FETCHING
                    and p.leader_epoch == m.current_leader_epoch):
                if p.log_end_offset != m.fetch_offset or p.log.log_start_offset != m.log_start_offset:
                    f.members[tp] = m = FetchRequest(
                        self.broker_id, m.topic, m.partition, p.log_end_offset, m.current_leader_epoch,
                        m.correlation_id, max_wait_ms=m.max_wait_ms, log_start_offset=p.log.log_start_offset,
                        replica_incarnation=self.incarnation)
                    f.changed.add(tp)
            else:
                # Truncating again, failed, backing off or no longer following this leader: out of
                # the fetcher; the per-partition path takes it from here.
                self._leave_fetcher(tp)
                self._may_send.add(tp)
                self._maybe_send_follower(tp, now_ms, out)

    # ------------------------------------------------------ leader sessions
    def _materialize(self, s: _Session, tp: TP) -> None:
        """Bring follower ``s.replica_id``'s fetch state of ``tp`` up to the session's last request:
        what a per-partition fetch at ``s.last_fetch_ms`` with the unchanged offset would have done
        (valid while ``tp`` is not dirty: the leader's log end has not moved since it was answered)."""
        p = self.partitions.get(tp)
        m = s.parts.get(tp)
        if p is None or m is None or p.role != LEADER or m.current_leader_epoch != p.leader_epoch:
            return
        st = p.remote.get(s.replica_id)
        if st is None or s.incarnation < st.incarnation or st.log_end_offset != m.fetch_offset:
            return
        st.update(m.fetch_offset, s.last_fetch_ms, p.log.log_end_offset)

    def _mark_dirty(self, tp: TP) -> None:
        """``tp``'s leader state changed: every session holding it answers it with its next request
        (a parked one at once)."""
        for rid, s in self.sessions.items():
            if tp in s.parts:
                if tp not in s.dirty:
                    self._materialize(s, tp)
                    s.dirty.add(tp)
                if s.parked is not None:  # (also when held back: a HW-only answer waits for news like this)
                    self._session_wakeups.add(rid)

    def _before_append(self, tp: TP) -> None:
        """Called before the leader's log end moves: the sessions holding ``tp`` mark it dirty (after
        bringing their follower's fetch state up to date at the old log end)."""
        self._mark_dirty(tp)

    def _on_replica_fetch(self, src: object, req: ReplicaFetchRequest, now_ms: int, out: Outbox) -> None:
        """Leader side of a broker-pair fetch: open or continue the follower's session, answer the
        listed and dirty partitions, park when none has anything to say. O(listed + dirty)."""
        rid = req.replica_id
        s = self.sessions.get(rid)
        if req.session_id == 0:
            if s is not None:  # replaced: what the old session knew is brought up to date first
                for tp in s.parts:
                    if tp not in s.dirty:
                        self._materialize(s, tp)
            self._next_session += 1
            s = self.sessions[rid] = _Session(rid, req.replica_incarnation, self._next_session, now_ms)
            listed: Dict[TP, FetchRequest] = {}
        else:
            error: Optional[type] = None
            if s is None or s.session_id != req.session_id:
                error = FetchSessionIdNotFoundError
            elif req.session_epoch != s.epoch or req.replica_incarnation != s.incarnation:
                error = InvalidFetchSessionEpochError
            if error is not None:
                out.send(src, ReplicaFetchResponse(req.correlation_id, 0, error=error,
                                                   message=f"broker {self.broker_id}: fetch session {req.session_id} "
                                                   f"epoch {req.session_epoch} of broker {rid} is not open here"))
                return
            assert s is not None
            s.epoch += 1
            listed = {}
            for tp in req.forgotten:
                if tp not in s.dirty:
                    self._materialize(s, tp)
                s.parts.pop(tp, None)
                s.sent.pop(tp, None)
                s.dirty.discard(tp)
                s.owed.discard(tp)
        for m in req.partitions:
            tp = (m.topic, m.partition)
            if tp in s.parts and tp not in s.dirty:
                self._materialize(s, tp)  # the previous request's virtual fetch, at the old offset
            s.parts[tp] = m
            listed[tp] = m  # always answered (the follower may have dropped the last answer), maybe held back
        s.parked = None  # a follower has one request in flight: an older parked one was given up
        s.last_fetch_ms = now_ms
        self._session_wakeups.discard(rid)
        parts = self._answer_session(s, listed, now_ms, out, full=req.session_id == 0, hold=req.max_wait_ms > 0)
        if parts or req.max_wait_ms <= 0 or req.session_id == 0:
            out.send(src, ReplicaFetchResponse(req.correlation_id, s.session_id, parts))
            return
        s.parked = (src, req.correlation_id, now_ms + req.max_wait_ms)
        heapq.heappush(self._session_deadlines, (now_ms + req.max_wait_ms, rid, s.session_id))

    def _answer_session(self, s: _Session, listed: Dict[TP, FetchRequest], now_ms: int, out: Outbox,
                        full: bool, hold: bool = False) -> Tuple[Tuple[int, FetchResponse], ...]:
        """Serve the listed and dirty partitions of session ``s`` (in the order of :attr:`partitions`);
        the answers that say something (all of them for a full fetch).

        With ``hold`` (and ``replica_hw_linger_ms`` > 0), answers that carry no records, no error and
        no new log start or leader epoch - a HW move, or a listed partition with nothing new - are
        held back while nothing else is to be said: none is returned, their partitions stay dirty
        (listed ones owed an answer) and :attr:`_Session.linger_due` is set; they go with the
        session's next answer, or alone once the linger has passed (:meth:`tick`). This removes the
        round a HW move cost every other follower (issue 18). O(listed + dirty)."""
        todo: Union[Set[TP], Dict[TP, FetchRequest]] = s.dirty.union(listed) if s.dirty else listed
        if s.owed:
            todo = s.owed.union(todo)
            listed = dict(listed)
            for tp in s.owed:
                m = s.parts.get(tp)
                if m is not None and tp not in listed:
                    listed[tp] = m
            s.owed = set()
        s.dirty = set()
        if not todo:
            s.linger_due = None
            return ()
        linger = self.config.replica_hw_linger_ms
        hold = hold and not full and linger > 0 and (s.linger_due is None or now_ms < s.linger_due)
        urgent = False
        order = self._order
        answers: List[Tuple[int, FetchResponse]] = []
        held: List[Tuple[TP, Tuple[int, int, int]]] = []
        for tp in sorted(todo, key=lambda tp: order.get(tp, 0)):
            m = s.parts.get(tp)
            if m is None:
                continue
            p = self.partitions.get(tp)
            if p is None:
                gone = tp in self.deleted
                resp = FetchResponse(m.topic, m.partition, m.correlation_id,
                                     error=UnknownTopicOrPartitionError if gone else NotLeaderError,
                                     message=f"broker {self.broker_id} has no replica of {m.topic}-{m.partition}"
                                     + (" (deleted)" if gone else ""))
            else:
                hw_before = p.high_watermark
                resp, alter = p.handle_fetch(m, now_ms)
                if alter is not None:
                    self._proposing.add(tp)
                    out.send(CONTROLLER, alter)
                if p.high_watermark != hw_before:
                    for other in self.sessions.values():  # the other followers learn the new HW
                        if other is not s and tp in other.parts and tp not in other.dirty:
                            self._materialize(other, tp)
                            other.dirty.add(tp)
                            if other.parked is not None:
                                if linger > 0:  # a HW alone: with the next data, or after the linger
                                    self._linger(other, now_ms)
                                else:
                                    self._session_wakeups.add(other.replica_id)
                    self._complete_delayed(tp, now_ms, out)
            state = (resp.high_watermark, resp.log_start_offset, resp.leader_epoch)
            prev = s.sent.get(tp)
            if full or resp.records or resp.error is not None or prev is None or prev[1:] != state[1:]:
                urgent = True
            elif prev[0] == state[0] and tp not in listed:
                continue  # nothing to say
            answers.append((m.fetch_offset, resp))
            held.append((tp, state))
        if hold and not urgent and answers:
            for tp, _ in held:
                s.dirty.add(tp)
                if tp in listed:
                    s.owed.add(tp)
            self._linger(s, now_ms)
            return ()
        for tp, state in held:
            s.sent[tp] = state
        s.linger_due = None
        return tuple(answers)

    def _linger(self, s: _Session, now_ms: int) -> None:
        """Session ``s`` holds back HW-only answers: they go alone at the first tick
        ``replica_hw_linger_ms`` from now unless an answer with news takes them first."""
        if s.linger_due is None:
            s.linger_due = now_ms + self.config.replica_hw_linger_ms
            heapq.heappush(self._session_deadlines, (s.linger_due, s.replica_id, s.session_id))

    def _answer_woken_sessions(self, now_ms: int, out: Outbox) -> None:
        """Answer the parked sessions that have a dirty partition (those with nothing to say after
        all stay parked)."""
        while self._session_wakeups:  # answering one may move a HW that wakes another
            woken, self._session_wakeups = self._session_wakeups, set()
            for rid in sorted(woken):
                s = self.sessions.get(rid)
                if s is None or s.parked is None:
                    continue
                parts = self._answer_session(s, {}, now_ms, out, full=False, hold=True)
                if parts:
                    src, corr, _ = s.parked
                    s.parked = None
                    out.send(src, ReplicaFetchResponse(corr, s.session_id, parts))

    def _take_inflight(self, tp: TP, corr: int) -> Optional[object]:
        cur = self.inflight.get(tp)
        if cur is None or cur[0] != corr:
            return None
        del self.inflight[tp]
        self._may_send.add(tp)
        return cur[1]

    def _on_fetch_response(self, resp: FetchResponse, now_ms: int, out: Outbox) -> None:
        tp = (resp.topic, resp.partition)
        req = self._take_inflight(tp, resp.correlation_id)
        p = self.partitions.get(tp)
        if req is None or p is None or not isinstance(req, FetchRequest):
            return
        corrupt_before = p.corrupt_fetches
        try:
            p.on_fetch_response(req, resp, now_ms)  # (an append failure is handled inside)
        except (PylogError, OSError) as exc:  # a truncation or log-start move failed
            p.fail_fetching(req.fetch_offset, exc, "fetch response")
        if resp.error is not None or p.corrupt_fetches != corrupt_before:
            self.next_fetch_at[tp] = now_ms + self.config.replica_fetch_backoff_ms
        self._maybe_send_follower(tp, now_ms, out)

    def _on_epoch_response(self, resp: OffsetsForLeaderEpochResponse, now_ms: int, out: Outbox) -> None:
        tp = (resp.topic, resp.partition)
        req = self._take_inflight(tp, resp.correlation_id)
        p = self.partitions.get(tp)
        if req is None or p is None:
            return
        if isinstance(req, OffsetsForLeaderEpochRequest) and req.current_leader_epoch == p.leader_epoch:
            try:
                p.on_offsets_for_leader_epoch(resp)
            except (PylogError, OSError) as exc:  # the truncation failed: stop fetching, raise nothing
                p.fail_fetching(p.log_end_offset, exc, "truncation")
        if resp.error is not None:
            self.next_fetch_at[tp] = now_ms + self.config.replica_fetch_backoff_ms
        self._maybe_send_follower(tp, now_ms, out)

    # ----------------------------------------------------------------- tick
    def tick(self, now_ms: int) -> Outbox:
        """Timers: ISR expiration, purgatory deadlines, follower resends, HW checkpoint."""
        out = Outbox()
        if self.closed:
            return out
        cfg = self.config
        if now_ms - self._last_isr_check >= cfg.replica_lag_time_max_ms // 2:
            self._last_isr_check = now_ms
            self._sweep_sessions()
            for tp, p in self.partitions.items():
                alter = p.maybe_shrink_isr(now_ms, cfg.alter_partition_retry_ms)
                if alter is not None:
                    self._proposing.add(tp)
                    out.send(CONTROLLER, alter)
        # Below: only the replicas with something due, visited in the order a loop over every
        # replica would visit them (the seeded simulations replay the same message sequence);
        # an idle tick is O(1) whatever the number of partitions (issue 18).
        order = self._order
        if self._proposing:
            for tp in sorted(self._proposing, key=lambda tp: order.get(tp, 0)):
                proposer = self.partitions.get(tp)
                if proposer is None or not proposer.has_proposal:
                    self._proposing.discard(tp)
                    continue
                # An unanswered AlterPartition is sent again, unchanged (Kafka retries until answered).
                again = proposer.resend_proposal(now_ms, cfg.alter_partition_retry_ms)
                if again is not None:
                    out.send(CONTROLLER, again)
        if self._pid_wanted:
            self._maybe_request_pids(now_ms, out)
        if len(self.txn_verifier):
            for refused in self.txn_verifier.expire(now_ms, out):
                self._refuse_produce(refused, out)
        for tp in self._due(self._produce_deadlines, self.delayed_produce, now_ms):
            if any(now_ms >= d.deadline_ms for d in self.delayed_produce.get(tp, ())):
                self._complete_delayed(tp, now_ms, out)
        for tp in self._due(self._fetch_deadlines, self.delayed_fetch, now_ms):
            if any(now_ms >= d.deadline_ms for d in self.delayed_fetch.get(tp, ())):
                self._complete_delayed_fetch(tp, now_ms, out)
        timeout = cfg.request_timeout_ms
        expired = []
        for tp, cur in self.inflight.items():  # oldest first: stop at the first one not expired
            if now_ms - cur[2] < timeout:
                break
            expired.append(tp)
        if expired or self._may_send:
            for tp in sorted(self._may_send.union(expired), key=lambda tp: order.get(tp, 0)):
                follower = self.partitions.get(tp)
                if follower is None or follower.role != FOLLOWER:
                    self._may_send.discard(tp)
                    continue
                sent = self.inflight.get(tp)
                if sent is not None and now_ms - sent[2] >= timeout:
                    del self.inflight[tp]
                self._maybe_send_follower(tp, now_ms, out)
        # Broker-pair fetching: a fetcher whose request timed out starts again with a full fetch; a
        # parked session whose wait ended is answered (empty unless something changed). O(brokers).
        # A request with partitions waiting to join that is unanswered well past max_wait_ms may be
        # parked at (or lost with) a leader that restarted - the in-process transports report no
        # dead connection, as Kafka's fetcher learns of one - so it is given up and a full fetch
        # starts a new session (never an ignored answer the leader thinks delivered). At most one
        # full fetch per pair per ``2 * replica_fetch_max_wait_ms + 1 s``.
        stale = 2 * cfg.replica_fetch_max_wait_ms + 1_000
        for leader in sorted(self.fetchers):
            f = self.fetchers[leader]
            if f.inflight is not None and (now_ms - f.inflight[2] >= timeout
                                           or (f.changed and now_ms - f.inflight[2] >= stale)):
                f.inflight = None
                f.reset_session()
            if f.inflight is None and (f.members or f.forgotten):
                self._fetchers_due.add(leader)
        if self._fetchers_due:
            self._send_fetchers(now_ms, out)
        heap = self._session_deadlines
        while heap and heap[0][0] <= now_ms:
            _, rid, sid = heapq.heappop(heap)
            s = self.sessions.get(rid)
            if (s is None or s.session_id != sid or s.parked is None
                    or (s.parked[2] > now_ms and (s.linger_due is None or s.linger_due > now_ms))):
                continue
            src, corr, _ = s.parked
            s.parked = None
            self._session_wakeups.discard(rid)
            out.send(src, ReplicaFetchResponse(corr, s.session_id, self._answer_session(s, {}, now_ms, out, full=False)))
        if self._session_wakeups:
            self._answer_woken_sessions(now_ms, out)
        self._remove_deleted_dirs(now_ms)
        if now_ms - self._last_hw_checkpoint >= cfg.hw_checkpoint_interval_ms:
            try:
                self.checkpoint_high_watermarks()
            except OSError as exc:  # a failing disk: retried next interval, never raised out of tick
                logger.error(
                    "broker %d: high-watermark checkpoint in %s failed: %s", self.broker_id, self.log_dir, exc)
        return out

    def _sweep_sessions(self) -> None:
        """Before the ISR-expiry pass (O(partitions), every ``replica_lag_time_max_ms / 2``): bring every
        session's follower fetch states up to date, and mark dirty what a session has not answered
        yet (a log start moved by retention, a follower outside the ISR whose expansion is retried)."""
        for rid in sorted(self.sessions):
            s = self.sessions[rid]
            for tp, m in s.parts.items():
                if tp in s.dirty:
                    continue
                self._materialize(s, tp)
                p = self.partitions.get(tp)
                if p is None or p.role != LEADER:
                    continue
                if (s.sent.get(tp) != (p.high_watermark, p.log.log_start_offset, p.leader_epoch)
                        or rid not in p.isr):
                    s.dirty.add(tp)
                    if s.parked is not None:
                        self._session_wakeups.add(rid)

    @staticmethod
    def _due(heap: List[Tuple[int, TP]], parked: Dict[TP, List[Any]], now_ms: int) -> List[TP]:
        """The replicas of ``parked`` with a deadline in ``heap`` at or before ``now_ms``, in the
        order of ``parked`` (as the loop over all of it that this replaces). O(due log n)."""
        if not heap or heap[0][0] > now_ms:
            return []
        due = set()
        while heap and heap[0][0] <= now_ms:
            due.add(heapq.heappop(heap)[1])
        return [tp for tp in parked if tp in due]  # one set lookup per parked replica, only when one is due

    def checkpoint_high_watermarks(self) -> None:
        """Write every replica's HW to ``replication-offset-checkpoint`` (atomically)."""
        self._last_hw_checkpoint = self.clock_ms()
        hws = {tp: p.high_watermark for tp, p in self.partitions.items()}
        checkpoint.write_offsets(self.io, os.path.join(self.log_dir, HW_CHECKPOINT_FILE), hws)

    # ------------------------------------------------------------- shutdown
    def shutdown(self, clean: bool) -> None:
        """Clean: remove deleted partitions' renamed directories, checkpoint HWs and close (flush) every
        log. Unclean: abandon them (a crash; the next start finds the renamed directories)."""
        if self.closed:
            return
        self.closed = True
        if clean:
            self._remove_deleted_dirs(None)
            # A failing disk must not stop the shutdown half-way: every log is closed (or, if
            # closing fails, abandoned, which releases its directory as a crash would), then
            # the first error is raised. The next open recovers what was not closed cleanly.
            failures: List[str] = []
            try:
                self.checkpoint_high_watermarks()
            except OSError as exc:
                failures.append(f"high-watermark checkpoint: {exc}")
            # The log directory's recovery-point and log-start checkpoints are written once, after
            # every log has flushed (Kafka's LogManager.shutdown), not once per closed log.
            ld = next((p.log._logdir for p in self.partitions.values() if p.log._logdir is not None), None)
            try:
                with ld.deferred_checkpoints() if ld is not None else contextlib.nullcontext():
                    try:  # snapshots and flushes first: their directory syncs and renames once (issue 18)
                        with self.io.batched_dir_syncs():
                            for p in self.partitions.values():
                                p.stop()
                                try:
                                    ps = p.producer_state
                                    # Kafka's takeSnapshot: only when the state moved past the newest snapshot
                                    # (an empty or unchanged partition's snapshot would say nothing new).
                                    if ps.map_end_offset > max(ps.snapshot_offsets(), default=0):
                                        ps.take_snapshot()
                                    p.log.flush()
                                except OSError:
                                    pass  # snapshot: the log replay rebuilds it; flush: close() below meets it
                    except OSError:
                        pass  # a snapshot's or an index name's sync: both derived, rebuilt on the next open
                    for (topic, partition), p in self.partitions.items():
                        try:
                            p.log.close()
                        except OSError as exc:
                            failures.append(f"{topic}-{partition}: {exc}")
                            try:
                                p.log.abandon()
                            except OSError:
                                pass
            except OSError as exc:  # the deferred checkpoint write at the end of the block
                failures.append(f"log directory checkpoints: {exc}")
            if failures:
                self.delayed_produce.clear()
                self.delayed_fetch.clear()
                self.inflight.clear()
                raise KafkaStorageError(
                    f"broker {self.broker_id}: clean shutdown of {self.log_dir} failed ({len(failures)}): "
                    + "; ".join(failures[:5])
                )
        else:
            for p in self.partitions.values():
                p.stop()
                p.log.abandon()
        self.delayed_produce.clear()
        self.delayed_fetch.clear()
        self.inflight.clear()
        self._may_send.clear()
        self._proposing.clear()
        self.fetchers.clear()
        self._member_of.clear()
        self.sessions.clear()

    def _check(self) -> None:
        for p in self.partitions.values():
            p._check()
            p.log._check()
        prev_end = -1
        for nxt, end in self._pid_blocks:  # producer id blocks: in order, disjoint, below the high mark
            assert prev_end <= nxt <= end <= self._pid_high, self._pid_blocks
            prev_end = end
        for tp in self.inflight:
            assert tp in self.partitions, tp
        for tp in self.fetch_wakeups:
            assert tp in self.partitions, tp
        # the idle-tick bookkeeping covers everything the full loops it replaced would act on
        sent_at = [cur[2] for cur in self.inflight.values()]
        assert sent_at == sorted(sent_at), "inflight is not in the order of sending"
        for tp, p in self.partitions.items():
            if p.role == FOLLOWER and tp not in self.inflight and tp not in self._member_of and not self.closed:
                assert tp in self._may_send, f"follower {tp} has no request in flight and no tick would send one"
            if p.has_proposal and p.role == LEADER and not self.closed:
                assert tp in self._proposing, f"{tp}'s AlterPartition proposal would never be resent"
        for tp, leader in self._member_of.items():
            f = self.fetchers[leader]
            assert tp in f.members and tp not in self.inflight, tp
            member = self.partitions.get(tp)
            assert member is not None and member.role == FOLLOWER and member.leader == leader, (tp, leader)
        for leader, f in self.fetchers.items():
            assert set(f.members) == {tp for tp, ld in self._member_of.items() if ld == leader}, leader
            assert f.changed <= set(f.members) and not (f.forgotten & set(f.members)), leader
        for tp, parked in self.delayed_fetch.items():
            for d in parked if tp in self.partitions else ():
                assert (d.deadline_ms, tp) in self._fetch_deadlines, (tp, d.deadline_ms)
        for tp, waiting in self.delayed_produce.items():
            for dp in waiting if tp in self.partitions else ():
                assert (dp.deadline_ms, tp) in self._produce_deadlines, (tp, dp.deadline_ms)


__all__ = ["ReplicaManager", "ReplicaManagerConfig", "CONTROLLER", "HW_CHECKPOINT_FILE"]
