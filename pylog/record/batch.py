"""Batch views: :class:`RecordBatch` (one v2 batch or legacy message in a buffer), :class:`ValueColumns`
and :func:`iter_batches`.

A :class:`RecordBatch` is zero-copy: a memoryview of exactly the batch's
bytes plus the header fields a scan found; records (and decompression) are
decoded on demand by :mod:`pylog.record.codec`. Legacy (magic 0/1) message
sets, compressed wrappers included, are decoded here too.

Thread-safety: immutable once built; safe to share.
"""
from __future__ import annotations

from array import array
from typing import Iterator, List, Optional

from pylog._native import batch as _c
from pylog.errors import CorruptRecordError
from pylog.record import compression as codecs
from pylog.record.codec import decode_columns, decode_records
from pylog.record.framing import scan
from pylog.record.types import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BATCH_OVERHEAD,
    CREATE_TIME,
    LOG_APPEND_TIME,
    BatchInfo,
    Buffer,
    Record,
)


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

    def records_section(self) -> bytes:
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
            return legacy_records(self)
        data = self.records_section()
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
            vals = [r.value for r in legacy_records(self)]
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
            section = memoryview(self.records_section())
        cols = decode_columns(section, self.info.records_count, self.path, self.info.position)
        return ValueColumns(section, cols.view("value_pos"), cols.view("value_len"))


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


def legacy_records(batch: RecordBatch) -> List[Record]:
    """Records of one legacy message: itself, or the inner set of a compressed wrapper."""
    data = bytes(batch.buffer)
    msg = _c.decode_legacy(data, batch.path, batch.info.position)
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
    if not found.ok or not found.batches:
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
        for r in legacy_records(RecordBatch(info, inner_view[info.position : info.position + info.size], batch.path)):
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
    if result.corrupt:
        raise CorruptRecordError(f"invalid batch: {result.reason}", path=path, position=result.valid_bytes)


# ---------------------------------------------------------------------------
# Encoding (C core)
# ---------------------------------------------------------------------------



__all__ = ["RecordBatch", "ValueColumns", "legacy_records", "iter_batches"]
