"""The segments of one partition: the map, roll, reads and deletion (Kafka's ``LocalLog``).

:class:`LocalLog` knows the ``.log``/``.index``/``.timeindex`` files of one
partition directory and nothing of what the records mean: it holds the sorted
map of :class:`~pylog.storage.segment.LogSegment` (base offset -> segment),
creates a segment at a roll, serves reads (:meth:`LocalLog.read_batches`,
:meth:`LocalLog.read`, :meth:`LocalLog.get`, :meth:`LocalLog.fetch`,
:meth:`LocalLog.offset_for_time`), deletes old segments and swaps cleaned
ones in. :class:`pylog.storage.log.Log` (Kafka's ``UnifiedLog``) builds on it
and adds what gives the segments their meaning: offsets and the log end, the
append pipeline, the leader-epoch cache, the producer state, the recovery
point and flush policy, recovery on open, retention and truncation.

``Log`` extends ``LocalLog`` (rather than holding one, as Kafka's UnifiedLog
does) so that its public attributes - ``log.segments``, ``log.active_segment``
and the read methods - stay where callers and the cleaner find them; the
module boundary is the split. Reads take the log's lock (``_lock``, set by
``Log``), so one object may be shared by threads.

Durability: reads change nothing; :meth:`LocalLog._roll_segment` fsyncs the
rolled segment and the directory before the new segment is used;
:meth:`LocalLog.replace_segments` is crash-safe at every step (its docstring).
Complexity: a read is O(log segments + log index entries + bytes read).
Thread-safety: every public method takes the log's lock.
"""
from __future__ import annotations

import bisect
import logging
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, NoReturn, Optional, Sequence, Tuple

from pylog.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidConfigurationError,
    KafkaStorageError,
    LogClosedError,
    OffsetOutOfRangeError,
)
from pylog.storage.fileio import FileIO
from pylog.storage.loader import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from pylog.storage.reader import records_of_chunk
from pylog.record import BatchInfo, Record, RecordBatch, scan
from pylog.record.framing import batch_length_of
from pylog.storage.segment import LogSegment
from pylog.storage.segment_cache import SegmentCache

_logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from sortedcontainers import SortedDict

    from pylog.storage.log_config import LogConfig



