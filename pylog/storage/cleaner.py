"""The log cleaner: key-based compaction of ``cleanup_policy="compact"`` logs (Kafka's LogCleaner/Cleaner).

One clean of a log:

1. **Range.** The *dirty* section starts at the ``cleaner-offset-checkpoint``
   (or the log start) and ends at the *first uncleanable offset*: the lowest
   of the active segment's base, the caller's ``upper_bound`` (the high
   watermark / last stable offset: nothing that could still be truncated or
   aborted is cleaned), and the base of the first segment with a record
   younger than ``min_compaction_lag_ms``. Only whole segments are cleaned,
   so the bound is rounded down to a segment boundary.
2. **Offset map.** :func:`build_offset_map` maps every key in the dirty
   section to its latest offset (control batches and legacy messages are
   not compacted by key). The map holds at most ``max_map_entries`` keys; a
   segment that would overflow it ends the dirty section of this run.
3. **Filter.** Every segment from the log start to the end of the mapped
   section is rewritten, in groups of consecutive segments that fit in
   ``segment_bytes``, into ``<base>.log.cleaned``. A record survives when no
   later offset of its key is in the map; a record without a key is dropped
   (a compacted log refuses them on append, as Kafka's validator does); a
   tombstone (``value is None``) survives its first cleaning, which stamps
   its batch with a *delete horizon* of ``now + delete_retention_ms``
   (KIP-534: attribute bit 6, the horizon stored as the batch's base
   timestamp), and is dropped by the first cleaning at or after the horizon.
   Batches keep their base and last offsets, leader epoch, producer id,
   epoch and base sequence; a batch whose records were all removed is kept
   as an empty batch when it is its producer's last data batch (so the
   producer's sequence state survives), else dropped. Legacy (magic 0/1)
   messages are copied unchanged. Transactions (:class:`TxnCleaningState`,
   Kafka's CleanedTransactionMetadata): batches of aborted transactions (from
   the ``.txnindex``) lose their records and stay out of the offset map; a
   COMMIT/ABORT marker whose transaction has no batch left gets a delete
   horizon and goes after it; the cleaned ``.txnindex`` keeps only the
   entries of ABORT markers kept with data; nothing at or above the last
   stable offset is cleaned (docs/compaction.md, "Transactions"). A batch whose records
   all survive (and needs no horizon) is copied byte for byte; others are
   re-encoded with the same compression codec. Offsets never change.
4. **Swap.** Each cleaned group is fsynced and swapped in through
   :meth:`pylog.storage.log.Log.replace_segments` (``.cleaned`` ->
   ``.swap``; the old files -> ``.deleted``; ``.swap`` -> live), which a
   crash at any point leaves recoverable (see pylog/storage/loader.py).
5. **Checkpoint.** ``cleaner-offset-checkpoint`` records the end of the
   cleaned section.

Readers are unaffected by gaps: a read at an offset whose record was
removed returns the next batch (Log.read_batches, LogSegment.translate_offset).

Thread-safety: :meth:`Cleaner.clean` holds the log's lock for the whole
clean (appends wait). Complexity: O(bytes of the log below the first
uncleanable offset) per clean, plus a header scan of the whole log.
"""
from __future__ import annotations

import heapq
from typing import Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Set, Tuple, TypedDict

from pylog.errors import CorruptRecordError
from pylog.record import compression as codecs
from pylog.record import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchHeader,
    BatchInfo,
    Record,
    RecordBatch,
    scan,
)
from pylog.record.codec import decode_columns, spans
from pylog.record.framing import batch_length_of, seal
from pylog.record.oracle import py_record_bytes
from pylog.storage.control_record import ControlRecordType, parse_control_type
from pylog.storage.log import Log
from pylog.storage.segment import LogSegment
from pylog.storage.txn_index import AbortedTxn

_MAX_OFFSET_SPAN = 0x7FFFFFFF  # a segment's relative offsets are int32
_CHUNK = 4 * 1024 * 1024
_INT64_MAX = 2**63 - 1


class OffsetMap(NamedTuple):
    """Key -> latest offset over a dirty section, and the last offset mapped (-1 when none)."""

    offsets: Dict[bytes, int]
    latest_offset: int


