"""Framing of RecordBatch v2: the only Python that knows where a header field lives.

Kafka's ``DefaultRecordBatch`` layout (big-endian)::

    0  baseOffset int64         12 partitionLeaderEpoch int32   21 attributes int16
    8  batchLength int32        16 magic int8                   23 lastOffsetDelta int32
                                17 crc uint32 (CRC-32C of 21..)  27 baseTimestamp int64
    35 maxTimestamp int64   43 producerId int64   51 producerEpoch int16
    53 baseSequence int32   57 recordsCount int32 61 records...

Walking, validating and stamping whole buffers is the C core's work
(:mod:`pylog._native.batch`); this module wraps it into record types
(:func:`scan`, :func:`check_one`, :func:`stamp_one`, :func:`set_base_offset`,
:func:`find_batch`) and reads single fields of a header without validating
it (:class:`BatchHeader`, :func:`base_offset_of`, :func:`leader_epoch_of`),
replacing the ``struct`` layouts other modules kept.

Thread-safety: pure functions (those given a ``bytearray`` change only it).
"""
from __future__ import annotations

import struct
from typing import NamedTuple, Optional, Tuple

from pylog._native import batch as _c
from pylog.record.types import LOG_OVERHEAD, BatchInfo, Buffer, ScanResult

_new_tuple = tuple.__new__
_HEADER = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_ATTRIBUTES_ON = struct.Struct(">h")
#: byte positions of the fields other modules ask for
BASE_OFFSET_AT = 0
LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
ATTRIBUTES_AT = 21


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 batch, read as it is (no validation; see :func:`check_one`)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, data: Buffer, position: int = 0) -> "BatchHeader":
        """The header at ``data[position:]`` (raises ``struct.error`` when fewer than 61 bytes remain:
        callers check the size first). O(1)."""
        return _new_tuple(cls, _HEADER.unpack_from(data, position))

    def pack_into(self, buf: bytearray, position: int = 0) -> None:
        """Write this header at ``buf[position:]`` as it is (the length and CRC are not computed:
        :func:`seal` the batch after its records are in place). O(1)."""
        _HEADER.pack_into(buf, position, *self)

    @property
    def size(self) -> int:
        """The whole batch's bytes, log header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def base_offset_of(data: Buffer, position: int = 0) -> int:
    """The baseOffset of the entry at ``position`` (its first 8 bytes; any magic). O(1)."""
    return int(_BASE_OFFSET.unpack_from(data, position)[0])


def batch_length_of(data: Buffer, position: int = 0) -> int:
    """The batchLength of the entry at ``position`` (bytes after the 12-byte log header). O(1)."""
    return int(_INT32.unpack_from(data, position + LENGTH_AT)[0])


def leader_epoch_of(data: Buffer, position: int = 0) -> int:
    """The partitionLeaderEpoch of the v2 batch at ``position``. O(1)."""
    return int(_INT32.unpack_from(data, position + LEADER_EPOCH_AT)[0])


def set_attributes(batch: bytearray, attributes: int) -> None:
    """Write the attributes field of the v2 batch ``batch`` (under the CRC: :func:`seal` after)."""
    _ATTRIBUTES_ON.pack_into(batch, ATTRIBUTES_AT, attributes)


def seal(batch: bytearray, what: str) -> None:
    """Recompute a v2 batch's length and CRC after its body or attributes changed. O(bytes)."""
    _c.seal(batch, what)


def scan(data: Buffer, *, verify_crc: bool = True, max_batches: int = 1 << 62) -> ScanResult:
    """Walk the batches at the start of ``data``, validating framing (and CRCs).

    Offsets must increase from batch to batch. Complexity: O(bytes) with CRC
    verification, O(batches) without; the batch infos come back from C in
    chunks and are unpacked in bulk.
    """
    rows, valid, status = _c.scan(data, verify_crc, max_batches, BatchInfo)
    return ScanResult(rows, valid, status)


def check_one(buf: Buffer) -> Optional[BatchInfo]:
    """The header of ``buf`` when it is exactly one valid v2 batch (framing and CRC); None for
    anything else (the caller's general path then refuses it precisely). O(bytes)."""
    row = _c.check_one(buf)
    return None if row is None else _new_tuple(BatchInfo, row)


def stamp_one(buf: bytearray, base_offset: int, partition_leader_epoch: int) -> Optional[BatchInfo]:
    """Check that ``buf`` is exactly one valid v2 batch and give it ``base_offset`` and the epoch
    (fields outside the CRC); its header after stamping, or None (``buf`` unchanged). O(bytes)."""
    row = _c.stamp_one(buf, base_offset, partition_leader_epoch)
    return None if row is None else _new_tuple(BatchInfo, row)


def set_base_offset(batches: bytearray, base_offset: int, partition_leader_epoch: int) -> Tuple[int, int]:
    """Re-stamp consecutive base offsets and the leader epoch on v2 batches in place.

    Returns ``(number of batches, next offset)``. Neither field is under the
    CRC, so nothing else changes. O(batches).
    """
    return _c.set_offsets(batches, base_offset, partition_leader_epoch)


def find_batch(data: Buffer, offset: int) -> Tuple[int, int, int]:
    """``(status, position, last offset)`` of the first batch in ``data`` whose last offset is
    >= ``offset`` (last offset -1: none among the complete batches, of which ``position`` bytes
    were walked). A non-zero status names invalid bytes at ``position`` (see
    :func:`pylog._native.strerror`). O(batches walked)."""
    return _c.find_batch(data, offset)


__all__ = [
    "BatchHeader", "base_offset_of", "batch_length_of", "leader_epoch_of", "set_attributes", "seal", "scan",
    "check_one", "stamp_one", "set_base_offset", "find_batch",
    "BASE_OFFSET_AT", "LENGTH_AT", "LEADER_EPOCH_AT", "MAGIC_AT", "ATTRIBUTES_AT",
]
