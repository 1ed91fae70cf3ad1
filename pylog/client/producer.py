"""The producer: batching, ``acks``, retries, ordering, compression and idempotence (Kafka's ``KafkaProducer``).

>>> # with cluster.producer(acks="all") as p:
>>> #     meta = p.send("orders", b"v", key=b"k").result()   # meta.topic, .partition, .offset, .timestamp

``send`` does not wait: it appends the record to its partition's open
:class:`~pylog.client.accumulator.ProducerBatch` under one lock and returns a
future. The batch is sent when it reaches ``batch_size`` bytes, when
``linger_ms`` has passed since its first record, or on :meth:`flush` /
:meth:`close`; with ``linger_ms=0`` (the default, Kafka 3's) it goes as soon as
the partition can take another request, and whatever arrives while requests
are in flight fills the next batch. The loop thread is woken once per batch,
never per record.

Partitioning (Kafka's default partitioner, :mod:`pylog.client.partitioner`):
``partition`` if given; else murmur2 of the key modulo the partition count
(the Java client's choice for the same key); else the topic's sticky
partition (KIP-480), which moves at random when its batch is full or sent.

Delivery: every batch is retried on a retriable error (NotLeader,
NotEnoughReplicas, timeouts, ...) after ``retry_backoff_ms``, with the
leader re-read from the cluster metadata, until ``delivery_timeout_ms`` after
its creation. At most ``max_in_flight`` requests per partition are
outstanding; after a failure the partition resends one batch at a time, in
order, until everything that was in flight is acknowledged, so records of a
partition are written in ``send`` order.

Idempotence (``enable_idempotence``, on by default with ``acks="all"``, as in
Kafka 3): the producer gets a producer id (InitProducerId) and numbers the
records of each partition from 0; each batch carries its base sequence and
is resent byte for byte, and the leader answers a retry of one of its last 5
batches with the original offsets instead of writing it again. So a retry
after a lost acknowledgement, a timeout or a leader failover writes nothing
twice. A batch keeps its producer id, epoch and sequence for every retry and
is never re-sent under another identity while it may be in the log; when a
partition's sequences cannot be resolved the epoch is bumped once nothing of
the partition is in flight (KIP-360, :meth:`Producer._maybe_resolve`). A batch
over the topic's ``max_message_bytes`` is split and its halves resent. Without
idempotence a retry can duplicate records. See docs/producer.md.

Thread-safety: ``send``, ``flush``, ``close`` and ``metrics`` may be called
from any thread; everything else runs on the cluster's scheduler loop.
Durability: what ``acks`` promises (docs/producer.md): 0 nothing, 1 the
leader's page cache, all every in-sync replica's page cache.
"""
from __future__ import annotations

import inspect
import random
import threading
from collections import deque
from functools import partial
from typing import Any, Deque, Dict, List, Optional, Sequence, Set, Tuple

from pylog.client._node import ClientNode, error_from
from pylog.client.accumulator import FutureRecordMetadata, ProducerBatch, RecordMetadata, failed_future
from pylog.client.partitioner import StickyPartitioner, murmur2
from pylog.client.types import check_serializer, serialize
from pylog.errors import (
    BufferExhaustedError,
    CorruptRecordError,
    InvalidProducerEpochError,
    NotEnoughReplicasError,
    InvalidConfigurationError,
    InvalidRecordError,
    LeaderNotAvailableError,
    OutOfOrderSequenceError,
    ProducerClosedError,
    PylogError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pylog.replication.messages import NO_LEADER, InitProducerIdRequest, ProduceRequest
from pylog.record import compression as codecs
from pylog.record import Record, encode_batch, encode_values_batch

try:  # the per-record hot path in C (sendpath.c); the pure-Python closure is the fallback
    from pylog._native._sendpath import Lock as _Lock
    from pylog._native._sendpath import SendPath as _SendPath
except ImportError:  # pragma: no cover - only without a build of sendpath.c
    _SendPath = None
    _Lock = threading.Lock

_ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}
_RECORD_OVERHEAD = 16  # estimated bytes a record adds besides key and value (varints, attributes), on the high side
_KEY_CACHE_MAX = 65_536
#: answers proving the leader did not append the attempt (checked before the append); any other outcome of
#: an attempt - no answer, a lost connection, NotLeader (which a leader also gives a produce it appended and
#: then stopped leading), NotEnoughReplicasAfterAppend - means it may be in the log
_REFUSALS = (OutOfOrderSequenceError, InvalidProducerEpochError, NotEnoughReplicasError, RecordTooLargeError,
             InvalidRecordError, CorruptRecordError, LeaderNotAvailableError, UnknownTopicOrPartitionError)
_MAX_EPOCH = 32_766  # a producer epoch is an int16; past this a new producer id is taken


def _seq_before(a: int, b: int) -> bool:
    """Sequence ``a`` comes before ``b`` (sequences wrap from 2**31-1 to 0)."""
    return a != b and ((b - a) & 0x7FFFFFFF) < 0x40000000


def _unnumber(b: ProducerBatch) -> None:
    """Forget ``b``'s identity and sequence: it is numbered again (and re-encoded) when next drained.
    Only for a batch no attempt of which may have been appended (``maybe_written`` False)."""
    assert not b.maybe_written, b
    b.producer_id, b.producer_epoch, b.sequence, b.data = -1, -1, -1, None


def _resend_order(b: ProducerBatch) -> Tuple[bool, int]:
    """Numbered batches first, by sequence; then the others in the order they were created."""
    return (b.sequence < 0, b.sequence if b.sequence >= 0 else b.order)


def _sequenced_pending(ps: "_PartitionState") -> bool:
    """Some numbered batch of ``ps`` is in flight or waiting for its retry (under the lock)."""
    return bool(ps.inflight) or any(x.sequence >= 0 for x in ps.retry) or any(x.sequence >= 0 for x in ps.queue)


class _RoomWaiter:
    """A ``send()`` blocked until ``need`` bytes of buffer_memory are free; ``wake`` is a condition
    on the producer's lock, notified when it is this waiter's turn (or on close)."""

    __slots__ = ("need", "wake")

    def __init__(self, need: int, wake: threading.Condition) -> None:
        self.need = need
        self.wake = wake