class CleanResult(NamedTuple):
    """What one :meth:`Cleaner.clean` did (``cleaned`` False: nothing was due)."""

    topic: str
    partition: int
    cleaned: bool
    reason: str  # why it cleaned, or why not
    first_dirty_offset: int = 0
    end_offset: int = 0  # the new cleaner checkpoint (exclusive)
    segments_replaced: int = 0
    groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    empty_batches_kept: int = 0
    batches_removed: int = 0
    aborted_records_removed: int = 0  # records of aborted transactions (also counted in records_removed)
    markers_removed: int = 0  # COMMIT/ABORT control batches past their delete horizon


class _Where(TypedDict):
    topic: str
    partition: int


class _Counts(TypedDict):
    """The counters of one clean (fields of :class:`CleanResult`)."""

    bytes_read: int
    bytes_written: int
    records_read: int
    records_removed: int
    tombstones_removed: int
    empty_batches_kept: int
    batches_removed: int
    aborted_records_removed: int
    markers_removed: int


def delete_horizon(info: BatchInfo) -> Optional[int]:
    """The batch's delete horizon (ms) when attribute bit 6 is set, else None."""
    if info.magic == 2 and info.attributes & ATTR_DELETE_HORIZON:
        return info.base_timestamp
    return None


class TxnCleaningState:
    """Which batches of a clean belong to aborted transactions, and which markers may go
    (Kafka's ``CleanedTransactionMetadata``).

    Built from the aborted transactions of the cleaned range (the ``.txnindex``
    entries, :meth:`Log.aborted_transactions`) and fed every batch of the range in
    offset order: :meth:`on_batch` for a data batch (True: it belongs to an aborted
    transaction and its records go), :meth:`on_control` for a control batch (True:
    it may be discarded - once its delete horizon has passed). An ABORT marker may
    go once no batch of its transaction was seen in the range (all of them were
    removed by earlier cleans); a COMMIT marker likewise. The entries of the ABORT
    markers that stay are collected in :attr:`kept_entries` for the cleaned
    segments' ``.txnindex`` (an entry whose marker is removed must not survive it:
    a reader would take the producer as aborted with no marker to end it).

    Complexity: O(log n) per aborted transaction taken, O(1) per data batch, one
    record decode per control batch. Thread-safety: one clean, one thread.
    """

    __slots__ = ("_pending", "_aborted", "_committed", "kept_entries")

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending: List[Tuple[int, int, int, AbortedTxn]] = [
            (a.first_offset, a.last_offset, a.producer_id, a) for a in aborted]
        heapq.heapify(self._pending)
        #: producer id -> [its aborted transaction in progress, whether a batch of it was seen]
        self._aborted: Dict[int, List[object]] = {}
        self._committed: Set[int] = set()  # producers with a batch seen of a transaction not aborted
        self.kept_entries: List[AbortedTxn] = []

    def _take_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[3]
            self._aborted.setdefault(txn.producer_id, [txn, False])

    def on_batch(self, info: BatchInfo) -> bool:
        """A data batch: True when it belongs to an aborted transaction (Kafka's ``onBatchRead``)."""
        self._take_up_to(info.last_offset)
        if not info.attributes & ATTR_TRANSACTIONAL:
            return False
        entry = self._aborted.get(info.producer_id)
        if entry is not None:
            entry[1] = True
            return True
        self._committed.add(info.producer_id)
        return False

    def on_control(self, batch: RecordBatch) -> bool:
        """A control batch: True when it may be discarded (Kafka's ``onControlBatchRead``).

        Raises :class:`CorruptRecordError` for a malformed control key."""
        info = batch.info
        self._take_up_to(info.last_offset)
        records = batch.records()
        if not records:
            return True  # an empty control batch was cleaned already
        key = bytes(records[0].key) if records[0].key is not None else None
        kind = parse_control_type(key, path=batch.path, position=info.position, offset=info.base_offset)
        pid = info.producer_id
        if kind == ControlRecordType.ABORT:
            entry = self._aborted.pop(pid, None)
            if entry is not None and entry[1]:
                assert isinstance(entry[0], AbortedTxn)
                self.kept_entries.append(entry[0])  # data of it remains: marker and entry stay
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False  # another control type (LEADER_CHANGE, ...) is kept


