"""The pure-Python oracle of the RecordBatch v2 format: Kafka's byte layout written out plainly.

:func:`py_encode_batch`, :func:`py_decode_batch`, :func:`py_crc32c` and
:func:`py_encode_legacy` follow Kafka's ``DefaultRecordBatch``/``DefaultRecord``
line by line; property tests compare the C core's encoder, decoders and fast
paths against them. Slow, and never used on a hot path; the log cleaner uses
:func:`py_record_bytes` to re-encode the records a batch keeps.

Thread-safety: pure functions.
"""
from __future__ import annotations

import struct
import zlib
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from pylog.record.types import CREATE_TIME, Buffer, Record

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


def py_decode_batch(data: bytes) -> Tuple[Dict[str, int], List[Record]]:
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
