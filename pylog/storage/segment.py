"""One log segment: ``<base>.log`` with its ``.index`` and ``.timeindex`` (and ``.txnindex``).

The ``.txnindex`` (:mod:`pylog.storage.txn_index`, made lazily on the first
aborted transaction) is truncated, flushed, renamed, released, closed and
deleted with the segment; the log appends to it and recovery rebuilds it.

Mirrors Kafka's LogSegment: batches are appended to the ``.log`` file; after
each append the C core decides (Kafka's rule, see ``index.c``) whether an
offset entry and a time entry are due, and the segment appends their bytes.
Reads translate an offset to a byte position with the sparse index, then
scan forward to the first batch whose last offset reaches it.

Durability: :meth:`append` writes to the OS (survives a process crash, not
power loss); :meth:`flush` fsyncs the log and both indexes.
Thread-safety: none; :class:`pylog.storage.log.Log` serialises access.

Open files: a segment made with a ``cache`` (a
:class:`~pylog.storage.segment_cache.SegmentCache`, the log's
``max_open_segments``) may have its descriptors and map released while it is
not in use, and reopens them on its next use; a segment that was written
since its last :meth:`flush` is fsynced first, so a release never loses an
fsync error. Reopening checks that the file is still the same file (device
and inode) and no shorter than the segment: otherwise
:class:`KafkaStorageError` or :class:`CorruptRecordError` names it (a
``read_only`` reader's segment that the writer deleted since it was listed:
:class:`OffsetOutOfRangeError`, as any read below a moved log start). With a
cache, a writer's existing segment starts released (its size from ``stat``):
it opens on first use.
"""
from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from pylog._native.index import LOOKUP_CACHE_BATCHES, LookupCache, MappedLog, PointReader, SegmentState, index_check
from pylog.errors import CorruptIndexError, CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError, PylogError
from pylog.record import LOG_OVERHEAD, BatchInfo, Record, RecordBatch, scan
from pylog.record.codec import decode_headers
from pylog.record.framing import base_offset_of, batch_length_of, find_batch
from pylog.record.types import status_reason
from pylog.storage.fileio import FileIO
from pylog.storage.index import OffsetIndex, TimeIndex, offset_entry_at, time_entry_at
from pylog.storage.segment_cache import SegmentCache, tick
from pylog.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)
READ_CHUNK = 64 * 1024
_new_tuple = tuple.__new__

#: A writer's segment is mapped with room to grow: at least this much (or the segment's
#: ``map_limit``, if smaller), and twice the file's size when it outgrows the map.
MAP_MIN_BYTES = 1 << 20
#: how many recent append starts a segment remembers (:attr:`LogSegment.recent_starts`)
RECENT_STARTS = 64


def _libc_mmap() -> Tuple[object, object]:
    """libc's ``mmap``/``munmap`` through ctypes (None, None where unavailable).

    Python's :class:`mmap.mmap` refuses to map past the end of a file; the
    writer's map needs headroom so that it is not redone on every append.
    """
    if ctypes.sizeof(ctypes.c_void_p) != 8:  # off_t below is 64-bit
        return None, None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mm, mu = libc.mmap, libc.munmap
    except (OSError, AttributeError):
        return None, None
    mm.restype = ctypes.c_void_p
    mm.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    mu.restype = ctypes.c_int
    mu.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return mm, mu


_mmap, _munmap = _libc_mmap()
_MAP_FAILED = ctypes.c_void_p(-1).value
def _undo_create(io: FileIO, fd: int, created: List[str]) -> None:
    """Close ``fd`` and remove the files a failed segment create made (best effort).

    Removes the ``.log`` last, so that a removal that fails too leaves at worst an
    empty ``.log`` (which the loader discards when its offsets belong to the segment
    before it: :func:`pylog.storage.loader.drop_abandoned_segments`) or index files
    without a ``.log`` (removed as orphans on open). The names were never made
    durable (no directory fsync), so a power loss cannot bring back more.
    """
    try:
        io.close(fd)
    except OSError:
        pass
    for path in reversed(created):
        try:
            io.unlink(path)
        except OSError:
            pass


def filename_prefix(offset: int) -> str:
    """Kafka's 20-digit zero-padded segment name for ``offset``."""
    return f"{offset:020d}"


class SegmentRecovery(NamedTuple):
    """What :meth:`LogSegment.recover` found."""

    valid_bytes: int
    truncated_bytes: int
    batches: List[BatchInfo]
    reason: str  # "" when the whole segment was valid
    start_position: int = 0  # where the scan started (0: the whole segment; see LogSegment.recover)


