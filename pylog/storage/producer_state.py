"""Idempotent-producer state of one partition (Kafka's ``ProducerStateManager``) and its ``.snapshot`` files.

For every producer id the leader keeps its epoch and the metadata of the
producer's last :data:`NUM_BATCHES_TO_RETAIN` batches (first/last sequence,
first/last offset, max timestamp). A client batch is then:

* a **duplicate** when its ``(first_seq, last_seq)`` equals a retained batch
  of the same epoch: the append is skipped and the original offsets are
  returned as success (what a retry after a lost acknowledgement gets);
* refused with :class:`InvalidProducerEpochError` when its epoch is older
  than the producer's current epoch (a fenced zombie);
* refused with :class:`OutOfOrderSequenceError` when its epoch is newer but
  its first sequence is not 0, or when (same epoch) it does not follow the
  last sequence (``last + 1``, wrapping from 2**31-1 to 0);
* otherwise accepted; after the log append :meth:`ProducerStateManager.update`
  records it. A producer the partition has no state for may start at any
  sequence (its state may have expired), as in Kafka.

The partition's :class:`pylog.storage.log.Log` owns this state, as Kafka's
``UnifiedLog`` owns its ``ProducerStateManager``: it validates a client batch
(:meth:`ProducerStateManager.validate`) on a leader append, records every
batch it writes (:meth:`ProducerStateManager.append`, leader and follower
alike, so a new leader deduplicates too), snapshots at every roll, reloads
on truncation and rebuilds from the newest snapshot plus the log after a
restart. Nothing above storage feeds it.

Snapshot files (Kafka's format, research §2.7), ``<offset:020d>.snapshot`` in
the partition directory, ``offset`` being the log end offset the state covers
(every batch below it, none above)::

    version  int16 = 1
    crc      uint32   CRC-32C over bytes [6, end)
    count    int32
    count x 46-byte entries:
        producerId i64, epoch i16, lastSequence i32, lastOffset i64,
        offsetDelta i32 (lastSeq - firstSeq of the last batch), timestamp i64,
        coordinatorEpoch i32 (-1), currentTxnFirstOffset i64 (-1)

Transactions (Kafka's ``ProducerAppendInfo``/``ProducerStateManager``): a
transactional batch (attributes bit 0x10) begins the producer's ongoing
transaction at its base offset, or extends it; a control batch (0x20) holding
a COMMIT/ABORT marker (:class:`EndTransactionMarker`) ends it. A leader
refuses a non-transactional batch, and a transactional one of another epoch,
from a producer whose transaction is ongoing (:class:`InvalidTxnStateError`),
and a marker of an older producer epoch (:class:`InvalidProducerEpochError`)
or an older coordinator epoch (:class:`TransactionCoordinatorFencedError`);
replicated batches are taken as they come. Ending an aborted, non-empty
transaction reports an :class:`AbortedTxn` to :attr:`ProducerStateManager.on_abort`
(the log appends it to the ``.txnindex``) with the last stable offset at that
moment: the first offset of another producer's ongoing transaction, else the
marker's offset + 1 (Kafka's ``lastStableOffset(completedTxn)``). Completed
transactions stay *unreplicated* until a high watermark passed to
:meth:`ProducerStateManager.last_stable_offset` passes their marker.

The snapshot keeps the ongoing transactions: Kafka's version-1 entry already
has ``coordinatorEpoch`` and ``currentTxnFirstOffset``, which pylog wrote as
-1 before transactions existed, so older snapshots load unchanged (no
ongoing transaction) and no new version was needed. A producer known only
from a marker (no batch) is written with lastSequence and lastOffset -1.

A snapshot keeps only each producer's *last* batch (as Kafka's does), so
after a restart a retry of that last batch is still recognised, and the
sequence check continues from it; the older retained batches come back only
from replaying the log after the snapshot. A snapshot that fails its CRC or
length check is ignored (logged) and the state is rebuilt from the previous
snapshot, or from the start of the log.

Complexity: O(1) per batch check/update; snapshot write O(producers); a
rebuild reads the batch headers after the snapshot.
Durability: snapshots are written atomically (temp + fsync + rename) through
the log's :class:`FileIO`; the in-memory state is rebuilt on open.
Thread-safety: none; the owning Log calls it under its lock.
"""
from __future__ import annotations

