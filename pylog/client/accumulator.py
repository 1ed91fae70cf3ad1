"""The producer's record batches and the futures ``send`` returns (Kafka's ``ProducerBatch``,
``ProduceRequestResult`` and ``FutureRecordMetadata``).

A :class:`ProducerBatch` collects the records bound for one partition until
it is full (``batch_size`` bytes), its ``linger_ms`` has passed, or the
producer flushes; it is then encoded once as one RecordBatch v2 (carrying
the producer id, epoch and base sequence when idempotent) and the same bytes
are resent on every retry, so the leader can recognise a retry.

``send`` returns a :class:`FutureRecordMetadata`: two references (batch,
index). Completing a batch is O(1) whatever its size: the offset of record
``i`` is computed when asked for (``base_offset + i``). A batch gets a
``threading.Event`` only when a thread actually waits for it (real time), so
a batch nobody waits for costs no lock or condition; none exist per record.

A :class:`PartitionState` is one partition's queue (Kafka's
``RecordAccumulator`` deque): its open batch, the closed ones waiting, those
in flight and those waiting for a retry, and its idempotent sequence numbers
with their :class:`SequenceState` (KIP-360).

Owns: batches, futures and per-partition queues (data); what is done with
them belongs to :mod:`pylog.client.producer` (appending), ``sender`` (sending)
and ``buffer_pool`` (memory). Complexity: O(1) per record appended and per
batch completed; a future's result is O(1). Durability: none (memory until
acknowledged; what ``acks`` promises then, docs/producer.md).
Thread-safety: a batch's record list is appended to under the producer's
lock until the batch is closed; after that only the producer's loop thread
touches it. Completion state is published under the producer's lock.
"""
from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from typing import Any, Callable, Deque, List, NamedTuple, Optional, Tuple

from pylog.errors import InvalidConfigurationError, PylogError, RequestTimedOutError
from pylog.record import Record

logger = logging.getLogger(__name__)

_new_tuple = tuple.__new__  # builds a RecordMetadata without running its Python-level __new__

class RecordMetadata(NamedTuple):
    """Where a record was written: ``offset`` -1 when ``acks=0`` (nobody said)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class _PyBatchBase:
    """The pure-Python twin of ``pylog._native._sendpath.BatchBase``: the two fields every send touches."""

    __slots__ = ("records", "size", "topic", "partition", "done", "error", "base_offset", "timestamp", "plain")


class _PyRecordFuture:
    """The pure-Python twin of ``pylog._native._sendpath.RecordFuture``: (batch, index), read-only."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: "ProducerBatch", index: int):
        self._batch = batch
        self._index = index


try:  # the C send path works on these C bases directly (sendpath.c)
    from pylog._native._sendpath import BatchBase as _BatchBase
    from pylog._native._sendpath import RecordFuture as _RecordFutureBase
except ImportError:  # pragma: no cover - only without a build of sendpath.c
    _BatchBase = _PyBatchBase  # type: ignore[assignment,misc]
    _RecordFutureBase = _PyRecordFuture


