"""Typed bindings of the C core's index and segment functions (``index.c``).

* :func:`index_check`, :func:`offset_index_lookup`, :func:`time_index_lookup`
  - the ``.index``/``.timeindex`` files;
* :class:`SegmentState` - a segment's sparse-index bookkeeping
  (``plg_segment_state_t``, Kafka's ``LogSegment.append`` rule);
* :class:`LookupCache` and :class:`MappedLog` - the point lookup of one record
  by offset in a mapped ``.log`` (``plg_lookup_cached``, or the send-path
  extension's ``point_lookup`` that builds the record in the same C call).

Callers get ints, bytes, tuples or :mod:`pylog.errors` exceptions; the cffi
objects stay inside the holder classes, which own their C memory.

Thread-safety: the functions are re-entrant; a holder belongs to one
thread at a time (a segment's are used under its log's lock).
"""
from __future__ import annotations

from functools import partial
from operator import attrgetter
from typing import Any, Callable, Dict, Optional, Tuple, Union

from pylog._native import OK, check, ffi, lib, sendpath_module, strerror
from pylog.errors import CorruptIndexError, CorruptRecordError

Buffer = Union[bytes, bytearray, memoryview]
ENOTFOUND: int = lib.PLG_ENOTFOUND
EUNSUPPORTED: int = lib.PLG_EUNSUPPORTED
#: Batches per segment whose record anchors the point-lookup cache keeps (direct-mapped by position).
LOOKUP_CACHE_BATCHES = 1024


def index_check(data: Buffer, is_time: bool, log_size: int, path: str) -> int:
    """``plg_index_check``: the number of entries of a valid index file ``data`` (entries in
    order, positions inside a log of ``log_size`` bytes); raises :class:`CorruptIndexError`
    naming ``path``. O(entries)."""
    entries = ffi.new("uint64_t *")
    rc = lib.plg_index_check(ffi.from_buffer(data), len(data), 1 if is_time else 0, log_size, entries)
    if rc != OK:
        raise CorruptIndexError(f"invalid index: {strerror(rc)}", path=path)
    return int(entries[0])


def offset_index_lookup(data: Buffer, relative_offset: int) -> Tuple[int, int]:
    """``plg_offset_index_lookup``: ``(relative offset, position)`` of the largest entry of the
    ``.index`` bytes ``data`` whose offset is <= ``relative_offset``; ``(0, 0)`` when none.
    O(log entries)."""
    rel_out = ffi.new("int32_t *")
    pos_out = ffi.new("int32_t *")
    lib.plg_offset_index_lookup(ffi.from_buffer(data), len(data), relative_offset, rel_out, pos_out)
    return int(rel_out[0]), int(pos_out[0])


def time_index_lookup(data: Buffer, timestamp: int) -> Tuple[int, int]:
    """``plg_time_index_lookup``: ``(timestamp, relative offset)`` of the largest entry of the
    ``.timeindex`` bytes ``data`` with timestamp <= ``timestamp``; ``(-1, 0)`` when none.
    O(log entries)."""
    ts_out = ffi.new("int64_t *")
    rel_out = ffi.new("int32_t *")
    lib.plg_time_index_lookup(ffi.from_buffer(data), len(data), timestamp, ts_out, rel_out)
    return int(ts_out[0]), int(rel_out[0])


_STATE_FIELDS = ("base_offset", "size", "bytes_since_last_index_entry", "index_interval_bytes",
                 "max_timestamp_so_far", "offset_of_max_timestamp", "last_index_offset",
                 "last_time_index_timestamp", "last_time_index_offset")
_STATE_SIZE: int = ffi.sizeof("plg_segment_state_t")


def _state_field(name: str) -> property:
    def put(self: "SegmentState", value: int) -> None:
        setattr(self._st, name, value)

    # The getter is attrgetter (C, no Python frame): segments read their size on every read and lookup.
    return property(attrgetter(f"_st.{name}"), put, doc=f"``plg_segment_state_t.{name}`` (an int)")