def build_offset_map(batches: Iterable[RecordBatch], start: int = 0, end: Optional[int] = None,
                     txn: Optional[TxnCleaningState] = None) -> OffsetMap:
    """Map each key to its latest offset over the records in ``[start, end)``.

    A pure function of the batches (Kafka's Cleaner.buildOffsetMap with an
    exact dict instead of a hash table): control batches and legacy
    messages are skipped, records without a key too. Tombstones count: a
    tombstone supersedes the values before it. With ``txn`` (fed every batch),
    the records of aborted transactions are skipped too: an aborted record never
    shadows an older committed value of its key (Kafka's ``buildOffsetMapForSegment``).

    >>> from pylog.record import encode_batch, scan
    >>> b = encode_batch([Record(b"1", key=b"a"), Record(b"2", key=b"b"), Record(None, key=b"a")], now_ms=0)
    >>> info = scan(b).batches[0]
    >>> build_offset_map([RecordBatch(info, memoryview(b))])
    OffsetMap(offsets={b'a': 2, b'b': 1}, latest_offset=2)

    Complexity: O(records).
    """
    out: Dict[bytes, int] = {}
    latest = -1
    for batch in batches:
        if end is not None and batch.base_offset >= end:
            break
        if batch.magic != 2:
            continue
        if txn is not None:
            if batch.is_control:
                txn.on_control(batch)
                continue
            if txn.on_batch(batch.info):
                continue
        if batch.is_control or batch.last_offset < start:
            continue
        keys, offsets, _ = _key_columns(batch)
        for key, offset in zip(keys, offsets):
            if offset < start or (end is not None and offset >= end):
                continue
            if key is not None:
                out[key] = offset
                latest = offset
    return OffsetMap(out, latest)


def _key_columns(batch: RecordBatch) -> Tuple[List[Optional[bytes]], List[int], List[int]]:
    """Keys, absolute offsets and value lengths (-1: null) of a v2 batch's records,
    without building Record objects (one C call decodes the columns)."""
    info = batch.info
    data = batch.records_section()
    n = info.records_count
    cols = decode_columns(data, n, batch.path, info.position)
    if n == 0:
        return [], [], []
    keys = spans(data, cols.ints("key_pos"), cols.ints("key_len"))
    base = info.base_offset
    offsets = [base + d for d in cols.ints("offset_delta")]
    return keys, offsets, cols.ints("value_len")


def iter_segment_batches(seg: LogSegment, start_position: int = 0) -> Iterator[RecordBatch]:
    """Every batch of ``seg`` from ``start_position``, CRC-checked, read in chunks.

    Raises :class:`CorruptRecordError` naming the file and position for an
    invalid batch (a rolled segment never has a torn tail).
    """
    pos, size = start_position, seg.size
    while pos < size:
        chunk = seg.read(pos, min(_CHUNK, size - pos))
        found = scan(chunk, verify_crc=True)
        if not found.batches:
            if found.torn:
                head = seg.read(pos, LOG_OVERHEAD)
                if len(head) == LOG_OVERHEAD:
                    whole = seg.read(pos, batch_length_of(head) + LOG_OVERHEAD)
                    found = scan(whole, verify_crc=True, max_batches=1)
                    chunk = whole
            if not found.batches:
                raise CorruptRecordError(f"invalid batch while cleaning: {found.reason}", path=seg.log_path, position=pos)
        view = memoryview(chunk)
        for info in found.batches:
            yield RecordBatch(info._replace(position=pos + info.position), view[info.position : info.position + info.size],
                              seg.log_path)
        pos += found.valid_bytes


def _record_bytes(rec: Record, base_ts: int, base_offset: int) -> bytes:
    return py_record_bytes(rec, rec.timestamp - base_ts, rec.offset - base_offset)  # type: ignore[operator]


def _timestamp(r: Record) -> int:
    assert r.timestamp is not None  # a record read from a batch carries its timestamp
    return r.timestamp