class ProducerBatch(_BatchBase):
    """Records for one partition, sent (and retried) as one RecordBatch.

    ``records`` and ``size`` live in the C base (``BatchBase``), where the C
    send path updates them under the producer's lock.
    """

    records: List[Any]
    size: int
    # (records, size, topic, partition, done, error, base_offset, timestamp and plain are the base's)
    __slots__ = (
        "created_ms", "deadline_ms", "open", "event", "callbacks", "owner", "data", "producer_id", "producer_epoch",
        "sequence", "attempts", "order", "reserved", "last_error", "maybe_written", "children", "parent",
        "parent_start",
    )

    def __init__(self, owner: Any, topic: str, partition: int, now_ms: int, deadline_ms: int, order: int):
        self.owner = owner
        self.topic = topic
        self.partition = partition
        self.records: List[Any] = []  # bytes values, or Record when a key/headers/timestamp is given
        self.size = 61  # the RecordBatch header; each record adds its estimated size
        self.created_ms = now_ms
        self.deadline_ms = deadline_ms
        self.open = True  # still taking records
        self.done = False
        self.base_offset = -1
        self.timestamp = -1
        self.error: Optional[BaseException] = None
        self.event: Optional[threading.Event] = None  # made by the first waiter (real time), see wait()
        self.callbacks: Optional[List[Callable[[], None]]] = None
        self.data: Optional[bytearray] = None  # encoded once, resent as is
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequence = -1
        self.attempts = 0
        self.order = order
        self.reserved = 0  # bytes of the producer's buffer_memory this batch holds until completed
        self.last_error: Optional[BaseException] = None  # the error of its latest retried attempt
        #: some attempt under the current sequence may have been appended (no answer, or an answer that
        #: does not prove a refusal): the batch must never be renumbered (KIP-360, producer.py)
        self.maybe_written = False
        #: split for being over the topic's max_message_bytes (Kafka's splitAndReenqueue): the batches that
        #: carry its records now, each holding ``records[parent_start:...]``; its futures follow them
        self.children: Optional[List["ProducerBatch"]] = None
        self.parent: Optional["ProducerBatch"] = None
        self.parent_start = 0
        self.plain = True  # every record a bytes value (no key, headers, timestamp or null): the encoder's fast path

    def __repr__(self) -> str:
        state = "done" if self.done else ("open" if self.open else "closed")
        return (f"ProducerBatch({self.topic}-{self.partition} n={len(self.records)} seq={self.sequence} "
                f"pid={self.producer_id} {state})")

    def complete(self, base_offset: int, timestamp: int, error: Optional[BaseException]) -> None:
        """Resolve every record's future (called once, on the loop thread)."""
        with self.owner._lock:
            if self.done:
                return
            self.base_offset = base_offset
            self.timestamp = timestamp
            self.error = error
            self.done = True
            cbs, self.callbacks = self.callbacks, None
            if self.reserved:
                self.owner._give_back(self.reserved)
                self.reserved = 0
            event = self.event  # read under the lock: a waiter makes it under the lock while not done
        if event is not None:
            event.set()
        if cbs:
            for fn in cbs:
                try:
                    fn()
                except Exception:  # a user callback must not break the producer
                    logger.exception("producer callback raised")

    def wait(self, timeout: Optional[float]) -> bool:
        """Real time: block until the batch is completed; False if ``timeout`` seconds pass first."""
        if self.done:
            return True
        with self.owner._lock:
            if self.done:
                return True
            event = self.event
            if event is None:
                event = self.event = threading.Event()
        return event.wait(timeout)

    def metadata(self, index: int) -> RecordMetadata:
        rec = self.records[index]
        ts = self.timestamp
        if type(rec) is Record and rec.timestamp is not None:
            ts = rec.timestamp
        off = self.base_offset + index if self.base_offset >= 0 else -1
        return _new_tuple(RecordMetadata, (self.topic, self.partition, off, ts))


def _wait(future: Any, timeout: Optional[float]) -> None:
    b = future._batch
    if b.done:
        return
    sched = b.owner.scheduler
    if not sched.simulated and sched.on_loop():
        raise InvalidConfigurationError(
            f"{b.topic}-{b.partition}: waiting for a record inside a producer callback would wait forever")
    if sched.simulated:
        b.owner._wake()
        sched.wait_until(lambda: b.done, None if timeout is None else int(timeout * 1000))
    else:
        b.wait(timeout)
    if not b.done:
        raise RequestTimedOutError(
            f"{b.topic}-{b.partition}: no acknowledgement within {timeout} s (the record may still be written)")


def _leaf(b: ProducerBatch, index: int) -> Any:
    """The batch that carried record ``index`` of ``b`` (``b`` itself unless it was split), and its index there."""
    while b.children is not None and b.error is None:
        for ch in reversed(b.children):
            if index >= ch.parent_start:
                b, index = ch, index - ch.parent_start
                break
    return b, index


def _result(future: Any, timeout: Optional[float] = None) -> RecordMetadata:
    """Block until the record is acknowledged; raise its error if it failed."""
    b = future._batch
    if not b.done:
        _wait(future, timeout)
    if b.error is not None:
        raise b.error
    b, index = _leaf(b, future._index)
    if b.error is not None:
        raise b.error
    return b.metadata(index)


def _exception(future: Any, timeout: Optional[float] = None) -> Optional[BaseException]:
    """The error the record failed with (None if it succeeded); waits like ``result``."""
    _wait(future, timeout)
    return _leaf(future._batch, future._index)[0].error