class SegmentState:
    """One segment's sparse-index bookkeeping (``plg_segment_state_t``): its size, the bytes since
    the last index entry, the largest timestamp so far and the last entries of both indexes.

    Fields read and write as ints; :meth:`after_append` applies Kafka's rule
    for one appended batch (or a recovered one) and returns the index entries
    to write. Not thread-safe (the segment's log serialises it).
    """

    __slots__ = ("_st", "_idx", "_tidx", "_flags")

    base_offset = _state_field("base_offset")
    size = _state_field("size")
    bytes_since_last_index_entry = _state_field("bytes_since_last_index_entry")
    index_interval_bytes = _state_field("index_interval_bytes")
    max_timestamp_so_far = _state_field("max_timestamp_so_far")
    offset_of_max_timestamp = _state_field("offset_of_max_timestamp")
    last_index_offset = _state_field("last_index_offset")
    last_time_index_timestamp = _state_field("last_time_index_timestamp")
    last_time_index_offset = _state_field("last_time_index_offset")

    @property
    def address(self) -> int:
        """The address of the ``plg_segment_state_t`` (valid while this object lives)."""
        return int(ffi.cast("uintptr_t", self._st))

    def __init__(self) -> None:
        self._st = ffi.new("plg_segment_state_t *")
        self._idx = ffi.new("uint8_t[8]")
        self._tidx = ffi.new("uint8_t[12]")
        self._flags = ffi.new("uint32_t *")

    def after_append(self, append_bytes: int, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int,
                     what: str) -> Tuple[Optional[bytes], Optional[bytes]]:
        """``plg_segment_after_append``: account for one batch of ``append_bytes`` ending at
        ``last_offset``; returns the ``.index`` entry (8 bytes) and ``.timeindex`` entry (12 bytes)
        to append, each None when Kafka's rule adds none. Raises the status's exception
        (:class:`~pylog.errors.InvalidOffsetError` for offsets out of order), its message
        starting with ``what``; the state is then unchanged. O(1)."""
        rc = lib.plg_segment_after_append(self._st, append_bytes, last_offset, max_timestamp,
                                          offset_of_max_timestamp, self._idx, self._tidx, self._flags)
        if rc != OK:
            check(rc, what)
        f = self._flags[0]
        return (ffi.buffer(self._idx, 8)[:] if f & 1 else None,
                ffi.buffer(self._tidx, 12)[:] if f & 2 else None)

    def snapshot(self) -> bytes:
        """The whole state as bytes, for :meth:`restore` (an append undone after an I/O error). O(1)."""
        return ffi.buffer(self._st, _STATE_SIZE)[:]  # type: ignore[no-any-return]

    def restore(self, saved: bytes) -> None:
        """Put back a state taken by :meth:`snapshot`. O(1)."""
        ffi.memmove(self._st, saved, _STATE_SIZE)


_STAT_NAMES = ("hits", "tables_built", "crc_checks", "forgets", "range_resets", "verified_ranges")


class LookupCache:
    """A C point-lookup cache (``plg_lookup_cache_t``: per-batch record anchors and the
    CRC-verified ranges of one segment), freed when this object is collected."""

    __slots__ = ("_cache", "address")

    def __init__(self, max_batches: int = LOOKUP_CACHE_BATCHES):
        cache = lib.plg_lookup_cache_new(max_batches)
        if cache == ffi.NULL:
            raise MemoryError("no memory for the point-lookup cache")
        self._cache = ffi.gc(cache, lib.plg_lookup_cache_free)
        #: the cache's address, for the send-path extension's point lookup
        self.address = int(ffi.cast("uintptr_t", cache))

    def stats(self) -> Dict[str, int]:
        """The cache's counters (hits, tables_built, crc_checks, forgets, range_resets, verified_ranges)."""
        st = ffi.new("plg_lookup_stats_t *")
        lib.plg_lookup_cache_stats(self._cache, st)
        return {n: int(getattr(st, n)) for n in _STAT_NAMES}

    @staticmethod
    def empty_stats() -> Dict[str, int]:
        """The counters of a cache not made yet: all zero."""
        return dict.fromkeys(_STAT_NAMES, 0)


#: The send-path extension's point lookup (the record built in the same C call), or None without it.
_point_lookup: Any = None
if sendpath_module is not None:
    _point_lookup = sendpath_module.point_lookup
    sendpath_module.set_lookup_function(int(ffi.cast("uintptr_t", ffi.addressof(lib, "plg_lookup_cached"))))

#: The send-path extension's ``PointReader`` type, or None without it: a segment's point lookup bound
#: to its map, lookup cache and state, called as ``reader(offset)`` with no Python frame (see
#: :meth:`pylog.storage.segment.LogSegment.lookup_record` and ``sendpath.c``).
PointReader: Any = sendpath_module.PointReader if sendpath_module is not None else None