class LogSegment:
    """A ``.log`` file plus its two sparse indexes, starting at ``base_offset``."""

    def __init__(
        self,
        io: FileIO,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        read_only: bool = False,
        created_ms: int = 0,
        suffix: str = "",
        cache: Optional[SegmentCache] = None,
        in_new_directory: bool = False,
    ):
        """``in_new_directory``: the caller created ``directory`` itself just now, so none of the
        segment's files can exist (no existence checks, no leftovers to empty)."""
        self.io = io
        self.base_offset = base_offset
        self.directory = directory
        self.suffix = suffix  # "" for a live segment; ".cleaned"/".swap" while the cleaner replaces segments
        prefix = os.path.join(directory, filename_prefix(base_offset))
        self.log_path = prefix + ".log" + suffix
        self.read_only = read_only
        self.offset_index = OffsetIndex(io, prefix + ".index" + suffix, base_offset, read_only=read_only)
        self.time_index = TimeIndex(io, prefix + ".timeindex" + suffix, base_offset, read_only=read_only)
        # Creating a segment is all-or-nothing: the files this constructor creates
        # are removed again when a later step fails (EMFILE, ENOSPC, EIO), so a
        # failed roll leaves the directory as it was (see Log.roll).
        created: List[str] = []
        if not read_only and (in_new_directory or not io.exists(self.log_path)):
            created.append(self.log_path)
        self._fd: Optional[int] = None
        if cache is not None and not created and not read_only:
            # A writer's existing file under the open-segment cache starts released: stat, no
            # descriptor (a 10,000-segment log opens each file once, when first used, not twice).
            # A reader opens at once: the writer may delete the file after the listing, and the
            # reader's loader lists again when an open fails (loader._load_read_only).
            self._identity, size = io.path_identity(self.log_path)
        else:
            if cache is not None:
                cache.make_room()
            self._fd = io.open(self.log_path, create=not read_only, read_only=read_only)
        try:
            if self._fd is not None:
                #: the .log's (st_dev, st_ino): a released segment reopens only this very file
                self._identity = io.identity(self._fd)
                size = io.size(self._fd)
            if created and not in_new_directory:
                # The index files of a new segment are not created with it (Kafka's LazyIndex): the
                # first index write or the first flush of the segment once it holds data makes them
                # (_Index.flush(ensure_file=True)). An index file under the new .log's name is a
                # leftover of a deletion whose index unlink failed: its entries describe another
                # file, so it is emptied (the same for a .txnindex: no marker is in a new .log).
                for path in (self.offset_index.path, self.time_index.path, prefix + TXN_INDEX_SUFFIX + suffix):
                    if io.exists(path):
                        ifd = io.open(path)
                        try:
                            io.truncate(ifd, 0)
                        finally:
                            io.close(ifd)
        except OSError:
            fd, self._fd = self._fd, None
            if fd is not None:
                _undo_create(io, fd, created)
            raise
        self.created_ms = created_ms
        #: written since the last flush (a release fsyncs first)
        self._dirty = False
        self._cache_used = tick()
        self._state = SegmentState()
        st = self._state
        st.base_offset = base_offset
        st.size = size
        st.index_interval_bytes = index_interval_bytes
        st.max_timestamp_so_far = -1
        st.offset_of_max_timestamp = base_offset
        st.last_index_offset = base_offset - 1
        st.last_time_index_timestamp = -1
        st.last_time_index_offset = base_offset
        st.bytes_since_last_index_entry = 0
        self._indexes_ready = False
        #: the .log's bytes are known durable (created empty by this object, loaded from a cleanly
        #: shut down directory, or fsynced by :meth:`flush` and not written since): flush skips its fsync
        self.log_synced = bool(created)
        if created:  # a new, empty segment: empty indexes, nothing to load or validate
            self.offset_index.start_empty()
            self.time_index.start_empty()
            self._indexes_ready = True
        self.first_batch_timestamp: Optional[int] = None
        # Bytes known to hold CRC-valid batches (written or recovered by this
        # process); point lookups re-check the CRC of anything past it.
        self.verified_bytes = 0
        #: the .log file may hold bytes past the logical end (a cut that failed): flush cuts them
        self._stale_tail = False
        # The writer's read-only map of the .log (see _mapped): a raw mapping with headroom
        # (_map_finalizer unmaps it), or, where libc's mmap is unavailable, an mmap.mmap.
        self._map: Optional[mmap.mmap] = None
        self._map_ptr: Optional[MappedLog] = None
        self._map_len = 0
        self._map_finalizer: Optional["weakref.finalize[..., Any]"] = None
        #: largest useful map (the log's segment_bytes; None: unbounded doubling)
        self.map_limit: Optional[int] = None
        #: how many times the .log was mapped (tests check that appends do not remap each time)
        self.maps_made = 0
        #: the C point-lookup cache (plg_lookup_cache_t: per-batch record anchors and the CRC-verified
        #: ranges), made by the first :meth:`lookup_record` and dropped with the map (:meth:`_drop_map`)
        self._lookups: Optional[LookupCache] = None
        #: base offset -> position of the first batch of each recent append by this process (at most
        #: :data:`RECENT_STARTS` of them): a fetch from where a follower stopped starts at one, so it is
        #: served without an index lookup or a walk (:meth:`pylog.storage.log.Log.fetch`). Cleared
        #: whenever the file shrinks (:meth:`truncate_to`, :meth:`recover`) and on a roll.
        self.recent_starts: Dict[int, int] = {}
        #: the .txnindex (aborted transactions whose ABORT marker is in this segment): made on first
        #: use (:attr:`txn_index`), the file itself on the first append; dropped on release and close
        self._txn_index: Optional[TransactionIndex] = None
        #: the log's open-segment cache (None: always open, or closed)
        self._cache = cache
        if cache is not None and self._fd is not None:
            cache.opened(self)

    # ---- properties ---------------------------------------------------------
    @property
    def size(self) -> int:
        return int(self._state.size)

    @property
    def fd(self) -> int:
        """The .log's descriptor, reopened when the open-segment cache released it."""
        self._cache_used = tick()
        fd = self._fd
        if fd is None:
            if self._cache is None:
                raise KafkaStorageError(f"segment {self.log_path} is closed")
            self._cache.ensure_open(self)
            fd = self._fd
            assert fd is not None
        return fd

    @property
    def txn_path(self) -> str:
        return os.path.join(self.directory, filename_prefix(self.base_offset)) + TXN_INDEX_SUFFIX + self.suffix

    @property
    def txn_index(self) -> TransactionIndex:
        """This segment's ``.txnindex`` (:mod:`pylog.storage.txn_index`); the object is made on first
        use, the file on the first append. Released with the segment's other descriptors."""
        idx = self._txn_index
        if idx is None:
            idx = self._txn_index = TransactionIndex(self.txn_path, self.base_offset, file_io=self.io)
        return idx

    def _drop_txn_index(self) -> Optional[OSError]:
        idx, self._txn_index = self._txn_index, None
        if idx is not None:
            try:
                idx.close()
            except OSError as exc:
                return exc
        return None

    # ---- the open-segment cache (pylog.storage.segment_cache) ------------------------
    def _cache_open(self) -> None:
        """Reopen the released .log: the same file (device, inode), at least as long as the segment."""
        path = self.log_path
        try:
            fd = self.io.open(path, create=False, read_only=self.read_only)
        except FileNotFoundError as exc:
            if self.read_only:  # the writer deleted it (retention, delete_records_before) since the listing
                raise OffsetOutOfRangeError(
                    f"segment {path} (offsets from {self.base_offset}) was deleted by the writer since this "
                    f"reader listed the segments: refresh() to see the new log start") from exc
            raise KafkaStorageError(
                errno.ENOENT, f"segment {path} was removed while its descriptor was released "
                f"(max_open_segments): offsets from {self.base_offset} are gone") from exc
        except OSError as exc:
            raise KafkaStorageError(exc.errno, f"reopening segment {path} failed: {exc.strerror or exc}") from exc
        try:
            identity, size = self.io.identity(fd), self.io.size(fd)
            if identity != self._identity:
                raise KafkaStorageError(
                    errno.ESTALE, f"segment {path} was replaced by another file while its descriptor was released "
                    f"(max_open_segments); reopen the log")
            if size < self._state.size and not self.read_only:
                raise CorruptRecordError(
                    f"segment shrank from {self._state.size} to {size} bytes while its descriptor was released "
                    f"(max_open_segments)", path=path, position=size)
        except BaseException as exc:
            self.io.close(fd)
            if isinstance(exc, OSError) and not isinstance(exc, KafkaStorageError):
                raise KafkaStorageError(exc.errno, f"reopening segment {path} failed: {exc.strerror or exc}") from exc
            raise
        self._fd = fd

    def _cache_release(self) -> None:
        """Give back the descriptors and the map (the cache evicts this segment); it reopens on next use.

        Durability: a segment written since its last :meth:`flush` is flushed first (an OSError
        is raised, the segment stays open); an inactive segment was flushed when it was rolled.
        """
        if self._dirty and not self.read_only:
            self.flush()
        first = self._close_files()
        if first is not None:
            log.warning("closing the released segment %s: %s", self.log_path, first)

    def _close_files(self) -> Optional[OSError]:
        """Drop the map and close the ``.log`` descriptor and the indexes, every one even if an
        earlier close fails; returns the first OSError (None when all closed)."""
        self._drop_map()
        fd, self._fd = self._fd, None
        first: Optional[OSError] = None
        if fd is not None:
            try:
                self.io.close(fd)
            except OSError as exc:
                first = exc
        for index in (self.offset_index, self.time_index):
            try:
                index.close()
            except OSError as exc:
                first = first or exc
        return first or self._drop_txn_index()

    @property
    def max_timestamp_so_far(self) -> int:
        self.ensure_indexes()
        return int(self._state.max_timestamp_so_far)

    def ensure_indexes(self, *, truncate_damage: bool = True) -> None:
        """Load and validate both indexes (lazily); rebuild them when invalid or missing.

        A rebuild scans the ``.log`` (:meth:`recover`). Bytes that fail
        validation there are cut off when ``truncate_damage`` (a torn tail of
        the last segment); otherwise the file is left as it is and
        :class:`CorruptRecordError` names it and the position (the loader
        passes False for a segment followed by segments holding data: damage
        there is corruption, not a torn write).
        """
        if self._indexes_ready:
            return
        try:
            self._load_indexes(truncate_damage)
        except KafkaStorageError:
            raise
        except OSError as exc:  # EMFILE, EIO... reading or rebuilding: the next call tries again
            raise KafkaStorageError(
                exc.errno, f"loading the indexes of {self.log_path} failed: {exc.strerror or exc} ({exc.filename})"
            ) from exc

    def _load_indexes(self, truncate_damage: bool) -> None:
        try:
            if self.size and not self.io.exists(self.offset_index.path):
                raise CorruptIndexError("index file is missing", path=self.offset_index.path)
            self.offset_index.load(self.size)
            self.time_index.load(self.size)
            if len(self.offset_index) and not len(self.time_index):
                # Entries exist for offsets but none for time: the time index
                # was lost, and the segment's max timestamp with it.
                raise CorruptIndexError("time index is empty but the offset index is not", path=self.time_index.path)
            self._sync_state_from_indexes()
            self._rescan_max_timestamp()
            self._indexes_ready = True
        except CorruptIndexError:
            if self.read_only:
                # Readers in other processes never write; search without an index.
                self.offset_index._data = bytearray()
                self.time_index._data = bytearray()
                self._indexes_ready = True
            else:
                rec = self.recover(truncate=truncate_damage)
                if rec.truncated_bytes:
                    log.warning(
                        "rebuilding the indexes of %s cut %d bytes at position %d: %s",
                        self.log_path, rec.truncated_bytes, rec.valid_bytes, rec.reason,
                    )

    def _sync_state_from_indexes(self) -> None:
        st = self._state
        off, _ = self.offset_index.last_entry()
        st.last_index_offset = off if len(self.offset_index) else self.base_offset - 1
        ts, toff = self.time_index.last_entry()
        st.last_time_index_timestamp = ts
        st.last_time_index_offset = toff
        if ts > st.max_timestamp_so_far:
            st.max_timestamp_so_far = ts
            st.offset_of_max_timestamp = toff

    # ---- append --------------------------------------------------------------
    def append(self, data: object, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int) -> int:
        """Write ``data`` (whole batches) at the end; returns the position it starts at.

        The position is remembered in :attr:`recent_starts` under the first batch's base offset,
        for a later fetch from that offset.

        Index entries follow Kafka's rule (C core). On an I/O error the file is
        cut back to its previous size and :class:`KafkaStorageError` raised, so
        a failed append leaves no partial batch behind.

        Complexity: O(bytes). Durability: page cache only until :meth:`flush`.
        """
        if not self._indexes_ready:
            self.ensure_indexes()
        st = self._state
        position: int = st.size
        n = len(data)  # type: ignore[arg-type]
        fd = self._fd
        self._dirty = True
        try:
            self.io.pwrite(self.fd if fd is None else fd, data, position)
        except OSError as exc:
            self._cut_stale_tail(position)
            raise KafkaStorageError(exc.errno, f"append to {self.log_path} at byte {position} failed: {exc.strerror}") from exc
        saved = st.snapshot()
        idx_entry, time_entry = st.after_append(n, last_offset, max_timestamp, offset_of_max_timestamp,
                                                f"index append in {self.log_path}")
        added = 0  # 1 once the offset index entry is written (the undo removes it again)
        try:
            if idx_entry is not None:
                self.offset_index.append_raw(idx_entry)
                added = 1
            if time_entry is not None:
                self.time_index.append_raw(time_entry)
        except OSError as exc:
            # The batch is in the .log but its index entry is not: undo both,
            # so a failed append leaves nothing behind.
            st.restore(saved)
            try:
                self.offset_index._truncate_entries(len(self.offset_index) - added)
            except OSError:
                pass  # the index file is cut before its next write (_Index._stale_tail)
            self._cut_stale_tail(position)
            raise KafkaStorageError(
                exc.errno, f"index append for {self.log_path} at byte {position} failed: {exc.strerror} ({exc.filename})"
            ) from exc
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_timestamp
        if self.verified_bytes == position:
            self.verified_bytes = position + n
        if n >= 8:
            starts = self.recent_starts
            if len(starts) >= RECENT_STARTS:
                starts.clear()
            starts[base_offset_of(data)] = position  # type: ignore[arg-type]
        return position

    # ---- reads ---------------------------------------------------------------
    def read(self, position: int, max_bytes: int, max_position: Optional[int] = None) -> bytes:
        """Up to ``max_bytes`` of the ``.log`` from ``position`` (not past ``max_position``)."""
        end = self.size if max_position is None else min(self.size, max_position)
        n = max(0, min(max_bytes, end - position))
        if not n:
            return b""
        mapped = self._mapped_log()
        if mapped is not None:  # the writer's own segment: one copy, no system call
            return mapped.read(position, n)
        return self.io.pread(self.fd, n, position)

    def translate_offset(
        self, offset: int, start_position: int = 0, *, allow_torn_tail: bool = True
    ) -> Optional[Tuple[int, int]]:
        """``(position, last offset)`` of the first batch whose last offset is >= ``offset``.

        ``None`` when no batch in this segment reaches ``offset``. A batch
        whose length runs past the end of the file is a write still in
        progress (a reader racing the writer) when ``allow_torn_tail``, and
        otherwise :class:`CorruptRecordError` naming the file and position:
        a rolled segment, or a writer's recovered one, never has a torn tail.
        Complexity: O(log index entries) + a scan of at most about
        ``index_interval_bytes`` plus one batch.
        """
        self.ensure_indexes()
        _, pos = self.offset_index.lookup(offset)
        pos = first = max(pos, start_position)
        size = self.size
        mapped = self._mapped_log()  # the writer's own segment: walk the mapped file, no reads
        while pos < size:
            if mapped is not None:
                rc, at, last = mapped.find_batch(pos, size, offset)
            else:
                rc, at, last = find_batch(self.io.pread(self.fd, min(READ_CHUNK, size - pos), pos), offset)
            if rc:
                raise CorruptRecordError(
                    f"invalid batch while looking for offset {offset}: {status_reason(rc)}",
                    path=self.log_path,
                    position=pos + at,
                )
            if last >= 0:
                return self._checked_skip(offset, first, pos + at, last, allow_torn_tail)
            advanced = at
            if advanced == 0:
                # A batch larger than the chunk (or a torn tail): read it whole to step over it.
                whole = self._read_whole_batch(pos)
                if whole is None:
                    if allow_torn_tail:
                        return self._checked_skip(offset, first, pos, None, allow_torn_tail)  # torn tail
                    raise CorruptRecordError(
                        f"batch length runs past the end of the file while looking for offset {offset}",
                        path=self.log_path,
                        position=pos,
                    )
                if whole.last_offset >= offset:
                    return self._checked_skip(offset, first, pos, whole.last_offset, allow_torn_tail)
                advanced = whole.size
            pos += advanced
        return self._checked_skip(offset, first, size, None, allow_torn_tail)

    def _checked_skip(
        self, offset: int, start: int, found: int, last: Optional[int], allow_torn_tail: bool
    ) -> Optional[Tuple[int, int]]:
        """Return ``(found, last)`` (or None when ``last`` is None) once the skip is trusted.

        The search steps over batches by their header's offset fields, which
        the CRC does not protect on its own. When it lands past ``offset`` (a
        gap: no batch holds it) or finds nothing, the batches it stepped over
        are CRC-checked, so a damaged header raises CorruptRecordError instead
        of silently skipping offsets. Costs nothing on the usual path.
        """
        if last is not None:
            head = self.io.pread(self.fd, 8, found)
            if len(head) < 8 or int.from_bytes(head, "big", signed=True) <= offset:
                return found, last  # the batch holds the offset: the caller CRC-checks it
        if found > start:
            region = self.io.pread(self.fd, found - start, start)
            res = scan(region, verify_crc=True)
            torn_ok = allow_torn_tail and res.torn and last is None
            if res.valid_bytes != len(region) and not torn_ok:
                raise CorruptRecordError(
                    f"invalid batch before offset {offset}: {res.reason}",
                    path=self.log_path,
                    position=start + res.valid_bytes,
                )
        return None if last is None else (found, last)

    def _read_whole_batch(self, pos: int) -> Optional[BatchInfo]:
        """Header fields of the batch at ``pos`` read whole; None for a torn tail."""
        size = self.size
        head = self.io.pread(self.fd, LOG_OVERHEAD, pos)
        if len(head) < LOG_OVERHEAD:
            return None
        batch_len = batch_length_of(head)
        if batch_len <= 0 or batch_len > size - pos - LOG_OVERHEAD:
            return None
        found = scan(self.io.pread(self.fd, batch_len + LOG_OVERHEAD, pos), verify_crc=False)
        if not found.batches:
            raise CorruptRecordError(f"invalid batch: {found.reason}", path=self.log_path, position=pos)
        return found.batches[0]

    def next_offset(self) -> int:
        """The offset after the last complete batch (base offset when empty).

        Scans from the last index entry to the end: O(index_interval_bytes).
        """
        self.ensure_indexes()
        # Normally the scan from the last index entry finds a batch. A reader
        # racing the writer can see an index entry for a batch whose bytes it
        # does not see whole yet; then step back to earlier entries (and to 0).
        index = self.offset_index
        n = len(index)
        for k in range(n - 1, -2, -1):
            pos = index.position_at(k) if k >= 0 else 0
            nxt = self._next_offset_from(pos)
            if nxt is not None:
                return nxt
        return self.base_offset

    def _next_offset_from(self, pos: int) -> Optional[int]:
        """The offset after the last complete batch found scanning from ``pos``; None if none."""
        nxt = None
        size = self.size
        while pos < size:
            chunk = self.io.pread(self.fd, min(4 * 1024 * 1024, size - pos), pos)
            found = scan(chunk, verify_crc=False)
            if found.batches:
                nxt = found.batches[-1].last_offset + 1
            if found.valid_bytes == 0:
                whole = self._read_whole_batch(pos) if found.torn else None
                if whole is None:
                    break
                nxt = whole.last_offset + 1
                pos += whole.size
                continue
            pos += found.valid_bytes
        return nxt

    # ---- time ----------------------------------------------------------------
    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> Optional[int]:
        """First offset >= ``starting_offset`` whose record timestamp is >= ``timestamp``.

        Kafka's LogSegment.findOffsetByTimestamp: time index, then offset
        index, then a scan of batches by max timestamp, then of records.
        """
        self.ensure_indexes()
        _, ts_offset = self.time_index.lookup(timestamp)
        _, pos = self.offset_index.lookup(max(ts_offset, starting_offset))
        size = self.size
        while pos < size:
            chunk = self.io.pread(self.fd, min(4 * 1024 * 1024, size - pos), pos)
            view = memoryview(chunk)
            found = scan(view, verify_crc=False)
            for info in found.batches:
                if info.max_timestamp >= timestamp and info.last_offset >= starting_offset:
                    batch = RecordBatch(info, view[info.position : info.position + info.size], self.log_path)
                    for rec in batch.records():
                        if rec.offset >= starting_offset and rec.timestamp is not None and rec.timestamp >= timestamp:
                            return rec.offset
            if found.valid_bytes == 0:
                break
            pos += found.valid_bytes
        return None

    # ---- point lookup --------------------------------------------------------
    def mapped_log(self) -> Optional[MappedLog]:
        """:meth:`_mapped_log` for the log's tail fetch (:meth:`pylog.storage.local_log.LocalLog._fetch_tail`):
        the caller holds the log's lock and copies out what it needs before releasing it."""
        return self._mapped_log()

    def _mapped_log(self) -> Optional[MappedLog]:
        """A read-only map of the .log; None for an empty or read-only segment.

        The map is made with headroom past the end of the file (at least
        :data:`MAP_MIN_BYTES`, bounded by :attr:`map_limit`), and made again
        only when the file outgrows it, then at twice the file's size: an
        append does not cost an unmap and a map. Bytes appended after the
        map was made are visible through it (a shared mapping of the page
        cache). Callers never touch the map past :attr:`size`, the logical
        end, so the pages past the end of the file are never read (which
        would raise SIGBUS).

        Never used for read-only segments: another process could truncate the
        file under the map (SIGBUS). The map is never exported to callers
        (reads copy out), and it is dropped before this process truncates
        the file (:meth:`truncate_to`, :meth:`recover`) and on close.
        """
        self._cache_used = tick()
        size = self._state.size
        if size == 0 or self.read_only:
            return None
        if self._map_ptr is None or self._map_len < size:
            self._remap(size)
        return self._map_ptr

    def _remap(self, size: int) -> None:
        self._unmap()  # the bytes stay what they were: the lookup cache stays valid
        self.maps_made += 1
        if _mmap is not None:
            want = max(2 * size, MAP_MIN_BYTES)
            if self.map_limit is not None:
                want = min(want, self.map_limit)
            page = mmap.PAGESIZE
            length = (max(want, size) + page - 1) // page * page
            addr = _mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, self.fd, 0)  # type: ignore[operator]
            if addr is not None and addr != _MAP_FAILED:
                self._map_ptr = MappedLog(length, address=addr)
                self._map_len = length
                self._map_finalizer = weakref.finalize(self, _munmap, addr, length)  # type: ignore[arg-type]
                return
        # No libc mmap (or it failed): map exactly the file, as mmap.mmap allows.
        self._map = mmap.mmap(self.fd, size, prot=mmap.PROT_READ)
        self._map_ptr = MappedLog(size, buffer=self._map)
        self._map_len = size

    def _drop_map(self) -> None:
        """Unmap the .log and forget every cached batch and verified range: called before this
        process truncates or rewrites the file (:meth:`truncate_to`, :meth:`recover`) and on close."""
        self._unmap()
        self._lookups = None  # its finalizer frees the C cache (plg_lookup_cache_free)

    def _unmap(self) -> None:
        reader = self.__dict__.pop("lookup_record", None)  # the PointReader bound to this map (lookup_record)
        if reader is not None:
            reader.close()  # a reference kept elsewhere now takes the method, never the old map
        if self._map_finalizer is not None:
            self._map_ptr = None
            self._map_finalizer()  # munmap, once
            self._map_finalizer = None
        elif self._map is not None:
            if self._map_ptr is not None:
                self._map_ptr.release()
            self._map_ptr = None
            try:
                self._map.close()
            except BufferError:  # a slice is being taken in another thread; the GC unmaps it later
                pass
            self._map = None
        self._map_len = 0

    def lookup_record(self, offset: int) -> Optional[Record]:
        """The record at ``offset`` by one C call over the mapped file; None when
        the fast path does not apply (compressed, legacy or control batch, a
        read-only segment) or no record has that offset here.

        The C call (``plg_lookup_cached``) goes through this segment's lookup
        cache: the first lookup in a batch CRC-checks it (unless it lies in
        :attr:`verified_bytes` or a range this process verified before) and
        records an anchor - position and offset delta - for every
        ``ceil(records / 64)``-th record; later lookups in that batch
        binary-search the anchors and walk at most that many record headers.
        At most :data:`LOOKUP_CACHE_BATCHES` batches per segment keep anchors
        (about 580 bytes each; the verified ranges are 16 bytes each, merged).

        With the send-path extension built, the lookup and the record are one
        call (``point_lookup`` in ``pylog/_native/sendpath/sendpath.c``, which calls this
        C core's ``plg_lookup_cached`` through its address); a record with
        headers, and builds without the extension, take the cffi path below.

        What is promised about corruption: a batch is CRC-checked the first
        time this process reads it by offset (after a reopen, a truncation or
        a recovery of this segment: again), and a bad one raises
        :class:`CorruptRecordError` every time it is asked for. A batch that
        passed is trusted afterwards: bytes changed in the file behind the
        process (another program, a disk fault under a warm page cache) are
        not noticed by later lookups, though every read stays inside the
        batch's bounds and a damaged record header still raises
        :class:`CorruptRecordError`. Kafka's broker trusts its segments the
        same way after the append-time check.

        Complexity: O(log index entries + batches between the index entry and
        the target + 1/64 of the batch's records); the first lookup in a batch
        O(batch bytes). Thread-safety: under the log's lock (the cache and
        ``_ref`` are shared).
        """
        if not self._indexes_ready:
            self.ensure_indexes()
        self._cache_used = tick()
        size = self._state.size
        mapped = self._map_ptr
        if mapped is None or self._map_len < size:
            mapped = self._mapped_log()  # (re)map, or None when there is nothing to map
            if mapped is None:
                return None
        cache = self._lookups
        if cache is None:
            cache = self._lookups = LookupCache(LOOKUP_CACHE_BATCHES)
        idx = self.offset_index.data
        point = mapped.point  # the record built in the same C call (sendpath.c), when built
        if point is not None:
            got = point(size, idx, self.base_offset, offset, self.verified_bytes, cache.address, Record)
            if type(got) is not int:
                if PointReader is not None and "lookup_record" not in self.__dict__:
                    # later calls skip this frame: the reader does the above in C (sendpath.c)
                    self.__dict__["lookup_record"] = PointReader(
                        self, self._state.address, self._state, self.offset_index, mapped.address, self._map_len,
                        self.base_offset, cache, cache.address, Record, tick, LogSegment.lookup_record)
                return got  # type: ignore[no-any-return]  # the record, or None: not here
            return mapped.lookup_record(size, idx, self.base_offset, offset,  # type: ignore[no-any-return]
                                        self.verified_bytes, cache, Record, decode_headers, self.log_path, got)
        return mapped.lookup_record(size, idx, self.base_offset, offset,  # type: ignore[no-any-return]
                                    self.verified_bytes, cache, Record, decode_headers, self.log_path)

    def lookup_stats(self) -> Dict[str, int]:
        """Counters of this segment's lookup cache (hits, tables_built, crc_checks, forgets,
        range_resets, verified_ranges); all zero before the first lookup. For tests and tuning."""
        if self._lookups is None:
            return LookupCache.empty_stats()
        return self._lookups.stats()

    # ---- recovery / truncation -------------------------------------------------
    def recover(self, *, truncate: bool = True, from_offset: Optional[int] = None) -> SegmentRecovery:
        """Validate every batch (size, magic, CRC, increasing offsets), rebuild both
        indexes, and truncate the file after the last valid batch.

        ``from_offset`` (the log's recovery point: every batch below it, and the
        index entries for them, were fsynced) starts the scan at the offset-index
        entry at or below it instead of at byte 0, keeping the index entries up
        to that one (:meth:`_recovery_start` says when it may, and checks the
        entry against the ``.log``); otherwise, and when the entry does not
        check out, the whole segment is scanned.

        With ``truncate=False`` invalid bytes are not cut: the file is left as
        it is and :class:`CorruptRecordError` raised naming it, the position
        and the reason (the segment is then unusable until reopened).

        Complexity: O(segment bytes), or O(bytes from the index entry at or below
        ``from_offset``) + O(index entries after it). Durability: truncation and
        index rebuilds are written but not fsynced; the caller flushes.
        """
        self._drop_map()
        self.recent_starts.clear()
        self._dirty = True
        # The indexes are rebuilt aside and replace the old ones only once the scan is
        # done: a refused segment (truncate=False) keeps its index files as they were.
        file_size = self.io.size(self.fd)
        start = self._recovery_start(from_offset, file_size)
        st = self._state
        st.bytes_since_last_index_entry = 0
        self.first_batch_timestamp = None
        if start is None:
            offset_entries, time_entries, start_position = bytearray(), bytearray(), 0
            kept = (0, 0)
            st.size = 0
            st.max_timestamp_so_far = -1
            st.offset_of_max_timestamp = self.base_offset
            st.last_index_offset = self.base_offset - 1
            st.last_time_index_timestamp = -1
            st.last_time_index_offset = self.base_offset
        else:
            # The state just before the batch of the kept entry was appended, with its entries
            # already made (so the rescan of that batch adds none: bytes_since_last_index_entry 0).
            start_position, entry_offset, offset_entries, time_entries = start
            kept = (len(offset_entries), len(time_entries))  # already in the files: only cut after them
            st.size = start_position
            st.last_index_offset = entry_offset
            ts, toff = ((-1, self.base_offset) if not time_entries else
                        time_entry_at(time_entries, len(time_entries) // 12 - 1))
            toff = toff + self.base_offset if time_entries else toff
            st.max_timestamp_so_far = st.last_time_index_timestamp = ts
            st.offset_of_max_timestamp = st.last_time_index_offset = toff
        pos = start_position
        batches: List[BatchInfo] = []
        reason = ""
        while pos < file_size:
            chunk = self.io.pread(self.fd, min(8 * 1024 * 1024, file_size - pos), pos)
            found = scan(chunk, verify_crc=True)
            for info in found.batches:
                if info.base_offset < self.base_offset or info.last_offset - self.base_offset > 0x7FFFFFFF or (
                    batches and info.base_offset <= batches[-1].last_offset
                ):
                    reason = f"offset {info.base_offset} outside segment or out of order"
                    found = found._replace(batches=[], valid_bytes=0)
                    break
                try:
                    idx_entry, time_entry = st.after_append(info.size, info.last_offset, info.max_timestamp,
                                                            info.last_offset,
                                                            f"index rebuild failed at offset {info.last_offset}")
                except PylogError as exc:
                    reason = str(exc)
                    break
                if idx_entry is not None:
                    offset_entries += idx_entry
                if time_entry is not None:
                    time_entries += time_entry
                if self.first_batch_timestamp is None and not start_position:
                    self.first_batch_timestamp = info.max_timestamp
                batches.append(info._replace(position=pos + info.position))
            if reason:
                break
            pos += found.valid_bytes
            if not found.ok:
                if found.torn and len(chunk) < file_size - (pos - found.valid_bytes):
                    continue  # the chunk cut a batch; read on from it
                reason = found.reason
                break
            if found.valid_bytes == 0:
                break
        valid = int(st.size)
        truncated = file_size - valid
        if truncated and not truncate:
            raise CorruptRecordError(
                f"{reason or 'bytes after the last valid batch'} ({truncated} bytes from here to the end of the "
                f"segment fail validation, in a segment followed by segments that hold data: corruption, not a "
                f"torn write). Restore the file, or open with repair=True (pylog verify --repair) to truncate the "
                f"log here, deleting every later segment",
                path=self.log_path, position=valid,
            )
        self.offset_index.replace_entries(offset_entries, kept[0])
        self.time_index.replace_entries(time_entries, kept[1])
        if truncated:
            self.io.truncate(self.fd, valid)
            if not reason:
                reason = "bytes after the last valid batch"
        self._indexes_ready = True
        self.verified_bytes = valid if not start_position else 0  # the kept prefix was not CRC-checked here
        return SegmentRecovery(valid, truncated, batches, reason, start_position)

    def _recovery_start(self, from_offset: Optional[int],
                        file_size: int) -> Optional[Tuple[int, int, bytearray, bytearray]]:
        """Where :meth:`recover` may start when every batch below ``from_offset`` is durable:
        ``(position, offset, offset entries to keep, time entries to keep)`` for the newest
        offset-index entry below ``from_offset``, or None (scan the whole segment).

        The index files are read raw: their entries past ``from_offset`` were written after the
        last fsync and may be missing, stale or torn, so the walk back from the end over them
        only looks for the newest entry below ``from_offset``; the kept prefixes must then pass
        the C index check, and the kept entry must point at a CRC-valid batch whose last offset
        is the entry's offset. Anything else returns None. Complexity: O(index entries past
        ``from_offset``) + O(kept entries) in C + one batch read.
        """
        base = self.base_offset
        if from_offset is None or from_offset <= base or self.read_only:
            return None
        try:
            idx = self.io.read_file(self.offset_index.path)
            tidx = self.io.read_file(self.time_index.path)
        except OSError:
            return None
        # Candidates: entries below from_offset that follow the one before them (zeros or stale
        # bytes of a torn tail do not), newest first; the first whose batch and kept prefixes
        # check out is the start. A few tries, then the whole segment.
        k = len(idx) // 8 - 1
        tries = 0
        while k >= 0 and tries < 8:
            rel, pos = offset_entry_at(idx, k)
            if 0 <= rel < from_offset - base and pos > 0 and (k == 0 or all(a > b for a, b in zip(
                    (rel, pos), offset_entry_at(idx, k - 1)))):
                tries += 1
                start = self._checked_start(idx, tidx, k, base + rel, pos, file_size)
                if start is not None:
                    return start
            k -= 1
        return None

    def _checked_start(self, idx: bytes, tidx: bytes, k: int, offset: int, pos: int,
                       file_size: int) -> Optional[Tuple[int, int, bytearray, bytearray]]:
        """:meth:`_recovery_start`'s check of offset-index entry ``k`` = (``offset``, ``pos``)."""
        base = self.base_offset
        head = self.io.pread(self.fd, 12, pos)
        if len(head) < 12:
            return None
        length = batch_length_of(head)
        if length <= 0 or pos + 12 + length > file_size:
            return None
        found = scan(self.io.pread(self.fd, length + 12, pos), verify_crc=True, max_batches=1)
        if not found.batches or found.batches[0].last_offset != offset or found.batches[0].base_offset < base:
            return None
        j = len(tidx) // 12 - 1
        while j >= 0:
            ts, trel = time_entry_at(tidx, j)
            if 0 <= trel <= offset - base:  # a time entry is only made when the timestamp grew
                if j == 0:
                    break
                prev_ts, prev_rel = time_entry_at(tidx, j - 1)
                if ts > prev_ts and trel >= prev_rel:
                    break
            j -= 1
        keep, tkeep = bytearray(idx[: 8 * (k + 1)]), bytearray(tidx[: 12 * (j + 1)])
        for data, is_time, path in ((keep, False, self.offset_index.path), (tkeep, True, self.time_index.path)):
            try:
                index_check(data, is_time, file_size, path)
            except CorruptIndexError:
                return None
        return pos, offset, keep, tkeep

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed.

        Like Kafka, truncation happens at a batch boundary: a batch that
        straddles ``offset`` is removed whole.
        """
        self.ensure_indexes()
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        self._drop_map()
        self._dirty = True
        self.recent_starts.clear()
        self.verified_bytes = min(self.verified_bytes, position)
        # Memory first, then the files: if a file cannot be cut (EIO) the segment still
        # ends at ``position`` for every reader and appender, and the stale bytes past it
        # are cut before the next flush (a clean close flushes); the error is raised.
        first: Optional[OSError] = None
        for index in (self.offset_index, self.time_index):
            try:
                index.truncate_to(offset)
            except OSError as exc:
                first = first or exc
        try:
            self.txn_index.truncate_to(offset)
        except CorruptIndexError as exc:  # emptied: the log's producer-state reload adds back what it replays
            log.warning("emptying damaged transaction index while truncating: %s", exc)
            try:
                self.txn_index.reset()
            except OSError as exc2:
                first = first or exc2
        except OSError as exc:
            first = first or exc
        try:
            self._cut_stale_tail(position, raise_error=True)
        except OSError as exc:
            first = first or exc
        st = self._state
        st.size = position
        st.bytes_since_last_index_entry = 0
        st.max_timestamp_so_far = -1
        st.offset_of_max_timestamp = self.base_offset
        self._sync_state_from_indexes()
        self._rescan_max_timestamp()
        if position == 0:
            self.first_batch_timestamp = None
        if first is not None:
            raise first
        return removed

    def _cut_stale_tail(self, size: int, *, raise_error: bool = False) -> None:
        """Cut the ``.log`` file to ``size`` (the logical end). If that fails the bytes past
        it stay in the file, unseen (reads and appends use the logical size; an append
        overwrites them), and :meth:`flush` cuts them before it fsyncs, so a clean close
        never leaves an unacknowledged batch behind."""
        self._stale_tail = True
        try:
            self.io.truncate(self.fd, size)
        except OSError:
            if raise_error:
                raise
            return
        self._stale_tail = False

    def _rescan_max_timestamp(self) -> None:
        """Fold the batches after the last offset-index entry into the max timestamp.

        The time index only holds a sample; after a truncation the largest
        timestamp may belong to a batch no entry points at (Kafka's
        LogSegment.readLargestTimestamp). O(index_interval_bytes + one batch).
        """
        st = self._state
        _, pos = self.offset_index.last_entry()
        size = self.size
        while pos < size:
            chunk = self.io.pread(self.fd, min(4 * 1024 * 1024, size - pos), pos)
            found = scan(chunk, verify_crc=False)
            for info in found.batches:
                if info.max_timestamp > st.max_timestamp_so_far:
                    st.max_timestamp_so_far = info.max_timestamp
                    st.offset_of_max_timestamp = info.last_offset
            if found.valid_bytes == 0:
                whole = self._read_whole_batch(pos) if found.torn else None
                if whole is None:
                    break
                if whole.max_timestamp > st.max_timestamp_so_far:
                    st.max_timestamp_so_far = whole.max_timestamp
                    st.offset_of_max_timestamp = whole.last_offset
                pos += whole.size
                continue
            pos += found.valid_bytes

    # ---- lifecycle ---------------------------------------------------------------
    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index (Kafka onBecomeInactiveSegment)."""
        self.recent_starts.clear()  # only the active segment's starts serve the fetch fast path
        if self.read_only:
            return
        self.ensure_indexes()
        st = self._state
        if st.max_timestamp_so_far > st.last_time_index_timestamp and st.size > 0:
            rel = st.offset_of_max_timestamp - self.base_offset
            entry = int(st.max_timestamp_so_far).to_bytes(8, "big", signed=True) + int(rel).to_bytes(4, "big", signed=True)
            if st.offset_of_max_timestamp >= st.last_time_index_offset:
                self.time_index.append_raw(entry)
                st.last_time_index_timestamp = st.max_timestamp_so_far
                st.last_time_index_offset = st.offset_of_max_timestamp

    def flush(self) -> None:
        """fsync the log and both indexes. Durability: survives power loss after return.

        First cuts bytes a failed append or truncation could not remove
        (:meth:`_cut_stale_tail`). The ``.log`` is fsynced only when its bytes may not be durable
        yet (:attr:`log_synced`: an untouched new or cleanly loaded segment costs no fsync); an
        index is fsynced when this process wrote it. A segment holding data gets both index files
        here if no entry made them yet, so a cleanly closed segment never opens with an index
        missing (which would mean a rebuild)."""
        if self.read_only or (self._fd is None and not self._dirty and self._cache is not None):
            return  # released by the open-segment cache, which flushed it first
        sync_log = self._dirty or not self.log_synced or self._stale_tail
        if self._stale_tail:
            self._cut_stale_tail(self._state.size, raise_error=True)
        if sync_log:
            self.io.fsync(self.fd)
        has_data = self._state.size > 0  # a flushed segment holding data has both index files
        self.offset_index.flush(ensure_file=has_data)
        self.time_index.flush(ensure_file=has_data)
        if self.offset_index.new_name or self.time_index.new_name:
            # Index files made since the last flush (lazily): their names durable too, so a power
            # loss after this flush does not cost a rebuild (a scan of the whole segment) on open.
            self.io.fsync_dir(self.directory)
            self.offset_index.new_name = self.time_index.new_name = False
        if self._txn_index is not None:
            self._txn_index.flush()
        self._dirty = False
        self.log_synced = True

    def close(self) -> None:
        """Release the map and the three descriptors. Every one is released even if closing an
        earlier one raises; the first OSError is raised after. Idempotent."""
        if self._cache is not None:
            self._cache.discard(self)
            self._cache = None
        first = self._close_files()
        if first is not None:
            raise first

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the segment's three files from the current suffix to ``new_suffix``
        (Kafka's LogSegment.changeFileSuffixes: ``.cleaned`` -> ``.swap`` -> ``""``,
        or ``""`` -> ``.deleted``). Open descriptors stay valid across the rename.

        The ``.log`` is renamed last, so a crash in between leaves index files
        that recovery either renames with it or removes as orphans. Durability:
        the caller fsyncs the directory.
        """
        prefix = os.path.join(self.directory, filename_prefix(self.base_offset))
        for index, ext in ((self.offset_index, ".index"), (self.time_index, ".timeindex")):
            target = prefix + ext + new_suffix
            if self.io.exists(index.path):
                self.io.replace(index.path, target)
            index.path = target
        if self._txn_index is not None:
            self._txn_index.rename_to(prefix + TXN_INDEX_SUFFIX + new_suffix)
        elif self.io.exists(self.txn_path):
            self.io.replace(self.txn_path, prefix + TXN_INDEX_SUFFIX + new_suffix)
        target = prefix + ".log" + new_suffix
        self.io.replace(self.log_path, target)
        self.log_path = target
        self.suffix = new_suffix

    def delete(self) -> None:
        """Remove the segment's files and close it.

        All-or-nothing for the records: the ``.log`` is unlinked first, and if
        that fails the segment is untouched (still open and readable) and the
        OSError raised. Once it is gone the indexes are closed and unlinked,
        best effort: an index left without its ``.log`` is removed as an orphan
        on the next open, and a segment created later at the same base offset
        empties it first (see ``__init__``). Durability: the caller fsyncs the
        directory.
        """
        if self.io.exists(self.log_path):
            self.io.unlink(self.log_path)
        if self._cache is not None:
            self._cache.discard(self)
            self._cache = None
        self._drop_map()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self.io.close(fd)
            except OSError:
                pass
        for index in (self.offset_index, self.time_index):
            try:
                index.delete()
            except OSError:
                pass
        try:
            self.txn_index.delete_if_exists()
        except OSError:
            pass
        self._txn_index = None

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"
