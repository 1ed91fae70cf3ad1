"""The transaction coordinator on a broker: what drives a :class:`TransactionCoordinator` (issue 17).

One :class:`TxnHost` per running broker, hosted as the group coordinator is
(:mod:`pylog.runtime.broker`):

* **Load / unload.** :meth:`TxnHost.sync` (each broker tick and after each
  LeaderAndIsr) loads every ``__transaction_state`` partition the broker now
  leads into the coordinator, at coordinator epoch = that partition's leader
  epoch, reading the partition's log to its end (Kafka's
  ``TransactionStateManager.loadTransactionsForTxnTopicPartition``); a
  transaction found in PrepareCommit/PrepareAbort gets its markers written
  again with the new epoch. A partition no longer led is unloaded: the
  requests waiting on it get :class:`NotCoordinatorError`, its markers stop.
* **Requests** (:meth:`TxnHost.handle`): FindCoordinator(TRANSACTION) is
  answered from the metadata (the leader of the id's partition);
  InitProducerId with a transactional id, AddPartitionsToTxn (and its
  ``verify_only`` form, KIP-890 part 1, for partition leaders), AddOffsetsToTxn
  (the group's ``__consumer_offsets`` partition joins the transaction, as
  Kafka's) and EndTxn go to the coordinator. A partition that is not in the
  metadata gets :class:`UnknownTopicOrPartitionError` (Kafka's answer).
  An AddPartitionsToTxn/AddOffsetsToTxn refused only because the id's previous
  transaction is completing (markers going out) is *held* and handled when the
  Complete record is appended (not Kafka's: it answers CONCURRENT_TRANSACTIONS
  and the producer backs off 20 ms); answered ConcurrentTransactionsError after
  ``completion_hold_ms`` (checked on the tick), NotCoordinatorError on unload.
* **Appends.** Each ``__transaction_state`` record the coordinator asks for is
  a :class:`ProduceRequest` with ``acks=all`` to the broker itself (a local
  call, as the group coordinator's); the answer goes to
  ``on_log_append``, unless the partition was reloaded or unloaded meanwhile
  (its coordinator epoch changed: the answer is dropped). Failed appends are
  mapped as Kafka's ``TransactionStateManager.appendTransactionToLog``:
  NotLeader and KafkaStorageError -> NotCoordinatorError; NotEnoughReplicas,
  NotEnoughReplicasAfterAppend, RequestTimedOut, UnknownTopicOrPartition ->
  CoordinatorNotAvailableError. A Complete record whose append failed is
  appended again after ``retry_backoff_ms``.
* **Markers.** A transaction in PrepareCommit/PrepareAbort has one marker per
  partition; the markers are sent as :class:`WriteTxnMarkersRequest` s, one per
  partition leader the metadata names. A marker acknowledged without error
  goes to ``on_marker_written``; NotLeader, UnknownTopicOrPartition,
  KafkaStorageError, NotEnoughReplicas, RequestTimedOut (any other error) are
  retried after ``retry_backoff_ms`` with the leader looked up again; a request
  unanswered for ``request_timeout_ms``, or whose destination stopped leading
  one of its partitions (another leader or leader epoch in the metadata), is
  given up and its markers sent again (a duplicate marker completes nothing
  on a partition that has it). TransactionCoordinatorFencedError and
  InvalidProducerEpochError stop the transaction's markers on this
  coordinator (Kafka's ``abortSending``: a newer coordinator or producer
  epoch wrote there; the transaction completes when its partition is loaded
  again). A partition whose topic is gone from the metadata counts as written
  (Kafka: "the partition is likely deleted").
* **Admin** (:meth:`TxnHost.describe_transactions`, :meth:`TxnHost.list_transactions`): Kafka's
  DescribeTransactions (to the coordinator of each id) and ListTransactions (to every broker, each
  answering for the ids it coordinates), from the coordinator's memory.
* **Timer.** Every ``abort_timed_out_interval_ms`` (Kafka's
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s)
  transactions open longer than their timeout are aborted (their producer
  fenced).

Complexity: O(1) per request plus the coordinator's work; a tick is O(markers
outstanding + ``__transaction_state`` partitions). Durability: a transition counts
once its record is in the ISR of the ``__transaction_state`` partition (acks=all).
Thread-safety: none; the broker's loop thread drives it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Tuple

from pylog.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRequestError,
    KafkaStorageError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderError,
    PylogError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
)
from pylog.record import Record
from pylog.replication import group_messages as gm
from pylog.replication import txn_messages as tm
from pylog.replication.controller import MetadataStore
from pylog.replication.messages import (
    ACKS_ALL,
    NO_LEADER,
    InitProducerIdRequest,
    InitProducerIdResponse,
    Outbox,
    ProduceRequest,
    ProduceResponse,
)
from pylog.replication.offsets_topic import OFFSETS_TOPIC
from pylog.replication.partition import LEADER
from pylog.replication.txn_coordinator import TransactionCoordinator, TxnLogAppend, TxnMarker, TxnOutcome
from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC, TransactionState, partition_for_transactional_id

log = logging.getLogger(__name__)

#: Kafka's ``transaction.abort.timed.out.transaction.cleanup.interval.ms``
DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS = 10_000
#: back-off before a marker or a Complete record is sent again
DEFAULT_RETRY_BACKOFF_MS = 100
#: how long an AddPartitionsToTxn/AddOffsetsToTxn may wait for the previous transaction's Complete
#: record before it is answered CONCURRENT_TRANSACTIONS (checked on the tick: up to a tick more)
DEFAULT_COMPLETION_HOLD_MS = 200

_INIT, _ADD, _OFFSETS, _END = "init", "add", "offsets", "end"


@dataclass
class _Held:
    """An AddPartitionsToTxn/AddOffsetsToTxn held until its id's previous transaction is complete."""

    src: object
    msg: object
    deadline_ms: int