class _PartitionState:
    """Per partition: the open batch, closed batches waiting, requests in flight, sequence numbers."""

    __slots__ = ("topic", "partition", "open", "queue", "inflight", "retry", "retry_mode", "backoff_until",
                 "next_seq", "seq_id", "acked_next", "unresolved", "gap")

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
        #: KIP-360: a sequenced batch failed to the caller with an unknown outcome (it may be in the log)
        self.unresolved = False
        #: the leader refused a sequenced batch: it and every later batch of seq_id are not in the log
        self.gap = False


def _check_headers(headers: Any) -> Tuple[Tuple[str, Optional[bytes]], ...]:
    """``headers`` as a tuple of ``(str, bytes | None)`` pairs, or InvalidRecordError naming what is wrong."""
    if isinstance(headers, (str, bytes, bytearray, memoryview, dict)):
        raise InvalidRecordError(f"headers must be a list of (str, bytes) pairs, not {type(headers).__name__}")
    try:
        pairs = tuple(headers)
    except TypeError:
        raise InvalidRecordError(f"headers must be a list of (str, bytes) pairs, not {type(headers).__name__}") from None
    for i, h in enumerate(pairs):
        if not isinstance(h, (tuple, list)) or len(h) != 2 or not isinstance(h[0], str) or not (
                h[1] is None or isinstance(h[1], (bytes, bytearray, memoryview))):
            raise InvalidRecordError(f"header {i} must be a (str, bytes or None) pair, got {h!r:.60}")
    return pairs