class MappedLog:
    """A read-only mapping of a ``.log`` file as the C core sees it: from an address and length
    (a raw ``mmap`` with headroom) or from a buffer (an :class:`mmap.mmap`).

    Callers never touch it past the file's logical end (their ``size``
    arguments), so pages past the end of the file are never read.
    :meth:`release` ends a buffer's export before the mapping is closed. Not
    thread-safe (a segment's map is used under its log's lock, or copied out).
    """

    __slots__ = ("ptr", "length", "address", "point", "_exported", "_buf", "_ref")

    def __init__(self, length: int, address: int = 0, buffer: Any = None):
        self.length = length
        self._exported = buffer is not None
        #: the cffi ``uint8_t *`` (for :mod:`pylog.storage.log`'s tail scan until it moves to
        #: :mod:`pylog.record`; nothing else may touch it)
        self.ptr: Any = ffi.from_buffer(buffer) if buffer is not None else ffi.cast("uint8_t *", address)
        self.address = address if buffer is None else int(ffi.cast("uintptr_t", self.ptr))
        self._buf: Any = None
        self._ref: Any = None
        #: the send-path extension's point lookup bound to this map, or None without the extension:
        #: ``point(size, index, base_offset, offset, verified_bytes, cache.address, record_type)``
        #: returns the record, None (not here), or an int status for :meth:`lookup_record`'s
        #: ``point_status`` (1: a record with headers). The caller's hot path calls it directly.
        self.point: Any = partial(_point_lookup, self.address) if _point_lookup is not None else None

    def release(self) -> None:
        """End the buffer export (a map made from an :class:`mmap.mmap`); a no-op otherwise."""
        if self._exported:
            ffi.release(self.ptr)
            self._exported = False
        self._buf = None

    def read(self, position: int, n: int) -> bytes:
        """``n`` bytes from ``position`` (one copy, no system call)."""
        return ffi.buffer(self.ptr + position, n)[:]  # type: ignore[no-any-return]

    def view(self, position: int, n: int) -> memoryview:
        """A zero-copy view of ``n`` bytes from ``position`` (for a scan under the owner's lock; it
        must not outlive the mapping - copy out with :meth:`read`)."""
        return memoryview(ffi.buffer(self.ptr + position, n))

    def find_batch(self, position: int, end: int, offset: int) -> Tuple[int, int, int]:
        """``plg_find_batch`` over bytes ``position..end``: ``(status, position, last offset)`` as
        :func:`pylog._native.batch.find_batch` (positions relative to ``position``)."""
        out_pos = ffi.new("uint64_t *")
        out_last = ffi.new("int64_t *")
        rc = lib.plg_find_batch(self.ptr + position, end - position, offset, out_pos, out_last)
        return rc, int(out_pos[0]), int(out_last[0])

    def lookup_record(self, size: int, index: bytearray, base_offset: int, offset: int, verified_bytes: int,
                      cache: LookupCache, record_type: Any,
                      decode_headers: Callable[[bytes, int, Optional[str], Optional[int]], Any],
                      path: str, point_status: Optional[int] = None) -> Any:
        """The record at ``offset`` in the first ``size`` bytes, found through the ``.index`` bytes
        ``index`` and ``cache``; None when the fast path does not apply (compressed, legacy or
        control batch) or no record has that offset. Records are ``record_type(value, key,
        headers, timestamp, offset, timestamp_type)``; ``decode_headers(span, count, path, position)``
        decodes a record's headers. Raises :class:`CorruptRecordError` naming ``path``.

        With the send-path extension built the lookup and the record are one C
        call (``point_lookup``); a record with headers, and builds without the
        extension, take ``plg_lookup_cached``. ``point_status`` is what :attr:`point` returned
        when the caller called it already (an int). Complexity: see
        :meth:`pylog.storage.segment.LogSegment.lookup_record`.
        """
        got = point_status
        if got is None and self.point is not None:
            got = self.point(size, index, base_offset, offset, verified_bytes, cache.address, record_type)
            if type(got) is not int:
                return got  # the record, or None: not here
        if got is not None:
            if got != 1:  # 1: a record with headers, decoded below
                raise CorruptRecordError(f"invalid batch while reading offset {offset}: {strerror(got)}", path=path)
        ref = self._ref
        if ref is None:
            ref = self._ref = ffi.new("plg_record_ref_t *")
        rc = lib.plg_lookup_cached(self.ptr, size, ffi.from_buffer(index), len(index), base_offset, offset,
                                   verified_bytes, cache._cache, ref)
        if rc:
            if rc == ENOTFOUND or rc == EUNSUPPORTED:
                return None
            raise CorruptRecordError(f"invalid batch while reading offset {offset}: {strerror(rc)}", path=path)
        attributes = ref.attributes
        if attributes & 0x20:  # control batch: not an application record
            return None
        mm = self._buf  # slices copy out, never past the logical end (C checked every position)
        if mm is None:
            mm = self._buf = ffi.buffer(self.ptr, self.length)
        kl = ref.key_len
        vl = ref.value_len
        hc = ref.header_count
        if kl >= 0:
            kp = ref.key_pos
            key = mm[kp : kp + kl]
        else:
            key = None
        if vl >= 0:
            vp = ref.value_pos
            value = mm[vp : vp + vl]
        else:
            value = None
        if hc:
            hp = ref.headers_pos
            headers = decode_headers(mm[hp : hp + ref.headers_len], hc, path, int(ref.batch_position))
        else:
            headers = ()
        return tuple.__new__(record_type, (value, key, headers, ref.timestamp, offset, 1 if attributes & 0x08 else 0))


__all__ = ["ENOTFOUND", "EUNSUPPORTED", "LOOKUP_CACHE_BATCHES", "index_check", "offset_index_lookup",
           "time_index_lookup", "SegmentState", "LookupCache", "MappedLog"]
