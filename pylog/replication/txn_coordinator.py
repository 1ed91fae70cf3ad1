"""The transaction coordinator: the state of every transactional id, as Kafka's (sans-I/O).

Kafka's ``TransactionCoordinator`` + ``TransactionMetadata``, as pure logic in
the style of :mod:`pylog.replication.group_coordinator`: no clock, socket,
thread or disk. Time comes in as ``now_ms``; everything the coordinator wants
done comes out in a :class:`TxnOutcome` that the caller acts on:

* ``append``: a ``__transaction_state`` record (:mod:`pylog.replication.txn_log`)
  to append with ``acks=all`` to the coordinator's partition; then the caller
  calls :meth:`TransactionCoordinator.on_log_append` with the result. While an
  append is outstanding the transactional id has a *pending* state, and every
  request for it gets the retriable :class:`ConcurrentTransactionsError`.
* ``markers``: COMMIT/ABORT control records to write to each partition of the
  transaction (producer id, epoch, coordinator epoch); the caller calls
  :meth:`TransactionCoordinator.on_marker_written` as each partition's leader
  acknowledges one. When the last is in, a CompleteCommit/CompleteAbort record
  is appended (a new ``append``).
* ``reply``: whether the request that caused this outcome is answered now
  (``error`` or the producer id and epoch); the reply of a request that needed
  an append comes out of :meth:`on_log_append`.

States and transitions (Kafka's ``TransactionState.validPreviousStates``; ids
as on disk):

==================  ==  ==========================================================
state               id  entered from
==================  ==  ==========================================================
Empty               0   Empty, CompleteCommit, CompleteAbort (InitProducerId)
Ongoing             1   Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions/AddOffsets)
PrepareCommit       2   Ongoing (EndTxn commit)
PrepareAbort        3   Ongoing (EndTxn abort), PrepareEpochFence (fencing, timeout)
CompleteCommit      4   PrepareCommit (all markers written)
CompleteAbort       5   PrepareAbort (all markers written)
Dead                6   Empty, CompleteCommit, CompleteAbort (expiry; not built)
PrepareEpochFence   7   Ongoing (transient, never written: InitProducerId or timeout on an open txn)
==================  ==  ==========================================================

Fencing: InitProducerId bumps the producer epoch; on a transactional id with an
open transaction it first bumps the epoch (so the old producer's requests get
:class:`ProducerFencedError` at once), aborts the open transaction with that
epoch (the ABORT markers carry it, fencing the old producer on every partition)
and answers :class:`ConcurrentTransactionsError`; the producer's retry then
gets a yet higher epoch. An epoch at ``32766`` or more is exhausted: the next
InitProducerId (or, with the KIP-890 bump, the next EndTxn) moves the
transactional id to a new producer id with epoch 0.

KIP-890 (``transaction_version >= 2``, the default): every EndTxn bumps the
producer epoch (the markers and the reply carry the new one), so an EndTxn
delayed from an earlier transaction carries an epoch one below the current and
is refused with :class:`ProducerFencedError` instead of committing or aborting
the next transaction. ``transaction_version=1`` (Kafka's TV1) turns the bump off;
it exists to show the Jepsen anomaly in tests.

Inputs: :meth:`init_producer_id`, :meth:`add_partitions`, :meth:`add_offsets`,
:meth:`end_txn`, :meth:`verify_partitions` (KIP-890 part 1), :meth:`abort_timed_out`,
:meth:`on_log_append`, :meth:`on_marker_written`, :meth:`load` / :meth:`unload`.

Complexity: O(partitions of the transaction) per call; :meth:`load` O(records);
:meth:`abort_timed_out` O(transactional ids).
Durability: none here; a transition counts once its record is in the
``__transaction_state`` partition's ISR (``acks=all``); :meth:`load` on a new
coordinator completes a transaction left in PrepareCommit/PrepareAbort.
Thread-safety: none; one loop thread drives it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from pylog.errors import (
    ConcurrentTransactionsError,
    CorruptRecordError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    PylogError,
    TransactionAbortableError,
)
from pylog.replication.offsets_topic import DEFAULT_OFFSETS_PARTITIONS, OFFSETS_TOPIC, partition_for_group
from pylog.replication.txn_log import (
    DEFAULT_TRANSACTION_STATE_PARTITIONS,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TransactionState,
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_transactional_id,
)

S = TransactionState
#: Kafka's ``transaction.max.timeout.ms`` default (15 min)
DEFAULT_MAX_TIMEOUT_MS = 900_000
#: Short.MaxValue: the largest producer epoch
MAX_EPOCH = 32767

#: state -> the states it may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS: Dict[TransactionState, FrozenSet[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def _int(name: str, v: object, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise InvalidRequestError(f"{name} must be an int in {lo}..{hi}, got {v!r}")
    return v


def _partitions(partitions: Iterable[TopicPartition]) -> List[TopicPartition]:
    out = []
    for tp in partitions:
        if not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and tp[0]):
            raise InvalidRequestError(f"a partition is a (topic, partition) pair, got {tp!r}")
        out.append((tp[0], _int(f"partition of {tp[0]!r}", tp[1], 0, 2**31 - 1)))
    return out


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: epochs from Short.MaxValue - 1 on are not handed out."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class TxnMarker:
    """One marker to write: a control batch on ``topic``-``partition``."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool


