"""Control record key/value codec (pylog.storage.control_record), against Kafka's layout.

The 78-byte COMMIT marker batch is the one worked out from Kafka's
``MemoryRecords.writeEndTransactionalMarker`` layout in the research notes
(kafka-format-and-replication.md section 1.6), not produced by our encoder.
"""
from __future__ import annotations

import pytest

from pylog.errors import CorruptRecordError, InvalidRequestError
from pylog.storage.control_record import (
    ControlRecordType,
    EndTransactionMarker,
    encode_control_key,
    parse_control_type,
)
from pylog.record import Record, encode_batch

MARKER_BATCH = bytes.fromhex(
    "0000000000000005" "00000042" "00000000" "02" "a1ac499f" "0030" "00000000"
    "0000018bcfe56800" "0000018bcfe56800" "00000000000003e8" "0000" "ffffffff" "00000001"
    "20" "00" "00" "00" "08" "00000001" "0c" "0000" "00000000" "00")


def test_key_and_value_golden() -> None:
    assert encode_control_key(ControlRecordType.ABORT) == bytes.fromhex("00000000")
    assert encode_control_key(ControlRecordType.COMMIT) == bytes.fromhex("00000001")
    m = EndTransactionMarker(ControlRecordType.ABORT, 0x01020304)
    assert m.key() == bytes.fromhex("00000000") and m.value() == bytes.fromhex("000001020304")
    assert EndTransactionMarker.decode(m.key(), m.value()) == m and not m.committed


def test_whole_commit_marker_batch_golden() -> None:
    m = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    b = encode_batch([Record(value=m.value(), key=m.key(), timestamp=1700000000000)], now_ms=0, base_offset=5,
                     partition_leader_epoch=0, producer_id=1000, producer_epoch=0, transactional=True, control=True)
    assert bytes(b) == MARKER_BATCH
    assert EndTransactionMarker.decode(MARKER_BATCH[-12:-8], MARKER_BATCH[-7:-1]).committed


def test_types_versions_and_unknown() -> None:
    assert [t.value for t in ControlRecordType] == [0, 1, 2, 3, 4, 5, 6, -1]
    assert parse_control_type(bytes.fromhex("00000006")) == ControlRecordType.KRAFT_VOTERS
    assert parse_control_type(bytes.fromhex("00000063")) == ControlRecordType.UNKNOWN
    assert parse_control_type(bytes.fromhex("0003000100ff")) == ControlRecordType.COMMIT  # newer version: read as 0
    assert EndTransactionMarker.decode(bytes.fromhex("00000001"), bytes.fromhex("0002000000070000")).coordinator_epoch == 7
    with pytest.raises(InvalidRequestError):
        encode_control_key(ControlRecordType.UNKNOWN)
    with pytest.raises(InvalidRequestError):
        EndTransactionMarker(ControlRecordType.LEADER_CHANGE, 0)


@pytest.mark.parametrize("key,value,what", [
    (None, b"\x00" * 6, "key at offset 42 is null"),
    (b"\x00\x00\x01", b"\x00" * 6, "3 bytes, needs at least 4"),
    (bytes.fromhex("ffff0001"), b"\x00" * 6, "version -1"),
    (bytes.fromhex("00000002"), b"\x00" * 6, "LEADER_CHANGE is not a transaction marker"),
    (bytes.fromhex("00000001"), None, "value at offset 42 is null"),
    (bytes.fromhex("00000001"), b"\x00\x00\x00\x00\x00", "5 bytes"),
    (bytes.fromhex("00000001"), bytes.fromhex("800000000000"), "version -32768"),
])
def test_damaged_markers_name_file_position_and_offset(key: bytes, value: bytes, what: str) -> None:
    with pytest.raises(CorruptRecordError, match=what) as ei:
        EndTransactionMarker.decode(key, value, path="/d/t-0/00000000000000000000.log", position=128, offset=42)
    assert ei.value.path == "/d/t-0/00000000000000000000.log" and ei.value.position == 128
    assert "byte position 128" in str(ei.value)