def encode_retained(info: BatchInfo, records: List[Record], horizon: Optional[int]) -> bytearray:
    """Re-encode ``info``'s batch holding only ``records`` (Kafka's buildRetainedRecordsInto).

    Base and last offset, leader epoch, producer id/epoch, base sequence,
    timestamp type and the transactional/control bits are kept; the codec is
    kept too. With ``horizon`` the delete-horizon bit is set and the base
    timestamp holds it (record timestamps are deltas from it, so each record
    keeps its timestamp). With no records this is Kafka's empty batch header
    (``writeEmptyHeader``): no compression, timestamps = the max timestamp.
    """
    codec = info.attributes & ATTR_COMPRESSION_MASK
    keep_bits = ATTR_LOG_APPEND_TIME | ATTR_TRANSACTIONAL | ATTR_CONTROL
    if not records:
        attrs = info.attributes & keep_bits
        base_ts = max_ts = info.max_timestamp
        section = b""
    else:
        attrs = info.attributes & (keep_bits | ATTR_COMPRESSION_MASK)
        if horizon is not None:
            attrs |= ATTR_DELETE_HORIZON
            base_ts = horizon
        else:
            base_ts = _timestamp(records[0])
        if info.attributes & ATTR_LOG_APPEND_TIME:
            max_ts = info.max_timestamp
        else:
            max_ts = max(_timestamp(r) for r in records)
        raw = b"".join(_record_bytes(r, base_ts, info.base_offset) for r in records)
        section = codecs.compress(codec, raw) if codec != codecs.NONE else raw
    out = bytearray(BATCH_OVERHEAD + len(section))
    BatchHeader(
        info.base_offset, 0, info.partition_leader_epoch, 2, 0, attrs, info.last_offset - info.base_offset,
        base_ts, max_ts, info.producer_id, info.producer_epoch, info.base_sequence, len(records),
    ).pack_into(out)
    out[BATCH_OVERHEAD:] = section
    seal(out, "seal cleaned batch")
    return out


class _Filtered(NamedTuple):
    data: Optional[bytes]  # None: the batch is dropped
    removed: int
    tombstones_removed: int
    horizon: Optional[int]  # the delete horizon of a kept batch holding tombstones (or a discardable marker)
    empty_kept: bool
    aborted_removed: int = 0  # records removed because their transaction was aborted
    marker_removed: bool = False


def _is_producers_last(info: BatchInfo, producer_last_offsets: Mapping[int, int]) -> bool:
    return info.producer_id >= 0 and producer_last_offsets.get(info.producer_id) == info.last_offset


def _filter_control(batch: RecordBatch, now_ms: int, delete_retention_ms: int,
                    producer_last_offsets: Mapping[int, int], txn: Optional[TxnCleaningState]) -> _Filtered:
    """A control batch (Kafka's ``checkBatchRetention`` for markers): kept whole while its
    transaction has data in the log; once it has none, stamped with a delete horizon
    (``now + delete_retention_ms``, as a tombstone) and removed by the first clean at or after
    it - unless it is its producer's last batch (kept whole: see :func:`filter_batch`)."""
    info = batch.info
    whole = bytes(batch.buffer)
    if txn is None or not txn.on_control(batch) or _is_producers_last(info, producer_last_offsets):
        return _Filtered(whole, 0, 0, None, False)
    horizon = delete_horizon(info)
    if horizon is None:
        horizon = min(now_ms + delete_retention_ms, _INT64_MAX)
        data = encode_retained(info, batch.records(), horizon)
        return _Filtered(bytes(data), 0, 0, horizon, False)
    if now_ms < horizon:
        return _Filtered(whole, 0, 0, horizon, False)
    return _Filtered(None, 0, 0, None, False, 0, True)