@dataclass(frozen=True)
class TxnLogAppend:
    """One ``__transaction_state`` record to append (acks=all) to ``partition``."""

    transactional_id: str
    partition: int
    key: bytes
    value: bytes
    coordinator_epoch: int


@dataclass
class TxnOutcome:
    """What one input asks of the caller (see the module docstring)."""

    transactional_id: str
    reply: bool = False
    error: Optional[PylogError] = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    append: Optional[TxnLogAppend] = None
    markers: Tuple[TxnMarker, ...] = ()


@dataclass(frozen=True)
class _Transit:
    """A prepared transition (Kafka's TxnTransitMetadata): the target, applied once its record is appended."""

    value: TxnLogValue
    last_producer_epoch: int
    kind: str  # what completing it answers: init, add, end, fence, timeout, complete


@dataclass
class TxnMetadata:
    """The coordinator's view of one transactional id (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    timeout_ms: int = 60_000
    state: TransactionState = S.EMPTY
    partitions: Set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    client_transaction_version: int = 0
    pending: Optional[_Transit] = None
    has_failed_epoch_fence: bool = False

    def value(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                           frozenset(self.partitions), self.last_update_ms, self.start_ms,
                           self.previous_producer_id, self.next_producer_id, self.client_transaction_version)


class TransactionCoordinator:
    """The transaction coordinator of one broker (see the module docstring).

    ``producer_ids`` hands out new producer ids (the cluster's allocator);
    ``partitions`` is the ``__transaction_state`` partition count and
    ``offsets_partitions`` the ``__consumer_offsets`` one (for AddOffsetsToTxn).
    """

    def __init__(self, producer_ids: Callable[[], int], *,
                 partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS,
                 offsets_partitions: int = DEFAULT_OFFSETS_PARTITIONS,
                 max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
                 transaction_version: int = 2):
        if transaction_version not in (0, 1, 2):
            raise InvalidRequestError(f"transaction_version must be 0, 1 or 2, got {transaction_version}")
        self._producer_ids = producer_ids
        self.partitions = partitions
        self.offsets_partitions = offsets_partitions
        self.max_timeout_ms = max_timeout_ms
        #: 2: KIP-890 epoch bump on every EndTxn; 0/1: none (1 writes the flexible log value, as Kafka's TV1)
        self.transaction_version = transaction_version
        self._txns: Dict[str, TxnMetadata] = {}
        self._epochs: Dict[int, int] = {}  # loaded __transaction_state partition -> coordinator epoch

    # ---- lookup ------------------------------------------------------------------------------
    def partition_for(self, transactional_id: str) -> int:
        return partition_for_transactional_id(transactional_id, self.partitions)

    def _owned(self, transactional_id: str) -> Tuple[int, int]:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidRequestError(f"transactional id must be a non-empty string, got {transactional_id!r}")
        p = self.partition_for(transactional_id)
        if p not in self._epochs:
            raise NotCoordinatorError(f"this broker is not the transaction coordinator of {transactional_id!r} "
                                      f"(partition {p} of __transaction_state is not loaded here)")
        return p, self._epochs[p]

    def loaded_epoch(self, partition: int) -> Optional[int]:
        """The coordinator epoch ``partition`` of ``__transaction_state`` is loaded at (None: not loaded)."""
        return self._epochs.get(partition)

    def loaded_partitions(self) -> List[int]:
        return sorted(self._epochs)

    def describe(self, transactional_id: str) -> Optional[TxnMetadata]:
        """A copy of the state of ``transactional_id`` (None when unknown)."""
        m = self._txns.get(transactional_id)
        return copy.deepcopy(m) if m is not None else None

    def transactional_ids(self) -> List[str]:
        return sorted(self._txns)

    def completing(self, transactional_id: str) -> bool:
        """Is ``transactional_id``'s previous transaction completing (PrepareCommit/PrepareAbort written,
        its markers going out, the Complete record pending)? Then AddPartitionsToTxn/AddOffsetsToTxn
        are refused with :class:`ConcurrentTransactionsError` only until the Complete record is
        appended (the host may hold them until then). O(1)."""
        m = self._txns.get(transactional_id)
        return (m is not None and m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) and m.pending is not None
                and m.pending.kind == "complete")

    # ---- transitions -------------------------------------------------------------------------
    def _prepare(self, m: TxnMetadata, kind: str, state: TransactionState, *, producer_id: Optional[int] = None,
                 epoch: Optional[int] = None, last_epoch: Optional[int] = None, timeout_ms: Optional[int] = None,
                 partitions: Optional[FrozenSet[TopicPartition]] = None, start_ms: Optional[int] = None,
                 next_producer_id: int = NO_PRODUCER_ID, now_ms: int,
                 client_transaction_version: Optional[int] = None) -> TxnLogAppend:
        """Set ``m``'s pending transition (Kafka's prepareTransitionTo) and return the record to append."""
        assert m.pending is None, f"{m.transactional_id} already has a pending transition"
        assert m.state in VALID_PREVIOUS[state], f"{m.state.kafka_name} -> {state.kafka_name}"
        value = TxnLogValue(
            producer_id=m.producer_id if producer_id is None else producer_id,
            producer_epoch=m.producer_epoch if epoch is None else epoch,
            transaction_timeout_ms=m.timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(m.partitions) if partitions is None else partitions,
            last_update_timestamp_ms=now_ms,
            start_timestamp_ms=m.start_ms if start_ms is None else start_ms,
            previous_producer_id=m.producer_id,
            next_producer_id=next_producer_id,
            client_transaction_version=(self.transaction_version if client_transaction_version is None
                                        else client_transaction_version),
        )
        assert value.producer_id >= 0 and 0 <= value.producer_epoch <= MAX_EPOCH, value
        m.pending = _Transit(value, m.last_producer_epoch if last_epoch is None else last_epoch, kind)
        return self._record(m, value)

    def _record(self, m: TxnMetadata, value: TxnLogValue) -> TxnLogAppend:
        p, epoch = self._owned(m.transactional_id)
        version = 1 if self.transaction_version >= 1 else 0
        return TxnLogAppend(m.transactional_id, p, encode_key(m.transactional_id), encode_value(value, version), epoch)

    @staticmethod
    def _apply(m: TxnMetadata, t: _Transit) -> None:
        """Complete the pending transition (Kafka's completeTransitionTo): the record is in the log."""
        v = t.value
        m.producer_id, m.producer_epoch, m.last_producer_epoch = v.producer_id, v.producer_epoch, t.last_producer_epoch
        m.previous_producer_id, m.next_producer_id = v.previous_producer_id, v.next_producer_id
        m.timeout_ms, m.state, m.partitions = v.transaction_timeout_ms, v.state, set(v.partitions)
        m.start_ms, m.last_update_ms = v.start_timestamp_ms, v.last_update_timestamp_ms
        m.client_transaction_version = v.client_transaction_version
        m.pending = None

    def _reply(self, m: TxnMetadata, error: Optional[PylogError] = None) -> TxnOutcome:
        if error is not None:
            return TxnOutcome(m.transactional_id, reply=True, error=error)
        return TxnOutcome(m.transactional_id, reply=True, producer_id=m.producer_id, producer_epoch=m.producer_epoch)

    # ---- InitProducerId ----------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int, now_ms: int,
                         expected: Optional[Tuple[int, int]] = None) -> TxnOutcome:
        """InitProducerId with a transactional id (``expected``: the producer's current (id, epoch), KIP-360).

        Errors (in the outcome): :class:`InvalidTransactionTimeoutError`,
        :class:`ConcurrentTransactionsError` (a transition is pending, the previous
        transaction is completing, or an open one is being fenced: retry),
        :class:`ProducerFencedError` (``expected`` names an older producer).
        Raises :class:`InvalidRequestError` / :class:`NotCoordinatorError` for the request as such.
        """
        self._owned(transactional_id)
        _int("transaction timeout", transaction_timeout_ms, -(2**31), 2**31 - 1)
        if expected is not None:
            if not (isinstance(expected, tuple) and len(expected) == 2):
                raise InvalidRequestError(f"expected must be a (producer id, epoch) pair, got {expected!r}")
            _int("expected producer id", expected[0], -1, 2**63 - 1)
            _int("expected producer epoch", expected[1], -1, MAX_EPOCH)
        if not 0 < transaction_timeout_ms <= self.max_timeout_ms:
            return TxnOutcome(transactional_id, reply=True, error=InvalidTransactionTimeoutError(
                f"transaction timeout {transaction_timeout_ms} ms of {transactional_id!r} is not in "
                f"1..{self.max_timeout_ms} (transaction_max_timeout_ms)"))
        m = self._txns.get(transactional_id)
        if m is None:
            m = self._txns[transactional_id] = TxnMetadata(
                transactional_id, self._producer_ids(), timeout_ms=transaction_timeout_ms, last_update_ms=now_ms,
                client_transaction_version=self.transaction_version)
        if m.pending is not None:
            return self._reply(m, ConcurrentTransactionsError(
                f"{transactional_id!r} has a pending {m.pending.value.state.kafka_name} transition"))
        if expected is not None:
            exp_pid, exp_epoch = expected
            valid = (m.producer_epoch == NO_PRODUCER_EPOCH or exp_pid == m.producer_id
                     or (exp_pid == m.previous_producer_id and is_epoch_exhausted(exp_epoch)))
            if not valid:
                return self._reply(m, ProducerFencedError(
                    f"producer ({exp_pid}, epoch {exp_epoch}) of {transactional_id!r} was replaced by producer "
                    f"{m.producer_id}"))
        if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return self._reply(m, ConcurrentTransactionsError(
                f"{transactional_id!r} is completing its transaction ({m.state.kafka_name})"))
        if m.state == S.ONGOING:
            return self._fence_and_abort(m, "fence", now_ms)
        if m.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):  # Dead, PrepareEpochFence: never current
            return self._reply(m, InvalidTxnStateError(f"{transactional_id!r} is {m.state.kafka_name}"))
        if is_epoch_exhausted(m.producer_epoch) and (expected is None or expected[1] == m.producer_epoch):
            append = self._prepare(m, "init", S.EMPTY, producer_id=self._producer_ids(), epoch=0,
                                   last_epoch=m.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                                   timeout_ms=transaction_timeout_ms, partitions=frozenset(), start_ms=-1,
                                   now_ms=now_ms)
            return TxnOutcome(transactional_id, append=append)
        if expected is None:
            epoch, last = m.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif m.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == m.producer_epoch:
            epoch, last = m.producer_epoch + 1, m.producer_epoch
        elif expected[1] == m.last_producer_epoch:  # a retry of a bump whose reply was lost
            epoch, last = m.producer_epoch, m.last_producer_epoch
        else:
            return self._reply(m, ProducerFencedError(
                f"epoch {expected[1]} of producer {expected[0]} ({transactional_id!r}) is neither the current "
                f"{m.producer_epoch} nor the previous {m.last_producer_epoch}"))
        append = self._prepare(m, "init", S.EMPTY, epoch=epoch, last_epoch=last, timeout_ms=transaction_timeout_ms,
                               partitions=frozenset(), start_ms=-1, now_ms=now_ms)
        return TxnOutcome(transactional_id, append=append)

    def _fence_and_abort(self, m: TxnMetadata, kind: str, now_ms: int) -> TxnOutcome:
        """PrepareEpochFence then PrepareAbort: bump the epoch now, abort the open transaction with it."""
        bumped = m.producer_epoch if m.has_failed_epoch_fence else m.producer_epoch + 1
        assert bumped <= MAX_EPOCH  # an open transaction's epoch is never exhausted (<= 32766)
        epoch, last, next_pid = bumped, NO_PRODUCER_EPOCH, NO_PRODUCER_ID
        if self.transaction_version >= 2:
            # the abort bumps once more, as every KIP-890 EndTxn does (Kafka's endTransaction with the
            # server's version): the old producer's epoch is then two below, never "current - 1",
            # so its late EndTxn cannot pass for a retry. Out of epochs: move to a new producer id
            # (allocated before anything changes: the allocator may raise, leaving ``m`` as it was).
            if bumped < MAX_EPOCH:
                epoch, last = bumped + 1, bumped
            else:
                next_pid = self._producer_ids()
        m.producer_epoch, m.last_producer_epoch = bumped, NO_PRODUCER_EPOCH  # fences the old producer at once
        append = self._prepare(m, kind, S.PREPARE_ABORT, epoch=epoch, last_epoch=last, next_producer_id=next_pid,
                               now_ms=now_ms)
        return TxnOutcome(m.transactional_id, append=append)

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------
    def _check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        m = self._txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            held = "no producer" if m is None else f"producer {m.producer_id}"
            raise InvalidProducerIdMappingError(f"{transactional_id!r} has {held}, not {producer_id}")
        if m.producer_epoch != producer_epoch:
            raise ProducerFencedError(f"epoch {producer_epoch} of producer {producer_id} ({transactional_id!r}) "
                                      f"is not the current {m.producer_epoch}")
        return m

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int) -> TxnOutcome:
        """AddPartitionsToTxn: ``partitions`` join the open transaction (which this starts, if none is open).

        Errors: :class:`InvalidProducerIdMappingError`, :class:`ProducerFencedError`,
        :class:`ConcurrentTransactionsError`, :class:`InvalidTxnStateError`.
        """
        self._owned(transactional_id)
        parts = frozenset(_partitions(partitions))
        _int("producer id", producer_id, 0, 2**63 - 1)
        _int("producer epoch", producer_epoch, 0, MAX_EPOCH)
        try:
            m = self._check_producer(transactional_id, producer_id, producer_epoch)
        except PylogError as exc:
            return TxnOutcome(transactional_id, reply=True, error=exc)
        if m.pending is not None or m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return self._reply(m, ConcurrentTransactionsError(
                f"{transactional_id!r} is completing its transaction ({(m.pending.value.state if m.pending else m.state).kafka_name})"))
        if m.state not in VALID_PREVIOUS[S.ONGOING]:
            return self._reply(m, InvalidTxnStateError(f"cannot add partitions to {transactional_id!r} in "
                                                       f"state {m.state.kafka_name}"))
        if not parts:
            return self._reply(m, InvalidRequestError("AddPartitionsToTxn needs at least one partition"))
        if m.state == S.ONGOING and parts <= m.partitions:
            return self._reply(m)
        start = now_ms if m.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else m.start_ms
        append = self._prepare(m, "add", S.ONGOING, partitions=frozenset(m.partitions | parts), start_ms=start,
                               now_ms=now_ms)
        return TxnOutcome(transactional_id, append=append)

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                    now_ms: int) -> TxnOutcome:
        """AddOffsetsToTxn: the ``__consumer_offsets`` partition of ``group_id`` joins the transaction."""
        if not isinstance(group_id, str) or not group_id:
            raise InvalidRequestError(f"group id must be a non-empty string, got {group_id!r}")
        p = partition_for_group(group_id, self.offsets_partitions)
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, p)], now_ms)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> Dict[TopicPartition, Optional[PylogError]]:
        """KIP-890 part 1: is each partition in the open transaction? (None: yes; else the error to refuse
        the produce with: :class:`TransactionAbortableError` for a partition never added.)

        Whole-request errors (wrong producer, fenced epoch, a completing transaction)
        are given for every partition, as Kafka's ``handleVerifyPartitionsInTransaction``.
        """
        self._owned(transactional_id)
        parts = _partitions(partitions)
        _int("producer id", producer_id, 0, 2**63 - 1)
        _int("producer epoch", producer_epoch, 0, MAX_EPOCH)
        try:
            m = self._check_producer(transactional_id, producer_id, producer_epoch)
            if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(f"{transactional_id!r} is completing its transaction")
        except PylogError as exc:
            return {tp: exc for tp in parts}
        return {tp: None if tp in m.partitions else TransactionAbortableError(
            f"partition {tp[0]}-{tp[1]} is not in the open transaction of {transactional_id!r}") for tp in parts}

    # ---- EndTxn ------------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int, client_transaction_version: Optional[int] = None) -> TxnOutcome:
        """EndTxn (commit or abort) from the producer.

        ``client_transaction_version``: what the client's request says it knows (Kafka's
        ``clientTransactionVersion``: 2 for EndTxn v5+, else 0); the KIP-890 epoch bump happens only
        when both it and the coordinator's ``transaction_version`` are 2 - a client of an older
        EndTxn would not learn the new epoch. None: the coordinator's own version (pylog's client).

        A retry of an EndTxn that already completed answers success; with the
        KIP-890 bump a retry is recognized by ``producer_epoch == current - 1``,
        and any other old epoch is fenced. Errors: :class:`InvalidProducerIdMappingError`,
        :class:`ProducerFencedError`, :class:`ConcurrentTransactionsError` (the same
        result is still completing), :class:`InvalidTxnStateError` (no open transaction,
        or the other result is completing or completed).
        """
        self._owned(transactional_id)
        _int("producer id", producer_id, 0, 2**63 - 1)
        _int("producer epoch", producer_epoch, 0, MAX_EPOCH)
        if not isinstance(commit, bool):
            raise InvalidRequestError(f"commit must be a bool, got {commit!r}")
        m = self._txns.get(transactional_id)
        if m is None:
            return TxnOutcome(transactional_id, reply=True, error=InvalidProducerIdMappingError(
                f"{transactional_id!r} has no producer"))
        v2 = m.client_transaction_version >= 2
        retry_on_overflow = (v2 and m.previous_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                             and m.producer_epoch == 0)
        retry_on_bump = v2 and m.producer_epoch == producer_epoch + 1
        if v2:
            if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                valid = retry_on_bump
            elif m.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                valid = retry_on_bump or retry_on_overflow
            else:
                valid = producer_epoch == m.producer_epoch
        else:
            valid = producer_epoch == m.producer_epoch
        result = "commit" if commit else "abort"
        if m.producer_id != producer_id and not retry_on_overflow:
            return self._reply(m, InvalidProducerIdMappingError(
                f"{transactional_id!r} has producer {m.producer_id}, not {producer_id}"))
        if not valid:
            return self._reply(m, ProducerFencedError(
                f"EndTxn({result}) of {transactional_id!r} with epoch {producer_epoch} does not match the "
                f"current epoch {m.producer_epoch} ({m.state.kafka_name})"))
        if m.pending is not None:
            return self._reply(m, ConcurrentTransactionsError(
                f"{transactional_id!r} has a pending {m.pending.value.state.kafka_name} transition"))
        done, busy = ((S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else (S.COMPLETE_ABORT, S.PREPARE_ABORT))
        if m.state == S.ONGOING:
            tv = self.transaction_version
            if client_transaction_version is not None:
                tv = min(tv, _int("client transaction version", client_transaction_version, 0, 2))
            return self._prepare_end(m, commit, "end", now_ms, tv)
        if m.state == done:
            return self._reply(m)  # a retry of an EndTxn that completed
        if m.state == busy:
            return self._reply(m, ConcurrentTransactionsError(f"{transactional_id!r} is completing its {result}"))
        return self._reply(m, InvalidTxnStateError(
            f"EndTxn({result}) of {transactional_id!r} in state {m.state.kafka_name}"))

    def _prepare_end(self, m: TxnMetadata, commit: bool, kind: str, now_ms: int,
                     transaction_version: Optional[int] = None) -> TxnOutcome:
        tv = self.transaction_version if transaction_version is None else transaction_version
        next_pid = NO_PRODUCER_ID
        epoch, last = m.producer_epoch, m.last_producer_epoch
        if tv >= 2:
            if is_epoch_exhausted(m.producer_epoch):
                next_pid = self._producer_ids()
            epoch, last = m.producer_epoch + 1, m.producer_epoch
        append = self._prepare(m, kind, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, epoch=epoch,
                               last_epoch=last, next_producer_id=next_pid, now_ms=now_ms,
                               client_transaction_version=tv)
        return TxnOutcome(m.transactional_id, append=append)

    # ---- timeouts ----------------------------------------------------------------------------
    def abort_timed_out(self, now_ms: int) -> List[TxnOutcome]:
        """Abort every open transaction older than its timeout (``start + timeout < now``), fencing its producer."""
        out = []
        for tid in sorted(self._txns):
            m = self._txns[tid]
            if m.state == S.ONGOING and m.pending is None and m.start_ms + m.timeout_ms < now_ms:
                out.append(self._fence_and_abort(m, "timeout", now_ms))
        return out

    # ---- completions -------------------------------------------------------------------------
    def on_log_append(self, transactional_id: str, error: Optional[PylogError], now_ms: int) -> TxnOutcome:
        """The append of ``transactional_id``'s pending record succeeded (``error`` None) or failed.

        Success completes the transition: the waiting request (if any) is
        answered; after PrepareCommit/PrepareAbort the markers go out (and the
        Complete record, once they are all written). A failed append drops the
        pending transition and answers ``error``; a failed Complete append is
        handed back to be retried (the markers are already written).
        """
        m = self._txns.get(transactional_id)
        if m is None or m.pending is None:
            return TxnOutcome(transactional_id)  # unloaded meanwhile, or a duplicate
        t = m.pending
        if error is not None:
            if t.kind == "complete":
                return TxnOutcome(transactional_id, error=error, append=self._record(m, t.value))
            m.pending = None
            if t.kind in ("fence", "timeout"):
                m.has_failed_epoch_fence = True
            return self._reply(m, error) if t.kind not in ("timeout",) else TxnOutcome(transactional_id, error=error)
        self._apply(m, t)
        if t.kind == "complete":
            m.has_failed_epoch_fence = False
            return TxnOutcome(transactional_id)
        if t.kind in ("init", "add"):
            return self._reply(m)
        out = self._start_markers(m, now_ms)  # end, fence, timeout: PrepareCommit/PrepareAbort is written
        if t.kind == "end":
            out.reply, out.producer_id, out.producer_epoch = True, m.producer_id, m.producer_epoch
        elif t.kind == "fence":
            out.reply, out.error = True, ConcurrentTransactionsError(
                f"the open transaction of {transactional_id!r} is being aborted to fence its producer; retry")
        return out

    def _start_markers(self, m: TxnMetadata, now_ms: int) -> TxnOutcome:
        """In PrepareCommit/PrepareAbort: prepare the Complete transition (pending while markers are written)."""
        commit = m.state == S.PREPARE_COMMIT
        p, coordinator_epoch = self._owned(m.transactional_id)
        markers = tuple(TxnMarker(t, part, m.producer_id, m.producer_epoch, coordinator_epoch, commit)
                        for t, part in sorted(m.partitions))
        rotate = m.client_transaction_version >= 2 and m.next_producer_id != NO_PRODUCER_ID
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        value = TxnLogValue(
            producer_id=m.next_producer_id if rotate else m.producer_id,
            producer_epoch=0 if rotate else m.producer_epoch,
            transaction_timeout_ms=m.timeout_ms, state=done, partitions=frozenset(),
            last_update_timestamp_ms=now_ms, start_timestamp_ms=m.start_ms,
            previous_producer_id=m.producer_id, next_producer_id=NO_PRODUCER_ID,
            client_transaction_version=m.client_transaction_version)
        m.pending = _Transit(value, m.producer_epoch, "complete")
        out = TxnOutcome(m.transactional_id, markers=markers)
        if not m.partitions:
            out.append = self._record(m, value)
        return out

    def on_marker_written(self, transactional_id: str, topic: str, partition: int, now_ms: int) -> TxnOutcome:
        """The leader of ``topic``-``partition`` has the marker; after the last one, append the Complete record."""
        m = self._txns.get(transactional_id)
        tp = (topic, partition)
        if (m is None or m.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT) or m.pending is None
                or tp not in m.partitions):
            return TxnOutcome(transactional_id)  # stale or duplicate acknowledgement
        m.partitions.discard(tp)
        if m.partitions:
            return TxnOutcome(transactional_id)
        return TxnOutcome(transactional_id, append=self._record(m, m.pending.value))

    # ---- failover ----------------------------------------------------------------------------
    def load(self, partition: int, coordinator_epoch: int, records: Iterable[Tuple[bytes, Optional[bytes]]],
             now_ms: int) -> List[TxnOutcome]:
        """Become coordinator of ``__transaction_state`` partition ``partition`` at ``coordinator_epoch``.

        ``records`` are the partition's (key, value) pairs in offset order; the
        last value per transactional id wins, a null value removes it, a key of
        an unknown version or of an id that belongs to another partition is skipped. Transactions left in PrepareCommit/PrepareAbort
        are completed: their markers come out (with the new coordinator epoch).
        Raises :class:`CorruptRecordError` naming the record's index for bytes that do not decode.
        """
        self.unload(partition)
        loaded: Dict[str, TxnLogValue] = {}
        for i, (key, value) in enumerate(records):
            try:
                tid = decode_key(key)
                if tid is None:
                    continue
                v = decode_value(value)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"__transaction_state-{partition} record {i}: {exc}") from None
            if self.partition_for(tid) != partition:
                continue  # not this partition's id (a record of another partition count): clients never ask here
            if v is None:
                loaded.pop(tid, None)
            else:
                loaded[tid] = v
        self._epochs[partition] = coordinator_epoch
        out = []
        for tid, v in sorted(loaded.items()):
            m = TxnMetadata(tid, v.producer_id, v.producer_epoch, NO_PRODUCER_EPOCH, v.previous_producer_id,
                            v.next_producer_id, v.transaction_timeout_ms, v.state, set(v.partitions),
                            v.start_timestamp_ms, v.last_update_timestamp_ms, v.client_transaction_version)
            self._txns[tid] = m
            if v.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                out.append(self._start_markers(m, now_ms))
        return out

    def unload(self, partition: int) -> None:
        """Stop coordinating ``partition``: forget its transactional ids (pending work is dropped)."""
        self._epochs.pop(partition, None)
        for tid in [t for t in self._txns if self.partition_for(t) == partition]:
            del self._txns[tid]

    # ---- invariants --------------------------------------------------------------------------
    def _check(self) -> None:
        """Assert every invariant (tests call it after each step)."""
        for tid, m in self._txns.items():
            assert self.partition_for(tid) in self._epochs, tid
            assert m.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE), (tid, m.state)
            assert NO_PRODUCER_EPOCH <= m.producer_epoch <= MAX_EPOCH, (tid, m.producer_epoch)
            if m.state == S.EMPTY:
                assert not m.partitions and m.start_ms == -1, (tid, m)
            if m.state == S.ONGOING:
                assert m.partitions and m.start_ms >= 0, (tid, m)
            if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                assert m.pending is not None and m.pending.kind == "complete", (tid, m)
            if m.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                assert not m.partitions, (tid, m)
            if m.pending is not None:
                assert m.state in VALID_PREVIOUS[m.pending.value.state], (tid, m)


__all__ = ["TransactionCoordinator", "TxnMarker", "TxnLogAppend", "TxnOutcome", "TxnMetadata", "VALID_PREVIOUS",
           "is_epoch_exhausted"]
