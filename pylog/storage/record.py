"""Records and record batches in Kafka's RecordBatch v2 format.

Three things live here:

* :class:`Record` - one record as the application sees it (a ``NamedTuple``:
  cheap to build, immutable, hashable when its headers are a tuple);
* :class:`RecordBatch` - a zero-copy view of one batch (v2) or one legacy
  message (magic 0/1) in a buffer, with its header fields, whose records are
  decoded on demand by the C core;
* :func:`encode_batch` (C core) and the pure-Python oracle
  (:func:`py_encode_batch`, :func:`py_decode_batch`, :func:`py_crc32c`), which
  follows Kafka's byte layout line by line and is what property tests compare
  the C core against. The oracle is slow and never used on a hot path.

Thread-safety: everything here is immutable or local; functions are
re-entrant.
"""
from __future__ import annotations

import struct
import zlib
from array import array
from itertools import accumulate, repeat
from operator import itemgetter
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union, cast

from pylog import _native
from pylog._native import ffi, lib
from pylog.errors import CorruptRecordError, InvalidRecordError
from pylog.storage import compression as codecs

Buffer = Union[bytes, bytearray, memoryview]
Header = Tuple[str, Optional[bytes]]

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

BATCH_OVERHEAD = lib.PLG_BATCH_OVERHEAD  # 61
LOG_OVERHEAD = lib.PLG_LOG_OVERHEAD  # 12
ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

_new_tuple = tuple.__new__
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_BYTES_TYPES = (bytes, bytearray, memoryview)
_ONLY_BYTES = {bytes}


class Record(NamedTuple):
    """One record: ``Record(value, key=None, headers=(), timestamp=None)``.

    On append, ``offset`` is ignored and a ``timestamp`` of ``None`` means "now".
    Records returned by reads carry their ``offset``, ``timestamp`` and
    ``timestamp_type`` (0 CreateTime, 1 LogAppendTime). ``value`` or ``key``
    ``None`` is Kafka's null (a ``None`` value is a tombstone for compaction).
    Header keys are ``str`` (UTF-8 on disk), header values bytes or ``None``.
    """

    value: Optional[bytes]
    key: Optional[bytes] = None
    headers: Sequence[Header] = ()
    timestamp: Optional[int] = None
    offset: int = -1
    timestamp_type: int = CREATE_TIME


class BatchInfo(NamedTuple):
    """Header fields of one batch (or legacy message) found by a scan."""

    position: int
    size: int
    magic: int
    attributes: int
    base_offset: int
    last_offset: int
    base_timestamp: int
    max_timestamp: int
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    crc: int


RecordInput = Union[bytes, bytearray, memoryview, Record, None]


# ---------------------------------------------------------------------------
# Scanning and batch views
# ---------------------------------------------------------------------------


class ScanResult(NamedTuple):
    """What :func:`scan` found: valid batches, where they end, and why it stopped.

    ``status`` is 0 when the buffer ended on a batch boundary (or ``max_batches``
    were found), ``ETRUNCATED`` when the last batch is incomplete (a torn tail,
    or a read that cut a batch), or ``ECORRUPT``/``ECRC``/``EMAGIC`` when the
    bytes at ``valid_bytes`` are invalid.
    """

    batches: List[BatchInfo]
    valid_bytes: int
    status: int

    @property
    def reason(self) -> str:
        return _native.strerror(self.status)


def _info_unpacker() -> Tuple[struct.Struct, "itemgetter[Tuple[int, ...]]"]:
    """A ``struct`` layout of ``plg_batch_info_t`` (as the compiler laid it out)
    and a getter that reorders its fields into :class:`BatchInfo` order, so an
    array of infos becomes tuples without touching each field through cffi."""
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
    return layout, itemgetter(*[names.index(n) for n in BatchInfo._fields])


_INFO_LAYOUT, _INFO_ORDER = _info_unpacker()
_MIN_ENTRY = LOG_OVERHEAD + lib.PLG_LEGACY_V0_OVERHEAD  # the smallest thing a scan can return


