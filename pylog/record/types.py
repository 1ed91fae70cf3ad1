"""The record layer's types and constants: :class:`Record`, :class:`BatchInfo`, :class:`ScanResult`.

Kafka's ``common.record`` names: attributes bits (``ATTR_*``), the "none"
values of the producer fields (``NO_*``) and the header sizes.

Thread-safety: everything here is immutable.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

from pylog._native import ETRUNCATED, OK, strerror
from pylog._native.batch import BATCH_OVERHEAD, LOG_OVERHEAD

Buffer = Union[bytes, bytearray, memoryview]
Header = Tuple[str, Optional[bytes]]

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # Kafka's DELETE_HORIZON_FLAG_MASK (KIP-534)


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


class ScanResult(NamedTuple):
    """What :func:`pylog.record.scan` found: valid batches, where they end, and why it stopped.

    ``status`` is 0 when the buffer ended on a batch boundary (or ``max_batches``
    were found), ``ETRUNCATED`` when the last batch is incomplete (a torn tail,
    or a read that cut a batch), or ``ECORRUPT``/``ECRC``/``EMAGIC`` when the
    bytes at ``valid_bytes`` are invalid. :attr:`ok`, :attr:`torn` and
    :attr:`corrupt` say which without C codes; :attr:`reason` in words.
    """

    batches: List[BatchInfo]
    valid_bytes: int
    status: int

    @property
    def reason(self) -> str:
        return strerror(self.status)

    @property
    def ok(self) -> bool:
        """The walk ended on a batch boundary (or at ``max_batches``)."""
        return self.status == OK

    @property
    def torn(self) -> bool:
        """The last batch is incomplete: a torn tail, or a read that cut a batch."""
        return self.status == ETRUNCATED

    @property
    def corrupt(self) -> bool:
        """The bytes at :attr:`valid_bytes` are not a valid batch."""
        return self.status != OK and self.status != ETRUNCATED


RecordInput = Union[bytes, bytearray, memoryview, Record, None]


def status_reason(status: int) -> str:
    """The words for a framing status (a :class:`ScanResult`'s or :func:`pylog.record.find_batch`'s)."""
    return strerror(status)


__all__ = [
    "Buffer", "Header", "CREATE_TIME", "LOG_APPEND_TIME", "NO_TIMESTAMP", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH", "BATCH_OVERHEAD", "LOG_OVERHEAD", "ATTR_COMPRESSION_MASK",
    "ATTR_LOG_APPEND_TIME", "ATTR_TRANSACTIONAL", "ATTR_CONTROL", "ATTR_DELETE_HORIZON", "Record", "BatchInfo",
    "ScanResult", "RecordInput", "status_reason",
]
