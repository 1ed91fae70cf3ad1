"""Typed bindings of the C core's record-batch functions (``batch.c``).

Each function validates its arguments, calls one ``plg_*`` entry point,
turns a non-zero status into a :mod:`pylog.errors` exception (or a status the
caller asked for) and returns Python values: ints, tuples, bytes, bytearrays
or memoryviews. No cffi object leaves this module except inside the opaque
holders :class:`DecodedColumns`, :class:`FetchRunScratch` and
:class:`ColumnTarget`, whose C arrays live exactly as long as the holder.

The one rule about buffer lifetimes is kept here, once: an exported buffer
(``ffi.from_buffer``) is released before anything can raise, because a
traceback kept alive in a reference cycle would otherwise let the collector
clear the exported memoryview first, and CPython 3.11 then crashes
(``tests/fuzz``).

Thread-safety: every function is re-entrant (no shared state; the C calls
release the GIL and keep no pointer after returning). A holder object belongs
to one thread at a time.
"""
from __future__ import annotations

import struct
from itertools import repeat
from operator import itemgetter
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from pylog._native import ECORRUPT, OK, check, ffi, lib, sendpath_module, strerror
from pylog.errors import CorruptRecordError, InvalidRecordError

Buffer = Union[bytes, bytearray, memoryview]

BATCH_OVERHEAD: int = lib.PLG_BATCH_OVERHEAD
LOG_OVERHEAD: int = lib.PLG_LOG_OVERHEAD
ENOTFOUND: int = lib.PLG_ENOTFOUND
EUNSUPPORTED: int = lib.PLG_EUNSUPPORTED
EINVAL: int = lib.PLG_EINVAL
#: bytes of the smallest v2 record: a records section of ``n`` bytes holds at most ``n // MIN_RECORD``
MIN_RECORD = 7
#: the smallest thing a scan can return (a legacy v0 message with its log header)
MIN_ENTRY: int = LOG_OVERHEAD + lib.PLG_LEGACY_V0_OVERHEAD

_new_tuple = tuple.__new__

#: the order of ``plg_batch_info_t``'s fields that :data:`INFO_FIELDS` returns rows in
INFO_FIELDS = ("position", "size", "magic", "attributes", "base_offset", "last_offset", "base_timestamp",
               "max_timestamp", "partition_leader_epoch", "producer_id", "producer_epoch", "base_sequence",
               "records_count", "crc")


def _info_unpacker() -> Tuple[struct.Struct, "itemgetter[Tuple[int, ...]]"]:
    """A ``struct`` layout of ``plg_batch_info_t`` (as the compiler laid it out) and a getter that
    reorders its fields into :data:`INFO_FIELDS` order, so an array of infos becomes tuples without
    touching each field through cffi."""
    ctype = ffi.typeof("plg_batch_info_t")
    codes = {"uint64_t": "Q", "int64_t": "q", "uint32_t": "I", "int32_t": "i", "int16_t": "h", "int8_t": "b"}
    fields = sorted(ctype.fields, key=lambda nf: nf[1].offset)
    fmt, at = "=", 0
    for _name, f in fields:
        if f.offset > at:
            fmt += f"{f.offset - at}x"
        fmt += codes[f.type.cname]
        at = f.offset + ffi.sizeof(f.type)
    if ffi.sizeof(ctype) > at:
        fmt += f"{ffi.sizeof(ctype) - at}x"
    layout = struct.Struct(fmt)
    assert layout.size == ffi.sizeof(ctype)
    names = [name for name, _f in fields]
    return layout, itemgetter(*[names.index(n) for n in INFO_FIELDS])


_INFO_LAYOUT, _INFO_ORDER = _info_unpacker()
_INFO_SIZE = _INFO_LAYOUT.size