def scan(data: Buffer, *, verify_crc: bool = True, max_batches: int = 1 << 62) -> ScanResult:
    """Walk the batches at the start of ``data``, validating framing (and CRCs).

    Complexity: O(bytes) with CRC verification, O(batches) without; the
    batch infos come back from C in chunks and are unpacked in bulk.
    """
    buf = ffi.from_buffer(data)
    n_total = len(buf)
    found: List[BatchInfo] = []
    pos = 0
    chunk = max(1, min(256, max_batches, n_total // _MIN_ENTRY + 1))
    n_out = ffi.new("uint64_t *")
    valid = ffi.new("uint64_t *")
    infos = ffi.new("plg_batch_info_t[]", chunk)
    size = _INFO_LAYOUT.size
    flags = lib.PLG_SCAN_VERIFY_CRC if verify_crc else 0
    while True:
        want = min(chunk, max_batches - len(found))
        rc = lib.plg_scan(buf + pos, n_total - pos, flags, infos, want, n_out, valid)
        n = n_out[0]
        prev = found[-1] if found else None
        rows = map(_INFO_ORDER, _INFO_LAYOUT.iter_unpack(ffi.buffer(infos, n * size)))
        if pos:  # positions are relative to this chunk
            found.extend([_new_tuple(BatchInfo, (r[0] + pos,) + r[1:]) for r in rows])
        else:
            found.extend(map(_new_tuple, repeat(BatchInfo), rows))
        # Offsets must also increase across chunk boundaries (the C scan only
        # sees one chunk); checked whatever stopped this chunk.
        if prev is not None and n:
            first = found[len(found) - n]
            if first.base_offset <= prev.last_offset:  # legacy: base == last
                del found[len(found) - n :]
                return ScanResult(found, first.position, _native.ECORRUPT)
        pos += valid[0]
        if rc != _native.OK or pos >= n_total or len(found) >= max_batches or n < want:
            return ScanResult(found, pos, rc)
        if chunk < 4096:  # a long walk: fewer, larger chunks
            chunk = min(4096, chunk * 4)
            infos = ffi.new("plg_batch_info_t[]", chunk)


class RecordBatch:
    """A zero-copy view of one v2 batch, or one legacy (magic 0/1) message.

    ``buffer`` is a memoryview of exactly the batch's bytes; the header fields
    come from ``info``. Decoding records (and decompressing) happens on demand.

    Thread-safety: immutable once built; safe to share.
    """

    __slots__ = ("info", "buffer", "path")

    def __init__(self, info: BatchInfo, buffer: memoryview, path: Optional[str] = None):
        self.info = info
        self.buffer = buffer
        self.path = path

    # header fields, with Kafka's names
    base_offset = property(lambda self: self.info.base_offset)
    last_offset = property(lambda self: self.info.last_offset)
    magic = property(lambda self: self.info.magic)
    attributes = property(lambda self: self.info.attributes)
    base_timestamp = property(lambda self: self.info.base_timestamp)
    max_timestamp = property(lambda self: self.info.max_timestamp)
    partition_leader_epoch = property(lambda self: self.info.partition_leader_epoch)
    producer_id = property(lambda self: self.info.producer_id)
    producer_epoch = property(lambda self: self.info.producer_epoch)
    base_sequence = property(lambda self: self.info.base_sequence)
    records_count = property(lambda self: self.info.records_count)
    size_in_bytes = property(lambda self: self.info.size)

    @property
    def compression(self) -> int:
        return self.info.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return self.info.magic == 2 and bool(self.info.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.info.magic == 2 and bool(self.info.attributes & ATTR_CONTROL)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.info.attributes & ATTR_LOG_APPEND_TIME else CREATE_TIME

    def __len__(self) -> int:
        return self.info.records_count

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"magic={self.magic}, count={self.records_count}, size={self.size_in_bytes})"
        )

    def _records_section(self) -> bytes:
        """The (decompressed) records bytes of a v2 batch."""
        body = self.buffer[BATCH_OVERHEAD:]
        codec = self.compression
        if codec == codecs.NONE:
            return bytes(body)
        return codecs.decompress(codec, body, path=self.path, position=self.info.position)

    def records(self) -> List[Record]:
        """All records of the batch, with absolute offsets and timestamps.

        Complexity: O(records + bytes). Raises :class:`CorruptRecordError`
        when a record field is out of bounds (CRC-valid but malformed input).
        """
        if self.info.magic != 2:
            return _legacy_records(self)
        data = self._records_section()
        return decode_records(
            data,
            self.info.records_count,
            self.info.base_offset,
            self.info.base_timestamp,
            self.timestamp_type,
            self.info.max_timestamp,
            path=self.path,
            position=self.info.position,
        )

    def values(self) -> List[Optional[memoryview]]:
        """Zero-copy values of an uncompressed v2 batch (copies when compressed).

        One memoryview per value, built from :meth:`value_columns`.
        Complexity: O(records). The memoryviews point into this batch's buffer.
        """
        cols = self.value_columns()
        buf = cols.buffer
        return [buf[p : p + n] if n >= 0 else None for p, n in zip(cols.positions, cols.lengths)]

    def value_columns(self) -> "ValueColumns":
        """The batch's values as columns, without a Python object per record.

        Returns ``ValueColumns(buffer, positions, lengths)``: value ``i`` is
        ``buffer[positions[i] : positions[i] + lengths[i]]`` (``lengths[i] == -1``
        for a null value). ``buffer`` is a memoryview of this batch's records
        section (a decompressed copy for a compressed batch); ``positions`` and
        ``lengths`` are memoryviews (``"I"`` and ``"i"``) over the C core's
        arrays. Legacy (magic 0/1) batches are decoded and packed.

        Complexity: one C call; O(records) in C, O(1) Python objects.
        """
        if self.info.magic != 2:
            vals = [r.value for r in _legacy_records(self)]
            data = b"".join(v for v in vals if v is not None)
            pos, lens, at = [], [], 0
            for v in vals:
                pos.append(at)
                lens.append(-1 if v is None else len(v))
                at += len(v) if v is not None else 0
            return ValueColumns(memoryview(data), memoryview(array("I", pos)), memoryview(array("i", lens)))
        if self.compression == codecs.NONE:
            section = self.buffer[BATCH_OVERHEAD:]
        else:
            section = memoryview(self._records_section())
        count = self.info.records_count
        cols = _decode_columns(section, count, self.path, self.info.position)
        return ValueColumns(
            section,
            memoryview(ffi.buffer(cols.value_pos, 4 * count)).cast("I"),
            memoryview(ffi.buffer(cols.value_len, 4 * count)).cast("i"),
        )


class ValueColumns:
    """Values of one batch as a buffer plus position and length arrays (see RecordBatch.value_columns).

    Thread-safety: immutable; safe to share.
    """

    __slots__ = ("buffer", "positions", "lengths")

    def __init__(self, buffer: memoryview, positions: memoryview, lengths: memoryview):
        self.buffer = buffer
        self.positions = positions
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.positions)

    def value(self, i: int) -> Optional[memoryview]:
        """Value ``i`` as a memoryview into ``buffer`` (None for a null value)."""
        n = self.lengths[i]
        if n < 0:
            return None
        p = self.positions[i]
        return self.buffer[p : p + n]


class _Columns:
    """C arrays for plg_decode_records; kept alive together with the struct."""

    __slots__ = (
        "struct", "timestamp_delta", "offset_delta", "key_pos", "key_len", "value_pos",
        "value_len", "headers_pos", "headers_len", "header_count",
    )

    def __init__(self, count: int):
        n = max(count, 1)
        new = ffi.new
        self.timestamp_delta = new("int64_t[]", n)
        self.offset_delta = new("int32_t[]", n)
        self.key_pos = new("uint32_t[]", n)
        self.key_len = new("int32_t[]", n)
        self.value_pos = new("uint32_t[]", n)
        self.value_len = new("int32_t[]", n)
        self.headers_pos = new("uint32_t[]", n)
        self.headers_len = new("uint32_t[]", n)
        self.header_count = new("int32_t[]", n)
        self.struct = new(
            "plg_decoded_records_t *",
            {
                "timestamp_delta": self.timestamp_delta,
                "offset_delta": self.offset_delta,
                "key_pos": self.key_pos,
                "key_len": self.key_len,
                "value_pos": self.value_pos,
                "value_len": self.value_len,
                "headers_pos": self.headers_pos,
                "headers_len": self.headers_len,
                "header_count": self.header_count,
            },
        )


def _decode_columns(data: Buffer, count: int, path: Optional[str], position: Optional[int]) -> _Columns:
    # A record takes at least 7 bytes: checking before allocating keeps a
    # CRC-valid batch with a huge recordsCount from asking for gigabytes.
    if count < 0 or count > len(data) // 7:
        raise CorruptRecordError(
            f"malformed records in batch: {count} records cannot fit in {len(data)} bytes",
            path=path,
            position=position,
        )
    cols = _Columns(count)
    buf = ffi.from_buffer(data)
    rc = lib.plg_decode_records(buf, len(buf), count, cols.struct)
    # Release the export before anything can raise: a traceback keeping this
    # frame alive in a reference cycle would otherwise let the GC clear the
    # exported memoryview first, and CPython 3.11 then crashes (tests/fuzz).
    ffi.release(buf)
    if rc != _native.OK:
        raise CorruptRecordError(
            f"malformed records in batch: {_native.strerror(rc)}", path=path, position=position
        )
    return cols


def _spans(data: bytes, pos: List[int], lens: List[int]) -> List[Optional[bytes]]:
    """``data[p:p+n]`` for each (p, n), ``None`` where n == -1."""
    if -1 in lens:
        return [data[p : p + n] if n >= 0 else None for p, n in zip(pos, lens)]
    return [data[p : p + n] for p, n in zip(pos, lens)]


_seq32 = b""
_INT32_CODE = "i" if array("i").itemsize == 4 else "l"  # the array typecode of a C int32_t


def _is_sequence(raw: bytes, count: int) -> bool:
    """True when the native int32 array ``raw`` holds 0, 1, ..., count-1."""
    global _seq32
    if len(_seq32) < 4 * count:  # grown on demand, never shrunk; a race only rebuilds it
        _seq32 = array(_INT32_CODE, range(max(count, 1024))).tobytes()
    return raw == _seq32[: 4 * count]


def decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    timestamp_type: int = CREATE_TIME,
    max_timestamp: int = NO_TIMESTAMP,
    path: Optional[str] = None,
    position: Optional[int] = None,
) -> List[Record]:
    """Decode an uncompressed v2 records section into :class:`Record` objects.

    Raises :class:`CorruptRecordError` when a record is malformed (whatever
    the bytes, never a crash). Keys, values and header values are ``bytes``
    slices of ``data``; records without headers share the empty tuple.

    Complexity: O(count): one C call fills position/length columns; the
    common shapes (all keys null, no headers, one timestamp for the batch,
    offset deltas 0..count-1) are recognised by comparing the raw columns
    and skip unpacking them; about 0.4 us per record of 100 bytes.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    cols = _decode_columns(data, count, path, position)
    if count == 0:
        return []
    up = ffi.unpack
    raw = ffi.buffer
    n4 = 4 * count
    od_raw = raw(cols.offset_delta, n4)[:]
    if _is_sequence(od_raw, count):
        offsets: Iterable[int] = range(base_offset, base_offset + count)
    else:
        offsets = [base_offset + d for d in up(cols.offset_delta, count)]
    if timestamp_type == LOG_APPEND_TIME:
        timestamps: Iterable[int] = repeat(max_timestamp)
    else:
        tsd_raw = raw(cols.timestamp_delta, 8 * count)[:]
        if tsd_raw == tsd_raw[:8] * count:
            timestamps = repeat(base_timestamp + cols.timestamp_delta[0])
        else:
            timestamps = [base_timestamp + d for d in up(cols.timestamp_delta, count)]
    values = _spans(data, up(cols.value_pos, count), up(cols.value_len, count))
    keys: Iterable[Optional[bytes]]
    if raw(cols.key_len, n4)[:] == b"\xff" * n4:  # every key_len is -1
        keys = repeat(None)
    else:
        keys = _spans(data, up(cols.key_pos, count), up(cols.key_len, count))
    headers: Iterable[Sequence[Header]]
    if raw(cols.header_count, n4)[:] == bytes(n4):
        headers = repeat(())
    else:
        headers = _decode_header_columns(data, cols, count, path, position)
    # map/zip build the tuples in C (zip recycles its tuple): measurably
    # faster than constructing them in a comprehension.
    return list(map(_new_tuple, repeat(Record), zip(values, keys, headers, timestamps, offsets, repeat(timestamp_type))))


def _decode_header_columns(
    data: bytes, cols: _Columns, count: int, path: Optional[str], position: Optional[int]
) -> List[Tuple[Header, ...]]:
    """Each record's headers as a tuple of (str, bytes | None), one C call for all."""
    hc = ffi.unpack(cols.header_count, count)
    total = sum(hc)
    new = ffi.new
    kp, kl = new("uint32_t[]", total), new("int32_t[]", total)
    vp, vl = new("uint32_t[]", total), new("int32_t[]", total)
    out = new("plg_header_columns_t *", {"key_pos": kp, "key_len": kl, "value_pos": vp, "value_len": vl})
    rc = lib.plg_decode_header_columns(
        ffi.from_buffer(data), len(data), cols.headers_pos, cols.headers_len, cols.header_count, count, out, total
    )
    if rc != _native.OK:
        raise CorruptRecordError(f"malformed record headers: {_native.strerror(rc)}", path=path, position=position)
    up = ffi.unpack
    hkeys = [data[p : p + n].decode("utf-8", "surrogateescape") for p, n in zip(up(kp, total), up(kl, total))]
    pairs = tuple(zip(hkeys, _spans(data, up(vp, total), up(vl, total))))
    ends = list(accumulate(hc))
    return [pairs[e - c : e] for e, c in zip(ends, hc)]


