"""A segment's sparse indexes: ``.index`` (offset -> position) and ``.timeindex``.

The entries live in memory as the exact bytes of the file (big-endian, 8 or
12 bytes each) so that the C core binary-searches them where they are, and
appending an entry is one ``bytearray`` extend. The file is written behind
the memory: the entries not yet in it (at most :data:`PENDING_ENTRIES`) go
out with one positional write when that many are pending, and on
:meth:`_Index.flush`, :meth:`_Index.close` and any truncation - where Kafka
writes its entries into an mmap of the file, pylog saves a system call per
entry this way (an append of one batch used to cost one ``pwrite`` per
entry, more than the batch's own). Files are loaded lazily on first use
and created lazily (Kafka's LazyIndex: a new segment has no index files
until its first entry is written or it is flushed holding data - creating
1,000 partitions creates 1,000 ``.log`` files, not 3,000 files), validated
by the C core, and never preallocated: the
file length is always a whole number of entries, which is also what Kafka
leaves after trimming a segment.

Durability: entries reach the disk on :meth:`_Index.flush` (written, then
fsynced). Until then the file may lag the memory by up to
:data:`PENDING_ENTRIES` entries - after a crash as on a live reader's view
from another process - and a lagging index is still a valid sparse index
(each entry points at a batch start below the log's end; a lookup scans
forward from an earlier entry). An index is derived data: after a crash,
recovery rebuilds the index of every segment from the recovery point on
(the segments before it were flushed, indexes included).
Thread-safety: none; the owning segment's log serialises access.
"""
from __future__ import annotations

import struct
from typing import List, Optional, Tuple, Union

from pylog._native.index import index_check, offset_index_lookup, time_index_lookup
from pylog.errors import CorruptIndexError
from pylog.storage.fileio import FileIO

_OFFSET_ENTRY = struct.Struct(">ii")  # an .index entry: relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # a .timeindex entry: timestamp, relative offset

#: at most this many entries of an index are in memory only (the file lags by at most this many)
PENDING_ENTRIES = 64