@dataclass
class _Waiter:
    """The request waiting for its transactional id's pending append."""

    src: object
    correlation_id: int
    kind: str


@dataclass
class _MarkerSend:
    """One WriteTxnMarkersRequest in flight."""

    dst: int
    markers: Tuple[TxnMarker, ...]
    sent_ms: int
    leaders: Tuple[Tuple[int, int], ...]  # (leader, leader epoch) of each marker's partition when sent


class TxnHost:
    """The transaction coordinator role of broker ``broker_id`` (see the module docstring).

    ``store``: the cluster metadata (partition leaders); ``partition_log(partition)``: the broker's
    replica of ``__transaction_state``-``partition`` if it leads it, else None; ``producer_ids()``:
    a new producer id (raises BrokerNotAvailableError when none is left).
    """

    def __init__(self, broker_id: int, store: MetadataStore, producer_ids: Callable[[], int],
                 partition_log: Callable[[int], Optional[Tuple[int, object]]], *,
                 request_timeout_ms: int = 30_000, incarnation: int = 0,
                 abort_timed_out_interval_ms: int = DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS,
                 retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS, transaction_version: int = 2,
                 max_timeout_ms: Optional[int] = None, completion_hold_ms: int = DEFAULT_COMPLETION_HOLD_MS):
        self.broker_id = broker_id
        self.store = store
        self._partition_log = partition_log
        self.request_timeout_ms = request_timeout_ms
        self.abort_timed_out_interval_ms = abort_timed_out_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.completion_hold_ms = completion_hold_ms
        kwargs = {} if max_timeout_ms is None else {"max_timeout_ms": max_timeout_ms}
        self.coordinator = TransactionCoordinator(producer_ids, transaction_version=transaction_version,
                                                  **kwargs)  # type: ignore[arg-type]
        # Apart from the replica manager's ids (below bit 61) and the group coordinator's (bit 62), and
        # unique across incarnations: an answer to a request of the previous incarnation matches nothing.
        self._corr = (1 << 61) | (incarnation << 32)
        self._waiters: Dict[str, _Waiter] = {}
        #: transactional id -> its AddPartitionsToTxn/AddOffsetsToTxn requests held until the previous
        #: transaction's Complete record is appended, in arrival order
        self._held: Dict[str, List[_Held]] = {}
        #: correlation id of an append in flight -> (transactional id, partition, coordinator epoch)
        self._appends: Dict[int, Tuple[str, int, int]] = {}
        #: Complete records to append again: (due, append)
        self._retry_appends: List[Tuple[int, TxnLogAppend]] = []
        #: marker -> its transactional id, for every marker not yet acknowledged
        self._markers: Dict[TxnMarker, str] = {}
        #: marker -> when it may be sent (absent while in flight)
        self._marker_due: Dict[TxnMarker, int] = {}
        self._marker_sends: Dict[int, _MarkerSend] = {}
        self._failed_loads: Dict[int, int] = {}  # partition -> leader epoch whose load failed
        self._next_abort_check_ms = -1
        #: counters (tests and metrics)
        self.markers_sent = 0
        self.markers_written = 0
        #: requests held behind a completing transaction, and answers of ConcurrentTransactionsError
        self.held = 0
        self.concurrent_transactions_answers = 0

    # ------------------------------------------------------------------ lookups
    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def coordinator_node(self, transactional_id: str) -> Optional[int]:
        """The broker coordinating ``transactional_id`` per the metadata (None: no topic or no leader)."""
        cfg = self.store.topics.get(TRANSACTION_STATE_TOPIC)
        if cfg is None:
            return None
        p = partition_for_transactional_id(transactional_id, cfg.partitions)
        if self.coordinator.loaded_epoch(p) is not None:
            return self.broker_id
        st = self.store.partitions.get((TRANSACTION_STATE_TOPIC, p))
        if st is None or st.leader == NO_LEADER:
            return None
        return st.leader

    def owns_correlation(self, correlation_id: int) -> bool:
        return correlation_id in self._appends

    @staticmethod
    def handles(msg: object) -> bool:
        """Is ``msg`` a request this host answers (or an answer to one of its marker requests)?"""
        if isinstance(msg, InitProducerIdRequest):
            return msg.transactional_id is not None
        return isinstance(msg, (tm.FindTransactionCoordinatorRequest, tm.AddPartitionsToTxnRequest,
                                tm.AddOffsetsToTxnRequest, tm.EndTxnRequest, tm.WriteTxnMarkersResponse,
                                tm.DescribeTransactionsRequest, tm.ListTransactionsRequest))

    # ----------------------------------------------------------------- requests
    def handle(self, src: object, msg: object, now_ms: int) -> Outbox:
        """Answer one transaction request (see :meth:`handles`)."""
        out = Outbox()
        if isinstance(msg, tm.WriteTxnMarkersResponse):
            self._on_markers_response(msg, now_ms, out)
        elif isinstance(msg, tm.FindTransactionCoordinatorRequest):
            out.send(src, self._find_coordinator(msg))
        elif isinstance(msg, tm.AddPartitionsToTxnRequest) and msg.verify_only:
            out.send(src, self._verify(msg))
        elif isinstance(msg, tm.DescribeTransactionsRequest):
            out.send(src, self.describe_transactions(msg))
        elif isinstance(msg, tm.ListTransactionsRequest):
            out.send(src, self.list_transactions(msg, now_ms))
        else:
            self._on_request(src, msg, now_ms, out)
        return out

    def _find_coordinator(self, req: tm.FindTransactionCoordinatorRequest) -> gm.FindCoordinatorResponse:
        cfg = self.store.topics.get(TRANSACTION_STATE_TOPIC)
        if cfg is None:
            return gm.FindCoordinatorResponse(req.correlation_id, error=CoordinatorNotAvailableError,
                                              message=f"the {TRANSACTION_STATE_TOPIC} topic does not exist yet")
        if not isinstance(req.transactional_id, str) or not req.transactional_id:
            return gm.FindCoordinatorResponse(req.correlation_id, error=CoordinatorNotAvailableError,
                                              message=f"bad transactional id {req.transactional_id!r}")
        node = self.coordinator_node(req.transactional_id)
        if node is None:
            p = partition_for_transactional_id(req.transactional_id, cfg.partitions)
            return gm.FindCoordinatorResponse(
                req.correlation_id, error=CoordinatorNotAvailableError,
                message=f"{TRANSACTION_STATE_TOPIC}-{p} (transactional id {req.transactional_id!r}) has no leader")
        return gm.FindCoordinatorResponse(req.correlation_id, node_id=node)

    # ---------------------------------------------------------------- admin
    def describe_transactions(self, req: tm.DescribeTransactionsRequest) -> tm.DescribeTransactionsResponse:
        """Kafka's ``handleDescribeTransactions``, per id: InvalidRequestError for an empty id,
        NotCoordinatorError when its partition is not loaded here, TransactionalIdNotFoundError when
        unknown (or Dead), else its state, producer id/epoch, timeout, start time and partitions (the
        state reached, not a pending transition's). O(ids + their partitions)."""
        rows = []
        co = self.coordinator
        ids = req.transactional_ids if isinstance(req.transactional_ids, (tuple, list)) else ()
        for tid in ids:
            try:
                if not isinstance(tid, str) or not tid:
                    raise InvalidRequestError(f"transactional id must be a non-empty string, got {tid!r}")
                if co.loaded_epoch(co.partition_for(tid)) is None:
                    raise NotCoordinatorError(f"broker {self.broker_id} is not the transaction coordinator of "
                                              f"{tid!r} ({TRANSACTION_STATE_TOPIC}-{co.partition_for(tid)})")
                m = co.describe(tid)
                if m is None or m.state == TransactionState.DEAD:
                    raise TransactionalIdNotFoundError(
                        f"transactional id {tid!r} is not known to its coordinator (broker {self.broker_id})")
            except PylogError as exc:
                rows.append(tm.TransactionStateRow(str(tid), type(exc), str(exc)))
                continue
            rows.append(tm.TransactionStateRow(tid, None, "", m.state.kafka_name, m.producer_id, m.producer_epoch,
                                               m.timeout_ms, m.start_ms, tuple(sorted(m.partitions))))
        return tm.DescribeTransactionsResponse(req.correlation_id, tuple(rows))

    def list_transactions(self, req: tm.ListTransactionsRequest, now_ms: int) -> tm.ListTransactionsResponse:
        """Kafka's ``listTransactionStates``: every id this broker coordinates (Dead ones left out),
        filtered by state name (a name that is no state is listed in ``unknown_state_filters``),
        producer id, and running time (``duration_filter_ms`` >= 0 keeps those with ``now - start``
        above it, as Kafka). ``partitions``: the ``__transaction_state`` partitions loaded here.
        O(ids coordinated here)."""
        names = {st.kafka_name: st for st in TransactionState}
        states = {names[n] for n in req.state_filters if n in names}
        unknown = tuple(n for n in req.state_filters if n not in names)
        pids = set(req.producer_id_filters)
        rows = []
        co = self.coordinator
        for tid in co.transactional_ids():
            m = co.describe(tid)
            if m is None or m.state == TransactionState.DEAD:
                continue
            if (req.state_filters and m.state not in states) or (pids and m.producer_id not in pids):
                continue
            if req.duration_filter_ms >= 0 and now_ms - m.start_ms <= req.duration_filter_ms:
                continue
            rows.append((tid, m.producer_id, m.state.kafka_name))
        return tm.ListTransactionsResponse(req.correlation_id, None, "", tuple(rows), unknown,
                                           tuple(co.loaded_partitions()))

    def _verify(self, req: tm.AddPartitionsToTxnRequest) -> tm.AddPartitionsToTxnResponse:
        try:
            result = self.coordinator.verify_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                        req.partitions)
        except PylogError as exc:
            return tm.AddPartitionsToTxnResponse(req.correlation_id, error=type(exc), message=str(exc))
        return tm.AddPartitionsToTxnResponse(req.correlation_id, partition_errors=tuple(
            (t, p, None if e is None else type(e)) for (t, p), e in sorted(result.items())))

    def _on_request(self, src: object, msg: object, now_ms: int, out: Outbox, may_hold: bool = True) -> None:
        co = self.coordinator
        try:
            if isinstance(msg, InitProducerIdRequest):
                kind = _INIT
                assert msg.transactional_id is not None
                pid = getattr(msg, "producer_id", -1)
                expected = (pid, getattr(msg, "producer_epoch", -1)) if pid >= 0 else None
                o = co.init_producer_id(msg.transactional_id,
                                        getattr(msg, "transaction_timeout_ms", tm.DEFAULT_TRANSACTION_TIMEOUT_MS),
                                        now_ms, expected)
            elif isinstance(msg, tm.AddPartitionsToTxnRequest):
                kind = _ADD
                missing = [tp for tp in msg.partitions if not isinstance(tp, tuple) or tp not in self.store.partitions]
                if missing:
                    self._answer(out, _Waiter(src, msg.correlation_id, kind), UnknownTopicOrPartitionError(
                        f"AddPartitionsToTxn of {msg.transactional_id!r}: unknown partitions "
                        f"{', '.join(f'{t}-{p}' for t, p in missing)}"))
                    return
                o = co.add_partitions(msg.transactional_id, msg.producer_id, msg.producer_epoch, msg.partitions, now_ms)
            elif isinstance(msg, tm.AddOffsetsToTxnRequest):
                kind = _OFFSETS
                cfg = self.store.topics.get(OFFSETS_TOPIC)
                if cfg is None:
                    self._answer(out, _Waiter(src, msg.correlation_id, kind), CoordinatorNotAvailableError(
                        f"AddOffsetsToTxn of {msg.transactional_id!r}: {OFFSETS_TOPIC} does not exist"))
                    return
                co.offsets_partitions = cfg.partitions
                o = co.add_offsets(msg.transactional_id, msg.producer_id, msg.producer_epoch, msg.group_id, now_ms)
            else:
                assert isinstance(msg, tm.EndTxnRequest), msg
                kind = _END
                o = co.end_txn(msg.transactional_id, msg.producer_id, msg.producer_epoch, msg.committed, now_ms,
                               client_transaction_version=msg.client_transaction_version)
        except PylogError as exc:  # not the coordinator, a malformed request, no producer id left
            self._answer(out, _Waiter(src, msg.correlation_id, kind), exc)  # type: ignore[attr-defined]
            return
        waiter = _Waiter(src, msg.correlation_id, kind)  # type: ignore[attr-defined]
        if (o.reply and may_hold and kind in (_ADD, _OFFSETS) and isinstance(o.error, ConcurrentTransactionsError)
                and co.completing(o.transactional_id)):
            # Only the previous transaction's markers and Complete record stand in the way: answer when
            # the Complete record is appended (instead of the client's 20 ms back-off), bounded.
            self._hold(o.transactional_id, _Held(src, msg, now_ms + self.completion_hold_ms), out)
            return
        if o.reply:
            self._answer(out, waiter, o.error, o.producer_id, o.producer_epoch)
        elif o.append is not None:
            old = self._waiters.pop(o.transactional_id, None)
            if old is not None:  # never expected: one pending transition per id
                self._answer(out, old, CoordinatorNotAvailableError("superseded; retry"))
            self._waiters[o.transactional_id] = waiter
        self._act(o, now_ms, out, replied=o.reply)

    def _hold(self, tid: str, h: _Held, out: Outbox) -> None:
        self._held.setdefault(tid, []).append(h)
        self.held += 1

    def _answer_held(self, h: _Held, error: PylogError, out: Outbox) -> None:
        kind = _ADD if isinstance(h.msg, tm.AddPartitionsToTxnRequest) else _OFFSETS
        self._answer(out, _Waiter(h.src, h.msg.correlation_id, kind), error)  # type: ignore[attr-defined]

    def _release(self, tid: str, now_ms: int, out: Outbox) -> None:
        """The held request of ``tid``, if its previous transaction is no longer completing: handled now
        (normally; not held again)."""
        if tid in self._held and not self.coordinator.completing(tid):
            for h in self._held.pop(tid):
                self._on_request(h.src, h.msg, now_ms, out, may_hold=False)

    def _answer(self, out: Outbox, w: _Waiter, error: Optional[PylogError], producer_id: int = -1,
                producer_epoch: int = -1) -> None:
        if error.__class__ is ConcurrentTransactionsError:
            self.concurrent_transactions_answers += 1
        e = None if error is None else type(error)
        msg = "" if error is None else str(error)
        if w.kind == _INIT:
            out.send(w.src, InitProducerIdResponse(w.correlation_id, e, msg, producer_id if e is None else -1,
                                                   producer_epoch if e is None else -1))
        elif w.kind == _ADD:
            out.send(w.src, tm.AddPartitionsToTxnResponse(w.correlation_id, e, msg))
        elif w.kind == _OFFSETS:
            out.send(w.src, tm.AddOffsetsToTxnResponse(w.correlation_id, e, msg))
        else:
            bumped = e is None and self.coordinator.transaction_version >= 2
            out.send(w.src, tm.EndTxnResponse(w.correlation_id, e, msg, producer_id if bumped else -1,
                                              producer_epoch if bumped else -1))

    # ------------------------------------------------------------- outcomes
    def _act(self, o: TxnOutcome, now_ms: int, out: Outbox, replied: bool = False) -> None:
        """Do what an outcome asks: answer the waiting request, append, send markers."""
        if o.reply and not replied:
            w = self._waiters.pop(o.transactional_id, None)
            if w is not None:
                self._answer(out, w, o.error, o.producer_id, o.producer_epoch)
        if o.append is not None:
            if o.error is not None and not o.reply:
                # a failed Complete append, handed back: again after a back-off
                self._retry_appends.append((now_ms + self.retry_backoff_ms, o.append))
            else:
                self._append(o.append, out)
        for mk in o.markers:
            self._markers[mk] = o.transactional_id
            self._marker_due[mk] = now_ms
        if o.markers:
            self._send_markers(now_ms, out)

    def _append(self, a: TxnLogAppend, out: Outbox) -> None:
        corr = self._next_corr()
        self._appends[corr] = (a.transactional_id, a.partition, a.coordinator_epoch)
        out.send(self.broker_id, ProduceRequest(TRANSACTION_STATE_TOPIC, a.partition, [Record(a.value, key=a.key)],
                                                ACKS_ALL, self.request_timeout_ms, corr))

    def on_produce_response(self, resp: ProduceResponse, now_ms: int) -> Outbox:
        """The answer to an append to ``__transaction_state``."""
        out = Outbox()
        entry = self._appends.pop(resp.correlation_id, None)
        if entry is None:
            return out
        tid, partition, epoch = entry
        if self.coordinator.loaded_epoch(partition) != epoch:
            return out  # unloaded or reloaded meanwhile: the new load read the log
        error: Optional[PylogError] = None
        if resp.error is not None:
            where = f"{TRANSACTION_STATE_TOPIC}-{partition}: {resp.error.__name__}: {resp.message}"
            if resp.error in (NotLeaderError, KafkaStorageError):
                error = NotCoordinatorError(f"broker {self.broker_id} lost {where}")
            elif resp.error in (NotEnoughReplicasError, NotEnoughReplicasAfterAppendError, RequestTimedOutError,
                                UnknownTopicOrPartitionError):
                error = CoordinatorNotAvailableError(where)
            else:
                error = CoordinatorNotAvailableError(f"unexpected error appending to {where}")
        self._act(self.coordinator.on_log_append(tid, error, now_ms), now_ms, out)
        if self._held:
            self._release(tid, now_ms, out)
        return out

    # ---------------------------------------------------------------- markers
    def _send_markers(self, now_ms: int, out: Outbox) -> None:
        """Send every marker that is due, grouped by its partition's leader in the metadata."""
        by_leader: Dict[int, List[TxnMarker]] = {}
        for mk, due in list(self._marker_due.items()):
            if due > now_ms:
                continue
            st = self.store.partitions.get((mk.topic, mk.partition))
            if st is None and mk.topic not in self.store.topics:
                log.info("broker %d: marker for %s-%d skipped: the topic is gone", self.broker_id, mk.topic,
                         mk.partition)
                self._marker_written(mk, now_ms, out)
                continue
            if st is None or st.leader == NO_LEADER:
                self._marker_due[mk] = now_ms + self.retry_backoff_ms
                continue
            by_leader.setdefault(st.leader, []).append(mk)
        for leader, markers in sorted(by_leader.items()):
            corr = self._next_corr()
            leaders = []
            for mk in markers:
                del self._marker_due[mk]
                st = self.store.partitions[(mk.topic, mk.partition)]
                leaders.append((st.leader, st.leader_epoch))
            self._marker_sends[corr] = _MarkerSend(leader, tuple(markers), now_ms, tuple(leaders))
            self.markers_sent += len(markers)
            out.send(leader, tm.WriteTxnMarkersRequest(tuple(markers), corr))

    def _marker_written(self, mk: TxnMarker, now_ms: int, out: Outbox) -> None:
        tid = self._markers.pop(mk, None)
        self._marker_due.pop(mk, None)
        if tid is None:
            return
        self.markers_written += 1
        self._act(self.coordinator.on_marker_written(tid, mk.topic, mk.partition, now_ms), now_ms, out)

    def _stop_markers(self, tid: str) -> None:
        for mk in [m for m, t in self._markers.items() if t == tid]:
            del self._markers[mk]
            self._marker_due.pop(mk, None)

    def _on_markers_response(self, resp: tm.WriteTxnMarkersResponse, now_ms: int, out: Outbox) -> None:
        send = self._marker_sends.pop(resp.correlation_id, None)
        if send is None:
            return  # given up on (timed out, leader moved): its markers were sent again
        answered = set()
        for mk, error in resp.results:
            answered.add(mk)
            if mk not in self._markers or mk in self._marker_due:
                continue  # unloaded, or already queued again
            if error is None:
                self._marker_written(mk, now_ms, out)
            elif error in (TransactionCoordinatorFencedError, InvalidProducerEpochError):
                tid = self._markers[mk]
                log.warning("broker %d: markers of %r stopped: %s-%d answered %s", self.broker_id, tid, mk.topic,
                            mk.partition, error.__name__)
                self._stop_markers(tid)
            else:
                self._marker_due[mk] = now_ms + self.retry_backoff_ms
        for mk in send.markers:  # a marker the answer did not name: sent again
            if mk not in answered and mk in self._markers and mk not in self._marker_due:
                self._marker_due[mk] = now_ms + self.retry_backoff_ms

    def _expire_marker_sends(self, now_ms: int) -> None:
        for corr, send in list(self._marker_sends.items()):
            moved = any(
                (st := self.store.partitions.get((mk.topic, mk.partition))) is None
                or (st.leader, st.leader_epoch) != was
                for mk, was in zip(send.markers, send.leaders))
            if moved or now_ms - send.sent_ms >= self.request_timeout_ms:
                del self._marker_sends[corr]
                for mk in send.markers:
                    if mk in self._markers and mk not in self._marker_due:
                        self._marker_due[mk] = now_ms

    # ------------------------------------------------------------- lifecycle
    def sync(self, now_ms: int) -> Outbox:
        """Load the ``__transaction_state`` partitions this broker newly leads; unload the lost ones."""
        out = Outbox()
        cfg = self.store.topics.get(TRANSACTION_STATE_TOPIC)
        co = self.coordinator
        if cfg is None:
            for p in co.loaded_partitions():
                self._unload(p, out)
            return out
        if co.partitions != cfg.partitions:
            for p in co.loaded_partitions():
                self._unload(p, out)
            co.partitions = cfg.partitions
        offsets = self.store.topics.get(OFFSETS_TOPIC)
        if offsets is not None:
            co.offsets_partitions = offsets.partitions
        for p in range(cfg.partitions):
            led = self._partition_log(p)
            if led is not None:
                epoch, part = led
                if co.loaded_epoch(p) != epoch and self._failed_loads.get(p) != epoch:
                    self._load(p, epoch, part, now_ms, out)
            elif co.loaded_epoch(p) is not None:
                self._unload(p, out)
        return out

    def _load(self, p: int, epoch: int, part: object, now_ms: int, out: Outbox) -> None:
        self._unload(p, out)
        try:
            outcomes = self.coordinator.load(p, epoch, _read_log(part), now_ms)
        except (CorruptRecordError, OSError, PylogError) as exc:
            self._failed_loads[p] = epoch
            self.coordinator.unload(p)
            log.error("broker %d: cannot load %s-%d at epoch %d: %s", self.broker_id, TRANSACTION_STATE_TOPIC,
                      p, epoch, exc)
            return
        self._failed_loads.pop(p, None)
        log.info("broker %d: transaction coordinator of %s-%d at epoch %d (%d to complete)", self.broker_id,
                 TRANSACTION_STATE_TOPIC, p, epoch, len(outcomes))
        for o in outcomes:
            self._act(o, now_ms, out)

    def _unload(self, p: int, out: Outbox) -> None:
        co = self.coordinator
        tids = [t for t in co.transactional_ids() if co.partition_for(t) == p]
        co.unload(p)
        why = NotCoordinatorError(f"broker {self.broker_id} no longer leads {TRANSACTION_STATE_TOPIC}-{p}")
        for t in tids:
            w = self._waiters.pop(t, None)
            if w is not None:
                self._answer(out, w, why)
            for h in self._held.pop(t, ()):
                self._answer_held(h, why, out)
            self._stop_markers(t)
        self._retry_appends = [(d, a) for d, a in self._retry_appends if a.partition != p]

    def tick(self, now_ms: int) -> Outbox:
        """Timers: abort timed-out transactions, retry markers and Complete appends."""
        out = Outbox()
        if now_ms >= self._next_abort_check_ms:
            self._next_abort_check_ms = now_ms + self.abort_timed_out_interval_ms
            try:
                outcomes = self.coordinator.abort_timed_out(now_ms)
            except PylogError as exc:  # no producer id left for an exhausted epoch: next time
                log.warning("broker %d: aborting timed-out transactions: %s", self.broker_id, exc)
                outcomes = []
            for o in outcomes:
                self._act(o, now_ms, out)
        if self._held:
            for tid, held in list(self._held.items()):
                if min(h.deadline_ms for h in held) <= now_ms:
                    expired = [h for h in held if h.deadline_ms <= now_ms]
                    held = [h for h in held if h.deadline_ms > now_ms]
                    if held:
                        self._held[tid] = held
                    else:
                        del self._held[tid]
                    for h in expired:
                        self._answer_held(h, ConcurrentTransactionsError(
                            f"{tid!r} is still completing its transaction after {self.completion_hold_ms} ms"), out)
        if self._retry_appends:
            due = [a for d, a in self._retry_appends if d <= now_ms]
            self._retry_appends = [(d, a) for d, a in self._retry_appends if d > now_ms]
            for a in due:
                if self.coordinator.loaded_epoch(a.partition) == a.coordinator_epoch:
                    self._append(a, out)
        if self._marker_sends:
            self._expire_marker_sends(now_ms)
        if self._marker_due:
            self._send_markers(now_ms, out)
        return out

    def _check(self) -> None:
        self.coordinator._check()
        for mk, tid in self._markers.items():
            assert self.coordinator.partition_for(tid) in self.coordinator.loaded_partitions(), (mk, tid)
        for tid in self._waiters:
            m = self.coordinator.describe(tid)
            assert m is not None and m.pending is not None, tid
        for tid, held in self._held.items():
            assert held and self.coordinator.completing(tid), tid


def _read_log(part: object) -> Iterator[Tuple[bytes, Optional[bytes]]]:
    """Every (key, value) of a ``__transaction_state`` replica's log, in offset order, to its log end."""
    lg = part.log  # type: ignore[attr-defined]
    offset, end = lg.log_start_offset, lg.log_end_offset
    while offset < end:
        batches = lg.read_batches(offset, 1 << 20)
        if not batches:
            break
        for batch in batches:
            if not batch.is_control:
                for r in batch.records():
                    if r.key is not None:
                        yield r.key, r.value
            offset = batch.last_offset + 1


def leader_of_state_partition(rm: object, partition: int) -> Optional[Tuple[int, object]]:
    """``(leader epoch, replica)`` of ``__transaction_state``-``partition`` when ``rm`` leads it, else None."""
    part = rm.partitions.get((TRANSACTION_STATE_TOPIC, partition))  # type: ignore[attr-defined]
    if part is None or part.role != LEADER:
        return None
    return part.leader_epoch, part


__all__ = ["TxnHost", "DEFAULT_ABORT_TIMED_OUT_INTERVAL_MS", "leader_of_state_partition"]