def _decode_headers(data: Buffer, count: int, path: Optional[str], position: Optional[int]) -> Tuple[Header, ...]:
    """The ``count`` headers in ``data`` (one record's headers span) as (str, bytes | None) pairs."""
    if count < 0 or count > len(data) // 2:  # a header takes at least 2 bytes
        raise CorruptRecordError("malformed record headers", path=path, position=position)
    out = ffi.new("plg_header_t[]", count)
    rc = lib.plg_decode_headers(ffi.from_buffer(data), len(data), count, out)
    if rc != _native.OK:
        raise CorruptRecordError("malformed record headers", path=path, position=position)
    data = bytes(data)
    return tuple(
        (
            data[h.key_pos : h.key_pos + h.key_len].decode("utf-8", "surrogateescape"),
            data[h.value_pos : h.value_pos + h.value_len] if h.value_len >= 0 else None,
        )
        for h in out
    )


def _legacy_records(batch: RecordBatch) -> List[Record]:
    """Records of one legacy message: itself, or the inner set of a compressed wrapper."""
    msg = ffi.new("plg_legacy_message_t *")
    data = bytes(batch.buffer)
    rc = lib.plg_decode_legacy(ffi.from_buffer(data), len(data), msg)
    if rc != _native.OK:
        raise CorruptRecordError(
            f"malformed legacy message: {_native.strerror(rc)}", path=batch.path, position=batch.info.position
        )
    ts_type = LOG_APPEND_TIME if (msg.magic == 1 and msg.attributes & ATTR_LOG_APPEND_TIME) else CREATE_TIME
    key = data[msg.key_pos : msg.key_pos + msg.key_len] if msg.key_len >= 0 else None
    value = data[msg.value_pos : msg.value_pos + msg.value_len] if msg.value_len >= 0 else None
    codec = msg.attributes & ATTR_COMPRESSION_MASK
    if codec == codecs.NONE:
        return [Record(value, key, (), msg.timestamp, msg.offset, ts_type)]
    if value is None:
        raise CorruptRecordError("compressed legacy wrapper has a null value", batch.path, batch.info.position)
    inner = codecs.decompress(codec, value, path=batch.path, position=batch.info.position)
    found = scan(inner)
    if found.status != _native.OK or not found.batches:
        raise CorruptRecordError(
            f"invalid message set inside a compressed legacy wrapper: {found.reason}",
            path=batch.path,
            position=batch.info.position,
        )
    out: List[Record] = []
    inner_view = memoryview(inner)
    last_inner = found.batches[-1].last_offset
    for info in found.batches:
        if info.magic != msg.magic:
            raise CorruptRecordError("inner message magic differs from its wrapper", batch.path, batch.info.position)
        if info.attributes & ATTR_COMPRESSION_MASK:
            # Kafka: "Compressed messages must not be nested" (and unbounded
            # nesting would recurse without limit).
            raise CorruptRecordError("compressed legacy message inside a compressed wrapper", batch.path, batch.info.position)
        for r in _legacy_records(RecordBatch(info, inner_view[info.position : info.position + info.size], batch.path)):
            if msg.magic == 1 and msg.offset != 0:
                # v1: inner offsets are relative; the wrapper carries the last absolute offset.
                r = r._replace(offset=msg.offset - last_inner + r.offset)
            if ts_type == LOG_APPEND_TIME:
                r = r._replace(timestamp=msg.timestamp, timestamp_type=LOG_APPEND_TIME)
            out.append(r)
    return out