import logging
import os
import struct
from collections import deque
from typing import Callable, Deque, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from pylog._native import crc32c
from pylog.errors import (
    CorruptRecordError, InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pylog.storage.control_record import EndTransactionMarker
from pylog.storage.fileio import FileIO
from pylog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
#: Kafka's ``producer.id.expiration.ms`` default (1 day) and its check interval (10 minutes)
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
assert _HEADER.size == 10 and _ENTRY.size == 46
_INT32_MAX = 0x7FFFFFFF
#: RecordBatch attribute bits
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20


class ProducerBatch(NamedTuple):
    """What the log tells the producer state about one batch it appended (or is about to).

    The log builds one from the batch header it validated (no second parse):
    :meth:`ProducerStateManager.validate` checks a client batch against it
    before the write, :meth:`ProducerStateManager.append` records it after.
    ``attributes`` carries the header's transactional (0x10) and control
    (0x20) bits: an ongoing-transaction table, the last stable offset and
    the aborted-transaction index will read them here, in these two calls,
    without a new shape (today both ignore them; a control batch has no
    base sequence, so it changes nothing).
    """

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    attributes: int = 0
    #: a control batch's COMMIT/ABORT marker (None for data batches and other control types)
    marker: Optional[EndTransactionMarker] = None

    @property
    def last_sequence(self) -> int:
        return (self.base_sequence + self.last_offset - self.base_offset) & _INT32_MAX

    @property
    def is_idempotent(self) -> bool:
        """The batch carries a producer id and a sequence (what the state tracks)."""
        return self.producer_id >= 0 and self.base_sequence >= 0


class BatchMetadata(NamedTuple):
    """One retained batch of a producer."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    """State of one producer id: epoch and last batches (oldest first)."""

    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "txn_first_offset")

    def __init__(self, producer_id: int, epoch: int):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: Deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        #: epoch of the coordinator that wrote this producer's last marker (-1: none)
        self.coordinator_epoch = -1
        #: first offset of the producer's ongoing transaction (-1: none)
        self.txn_first_offset = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def __repr__(self) -> str:
        return (f"ProducerEntry(pid={self.producer_id}, epoch={self.epoch}, batches={list(self.batches)}, "
                f"coordinator_epoch={self.coordinator_epoch}, txn_first_offset={self.txn_first_offset})")


def last_sequence(first_seq: int, count: int) -> int:
    """The sequence of the last record of a batch of ``count`` records (wrapping at 2**31-1)."""
    return (first_seq + count - 1) & _INT32_MAX


def in_sequence(last_seq: int, first_seq: int) -> bool:
    """``first_seq`` follows ``last_seq`` (Kafka's ``inSequence``)."""
    return first_seq == last_seq + 1 or (first_seq == 0 and last_seq == _INT32_MAX)


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: Iterable[ProducerEntry]) -> bytes:
    """Kafka's ``.snapshot`` bytes for ``entries`` (each producer's last batch)."""
    body = bytearray()
    n = 0
    for e in entries:
        if e.batches:
            b = e.batches[-1]
            body += _ENTRY.pack(e.producer_id, e.epoch, b.last_seq, b.last_offset, b.last_offset - b.first_offset,
                                b.timestamp, e.coordinator_epoch, e.txn_first_offset)
        elif e.txn_first_offset >= 0 or e.coordinator_epoch >= 0:  # known from a marker only
            body += _ENTRY.pack(e.producer_id, e.epoch, NO_SEQUENCE, -1, 0, -1, e.coordinator_epoch,
                                e.txn_first_offset)
        else:
            continue
        n += 1
    tail = struct.pack(">i", n) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(tail)) + tail


