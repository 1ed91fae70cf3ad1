"""The client side of transactions: Kafka's producer ``TransactionManager``, as pure logic.

No thread, socket or clock here: the :class:`~pylog.client.producer.Producer`
(its sender loop, :mod:`pylog.client.sender`) drives it:

* the user's calls (:meth:`TransactionManager.init_transactions`,
  :meth:`~TransactionManager.begin_transaction`,
  :meth:`~TransactionManager.send_offsets_to_transaction`,
  :meth:`~TransactionManager.commit_transaction`,
  :meth:`~TransactionManager.abort_transaction`) change the state at once and
  return a :class:`TxnResult` that completes when the coordinator has answered;
  ``send`` calls :meth:`~TransactionManager.maybe_add_partition` before it
  appends a record of a partition;
* the sender loop asks :meth:`~TransactionManager.next_request` for the request
  to send (one at a time, in Kafka's priority order: FindCoordinator,
  InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn),
  hands each answer to :meth:`~TransactionManager.on_response` (or
  :meth:`~TransactionManager.on_no_response` on a timeout or a lost connection),
  drains a partition's batches only while
  :meth:`~TransactionManager.is_send_to_partition_allowed`, reports a failed
  produce with :meth:`~TransactionManager.on_batch_error`, and fails every batch
  not yet drained with :meth:`~TransactionManager.undrained_batches_error` when
  that is not None (an abort, or an abortable error).

States (:class:`TxnState`) and transitions are Kafka's (``VALID_PREVIOUS``, as Kafka 3.7-3.9's
``State.isTransitionValid``; Kafka 4's transaction-version-2 client adds INITIALIZING from
COMMITTING_TRANSACTION, not here):

======================  =======================================================
state                   entered from
======================  =======================================================
UNINITIALIZED           READY, ABORTABLE_ERROR (Kafka: the idempotent producer's id reset; unused here)
INITIALIZING            UNINITIALIZED, ABORTING_TRANSACTION (KIP-360 epoch bump)
READY                   INITIALIZING, COMMITTING_TRANSACTION, ABORTING_TRANSACTION
IN_TRANSACTION          READY
COMMITTING_TRANSACTION  IN_TRANSACTION
ABORTING_TRANSACTION    IN_TRANSACTION, ABORTABLE_ERROR
ABORTABLE_ERROR         IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTABLE_ERROR, INITIALIZING
FATAL_ERROR             every state
======================  =======================================================

A user call that does not fit the state raises, as Kafka's: in FATAL_ERROR the
fatal error (a new instance of its class, e.g. :class:`ProducerFencedError`); in
ABORTABLE_ERROR the abortable error, except ``abort_transaction`` which is the
way out; otherwise :class:`InvalidTxnStateError` (e.g. ``begin_transaction``
twice). Calling ``init``/``commit``/``abort`` again while its result is not done
returns the same result (a retry after the caller's timeout, Kafka's pending
transition); calling any other transactional method meanwhile raises
:class:`InvalidTxnStateError`.

Response errors (:func:`classify`): *retriable* ones are retried after
``retry_backoff_ms`` (``NotCoordinatorError``/``CoordinatorNotAvailableError``
and a timeout look the coordinator up again first); *abortable* ones move to
ABORTABLE_ERROR (the transaction must be aborted, then the producer goes on);
*fatal* ones move to FATAL_ERROR (the producer can only be closed).

KIP-890: after every successful EndTxn the manager takes the producer id and
epoch from the response when the coordinator returns them (it bumps the epoch
on every EndTxn), so the next transaction runs with the new epoch and a late
EndTxn of this one is fenced by the coordinator.

Owns: the transaction state, the producer id and epoch of a transactional
producer, the partitions of the open transaction, the queue of transactional
requests. Complexity: O(1) per call except O(partitions) to build an
AddPartitionsToTxn. Durability: none (memory; the coordinator's log is the
truth). Thread-safety: none; the Producer calls it under its lock or on its
loop thread.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple, Type

from pylog.client.types import OffsetAndMetadata, TopicPartition, as_commit_offsets, as_tp
from pylog.errors import (
    CommitFailedError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidConfigurationError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    PylogError,
    RequestTimedOutError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationFailedError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
)
from pylog.replication import group_messages as gm
from pylog.replication import txn_messages as tm
from pylog.replication.messages import InitProducerIdResponse

#: Kafka's ``retry.backoff.ms`` default
DEFAULT_RETRY_BACKOFF_MS = 100
#: AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS right after an EndTxn: Kafka retries sooner
ADD_PARTITIONS_RETRY_BACKOFF_MS = 20
#: TxnRequest.node for a FindCoordinator: any broker (the caller picks one)
ANY_NODE = -1


class TxnState(enum.Enum):
    """The client's transaction state (Kafka's ``TransactionManager.State``)."""

    UNINITIALIZED = 0
    INITIALIZING = 1
    READY = 2
    IN_TRANSACTION = 3
    COMMITTING_TRANSACTION = 4
    ABORTING_TRANSACTION = 5
    ABORTABLE_ERROR = 6
    FATAL_ERROR = 7


T = TxnState
#: state -> the states it may be entered from (Kafka's ``State.isTransitionValid``)
VALID_PREVIOUS: Dict[TxnState, FrozenSet[TxnState]] = {
    T.UNINITIALIZED: frozenset({T.READY, T.ABORTABLE_ERROR}),  # Kafka: an idempotent producer's id reset
    T.INITIALIZING: frozenset({T.UNINITIALIZED, T.ABORTING_TRANSACTION}),
    T.READY: frozenset({T.INITIALIZING, T.COMMITTING_TRANSACTION, T.ABORTING_TRANSACTION}),
    T.IN_TRANSACTION: frozenset({T.READY}),
    T.COMMITTING_TRANSACTION: frozenset({T.IN_TRANSACTION}),
    T.ABORTING_TRANSACTION: frozenset({T.IN_TRANSACTION, T.ABORTABLE_ERROR}),
    T.ABORTABLE_ERROR: frozenset({T.IN_TRANSACTION, T.COMMITTING_TRANSACTION, T.ABORTABLE_ERROR, T.INITIALIZING}),
    T.FATAL_ERROR: frozenset(TxnState),
}


class ErrorKind(enum.Enum):
    """What the manager does with a response error (see :func:`classify`)."""

    RETRIABLE = "retriable"
    #: retriable, after looking the coordinator up again
    FIND_COORDINATOR = "find-coordinator"
    ABORTABLE = "abortable"
    #: abortable, and the abort also bumps the epoch with InitProducerId (KIP-360)
    ABORTABLE_BUMP = "abortable-bump"
    FATAL = "fatal"


# the request kinds, in the order the manager sends them (Kafka's priorities, TxnOffsetCommit after AddOffsets)
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, TXN_OFFSET_COMMIT, END_TXN = range(6)
REQUEST_NAMES = ("FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit",
                 "EndTxn")

_E = Type[PylogError]
_LOOKUP: FrozenSet[_E] = frozenset({NotCoordinatorError, CoordinatorNotAvailableError})
_FENCED: FrozenSet[_E] = frozenset({ProducerFencedError, InvalidProducerEpochError})
_COMMON: Dict[_E, ErrorKind] = {
    **{e: ErrorKind.FIND_COORDINATOR for e in _LOOKUP},
    CoordinatorLoadInProgressError: ErrorKind.RETRIABLE,
    ConcurrentTransactionsError: ErrorKind.RETRIABLE,
    **{e: ErrorKind.FATAL for e in _FENCED},
    TransactionalIdAuthorizationFailedError: ErrorKind.FATAL,
    TransactionAbortableError: ErrorKind.ABORTABLE,
    UnknownTopicOrPartitionError: ErrorKind.RETRIABLE,  # Kafka's is a RetriableException
}
#: per request kind: error class -> kind. A class not listed is retriable when its ``retriable`` flag
#: is set (Kafka: ``error.exception() instanceof RetriableException``), else fatal (Kafka's
#: "unexpected error"; so are InvalidTxnStateError, InvalidTransactionTimeoutError, InvalidRequestError).
#: InvalidProducerIdMappingError: abortable with an epoch bump (KIP-360), as docs/transactions.md and
#: errors.py state; Kafka 4's client makes INVALID_PRODUCER_ID_MAPPING fatal and keeps the bump for
#: UNKNOWN_PRODUCER_ID, which pylog's coordinator never answers.
ERROR_TABLE: Dict[int, Dict[_E, ErrorKind]] = {
    INIT_PRODUCER_ID: dict(_COMMON),
    ADD_PARTITIONS: {**_COMMON, InvalidProducerIdMappingError: ErrorKind.ABORTABLE_BUMP},
    ADD_OFFSETS: {**_COMMON, InvalidProducerIdMappingError: ErrorKind.ABORTABLE_BUMP},
    TXN_OFFSET_COMMIT: {**_COMMON, RequestTimedOutError: ErrorKind.FIND_COORDINATOR,
                        UnknownMemberIdError: ErrorKind.ABORTABLE, IllegalGenerationError: ErrorKind.ABORTABLE,
                        CommitFailedError: ErrorKind.ABORTABLE, FencedInstanceIdError: ErrorKind.ABORTABLE},
    END_TXN: {**_COMMON, InvalidProducerIdMappingError: ErrorKind.ABORTABLE_BUMP},
}


def classify(kind: int, error: _E) -> ErrorKind:
    """What the manager does when request ``kind`` (e.g. :data:`END_TXN`) is answered with ``error``.

    >>> classify(END_TXN, ConcurrentTransactionsError).value
    'retriable'
    >>> classify(ADD_PARTITIONS, ProducerFencedError).value
    'fatal'
    """
    found = ERROR_TABLE[kind].get(error)
    if found is not None:
        return found
    return ErrorKind.RETRIABLE if getattr(error, "retriable", False) else ErrorKind.FATAL


class TxnResult:
    """The outcome of a user call, done when the coordinator has answered (Kafka's
    ``TransactionalRequestResult``). ``error`` is None on success. Not thread-safe: the
    Producer waits on its own condition and reads ``done``."""

    __slots__ = ("operation", "done", "error")

    def __init__(self, operation: str):
        self.operation = operation
        self.done = False
        self.error: Optional[PylogError] = None

    def _succeed(self) -> None:
        self.done = True

    def _fail(self, error: PylogError) -> None:
        if not self.done:
            self.done, self.error = True, error

    def __repr__(self) -> str:
        return f"TxnResult({self.operation}, done={self.done}, error={self.error!r})"


@dataclass(frozen=True)
class TxnRequest:
    """A request to send: ``node`` is the broker (``ANY_NODE`` for a FindCoordinator),
    ``kind`` one of the request kinds, ``message`` a :mod:`pylog.replication.txn_messages` or
    :class:`~pylog.replication.group_messages.FindCoordinatorRequest` message."""

    kind: int
    node: int
    message: Any


@dataclass
class _Handler:
    """A queued request (Kafka's TxnRequestHandler): what to send, and the result it completes."""

    kind: int
    result: TxnResult
    seq: int
    partitions: Tuple[TopicPartition, ...] = ()
    group: Optional[tm.ConsumerGroupMetadata] = None
    offsets: Tuple[Tuple[TopicPartition, OffsetAndMetadata], ...] = ()
    committed: bool = False
    #: for FindCoordinator: the key type and key
    key_type: int = tm.COORDINATOR_TYPE_TRANSACTION
    key: str = ""


class TransactionManager:
    """One transactional producer's transaction state (see the module docstring).

    ``transactional_id``: the id that survives producer restarts; ``transaction_timeout_ms``:
    sent with InitProducerId (the coordinator aborts a transaction open longer).
    """

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = tm.DEFAULT_TRANSACTION_TIMEOUT_MS,
                 retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS):
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidConfigurationError(f"transactional_id must be a non-empty str, got {transactional_id!r}")
        for name, v in (("transaction_timeout_ms", transaction_timeout_ms), ("retry_backoff_ms", retry_backoff_ms)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "transaction_timeout_ms" else 0):
                raise InvalidConfigurationError(f"{name} of {transactional_id!r} must be an int >= "
                                                f"{1 if name == 'transaction_timeout_ms' else 0}, got {v!r}")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = TxnState.UNINITIALIZED
        self.last_error: Optional[PylogError] = None
        self.producer_id = -1
        self.producer_epoch = -1
        #: partitions the coordinator has in the open transaction / in an AddPartitionsToTxn in flight / to add
        self.partitions_in_txn: Set[TopicPartition] = set()
        self.pending_partitions: Set[TopicPartition] = set()
        self.new_partitions: Set[TopicPartition] = set()
        #: the coordinator has a transaction open (a partition or the offsets were added): EndTxn must be sent
        self.transaction_started = False
        self.epoch_bump_required = False
        #: coordinator type -> key -> broker id
        self._coordinators: Dict[Tuple[int, str], int] = {}
        self._queue: List[_Handler] = []
        self._seq = 0
        self._in_flight: Optional[Tuple[int, _Handler]] = None  # (correlation id, handler)
        self._retry_at_ms = 0
        self._call: Optional[Tuple[str, TxnResult]] = None  # the user call whose result is not done yet

    # ---- the user's calls --------------------------------------------------------------------
    def init_transactions(self) -> TxnResult:
        """Get the producer id and epoch (fencing an earlier producer with this transactional id and
        aborting its open transaction). UNINITIALIZED -> INITIALIZING -> READY."""
        same = self._begin_call("init_transactions")
        if same is not None:
            return same
        self._fail_if_error()
        self._transition(TxnState.INITIALIZING, "init_transactions")
        self.producer_id, self.producer_epoch = -1, -1
        return self._start_call("init_transactions", INIT_PRODUCER_ID)

    def begin_transaction(self) -> None:
        """READY -> IN_TRANSACTION (local only: nothing is sent until a partition or offsets are added)."""
        self._no_other_call("begin_transaction")
        self._fail_if_error()
        self._transition(TxnState.IN_TRANSACTION, "begin_transaction")

    def maybe_add_partition(self, tp: Any) -> None:
        """``send`` calls this before it appends a record of ``tp``: a partition not yet in the
        transaction is added (AddPartitionsToTxn) before its first batch may be drained."""
        part = as_tp(tp, "partition")
        self._fail_if_error()
        self._no_other_call("send")
        if self.state != TxnState.IN_TRANSACTION:
            raise InvalidTxnStateError(f"cannot send to {part.topic}-{part.partition} with transactional id "
                                       f"{self.transactional_id!r} in state {self.state.name}: call begin_transaction()")
        if part not in self.partitions_in_txn and part not in self.pending_partitions:
            self.new_partitions.add(part)

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        """May the sender drain ``tp``'s batches? Only once the coordinator has it in the transaction,
        and never in FATAL_ERROR (Kafka's ``isSendToPartitionAllowed``). While aborting or in
        ABORTABLE_ERROR it is still allowed: the sender has failed every batch not yet drained
        (:meth:`undrained_batches_error`) before it drains, so what is left to send are retries of
        batches already sent once, which may be in the log and must be resolved before the EndTxn
        (which waits for them) can go."""
        return self.state != TxnState.FATAL_ERROR and tp in self.partitions_in_txn

    @property
    def request_in_flight(self) -> bool:
        """A transactional request is out and not answered yet (the sender waits for it)."""
        return self._in_flight is not None

    @property
    def retry_at_ms(self) -> int:
        """No request goes before this time (the backoff after a retriable error): the sender's timer."""
        return self._retry_at_ms

    def close(self, error: PylogError) -> None:
        """The producer closed: FATAL_ERROR with ``error``, failing every pending result (a caller
        waiting in ``commit_transaction()`` etc. gets it); every later call raises it."""
        if self.state != TxnState.FATAL_ERROR:
            self._to_fatal(error)

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> TxnResult:
        """Commit ``offsets`` (keyed by ``(topic, partition)`` or TopicPartition, values an offset or
        OffsetAndMetadata) for the consumer group of ``group_metadata`` (a
        :class:`~pylog.replication.txn_messages.ConsumerGroupMetadata`, or a group id str) inside the
        transaction: AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator. As Kafka's, each
        call sends its own requests and may be followed at once by ``send``/``commit_transaction``
        (the EndTxn goes after the TxnOffsetCommit)."""
        self._no_other_call("send_offsets_to_transaction")
        commit = as_commit_offsets(offsets)
        if isinstance(group_metadata, str) and group_metadata:
            group = tm.ConsumerGroupMetadata(group_metadata)
        elif isinstance(group_metadata, tm.ConsumerGroupMetadata) and group_metadata.group_id:
            group = group_metadata
        else:
            raise InvalidConfigurationError(
                f"group_metadata must be consumer.group_metadata() or a group id, got {group_metadata!r}")
        self._fail_if_error()
        if self.state != TxnState.IN_TRANSACTION:
            raise InvalidTxnStateError(f"cannot send offsets with transactional id {self.transactional_id!r} in state "
                                       f"{self.state.name}: no transaction is in progress")
        result = TxnResult("send_offsets_to_transaction")  # not a pending call: each call sends its own
        self._enqueue(ADD_OFFSETS, result)
        h = self._queue[-1]
        h.group, h.offsets = group, tuple(sorted(commit.items()))
        return result

    def commit_transaction(self) -> TxnResult:
        """IN_TRANSACTION -> COMMITTING_TRANSACTION; EndTxn(commit) goes once every batch is acknowledged."""
        same = self._begin_call("commit_transaction")
        if same is not None:
            return same
        self._fail_if_error()
        self._transition(TxnState.COMMITTING_TRANSACTION, "commit_transaction")
        return self._complete_transaction(True)

    def abort_transaction(self) -> TxnResult:
        """IN_TRANSACTION or ABORTABLE_ERROR -> ABORTING_TRANSACTION.

        Records not yet sent fail: from now on :meth:`undrained_batches_error` returns a
        :class:`TransactionAbortedError` (or the abortable error that caused the abort), and the
        sender fails every batch it has not drained with it (Kafka's ``abortUndrainedBatches``);
        batches already in flight complete as their brokers answer (the ABORT markers make them
        invisible to read_committed consumers). EndTxn(abort) goes once none is in flight.
        """
        same = self._begin_call("abort_transaction")
        if same is not None:
            return same
        if self.state == TxnState.FATAL_ERROR:
            self._fail_if_error()
        self._transition(TxnState.ABORTING_TRANSACTION, "abort_transaction")
        self.new_partitions.clear()
        return self._complete_transaction(False)

    def _complete_transaction(self, commit: bool) -> TxnResult:
        name = "commit_transaction" if commit else "abort_transaction"
        if commit and self.new_partitions:
            self._enqueue(ADD_PARTITIONS, TxnResult("send"))
        if not commit and isinstance(self.last_error, InvalidProducerIdMappingError) and self.epoch_bump_required:
            # the coordinator does not know this producer id: EndTxn would be refused; bump instead (KIP-360).
            # The state stays ABORTING_TRANSACTION (not Kafka's INITIALIZING) until the bump is answered, so
            # the sender still fails the unsent batches (undrained_batches_error); READY follows either way.
            return self._start_call(name, INIT_PRODUCER_ID)
        result = self._start_call(name, END_TXN)
        self._queue[-1].committed = commit
        return result

    # ---- what the sender asks ----------------------------------------------------------------
    def undrained_batches_error(self) -> Optional[PylogError]:
        """The error to fail every batch not yet drained with, or None (drain as usual): while
        aborting (:class:`TransactionAbortedError`) or in an error state (the error)."""
        if self.state == TxnState.ABORTING_TRANSACTION:
            return TransactionAbortedError(f"the transaction of {self.transactional_id!r} was aborted before "
                                           f"this record was sent")
        if self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            return self.last_error
        return None

    def has_pending_request(self) -> bool:
        """Is a request queued or in flight (new partitions count only inside a transaction)?"""
        return (bool(self._queue) or self._in_flight is not None
                or (bool(self.new_partitions) and self.state == TxnState.IN_TRANSACTION))

    def next_request(self, now_ms: int, correlation_id: int, has_incomplete_batches: bool = False
                     ) -> Optional[TxnRequest]:
        """The request to send now (with ``correlation_id``), or None: one in flight, backing off,
        nothing to do, or an EndTxn waiting for ``has_incomplete_batches`` to become False."""
        if self._in_flight is not None or now_ms < self._retry_at_ms:
            return None
        if self.new_partitions and self.state == TxnState.IN_TRANSACTION and not any(
                h.kind == ADD_PARTITIONS for h in self._queue):
            self._enqueue(ADD_PARTITIONS, TxnResult("send"))
        while self._queue:
            h = min(self._queue, key=lambda x: (x.kind, x.seq))
            if self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR) and h.kind != FIND_COORDINATOR:
                # Kafka fails queued requests once in an error state (e.g. a commit's EndTxn after a
                # batch failed): only abort_transaction() queues new ones, from ABORTING_TRANSACTION
                self._queue.remove(h)
                assert self.last_error is not None
                h.result._fail(self.last_error)
                self._call_done(h.result)
                continue
            if h.kind == END_TXN and not self.transaction_started:
                self._queue.remove(h)  # nothing reached the coordinator: nothing to end
                self._end_completed(h, None, None)
                continue
            if h.kind == END_TXN and has_incomplete_batches:
                return None
            if h.kind == ADD_PARTITIONS and not h.partitions:
                h.partitions = tuple(sorted(self.new_partitions))
                self.pending_partitions |= self.new_partitions
                self.new_partitions.clear()
                if not h.partitions:
                    self._queue.remove(h)
                    h.result._succeed()
                    continue
            node = self._node_for(h)
            if node is None:
                if h.kind == FIND_COORDINATOR:  # pragma: no cover - a FindCoordinator goes to any broker
                    raise AssertionError(h)
                self._lookup(*self._coordinator_key(h))
                continue
            self._queue.remove(h)
            msg = self._message(h, correlation_id)
            self._in_flight = (correlation_id, h)
            return TxnRequest(h.kind, node, msg)
        return None

    # ---- answers -----------------------------------------------------------------------------
    def on_response(self, response: Any, now_ms: int) -> bool:
        """Handle the answer to the request in flight; False (ignored) for any other message (a
        late answer to a request given up on)."""
        if self._in_flight is None or getattr(response, "correlation_id", None) != self._in_flight[0]:
            return False
        h = self._in_flight[1]
        self._in_flight = None
        error: Optional[_E] = getattr(response, "error", None)
        message = getattr(response, "message", "")
        if self.state == TxnState.FATAL_ERROR:  # fenced meanwhile (e.g. by a produce answer): nothing changes
            assert self.last_error is not None
            h.result._fail(self.last_error)
            return True
        if h.kind == FIND_COORDINATOR:
            if error is None and response.node_id >= 0:
                self._coordinators[(h.key_type, h.key)] = response.node_id
                h.result._succeed()
            else:
                self._retry(h, now_ms)
            return True
        part_errors: Tuple[Tuple[str, int, Optional[_E]], ...] = getattr(response, "partition_errors", ())
        if error is None and h.kind == ADD_PARTITIONS:
            error = next((e for _, _, e in part_errors if e is not None), None)
        if error is not None:
            self._on_error(h, error, message, now_ms)
            return True
        if h.kind == INIT_PRODUCER_ID:
            assert isinstance(response, InitProducerIdResponse)
            self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
            self.epoch_bump_required = False
            self.last_error = None
            self._transition(TxnState.READY, "InitProducerId")
            self._clear_transaction()
            self._finish(h)
        elif h.kind == ADD_PARTITIONS:
            self.partitions_in_txn.update(h.partitions)
            self.pending_partitions.difference_update(h.partitions)
            self.transaction_started = True
            self._finish(h)
        elif h.kind == ADD_OFFSETS:
            self.transaction_started = True
            nxt = _Handler(TXN_OFFSET_COMMIT, h.result, self._next_seq(), group=h.group, offsets=h.offsets)
            self._queue.append(nxt)
        elif h.kind == TXN_OFFSET_COMMIT:
            failed = [(t, p, e) for t, p, e in part_errors if e is not None]
            if failed:
                self._on_error(h, failed[0][2], f"partition {failed[0][0]}-{failed[0][1]}", now_ms)
            else:
                self._finish(h)
        else:
            assert isinstance(response, tm.EndTxnResponse)
            self._end_completed(h, response.producer_id, response.producer_epoch)
        return True

    def on_no_response(self, correlation_id: int, now_ms: int) -> None:
        """The request ``correlation_id`` timed out or its connection was lost: look the coordinator
        up again and retry (Kafka's handling of a disconnect)."""
        if self._in_flight is None or self._in_flight[0] != correlation_id:
            return
        h = self._in_flight[1]
        self._in_flight = None
        if h.kind != FIND_COORDINATOR:
            self._coordinators.pop(self._coordinator_key(h), None)
        self._retry(h, now_ms)

    def on_batch_error(self, tp: TopicPartition, error: PylogError) -> None:
        """A transactional batch of ``tp`` failed for good (Kafka's ``maybeTransitionToErrorState``):
        ProducerFenced, TransactionalIdAuthorizationFailed -> fatal; anything else -> abortable
        (including InvalidProducerEpochError: on the produce path it is abortable, KIP-588)."""
        if isinstance(error, (ProducerFencedError, TransactionalIdAuthorizationFailedError)):
            self._to_fatal(error)
        elif self.state != TxnState.FATAL_ERROR:
            self._to_abortable(error)

    # ---- internals ---------------------------------------------------------------------------
    def _transition(self, target: TxnState, what: str) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise InvalidTxnStateError(f"{what}: transactional id {self.transactional_id!r} cannot go from "
                                       f"{self.state.name} to {target.name}")
        self.state = target

    def _fail_if_error(self) -> None:
        """Kafka's ``maybeFailWithError``: in an error state, raise (a new instance of) the error."""
        if self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            err = self.last_error
            assert err is not None
            kind = "fatal" if self.state == TxnState.FATAL_ERROR else "abortable; call abort_transaction()"
            raise type(err)(f"transactional id {self.transactional_id!r} is in an error state ({kind}): {err}") from err

    def _no_other_call(self, name: str) -> None:
        if self._call is not None and not self._call[1].done and self._call[0] != name:
            raise InvalidTxnStateError(f"cannot {name} with transactional id {self.transactional_id!r}: the previous "
                                       f"{self._call[0]}() has not completed; call it again to wait for it")

    def _begin_call(self, name: str) -> Optional[TxnResult]:
        """The pending result of the same call (a retry), or None; raises for another pending call."""
        if self._call is not None and not self._call[1].done and self._call[0] == name:
            return self._call[1]
        self._no_other_call(name)
        return None

    def _start_call(self, name: str, kind: int) -> TxnResult:
        result = TxnResult(name)
        self._call = (name, result)
        self._enqueue(kind, result)
        return result

    def _call_done(self, result: TxnResult) -> None:
        if self._call is not None and self._call[1] is result:
            self._call = None

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _enqueue(self, kind: int, result: TxnResult) -> None:
        self._queue.append(_Handler(kind, result, self._next_seq()))

    def _finish(self, h: _Handler) -> None:
        h.result._succeed()
        self._call_done(h.result)

    def _coordinator_key(self, h: _Handler) -> Tuple[int, str]:
        if h.kind == FIND_COORDINATOR:
            return (h.key_type, h.key)
        if h.kind == TXN_OFFSET_COMMIT:
            assert h.group is not None
            return (tm.COORDINATOR_TYPE_GROUP, h.group.group_id)
        return (tm.COORDINATOR_TYPE_TRANSACTION, self.transactional_id)

    def _node_for(self, h: _Handler) -> Optional[int]:
        if h.kind == FIND_COORDINATOR:
            return ANY_NODE
        return self._coordinators.get(self._coordinator_key(h))

    def _lookup(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)
        if not any(h.kind == FIND_COORDINATOR and (h.key_type, h.key) == (key_type, key) for h in self._queue):
            self._queue.append(_Handler(FIND_COORDINATOR, TxnResult("FindCoordinator"), self._next_seq(),
                                        key_type=key_type, key=key))

    def _message(self, h: _Handler, corr: int) -> Any:
        tid, pid, epoch = self.transactional_id, self.producer_id, self.producer_epoch
        if h.kind == FIND_COORDINATOR:
            if h.key_type == tm.COORDINATOR_TYPE_GROUP:
                return gm.FindCoordinatorRequest(h.key, corr)
            return tm.FindTransactionCoordinatorRequest(h.key, corr)
        if h.kind == INIT_PRODUCER_ID:
            bump = self.epoch_bump_required and pid >= 0
            return tm.InitProducerIdRequest(corr, tid, transaction_timeout_ms=self.transaction_timeout_ms,
                                            producer_id=pid if bump else -1, producer_epoch=epoch if bump else -1)
        if h.kind == ADD_PARTITIONS:
            return tm.AddPartitionsToTxnRequest(tid, pid, epoch, tuple((t, p) for t, p in h.partitions), corr)
        assert h.group is not None or h.kind == END_TXN
        if h.kind == ADD_OFFSETS:
            assert h.group is not None
            return tm.AddOffsetsToTxnRequest(tid, pid, epoch, h.group.group_id, corr)
        if h.kind == TXN_OFFSET_COMMIT:
            assert h.group is not None
            g = h.group
            return tm.TxnOffsetCommitRequest(
                tid, g.group_id, pid, epoch, corr,
                offsets=tuple((tp.topic, tp.partition, om.offset, om.leader_epoch, om.metadata) for tp, om in h.offsets),
                generation_id=g.generation_id, member_id=g.member_id, group_instance_id=g.group_instance_id)
        return tm.EndTxnRequest(tid, pid, epoch, h.committed, corr)

    def _retry(self, h: _Handler, now_ms: int, backoff_ms: Optional[int] = None) -> None:
        self._retry_at_ms = now_ms + (self.retry_backoff_ms if backoff_ms is None else backoff_ms)
        self._queue.append(h)

    def _on_error(self, h: _Handler, error: _E, message: str, now_ms: int) -> None:
        kind = classify(h.kind, error)
        if kind == ErrorKind.FIND_COORDINATOR:
            self._lookup(*self._coordinator_key(h))
            self._retry(h, now_ms)
        elif kind == ErrorKind.RETRIABLE:
            backoff = (ADD_PARTITIONS_RETRY_BACKOFF_MS
                       if h.kind == ADD_PARTITIONS and error is ConcurrentTransactionsError else None)
            self._retry(h, now_ms, backoff)
        else:
            what = f"{REQUEST_NAMES[h.kind]} of {self.transactional_id!r}: {message or error.__name__}"
            exc: PylogError = ProducerFencedError(what) if error in _FENCED else error(what)
            if h.kind == TXN_OFFSET_COMMIT and error in (UnknownMemberIdError, IllegalGenerationError):
                exc = CommitFailedError(what)
            if h.kind == ADD_PARTITIONS:
                self.pending_partitions.difference_update(h.partitions)
            if kind == ErrorKind.FATAL:
                self._to_fatal(exc)
            else:
                if kind == ErrorKind.ABORTABLE_BUMP:
                    self.epoch_bump_required = True
                self._to_abortable(exc)
            h.result._fail(exc)
            self._call_done(h.result)

    def _to_abortable(self, error: PylogError) -> None:
        if self.state in (TxnState.ABORTING_TRANSACTION, TxnState.FATAL_ERROR):
            self.last_error = self.last_error if self.state == TxnState.FATAL_ERROR else error
            return  # Kafka: already aborting; the failed result carries the error
        if self.state not in VALID_PREVIOUS[TxnState.ABORTABLE_ERROR]:  # READY/UNINITIALIZED: a late answer
            self._to_fatal(error)
            return
        self.last_error = error
        self.state = TxnState.ABORTABLE_ERROR

    def _to_fatal(self, error: PylogError) -> None:
        self.last_error = error
        self.state = TxnState.FATAL_ERROR
        for h in self._queue:
            h.result._fail(error)
        self._queue.clear()
        if self._call is not None:
            self._call[1]._fail(error)
            self._call = None

    def _end_completed(self, h: _Handler, producer_id: Optional[int], producer_epoch: Optional[int]) -> None:
        """EndTxn succeeded (or was not needed): KIP-890, take the new epoch; READY (or bump, KIP-360)."""
        if producer_id is not None and producer_epoch is not None and producer_id >= 0 and producer_epoch >= 0:
            if (producer_id, producer_epoch) != (self.producer_id, self.producer_epoch):
                self.epoch_bump_required = False  # the coordinator bumped it already
            self.producer_id, self.producer_epoch = producer_id, producer_epoch
        if self.state == TxnState.ABORTABLE_ERROR:  # a batch failed while the commit's EndTxn was out
            assert self.last_error is not None
            h.result._fail(self.last_error)
            self._call_done(h.result)
            return
        self._clear_transaction()
        if (self.epoch_bump_required or self.producer_id < 0) and self.state == TxnState.ABORTING_TRANSACTION:
            # KIP-360 bump, or an InitProducerId that failed with an abortable error: get an epoch first
            self._transition(TxnState.INITIALIZING, "abort_transaction")
            h.kind, h.seq = INIT_PRODUCER_ID, self._next_seq()
            self._queue.append(h)  # the abort's result completes with the bump
            return
        self._transition(TxnState.READY, REQUEST_NAMES[h.kind])
        self.last_error = None
        self._finish(h)

    def _clear_transaction(self) -> None:
        self.partitions_in_txn.clear()
        self.pending_partitions.clear()
        self.new_partitions.clear()
        self.transaction_started = False

    def _check(self) -> None:
        """Assert every invariant (tests call it after each step)."""
        assert (self.last_error is not None) == (self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR)) or (
            self.state in (TxnState.ABORTING_TRANSACTION, TxnState.INITIALIZING)), (self.state, self.last_error)
        assert not (self.partitions_in_txn & self.pending_partitions), (self.partitions_in_txn, self.pending_partitions)
        assert not (self.new_partitions & (self.partitions_in_txn | self.pending_partitions))
        if self.state in (TxnState.UNINITIALIZED, TxnState.READY):
            assert not self.partitions_in_txn and not self.pending_partitions and not self.transaction_started
        if self.state == TxnState.FATAL_ERROR:
            assert not self._queue
        if self.state in (TxnState.READY, TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION):
            assert self.producer_id >= 0 and self.producer_epoch >= 0, (self.producer_id, self.producer_epoch)


__all__ = ["TransactionManager", "TxnState", "TxnResult", "TxnRequest", "ErrorKind", "classify", "VALID_PREVIOUS",
           "ERROR_TABLE", "FIND_COORDINATOR", "INIT_PRODUCER_ID", "ADD_PARTITIONS", "ADD_OFFSETS", "TXN_OFFSET_COMMIT",
           "END_TXN", "ANY_NODE"]