def iter_batches(data: Buffer, *, verify_crc: bool = True, path: Optional[str] = None) -> Iterator[RecordBatch]:
    """Yield a :class:`RecordBatch` per complete, valid batch at the start of ``data``.

    Stops silently at a truncated tail; raises :class:`CorruptRecordError`
    (with ``path`` and the byte position) on invalid bytes.
    """
    view = memoryview(data)
    result = scan(view, verify_crc=verify_crc)
    for info in result.batches:
        yield RecordBatch(info, view[info.position : info.position + info.size], path)
    if result.status not in (_native.OK, _native.ETRUNCATED):
        raise CorruptRecordError(f"invalid batch: {result.reason}", path=path, position=result.valid_bytes)


# ---------------------------------------------------------------------------
# Encoding (C core)
# ---------------------------------------------------------------------------


def _as_value(item: object, index: int, what: str) -> Optional[bytes]:
    if item is None or isinstance(item, bytes):
        return item
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    raise InvalidRecordError(
        f"record {index}: {what} must be bytes, bytearray, memoryview or None, not {type(item).__name__}"
    )


def encode_batch(
    records: Sequence[RecordInput],
    *,
    now_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: Union[str, int, None] = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    plain: Optional[bool] = None,
    compression_level: Optional[int] = None,
) -> bytearray:
    """Encode ``records`` as one RecordBatch v2 and return its bytes.

    ``compression_level`` (KIP-390; None: the codec's Kafka default) is
    checked against the codec's range (:func:`pylog.storage.compression.compress`).

    Items are bytes-like values or :class:`Record` objects; a record without a
    timestamp gets ``now_ms``. The batch's baseTimestamp is the first record's
    timestamp (as Kafka's MemoryRecordsBuilder does) and maxTimestamp the
    largest. Raises :class:`InvalidRecordError` for an item of the wrong type.

    ``plain=True`` is the caller's promise that every item is ``bytes`` (the
    producer knows it for free); None checks.

    Complexity: O(total bytes), one C call (plus one compression pass).
    """
    n = len(records)
    if n == 0:
        raise InvalidRecordError("a batch needs at least one record")
    codec = codecs.codec_id(compression)
    codecs.check_level(codec, compression_level)
    if plain is None:
        plain = {*map(type, records)} == _ONLY_BYTES  # C-level loop: ~40% cheaper than a generator
    # plain: every record is a bytes value (checked here, or promised by the caller)
    attributes = (ATTR_TRANSACTIONAL if transactional else 0) | (ATTR_CONTROL if control else 0)
    if plain and base_offset == 0 and partition_leader_epoch == NO_PARTITION_LEADER_EPOCH:
        out = _encode_values(cast(Sequence[bytes], records), n, now_ms, producer_id, producer_epoch, base_sequence, attributes)
    else:
        out = _encode_columns(records, n, plain, now_ms, base_offset, partition_leader_epoch, producer_id,
                              producer_epoch, base_sequence, attributes)
    if codec != codecs.NONE:
        compressed = codecs.compress(codec, memoryview(out)[BATCH_OVERHEAD:], compression_level)
        out = out[:BATCH_OVERHEAD] + compressed
        out[21:23] = struct.pack(">h", attributes | codec)
        _native.check(lib.plg_batch_seal(ffi.from_buffer(out), len(out)), "seal compressed batch")
    return out


