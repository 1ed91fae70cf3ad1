"""The producer's sender (Kafka's ``Sender`` and the idempotence half of ``TransactionManager``).

Owns: everything after a batch is closed - waking the loop once per batch,
draining the partitions that may send (``max_in_flight``, ``linger_ms``,
retry mode, backoff) into one request per leader broker, encoding a batch once and sending the same bytes on
every retry, the answers (success, retry, split of a batch too large, failure
to the caller), delivery timeouts, and idempotence: the producer id and epoch
(InitProducerId), the per-partition sequence numbers and their KIP-360
resolution (:class:`~pylog.client.accumulator.SequenceState`, an epoch bump
once nothing numbered is pending). The rules are described in the
:mod:`pylog.client.producer` docstring and docs/producer.md.

With a ``transactional_id`` it also drives the producer's
:class:`~pylog.client.txn_manager.TransactionManager` (Kafka's
``Sender.maybeSendAndPollTransactionalRequest``): on each pass it first fails
every batch not yet drained when the manager says so
(``undrained_batches_error``: an abort, an abortable or fatal error), drains a
partition only while ``is_send_to_partition_allowed``, then sends the
manager's next request (FindCoordinator, InitProducerId with the transactional
id - instead of the idempotent one -, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn) and hands its answer back. The producer id and epoch
are the manager's; a new epoch (KIP-890 bumps it on every EndTxn) starts each
partition's sequences again at 0. Batches carry the transactional bit and
produce requests the transactional id. A batch that fails for good is reported
with ``on_batch_error``. docs/transactions.md "Producer API".

It is one of the parts :class:`~pylog.client.producer.Producer` is built
from (with :class:`~pylog.client.buffer_pool.BufferPool`): the producer
inherits it, and its methods work on the producer's own attributes; what it
uses from the other parts is declared under ``TYPE_CHECKING``.

Complexity: O(dirty partitions) per wake-up; one encode per batch and one produce request per leader
broker per wake-up (Kafka's drain by node), O(1) to complete a batch
(O(batches of the partition) on a failure).
Durability: what ``acks`` promises (docs/producer.md); nothing on the client's disk.
Thread-safety: the loop thread, except ``_wake``/``_wake_locked``, which any
thread calls (under the producer's ``_lock``); partition state changes under it.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from pylog.client._node import error_from
from pylog.client.accumulator import PartitionState, ProducerBatch, SequenceState
from pylog.client.txn_manager import ANY_NODE, TransactionManager, TxnState
from pylog.client.types import TopicPartition
from pylog.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    LeaderNotAvailableError,
    NotEnoughReplicasError,
    OutOfOrderSequenceError,
    PylogError,
    RecordTooLargeError,
    RequestTimedOutError,
    TransactionAbortableError,
    UnknownTopicOrPartitionError,
)
from pylog.metrics import Histogram
from pylog.replication.messages import NO_LEADER, InitProducerIdRequest, MultiProduceRequest, ProduceRequest
from pylog.record import compression as codecs
from pylog.record import encode_batch, encode_values_batch

if TYPE_CHECKING:
    from pylog.client._node import ClientNode
    from pylog.runtime.cluster_context import MetadataView
    from pylog.runtime.scheduler import Scheduler

logger = logging.getLogger(__name__)

#: answers proving the leader did not append the attempt (checked before the append); any other outcome of
#: an attempt - no answer, a lost connection, NotLeader (which a leader also gives a produce it appended and
#: then stopped leading), NotEnoughReplicasAfterAppend - means it may be in the log
_REFUSALS = (OutOfOrderSequenceError, InvalidProducerEpochError, NotEnoughReplicasError, RecordTooLargeError,
             InvalidRecordError, CorruptRecordError, LeaderNotAvailableError, UnknownTopicOrPartitionError,
             InvalidTxnStateError, TransactionAbortableError)
_MAX_EPOCH = 32_766
#: the most record bytes one multi-partition produce request carries (Kafka's ``max.request.size`` default)
MAX_REQUEST_BYTES = 1_048_576  # a producer epoch is an int16; past this a new producer id is taken


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


def _sequenced_pending(ps: PartitionState) -> bool:
    """Some numbered batch of ``ps`` is in flight or waiting for its retry (under the lock)."""
    return bool(ps.inflight) or any(x.sequence >= 0 for x in ps.retry) or any(x.sequence >= 0 for x in ps.queue)


class Sender:
    """Sends closed batches, handles their answers, numbers them (a part of :class:`Producer`)."""

    if TYPE_CHECKING:  # provided by the facade and the other parts
        scheduler: Scheduler
        _store: MetadataView
        acks: int
        enable_idempotence: bool
        compression: int
        compression_level: Optional[int]
        linger_ms: int
        max_in_flight: int
        retry_backoff_ms: int
        request_timeout_ms: int
        delivery_timeout_ms: int
        max_retries: int
        _lock: Any  # threading.Lock, or the C send path's look-alike
        _node: ClientNode
        _closed: bool
        _flushing: int
        _parts: Dict[str, List[PartitionState]]
        _incomplete: Set[ProducerBatch]

        def _close_open(self, ps: PartitionState) -> Optional[ProducerBatch]: ...
        def _refresh_partitions(self, topic: str) -> None: ...
        def _closed_error(self) -> PylogError: ...

    #: the transaction manager of a transactional producer (set by the Producer before ``_init_sender``)
    _txn: Optional[TransactionManager] = None
    transactional_id: Optional[str] = None

    def _init_sender(self) -> None:
        # An insertion-ordered set (dict keys): partitions hash by identity, so iterating a
        # set would follow heap addresses and a seeded simulation would not replay exactly.
        self._dirty: Dict[PartitionState, None] = {}
        self._wake_pending = False
        # idempotence (loop thread)
        self.producer_id = -1
        self.producer_epoch = -1
        self._pid_inflight = False
        self._pid_broker = 0
        self.epoch_bumps = 0  # KIP-360 epoch bumps (a partition's sequences could not be resolved)
        # transactions (loop thread; the manager under _lock)
        self._txn_any = 0  # rotates the broker a FindCoordinator goes to
        self._txn_timer_at = -1  # when the retry-backoff timer of the manager's next request fires
        #: notified (notify_all) after every change of the transaction manager's results
        self._txn_cond = threading.Condition()
        # metrics (loop thread)
        self.records_sent = 0
        self.bytes_sent = 0
        self.record_errors = 0
        self.retries = 0
        self.batches_sent = 0
        self.produce_requests = 0  # produce requests sent (one per leader broker per wake-up: many batches in one)
        #: seconds from a batch's first send() to its acknowledgement (the oldest record's send -> ack)
        self.send_latency = Histogram()

    def _wake_locked(self) -> None:
        if not self._wake_pending:
            self._wake_pending = True
            self.scheduler.call_soon(self._run)

    def _wake(self) -> None:
        with self._lock:
            self._wake_locked()

    def _on_linger(self, ps: PartitionState) -> None:
        """A linger (or retry backoff) timer of ``ps`` expired: drain it on the next pass of the loop, with
        every other partition whose timer expired in this pass, so their batches share one request per
        leader broker (:meth:`_send_grouped`)."""
        with self._lock:
            self._dirty[ps] = None
            self._wake_locked()

    # ---------------------------------------------------------------- sender
    def _run(self) -> None:
        """Loop thread: send every batch that is ready and may go (once per wake-up, not per record)."""
        now = self.scheduler.clock.now_ms()
        expired: List[ProducerBatch] = []
        to_send: List[Tuple[PartitionState, ProducerBatch]] = []
        need_pid = False
        txn = self._txn
        undrained: List[ProducerBatch] = []
        undrained_error: Optional[PylogError] = None
        with self._lock:
            self._wake_pending = False
            if txn is not None:
                undrained_error = txn.undrained_batches_error()
                if undrained_error is not None:
                    undrained = self._take_undrained_locked(txn.state == TxnState.FATAL_ERROR)
            dirty, self._dirty = self._dirty, {}
            for ps in dirty:
                self._drain(ps, now, to_send, expired, dirty)
            if self.enable_idempotence and txn is None and self.producer_id < 0 \
                    and any(ps.open or ps.queue for ps in dirty):
                need_pid = True
        for b in undrained:  # Kafka's abortUndrainedBatches: not reported to the manager (it caused them)
            assert undrained_error is not None
            self._fail(b, undrained_error, report=False)
        for b in expired:
            last = b.last_error
            self._fail(b, RequestTimedOutError(
                f"{b.topic}-{b.partition}: delivery timed out ({self.delivery_timeout_ms} ms since the batch was "
                f"created; {len(b.records)} records)"
                + (f"; last error: {type(last).__name__}: {last}" if last is not None else "")))
        if len(to_send) == 1:
            ps, b = to_send[0]
            leader = self._prepare(ps, b)
            if leader is not None:
                self._send_one(ps, b, leader)
        elif to_send:
            self._send_grouped(to_send)
        if need_pid:
            self._init_producer_id()
        if txn is not None:
            self._txn_poll(now)

    def _drain(self, ps: PartitionState, now: int, to_send: List[Tuple[PartitionState, ProducerBatch]],
               expired: List[ProducerBatch], dirty: Dict[PartitionState, None]) -> None:
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
        if idem and ps.sequences is not SequenceState.OK:
            self._maybe_resolve(ps)
        if idem and self.producer_id < 0:
            self._dirty[ps] = None  # sent once the producer id arrives
            return
        txn = self._txn
        if txn is not None and not txn.is_send_to_partition_allowed(TopicPartition(ps.topic, ps.partition)):
            return  # not in the transaction yet: dirtied again when the coordinator answers (_on_txn_response)
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
                if ps.sequences is not SequenceState.OK:
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

    def _send_grouped(self, to_send: List[Tuple[PartitionState, ProducerBatch]]) -> None:
        """Loop thread: send ``to_send`` with one request per leader broker (Kafka's ``RecordAccumulator.drain``
        grouped by node + ``Sender.sendProduceRequests``): the batches a leader leads go in one
        :class:`MultiProduceRequest` of at most :data:`MAX_REQUEST_BYTES` of records (a batch larger than
        that goes alone), in drain order, so two batches of one partition keep their order at the leader.
        A leader with one batch gets a plain :class:`ProduceRequest` (the one-partition path)."""
        by_leader: Dict[int, List[Tuple[PartitionState, ProducerBatch]]] = {}
        for ps, b in to_send:
            leader = self._prepare(ps, b)
            if leader is not None:
                group = by_leader.get(leader)
                if group is None:
                    by_leader[leader] = [(ps, b)]
                else:
                    group.append((ps, b))
        for leader, group in by_leader.items():
            if len(group) == 1:
                self._send_one(group[0][0], group[0][1], leader)
                continue
            chunk: List[Tuple[PartitionState, ProducerBatch]] = []
            size = 0
            for ps, b in group:
                n = len(b.data or b"")
                if chunk and size + n > MAX_REQUEST_BYTES:
                    self._send_many(chunk, leader)
                    chunk, size = [], 0
                chunk.append((ps, b))
                size += n
            if len(chunk) == 1:
                self._send_one(chunk[0][0], chunk[0][1], leader)
            else:
                self._send_many(chunk, leader)

    def _prepare(self, ps: PartitionState, b: ProducerBatch) -> Optional[int]:
        """Loop thread: encode ``b`` (first time) and count the attempt; its leader's broker id, or None when
        ``b`` has been answered here (closed producer, deleted partition, no leader, an encoding error)."""
        topic, p = b.topic, b.partition
        if self._node.closed:
            self._fail(b, self._closed_error())
            return None
        cfg = self._store.topics.get(topic)
        if cfg is None or p >= cfg.partitions:  # deleted (or re-created smaller) while the batch waited
            self._settle(ps, b)
            self._fail(b, UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist (deleted?)" if cfg is None else
                f"topic {topic!r} has no partition {p} now (deleted and re-created with {cfg.partitions}); "
                "make a new producer for the re-created topic"))
            return None
        if cfg.partitions > len(self._parts.get(topic, ())):
            self._refresh_partitions(topic)
        if b.data is None:
            now = self.scheduler.clock.now_ms()
            try:
                if b.plain and self.compression == codecs.NONE and self._txn is None:
                    b.data = encode_values_batch(b.records, now, b.producer_id, b.producer_epoch, b.sequence)
                else:  # (the transactional bit: encode_batch takes the same C fast path for a plain batch)
                    b.data = encode_batch(b.records, now_ms=now, compression=self.compression,
                                          compression_level=self.compression_level,
                                          producer_id=b.producer_id, producer_epoch=b.producer_epoch,
                                          base_sequence=b.sequence, plain=b.plain,
                                          transactional=self._txn is not None)
            except PylogError as exc:
                self._sequence_failed(ps, b, written=False)
                self._settle(ps, b)
                self._fail(b, exc)
                return None
            b.timestamp = now
        st = self._store.partitions.get((topic, p))
        b.attempts += 1
        if st is None or st.leader == NO_LEADER:
            self._on_failure(ps, b, LeaderNotAvailableError(f"{topic}-{p} has no leader"))
            return None
        return st.leader

    def _send_one(self, ps: PartitionState, b: ProducerBatch, leader: int) -> None:
        """Loop thread: send one prepared batch to ``leader`` in a :class:`ProduceRequest`."""
        node = self._node
        req = ProduceRequest(b.topic, b.partition, b.data, self.acks, self.request_timeout_ms,  # type: ignore[arg-type]
                             node.next_corr(), self.transactional_id)
        self.batches_sent += 1
        self.produce_requests += 1
        if self.acks == 0:
            node.transport.send(node.node_id, leader, req)
            self._on_success(ps, b, -1, b.timestamp)
            return
        node.request(leader, req, self.request_timeout_ms + 100, partial(self._on_response, ps, b, leader))

    def _send_many(self, group: List[Tuple[PartitionState, ProducerBatch]], leader: int) -> None:
        """Loop thread: send prepared batches led by ``leader`` in one :class:`MultiProduceRequest`."""
        node = self._node
        acks, timeout = self.acks, self.request_timeout_ms
        tid = self.transactional_id
        parts = tuple(ProduceRequest(b.topic, b.partition, b.data, acks, timeout, 0, tid)  # type: ignore[arg-type]
                      for _, b in group)
        req = MultiProduceRequest(parts, acks, timeout, node.next_corr())
        self.batches_sent += len(group)
        self.produce_requests += 1
        if acks == 0:
            node.transport.send(node.node_id, leader, req)
            for ps, b in group:
                self._on_success(ps, b, -1, b.timestamp)
            return
        node.request(leader, req, timeout + 100, partial(self._on_multi_response, group, leader))

    def _on_multi_response(self, group: List[Tuple[PartitionState, ProducerBatch]], leader: int, resp: Any) -> None:
        """The answer to a :class:`MultiProduceRequest` (None: none came): each batch handled as if it had
        been answered alone, in the request's order."""
        if resp is None:
            for ps, b in group:
                self._on_response(ps, b, leader, None)
            return
        for (ps, b), r in zip(group, resp.parts):
            self._on_response(ps, b, leader, r)

    def _on_response(self, ps: PartitionState, b: ProducerBatch, leader: int, resp: Any) -> None:
        if resp is None:
            lost = self._node.failure
            self._on_failure(ps, b, lost if lost is not None else RequestTimedOutError(
                f"{b.topic}-{b.partition}: no response from broker {leader} within {self.request_timeout_ms} ms"))
        elif resp.error is None:
            self._on_success(ps, b, resp.base_offset, b.timestamp)
        else:
            self._on_failure(ps, b, error_from(resp))

    def _settle(self, ps: PartitionState, b: ProducerBatch) -> None:
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

    def _on_success(self, ps: PartitionState, b: ProducerBatch, base_offset: int, timestamp: int) -> None:
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

    def _on_failure(self, ps: PartitionState, b: ProducerBatch, err: PylogError) -> None:
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
                            ps.sequences = SequenceState.GAP
                        for x in [b] + ps.retry + list(ps.queue):
                            if x.sequence >= 0 and not x.maybe_written and (x.producer_id, x.producer_epoch) == ident:
                                _unnumber(x)
                        retriable = True
                elif ps.sequences is SequenceState.GAP and ident == ps.seq_id and not b.maybe_written:
                    _unnumber(b)  # after the gap, a batch only ever refused is renumbered
                elif ps.sequences is SequenceState.GAP and ident == ps.seq_id:
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

    def _split(self, ps: PartitionState, b: ProducerBatch, err: PylogError) -> None:
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

    def _sequence_failed(self, ps: PartitionState, b: ProducerBatch, written: Optional[bool]) -> None:
        """A numbered batch fails to the caller. ``written=False``: certainly not in the log (later
        sequences of its identity cannot be either: ``gap``); None: unknown (``unresolved``)."""
        if b.sequence < 0:
            return
        with self._lock:
            if (b.producer_id, b.producer_epoch) != ps.seq_id:
                return  # an identity this partition has already left behind
            if written is False:
                ps.sequences = SequenceState.GAP
                ident = ps.seq_id
                for x in ps.retry + list(ps.queue):
                    if x.sequence >= 0 and not x.maybe_written and (x.producer_id, x.producer_epoch) == ident:
                        _unnumber(x)
            elif ps.sequences is SequenceState.OK:  # (a gap stays a gap: it says more)
                ps.sequences = SequenceState.UNRESOLVED
            self._dirty[ps] = None

    def _maybe_resolve(self, ps: PartitionState) -> None:
        """KIP-360 (Kafka's ``maybeResolveSequences`` / ``bumpIdempotentEpochAndResetIdIfNeeded``), under the
        lock: once no numbered batch of ``ps`` is pending, either the last acknowledged batch was the last
        one numbered (the unresolved ones before it are in the log: nothing to do), or the leader may hold
        a gap: the producer's epoch is bumped (a new producer id when the epoch is exhausted) and ``ps``
        numbers its next batches from 0 under the new identity; the leader fences the old epoch."""
        if _sequenced_pending(ps):
            return
        if self._txn is not None:
            # Transactional: the coordinator owns the epoch. The failed batch moved the manager to
            # ABORTABLE_ERROR (on_batch_error); the abort's EndTxn bumps the epoch (KIP-890), or, from a
            # coordinator that does not bump, the abort asks InitProducerId for one (epoch_bump_required).
            # Until the identity changes the partition numbers nothing new (none may be sent anyway).
            if ps.seq_id is not None and ps.seq_id == (self.producer_id, self.producer_epoch) and (
                    ps.sequences is SequenceState.GAP or ps.acked_next != ps.next_seq):
                self._txn.epoch_bump_required = True
                return
            ps.seq_id = None
            ps.sequences = SequenceState.OK
            return
        if ps.sequences is SequenceState.GAP or ps.acked_next != ps.next_seq:
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
        ps.sequences = SequenceState.OK

    def _fail(self, b: ProducerBatch, err: BaseException, report: bool = True) -> None:
        """Fail ``b``'s records with ``err``. A transactional producer reports it to its manager
        (``on_batch_error``: abortable, or fatal for a fence) unless ``report`` is False (the
        manager's own undrained-batch failures, a closing producer)."""
        self.record_errors += len(b.records)
        self._incomplete.discard(b)
        b.complete(-1, -1, err)
        if b.parent is not None:
            self._child_done(b)
        txn = self._txn
        if report and txn is not None and isinstance(err, PylogError) and not self._node.closed:
            with self._lock:
                txn.on_batch_error(TopicPartition(b.topic, b.partition), err)
                self._after_txn_change_locked()
            self._txn_notify()

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


    # --------------------------------------------------------- transactions
    def _take_undrained_locked(self, fatal: bool) -> List[ProducerBatch]:
        """Under the lock: take out every batch never drained (no sequence: the open one, queued ones,
        renumbered retries) to be failed - Kafka's ``abortUndrainedBatches``; in FATAL_ERROR every
        batch not in flight (Kafka's ``abortBatches``: nothing more may be sent). O(batches)."""
        out: List[ProducerBatch] = []
        for parts in self._parts.values():
            for ps in parts:
                b = self._close_open(ps)
                if b is not None:
                    out.append(b)
                if ps.queue and (fatal or any(x.sequence < 0 for x in ps.queue)):
                    out.extend(x for x in ps.queue if fatal or x.sequence < 0)
                    ps.queue = deque(x for x in ps.queue if not fatal and x.sequence >= 0)
                if ps.retry and (fatal or any(x.sequence < 0 for x in ps.retry)):
                    out.extend(x for x in ps.retry if fatal or x.sequence < 0)
                    ps.retry = [x for x in ps.retry if not fatal and x.sequence >= 0]
                if ps.retry_mode and not ps.retry and not ps.inflight and not any(x.sequence >= 0 for x in ps.queue):
                    ps.retry_mode = False
        return out

    def _close_all_open_locked(self) -> None:
        """Under the lock: close every open batch (queued to be drained). Called when the transaction
        leaves IN_TRANSACTION, so that no open batch outlives it: the send fast paths (C and Python)
        append only to an open batch, whose partition ``send`` added to this transaction - any other
        send takes the slow path, which asks the manager (and raises outside a transaction)."""
        for parts in self._parts.values():
            for ps in parts:
                b = self._close_open(ps)
                if b is not None:
                    ps.queue.append(b)
                    self._dirty[ps] = None

    def _after_txn_change_locked(self) -> None:
        """Under the lock, after the manager may have changed: take its producer id and epoch, let every
        partition drain again (one may have joined the transaction), close the open batches once the
        transaction is no longer open, and wake the loop."""
        txn = self._txn
        assert txn is not None
        self.producer_id, self.producer_epoch = txn.producer_id, txn.producer_epoch
        if txn.state != TxnState.IN_TRANSACTION:
            self._close_all_open_locked()
        for parts in self._parts.values():
            self._dirty.update(dict.fromkeys(parts))
        self._wake_locked()

    def _txn_notify(self) -> None:
        """Wake the threads waiting for a transactional call's result."""
        with self._txn_cond:
            self._txn_cond.notify_all()

    def _txn_poll(self, now: int) -> None:
        """Loop thread: send the transaction manager's next request, if any (one at a time); arm a timer
        for its retry backoff. EndTxn waits until no batch is incomplete (the manager's rule)."""
        txn = self._txn
        node = self._node
        assert txn is not None
        if node.closed or not txn.has_pending_request():  # (the common case on a batch's wake-up)
            return
        with self._lock:
            corr = node.next_corr()
            req = txn.next_request(now, corr, bool(self._incomplete))
            pending = req is None and txn.has_pending_request() and not txn.request_in_flight
            retry_at = txn.retry_at_ms
            self.producer_id, self.producer_epoch = txn.producer_id, txn.producer_epoch
        self._txn_notify()  # next_request may have completed results (an EndTxn not needed, an error state)
        if req is None:
            if pending and retry_at > now and self._txn_timer_at != retry_at:
                self._txn_timer_at = retry_at
                self.scheduler.call_later(retry_at - now, self._on_txn_timer)
            return
        target = req.node
        if target == ANY_NODE:
            brokers = sorted(self._store.brokers)
            ctl = self._store.controller_id
            if self._txn_any == 0 and ctl is not None:
                target = ctl
            else:
                target = brokers[self._txn_any % len(brokers)] if brokers else 0
            self._txn_any += 1
        node.request(target, req.message, self.request_timeout_ms, partial(self._on_txn_response, corr), now)

    def _on_txn_timer(self) -> None:
        """The manager's retry backoff is over: try its request again (a timer that fired early arms
        a new one)."""
        self._txn_timer_at = -1
        self._wake()

    def _on_txn_response(self, corr: int, resp: Any) -> None:
        """Loop thread: the answer to a transactional request (None: none came) goes to the manager."""
        txn = self._txn
        assert txn is not None
        now = self.scheduler.clock.now_ms()
        with self._lock:
            if resp is None:
                txn.on_no_response(corr, now)
            else:
                txn.on_response(resp, now)
            self._after_txn_change_locked()
        self._txn_notify()


__all__ = ["Sender"]
