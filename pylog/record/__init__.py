"""The record layer (Kafka's ``common.record``): the one owner of the RecordBatch v2 format.

Floor between :mod:`pylog._native` (the C core's typed bindings) and
:mod:`pylog.storage`. It owns:

* :mod:`~pylog.record.types` - :class:`Record`, :class:`BatchInfo`,
  :class:`ScanResult` and the format's constants (``ATTR_*``, ``NO_*``,
  ``BATCH_OVERHEAD``);
* :mod:`~pylog.record.framing` - the only Python that knows a header offset:
  :func:`scan`, :func:`check_one`, :func:`stamp_one`, :func:`set_base_offset`,
  :func:`find_batch`, :class:`~pylog.record.framing.BatchHeader`;
* :mod:`~pylog.record.codec` - record columns, headers and the encoders;
* :mod:`~pylog.record.batch` - :class:`RecordBatch`, ``ValueColumns``,
  :func:`iter_batches`, legacy (magic 0/1) message sets;
* :mod:`~pylog.record.fetch_run` - runs of plain batches decoded a run per C call;
* :mod:`~pylog.record.compression` - the codecs (gzip, snappy, lz4, zstd);
* :mod:`~pylog.record.murmur` - Kafka's ``murmur2``, once;
* :mod:`~pylog.record.oracle` - the pure-Python reference tests compare against.

May import: :mod:`pylog.errors`, :mod:`pylog._native` and the standard
library (and the optional codec packages). Storage, replication, clients,
the cleaner and Spark import this package - never ``ffi``/``lib``, a
``struct`` header layout, or another module's private name.
"""
from __future__ import annotations

from pylog.record.batch import RecordBatch, ValueColumns, iter_batches
from pylog.record.codec import decode_records, encode_batch, encode_values_batch
from pylog.record.oracle import (
    batches_of,
    py_crc32c,
    py_decode_batch,
    py_encode_batch,
    py_encode_legacy,
    py_read_varint,
    py_record_bytes,
    py_varint,
)
from pylog.record.framing import BatchHeader, check_one, find_batch, scan, set_base_offset, stamp_one
from pylog.record.types import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BATCH_OVERHEAD,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchInfo,
    Buffer,
    Header,
    Record,
    RecordInput,
    ScanResult,
)

__all__ = [
    "Record", "RecordBatch", "ValueColumns", "BatchInfo", "BatchHeader", "ScanResult", "RecordInput", "Buffer",
    "Header", "scan", "check_one", "stamp_one", "set_base_offset", "find_batch", "iter_batches", "decode_records",
    "encode_batch", "encode_values_batch", "CREATE_TIME", "LOG_APPEND_TIME", "NO_TIMESTAMP", "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH", "NO_SEQUENCE", "NO_PARTITION_LEADER_EPOCH", "BATCH_OVERHEAD", "LOG_OVERHEAD",
    "ATTR_COMPRESSION_MASK", "ATTR_LOG_APPEND_TIME", "ATTR_TRANSACTIONAL", "ATTR_CONTROL", "ATTR_DELETE_HORIZON",
    # the oracle (tests and tools): pylog.record.oracle
    "py_crc32c", "py_varint", "py_read_varint", "py_record_bytes", "py_encode_batch", "py_decode_batch",
    "py_encode_legacy", "batches_of",
]