#: packers of n int32 lengths, by n (a batch's record count repeats: building the format costs more than packing)
_LENS_STRUCTS: "dict[int, struct.Struct]" = {}

_MAX_RECORD_FRAMING = 19  # varints of one keyless, headerless record: length 5, attributes 1, deltas 1 + 5, lengths 1 + 5, headers 1


def encode_values_batch(records: Sequence[bytes], now_ms: int, producer_id: int = NO_PRODUCER_ID,
                        producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE) -> bytearray:
    """:func:`encode_batch` of a producer's plain batch - every item ``bytes``, no compression,
    base offset 0, no leader epoch - without its keyword parsing and checks (the producer's
    per-batch call). Same bytes as ``encode_batch(records, now_ms=now_ms, plain=True, ...)``.

    Complexity: O(total bytes), one C call. Thread-safety: safe (no shared state).
    """
    n = len(records)
    if n == 0:
        raise InvalidRecordError("a batch needs at least one record")
    return _encode_values(records, n, now_ms, producer_id, producer_epoch, base_sequence, 0)


def _encode_values(records: Sequence[bytes], n: int, now_ms: int, producer_id: int, producer_epoch: int,
                   base_sequence: int, attributes: int) -> bytearray:
    """The producer's common case (bytes values only): one C call with scalar header fields into a
    buffer sized by an upper bound, then cut to size."""
    values = b"".join(records)
    lens_struct = _LENS_STRUCTS.get(n)
    if lens_struct is None:
        if len(_LENS_STRUCTS) >= 1024:
            _LENS_STRUCTS.clear()
        lens_struct = _LENS_STRUCTS[n] = struct.Struct(f"={n}i")
    try:
        lens = lens_struct.pack(*map(len, records))
    except struct.error:
        raise InvalidRecordError("records do not fit in one batch (a length exceeds 2 GiB)") from None
    cap = BATCH_OVERHEAD + len(values) + _MAX_RECORD_FRAMING * n
    out = bytearray(cap)
    used = ffi.new("uint64_t *")
    rc = lib.plg_batch_encode_values(values, ffi.from_buffer("int32_t[]", lens), n, now_ms, producer_id,
                                     producer_epoch, base_sequence, attributes, ffi.from_buffer(out), cap, used)
    if rc != _native.OK:
        if rc == lib.PLG_EINVAL:
            raise InvalidRecordError("records do not fit in one batch (a length exceeds 2 GiB)")
        _native.check(rc, "encode batch")
    del out[used[0]:]
    return out