def filter_batch(
    batch: RecordBatch,
    offset_map: Mapping[bytes, int],
    now_ms: int,
    delete_retention_ms: int,
    producer_last_offsets: Mapping[int, int],
    txn: Optional[TxnCleaningState] = None,
) -> _Filtered:
    """Kafka's record and batch retention rules for one batch (see the module docstring).

    With ``txn`` (fed every batch of the clean in offset order) a batch of an
    aborted transaction loses all its records and a marker whose transaction has
    no data left goes after its delete horizon. A batch that loses every record
    is kept empty when it is its producer's last data batch
    (``producer_last_offsets``: producer id -> that batch's last offset, or the
    last control batch's for a producer with no data batch left or whose last
    marker has a newer epoch - a fence), so the producer's last sequence and
    epoch survive. **Deviation:** Kafka empties such a
    control batch; pylog keeps it whole (the producer-state replay reads the marker
    of every control batch, and an empty one would not decode there).
    """
    info = batch.info
    if info.magic != 2:
        return _Filtered(bytes(batch.buffer), 0, 0, None, False)
    if batch.is_control:
        return _filter_control(batch, now_ms, delete_retention_ms, producer_last_offsets, txn)
    if txn is not None and txn.on_batch(info):
        n = info.records_count
        if _is_producers_last(info, producer_last_offsets):
            return _Filtered(bytes(encode_retained(info, [], None)), n, 0, None, True, n)
        return _Filtered(None, n, 0, None, False, n)
    horizon = delete_horizon(info)
    retain_deletes = horizon is None or now_ms < horizon
    keys, offsets, value_lens = _key_columns(batch)
    kept_idx: List[int] = []
    tombstones_removed = 0
    has_tombstones = False
    for i, key in enumerate(keys):
        if key is None:
            continue  # invalid in a compacted log (Kafka counts it and drops it)
        if offset_map.get(key, -1) > offsets[i]:
            continue
        if value_lens[i] < 0:
            if not retain_deletes:
                tombstones_removed += 1
                continue
            has_tombstones = True
        kept_idx.append(i)
    removed = len(keys) - len(kept_idx)
    kept: List[Record] = []
    if kept_idx and removed:
        records = batch.records()
        kept = [records[i] for i in kept_idx]
    if has_tombstones and horizon is None:
        horizon = min(now_ms + delete_retention_ms, _INT64_MAX)  # first cleaning of this tombstone: start its clock
        needs_horizon = True
    else:
        needs_horizon = False
    if kept_idx and not removed and not needs_horizon:
        return _Filtered(bytes(batch.buffer), 0, 0, horizon if has_tombstones else None, False)
    if kept_idx:
        if not kept:
            kept = batch.records()
        data = encode_retained(info, kept, horizon if (needs_horizon or info.attributes & ATTR_DELETE_HORIZON) else None)
        return _Filtered(bytes(data), removed, tombstones_removed, horizon if has_tombstones else None, False)
    if _is_producers_last(info, producer_last_offsets):
        return _Filtered(bytes(encode_retained(info, [], None)), removed, tombstones_removed, None, True)
    return _Filtered(None, removed, tombstones_removed, None, False)


def _first_timestamp(seg: LogSegment) -> Optional[int]:
    head = seg.read(0, BATCH_OVERHEAD)
    if len(head) < LOG_OVERHEAD:
        return None
    found = scan(head + b"", verify_crc=False, max_batches=1)
    if found.batches:
        return found.batches[0].max_timestamp
    whole = seg.read(0, batch_length_of(head) + LOG_OVERHEAD)
    found = scan(whole, verify_crc=False, max_batches=1)
    return found.batches[0].max_timestamp if found.batches else None