def decode_snapshot(data: bytes, path: str = "<snapshot>") -> List[ProducerEntry]:
    """Parse ``.snapshot`` bytes; raises :class:`CorruptRecordError` naming ``path`` when invalid."""
    if len(data) < _HEADER.size:
        raise CorruptRecordError(f"producer snapshot {path}: {len(data)} bytes, shorter than its 10-byte header",
                                 path=path, position=0)
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptRecordError(f"producer snapshot {path}: version {version}, expected {SNAPSHOT_VERSION}",
                                 path=path, position=0)
    if crc32c(memoryview(data)[6:]) != crc:
        raise CorruptRecordError(f"producer snapshot {path}: CRC mismatch", path=path, position=2)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptRecordError(
            f"producer snapshot {path}: {len(data)} bytes do not hold {count} entries of 46 bytes",
            path=path, position=6)
    out = []
    for i in range(count):
        pid, epoch, last_seq, last_off, delta, ts, coord, txn = _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
        if txn < -1:
            raise CorruptRecordError(f"producer snapshot {path}: entry {i} has transaction first offset {txn}",
                                     path=path, position=_HEADER.size + i * _ENTRY.size)
        if last_seq == NO_SEQUENCE and last_off == -1:  # a producer known from a marker only
            e = ProducerEntry(pid, epoch)
            e.coordinator_epoch, e.txn_first_offset = coord, txn
            out.append(e)
            continue
        if delta < 0 or last_off < delta:
            raise CorruptRecordError(f"producer snapshot {path}: entry {i} has offset delta {delta}",
                                     path=path, position=_HEADER.size + i * _ENTRY.size)
        e = ProducerEntry(pid, epoch)
        e.coordinator_epoch, e.txn_first_offset = coord, txn
        first_seq = last_seq - delta if last_seq >= delta else last_seq - delta + _INT32_MAX + 1
        e.batches.append(BatchMetadata(first_seq, last_seq, last_off - delta, last_off, ts))
        out.append(e)
    return out