def _encode_columns(records: Sequence[RecordInput], n: int, plain: bool, now_ms: int, base_offset: int,
                    partition_leader_epoch: int, producer_id: int, producer_epoch: int, base_sequence: int,
                    attributes: int) -> bytearray:
    """Any records (keys, headers, timestamps, nulls): columns and header structs for the C encoder."""
    if plain:
        values = b"".join(records)  # type: ignore[arg-type]
        value_lens = ffi.new("int32_t[]", list(map(len, records)))  # type: ignore[arg-type]
        keys = b""
        key_lens = ffi.NULL
        ts_arr = ffi.NULL
        base_ts = max_ts = now_ms
        hcounts = hk_lens = hv_lens = ffi.NULL
        hkeys = hvals = b""
    else:
        vals: List[bytes] = []
        vlens: List[int] = []
        ks: List[bytes] = []
        klens: List[int] = []
        tss: List[int] = []
        hcs: List[int] = []
        hk: List[bytes] = []
        hkl: List[int] = []
        hv: List[bytes] = []
        hvl: List[int] = []
        any_key = any_headers = False
        for i, r in enumerate(records):
            if isinstance(r, Record):
                v = _as_value(r.value, i, "value")
                k = _as_value(r.key, i, "key")
                ts = now_ms if r.timestamp is None else r.timestamp
                if not isinstance(ts, int) or isinstance(ts, bool):
                    raise InvalidRecordError(f"record {i}: timestamp must be an int (ms), not {type(ts).__name__}")
                heads = r.headers or ()
            else:
                v = _as_value(r, i, "record")
                k = None
                ts = now_ms
                heads = ()
            if v is None:
                vlens.append(-1)
            else:
                vals.append(v)
                vlens.append(len(v))
            if k is None:
                klens.append(-1)
            else:
                any_key = True
                ks.append(k)
                klens.append(len(k))
            tss.append(ts)
            hcs.append(len(heads))
            for item in heads:
                any_headers = True
                try:
                    hkey, hval = item
                except (TypeError, ValueError):
                    raise InvalidRecordError(f"record {i}: a header must be a (str, bytes) pair, not {item!r}") from None
                if not isinstance(hkey, str):
                    raise InvalidRecordError(f"record {i}: header key must be str, not {type(hkey).__name__}")
                kb = hkey.encode("utf-8", "surrogateescape")
                hk.append(kb)
                hkl.append(len(kb))
                hvb = _as_value(hval, i, f"header {hkey!r} value")
                if hvb is None:
                    hvl.append(-1)
                else:
                    hv.append(hvb)
                    hvl.append(len(hvb))
        values = b"".join(vals)
        value_lens = ffi.new("int32_t[]", vlens)
        keys = b"".join(ks)
        key_lens = ffi.new("int32_t[]", klens) if any_key else ffi.NULL
        base_ts = tss[0]
        max_ts = max(tss)
        min_ts = min(tss)
        if min_ts < _INT64_MIN or max_ts > _INT64_MAX or max_ts - base_ts > _INT64_MAX or min_ts - base_ts < _INT64_MIN:
            raise InvalidRecordError(
                f"record timestamps must be int64 ms, and differ from the first by less than 2**63 "
                f"(got {min_ts}..{max_ts}, first {base_ts})"
            )
        ts_arr = ffi.new("int64_t[]", tss)
        if any_headers:
            hcounts = ffi.new("int32_t[]", hcs)
            hk_lens = ffi.new("int32_t[]", hkl)
            hv_lens = ffi.new("int32_t[]", hvl)
            hkeys = b"".join(hk)
            hvals = b"".join(hv)
        else:
            hcounts = hk_lens = hv_lens = ffi.NULL
            hkeys = hvals = b""
    cols = ffi.new(
        "plg_record_columns_t *",
        {
            "count": n,
            "timestamps": ts_arr,
            "keys": ffi.from_buffer(keys),
            "key_lens": key_lens,
            "values": ffi.from_buffer(values),
            "value_lens": value_lens,
            "header_counts": hcounts,
            "header_keys": ffi.from_buffer(hkeys),
            "header_key_lens": hk_lens,
            "header_values": ffi.from_buffer(hvals),
            "header_value_lens": hv_lens,
        },
    )
    header = ffi.new(
        "plg_batch_header_t *",
        {
            "base_offset": base_offset,
            "partition_leader_epoch": partition_leader_epoch,
            "attributes": attributes,
            "base_timestamp": base_ts,
            "max_timestamp": max_ts,
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
            "base_sequence": base_sequence,
        },
    )
    size = ffi.new("uint64_t *")
    rc = lib.plg_batch_size(cols, base_ts, size)
    if rc != _native.OK:
        raise InvalidRecordError("records do not fit in one batch (a length exceeds 2 GiB)")
    out = bytearray(size[0])
    used = ffi.new("uint64_t *")
    _native.check(lib.plg_batch_encode(header, cols, ffi.from_buffer(out), len(out), used), "encode batch")
    return out