class LocalLog:
    """The segment map of one partition directory, its reads, rolls and deletions (see the module docstring)."""

    # Set by Log.open (the subclass): the files, settings and bounds these methods work on.
    dir: str
    topic: str
    partition: int
    io: FileIO
    config: "LogConfig"
    read_only: bool
    clock_ms: Callable[[], int]
    segments: "SortedDict[int, LogSegment]"
    log_start_offset: int
    log_end_offset: int
    _lock: threading.RLock
    _closed: bool
    _segment_cache: SegmentCache

    def abandon(self) -> None:  # pragma: no cover - Log implements it
        raise NotImplementedError

    @property
    def active_segment(self) -> LogSegment:
        seg: LogSegment = self.segments.peekitem(-1)[1]
        return seg

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments.values())

    @property
    def closed(self) -> bool:
        return self._closed

    def _ensure_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.dir} is closed")

    def _ensure_writable(self) -> None:
        self._ensure_open()
        if self.read_only:
            raise KafkaStorageError(f"log {self.dir} was opened read_only")

    def _keeps_open(self) -> Optional[LogSegment]:
        """The segment the open-segment cache never releases: the active one (None while loading)."""
        segs = self.__dict__.get("segments")
        return segs.peekitem(-1)[1] if segs else None

    def _new_segment(self, base_offset: int, *, in_new_directory: bool = False) -> LogSegment:
        seg = LogSegment(
            self.io, self.dir, base_offset, index_interval_bytes=self.config.index_interval_bytes, created_ms=self.clock_ms(),
            cache=self._segment_cache, in_new_directory=in_new_directory,
        )
        seg.map_limit = self.config.segment_bytes  # the writer's map never needs more room
        return seg

    def _raise_storage_error(self, exc: OSError, what: str) -> NoReturn:
        if isinstance(exc, KafkaStorageError):
            raise exc
        raise self._storage_error(exc, what) from exc

    def _storage_error(self, exc: OSError, what: str) -> KafkaStorageError:
        if isinstance(exc, KafkaStorageError):
            return exc
        where = f" ({exc.filename})" if exc.filename else ""
        return KafkaStorageError(exc.errno, f"{what} in {self.dir} failed: {exc.strerror or exc}{where}")

    def _check_offset(self, offset: int) -> None:
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise OffsetOutOfRangeError(f"offset must be an int, not {type(offset).__name__}")
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"log start {self.log_start_offset}, log end {self.log_end_offset}"
            )

    def read_batches(
        self, offset: int, max_bytes: int = 1 << 20, *, max_offset: Optional[int] = None, verify_crc: bool = True
    ) -> List[RecordBatch]:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` (at least one batch).

        ``max_offset`` (exclusive, e.g. the high watermark) stops before any
        batch starting at or after it. Batches are CRC-checked; a bad one
        raises :class:`CorruptRecordError` naming the file and position.
        ``verify_crc=False`` skips only the CRC (the framing - lengths, magic,
        increasing offsets - is still checked, so nothing past a batch's end
        is ever read): for :meth:`fetch`, whose receiver checks the CRC
        itself. Every other reader keeps the default.

        Complexity: O(log segments + log index entries + bytes read).
        """
        return [
            RecordBatch(info._replace(position=position + info.position),
                        view[info.position : info.position + info.size], seg.log_path)
            for seg, position, view, infos in self._read_spans(offset, max_bytes, max_offset, verify_crc)
            for info in infos
        ]

    def _read_spans(
        self, offset: int, max_bytes: int, max_offset: Optional[int], verify_crc: bool
    ) -> List[Tuple[LogSegment, int, memoryview, List[BatchInfo]]]:
        """What :meth:`read_batches` returns, as ``(segment, position, view, infos)`` per chunk read:
        ``view`` holds the chunk read at ``position`` of ``segment``, ``infos`` the batches taken
        from it (positions relative to ``view``; they start at 0 and are consecutive). The rules
        (and errors) are :meth:`read_batches`'s; :meth:`fetch` joins the spans' bytes without
        making a :class:`RecordBatch` per batch."""
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidConfigurationError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        with self._lock:
            self._ensure_open()
            self._check_offset(offset)
            limit = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
            out: List[Tuple[LogSegment, int, memoryview, List[BatchInfo]]] = []
            remaining = max_bytes
            idx = max(0, self.segments.bisect_right(offset) - 1)
            bases = self.segments.keys()
            target = offset
            while idx < len(bases) and target < limit:
                seg = self.segments[bases[idx]]
                found = seg.translate_offset(target, allow_torn_tail=self.read_only and idx == len(bases) - 1)
                if found is None:
                    idx += 1
                    continue
                position = found[0]
                chunk = seg.read(position, max(remaining, 1))
                view = memoryview(chunk)
                res = scan(view, verify_crc=verify_crc)
                if not res.batches and res.torn and not out:
                    # The first batch is larger than max_bytes: return it whole (Kafka).
                    head = seg.read(position, 12)
                    if len(head) == 12:
                        whole = seg.read(position, batch_length_of(head) + 12)
                        view = memoryview(whole)
                        res = scan(view, verify_crc=verify_crc, max_batches=1)
                if res.corrupt and not res.batches:
                    if self.read_only and position + res.valid_bytes >= seg.size - 0 and idx == len(bases) - 1:
                        break  # a batch still being written by the writer process
                    raise CorruptRecordError(
                        f"invalid batch in {self.topic}-{self.partition}: {res.reason}",
                        path=seg.log_path,
                        position=position + res.valid_bytes,
                    )
                stop = False
                taken = 0
                for info in res.batches:
                    if info.base_offset >= limit:
                        stop = True
                        break
                    taken += 1
                    remaining -= info.size
                    target = info.last_offset + 1
                if taken:
                    out.append((seg, position, view, res.batches[:taken]))
                if res.corrupt and not stop and remaining > 0:
                    # Return the valid batches before the bad one; the next read,
                    # which starts at the bad batch, raises the error above.
                    break
                if stop or remaining <= 0 or not res.batches:
                    break
            return out

    def read(self, offset: int, max_bytes: int = 1 << 20, *, max_offset: Optional[int] = None) -> Iterator[Record]:
        """Records from ``offset`` on, up to about ``max_bytes`` of batches (at least one).

        Records below ``offset`` in the first batch and at or after
        ``max_offset`` are skipped. Raises :class:`OffsetOutOfRangeError` for
        an offset outside [log_start_offset, log_end_offset].

        The batches are read and CRC-checked as by :meth:`read_batches`, then
        turned into records a run of plain batches per C call, the way the
        consumer's ``poll`` does (:mod:`pylog.storage.reader`); records
        holding only bytes, ``None`` and ints are not tracked by the cycle
        collector. Complexity: O(log segments + log index entries + bytes
        read). Thread-safety: the read takes the log's lock; the records are
        built outside it.
        """
        spans = self._read_spans(offset, max_bytes, max_offset, True)
        limit = self.log_end_offset if max_offset is None else max_offset
        for seg, position, view, infos in spans:
            records, error = records_of_chunk(view, infos, seg.log_path, position, offset, limit)
            yield from records
            if error is not None:
                raise error

    def get(self, offset: int) -> Record:
        """The record at ``offset`` (a point read).

        Uncompressed v2 data takes one C call over a memory map of the
        segment, through the segment's lookup cache (per-batch record anchors
        and the ranges whose CRC this process checked:
        :meth:`LogSegment.lookup_record` says what is promised about
        corruption); anything else (compressed, legacy, a read-only opener)
        falls back to :meth:`read`. The record holds one Python object per
        field. Raises :class:`OffsetOutOfRangeError` when no record has that
        offset.

        Complexity: O(log segments + log index entries + the batch headers
        from the index entry to the record's batch + 1/64 of that batch's
        records); the first read of a batch in this process also CRC-checks
        it. Thread-safety: takes the log's lock.
        """
        with self._lock:
            if self._closed or type(offset) is not int:
                self._ensure_open()
                self._check_offset(offset)
            if self.log_start_offset <= offset < self.log_end_offset:
                segs = self.segments
                if len(segs) == 1:  # SortedDict is a dict: the C-level view skips its Python layers
                    seg = next(iter(dict.values(segs)))
                else:
                    seg = segs.peekitem(segs.bisect_right(offset) - 1)[1]
                rec: Optional[Record] = seg.lookup_record(offset)
                if rec is not None:
                    return rec
                for rec in self.read(offset, 1):
                    if rec.offset == offset:
                        return rec
                    break
            else:
                self._check_offset(offset)
            raise OffsetOutOfRangeError(
                f"no record at offset {offset} in {self.topic}-{self.partition} "
                f"(log start {self.log_start_offset}, log end {self.log_end_offset})"
            )

    def fetch(self, offset: int, max_bytes: int = 1 << 20, *, max_offset: Optional[int] = None) -> bytes:
        """Raw bytes of whole batches from ``offset``: what a leader serves a follower's or a
        consumer's fetch.

        As in Kafka, the CRC is checked on append and by the receiver, not
        again when serving: the follower's :meth:`append_batches` and the
        consumer's decoding validate every batch, so a byte damaged on this
        disk is caught there (:class:`CorruptRecordError`) and never taken
        for data. The framing is still checked here; a damaged length or
        magic raises :class:`CorruptRecordError`.

        The usual follower fetch - from where one of this process's recent
        appends started, to the log end, within ``max_bytes`` - is served
        from the active segment's map with one framing walk in C and one
        copy (:meth:`_fetch_tail`); anything else takes the general path
        below (the chunks :meth:`read_batches` would read, joined without a
        :class:`RecordBatch` per batch).
        """
        tail = self._fetch_tail(offset, max_bytes, max_offset)
        if tail is not None:
            return tail
        parts = []
        for _, _, view, infos in self._read_spans(offset, max_bytes, max_offset, False):
            last = infos[-1]
            parts.append(view[: last.position + last.size])  # the batches taken are consecutive from 0
        if len(parts) == 1:
            return bytes(parts[0])
        return b"".join(parts)

    def _fetch_tail(self, offset: int, max_bytes: int, max_offset: Optional[int]) -> Optional[bytes]:
        """:meth:`fetch`'s fast path, or None when it does not apply (the general path decides).

        It applies when ``offset`` is where a recent append of this process
        started in the active segment (:attr:`LogSegment.recent_starts`), the
        fetch runs to the log end (no ``max_offset`` below it) and the bytes
        from there to the end fit in ``max_bytes``. The same framing as the
        general path (lengths, magic, increasing offsets; no CRC) is checked
        by one :func:`pylog.record.scan` walk (one header tuple per batch); any
        doubt (a framing error included) falls back to the general path, which
        raises what it finds.
        """
        with self._lock:
            if self._closed or self.read_only or offset < self.log_start_offset:
                return None
            end = self.log_end_offset
            if offset >= end or (max_offset is not None and max_offset < end):
                return None
            seg = self.segments.peekitem(-1)[1]
            position = seg.recent_starts.get(offset)
            if position is None:
                return None
            n = seg.size - position
            if n <= 0 or n > max_bytes:
                return None
            mapped = seg.mapped_log()
            if mapped is None:
                return None
            found = scan(mapped.view(position, n), verify_crc=False)
            batches = found.batches
            if (not found.ok or found.valid_bytes != n or not batches or batches[0].base_offset != offset
                    or batches[-1].last_offset != end - 1):
                return None
            data: bytes = mapped.read(position, n)
            return data

    def offset_for_time(self, timestamp_ms: int) -> Optional[int]:
        """The earliest offset whose timestamp is >= ``timestamp_ms``, or None.

        Kafka's ListOffsets by timestamp: segments are chosen by their largest
        timestamp, then the time index, offset index and a batch scan.
        """
        if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
            raise InvalidConfigurationError(
                f"offset_for_time needs a timestamp in milliseconds (an int), not {type(timestamp_ms).__name__} "
                f"({timestamp_ms!r:.40}) ({self.topic}-{self.partition})")
        with self._lock:
            self._ensure_open()
            for seg in self.segments.values():
                if seg.size == 0:
                    continue
                if seg.max_timestamp_so_far >= timestamp_ms or seg is self.active_segment:
                    found: Optional[int] = seg.find_offset_by_timestamp(timestamp_ms, self.log_start_offset)
                    if found is not None:
                        return found
            return None

    def _delete_segments_below(self, offset: int) -> List[int]:
        deleted = []
        bases = list(self.segments.keys())
        for i, base in enumerate(bases[:-1]):
            if bases[i + 1] <= offset:
                self.segments[base].delete()  # oldest first: a failure leaves a consistent suffix
                del self.segments[base]
                deleted.append(base)
            else:
                break
        if deleted:
            self.io.fsync_dir(self.dir)
        return deleted

    def new_cleaned_segment(self, base_offset: int) -> LogSegment:
        """An empty ``<base>.log.cleaned`` segment the cleaner writes into (removing a stale one)."""
        with self._lock:
            self._ensure_writable()
            seg = LogSegment(
                self.io, self.dir, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                created_ms=self.clock_ms(), suffix=CLEANED_SUFFIX, cache=self._segment_cache,
            )
            if seg.size:
                seg.truncate_to(base_offset)
            return seg

    def replace_segments(self, new_segments: Sequence[LogSegment], old_bases: Sequence[int], *,
                         carry_txn_entries: bool = True) -> None:
        """Swap fully written ``.cleaned`` segments in for the segments at ``old_bases``.

        ``carry_txn_entries`` (default) copies the old segments' ``.txnindex`` entries into the new
        segments; the transaction-aware cleaner passes False, having written the new indexes itself
        (the entries of the ABORT markers it kept, as Kafka's ``CleanedTransactionMetadata.cleanedIndex``).

        Kafka's LocalLog.replaceSegments, crash-safe at every step:

        1. the new segments (already fsynced by the caller) are renamed
           ``.cleaned`` -> ``.swap`` and the directory fsynced: from here on,
           recovery completes the swap (a ``.swap`` file is always complete);
        2. the old segments are renamed to ``.deleted``, directory fsynced;
        3. the new segments are renamed to their live names, directory fsynced;
        4. the old files are unlinked.

        A crash before step 1 leaves the old segments and a ``.cleaned`` file
        that the next open removes; after it, the next open deletes the live
        segments the ``.swap`` covers and renames it into place. Either way
        every offset reads either as it was or as cleaned.

        On an I/O error the log is closed (as a crashed one would be, so the
        next open runs recovery) and :class:`KafkaStorageError` is raised.
        The active segment can never be replaced.

        Complexity: O(files renamed). Thread-safety: takes the log's lock.
        """
        with self._lock:
            self._ensure_writable()
            keys = list(self.segments.keys())
            if not new_segments or not old_bases:
                raise InvalidConfigurationError("replace_segments needs new segments and the bases they replace")
            if keys[-1] in old_bases:
                raise InvalidConfigurationError(
                    f"{self.topic}-{self.partition}: the active segment {keys[-1]} cannot be replaced"
                )
            first = keys.index(old_bases[0]) if old_bases[0] in self.segments else -1
            if first < 0 or keys[first : first + len(old_bases)] != list(old_bases):
                raise InvalidConfigurationError(
                    f"{self.topic}-{self.partition}: segments {list(old_bases)} are not consecutive segments of the log"
                )
            if new_segments[0].base_offset != old_bases[0] or any(
                not (old_bases[0] <= n.base_offset < keys[first + len(old_bases)]) for n in new_segments
            ):
                raise InvalidConfigurationError(
                    f"{self.topic}-{self.partition}: new segments {[n.base_offset for n in new_segments]} "
                    f"do not cover the range of {list(old_bases)}"
                )
            try:
                if carry_txn_entries:
                    self._carry_txn_entries([self.segments[b] for b in old_bases], new_segments)
                for seg in reversed(new_segments):
                    seg.change_suffix(SWAP_SUFFIX)
                self.io.fsync_dir(self.dir)
                old = [self.segments[b] for b in old_bases]
                for seg in old:
                    seg.close()
                    seg.change_suffix(DELETED_SUFFIX)
                self.io.fsync_dir(self.dir)
                for seg in new_segments:
                    seg.change_suffix("")
                self.io.fsync_dir(self.dir)
                for b in old_bases:
                    del self.segments[b]
                for seg in new_segments:
                    self.segments[seg.base_offset] = seg
                for seg in old:
                    seg.delete()
            except OSError as exc:
                err = self._storage_error(exc, "segment swap")
                for seg in new_segments:
                    seg.close()
                self.abandon()
                raise err from exc

    def _carry_txn_entries(self, old: Sequence[LogSegment], new: Sequence[LogSegment]) -> None:
        """Copy the old segments' ``.txnindex`` entries into the new segment covering each marker offset
        (Kafka's cleaner copies them too: a read_committed fetch of cleaned data still needs the
        aborts), unless the new index already has them; the copies are fsynced before the swap."""
        bases = [n.base_offset for n in new]
        touched = []
        for seg in old:
            try:
                entries = seg.txn_index.all_aborted()
            except CorruptIndexError as exc:
                _logger.warning("%s-%d: not carrying the damaged transaction index into the cleaned segment (%s)",
                                self.topic, self.partition, exc)
                continue
            for e in entries:
                target = new[max(0, bisect.bisect_right(bases, e.last_offset) - 1)]
                idx = target.txn_index
                last = idx.last_offset
                if last is None or e.last_offset > last:
                    idx.append(e)
                    if target not in touched:
                        touched.append(target)
        for seg in touched:
            seg.txn_index.flush()

    def _close_segments(self) -> Optional[OSError]:
        """Close every segment's files, going on past a failure; returns the first OSError."""
        first: Optional[OSError] = None
        for seg in self.segments.values():
            try:
                seg.close()
            except OSError as exc:
                first = first or exc
        return first

    def _roll_segment(self, old: LogSegment, base: int) -> LogSegment:
        """Kafka's ``LocalLog.roll``: make ``old`` inactive and durable (its final time-index entry,
        fsync), create the segment at ``base`` (all three files or none) and make its name durable,
        then install it as the active segment. On an error the files created are removed again
        and ``old`` stays active (OSError raised). Complexity: O(1) + the fsyncs.
        Thread-safety: the caller holds the lock."""
        old.on_become_inactive()
        old.flush()
        seg = self._new_segment(base)  # creates all three files or none
        try:
            self.io.fsync_dir(self.dir)
        except OSError:
            try:
                seg.delete()
            except OSError:
                seg.close()  # an empty .log left behind is discarded on open (drop_abandoned_segments)
            raise
        self.segments[base] = seg
        return seg


__all__ = ["LocalLog"]