class ProducerStateManager:
    """Producer state of the partition in ``directory`` (see the module docstring).

    ``map_end_offset`` is the log end offset the in-memory state covers.
    """

    def __init__(self, directory: str, io: Optional[FileIO] = None, *, no_snapshots: bool = False):
        """``no_snapshots``: the caller knows ``directory`` holds no snapshot file (it has just
        created it), so :meth:`snapshot_offsets` answers without listing it until this manager
        writes or deletes a snapshot (then it lists again). Snapshots written in the directory by
        another object while this one lives would go unseen: the log owns its one manager."""
        self.dir = directory
        self.io = io or FileIO()
        #: the snapshot offsets when known without a listing (a new directory: none), else None
        self._known_snapshots: Optional[List[int]] = [] if no_snapshots else None
        self.producers: Dict[int, ProducerEntry] = {}
        self.map_end_offset = 0
        self.snapshots_written = 0
        self.corrupt_snapshots = 0
        self.expired_producers = 0
        #: producer id -> first offset of its ongoing transaction (Kafka's ``ongoingTxns``)
        self.ongoing: Dict[int, int] = {}
        #: (first offset, marker offset) of completed transactions whose marker may be above the
        #: high watermark, in marker order (Kafka's ``unreplicatedTxns``)
        self.unreplicated: Deque[Tuple[int, int]] = deque()
        #: called with each aborted non-empty transaction as its marker is recorded (the log's .txnindex)
        self.on_abort: Optional[Callable[[AbortedTxn], None]] = None
        #: True while :meth:`load` replays the log (the aborts it reports are already in the log)
        self.loading = False

    # --------------------------------------------------------------- checks
    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
              transactional: bool = False) -> Optional[BatchMetadata]:
        """Validate a client batch before it is appended.

        Returns the retained :class:`BatchMetadata` when the batch is a duplicate
        (do not append; answer with its offsets), None when it may be appended.
        Raises InvalidProducerEpochError or OutOfOrderSequenceError, and
        InvalidTxnStateError for a non-transactional batch (or a transactional
        one of another epoch) while the producer's transaction is ongoing.
        """
        e = self.producers.get(producer_id)
        if e is None:
            return None
        if epoch < e.epoch:
            raise InvalidProducerEpochError(
                f"{self._where()}: producer {producer_id} epoch {epoch} is older than the current epoch {e.epoch}")
        if e.txn_first_offset >= 0 and (not transactional or epoch != e.epoch):
            if epoch == e.epoch:
                for b in e.batches:
                    if b.first_seq == first_seq and b.last_seq == last_seq:
                        return b
            what = "a non-transactional batch" if not transactional else f"a transactional batch of epoch {epoch}"
            raise InvalidTxnStateError(
                f"{self._where()}: producer {producer_id} sent {what} while its transaction of epoch {e.epoch} "
                f"begun at offset {e.txn_first_offset} is ongoing")
        if epoch != e.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"{self._where()}: producer {producer_id} new epoch {epoch} starts at sequence {first_seq}, "
                    f"expected 0")
            return None
        batches = e.batches
        last = batches[-1].last_seq if batches else NO_SEQUENCE
        if first_seq == last + 1 and last_seq > last:
            # The usual batch: the next sequence, not wrapping. No retained batch can repeat it
            # (they end at ``last`` and span far less than 2**31 sequences).
            return None
        for b in batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        if last != NO_SEQUENCE and not in_sequence(last, first_seq):
            raise OutOfOrderSequenceError(
                f"{self._where()}: producer {producer_id} epoch {epoch} sent sequence {first_seq}..{last_seq}, "
                f"expected {0 if last == _INT32_MAX else last + 1}")
        return None

    def validate(self, batch: ProducerBatch) -> Optional[BatchMetadata]:
        """A leader's check of a client batch before it is written (Kafka's
        ``analyzeAndValidateProducerState`` for origin CLIENT): the retained
        :class:`BatchMetadata` when it is a duplicate (do not write it; answer
        with those offsets), None when it may be written. A batch without a
        producer id or sequence is never a duplicate. Raises
        InvalidProducerEpochError or OutOfOrderSequenceError. Complexity: O(1).
        """
        if batch.producer_id < 0 or batch.base_sequence < 0:
            return None
        return self.check(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence,
                          bool(batch.attributes & TRANSACTIONAL_BIT))

    def validate_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A leader's check of a COMMIT/ABORT marker before it is written (Kafka's
        ``appendEndTxnMarker`` for origin COORDINATOR): raises InvalidProducerEpochError when
        ``producer_epoch`` is older than the producer's, TransactionCoordinatorFencedError when
        ``coordinator_epoch`` is older than the last marker's. Complexity: O(1)."""
        e = self.producers.get(producer_id)
        if e is None:
            return
        if producer_epoch < e.epoch:
            raise InvalidProducerEpochError(
                f"{self._where()}: transaction marker for producer {producer_id} has epoch {producer_epoch}, "
                f"older than the current epoch {e.epoch}")
        if coordinator_epoch < e.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"{self._where()}: transaction marker for producer {producer_id} has coordinator epoch "
                f"{coordinator_epoch} (zombie), older than {e.coordinator_epoch} (current)")

    def append(self, batches: Iterable[ProducerBatch], end_offset: int) -> None:
        """Record batches the log has just written (leader or follower), in log order, and move
        ``map_end_offset`` to ``end_offset`` (the new log end). Complexity: O(batches)."""
        update = self.update
        for pid, epoch, seq, base, last, ts, attributes, marker in batches:
            if attributes & 0x30:
                self._append_txn(pid, epoch, seq, base, last, ts, attributes, marker)
            elif pid >= 0 and seq >= 0:
                update(pid, epoch, seq, (seq + last - base) & _INT32_MAX, base, last, ts)
        if end_offset > self.map_end_offset:
            self.map_end_offset = end_offset

    def _append_txn(self, pid: int, epoch: int, seq: int, base: int, last: int, ts: int, attributes: int,
                    marker: Optional[EndTransactionMarker]) -> None:
        """Record a transactional data batch or a control batch (see the module docstring)."""
        if pid < 0:
            return
        if attributes & CONTROL_BIT:
            if marker is not None:
                self.complete_txn(pid, epoch, marker, base)
            if last + 1 > self.map_end_offset:
                self.map_end_offset = last + 1
            return
        if seq >= 0:
            self.update(pid, epoch, seq, (seq + last - base) & _INT32_MAX, base, last, ts)
        e = self.producers.get(pid)
        if e is None:
            e = self.producers[pid] = ProducerEntry(pid, epoch)
        if e.epoch == epoch and e.txn_first_offset < 0:
            e.txn_first_offset = base
            self.ongoing[pid] = base
        if last + 1 > self.map_end_offset:
            self.map_end_offset = last + 1

    def complete_txn(self, pid: int, epoch: int, marker: EndTransactionMarker, offset: int) -> Optional[AbortedTxn]:
        """Record the marker at ``offset`` ending ``pid``'s transaction; returns the
        :class:`AbortedTxn` (also given to :attr:`on_abort`) when it aborted a non-empty one.
        A marker of an older epoch (replicated) is recorded too, as Kafka's replica does."""
        e = self.producers.get(pid)
        if e is None:
            e = self.producers[pid] = ProducerEntry(pid, epoch)
        first = e.txn_first_offset
        if epoch > e.epoch:
            e.epoch = epoch
            e.batches.clear()
        e.txn_first_offset = -1
        e.coordinator_epoch = marker.coordinator_epoch
        if first < 0:
            return None  # an empty transaction: no effect on the LSO nor the index
        self.ongoing.pop(pid, None)
        self.unreplicated.append((first, offset))
        if marker.committed:
            return None
        lso = min(self.ongoing.values(), default=offset + 1)
        txn = AbortedTxn(pid, first, offset, lso)
        if self.on_abort is not None:
            self.on_abort(txn)
        return txn

    @property
    def first_unstable_offset(self) -> Optional[int]:
        """The first offset of the oldest ongoing transaction, None when none is. O(ongoing)."""
        return min(self.ongoing.values(), default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        """min(``high_watermark``, first offset of every ongoing transaction and of every completed one
        whose marker is at or above ``high_watermark``). Forgets completed transactions whose marker
        is below it (Kafka's ``onHighWatermarkUpdated``). Complexity: O(ongoing + unreplicated)."""
        unrep = self.unreplicated
        while unrep and unrep[0][1] < high_watermark:
            unrep.popleft()
        lso = high_watermark
        for first in self.ongoing.values():
            if first < lso:
                lso = first
        for first, _ in unrep:
            if first < lso:
                lso = first
        return lso

    def _rebuild_ongoing(self) -> None:
        self.ongoing = {pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset >= 0}

    def keep_below(self, end_offset: int) -> None:
        """Last resort when the log cannot be read back: forget every retained batch at or above
        ``end_offset`` (and producers left with none); ``map_end_offset`` becomes ``end_offset``.
        Deduplication may then miss a batch below it, never invent one. Complexity: O(producers)."""
        for pid in list(self.producers):
            entry = self.producers[pid]
            kept = [b for b in entry.batches if b.last_offset < end_offset]
            entry.batches.clear()
            entry.batches.extend(kept)
            if entry.txn_first_offset >= end_offset:
                entry.txn_first_offset = -1
            if not kept and entry.txn_first_offset < 0:
                del self.producers[pid]
        self._rebuild_ongoing()
        self.unreplicated = deque(t for t in self.unreplicated if t[1] < end_offset)
        self.map_end_offset = end_offset

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               last_offset: int, timestamp: int) -> None:
        """Record an appended (or replicated) batch; a newer epoch replaces the producer's batches."""
        if producer_id < 0:
            return
        e = self.producers.get(producer_id)
        if e is None:
            e = self.producers[producer_id] = ProducerEntry(producer_id, epoch)
        elif epoch > e.epoch:
            e.epoch = epoch
            e.batches.clear()
        elif epoch < e.epoch:
            return  # a replicated batch of a fenced epoch changes nothing (Kafka only warns)
        e.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        if last_offset + 1 > self.map_end_offset:
            self.map_end_offset = last_offset + 1

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> List[int]:
        """Forget producers whose last batch is ``expiration_ms`` or more older than ``now_ms`` (Kafka's
        ``producer.id.expiration.ms``, KIP-854); returns their ids, ascending.

        "Last write" is the last batch's max timestamp, as Kafka's ``ProducerStateEntry.lastTimestamp``
        (the producer's clock with CreateTime). A forgotten producer that writes again is treated as a
        new one: any sequence is accepted (see :meth:`check`). Later snapshots no longer list it.
        Complexity: O(producers).
        """
        gone = sorted(pid for pid, e in self.producers.items()
                      if e.batches and e.txn_first_offset < 0 and now_ms - e.batches[-1].timestamp >= expiration_ms)
        for pid in gone:
            del self.producers[pid]
        self.expired_producers += len(gone)
        return gone

    def update_from_infos(self, infos: Iterable[object]) -> None:
        """Record every idempotent batch in ``infos`` (:class:`BatchInfo`); advances ``map_end_offset``."""
        for b in infos:
            pid = b.producer_id  # type: ignore[attr-defined]
            if pid >= 0 and b.base_sequence >= 0:  # type: ignore[attr-defined]
                first = b.base_sequence  # type: ignore[attr-defined]
                self.update(pid, b.producer_epoch, first,  # type: ignore[attr-defined]
                            last_sequence(first, b.last_offset - b.base_offset + 1),  # type: ignore[attr-defined]
                            b.base_offset, b.last_offset, b.max_timestamp)  # type: ignore[attr-defined]
            end = b.last_offset + 1  # type: ignore[attr-defined]
            if end > self.map_end_offset:
                self.map_end_offset = end

    # ------------------------------------------------------------ snapshots
    def _where(self) -> str:
        return os.path.basename(self.dir)

    def snapshot_offsets(self) -> List[int]:
        """Offsets of the snapshot files present, ascending. O(files in the directory): one
        listing, none while the directory is known to hold no snapshot (``no_snapshots``)."""
        if self._known_snapshots is not None:
            return list(self._known_snapshots)
        out = []
        for n in self.io.listdir(self.dir) if self.io.exists(self.dir) else []:
            if n.endswith(SNAPSHOT_SUFFIX) and len(n) == 20 + len(SNAPSHOT_SUFFIX) and n[:20].isdigit():
                out.append(int(n[:20]))
        return sorted(out)

    def take_snapshot(self, keep: int = 2) -> str:
        """Write the state as ``<map_end_offset>.snapshot``; keep the newest ``keep`` snapshots."""
        path = os.path.join(self.dir, snapshot_name(self.map_end_offset))
        self._known_snapshots = None
        self.io.write_file_atomic(path, encode_snapshot(self.producers.values()))
        self.snapshots_written += 1
        offsets = self.snapshot_offsets()
        for off in offsets[:-keep] if keep > 0 else []:
            self._delete_snapshot(off)
        return path

    def _delete_snapshot(self, offset: int) -> None:
        self._known_snapshots = None
        try:
            self.io.unlink(os.path.join(self.dir, snapshot_name(offset)))
        except FileNotFoundError:
            pass

    def delete_snapshots_above(self, offset: int) -> None:
        """Remove snapshots covering more than ``offset`` (after a truncation to ``offset``), durably:
        the directory is fsynced when one was removed, so a crash cannot bring back a snapshot of
        records the log no longer has (or has different ones at those offsets)."""
        removed = False
        for off in self.snapshot_offsets():
            if off > offset:
                self._delete_snapshot(off)
                removed = True
        if removed:
            self.io.fsync_dir(self.dir)

    def load(self, log_start_offset: int, log_end_offset: int,
             read_batches: Callable[[int, int], Sequence[ProducerBatch]]) -> None:
        """Rebuild: the newest valid snapshot at or below ``log_end_offset``, then replay the log after it.

        ``read_batches(start, end)`` returns the :class:`ProducerBatch` of every batch in
        ``[start, end)`` (the caller reads its log; control batches with their marker). The
        replay reports the aborted transactions it meets to :attr:`on_abort` again (the log
        adds those its ``.txnindex`` lacks). Snapshots above the log end
        (written before a truncation or an unflushed crash) are deleted; a corrupt
        one is deleted, logged and skipped.
        """
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = deque()
        self.map_end_offset = log_start_offset
        self.delete_snapshots_above(log_end_offset)
        for off in reversed(self.snapshot_offsets()):
            path = os.path.join(self.dir, snapshot_name(off))
            if off < log_start_offset:
                break
            try:
                entries = decode_snapshot(self.io.read_file(path), path)
            except (CorruptRecordError, OSError) as exc:
                self.corrupt_snapshots += 1
                log.warning("ignoring producer snapshot %s (%s); rebuilding from the log", path, exc)
                self._delete_snapshot(off)
                continue
            self.producers = {e.producer_id: e for e in entries}
            self._rebuild_ongoing()
            self.map_end_offset = off
            break
        if self.map_end_offset < log_end_offset:
            self.loading = True
            try:
                self.append(read_batches(self.map_end_offset, log_end_offset), log_end_offset)
            finally:
                self.loading = False
        self.map_end_offset = log_end_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int,
                            read_batches: Callable[[int, int], Sequence[ProducerBatch]]) -> None:
        """After the log was truncated to ``log_end_offset``: drop later snapshots, rebuild."""
        self.delete_snapshots_above(log_end_offset)
        self.load(log_start_offset, log_end_offset, read_batches)

    def clear(self, offset: int) -> None:
        """The log was emptied and restarts at ``offset``: forget every producer and snapshot (memory
        first: when a snapshot cannot be deleted, the state is still empty)."""
        self.reset_memory(offset)
        for off in self.snapshot_offsets():
            self._delete_snapshot(off)

    def reset_memory(self, offset: int) -> None:
        """Forget every producer and transaction; the state covers nothing below ``offset``."""
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = deque()
        self.map_end_offset = offset

    def _check(self) -> None:
        for pid, e in self.producers.items():
            assert pid == e.producer_id and len(e.batches) <= NUM_BATCHES_TO_RETAIN
            offs = [b.first_offset for b in e.batches]
            assert offs == sorted(offs), e
            for b in e.batches:
                assert b.first_offset <= b.last_offset < self.map_end_offset, (e, self.map_end_offset)
            assert self.ongoing.get(pid, -1) == e.txn_first_offset, (e, self.ongoing)
            assert e.txn_first_offset < self.map_end_offset, (e, self.map_end_offset)
        assert set(self.ongoing) <= set(self.producers), self.ongoing


__all__ = [
    "ProducerStateManager", "ProducerBatch", "ProducerEntry", "BatchMetadata", "NUM_BATCHES_TO_RETAIN", "encode_snapshot",
    "decode_snapshot", "snapshot_name", "in_sequence", "last_sequence", "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS",
]