class _Index:
    entry_size = 0
    is_time = 0

    def __init__(self, io: FileIO, path: str, base_offset: int, *, read_only: bool = False):
        self.io = io
        self.path = path
        self.base_offset = base_offset
        self.read_only = read_only
        self._data: Optional[bytearray] = None
        self._fd: Optional[int] = None
        #: bytes of ``_data`` known to be in the file (its prefix); the rest is pending
        self._written = 0
        #: write the pending entries once ``_data`` grows to this many bytes
        self._write_at = PENDING_ENTRIES * self.entry_size
        #: the file may hold stale entries past ``_written`` (a cut that failed): cut before the next write
        self._stale_tail = False
        #: the file may hold bytes or a length no fsync of this object covered (written or cut since
        #: the last fsync, or loaded from a file another object or process wrote, e.g. closed without
        #: a flush): the next flush fsyncs it; a flush with nothing written since fsyncs nothing
        self._unsynced = False
        #: whether the file is missing (None: not known yet; saves a stat per check)
        self._absent: Optional[bool] = None
        #: this object created the file and no directory sync has covered its name since
        #: (the segment's flush syncs the directory once: :attr:`new_name`)
        self.new_name = False

    # -- loading ------------------------------------------------------------
    def load(self, log_size: int) -> None:
        """Read and validate the file; raises :class:`CorruptIndexError` when invalid."""
        try:
            present = self.io.exists(self.path)
            data = bytearray(self.io.read_file(self.path)) if present else bytearray()
        except FileNotFoundError:  # deleted by the writer since exists(): a reader's race
            present, data = False, bytearray()
        self._absent = not present
        index_check(data, bool(self.is_time), log_size, self.path)
        self._data = data
        self._written = len(data)
        self._write_at = len(data) + PENDING_ENTRIES * self.entry_size
        self._stale_tail = False
        self._unsynced = bool(data) and not self.read_only

    def start_empty(self) -> None:
        """The index of a segment just created: no entries and, until the first write or
        :meth:`flush` with ``ensure_file``, no file (Kafka's LazyIndex). O(1), no system call."""
        self._data = bytearray()
        self._written = 0
        self._write_at = PENDING_ENTRIES * self.entry_size
        self._stale_tail = False
        self._unsynced = False
        self._absent = True

    @property
    def loaded(self) -> bool:
        return self._data is not None

    @property
    def data(self) -> bytearray:
        if self._data is None:
            raise CorruptIndexError("index used before load()", path=self.path)
        return self._data

    def __len__(self) -> int:
        return len(self.data) // self.entry_size

    # -- writing ------------------------------------------------------------
    def _ensure_fd(self) -> int:
        if self._fd is None:
            absent = self._absent if self._absent is not None else not self.io.exists(self.path)
            self._fd = self.io.open(self.path)
            self._absent = False
            if absent:
                self.new_name = True
        return self._fd

    def append_raw(self, entry: bytes) -> None:
        """Append one encoded entry (from the C core's append bookkeeping).

        In memory at once (lookups see it); in the file once
        :data:`PENDING_ENTRIES` are pending, or at the next flush, close or
        truncation. Complexity: O(1) amortised, one ``pwrite`` per
        :data:`PENDING_ENTRIES` entries. Durability: none until
        :meth:`flush`. Raises OSError when the write of the pending entries
        fails: ``entry`` is then not appended, the earlier ones stay pending.
        """
        data = self._data
        if data is None:
            data = self.data  # raises: used before load()
        data += entry
        if len(data) >= self._write_at:
            try:
                self.write_pending()
            except OSError:
                del data[-len(entry):]  # as if never appended; the earlier entries stay pending
                raise

    @property
    def pending_bytes(self) -> int:
        """Bytes of entries held in memory but not yet written to the file."""
        return 0 if self._data is None else len(self._data) - self._written

    def write_pending(self) -> None:
        """Write the entries not yet in the file, with one positional write (no fsync).

        Complexity: O(pending entries). Durability: page cache only; see
        :meth:`flush`. Raises OSError on a failed write; the entries stay
        pending and a later call writes them again from the same position.
        """
        data = self._data
        if data is None:
            return
        written = self._written
        if self._stale_tail:
            self._cut_file()
        if len(data) > written:
            fd = self._fd
            if fd is None:
                fd = self._ensure_fd()
            self._unsynced = True
            self.io.pwrite(fd, data[written:], written)  # a copy: no export pins the bytearray
            self._written = written = len(data)
        self._write_at = written + PENDING_ENTRIES * self.entry_size

    def _truncate_entries(self, n: int) -> None:
        data = self.data
        keep = n * self.entry_size
        if keep < len(data):
            del data[keep:]
            if keep < self._written:  # pending entries past ``keep`` were never in the file
                # Memory first: if the file cannot be cut, its entries past ``keep`` are
                # stale, and the next write (or flush) cuts them before writing.
                self._written = keep
                self._write_at = keep + PENDING_ENTRIES * self.entry_size
                self._stale_tail = True
                self._cut_file()
            self._write_at = self._written + PENDING_ENTRIES * self.entry_size

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._data = bytearray()
        self._written = 0
        self._write_at = PENDING_ENTRIES * self.entry_size
        if self.io.exists(self.path) or self._fd is not None:
            self._stale_tail = True
            self._cut_file()

    def _cut_file(self) -> None:
        """Cut the file to the entries known to be in it (raises OSError; retried by the next write)."""
        fd = self._ensure_fd()
        self._unsynced = True
        self.io.truncate(fd, self._written)
        self._stale_tail = False

    def replace_entries(self, data: bytearray, unchanged_prefix: int = 0) -> None:
        """Replace every entry with ``data`` (a rebuild): the file is cut (to
        ``unchanged_prefix`` bytes, which the caller read from it and kept as the
        start of ``data``; else emptied), then the rest written with one positional
        write (no fsync). Raises OSError; the entries are in memory either way
        (pending if the write failed)."""
        if not unchanged_prefix:
            self.reset()
        else:
            self._written = unchanged_prefix
            self._stale_tail = True
            self._cut_file()
        self._data = data
        self.write_pending()

    def flush(self, *, ensure_file: bool = False) -> None:
        """Write the pending entries and fsync the file if anything was written or cut since the last
        fsync. Durability: every entry survives power loss.

        The file is created here when ``ensure_file`` (its segment holds data) and no entry made it
        yet: an index file is made lazily, and one missing beside a non-empty ``.log`` means
        "rebuild" on the next open. A file this object created has :attr:`new_name` set: its
        directory entry is durable once the caller (the segment's flush) syncs the directory."""
        self.write_pending()
        if self._fd is None and ensure_file and not self.read_only and self._absent is None:
            self._absent = not self.io.exists(self.path)
        if self._fd is None and (self._unsynced or (ensure_file and not self.read_only and self._absent)):
            self._ensure_fd()  # entries written before this object loaded the file may not be synced yet
        if self._fd is not None and self._unsynced:
            self.io.fsync(self._fd)
            self._unsynced = False

    def close(self) -> None:
        """Write the pending entries (no fsync), best effort, and close the file.

        A failed write is not raised: the entries are derived data, and an index
        can only hold unwritten entries past the log's recovery point (a
        :meth:`flush` writes them, and the recovery point moves only after every
        segment flushed), where the next open rebuilds it anyway, as it does
        after a crash. (A clean close flushes first, so nothing is pending here.)
        """
        if self._fd is None and not self.pending_bytes:
            return
        try:
            self.write_pending()
        except OSError:
            pass
        if self._fd is not None:
            self.io.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        if self._data is not None:
            self._written = len(self._data)  # the file goes: nothing pending is worth a write
        self.close()
        if self.io.exists(self.path):
            self.io.unlink(self.path)
        self._absent = True
        self.new_name = False
        self._data = bytearray()
        self._written = 0