def set_base_offset(batches: bytearray, base_offset: int, partition_leader_epoch: int) -> Tuple[int, int]:
    """Re-stamp consecutive base offsets and the leader epoch on v2 batches in place.

    Returns ``(number of batches, next offset)``. Neither field is under the
    CRC, so nothing else changes.
    """
    n = ffi.new("uint64_t *")
    nxt = ffi.new("int64_t *")
    _native.check(
        lib.plg_batch_set_offsets(ffi.from_buffer(batches), len(batches), base_offset, partition_leader_epoch, n, nxt),
        "assign offsets",
    )
    return int(n[0]), int(nxt[0])


# ---------------------------------------------------------------------------
# Pure-Python oracle: Kafka's layout written out plainly. Tests only.
# ---------------------------------------------------------------------------


def _py_crc32c_table() -> List[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_PY_CRC32C = _py_crc32c_table()


def py_crc32c(data: Buffer, crc: int = 0) -> int:
    """CRC-32C, bit-for-bit as the definition (slow: tests only)."""
    c = crc ^ 0xFFFFFFFF
    for b in bytes(data):
        c = _PY_CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def py_varint(value: int) -> bytes:
    """Zig-zag then base-128 little-endian groups (Kafka ByteUtils.writeVarlong)."""
    u = (value << 1) ^ (value >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def py_read_varint(data: bytes, pos: int, max_bytes: int = 10) -> Tuple[int, int]:
    """Returns (value, new position); raises ValueError on a bad varint."""
    u = shift = 0
    for i in range(max_bytes):
        if pos >= len(data):
            raise ValueError("varint runs past the end")
        b = data[pos]
        pos += 1
        if shift == 63 and b > 1:
            raise ValueError("varlong overflows int64")
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            if max_bytes == 5 and u > 0xFFFFFFFF:
                raise ValueError("varint overflows int32")
            v = (u >> 1) ^ -(u & 1)
            if max_bytes == 5:
                v = ((v + (1 << 31)) % (1 << 32)) - (1 << 31)
            return v, pos
        shift += 7
    raise ValueError("varint too long")


def py_record_bytes(rec: Record, timestamp_delta: int, offset_delta: int) -> bytes:
    """One v2 record, length prefix included (Kafka's DefaultRecord), in pure Python.

    Complexity: O(record size). Used by the test oracle and by the log cleaner,
    which re-encodes the records a batch keeps.
    """
    body = bytearray(b"\x00")
    body += py_varint(timestamp_delta)
    body += py_varint(offset_delta)
    for field in (rec.key, rec.value):
        if field is None:
            body += py_varint(-1)
        else:
            body += py_varint(len(field)) + bytes(field)
    body += py_varint(len(rec.headers))
    for hk, hv in rec.headers:
        kb = hk.encode("utf-8", "surrogateescape")
        body += py_varint(len(kb)) + kb
        body += py_varint(-1) if hv is None else py_varint(len(hv)) + bytes(hv)
    return py_varint(len(body)) + bytes(body)


def py_encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Encode uncompressed records as Kafka's DefaultRecordBatch does (tests only).

    Every record must carry a timestamp.
    """
    base_ts = records[0].timestamp
    assert base_ts is not None
    max_ts = max(r.timestamp for r in records)  # type: ignore[type-var]
    body = bytearray()
    for i, r in enumerate(records):
        body += py_record_bytes(r, r.timestamp - base_ts, i)  # type: ignore[operator]
    tail = struct.pack(
        ">hiqqqhii", attributes, len(records) - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(records)
    ) + bytes(body)
    crc = py_crc32c(tail)
    return struct.pack(">qiibI", base_offset, len(tail) + 9, partition_leader_epoch, 2, crc) + tail


def py_decode_batch(data: bytes) -> Tuple[dict, List[Record]]:
    """Decode one uncompressed v2 batch (tests only). Raises ValueError when invalid."""
    if len(data) < 61:
        raise ValueError("shorter than a batch header")
    base_offset, length, ple, magic, crc = struct.unpack_from(">qiibI", data, 0)
    if magic != 2 or length + 12 != len(data):
        raise ValueError("bad magic or length")
    if py_crc32c(data[21:]) != crc:
        raise ValueError("bad crc")
    attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count = struct.unpack_from(">hiqqqhii", data, 21)
    header = dict(
        base_offset=base_offset, partition_leader_epoch=ple, attributes=attrs, last_offset_delta=lod,
        base_timestamp=base_ts, max_timestamp=max_ts, producer_id=pid, producer_epoch=pepoch,
        base_sequence=bseq, records_count=count,
    )
    pos = 61
    out = []
    for _ in range(count):
        rlen, pos = py_read_varint(data, pos, 5)
        end = pos + rlen
        if rlen < 1 or end > len(data):
            raise ValueError("record length out of range")
        pos += 1
        tsd, pos = py_read_varint(data, pos, 10)
        od, pos = py_read_varint(data, pos, 5)
        if od < 0:
            raise ValueError("negative offset delta")
        fields = []
        for _f in range(2):
            n, pos = py_read_varint(data, pos, 5)
            if n < -1 or pos + max(n, 0) > end:
                raise ValueError("field length out of range")
            fields.append(None if n < 0 else bytes(data[pos : pos + n]))
            pos += max(n, 0)
        hc, pos = py_read_varint(data, pos, 5)
        if hc < 0:
            raise ValueError("negative header count")
        headers = []
        for _h in range(hc):
            kn, pos = py_read_varint(data, pos, 5)
            if kn < 0 or pos + kn > end:
                raise ValueError("header key length out of range")
            hkey = bytes(data[pos : pos + kn]).decode("utf-8", "surrogateescape")
            pos += kn
            vn, pos = py_read_varint(data, pos, 5)
            if vn < -1 or pos + max(vn, 0) > end:
                raise ValueError("header value length out of range")
            headers.append((hkey, None if vn < 0 else bytes(data[pos : pos + vn])))
            pos += max(vn, 0)
        if pos != end:
            raise ValueError("record length mismatch")
        out.append(Record(fields[1], fields[0], tuple(headers), base_ts + tsd, base_offset + od, CREATE_TIME))
    if pos != len(data):
        raise ValueError("bytes left after the last record")
    return header, out


def py_encode_legacy(offset: int, value: Optional[bytes], key: Optional[bytes] = None, *, magic: int = 1,
                     timestamp: int = 0, attributes: int = 0) -> bytes:
    """One legacy message (magic 0 or 1), CRC-32 over magic..end (tests only)."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def batches_of(records: Iterable[Record], size: int) -> Iterator[List[Record]]:
    """Split records into lists of at most ``size`` (helper for tests and tools)."""
    chunk: List[Record] = []
    for r in records:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
