"""Record codecs: record columns to :class:`Record` objects and back, one C call per batch.

* decoding: :func:`record_fields` (the columns of one records section as
  per-field iterables, with the common shapes - consecutive offsets, one
  timestamp, null keys, no headers - recognised without unpacking), which
  :func:`decode_records` and the consumer's general decoder build tuples
  from; :func:`decode_headers` for one record's headers span;
* encoding: :func:`encode_batch` (any records, keys, headers, timestamps,
  compression) and :func:`encode_values_batch` (the producer's plain batch).

The C calls are :mod:`pylog._native.batch`'s typed bindings.

Thread-safety: re-entrant (module caches are grown by whole replacement).
"""
from __future__ import annotations

import struct
from array import array
from itertools import accumulate, repeat
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union, cast

from pylog._native import batch as _c
from pylog.errors import InvalidRecordError
from pylog.record import compression as codecs
from pylog.record.framing import seal, set_attributes
from pylog.record.types import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BATCH_OVERHEAD,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Buffer,
    Header,
    Record,
    RecordInput,
)

_new_tuple = tuple.__new__
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ONLY_BYTES = {bytes}
DecodedColumns = _c.DecodedColumns
#: Columns decoded straight into caller-owned memory (the Spark source's Arrow buffers), and the
#: bytes per entry of each column.
ColumnTarget = _c.ColumnTarget
COLUMN_WIDTHS = _c.COLUMN_WIDTHS


def decode_columns(data: Buffer, count: int, path: Optional[str] = None, position: Optional[int] = None,
                   what: str = "malformed records in batch") -> DecodedColumns:
    """The per-record columns of an uncompressed v2 records section (one C call); raises
    :class:`~pylog.errors.CorruptRecordError` when they do not fit. O(count)."""
    return _c.decode_records(data, count, path, position, what)


def spans(data: bytes, pos: List[int], lens: List[int]) -> List[Optional[bytes]]:
    """``data[p:p+n]`` for each (p, n), ``None`` where n == -1."""
    if -1 in lens:
        return [data[p : p + n] if n >= 0 else None for p, n in zip(pos, lens)]
    return [data[p : p + n] for p, n in zip(pos, lens)]


_seq32 = b""
_INT32_CODE = "i" if array("i").itemsize == 4 else "l"  # the array typecode of a C int32_t


def is_sequence(raw: bytes, count: int) -> bool:
    """True when the native int32 array ``raw`` holds 0, 1, ..., count-1."""
    global _seq32
    if len(_seq32) < 4 * count:  # grown on demand, never shrunk; a race only rebuilds it
        _seq32 = array(_INT32_CODE, range(max(count, 1024))).tobytes()
    return raw == _seq32[: 4 * count]


def record_fields(
    data: bytes,
    cols: DecodedColumns,
    base_offset: int,
    base_timestamp: int,
    timestamp_type: int,
    max_timestamp: int,
    path: Optional[str],
    position: Optional[int],
) -> Tuple[Iterable[Optional[bytes]], Iterable[Optional[bytes]], Iterable[Sequence[Header]], Iterable[int], Iterable[int]]:
    """``(values, keys, headers, timestamps, offsets)`` of the decoded records ``cols`` of ``data``,
    each an iterable of ``cols.count`` items (``repeat`` where one value serves every record: zip
    them with a finite one). Keys, values and header values are ``bytes`` slices of ``data``.

    Complexity: O(count); the common shapes (all keys null, no headers, one
    timestamp for the batch, offset deltas 0..count-1) are recognised by
    comparing whole raw columns and skip unpacking them.
    """
    count = cols.count
    n4 = 4 * count
    offsets: Iterable[int]
    if is_sequence(cols.raw("offset_delta"), count):
        offsets = range(base_offset, base_offset + count)
    else:
        offsets = [base_offset + d for d in cols.ints("offset_delta")]
    timestamps: Iterable[int]
    if timestamp_type == LOG_APPEND_TIME:
        timestamps = repeat(max_timestamp)
    else:
        tsd_raw = cols.raw("timestamp_delta")
        if tsd_raw == tsd_raw[:8] * count:
            timestamps = repeat(base_timestamp + cols.first("timestamp_delta"))
        else:
            timestamps = [base_timestamp + d for d in cols.ints("timestamp_delta")]
    values = spans(data, cols.ints("value_pos"), cols.ints("value_len"))
    keys: Iterable[Optional[bytes]]
    if cols.raw("key_len") == b"\xff" * n4:  # every key_len is -1
        keys = repeat(None)
    else:
        keys = spans(data, cols.ints("key_pos"), cols.ints("key_len"))
    headers: Iterable[Sequence[Header]]
    if cols.raw("header_count") == bytes(n4):
        headers = repeat(())
    else:
        headers = decode_header_columns(data, cols, path, position)
    return values, keys, headers, timestamps, offsets


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

    Complexity: O(count): one C call fills position/length columns
    (:func:`record_fields`); about 0.4 us per record of 100 bytes.
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    cols = decode_columns(data, count, path, position)
    if count == 0:
        return []
    values, keys, headers, timestamps, offsets = record_fields(
        data, cols, base_offset, base_timestamp, timestamp_type, max_timestamp, path, position)
    # map/zip build the tuples in C (zip recycles its tuple): measurably
    # faster than constructing them in a comprehension.
    return list(map(_new_tuple, repeat(Record), zip(values, keys, headers, timestamps, offsets, repeat(timestamp_type))))