class Cleaner:
    """Compacts logs whose ``cleanup_policy`` includes ``compact``.

    ``max_map_entries`` bounds the offset map (Kafka's
    ``log.cleaner.dedupe.buffer.size``): one clean maps at most that many
    keys, and leaves the rest of the dirty section to the next run.

    Thread-safety: a Cleaner keeps no per-log state; one may serve many logs
    from one thread. Each clean holds that log's lock.
    """

    def __init__(self, *, max_map_entries: int = 4_000_000):
        if max_map_entries < 1:
            raise ValueError(f"max_map_entries must be >= 1, got {max_map_entries}")
        self.max_map_entries = max_map_entries

    # ---- what is due ------------------------------------------------------------
    def _bounds(self, log: Log, now_ms: int, upper_bound: Optional[int]) -> Tuple[int, int, List[int]]:
        """``(first dirty offset, end of cleanable section, bases of cleanable segments)``."""
        keys = list(log.segments.keys())
        cfg = log.config
        checkpoint = log.cleaner_checkpoint
        first_dirty = log.log_start_offset
        if checkpoint is not None and log.log_start_offset <= checkpoint <= log.log_end_offset:
            first_dirty = checkpoint
        limit = keys[-1]  # the active segment is never cleaned
        if upper_bound is not None:
            limit = min(limit, upper_bound)
        # never above the last stable offset (Kafka cleans below the first unstable offset): not the
        # first offset of an open transaction, nor of one whose marker is not below the high watermark
        # (upper_bound; none: the log end). Read without Log.last_stable_offset, which would forget
        # the transactions whose marker is below the bound given here.
        ps = log.producer_state
        hw = log.log_end_offset if upper_bound is None else min(upper_bound, log.log_end_offset)
        for first in ps.ongoing.values():
            limit = min(limit, first)
        for first, marker in ps.unreplicated:
            if marker >= hw:
                limit = min(limit, first)
        cleanable: List[int] = []
        for i in range(len(keys) - 1):
            nxt = keys[i + 1]
            if nxt > limit:
                break
            seg = log.segments[keys[i]]
            if cfg.min_compaction_lag_ms > 0 and nxt > first_dirty and seg.size and (
                seg.max_timestamp_so_far > now_ms - cfg.min_compaction_lag_ms
            ):
                break  # a record here is younger than min_compaction_lag_ms
            cleanable.append(keys[i])
        end = keys[len(cleanable)] if cleanable else min(keys[0], limit)
        return min(first_dirty, end), end, cleanable

    def dirty_ratio(self, log: Log, now_ms: int, upper_bound: Optional[int] = None) -> float:
        """Dirty bytes / (clean + dirty bytes) of the cleanable section (0.0 when empty)."""
        with log._lock:
            first_dirty, end, bases = self._bounds(log, now_ms, upper_bound)
            return self._ratio(log, first_dirty, bases)

    @staticmethod
    def _ratio(log: Log, first_dirty: int, bases: List[int]) -> float:
        keys = log.segments.keys()
        clean = dirty = 0
        for i, b in enumerate(bases):
            size = log.segments[b].size
            if keys[i + 1] <= first_dirty:
                clean += size
            else:
                dirty += size
        return dirty / (clean + dirty) if clean + dirty else 0.0

    def _horizon_due(self, log: Log, now_ms: int, bases: List[int], first_dirty: int) -> bool:
        horizon = log._cleaner_next_horizon
        if horizon == "unknown":
            horizon = None
            keys = log.segments.keys()
            for i, b in enumerate(bases):
                if keys[i + 1] > first_dirty:
                    break
                for batch in iter_segment_batches(log.segments[b]):
                    h = delete_horizon(batch.info)
                    if h is not None and (horizon is None or h < horizon):
                        horizon = h
            log._cleaner_next_horizon = horizon
        return horizon is not None and now_ms >= horizon

    # ---- the clean ------------------------------------------------------------------
    def clean(
        self,
        log: Log,
        now_ms: int,
        *,
        upper_bound: Optional[int] = None,
        force: bool = False,
        producer_last_offsets: Optional[Mapping[int, int]] = None,
    ) -> CleanResult:
        """Compact ``log`` if a clean is due (or ``force``); see the module docstring.

        Due when the dirty ratio exceeds ``min_cleanable_dirty_ratio``, or the
        oldest dirty record is older than ``max_compaction_lag_ms``, or a
        tombstone's delete horizon has passed. ``upper_bound`` is the first
        offset that must not be cleaned (the high watermark or last stable
        offset of a replicated partition). ``producer_last_offsets`` (producer
        id -> last offset of its last data batch) may come from the producer
        state; by default it is read from the batch headers of the whole log.

        Complexity: O(bytes below the cleanable end). Durability: every
        replaced group is fsynced and swapped crash-safely, then the cleaner
        checkpoint is written (atomically) before return. A disk error
        (EMFILE, ENOSPC, EIO) raises :class:`KafkaStorageError`: before the
        swap, the half-written ``.cleaned`` segment is removed and the log is
        as it was; during the swap, the log is closed and its next open
        finishes or discards the swap (:meth:`Log.replace_segments`).
        """
        try:
            return self._clean(log, now_ms, upper_bound=upper_bound, force=force,
                               producer_last_offsets=producer_last_offsets)
        except OSError as exc:
            raise log._storage_error(exc, "log cleaning") from exc

    def _clean(
        self,
        log: Log,
        now_ms: int,
        *,
        upper_bound: Optional[int],
        force: bool,
        producer_last_offsets: Optional[Mapping[int, int]],
    ) -> CleanResult:
        with log._lock:
            log._ensure_writable()
            base: _Where = dict(topic=log.topic, partition=log.partition)
            if not log.config.compact:
                return CleanResult(**base, cleaned=False, reason="cleanup_policy does not include compact")
            first_dirty, end, bases = self._bounds(log, now_ms, upper_bound)
            if not bases:
                return CleanResult(**base, cleaned=False, reason="no cleanable segment", first_dirty_offset=first_dirty,
                                   end_offset=end)
            ratio = self._ratio(log, first_dirty, bases)
            keys = log.segments.keys()
            dirty_bases = [b for i, b in enumerate(bases) if keys[i + 1] > first_dirty]
            reason = ""
            if force:
                reason = "forced"
            elif dirty_bases and ratio > log.config.min_cleanable_dirty_ratio:
                reason = f"dirty ratio {ratio:.3f} > {log.config.min_cleanable_dirty_ratio}"
            elif dirty_bases and (ts := _first_timestamp(log.segments[dirty_bases[0]])) is not None and (
                now_ms - ts > log.config.max_compaction_lag_ms
            ):
                reason = f"dirty records older than max_compaction_lag_ms={log.config.max_compaction_lag_ms}"
            elif self._horizon_due(log, now_ms, bases, first_dirty):
                reason = "a tombstone's delete horizon has passed"
            if not reason:
                return CleanResult(**base, cleaned=False, reason=f"dirty ratio {ratio:.3f} not above "
                                   f"{log.config.min_cleanable_dirty_ratio}", first_dirty_offset=first_dirty, end_offset=end)
            # -- the offset map over the dirty segments, bounded by max_map_entries
            offsets: Dict[bytes, int] = {}
            mapped_end = first_dirty if dirty_bases else end
            map_txn = TxnCleaningState(log.aborted_transactions(first_dirty, end)) if dirty_bases else None
            for b in dirty_bases:
                # One segment's keys at a time (memory: O(distinct keys), not O(bytes)); a
                # segment that could overflow the map waits for the next clean (Kafka).
                part = build_offset_map(iter_segment_batches(log.segments[b]), first_dirty, txn=map_txn)
                if offsets and len(offsets) + len(part.offsets) > self.max_map_entries:
                    break
                offsets.update(part.offsets)
                mapped_end = keys[keys.index(b) + 1]
            end = mapped_end
            bases = [b for i, b in enumerate(bases) if keys[i + 1] <= end]
            # -- the producers' last data batches (their empty batches are kept)
            if producer_last_offsets is None:
                producer_last_offsets = self._producer_last_offsets(log)
            # -- group and rewrite
            groups = self._group(log, bases)
            res: _Counts = dict(bytes_read=0, bytes_written=0, records_read=0, records_removed=0, tombstones_removed=0,
                       empty_batches_kept=0, batches_removed=0, aborted_records_removed=0, markers_removed=0)
            horizon_min: Optional[int] = None
            # one transaction state for every group, from the log start (Kafka's doClean)
            txn = TxnCleaningState(log.aborted_transactions(log.log_start_offset, end))
            for group in groups:
                new = log.new_cleaned_segment(group[0])
                kept_before = len(txn.kept_entries)
                try:
                    for b in group:
                        seg = log.segments[b]
                        res["bytes_read"] += seg.size
                        for batch in iter_segment_batches(seg):
                            res["records_read"] += batch.records_count
                            f = filter_batch(batch, offsets, now_ms, log.config.delete_retention_ms, producer_last_offsets,
                                             txn)
                            res["records_removed"] += f.removed
                            res["aborted_records_removed"] += f.aborted_removed
                            res["markers_removed"] += f.marker_removed
                            res["tombstones_removed"] += f.tombstones_removed
                            res["empty_batches_kept"] += f.empty_kept
                            if f.data is None:
                                res["batches_removed"] += 1
                                continue
                            if f.horizon is not None and (horizon_min is None or f.horizon < horizon_min):
                                horizon_min = f.horizon
                            info = batch.info
                            kept = scan(f.data, verify_crc=False, max_batches=1).batches[0]
                            new.append(f.data, info.last_offset, kept.max_timestamp, info.last_offset)
                            res["bytes_written"] += len(f.data)
                    # the cleaned .txnindex: the entries of the ABORT markers kept with data (an entry
                    # whose marker went must go too); fsynced by new.flush() before the swap
                    for entry in txn.kept_entries[kept_before:]:
                        new.txn_index.append(entry)
                    new.on_become_inactive()
                    new.flush()
                except BaseException:
                    try:
                        new.delete()
                    except OSError:
                        new.close()  # a .cleaned file left behind is removed on the next open
                    raise
                log.replace_segments([new], group, carry_txn_entries=False)
            log._cleaner_next_horizon = horizon_min
            log.set_cleaner_checkpoint(end)
            stats = log.cleaner_stats
            stats.runs += 1
            stats.bytes_read += res["bytes_read"]
            stats.bytes_written += res["bytes_written"]
            stats.records_removed += res["records_removed"]
            stats.tombstones_removed += res["tombstones_removed"]
            stats.last_clean_ms = now_ms
            return CleanResult(**base, cleaned=True, reason=reason, first_dirty_offset=first_dirty, end_offset=end,
                               segments_replaced=sum(len(g) for g in groups), groups=len(groups), **res)

    @staticmethod
    def _producer_last_offsets(log: Log) -> Dict[int, int]:
        """Producer id -> last offset of the batch a clean must keep for it (Kafka's
        ``isBatchLastRecordOfProducer``): its last data batch (its last sequence), or its last control
        batch when it has no data batch or that marker carries a newer epoch (a fence: the epoch is
        what refuses the zombie after a reload)."""
        data: Dict[int, Tuple[int, int]] = {}
        control: Dict[int, Tuple[int, int]] = {}

        def note(info: BatchInfo) -> None:
            if info.magic == 2 and info.producer_id >= 0:
                (control if info.attributes & ATTR_CONTROL else data)[info.producer_id] = (
                    info.last_offset, info.producer_epoch)

        for seg in log.segments.values():
            pos, size = 0, seg.size
            while pos < size:
                chunk = seg.read(pos, min(_CHUNK, size - pos))
                found = scan(chunk, verify_crc=False)
                for info in found.batches:
                    note(info)
                if not found.batches:
                    if found.torn:
                        head = seg.read(pos, LOG_OVERHEAD)
                        whole = (seg.read(pos, batch_length_of(head) + LOG_OVERHEAD)
                                 if len(head) == LOG_OVERHEAD else b"")
                        one = scan(whole, verify_crc=False, max_batches=1)
                        if one.batches:
                            note(one.batches[0])
                            pos += one.batches[0].size
                            continue
                    break
                pos += found.valid_bytes
        out = {pid: off for pid, (off, _) in data.items()}
        for pid, (off, epoch) in control.items():
            if pid not in data or epoch > data[pid][1]:
                out[pid] = off
        return out

    @staticmethod
    def _group(log: Log, bases: List[int]) -> List[List[int]]:
        """Consecutive segments whose total size fits ``segment_bytes`` and whose
        offsets fit one segment's int32 relative offsets (Kafka's groupSegmentsBySize)."""
        keys = log.segments.keys()
        groups: List[List[int]] = []
        limit = log.config.segment_bytes
        for i, b in enumerate(bases):
            size = log.segments[b].size
            nxt = keys[i + 1]
            if groups:
                g = groups[-1]
                total = sum(log.segments[x].size for x in g) + size
                if total <= limit and nxt - 1 - g[0] <= _MAX_OFFSET_SPAN:
                    g.append(b)
                    continue
            groups.append([b])
        return groups


__all__ = ["Cleaner", "CleanResult", "OffsetMap", "TxnCleaningState", "build_offset_map", "filter_batch", "encode_retained", "delete_horizon",
           "iter_segment_batches", "ATTR_DELETE_HORIZON"]
