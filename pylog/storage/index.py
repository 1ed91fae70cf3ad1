"""A segment's sparse indexes: ``.index`` (offset -> position) and ``.timeindex``.

The entries live in memory as the exact bytes of the file (big-endian, 8 or
12 bytes each) so that the C core binary-searches them where they are, and
appending an entry is one ``bytearray`` extend plus one positional write.
Files are loaded lazily on first use (Kafka's LazyIndex), validated by the C
core, and never preallocated: the file length is always ``entries *
entry_size``, which is also what Kafka leaves after trimming a segment.

Durability: entries reach the disk on :meth:`flush` (fsync). An index is
derived data: after a crash, recovery rebuilds it from the log.
Thread-safety: none; the owning segment's log serialises access.
"""
from __future__ import annotations

import struct
from typing import Optional, Tuple

from pylog import _native
from pylog._native import ffi, lib
from pylog.errors import CorruptIndexError
from pylog.storage.fileio import FileIO


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

    # -- loading ------------------------------------------------------------
    def load(self, log_size: int) -> None:
        """Read and validate the file; raises :class:`CorruptIndexError` when invalid."""
        try:
            data = bytearray(self.io.read_file(self.path)) if self.io.exists(self.path) else bytearray()
        except FileNotFoundError:  # deleted by the writer since exists(): a reader's race
            data = bytearray()
        entries = ffi.new("uint64_t *")
        rc = lib.plg_index_check(ffi.from_buffer(data), len(data), self.is_time, log_size, entries)
        if rc != _native.OK:
            raise CorruptIndexError(f"invalid index: {_native.strerror(rc)}", path=self.path)
        self._data = data

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
            self._fd = self.io.open(self.path)
        return self._fd

    def append_raw(self, entry: bytes) -> None:
        """Append one encoded entry (from the C core's append bookkeeping)."""
        data = self._data
        if data is None:
            data = self.data  # raises: used before load()
        fd = self._fd
        if fd is None:
            fd = self._ensure_fd()
        self.io.pwrite(fd, entry, len(data))
        data += entry

    def _truncate_entries(self, n: int) -> None:
        data = self.data
        if n * self.entry_size < len(data):
            del data[n * self.entry_size :]
            self.io.truncate(self._ensure_fd(), len(data))

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._data = bytearray()
        if self.io.exists(self.path) or self._fd is not None:
            self.io.truncate(self._ensure_fd(), 0)

    def flush(self) -> None:
        if self._fd is not None:
            self.io.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            self.io.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        if self.io.exists(self.path):
            self.io.unlink(self.path)
        self._data = bytearray()


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
        rel_out = ffi.new("int32_t *")
        pos_out = ffi.new("int32_t *")
        data = self.data
        lib.plg_offset_index_lookup(ffi.from_buffer(data), len(data), rel, rel_out, pos_out)
        return self.base_offset + rel_out[0], pos_out[0]

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


class TimeIndex(_Index):
    """``.timeindex``: 12-byte entries (timestamp i64, relative offset i32)."""

    entry_size = 12
    is_time = 1

    def lookup(self, timestamp: int) -> Tuple[int, int]:
        """``(timestamp, offset)`` of the largest entry with timestamp <= target; ``(-1, base)`` if none."""
        ts_out = ffi.new("int64_t *")
        rel_out = ffi.new("int32_t *")
        data = self.data
        lib.plg_time_index_lookup(ffi.from_buffer(data), len(data), timestamp, ts_out, rel_out)
        return ts_out[0], self.base_offset + rel_out[0]

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