def decode_header_columns(data: bytes, cols: DecodedColumns, path: Optional[str],
                          position: Optional[int]) -> List[Tuple[Header, ...]]:
    """Each record's headers as a tuple of (str, bytes | None), one C call for all."""
    hc = cols.ints("header_count")
    kp, kl, vp, vl = _c.decode_header_columns(data, cols, sum(hc), path, position)
    hkeys = [data[p : p + n].decode("utf-8", "surrogateescape") for p, n in zip(kp, kl)]
    pairs = tuple(zip(hkeys, spans(data, vp, vl)))
    ends = list(accumulate(hc))
    return [pairs[e - c : e] for e, c in zip(ends, hc)]


def decode_headers(data: Buffer, count: int, path: Optional[str], position: Optional[int]) -> Tuple[Header, ...]:
    """The ``count`` headers in ``data`` (one record's headers span) as (str, bytes | None) pairs."""
    fields = _c.decode_headers(data, count, path, position)
    raw = bytes(data)
    return tuple(
        (raw[kp : kp + kl].decode("utf-8", "surrogateescape"), raw[vp : vp + vl] if vl >= 0 else None)
        for kp, kl, vp, vl in fields
    )


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
    checked against the codec's range (:func:`pylog.record.compression.compress`).

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
        set_attributes(out, attributes | codec)
        seal(out, "seal compressed batch")
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



def encode_values_at(records: Sequence[RecordInput], now_ms: int, base_offset: int,
                     partition_leader_epoch: int) -> Optional[bytearray]:
    """Log.append's plain batch: when ``records`` is a non-empty ``list`` of ``bytes`` values, the
    bytes of ``encode_batch(records, now_ms=now_ms, base_offset=base_offset,
    partition_leader_epoch=partition_leader_epoch)`` (no producer id, no compression); None for
    anything else (nothing checked is reported: the caller's general path does that).

    One C call reading the list's items directly (``encode_value_list`` of the send-path
    extension); without that extension, :func:`_encode_values` and a re-stamp of the base offset
    and epoch (fields outside the CRC).

    Complexity: O(total bytes). Thread-safety: safe (no shared state).
    """
    out = _c.encode_value_list(records, now_ms, base_offset, partition_leader_epoch, NO_PRODUCER_ID,
                               NO_PRODUCER_EPOCH, NO_SEQUENCE, 0)
    if out is not None or _c._encode_value_list is not None:
        return out
    n = len(records)
    if records.__class__ is not list or n == 0 or {*map(type, records)} != _ONLY_BYTES:
        return None
    if not (0 <= base_offset < 2**63 and -2**31 <= partition_leader_epoch < 2**31 and -2**63 <= now_ms < 2**63):
        return None
    try:
        out = _encode_values(cast(Sequence[bytes], records), n, now_ms, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, 0)
    except InvalidRecordError:
        return None
    _c.set_offsets(out, base_offset, partition_leader_epoch)
    return out

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
    return _c.encode_values(values, lens, n, now_ms, producer_id, producer_epoch, base_sequence, attributes, cap)


def _encode_columns(records: Sequence[RecordInput], n: int, plain: bool, now_ms: int, base_offset: int,
                    partition_leader_epoch: int, producer_id: int, producer_epoch: int, base_sequence: int,
                    attributes: int) -> bytearray:
    """Any records (keys, headers, timestamps, nulls): columns for the C encoder."""
    hcs: Optional[List[int]] = None
    hkl: Optional[List[int]] = None
    hvl: Optional[List[int]] = None
    klens: Optional[List[int]] = None
    tss: Optional[List[int]] = None
    if plain:
        values = b"".join(records)  # type: ignore[arg-type]
        vlens = list(map(len, records))  # type: ignore[arg-type]
        keys = b""
        base_ts = max_ts = now_ms
        hkeys = hvals = b""
    else:
        vals: List[bytes] = []
        vlens = []
        ks: List[bytes] = []
        klist: List[int] = []
        tlist: List[int] = []
        hclist: List[int] = []
        hk: List[bytes] = []
        hklist: List[int] = []
        hv: List[bytes] = []
        hvlist: List[int] = []
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
                klist.append(-1)
            else:
                any_key = True
                ks.append(k)
                klist.append(len(k))
            tlist.append(ts)
            hclist.append(len(heads))
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
                hklist.append(len(kb))
                hvb = _as_value(hval, i, f"header {hkey!r} value")
                if hvb is None:
                    hvlist.append(-1)
                else:
                    hv.append(hvb)
                    hvlist.append(len(hvb))
        values = b"".join(vals)
        keys = b"".join(ks)
        klens = klist if any_key else None
        base_ts = tlist[0]
        max_ts = max(tlist)
        min_ts = min(tlist)
        if min_ts < _INT64_MIN or max_ts > _INT64_MAX or max_ts - base_ts > _INT64_MAX or min_ts - base_ts < _INT64_MIN:
            raise InvalidRecordError(
                f"record timestamps must be int64 ms, and differ from the first by less than 2**63 "
                f"(got {min_ts}..{max_ts}, first {base_ts})"
            )
        tss = tlist
        if any_headers:
            hcs, hkl, hvl = hclist, hklist, hvlist
            hkeys = b"".join(hk)
            hvals = b"".join(hv)
        else:
            hkeys = hvals = b""
    try:
        return _c.encode_columns(
            n, tss, keys, klens, values, vlens, hcs, hkeys, hkl, hvals, hvl, base_offset=base_offset,
            partition_leader_epoch=partition_leader_epoch, attributes=attributes, base_timestamp=base_ts,
            max_timestamp=max_ts, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)
    except OverflowError:
        raise InvalidRecordError("records do not fit in one batch (a length exceeds 2 GiB)") from None


__all__ = [
    "DecodedColumns", "ColumnTarget", "COLUMN_WIDTHS", "decode_columns", "spans", "is_sequence", "record_fields", "decode_records",
    "decode_header_columns", "decode_headers", "encode_batch", "encode_values_batch", "encode_values_at",
]