class OffsetIndex(_Index):
    """``.index``: 8-byte entries (relative offset i32, position i32)."""

    entry_size = 8
    is_time = 0

    def lookup(self, offset: int) -> Tuple[int, int]:
        """``(offset, position)`` of the largest entry <= ``offset``; ``(base, 0)`` if none.

        Complexity: O(log entries), warm tail first (Kafka's AbstractIndex).
        """
        rel = offset - self.base_offset
        if rel < 0:
            return self.base_offset, 0
        rel = min(rel, 0x7FFFFFFF)
        found_rel, pos = offset_index_lookup(self.data, rel)
        return self.base_offset + found_rel, pos

    def position_at(self, k: int) -> int:
        """The file position of entry ``k`` (0 <= k < number of entries). O(1)."""
        return int(_OFFSET_ENTRY.unpack_from(self.data, k * 8)[1])

    def last_entry(self) -> Tuple[int, int]:
        data = self.data
        if not data:
            return self.base_offset, 0
        rel, pos = struct.unpack_from(">ii", data, len(data) - 8)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset`` (Kafka OffsetIndex.truncateTo)."""
        data = self.data
        n = len(data) // 8
        keep = 0
        while keep < n and self.base_offset + struct.unpack_from(">i", data, keep * 8)[0] < offset:
            keep += 1
        self._truncate_entries(keep)


def offset_entry_at(data: Union[bytes, bytearray], k: int) -> Tuple[int, int]:
    """``(relative offset, position)`` of entry ``k`` of ``.index`` bytes ``data`` (the caller checks
    ``0 <= k < len(data) // 8``). O(1)."""
    rel, pos = _OFFSET_ENTRY.unpack_from(data, 8 * k)
    return int(rel), int(pos)


def time_entry_at(data: Union[bytes, bytearray], k: int) -> Tuple[int, int]:
    """``(timestamp, relative offset)`` of entry ``k`` of ``.timeindex`` bytes ``data`` (the caller
    checks ``0 <= k < len(data) // 12``). O(1)."""
    ts, rel = _TIME_ENTRY.unpack_from(data, 12 * k)
    return int(ts), int(rel)


def offset_index_entries(data: bytes) -> List[Tuple[int, int]]:
    """``(relative offset, position)`` of every entry of ``.index`` bytes ``data``. O(entries)."""
    return list(_OFFSET_ENTRY.iter_unpack(data[: len(data) // 8 * 8]))


class TimeIndex(_Index):
    """``.timeindex``: 12-byte entries (timestamp i64, relative offset i32)."""

    entry_size = 12
    is_time = 1

    def lookup(self, timestamp: int) -> Tuple[int, int]:
        """``(timestamp, offset)`` of the largest entry with timestamp <= target; ``(-1, base)`` if none."""
        ts, rel = time_index_lookup(self.data, timestamp)
        return ts, self.base_offset + rel

    def last_entry(self) -> Tuple[int, int]:
        data = self.data
        if not data:
            return -1, self.base_offset
        ts, rel = struct.unpack_from(">qi", data, len(data) - 12)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Remove entries whose offset is >= ``offset``."""
        data = self.data
        n = len(data) // 12
        keep = 0
        while keep < n and self.base_offset + struct.unpack_from(">i", data, keep * 12 + 8)[0] < offset:
            keep += 1
        self._truncate_entries(keep)