def _info_row(info: Any) -> Tuple[int, ...]:
    """One ``plg_batch_info_t`` as a tuple in :data:`INFO_FIELDS` order."""
    return _INFO_ORDER(_INFO_LAYOUT.unpack(ffi.buffer(info, _INFO_SIZE)))  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# Framing: scan, check, stamp, set offsets, find
# ---------------------------------------------------------------------------


def scan(data: Buffer, verify_crc: bool, max_batches: int, row_type: Any = tuple) -> Tuple[List[Any], int, int]:
    """``plg_scan`` over ``data``: ``(rows, valid_bytes, status)``.

    ``rows`` are ``row_type`` tuples (a ``tuple`` subclass with the fields of
    :data:`INFO_FIELDS`, built with ``tuple.__new__``), positions relative to
    ``data``. ``status`` is the C status where the walk stopped: OK, ETRUNCATED
    (a torn tail) or a corruption status; it is returned, not raised, since a
    torn tail is normal. Offsets must increase across the C core's chunks too
    (checked here: ECORRUPT at the first batch that does not).

    Complexity: O(bytes) with CRC verification, O(batches) without; the infos
    come back in chunks (growing to 4096) unpacked in bulk.
    """
    buf = ffi.from_buffer(data)
    n_total = len(buf)
    found: List[Any] = []
    pos = 0
    chunk = max(1, min(256, max_batches, n_total // MIN_ENTRY + 1))
    n_out = ffi.new("uint64_t *")
    valid = ffi.new("uint64_t *")
    infos = ffi.new("plg_batch_info_t[]", chunk)
    flags = lib.PLG_SCAN_VERIFY_CRC if verify_crc else 0
    try:
        while True:
            want = min(chunk, max_batches - len(found))
            rc = lib.plg_scan(buf + pos, n_total - pos, flags, infos, want, n_out, valid)
            n = n_out[0]
            prev = found[-1] if found else None
            rows = map(_INFO_ORDER, _INFO_LAYOUT.iter_unpack(ffi.buffer(infos, n * _INFO_SIZE)))
            if pos:  # positions are relative to this chunk
                found.extend([_new_tuple(row_type, (r[0] + pos,) + r[1:]) for r in rows])
            else:
                found.extend(map(_new_tuple, repeat(row_type), rows))
            # Offsets must also increase across chunk boundaries (the C scan only
            # sees one chunk); checked whatever stopped this chunk.
            if prev is not None and n:
                first = found[len(found) - n]
                if first[4] <= prev[5]:  # base_offset <= previous last_offset (legacy: base == last)
                    del found[len(found) - n :]
                    return found, int(first[0]), ECORRUPT
            pos += valid[0]
            if rc != OK or pos >= n_total or len(found) >= max_batches or n < want:
                return found, pos, rc
            if chunk < 4096:  # a long walk: fewer, larger chunks
                chunk = min(4096, chunk * 4)
                infos = ffi.new("plg_batch_info_t[]", chunk)
    finally:
        ffi.release(buf)


def check_one(buf: Buffer) -> Optional[Tuple[int, ...]]:
    """``plg_batch_check_one``: the header of ``buf`` when it is exactly one valid v2 batch (framing
    and CRC), as a tuple in :data:`INFO_FIELDS` order; None otherwise. O(bytes)."""
    info = ffi.new("plg_batch_info_t *")
    if lib.plg_batch_check_one(ffi.from_buffer(buf), len(buf), info) != OK:
        return None
    return _info_row(info)


def stamp_one(buf: bytearray, base_offset: int, partition_leader_epoch: int) -> Optional[Tuple[int, ...]]:
    """``plg_batch_stamp_one``: check that ``buf`` is exactly one valid v2 batch and write
    ``base_offset`` and ``partition_leader_epoch`` into it (fields outside the CRC); its header
    after stamping (:data:`INFO_FIELDS` order), or None (``buf`` unchanged) when it is anything else.
    O(bytes)."""
    info = ffi.new("plg_batch_info_t *")
    if lib.plg_batch_stamp_one(ffi.from_buffer(buf), len(buf), base_offset, partition_leader_epoch, info) != OK:
        return None
    return _info_row(info)


def set_offsets(batches: bytearray, base_offset: int, partition_leader_epoch: int) -> Tuple[int, int]:
    """``plg_batch_set_offsets``: consecutive base offsets and the epoch on v2 batches, in place.

    Returns ``(number of batches, next offset)``; raises the status's
    :mod:`pylog.errors` exception. O(batches).
    """
    n = ffi.new("uint64_t *")
    nxt = ffi.new("int64_t *")
    check(lib.plg_batch_set_offsets(ffi.from_buffer(batches), len(batches), base_offset, partition_leader_epoch,
                                    n, nxt), "assign offsets")
    return int(n[0]), int(nxt[0])


def seal(batch: bytearray, what: str) -> None:
    """``plg_batch_seal``: fix a v2 batch's length and CRC after its body changed (``what`` names
    the caller in the error). O(bytes)."""
    check(lib.plg_batch_seal(ffi.from_buffer(batch), len(batch)), what)


def find_batch(data: Buffer, offset: int) -> Tuple[int, int, int]:
    """``plg_find_batch`` over ``data``: ``(status, position, last offset)``.

    ``last offset >= 0``: the batch at ``position`` is the first whose last
    offset is >= ``offset``; -1: none in the complete batches, ``position``
    bytes of which were walked. A non-OK status is returned (the caller names
    the file). O(batches walked).
    """
    out_pos = ffi.new("uint64_t *")
    out_last = ffi.new("int64_t *")
    rc = lib.plg_find_batch(ffi.from_buffer(data), len(data), offset, out_pos, out_last)
    return rc, int(out_pos[0]), int(out_last[0])


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------

_COLUMN_TYPES = (
    ("timestamp_delta", "int64_t", 8),
    ("offset_delta", "int32_t", 4),
    ("key_pos", "uint32_t", 4),
    ("key_len", "int32_t", 4),
    ("value_pos", "uint32_t", 4),
    ("value_len", "int32_t", 4),
    ("headers_pos", "uint32_t", 4),
    ("headers_len", "uint32_t", 4),
    ("header_count", "int32_t", 4),
)
_WIDTH = {name: width for name, _t, width in _COLUMN_TYPES}
#: bytes per entry of each decoded column (for callers that allocate a :class:`ColumnTarget`'s memory)
COLUMN_WIDTHS = dict(_WIDTH)
#: memoryview formats of the columns
_FORMAT = {"int64_t": "q", "int32_t": "i", "uint32_t": "I"}
_COLUMN_FORMAT = {name: _FORMAT[t] for name, t, _w in _COLUMN_TYPES}


class DecodedColumns:
    """The per-record columns ``plg_decode_records`` fills for ``count`` records.

    Column names: ``timestamp_delta`` (int64), ``offset_delta`` (int32),
    ``key_pos``/``value_pos``/``headers_pos`` (uint32), ``key_len``/``value_len``
    (int32, -1 for null), ``headers_len`` (uint32), ``header_count`` (int32).
    :meth:`raw` gives a column's native bytes (to compare whole columns at
    once), :meth:`ints` a list, :meth:`view` a memoryview that keeps the
    arrays alive. Complexity: O(count) to allocate.
    """

    __slots__ = ("count", "_arrays", "_struct")

    def __init__(self, count: int):
        self.count = count
        n = max(count, 1)
        self._arrays = {name: ffi.new(f"{ctype}[]", n) for name, ctype, _w in _COLUMN_TYPES}
        self._struct = ffi.new("plg_decoded_records_t *", self._arrays)

    def raw(self, name: str) -> bytes:
        """Column ``name``'s bytes (native byte order). O(count)."""
        return ffi.buffer(self._arrays[name], _WIDTH[name] * self.count)[:]  # type: ignore[no-any-return]

    def ints(self, name: str) -> List[int]:
        """Column ``name`` as a list of ints. O(count)."""
        return ffi.unpack(self._arrays[name], self.count)  # type: ignore[no-any-return]

    def first(self, name: str) -> int:
        """The first entry of column ``name`` (count must be > 0)."""
        return int(self._arrays[name][0])

    def view(self, name: str) -> memoryview:
        """Column ``name`` as a typed memoryview (``q``, ``i`` or ``I``) that keeps the arrays alive."""
        view: Any = memoryview(ffi.buffer(self._arrays[name], _WIDTH[name] * self.count))
        return view.cast(_COLUMN_FORMAT[name])  # type: ignore[no-any-return]


def check_record_count(count: int, section_bytes: int, what: str, path: Optional[str], position: Optional[int]) -> None:
    """The one "a record takes at least 7 bytes" guard: a CRC-valid batch with a huge recordsCount
    must not make a decoder allocate gigabytes. Raises :class:`CorruptRecordError` naming ``what``."""
    if count < 0 or count > section_bytes // MIN_RECORD:
        raise CorruptRecordError(
            f"{what}: {count} records cannot fit in {section_bytes} bytes", path=path, position=position
        )


def decode_records(data: Buffer, count: int, path: Optional[str] = None, position: Optional[int] = None,
                   what: str = "malformed records in batch") -> DecodedColumns:
    """``plg_decode_records``: the columns of the ``count`` records of an uncompressed v2 records
    section. Raises :class:`CorruptRecordError` (``path``, ``position``) when they do not fit or a
    field is out of bounds - whatever the bytes, never a crash. O(count) in C."""
    check_record_count(count, len(data), what, path, position)
    cols = DecodedColumns(count)
    buf = ffi.from_buffer(data)
    rc = lib.plg_decode_records(buf, len(buf), count, cols._struct)
    ffi.release(buf)  # before anything can raise (module docstring)
    if rc != OK:
        raise CorruptRecordError(f"{what}: {strerror(rc)}", path=path, position=position)
    return cols


def decode_header_columns(data: bytes, cols: DecodedColumns, total: int, path: Optional[str],
                          position: Optional[int]) -> Tuple[List[int], List[int], List[int], List[int]]:
    """``plg_decode_header_columns``: every header of the records in ``cols`` (``total`` of them),
    as four lists - key positions, key lengths, value positions, value lengths (-1: null) - in
    record order. Raises :class:`CorruptRecordError`. O(total) in C."""
    new = ffi.new
    n = max(total, 1)
    kp, kl = new("uint32_t[]", n), new("int32_t[]", n)
    vp, vl = new("uint32_t[]", n), new("int32_t[]", n)
    out = new("plg_header_columns_t *", {"key_pos": kp, "key_len": kl, "value_pos": vp, "value_len": vl})
    arrays = cols._arrays
    buf = ffi.from_buffer(data)
    rc = lib.plg_decode_header_columns(buf, len(data), arrays["headers_pos"], arrays["headers_len"],
                                       arrays["header_count"], cols.count, out, total)
    ffi.release(buf)
    if rc != OK:
        raise CorruptRecordError(f"malformed record headers: {strerror(rc)}", path=path, position=position)
    up = ffi.unpack
    return up(kp, total), up(kl, total), up(vp, total), up(vl, total)


def decode_headers(data: Buffer, count: int, path: Optional[str], position: Optional[int]) -> List[Tuple[int, int, int, int]]:
    """``plg_decode_headers``: the ``count`` headers of one record's headers span, as
    ``(key_pos, key_len, value_pos, value_len)`` (value_len -1: null). Raises
    :class:`CorruptRecordError`. O(count)."""
    if count < 0 or count > len(data) // 2:  # a header takes at least 2 bytes
        raise CorruptRecordError("malformed record headers", path=path, position=position)
    out = ffi.new("plg_header_t[]", max(count, 1))
    buf = ffi.from_buffer(data)
    rc = lib.plg_decode_headers(buf, len(data), count, out)
    ffi.release(buf)
    if rc != OK:
        raise CorruptRecordError("malformed record headers", path=path, position=position)
    return [(h.key_pos, h.key_len, h.value_pos, h.value_len) for h in out[0:count]]


class LegacyMessage(NamedTuple):
    """One legacy (magic 0/1) message's fields; positions are relative to the message."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key_pos: int
    key_len: int
    value_pos: int
    value_len: int


def decode_legacy(data: Buffer, path: Optional[str], position: Optional[int]) -> LegacyMessage:
    """``plg_decode_legacy``: the fields of one legacy message (log header included). Raises
    :class:`CorruptRecordError`. O(1) (the CRC is checked by :func:`scan`)."""
    msg = ffi.new("plg_legacy_message_t *")
    buf = ffi.from_buffer(data)
    rc = lib.plg_decode_legacy(buf, len(data), msg)
    ffi.release(buf)
    if rc != OK:
        raise CorruptRecordError(f"malformed legacy message: {strerror(rc)}", path=path, position=position)
    return LegacyMessage(msg.offset, msg.magic, msg.attributes, msg.timestamp, msg.key_pos, msg.key_len,
                         msg.value_pos, msg.value_len)


# ---------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------

_TOO_BIG = "records do not fit in one batch (a length exceeds 2 GiB)"


def encode_values(values: bytes, value_lens: bytes, count: int, now_ms: int, producer_id: int,
                  producer_epoch: int, base_sequence: int, attributes: int, cap: int) -> bytearray:
    """``plg_batch_encode_values``: one v2 batch of ``count`` keyless, headerless records whose
    values are ``values`` back to back with native int32 lengths ``value_lens``, every timestamp
    ``now_ms``, base offset 0 and no leader epoch; ``cap`` bounds its size. Raises
    :class:`InvalidRecordError` for a length over 2 GiB. O(bytes), one C call."""
    out = bytearray(cap)
    used = ffi.new("uint64_t *")
    rc = lib.plg_batch_encode_values(values, ffi.from_buffer("int32_t[]", value_lens), count, now_ms, producer_id,
                                     producer_epoch, base_sequence, attributes, ffi.from_buffer(out), cap, used)
    if rc != OK:
        if rc == EINVAL:
            raise InvalidRecordError(_TOO_BIG)
        check(rc, "encode batch")
    del out[used[0]:]
    return out


#: The send-path extension's ``encode_value_list`` (sendpath.c), or None without it: a list of bytes
#: values straight to one sealed batch - sized and copied from the list's items, one bytearray of the
#: exact size, the core's ``plg_batch_seal`` for the CRC - or None for anything it does not take.
_encode_value_list: Any = None
if sendpath_module is not None and hasattr(sendpath_module, "encode_value_list"):
    sendpath_module.set_seal_function(int(ffi.cast("uintptr_t", ffi.addressof(lib, "plg_batch_seal"))))
    _encode_value_list = sendpath_module.encode_value_list


def encode_value_list(records: Sequence[Any], now_ms: int, base_offset: int, partition_leader_epoch: int,
                      producer_id: int, producer_epoch: int, base_sequence: int,
                      attributes: int) -> Optional[bytearray]:
    """One sealed v2 batch of keyless, headerless records from ``records`` - a ``list`` whose items
    are all exactly ``bytes`` - every timestamp ``now_ms``, with the given base offset and leader
    epoch: the bytes :func:`encode_values` and :func:`set_offsets` make, in one C call that reads
    the values where they are (no joined copy, no length array). None (nothing done) for anything
    else - another sequence type, an empty list, another item type, a field out of range, a batch
    over 2 GiB, or the extension not built - for the caller's general encoder.

    Complexity: O(bytes), one C call. Thread-safety: holds the GIL throughout (the list cannot
    change under it)."""
    if _encode_value_list is None:
        return None
    return _encode_value_list(records, now_ms, base_offset, partition_leader_epoch, producer_id,  # type: ignore[no-any-return]
                              producer_epoch, base_sequence, attributes)


def _ints(ctype: str, items: Optional[Sequence[int]]) -> Any:
    return ffi.NULL if items is None else ffi.new(ctype, items)


def encode_columns(count: int, timestamps: Optional[Sequence[int]], keys: bytes, key_lens: Optional[Sequence[int]],
                   values: bytes, value_lens: Sequence[int], header_counts: Optional[Sequence[int]],
                   header_keys: bytes, header_key_lens: Optional[Sequence[int]], header_values: bytes,
                   header_value_lens: Optional[Sequence[int]], *, base_offset: int, partition_leader_epoch: int,
                   attributes: int, base_timestamp: int, max_timestamp: int, producer_id: int,
                   producer_epoch: int, base_sequence: int) -> bytearray:
    """``plg_batch_size`` then ``plg_batch_encode``: one v2 batch from record columns.

    ``keys``/``values``/``header_keys``/``header_values`` are the fields back
    to back; the ``*_lens`` lists give each one's length (-1: null); None for
    ``key_lens`` means every key is null, for ``timestamps`` that every record
    has ``base_timestamp``, for the header lists that no record has headers.
    Raises :class:`InvalidRecordError` when a length exceeds 2 GiB.
    O(bytes), two C calls.
    """
    ts_arr = _ints("int64_t[]", timestamps)
    key_lens_arr = _ints("int32_t[]", key_lens)
    value_lens_arr = ffi.new("int32_t[]", value_lens)
    hcounts, hk_lens, hv_lens = (_ints("int32_t[]", header_counts), _ints("int32_t[]", header_key_lens),
                                 _ints("int32_t[]", header_value_lens))
    cols = ffi.new("plg_record_columns_t *", {
        "count": count, "timestamps": ts_arr, "keys": ffi.from_buffer(keys), "key_lens": key_lens_arr,
        "values": ffi.from_buffer(values), "value_lens": value_lens_arr, "header_counts": hcounts,
        "header_keys": ffi.from_buffer(header_keys), "header_key_lens": hk_lens,
        "header_values": ffi.from_buffer(header_values), "header_value_lens": hv_lens,
    })
    header = ffi.new("plg_batch_header_t *", {
        "base_offset": base_offset, "partition_leader_epoch": partition_leader_epoch, "attributes": attributes,
        "base_timestamp": base_timestamp, "max_timestamp": max_timestamp, "producer_id": producer_id,
        "producer_epoch": producer_epoch, "base_sequence": base_sequence,
    })
    size = ffi.new("uint64_t *")
    if lib.plg_batch_size(cols, base_timestamp, size) != OK:
        raise InvalidRecordError(_TOO_BIG)
    out = bytearray(size[0])
    used = ffi.new("uint64_t *")
    check(lib.plg_batch_encode(header, cols, ffi.from_buffer(out), len(out), used), "encode batch")
    return out


# ---------------------------------------------------------------------------
# Fetch runs: plain batches decoded a run at a time
# ---------------------------------------------------------------------------

#: ``plg_decode_fetch_run`` stop reasons (plg.h)
RUN_END: int = lib.PLG_RUN_END
RUN_SLOW: int = lib.PLG_RUN_SLOW
RUN_CORRUPT: int = lib.PLG_RUN_CORRUPT
#: struct-format bytes per record of a run: "<gap>x<len>s", two numbers of at most 10 digits, 'x', 's'
FMT_PER_RECORD = 24
#: records per ``plg_decode_fetch_run`` call (about 1 MB of scratch); a longer run takes several calls
MAX_RUN_RECORDS = 16384


class FetchRun(NamedTuple):
    """What one :meth:`FetchRunScratch.decode` call found.

    ``records`` records: ``offsets`` is the first offset (an int) when they are
    consecutive, else a list; ``timestamps`` one int shared by all, or a list;
    ``values``/``keys`` are ``struct`` formats that slice the values and keys
    out of the decoded buffer (``keys`` None: every key null). ``consumed``
    bytes were taken, ``last_offset`` is the last offset of the batches taken,
    ``next_offset`` one past it (or -1). ``stop`` is RUN_END, RUN_SLOW (the next
    batch needs the general decoder), RUN_CORRUPT (``stop_reason`` says why) or
    another value (the scratch was full: call again from ``consumed``).
    """

    records: int
    offsets: Any
    timestamps: Any
    values: bytes
    keys: Optional[bytes]
    timestamp_type: int
    leader_epoch: int
    consumed: int
    last_offset: int
    next_offset: int
    stop: int
    stop_reason: str


class FetchRunScratch:
    """Output arrays of ``plg_decode_fetch_run`` for ``cap`` records and the run struct pointing at them.

    One owner at a time (a decoder keeps one, or takes one from a pool); the
    arrays live as long as this object. Complexity: O(cap) to allocate.
    """

    __slots__ = ("cap", "_run", "_offsets", "_timestamps", "_key_fmt", "_value_fmt")

    def __init__(self, cap: int):
        self.cap = cap
        self._offsets = ffi.new("int64_t[]", cap)
        self._timestamps = ffi.new("int64_t[]", cap)
        self._key_fmt = ffi.new("char[]", cap * FMT_PER_RECORD)
        self._value_fmt = ffi.new("char[]", cap * FMT_PER_RECORD)
        self._run = ffi.new("plg_fetch_run_t *", {
            "offsets": self._offsets, "timestamps": self._timestamps, "key_fmt": self._key_fmt,
            "value_fmt": self._value_fmt, "cap": cap, "fmt_cap": cap * FMT_PER_RECORD})

    def decode(self, view: memoryview, at: int, end: int, low: int, below: int, last_offset: int,
               path: Optional[str] = None, position: int = 0) -> FetchRun:
        """Decode the run of plain batches in ``view[at:end]`` with ``low <= offset < below``;
        ``last_offset`` is the last offset before it (offsets must increase). Raises
        :class:`CorruptRecordError` (at ``position + at`` of ``path``) only for a bad argument.
        Complexity: O(bytes of the run) in C."""
        run = self._run
        buf = ffi.from_buffer(view[at:end])
        run.last_offset = last_offset
        rc = lib.plg_decode_fetch_run(buf, end - at, low, below, run)
        ffi.release(buf)  # before anything can raise (module docstring)
        if rc != OK:  # pragma: no cover - the arguments are the caller's own
            raise CorruptRecordError(f"decode failed: {strerror(rc)}", path=path, position=position + at)
        count = run.count
        offsets: Any = None
        timestamps: Any = None
        values = b""
        keys: Optional[bytes] = None
        if count:
            offsets = self._offsets[0] if run.offsets_contiguous else ffi.unpack(self._offsets, count)
            timestamps = self._timestamps[0] if run.timestamps_equal else ffi.unpack(self._timestamps, count)
            values = ffi.buffer(self._value_fmt, run.value_fmt_len)[:]
            keys = None if run.keys_null else ffi.buffer(self._key_fmt, run.key_fmt_len)[:]
        stop = run.stop
        return FetchRun(count, offsets, timestamps, values, keys, int(run.timestamp_type), int(run.leader_epoch),
                        int(run.consumed), int(run.last_offset), int(run.next_offset), int(stop),
                        strerror(run.stop_rc) if stop == RUN_CORRUPT else "")


# ---------------------------------------------------------------------------
# Columns into caller-owned memory (the Spark source's Arrow buffers)
# ---------------------------------------------------------------------------


class ColumnTarget:
    """``plg_decode_records`` columns and ``plg_gather``-ed values and keys written straight into
    caller-owned memory (Arrow buffers), for ``n`` records of several batches back to back.

    ``column_addresses`` maps each column name of :class:`DecodedColumns` to
    the address of an array of at least ``n`` entries of its type;
    ``values_address``/``keys_address`` point to ``cap`` bytes each. The caller
    keeps that memory alive as long as this object. Not thread-safe.
    """

    __slots__ = ("_cols", "_values", "_keys", "cap", "_scratch", "_used", "values_used", "keys_used")

    def __init__(self, column_addresses: Mapping[str, int], values_address: int, keys_address: int, cap: int,
                 max_batch_records: int):
        self._cols = {name: ffi.cast(ctype + " *", column_addresses[name]) for name, ctype, _w in _COLUMN_TYPES}
        self._values = ffi.cast("uint8_t *", values_address)
        self._keys = ffi.cast("uint8_t *", keys_address)
        self.cap = cap
        self._scratch = ffi.new("int32_t[]", max_batch_records + 1)
        self._used = ffi.new("uint64_t *")
        #: bytes of values and keys gathered so far
        self.values_used = 0
        self.keys_used = 0

    def decode_batch(self, section: Buffer, k: int, count: int, what: str, path: Optional[str],
                     position: Optional[int]) -> bool:
        """Decode the ``count`` records of one uncompressed records section into rows ``k`` to
        ``k + count - 1``, and append their values (and keys, unless every one is null) to the
        gathered bytes. Returns True when some key is not null. Raises
        :class:`CorruptRecordError` (``what``, ``path``, ``position``). O(bytes) in C."""
        check_record_count(count, len(section), what, path, position)
        cols = self._cols
        buf = ffi.from_buffer(section)
        try:  # the export is released before an error leaves this frame (module docstring)
            rc = lib.plg_decode_records(buf, len(buf), count, ffi.new(
                "plg_decoded_records_t *", {name: p + k for name, p in cols.items()}))
            if rc != OK:
                raise CorruptRecordError(f"{what}: {strerror(rc)}", path=path, position=position)
            used = self._used
            rc = lib.plg_gather(buf, len(buf), cols["value_pos"] + k, cols["value_len"] + k, count,
                                self._values + self.values_used, self.cap - self.values_used, self._scratch, used)
            check(rc, "gather values", path, position)
            self.values_used += used[0]
            if ffi.buffer(cols["key_len"] + k, 4 * count)[:] == b"\xff" * (4 * count):
                return False
            rc = lib.plg_gather(buf, len(buf), cols["key_pos"] + k, cols["key_len"] + k, count,
                                self._keys + self.keys_used, self.cap - self.keys_used, self._scratch, used)
            check(rc, "gather keys", path, position)
            self.keys_used += used[0]
            return True
        finally:
            ffi.release(buf)

    def raw(self, name: str, k: int, count: int) -> bytes:
        """Rows ``k`` to ``k + count - 1`` of column ``name`` as native bytes."""
        return ffi.buffer(self._cols[name] + k, _WIDTH[name] * count)[:]  # type: ignore[no-any-return]


__all__ = [
    "BATCH_OVERHEAD", "LOG_OVERHEAD", "MIN_RECORD", "MIN_ENTRY", "INFO_FIELDS", "ENOTFOUND", "EUNSUPPORTED",
    "scan", "check_one", "stamp_one", "set_offsets", "seal", "find_batch",
    "DecodedColumns", "COLUMN_WIDTHS", "check_record_count", "decode_records", "decode_header_columns", "decode_headers",
    "LegacyMessage", "decode_legacy", "encode_values", "encode_value_list", "encode_columns",
    "RUN_END", "RUN_SLOW", "RUN_CORRUPT", "FMT_PER_RECORD", "MAX_RUN_RECORDS", "FetchRun", "FetchRunScratch",
    "ColumnTarget",
]
