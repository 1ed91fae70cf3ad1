"""Typed bindings of ``arrow.c``: v2 record batches decoded straight into Arrow column buffers.

The Spark source (:mod:`pylog.spark.reader`) allocates the Arrow buffers of
one chunk's rows and hands their addresses to :class:`ArrowColumns`; one C
call (:meth:`ArrowColumns.batches`) then decodes every uncompressed batch of
the chunk - offsets, timestamps in microseconds, timestamp types, and the
value and key binary columns (Arrow offsets, validity bitmaps, bytes back to
back) - with no per-batch or per-record Python work. Compressed batches go
through :meth:`ArrowColumns.records` once decompressed.

Corruption is an exception (:class:`~pylog.errors.CorruptRecordError` naming
the file and byte position), never a crash: the C core bounds-checks every
length against the buffer and every write against the caps given.

Thread-safety: an :class:`ArrowColumns` belongs to one thread. Complexity:
O(bytes) in C per call.
"""
from __future__ import annotations

from typing import Mapping, Optional

from pylog._native import ECORRUPT, OK, Buffer, check, ffi, lib, strerror
from pylog.errors import CorruptRecordError

#: bytes per entry of each fixed-width column (the binary columns' offsets have rows + 1 entries,
#: their validity bitmaps (rows + 7) // 8 bytes)
FIXED_WIDTHS = {"offset": 8, "timestamp": 8, "timestamp_type": 4, "value_offsets": 4, "key_offsets": 4,
                "header_count": 4}
_CTYPES = {"offset": "int64_t *", "timestamp": "int64_t *", "timestamp_type": "int32_t *",
           "value_offsets": "int32_t *", "key_offsets": "int32_t *", "header_count": "int32_t *",
           "value_validity": "uint8_t *", "key_validity": "uint8_t *", "value_data": "uint8_t *",
           "key_data": "uint8_t *"}


class ArrowColumns:
    """The columns of up to ``cap_rows`` rows, written by the C core into caller-owned memory.

    ``addresses`` maps each buffer name (``offset``, ``timestamp``,
    ``timestamp_type``, ``value_offsets``, ``value_validity``, ``value_data``,
    ``key_offsets``, ``key_validity``, ``key_data``, optionally
    ``header_count``) to the address of memory the caller keeps alive as long
    as this object: ``cap_rows`` entries of the fixed-width columns
    (:data:`FIXED_WIDTHS`; the offsets columns ``cap_rows + 1``),
    ``(cap_rows + 7) // 8`` bytes per validity bitmap, ``value_cap`` /
    ``key_cap`` bytes of data. Rows are appended in order; the counters
    (:attr:`rows`, ...) advance only for batches decoded whole.
    """

    __slots__ = ("_cols",)

    def __init__(self, addresses: Mapping[str, int], cap_rows: int, value_cap: int, key_cap: int):
        cols = ffi.new("plg_arrow_columns_t *")
        for name, ctype in _CTYPES.items():
            if name in addresses:
                setattr(cols, name, ffi.cast(ctype, addresses[name]))
        cols.cap_rows = cap_rows
        cols.value_cap = value_cap
        cols.key_cap = key_cap
        self._cols = cols

    @property
    def rows(self) -> int:
        return int(self._cols.rows)

    @property
    def value_used(self) -> int:
        return int(self._cols.value_used)

    @property
    def key_used(self) -> int:
        return int(self._cols.key_used)

    @property
    def value_nulls(self) -> int:
        return int(self._cols.value_nulls)

    @property
    def key_nulls(self) -> int:
        return int(self._cols.key_nulls)

    @property
    def header_rows(self) -> int:
        """Rows with at least one header so far."""
        return int(self._cols.header_rows)

    def batches(self, data: Buffer, start: int, stop: int, path: Optional[str], what: str) -> int:
        """Decode the batches of ``data[start:stop]`` (framed and CRC-checked by a scan) up to the
        first one that needs more than this (compressed or legacy); control batches add no rows.
        Returns the position after the last batch taken. Raises :class:`CorruptRecordError` naming
        ``path`` and the position of the bad batch (``what`` leads the message). O(bytes)."""
        if not 0 <= start <= stop <= len(data):
            raise ValueError(f"bad span [{start}, {stop}) of {len(data)} bytes")  # a caller bug, not bad data
        buf = ffi.from_buffer(data)
        consumed = ffi.new("uint64_t *")
        try:
            rc = lib.plg_arrow_batches(buf + start, stop - start, self._cols, consumed)
        finally:
            ffi.release(buf)
        at = start + int(consumed[0])
        if rc == ECORRUPT:
            raise CorruptRecordError(f"{what} (batch at byte {at}): {strerror(rc)}", path=path, position=at)
        check(rc, what, path, at)  # EOVERFLOW/EINVAL: caps too small, a caller bug
        return at

    def records(self, section: Buffer, count: int, base_offset: int, base_timestamp: int, max_timestamp: int,
                attributes: int, path: Optional[str], position: Optional[int], what: str) -> None:
        """Decode one uncompressed records section of ``count`` records (a decompressed batch).
        Raises :class:`CorruptRecordError` (``path``, ``position``). O(bytes)."""
        buf = ffi.from_buffer(section)
        try:
            rc = lib.plg_arrow_records(buf, len(buf), count, base_offset, base_timestamp, max_timestamp,
                                       attributes, self._cols)
        finally:
            ffi.release(buf)
        if rc == ECORRUPT:
            raise CorruptRecordError(f"{what}: {strerror(rc)}", path=path, position=position)
        check(rc, what, path, position)


__all__ = ["ArrowColumns", "FIXED_WIDTHS"]
