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

The producer is a facade over two parts, one concept each, which it inherits
(Kafka's ``KafkaProducer`` over ``BufferPool`` and ``Sender``):
:mod:`pylog.client.buffer_pool` (``buffer_memory`` and the senders waiting for
room) and :mod:`pylog.client.sender` (draining, sending, answers, retries,
idempotence); the batches and per-partition queues are
:mod:`pylog.client.accumulator`'s, the options a validated
:class:`~pylog.client.config.ProducerConfig`. This module owns the public API
and the append path (``send``: partitioning, the open batch, the C or Python
fast path), ``flush`` and ``close``.

Complexity: ``send`` is O(1) (plus murmur2 of a new key); a batch costs one
encode, one request and O(1) completion.
Thread-safety: ``send``, ``flush``, ``close`` and ``metrics`` may be called
from any thread; everything else runs on the cluster's scheduler loop.
Durability: what ``acks`` promises (docs/producer.md): 0 nothing, 1 the
leader's page cache, all every in-sync replica's page cache.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from pylog.client._node import ClientNode
from pylog.client.accumulator import FutureRecordMetadata, PartitionState, ProducerBatch, RecordMetadata, failed_future
from pylog.client.buffer_pool import BufferPool
from pylog.client.config import ProducerConfig
from pylog.client.partitioner import StickyPartitioner, murmur2
from pylog.client.sender import Sender
from pylog.client.txn_manager import TransactionManager, TxnResult, TxnState
from pylog.client.types import TopicPartition, serialize
from pylog.errors import (
    InvalidConfigurationError,
    InvalidRecordError,
    InvalidTxnStateError,
    ProducerClosedError,
    PylogError,
    RecordTooLargeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pylog.metrics import metric
from pylog.record import Record
from pylog.runtime.cluster_context import ClusterContext

try:  # the per-record hot path in C (sendpath.c); the pure-Python closure is the fallback
    from pylog._native._sendpath import Lock as _Lock
    from pylog._native._sendpath import SendPath as _SendPath
except ImportError:  # pragma: no cover - only without a build of sendpath.c
    _SendPath = None
    _Lock = threading.Lock

logger = logging.getLogger(__name__)

_RECORD_OVERHEAD = 16  # estimated bytes a record adds besides key and value (varints, attributes), on the high side
_KEY_CACHE_MAX = 65_536



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


class Producer(BufferPool, Sender):
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
      :class:`~pylog.errors.SerializationError` (docs/kafka-python-idioms.md);
    * ``transactional_id`` (None) - makes the producer transactional (always idempotent: acks "all",
      ``max_in_flight`` <= 5): :meth:`init_transactions`, :meth:`begin_transaction`, ``send``,
      :meth:`send_offsets_to_transaction`, :meth:`commit_transaction`, :meth:`abort_transaction`;
      ``transaction_timeout_ms`` (60000) - the coordinator aborts a transaction open longer.
      See docs/transactions.md "Producer API".

    Bad arguments raise :class:`InvalidConfigurationError` naming the parameter:
    an unknown keyword (listing the known ones), a wrong type (``bool`` is not
    an int) or an out-of-range value.

    Complexity: ``send`` is O(1) (plus murmur2 of a new key); a batch costs one
    encode, one request and O(1) completion. Thread-safety: see the module docstring.
    """

    def __init__(self, cluster: ClusterContext, *, acks: Any = "all", batch_size: int = 16384, linger_ms: int = 0,
                 compression_type: Optional[str] = None, max_in_flight: int = 5, retry_backoff_ms: int = 100,
                 request_timeout_ms: int = 30_000, delivery_timeout_ms: int = 120_000,
                 enable_idempotence: Optional[bool] = None, idempotence: Optional[bool] = None,
                 transactional_id: Optional[str] = None, transaction_timeout_ms: int = 60_000,
                 retries: int = 2**31 - 1,
                 buffer_memory: int = 33_554_432, max_block_ms: int = 60_000,
                 key_serializer: Any = None, value_serializer: Any = None,
                 compression_level: Optional[int] = None, **unknown: Any):
        # The keyword options as given: the signature lists ProducerConfig's fields with its defaults
        # (tests/unit/test_client_config.py keeps the two equal), so help() and inspect show them.
        options = dict(locals())
        del options["self"], options["cluster"], options["unknown"]
        #: every option, validated (:class:`~pylog.client.config.ProducerConfig`); copied to attributes below
        self.config = config = ProducerConfig.from_options({**options, **unknown})
        self.acks = config.acks_value
        self.enable_idempotence = bool(config.enable_idempotence)
        self.compression = config.compression
        self.compression_level = config.compression_level
        self.batch_size = config.batch_size
        self.linger_ms = config.linger_ms
        self.max_in_flight = config.max_in_flight
        self.retry_backoff_ms = config.retry_backoff_ms
        self.request_timeout_ms = config.request_timeout_ms
        self.delivery_timeout_ms = config.delivery_timeout_ms
        self.max_retries = config.retries
        self.max_block_ms = config.max_block_ms
        self.cluster = cluster
        self.scheduler = cluster.scheduler
        self._realtime = not self.scheduler.simulated
        self._store = cluster.metadata
        self._lock = _Lock()  # like threading.Lock; the C send path takes it without a method call
        self._init_buffer_pool(config.buffer_memory, config.batch_size)
        self._node: ClientNode = self.scheduler.run_sync(
            lambda: ClientNode("producer", cluster.scheduler, cluster.transport))
        self._node.on_close.append(self._on_node_closed)
        self._parts: Dict[str, List[PartitionState]] = {}
        self._sticky: Dict[str, ProducerBatch] = {}  # topic -> open batch records without a key join
        self._sticky_part = StickyPartitioner(random.Random(self.scheduler.rng.getrandbits(64)))
        self._key_hash: Dict[bytes, int] = {}
        self._incomplete: Set[ProducerBatch] = set()
        self._order = 0
        self._closed = False
        self._flushing = 0
        #: the transactional id (None: not transactional) and its :class:`TransactionManager`
        self.transactional_id = config.transactional_id
        self._txn = None if config.transactional_id is None else TransactionManager(
            config.transactional_id, config.transaction_timeout_ms, config.retry_backoff_ms)
        self._init_sender()
        self.send = self._make_fast_send()  # type: ignore[method-assign]
        key_ser, value_ser = config.key_serializer_fn, config.value_serializer_fn
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
                parts = self._parts.setdefault(topic, [PartitionState(topic, p) for p in range(cfg.partitions)])
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
            txn = self._txn
            if txn is not None:  # raises outside a transaction, or the error the transaction is in
                had = bool(txn.new_partitions)
                txn.maybe_add_partition(TopicPartition(ps.topic, ps.partition))
                if not had and txn.new_partitions:
                    self._wake_locked()  # AddPartitionsToTxn goes now, whatever linger_ms says
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

    def _new_batch(self, ps: PartitionState, reserve: int) -> ProducerBatch:
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

    def _batch_full(self, b: ProducerBatch) -> None:
        """Close a full batch (under the lock) and hand it to the loop."""
        ps = self._parts[b.topic][b.partition]
        self._close_open(ps)
        ps.queue.append(b)
        self._dirty[ps] = None
        self._wake_locked()

    def _close_open(self, ps: PartitionState) -> Optional[ProducerBatch]:
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

    def _refresh_partitions(self, topic: str) -> None:
        """The topic gained partitions (``create_partitions``): extend the cached list in place (the
        send paths, C included, read it from ``_parts``), so partitioners spread over them too."""
        cfg = self._store.topics.get(topic)
        with self._lock:
            parts = self._parts.get(topic)
            if cfg is not None and parts is not None and cfg.partitions > len(parts):
                parts.extend(PartitionState(topic, p) for p in range(len(parts), cfg.partitions))

    # ---------------------------------------------------------- transactions
    def _require_txn(self, name: str) -> TransactionManager:
        if self._txn is None:
            raise InvalidTxnStateError(f"{name}() needs a transactional producer: make it with "
                                       "cluster.producer(transactional_id=...)")
        if self._closed:
            raise ProducerClosedError(f"{name}() after the producer was closed")
        return self._txn

    def _await_txn(self, result: TxnResult, name: str, timeout: Optional[float]) -> None:
        """Block until ``result`` is done (the coordinator answered), at most ``timeout`` seconds
        (None: ``max_block_ms``); raise its error. RequestTimedOutError when the time runs out: the
        call goes on, and calling the same method again waits for the same result (Kafka's rule)."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise InvalidConfigurationError(f"{name}(timeout=...) must be a number of seconds >= 0 or None, "
                                            f"got {timeout!r}")
        ms = self.max_block_ms if timeout is None else int(timeout * 1000)
        if not result.done:
            if self.scheduler.simulated:
                self.scheduler.wait_until(lambda: result.done, ms)
            else:
                if self.scheduler.on_loop():
                    raise InvalidConfigurationError(f"{name}() inside a producer callback would wait for itself")
                deadline = time.monotonic() + ms / 1000
                with self._txn_cond:
                    while not result.done:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._txn_cond.wait(left)
        if not result.done:
            raise RequestTimedOutError(f"{name}() of transactional id {self.transactional_id!r}: not completed "
                                       f"within {ms} ms; call it again to keep waiting")
        if result.error is not None:
            raise result.error

    def _txn_call(self, name: str, call: Any, timeout: Optional[float]) -> None:
        """Run ``call(manager)`` under the lock (state errors raise here), wake the loop, wait for it."""
        txn = self._require_txn(name)
        with self._lock:
            result = call(txn)
            self._after_txn_change_locked()
        self._await_txn(result, name, timeout)

    def init_transactions(self, timeout: Optional[float] = None) -> None:
        """Get this transactional id's producer id and epoch from its coordinator (Kafka's
        ``initTransactions``): a previous producer with the same id is fenced (its next call raises
        :class:`~pylog.errors.ProducerFencedError`) and its open transaction aborted. Call once,
        before the first transaction. Blocks up to ``timeout`` seconds (None: ``max_block_ms``);
        RequestTimedOutError then, and calling it again keeps waiting for the same answer.
        Durability: the coordinator's ``__transaction_state`` record, acks=all."""
        self._txn_call("init_transactions", lambda t: t.init_transactions(), timeout)

    def begin_transaction(self) -> None:
        """Start a transaction (local: nothing is sent until the first record or offsets).
        :class:`~pylog.errors.InvalidTxnStateError` unless the previous one ended (or before
        :meth:`init_transactions`)."""
        txn = self._require_txn("begin_transaction")
        with self._lock:
            txn.begin_transaction()

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any, timeout: Optional[float] = None) -> None:
        """Commit a consumer group's ``offsets`` inside the transaction (consume-transform-produce):
        they become the group's committed offsets only if the transaction commits.

        ``offsets`` is keyed by ``(topic, partition)`` or TopicPartition, values an offset (the next
        record to read) or OffsetAndMetadata, as ``Consumer.commit`` takes them; ``group_metadata`` is
        ``consumer.group_metadata()`` (its generation and member id let the group coordinator refuse
        a member fenced by a rebalance: :class:`~pylog.errors.CommitFailedError`, abortable) or a group
        id. Blocks until the group coordinator answered (AddOffsetsToTxn, then TxnOffsetCommit), at
        most ``timeout`` seconds (None: ``max_block_ms``)."""
        self._txn_call("send_offsets_to_transaction", lambda t: t.send_offsets_to_transaction(offsets, group_metadata),
                       timeout)

    def commit_transaction(self, timeout: Optional[float] = None) -> None:
        """Send every record of the transaction, then commit it (EndTxn): once this returns, all its
        records (and offsets) are visible to ``read_committed`` consumers in every partition, or will
        be once the coordinator's markers are written - the outcome is decided and durable.

        Raises the transaction's error if a record failed (abortable:
        :class:`~pylog.errors.TransactionAbortableError` and others - call :meth:`abort_transaction`;
        fatal: :class:`~pylog.errors.ProducerFencedError` - close the producer). Blocks up to
        ``timeout`` seconds (None: ``max_block_ms``); RequestTimedOutError then, and calling it again
        keeps waiting for the same commit. Durability: the PrepareCommit record of
        ``__transaction_state`` is on its ISR (acks=all) before the answer."""
        self._txn_call("commit_transaction", lambda t: t.commit_transaction(), timeout)

    def abort_transaction(self, timeout: Optional[float] = None) -> None:
        """Abort the transaction: records not yet sent fail with
        :class:`~pylog.errors.TransactionAbortedError` (their futures raise it), those sent are
        hidden from ``read_committed`` consumers by ABORT markers, offsets sent with it are dropped.
        The way out of an abortable error; the producer then goes on with :meth:`begin_transaction`.
        Blocks like :meth:`commit_transaction`."""
        self._txn_call("abort_transaction", lambda t: t.abort_transaction(), timeout)

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
        txn = self._txn
        if txn is not None and not self._closed and (timeout is None or timeout > 0) and txn.state in (
                TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR) \
                and not (self._realtime and self.scheduler.on_loop()):
            # Kafka's Sender aborts an incomplete transaction on a graceful close (else the coordinator
            # would only abort it at transaction_timeout_ms, holding back read_committed readers).
            try:
                self.abort_transaction(timeout)
            except PylogError as exc:
                logger.info("transactional id %r: abort on close failed: %s", self.transactional_id, exc)
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
        """The client node closed (close(), or the cluster closed): fail everything unacknowledged
        (and every pending transactional call)."""
        self._closed = True
        with self._lock:
            if self._txn is not None:
                self._txn.close(ProducerClosedError(f"transactional id {self.transactional_id!r}: the producer or "
                                                    "its cluster was closed"))
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
        if self._txn is not None:
            self._txn_notify()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- metrics
    def metrics(self) -> List[Any]:
        """Counters since creation, as :class:`pylog.metrics.Metric` (labelled with the client id)."""
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



__all__ = ["Producer", "ProducerConfig", "RecordMetadata", "FutureRecordMetadata"]