class Producer:
    """Sends records to the partition leaders of a :class:`pylog.Cluster` (Kafka's ``KafkaProducer``).

    Settings (Kafka's names in snake_case, Kafka's defaults unless noted):

    * ``acks`` - 0, 1 or ``"all"`` (default);
    * ``batch_size`` - bytes per batch (16384); ``linger_ms`` (0);
    * ``compression_type`` - none, gzip, snappy, lz4, zstd; ``compression_level`` (KIP-390) - None for
      Kafka's default per codec (gzip 6, lz4 9 = LZ4's fast compressor, zstd 3; ranges gzip 1-9, lz4 1-17,
      zstd -131072-22; ignored for snappy), see :func:`pylog.record.compression.compress`;
    * ``max_in_flight`` - requests per partition (5; at most 5 with idempotence);
    * ``retry_backoff_ms`` (100), ``request_timeout_ms`` (30000), ``delivery_timeout_ms`` (120000),
      ``retries`` (2**31-1: in effect, retry until the delivery timeout);
    * ``enable_idempotence`` - default True when ``acks="all"`` (Kafka 3); True with acks 0/1 is an error;
    * ``buffer_memory`` - bytes of records waiting to be acknowledged (33554432): each open or
      unacknowledged batch holds ``batch_size`` of it (a larger record, its own size), as in Kafka's
      BufferPool; ``max_block_ms`` (60000) - how long ``send`` blocks for room before it raises
      :class:`~pylog.errors.BufferExhaustedError`. A record larger than ``buffer_memory`` raises
      :class:`~pylog.errors.RecordTooLargeError` at once; ``send`` on the cluster's loop thread (in a
      callback) never blocks: it raises at once when there is no room;
    * ``key_serializer``/``value_serializer`` - callables ``f(obj) -> bytes`` (or kafka-python
      Serializer objects) applied by ``send`` to a non-None key/value; a failure raises
      :class:`~pylog.errors.SerializationError` (docs/kafka-python-idioms.md).

    Bad arguments raise :class:`InvalidConfigurationError` naming the parameter:
    an unknown keyword (listing the known ones), a wrong type (``bool`` is not
    an int) or an out-of-range value.

    Complexity: ``send`` is O(1) (plus murmur2 of a new key); a batch costs one
    encode, one request and O(1) completion. Thread-safety: see the module docstring.
    """

    def __init__(self, cluster: Any, *, acks: Any = "all", batch_size: int = 16384, linger_ms: int = 0,
                 compression_type: Optional[str] = None, max_in_flight: int = 5, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 30_000, delivery_timeout_ms: int = 120_000,
                 enable_idempotence: Optional[bool] = None, idempotence: Optional[bool] = None,
                 transactional_id: Optional[str] = None, retries: int = 2**31 - 1,
                 buffer_memory: int = 33_554_432, max_block_ms: int = 60_000,
                 key_serializer: Any = None, value_serializer: Any = None,
                 compression_level: Optional[int] = None, **unknown: Any):
        if unknown:
            hint = (" (bootstrap_servers: an in-process producer writes to its cluster directly; drop it)"
                    if "bootstrap_servers" in unknown else "")
            raise InvalidConfigurationError(
                f"unknown producer option(s) {sorted(unknown)}{hint}; known options: {sorted(_PRODUCER_OPTIONS)}")
        key_ser = check_serializer("key_serializer", key_serializer)
        value_ser = check_serializer("value_serializer", value_serializer)
        if isinstance(acks, bool) or not isinstance(acks, (int, str)) or acks not in _ACKS:
            raise InvalidConfigurationError(f"acks must be 0, 1 or 'all', got {acks!r}")
        if transactional_id is not None:
            raise InvalidConfigurationError("transactional_id: transactions are not implemented yet")
        for name, v, lo in (("batch_size", batch_size, 1), ("linger_ms", linger_ms, 0), ("max_in_flight", max_in_flight, 1),
                            ("retry_backoff_ms", retry_backoff_ms, 0), ("request_timeout_ms", request_timeout_ms, 1),
                            ("delivery_timeout_ms", delivery_timeout_ms, 1), ("retries", retries, 0),
                            ("buffer_memory", buffer_memory, 1), ("max_block_ms", max_block_ms, 0)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise InvalidConfigurationError(f"{name} must be an int >= {lo}, got {v!r}")
        if batch_size > buffer_memory:
            raise InvalidConfigurationError(f"batch_size ({batch_size}) must not exceed buffer_memory ({buffer_memory}): "
                                            "every batch holds batch_size bytes of the buffer")
        for name, flag in (("enable_idempotence", enable_idempotence), ("idempotence", idempotence)):
            if flag is not None and not isinstance(flag, bool):
                raise InvalidConfigurationError(f"{name} must be a bool or None, got {flag!r}")
        self.acks = _ACKS[acks]
        if idempotence is not None and enable_idempotence is None:
            enable_idempotence = idempotence
        if enable_idempotence is None:
            enable_idempotence = self.acks == -1 and max_in_flight <= 5
        elif enable_idempotence:
            if self.acks != -1:
                raise InvalidConfigurationError(f"enable_idempotence needs acks='all', got acks={acks!r}")
            if max_in_flight > 5:
                raise InvalidConfigurationError(f"enable_idempotence needs max_in_flight <= 5, got {max_in_flight}")
        self.enable_idempotence = bool(enable_idempotence)
        try:
            self.compression = codecs.codec_id(compression_type)
        except InvalidConfigurationError as exc:
            raise InvalidConfigurationError(f"compression_type: {exc}") from None
        self.compression_level = codecs.check_level(self.compression, compression_level)
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.max_in_flight = max_in_flight
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.max_retries = retries
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.cluster = cluster
        self.scheduler = cluster.scheduler
        self._realtime = not self.scheduler.simulated
        self._store = cluster.store
        self._lock = _Lock()  # like threading.Lock; the C send path takes it without a method call
        # Senders blocked for buffer_memory, first come first served (Kafka's BufferPool waiters; under _lock).
        self._room_queue: Deque[_RoomWaiter] = deque()
        # A completion wakes the head only once this much more than it needs is free: one wake-up per
        # several completed batches, not one per batch (measured: docs/producer.md "buffer_memory").
        self._room_slack = max(buffer_memory // 4, batch_size)
        self._reserved = 0  # bytes of buffer_memory held by open and unacknowledged batches (under _lock)
        self.buffer_waits = 0  # times a send() blocked for room (Kafka's bufferpool-wait; under _lock)
        self.buffer_wait_seconds = 0.0  # wall time send() spent blocked for room (under _lock)
        self._node: ClientNode = self.scheduler.run_sync(
            lambda: ClientNode("producer", cluster.scheduler, cluster.transport))
        self._node.on_close.append(self._on_node_closed)
        self._parts: Dict[str, List[_PartitionState]] = {}
        self._sticky: Dict[str, ProducerBatch] = {}  # topic -> open batch records without a key join
        self._sticky_part = StickyPartitioner(random.Random(self.scheduler.rng.getrandbits(64)))
        self._key_hash: Dict[bytes, int] = {}
        self._incomplete: Set[ProducerBatch] = set()
        # An insertion-ordered set (dict keys): partitions hash by identity, so iterating a
        # set would follow heap addresses and a seeded simulation would not replay exactly.
        self._dirty: Dict[_PartitionState, None] = {}
        self._wake_pending = False
        self._order = 0
        self._closed = False
        self._flushing = 0
        # idempotence (loop thread)
        self.producer_id = -1
        self.producer_epoch = -1
        self._pid_inflight = False
        self._pid_broker = 0
        self.epoch_bumps = 0  # KIP-360 epoch bumps (a partition's sequences could not be resolved)
        # metrics (loop thread)
        self.records_sent = 0
        self.bytes_sent = 0
        self.record_errors = 0
        self.retries = 0
        self.batches_sent = 0
        from pylog.metrics import Histogram

        #: seconds from a batch's first send() to its acknowledgement (the oldest record's send -> ack)
        self.send_latency = Histogram()
        self.send = self._make_fast_send()  # type: ignore[method-assign]
        if key_ser is not None or value_ser is not None:
            self.send = self._make_serializing_send(self.send, key_ser, value_ser)  # type: ignore[method-assign]

    def _make_serializing_send(self, inner: Any, key_ser: Any, value_ser: Any) -> Any:
        """``send`` that runs ``key_serializer``/``value_serializer`` first (a None key or value is sent as
        null without calling them, as Kafka's built-in serializers map null to null), then ``inner``."""
        def send(topic: str, value: Any = None, key: Any = None, partition: Optional[int] = None,
                 headers: Optional[Sequence[Tuple[str, Optional[bytes]]]] = None,
                 timestamp: Optional[int] = None) -> FutureRecordMetadata:
            if value is not None and value_ser is not None:
                value = serialize(value_ser, value, "value_serializer", topic)
            if key is not None and key_ser is not None:
                key = serialize(key_ser, key, "key_serializer", topic)
            return inner(topic, value, key, partition, headers, timestamp)

        send.__doc__ = Producer.send.__doc__
        return send

    def partitions_for(self, topic: str) -> Optional[Set[int]]:
        """The partition numbers of ``topic`` (None when it does not exist), as kafka-python's ``partitions_for``."""
        cfg = self._store.topics.get(topic)
        return None if cfg is None else set(range(cfg.partitions))

    # ------------------------------------------------------------------ send
    def send(self, topic: str, value: Optional[bytes], key: Optional[bytes] = None,
             partition: Optional[int] = None, headers: Optional[Sequence[Tuple[str, Optional[bytes]]]] = None,
             timestamp: Optional[int] = None) -> FutureRecordMetadata:
        """Queue one record; returns a future of its :class:`RecordMetadata`.

        Does not wait unless ``buffer_memory`` is full: then it blocks up to
        ``max_block_ms`` for room and raises BufferExhaustedError. Raises
        ProducerClosedError after close(). Errors found later - unknown topic
        or partition, a record too large, delivery timeout - are raised by
        ``result()``.
        A record without ``timestamp`` gets the time its batch is sent.
        """
        return self._send_slow(topic, value, key, partition, headers, timestamp)

    def _make_fast_send(self) -> Any:
        """Build ``send``: the C send path (``pylog._native._sendpath``, sendpath.c) when it is built,
        else :meth:`_make_py_send`. Both take the fast case (a bytes value; no key, headers or
        timestamp; an open batch) under the lock and hand everything else to :meth:`_send_slow`; the C
        path also takes a bytes key with a bytes or null value (the partition from murmur2 of the key,
        as :meth:`_send_slow` computes it)."""
        if _SendPath is None:
            return self._make_py_send()
        return _SendPath(self._lock, self._sticky, self._parts, self.batch_size, _RECORD_OVERHEAD,
                         self._send_slow, self._batch_full, FutureRecordMetadata, Record(None)).send

    def _make_py_send(self) -> Any:
        """Build ``send`` as a closure: the hot path (no key, partition, headers or timestamp; a bytes
        value) reads its state from cells instead of attributes - a measurable share of a ~1 us call."""
        lock = self._lock
        acquire, release = lock.acquire, lock.release
        sticky_get = self._sticky.get
        parts_get = self._parts.get
        batch_size = self.batch_size
        overhead = _RECORD_OVERHEAD
        slow = self._send_slow
        batch_full = self._batch_full
        future = FutureRecordMetadata
        bytes_ = bytes

        def send(topic: str, value: Optional[bytes], key: Optional[bytes] = None, partition: Optional[int] = None,
                 headers: Optional[Sequence[Tuple[str, Optional[bytes]]]] = None,
                 timestamp: Optional[int] = None) -> FutureRecordMetadata:
            if key is None and headers is None and timestamp is None and type(value) is bytes_:
                if partition is None:
                    acquire()
                    b = sticky_get(topic)
                else:
                    parts = parts_get(topic)
                    if parts is None or type(partition) is not int or not 0 <= partition < len(parts):
                        return slow(topic, value, key, partition, headers, timestamp)
                    acquire()
                    b = parts[partition].open
                if b is not None:  # open: _close_open() takes a batch out of both maps
                    recs = b.records
                    i = len(recs)
                    recs.append(value)
                    size = b.size = b.size + len(value) + overhead
                    if size < batch_size:
                        release()
                        return future(b, i)
                    try:
                        batch_full(b)
                    finally:
                        release()
                    return future(b, i)
                release()
            return slow(topic, value, key, partition, headers, timestamp)

        send.__doc__ = Producer.send.__doc__
        return send

    def _send_slow(self, topic: str, value: Any, key: Any, partition: Optional[int], headers: Any,
                   timestamp: Optional[int]) -> FutureRecordMetadata:
        if self._closed:
            raise ProducerClosedError("send() after the producer was closed")
        if value is not None and type(value) is not bytes:
            if not isinstance(value, (bytearray, memoryview)):
                raise InvalidRecordError(f"value must be bytes, bytearray, memoryview or None, not {type(value).__name__}")
            value = bytes(value)
        if key is not None and type(key) is not bytes:
            if not isinstance(key, (bytearray, memoryview)):
                raise InvalidRecordError(f"key must be bytes, bytearray, memoryview or None, not {type(key).__name__}")
            key = bytes(key)
        if timestamp is not None and (not isinstance(timestamp, int) or isinstance(timestamp, bool)):
            raise InvalidRecordError(f"timestamp must be an int (ms), not {type(timestamp).__name__}")
        if headers is not None:
            headers = _check_headers(headers)
        parts = self._parts.get(topic)
        cfg = self._store.topics.get(topic)  # the metadata: a deleted topic is refused, new partitions seen
        if cfg is None:
            return failed_future(self, topic, -1 if partition is None else partition,
                                 UnknownTopicOrPartitionError(f"unknown topic {topic!r}"))
        if parts is None:
            with self._lock:
                parts = self._parts.setdefault(topic, [_PartitionState(topic, p) for p in range(cfg.partitions)])
        if cfg.partitions > len(parts):
            self._refresh_partitions(topic)
        n = len(parts)
        if partition is not None:
            if not isinstance(partition, int) or not 0 <= partition < n:
                return failed_future(self, topic, partition if isinstance(partition, int) else -1,
                                     UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}"))
        elif key is not None:
            h = self._key_hash.get(key)
            if h is None:
                if len(self._key_hash) >= _KEY_CACHE_MAX:
                    self._key_hash.clear()
                h = self._key_hash[key] = murmur2(key) & 0x7FFFFFFF
            partition = h % n
        if key is None and not headers and timestamp is None:
            item: Any = value
        else:
            item = Record(value=value, key=key, headers=tuple(headers or ()), timestamp=timestamp)
        size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0) + _RECORD_OVERHEAD
        if headers:
            size += sum(len(k) + len(v or b"") + 2 for k, v in headers)
        reserve = max(self.batch_size, size + 61)  # what a new batch for this record holds of buffer_memory
        if reserve > self.buffer_memory:
            raise RecordTooLargeError(f"a record of {size} bytes for topic {topic!r} is larger than the producer's "
                                      f"buffer_memory={self.buffer_memory}")
        sticky = partition is None
        with self._lock:
            if self._closed:
                raise ProducerClosedError("send() after the producer was closed")
            part = self._sticky_part.partition(topic, n) if sticky else partition
            ps = parts[part]  # type: ignore[index]
            b = ps.open
            if b is None and (self._room_queue or self._reserved + reserve > self.buffer_memory):
                ps, b = self._wait_for_room(topic, parts, partition, reserve)
            if b is None:
                b = self._new_batch(ps, reserve)
            if sticky:
                self._sticky[topic] = b
            i = len(b.records)
            b.records.append(item)
            if type(item) is not bytes:
                b.plain = False
            b.size += size
            if b.size >= self.batch_size:
                self._batch_full(b)
            return FutureRecordMetadata(b, i)

    def _wait_for_room(self, topic: str, parts: List[_PartitionState], partition: Optional[int],
                       reserve: int) -> Tuple[_PartitionState, Optional[ProducerBatch]]:
        """Block (under the lock, which waiting releases) until this send may go on: the partition
        it picks has an open batch to join, or ``reserve`` bytes of buffer_memory are free and no
        earlier sender still waits for room. Returns the partition's state and its open batch (None:
        the caller opens one). Raises BufferExhaustedError after ``max_block_ms`` without room (with
        room at that point it goes on even out of turn), ProducerClosedError on close().

        Fairness (Kafka's BufferPool): waiting senders queue first come first served; a sender that
        finds room while others wait queues behind them; a completed batch wakes only the head,
        and only once ``reserve`` plus ``_room_slack`` bytes are free, and the head passes the turn
        on when it leaves. Thread-safety: called with ``_lock`` held, returns with it held.
        Complexity: O(waiting senders) to leave the queue.
        """
        import time

        queue = self._room_queue
        sticky = partition is None
        deadline: Optional[float] = None
        me: Optional[_RoomWaiter] = None
        try:
            while True:
                if self._closed:
                    raise ProducerClosedError("send() after the producer was closed")
                part = self._sticky_part.partition(topic, len(parts)) if sticky else partition
                ps = parts[part]  # type: ignore[index]
                if ps.open is not None:
                    return ps, ps.open
                room = self._reserved + reserve <= self.buffer_memory
                if room and (not queue or queue[0] is me):
                    return ps, None
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.max_block_ms / 1000.0
                on_loop = self._realtime and self.scheduler.on_loop()
                if now >= deadline or on_loop or self._node.closed:
                    if room and not on_loop:
                        return ps, None  # max_block_ms is up and the room is there: go on out of turn
                    raise BufferExhaustedError(
                        f"{topic}-{part}: no room for a new batch of {reserve} bytes in buffer_memory="
                        f"{self.buffer_memory} ({self._reserved} bytes held by {len(self._incomplete)} "
                        f"unacknowledged batches)" + (" after waiting max_block_ms=%d" % self.max_block_ms
                                                      if not on_loop else
                                                      "; send() in a producer callback cannot wait for room"))
                if self._realtime:
                    if me is None:
                        me = _RoomWaiter(reserve, threading.Condition(self._lock))
                        queue.append(me)
                    self.buffer_waits += 1
                    me.wake.wait(deadline - now)
                    self.buffer_wait_seconds += time.monotonic() - now
                    continue
                # Simulated: one thread, virtual time runs on it, so let go of the lock while it runs.
                self.buffer_waits += 1
                self._wake_locked()
                self._lock.release()
                try:
                    want = self.buffer_memory - reserve
                    done = self.scheduler.wait_until(lambda: self._reserved <= want or self._closed,
                                                     self.max_block_ms)
                finally:
                    self._lock.acquire()
                if not done and self._reserved > want:
                    deadline = now  # virtual time passed max_block_ms: the next round raises
        finally:
            if me is not None:
                queue.remove(me)
                self._wake_head(0)  # the next sender's turn, if its room is there now

    def _wake_head(self, slack: int) -> None:
        """Wake the first waiting sender if its reservation plus ``slack`` bytes fits (under the lock).

        The slack is capped so that an empty buffer always wakes it. O(1).
        """
        head = self._room_queue[0] if self._room_queue else None
        if head is not None and self._reserved + head.need + min(slack, self.buffer_memory - head.need) \
                <= self.buffer_memory:
            head.wake.notify()

    def _new_batch(self, ps: _PartitionState, reserve: int) -> ProducerBatch:
        """Open a batch for ``ps`` holding ``reserve`` bytes of buffer_memory (under the lock)."""
        now = self.scheduler.clock.now_ms()
        self._order += 1
        b = ProducerBatch(self, ps.topic, ps.partition, now, now + self.delivery_timeout_ms, self._order)
        b.reserved = reserve
        self._reserved += reserve
        ps.open = b
        self._incomplete.add(b)
        if self.linger_ms > 0 and not self._flushing:
            self.scheduler.call_later(self.linger_ms, self._on_linger, ps)
        else:
            self._dirty[ps] = None
            self._wake_locked()
        return b

    def _give_back(self, reserved: int) -> None:
        """A batch completed: its share of buffer_memory is free again (under the lock)."""
        self._reserved -= reserved
        if self._room_queue:
            self._wake_head(self._room_slack)

    def _wake_all_waiters(self) -> None:
        """Wake every sender waiting for room, to see the producer closed (under the lock)."""
        for waiter in self._room_queue:
            waiter.wake.notify()

    def _batch_full(self, b: ProducerBatch) -> None:
        """Close a full batch (under the lock) and hand it to the loop."""
        ps = self._parts[b.topic][b.partition]
        self._close_open(ps)
        ps.queue.append(b)
        self._dirty[ps] = None
        self._wake_locked()

    def _close_open(self, ps: _PartitionState) -> Optional[ProducerBatch]:
        """Stop ``ps``'s open batch taking records; move the sticky partition off it (KIP-480)."""
        b = ps.open
        if b is None:
            return None
        b.open = False
        ps.open = None
        if self._sticky.get(ps.topic) is b:
            del self._sticky[ps.topic]
            self._sticky_part.next_partition(ps.topic, len(self._parts[ps.topic]), ps.partition)
        return b

    def _wake_locked(self) -> None:
        if not self._wake_pending:
            self._wake_pending = True
            self.scheduler.call_soon(self._run)

    def _wake(self) -> None:
        with self._lock:
            self._wake_locked()

    def _on_linger(self, ps: _PartitionState) -> None:
        with self._lock:
            self._dirty[ps] = None
        self._run()

    # ---------------------------------------------------------------- sender
    def _run(self) -> None:
        """Loop thread: send every batch that is ready and may go (once per wake-up, not per record)."""
        now = self.scheduler.clock.now_ms()
        expired: List[ProducerBatch] = []
        to_send: List[Tuple[_PartitionState, ProducerBatch]] = []
        need_pid = False
        with self._lock:
            self._wake_pending = False
            dirty, self._dirty = self._dirty, {}
            for ps in dirty:
                self._drain(ps, now, to_send, expired, dirty)
            if self.enable_idempotence and self.producer_id < 0 and any(ps.open or ps.queue for ps in dirty):
                need_pid = True
        for b in expired:
            last = b.last_error
            self._fail(b, RequestTimedOutError(
                f"{b.topic}-{b.partition}: delivery timed out ({self.delivery_timeout_ms} ms since the batch was "
                f"created; {len(b.records)} records)"
                + (f"; last error: {type(last).__name__}: {last}" if last is not None else "")))
        for ps, b in to_send:
            self._send_batch(ps, b)
        if need_pid:
            self._init_producer_id()

    def _drain(self, ps: _PartitionState, now: int, to_send: List[Tuple[_PartitionState, ProducerBatch]],
               expired: List[ProducerBatch], dirty: Dict[_PartitionState, None]) -> None:
        """Pick ``ps``'s batches that may be sent now (under the lock)."""
        while ps.queue and now >= ps.queue[0].deadline_ms and ps.queue[0].sequence < 0:
            expired.append(ps.queue.popleft())
        if ps.open is not None and now >= ps.open.deadline_ms:
            expired.append(self._close_open(ps))  # type: ignore[arg-type]
        if self._closed and self._node.closed:
            return
        if ps.backoff_until > now:
            self.scheduler.call_later(ps.backoff_until - now, self._on_linger, ps)
            return
        idem = self.enable_idempotence
        if idem and (ps.unresolved or ps.gap):
            self._maybe_resolve(ps)
        if idem and self.producer_id < 0:
            self._dirty[ps] = None  # sent once the producer id arrives
            return
        while True:
            if ps.retry_mode:
                if ps.inflight or ps.retry:
                    break
            elif len(ps.inflight) >= self.max_in_flight:
                break
            if ps.queue:
                b = ps.queue[0]
            elif ps.open is not None and (self.linger_ms == 0 or self._flushing or self._closed
                                          or now - ps.open.created_ms >= self.linger_ms):
                b = ps.open
            else:
                break  # an open batch still lingering: its timer (set when it opened) comes back
            if idem and b.sequence < 0:
                if ps.unresolved or ps.gap:
                    break  # KIP-360: no new sequence while earlier ones are unresolved (_maybe_resolve)
                cur = (self.producer_id, self.producer_epoch)
                if ps.seq_id != cur:
                    if _sequenced_pending(ps):
                        break  # a new identity starts once the old one's batches are settled
                    ps.seq_id, ps.next_seq, ps.acked_next = cur, 0, 0
            if b is ps.open:
                self._close_open(ps)
            else:
                ps.queue.popleft()
            if idem and b.sequence < 0:
                b.producer_id, b.producer_epoch, b.sequence = self.producer_id, self.producer_epoch, ps.next_seq
                ps.next_seq = (ps.next_seq + len(b.records)) & 0x7FFFFFFF
            ps.inflight.append(b)
            to_send.append((ps, b))

    def _refresh_partitions(self, topic: str) -> None:
        """The topic gained partitions (``create_partitions``): extend the cached list in place (the
        send paths, C included, read it from ``_parts``), so partitioners spread over them too."""
        cfg = self._store.topics.get(topic)
        with self._lock:
            parts = self._parts.get(topic)
            if cfg is not None and parts is not None and cfg.partitions > len(parts):
                parts.extend(_PartitionState(topic, p) for p in range(len(parts), cfg.partitions))

    def _send_batch(self, ps: _PartitionState, b: ProducerBatch) -> None:
        """Loop thread: encode (first time) and send one batch to the partition's leader."""
        topic, p = b.topic, b.partition
        if self._node.closed:
            self._fail(b, self._closed_error())
            return
        cfg = self._store.topics.get(topic)
        if cfg is None or p >= cfg.partitions:  # deleted (or re-created smaller) while the batch waited
            self._settle(ps, b)
            self._fail(b, UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist (deleted?)" if cfg is None else
                f"topic {topic!r} has no partition {p} now (deleted and re-created with {cfg.partitions}); "
                "make a new producer for the re-created topic"))
            return
        if cfg.partitions > len(self._parts.get(topic, ())):
            self._refresh_partitions(topic)
        now = self.scheduler.clock.now_ms()
        if b.data is None:
            try:
                if b.plain and self.compression == codecs.NONE:
                    b.data = encode_values_batch(b.records, now, b.producer_id, b.producer_epoch, b.sequence)
                else:
                    b.data = encode_batch(b.records, now_ms=now, compression=self.compression,
                                          compression_level=self.compression_level,
                                          producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                                          base_sequence=b.sequence, plain=b.plain)
            except PylogError as exc:
                self._sequence_failed(ps, b, written=False)
                self._settle(ps, b)
                self._fail(b, exc)
                return
            b.timestamp = now
        st = self._store.partitions.get((topic, p))
        b.attempts += 1
        if st is None or st.leader == NO_LEADER:
            self._on_failure(ps, b, LeaderNotAvailableError(f"{topic}-{p} has no leader"))
            return
        leader = st.leader
        node = self._node
        req = ProduceRequest(topic, p, b.data, self.acks, self.request_timeout_ms, node.next_corr())
        self.batches_sent += 1
        if self.acks == 0:
            node.transport.send(node.node_id, leader, req)
            self._on_success(ps, b, -1, b.timestamp)
            return
        node.request(leader, req, self.request_timeout_ms + 100, partial(self._on_response, ps, b, leader), now)

    def _on_response(self, ps: _PartitionState, b: ProducerBatch, leader: int, resp: Any) -> None:
        if resp is None:
            lost = self._node.failure
            self._on_failure(ps, b, lost if lost is not None else RequestTimedOutError(
                f"{b.topic}-{b.partition}: no response from broker {leader} within {self.request_timeout_ms} ms"))
        elif resp.error is None:
            self._on_success(ps, b, resp.base_offset, b.timestamp)
        else:
            self._on_failure(ps, b, error_from(resp))

    def _settle(self, ps: _PartitionState, b: ProducerBatch) -> None:
        """``b`` was answered. ``inflight`` is a window in send order: a failed batch leaves it at
        once, an acknowledged one only when every older one has left too (responses count in
        order, as on one Kafka connection), so at most ``max_in_flight`` batches are ever written
        past the oldest unacknowledged one - the leader keeps the last 5 to recognise its retry.
        Once nothing is in flight, queued retries go first, in order."""
        with self._lock:
            if not b.done and b in ps.inflight:
                ps.inflight.remove(b)
            inflight = ps.inflight
            while inflight and inflight[0].done:
                del inflight[0]
            if not inflight and ps.retry:
                ps.retry.sort(key=_resend_order)
                ps.queue.extendleft(reversed(ps.retry))
                if ps.queue[0].sequence < 0 and any(x.sequence >= 0 for x in ps.queue):
                    # A renumbered batch must not block numbered ones behind it (they go first, in sequence
                    # order: only they can resolve the partition; the others wait for that anyway).
                    ps.queue = deque(sorted(ps.queue, key=_resend_order))
                ps.retry = []
            if ps.retry_mode and not ps.retry and not inflight and not any(x.sequence >= 0 for x in ps.queue):
                ps.retry_mode = False
            self._dirty[ps] = None
            self._wake_locked()

    def _on_success(self, ps: _PartitionState, b: ProducerBatch, base_offset: int, timestamp: int) -> None:
        self.send_latency.observe((self.scheduler.clock.now_ms() - b.created_ms) / 1000.0)
        self.records_sent += len(b.records)
        self.bytes_sent += len(b.data or b"")
        b.data = None  # the encoded copy is only kept for retries
        self._incomplete.discard(b)
        if b.sequence >= 0 and (b.producer_id, b.producer_epoch) == ps.seq_id:
            end = (b.sequence + len(b.records)) & 0x7FFFFFFF
            if _seq_before(ps.acked_next, end):
                ps.acked_next = end
        b.complete(base_offset, timestamp, None)
        if b.parent is not None:
            self._child_done(b)
        self._settle(ps, b)

    def _on_failure(self, ps: _PartitionState, b: ProducerBatch, err: PylogError) -> None:
        """``b``'s attempt failed with ``err``: retry it (same bytes: same producer id, epoch and sequence), or
        fail it to the caller. With idempotence (KIP-360, as Kafka's producer):

        * ``OutOfOrderSequenceError`` while an older batch of ``b``'s identity is still pending: retriable
          (that batch goes first). Otherwise the leader refused ``b``: neither it nor any later batch of
          that identity is in the log, so they are renumbered under a new identity (``gap``) and retried.
        * a sequenced batch that fails for good after an unknown outcome (timeouts, a lost connection,
          retries or delivery timeout exhausted) may be in the log: the partition is *unresolved* - no new
          batch takes a sequence, the batches already numbered keep being retried under their own
          identity, and :meth:`_maybe_resolve` decides once none is pending. Never renumbered.
        """
        now = self.scheduler.clock.now_ms()
        if isinstance(err, RecordTooLargeError) and len(b.records) > 1 and not self._node.closed \
                and now < b.deadline_ms:
            self._split(ps, b, err)
            return
        retriable = err.retriable
        idem = self.enable_idempotence and b.sequence >= 0
        if idem:
            if not isinstance(err, _REFUSALS):
                b.maybe_written = True
            with self._lock:
                ident = (b.producer_id, b.producer_epoch)
                if isinstance(err, OutOfOrderSequenceError) and b.maybe_written:
                    # An earlier attempt may be in the log: the leader may only have lost track of it (after
                    # a restart it remembers each producer's last batch only). Its outcome stays unknown:
                    # never renumbered; it fails to the caller (below) unless an older batch is pending.
                    pending = ps.retry + list(ps.queue) + ps.inflight
                    retriable = any(x is not b and not x.done and (x.producer_id, x.producer_epoch) == ident
                                    and 0 <= x.sequence and _seq_before(x.sequence, b.sequence) for x in pending)
                elif isinstance(err, OutOfOrderSequenceError):
                    pending = ps.retry + list(ps.queue) + ps.inflight
                    if any(x is not b and not x.done and (x.producer_id, x.producer_epoch) == ident
                           and 0 <= x.sequence and _seq_before(x.sequence, b.sequence) for x in pending):
                        retriable = True
                    else:
                        # Refused, every attempt of b: the leader has a gap before b, so b is not in the log,
                        # nor is any later batch of this identity that was only ever refused: those are
                        # renumbered under the next identity (the others fail to the caller, unknown).
                        if ident == ps.seq_id:
                            ps.gap = True
                        for x in [b] + ps.retry + list(ps.queue):
                            if x.sequence >= 0 and not x.maybe_written and (x.producer_id, x.producer_epoch) == ident:
                                _unnumber(x)
                        retriable = True
                elif ps.gap and ident == ps.seq_id and not b.maybe_written:
                    _unnumber(b)  # after the gap, a batch only ever refused is renumbered
                elif ps.gap and ident == ps.seq_id:
                    retriable = False  # unknown outcome and cannot be resent under its sequence: fails
        if retriable and not self._node.closed and now < b.deadline_ms and b.attempts <= self.max_retries:
            self.retries += 1
            b.last_error = err
            with self._lock:
                ps.retry_mode = True
                ps.retry.append(b)
                ps.backoff_until = max(ps.backoff_until, now + self.retry_backoff_ms)
            self._settle(ps, b)
            return
        if idem and b.sequence >= 0:
            # b fails for good while numbered: refused (a non-retriable answer: not written) or unknown.
            self._sequence_failed(ps, b, written=None if retriable or b.maybe_written else False)
        self._settle(ps, b)
        self._fail(b, err if not retriable or not self._node.closed else self._closed_error())

    def _split(self, ps: _PartitionState, b: ProducerBatch, err: PylogError) -> None:
        """The leader refused ``b`` as larger than the topic's ``max_message_bytes`` (Kafka's
        MESSAGE_TOO_LARGE): split it in two and resend the halves, in order, before anything else of the
        partition (Kafka's ``splitAndReenqueue``; a half still too large is split again). With idempotence
        the halves take ``b``'s own sequences (``b`` was refused, so its range is free at the leader).
        ``b`` keeps its futures and its share of buffer_memory; it completes once both halves have."""
        half = len(b.records) // 2
        children = []
        for start, recs in ((0, b.records[:half]), (half, b.records[half:])):
            ch = ProducerBatch(self, b.topic, b.partition, b.created_ms, b.deadline_ms, b.order)
            ch.open = False
            ch.records.extend(recs)
            ch.plain = b.plain
            ch.parent, ch.parent_start = b, start
            ch.attempts = b.attempts
            ch.last_error = err
            if b.sequence >= 0:
                ch.producer_id, ch.producer_epoch = b.producer_id, b.producer_epoch
                ch.sequence = (b.sequence + start) & 0x7FFFFFFF
            children.append(ch)
        with self._lock:
            b.children = children
            b.plain = False  # result() takes the Python path, which follows the records to the halves
            b.data = None
            ps.retry_mode = True
            ps.retry.extend(children)
        self.retries += 1
        self._settle(ps, b)

    def _child_done(self, ch: ProducerBatch) -> None:
        """A half of a split batch completed: complete the batch it came from once all its halves have
        (its futures then read each record's outcome from its half)."""
        parent = ch.parent
        while parent is not None and not parent.done and parent.children is not None \
                and all(x.done for x in parent.children):
            first = parent.children[0]
            self._incomplete.discard(parent)
            parent.complete(first.base_offset, first.timestamp, None)
            parent = parent.parent

    def _sequence_failed(self, ps: _PartitionState, b: ProducerBatch, written: Optional[bool]) -> None:
        """A numbered batch fails to the caller. ``written=False``: certainly not in the log (later
        sequences of its identity cannot be either: ``gap``); None: unknown (``unresolved``)."""
        if b.sequence < 0:
            return
        with self._lock:
            if (b.producer_id, b.producer_epoch) != ps.seq_id:
                return  # an identity this partition has already left behind
            if written is False:
                ps.gap = True
                ident = ps.seq_id
                for x in ps.retry + list(ps.queue):
                    if x.sequence >= 0 and not x.maybe_written and (x.producer_id, x.producer_epoch) == ident:
                        _unnumber(x)
            else:
                ps.unresolved = True
            self._dirty[ps] = None

    def _maybe_resolve(self, ps: _PartitionState) -> None:
        """KIP-360 (Kafka's ``maybeResolveSequences`` / ``bumpIdempotentEpochAndResetIdIfNeeded``), under the
        lock: once no numbered batch of ``ps`` is pending, either the last acknowledged batch was the last
        one numbered (the unresolved ones before it are in the log: nothing to do), or the leader may hold
        a gap: the producer's epoch is bumped (a new producer id when the epoch is exhausted) and ``ps``
        numbers its next batches from 0 under the new identity; the leader fences the old epoch."""
        if _sequenced_pending(ps):
            return
        if ps.gap or ps.acked_next != ps.next_seq:
            if ps.seq_id is not None and ps.seq_id == (self.producer_id, self.producer_epoch):
                self.epoch_bumps += 1
                if self.producer_epoch >= _MAX_EPOCH:
                    self.producer_id = -1  # exhausted: InitProducerId gives a new id (Kafka's resetIdempotentProducerId)
                else:
                    self.producer_epoch += 1
                for parts in self._parts.values():
                    self._dirty.update(dict.fromkeys(parts))
                self._wake_locked()
            ps.seq_id = None  # the next new batch starts at sequence 0 under the current identity
        ps.unresolved = ps.gap = False

    def _fail(self, b: ProducerBatch, err: BaseException) -> None:
        self.record_errors += len(b.records)
        self._incomplete.discard(b)
        b.complete(-1, -1, err)
        if b.parent is not None:
            self._child_done(b)

    # --------------------------------------------------------- producer ids
    def _init_producer_id(self) -> None:
        """Loop thread: ask a broker for a producer id (InitProducerId); retried with backoff."""
        if self._pid_inflight or self.producer_id >= 0 or self._node.closed:
            return
        brokers = list(self._store.brokers)
        if self._store.controller_id is not None and self._pid_broker == 0:
            target = self._store.controller_id
        else:
            target = brokers[self._pid_broker % len(brokers)]
        self._pid_inflight = True
        req = InitProducerIdRequest(self._node.next_corr())

        def on_reply(resp: Any) -> None:
            self._pid_inflight = False
            if resp is not None and resp.error is None:
                with self._lock:
                    self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
                    for parts in self._parts.values():
                        self._dirty.update(dict.fromkeys(parts))
                self._run()
                return
            self._pid_broker += 1
            if not self._node.closed:
                self.scheduler.call_later(self.retry_backoff_ms, self._init_producer_id)
                self._wake()  # waiting batches still expire at their delivery timeout

        self._node.request(target, req, self.request_timeout_ms, on_reply)

    # ------------------------------------------------------- flush and close
    def flush(self, timeout: Optional[float] = None) -> None:
        """Send every buffered record now and wait until each is acknowledged or failed.

        Raises RequestTimedOutError if ``timeout`` seconds pass first (records stay queued).
        """
        if self._realtime and self.scheduler.on_loop():
            raise InvalidConfigurationError("flush() or close() inside a producer callback would wait for itself; "
                                            "call close(0) there, or flush from another thread")
        with self._lock:
            self._flushing += 1
            pending = list(self._incomplete)
            for parts in self._parts.values():
                self._dirty.update(dict.fromkeys(ps for ps in parts if ps.open is not None))
            self._wake_locked()
        try:
            if self.scheduler.simulated:
                ok = self.scheduler.wait_until(lambda: all(b.done for b in pending),
                                               None if timeout is None else int(timeout * 1000))
            else:
                import time

                deadline = None if timeout is None else time.monotonic() + timeout
                ok = True
                for b in pending:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    if not b.wait(left):
                        ok = False
                        break
            if not ok:
                raise RequestTimedOutError(f"flush: {sum(not b.done for b in pending)} batches not acknowledged "
                                           f"within {timeout} s")
        finally:
            with self._lock:
                self._flushing -= 1

    def close(self, timeout: Optional[float] = None) -> None:
        """Flush (waiting up to ``timeout`` seconds), then stop; records still unsent then fail.

        ``close(0)`` fails every outstanding record at once. Idempotent.
        """
        if self._closed and self._node.closed:
            return
        self._closed = True
        with self._lock:
            self._wake_all_waiters()  # a send() waiting for buffer room raises ProducerClosedError
        try:
            if timeout is None or timeout > 0:
                try:
                    self.flush(timeout)
                except RequestTimedOutError:
                    pass
        finally:
            self.scheduler.run_sync(self._node.close_node)

    def _closed_error(self) -> PylogError:
        return ProducerClosedError("the producer or its cluster was closed before the record was acknowledged")

    def _on_node_closed(self) -> None:
        """The client node closed (close(), or the cluster closed): fail everything unacknowledged."""
        self._closed = True
        with self._lock:
            pending = list(self._incomplete)
            for parts in self._parts.values():
                for ps in parts:
                    self._close_open(ps)
                    ps.queue.clear()
                    ps.retry = []
                    ps.inflight = []
            self._wake_all_waiters()
        err = self._closed_error()
        for b in pending:
            self._fail(b, err)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- metrics
    def metrics(self) -> List[Any]:
        """Counters since creation, as :class:`pylog.metrics.Metric` (labelled with the client id)."""
        from pylog.metrics import metric

        cid = self._node.node_id
        return [
            metric("pylog_producer_records_sent_total", "counter", "Records acknowledged (or sent, acks=0).",
                   self.records_sent, client_id=cid),
            metric("pylog_producer_bytes_sent_total", "counter", "Bytes of acknowledged batches (encoded, compressed).",
                   self.bytes_sent, client_id=cid),
            metric("pylog_producer_record_errors_total", "counter", "Records whose send failed.",
                   self.record_errors, client_id=cid),
            metric("pylog_producer_retries_total", "counter", "Batch resends after a retriable error.",
                   self.retries, client_id=cid),
            metric("pylog_producer_batches_sent_total", "counter", "Produce requests sent (first tries and retries).",
                   self.batches_sent, client_id=cid),
            metric("pylog_producer_buffered_batches", "gauge", "Batches not yet acknowledged.",
                   len(self._incomplete), client_id=cid),
            metric("pylog_producer_buffer_available_bytes", "gauge",
                   "buffer_memory not held by open or unacknowledged batches.",
                   self.buffer_memory - self._reserved, client_id=cid),
            metric("pylog_producer_bufferpool_waits_total", "counter",
                   "Times send() blocked because buffer_memory was full.", self.buffer_waits, client_id=cid),
            metric("pylog_producer_bufferpool_wait_seconds_total", "counter",
                   "Wall time send() spent blocked for buffer_memory (real time; 0 in simulated clusters).",
                   self.buffer_wait_seconds, client_id=cid),
            metric("pylog_producer_send_latency_seconds", "histogram",
                   "Seconds from a batch's first send() to its acknowledgement (virtual time in simulations).",
                   self.send_latency.snapshot(), client_id=cid),
        ]


#: the keyword options Producer takes (listed when an unknown one is passed)
_PRODUCER_OPTIONS = tuple(
    n for n, prm in inspect.signature(Producer.__init__).parameters.items() if prm.kind is prm.KEYWORD_ONLY)

__all__ = ["Producer", "RecordMetadata", "FutureRecordMetadata"]