def _add_done_callback(future: Any, fn: Callable[[Any], None]) -> None:
    """``fn(future)`` on the producer's loop thread once the record is done, or at once if it is."""
    b = future._batch
    with b.owner._lock:
        if not b.done:
            if b.callbacks is None:
                b.callbacks = []
            b.callbacks.append(lambda: fn(future))
            return
    fn(future)


def _repr(future: Any) -> str:
    return f"FutureRecordMetadata({future._batch!r}, index={future._index})"


class _PyFutureRecordMetadata(_PyRecordFuture):
    """The future of one sent record: ``result()`` gives its :class:`RecordMetadata`.

    Built as ``FutureRecordMetadata(batch, index)``; two references, so a send
    costs one small allocation. Also ``get(timeout)`` (kafka-python's name),
    ``done()``, ``exception()``, ``add_done_callback(fn)`` (``fn(future)``, run
    on the producer's loop thread, or at once if already done).

    With the C send path built, ``FutureRecordMetadata`` is the C type
    ``RecordFuture`` (sendpath.c) instead, whose methods call the same
    functions; this class is its pure-Python twin.
    """

    __slots__ = ()

    def done(self) -> bool:
        return bool(self._batch.done)

    result = _result
    get = _result
    exception = _exception
    add_done_callback = _add_done_callback
    __repr__ = _repr


if _RecordFutureBase is _PyRecordFuture:  # pragma: no cover - only without a build of sendpath.c
    FutureRecordMetadata: Any = _PyFutureRecordMetadata
else:
    FutureRecordMetadata = _RecordFutureBase
    from pylog._native._sendpath import bind_future

    bind_future(_result, _exception, _add_done_callback, _repr, RecordMetadata)


class SequenceState(enum.Enum):
    """Whether an idempotent partition may number new batches (KIP-360; Kafka's ``TxnPartitionEntry``).

    ``GAP`` says more than ``UNRESOLVED`` and wins over it until the partition is resolved
    (``Producer._maybe_resolve``), which returns it to ``OK``.
    """

    #: every numbered batch's outcome is known (or still pending): new batches take the next sequences
    OK = "ok"
    #: a numbered batch failed to the caller with an unknown outcome (it may be in the log)
    UNRESOLVED = "unresolved"
    #: the leader refused a numbered batch: it and every later batch of the identity are not in the log
    GAP = "gap"


class PartitionState:
    """Per partition (Kafka's ``RecordAccumulator`` deque and ``TxnPartitionEntry``): the open batch,
    closed batches waiting, requests in flight, retries, and the idempotent sequence numbers.

    The C send path reads ``open`` (the batch a record joins); everything else is the producer's,
    changed under its lock.
    """

    __slots__ = ("topic", "partition", "open", "queue", "inflight", "retry", "retry_mode", "backoff_until",
                 "next_seq", "seq_id", "acked_next", "sequences")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.open: Optional[ProducerBatch] = None
        self.queue: Deque[ProducerBatch] = deque()  # closed, not in flight; retries go first
        self.inflight: List[ProducerBatch] = []
        self.retry: List[ProducerBatch] = []  # failed, waiting for the in-flight ones to settle
        self.retry_mode = False
        self.backoff_until = 0
        self.next_seq = 0
        #: the (producer id, epoch) next_seq counts for; None: the next new batch starts at sequence 0
        #: under the producer's current identity
        self.seq_id: Optional[Tuple[int, int]] = None
        self.acked_next = 0  # the sequence after the last acknowledged batch of seq_id
        #: KIP-360: whether new batches may take sequences (see SequenceState)
        self.sequences = SequenceState.OK


def failed_future(owner: Any, topic: str, partition: int, error: PylogError) -> FutureRecordMetadata:
    """A future that already failed with ``error`` (a send refused before it was queued)."""
    b = ProducerBatch(owner, topic, partition, 0, 0, -1)
    b.open = False
    b.records.append(None)
    b.error = error
    b.done = True
    return FutureRecordMetadata(b, 0)


__all__ = ["RecordMetadata", "ProducerBatch", "FutureRecordMetadata", "PartitionState", "SequenceState", "failed_future"]
