"""Interoperability with other Kafka implementations' bytes.

* every batch pylog writes is read by kafka-python's independent reader
  (``kafka.record``: its own varint, CRC-32C and gzip code) to the same
  offsets, keys, values, headers and timestamps;
* batches and legacy message sets built by kafka-python's builders are read
  by pylog's ``scan`` / ``RecordBatch.records()``;
* real broker bytes decode: kafka-python's captured v0/v1/v2 vectors and
  segmentio/kafka-go's captured Fetch responses (tests/data/kafka-go).
"""
from __future__ import annotations

import pathlib
import struct
from typing import List, Tuple

import hypothesis.strategies as st
import pytest
from hypothesis import given
from kafka.record import MemoryRecords, MemoryRecordsBuilder
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from pylog import _native
from pylog.record import LOG_APPEND_TIME, Record, RecordBatch, encode_batch, iter_batches, scan

DATA = pathlib.Path(__file__).resolve().parent.parent / "data"

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def pylog_records(data) -> List[Record]:
    """Every record of every batch in ``data``; the whole buffer must be valid."""
    found = scan(data)
    assert found.status == _native.OK, found.reason
    assert found.valid_bytes == len(data)
    out: List[Record] = []
    for batch in iter_batches(data):
        out.extend(batch.records())
    return out


def kafka_python_records(data) -> List[Tuple]:
    """(offset, key, value, headers, timestamp) from kafka-python's reader, CRCs checked."""
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            assert r.validate_crc()
            out.append((r.offset, r.key, r.value, list(r.headers), r.timestamp))
    return out


def as_tuples(records: List[Record]) -> List[Tuple]:
    return [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records]


# ---------------------------------------------------------------------------
# pylog writes, kafka-python reads
# ---------------------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=100)
records_strategy = st.lists(
    st.builds(
        Record,
        value=maybe_bytes,
        key=maybe_bytes,
        headers=st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
        timestamp=st.integers(1_500_000_000_000, 1_800_000_000_000),
    ),
    min_size=1,
    max_size=20,
)


@pytest.mark.parametrize("compression", [None, "gzip"])
@given(batches=st.lists(records_strategy, min_size=1, max_size=4), base=st.integers(0, 2**40))
def test_kafka_python_reads_what_pylog_writes(compression, batches, base):
    log = bytearray()
    expected = []
    offset = base
    for recs in batches:
        log += encode_batch(recs, now_ms=0, base_offset=offset, compression=compression,
                            partition_leader_epoch=3)
        for i, r in enumerate(recs):
            expected.append((offset + i, r.key, r.value, list(r.headers), r.timestamp))
        offset += len(recs)
    assert kafka_python_records(log) == expected
    assert as_tuples(pylog_records(log)) == expected


def test_kafka_python_sees_pylog_batch_header_fields():
    data = encode_batch(
        [Record(b"v" * 500, key=b"k", timestamp=1_700_000_000_000 + i) for i in range(5)],
        now_ms=0, base_offset=1234, partition_leader_epoch=9, compression="gzip",
        producer_id=77, producer_epoch=3, base_sequence=41, transactional=True,
    )
    b = DefaultRecordBatch(bytes(data))
    assert b.validate_crc()
    assert (b.base_offset, b.last_offset, b.leader_epoch, b.magic) == (1234, 1238, 9, 2)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 3, 41)
    assert b.is_transactional and not b.is_control_batch
    assert b.compression_type == 1
    assert (b.first_timestamp, b.max_timestamp) == (1_700_000_000_000, 1_700_000_000_004)
    assert b.records_count == 5
    assert [r.offset for r in b] == list(range(1234, 1239))


def test_kafka_python_reads_plain_values_fast_path():
    values = [b"a" * n for n in range(50)]
    data = encode_batch(values, now_ms=1_650_000_000_000, base_offset=10)
    assert kafka_python_records(data) == [
        (10 + i, None, v, [], 1_650_000_000_000) for i, v in enumerate(values)
    ]


# ---------------------------------------------------------------------------
# kafka-python writes, pylog reads
# ---------------------------------------------------------------------------


def kafka_python_batch(records, compression_type=0, producer=(-1, -1, -1), transactional=False):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression_type, is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 24,
    )
    for i, r in enumerate(records):
        assert builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    return bytes(builder.build())


@pytest.mark.parametrize("compression_type", [0, 1])
@given(records=records_strategy)
def test_pylog_reads_kafka_python_batches(compression_type, records):
    data = kafka_python_batch(records, compression_type)
    found = scan(data)
    assert found.status == _native.OK and len(found.batches) == 1
    batch = RecordBatch(found.batches[0], memoryview(data))
    # kafka-python sends uncompressed when compression does not pay off
    assert batch.compression == DefaultRecordBatch(data).compression_type
    got = batch.records()
    assert as_tuples(got) == [(i, r.key, r.value, list(r.headers), r.timestamp) for i, r in enumerate(records)]
    assert batch.max_timestamp == max(r.timestamp for r in records)


def test_pylog_reads_kafka_python_gzip_and_producer_fields():
    records = [Record(b"payload-%d " % i * 20, key=b"key-%d" % i, headers=[("trace", b"t%d" % i)],
                      timestamp=1_600_000_000_000 + 7 * i) for i in range(100)]
    data = kafka_python_batch(records, 1, producer=(5000, 2, 900), transactional=True)
    batch = RecordBatch(scan(data).batches[0], memoryview(data))
    assert batch.compression == 1  # really compressed
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5000, 2, 900)
    assert batch.is_transactional
    assert len(data) < sum(len(r.value) for r in records)
    assert as_tuples(batch.records()) == [
        (i, r.key, r.value, list(r.headers), r.timestamp) for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression_type", [0, 1])
def test_pylog_reads_kafka_python_legacy_message_sets(magic, compression_type):
    builder = MemoryRecordsBuilder(magic=magic, compression_type=compression_type, batch_size=1 << 20, offset=0)
    items = [(1_550_000_000_000 + i, b"k%d" % i if i % 3 else None, b"value %d " % i * 30 if i % 5 else None)
             for i in range(40)]
    for ts, k, v in items:
        assert builder.append(timestamp=ts, key=k, value=v) is not None
    builder.close()
    data = bytes(builder.buffer())
    got = pylog_records(data)
    want_ts = [ts if magic == 1 else -1 for ts, _, _ in items]
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in got] == [
        (i, k, v, want_ts[i], ()) for i, (ts, k, v) in enumerate(items)
    ]
    assert len(scan(data).batches) == (1 if compression_type else len(items))


def _restamp_wrapper(data: bytes, offset: int) -> bytes:
    """Set a single legacy wrapper's offset, as a broker assigns it (not under the CRC)."""
    return struct.pack(">q", offset) + data[8:]


def test_v1_compressed_wrapper_offsets_are_relative():
    # The broker sets a v1 wrapper's offset to the absolute offset of its last
    # inner message; the inner offsets are relative (0..n-1).
    builder = MemoryRecordsBuilder(magic=1, compression_type=1, batch_size=1 << 20, offset=0)
    for i in range(6):
        builder.append(timestamp=1000 + i, key=None, value=b"m%d" % i)
    builder.close()
    data = _restamp_wrapper(bytes(builder.buffer()), 105)
    got = pylog_records(data)
    assert [r.offset for r in got] == list(range(100, 106))
    assert [t[0] for t in kafka_python_records(data)] == list(range(100, 106))


def test_v1_log_append_time_wrapper_overrides_inner_timestamps():
    builder = MemoryRecordsBuilder(magic=1, compression_type=1, batch_size=1 << 20, offset=0)
    for i in range(3):
        builder.append(timestamp=1000 + i, key=None, value=b"m%d" % i)
    builder.close()
    data = bytearray(_restamp_wrapper(bytes(builder.buffer()), 2))
    # wrapper: attributes |= LogAppendTime (bit 3), timestamp = 99999; then re-CRC
    data[17] |= 0x08
    data[18:26] = struct.pack(">q", 99999)
    data[12:16] = struct.pack(">I", _native.crc32(bytes(data[16:])))
    got = pylog_records(bytes(data))
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in got] == [(i, 99999, LOG_APPEND_TIME) for i in range(3)]
    assert [r.timestamp for r in MemoryRecords(bytes(data)).next_batch()] == [99999] * 3


# ---------------------------------------------------------------------------
# Real broker bytes: kafka-python's test vectors
# ---------------------------------------------------------------------------
# Byte literals copied from dpkp/kafka-python test/record/test_records.py
# (Apache 2.0); its comments say v2/v1 are "real live data from Kafka 11
# broker" and v0 "real live data from Kafka 10 broker".

KP_V2 = [
    # First Batch value == "123"
    b'\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00;\x00\x00\x00\x01\x02\x03'
    b'\x18\xa2p\x00\x00\x00\x00\x00\x00\x00\x00\x01]\xff{\x06<\x00\x00\x01]'
    b'\xff{\x06<\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00'
    b'\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00',
    # Second Batch value = "" and value = "". 2 records
    b'\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00@\x00\x00\x00\x02\x02\xc8'
    b'\\\xbd#\x00\x00\x00\x00\x00\x01\x00\x00\x01]\xff|\xddl\x00\x00\x01]\xff'
    b'|\xde\x14\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00'
    b'\x00\x00\x02\x0c\x00\x00\x00\x01\x00\x00\x0e\x00\xd0\x02\x02\x01\x00'
    b'\x00',
    # Third batch value = "123"
    b'\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00;\x00\x00\x00\x02\x02.\x0b'
    b'\x85\xb7\x00\x00\x00\x00\x00\x00\x00\x00\x01]\xff|\xe7\x9d\x00\x00\x01]'
    b'\xff|\xe7\x9d\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff'
    b'\x00\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00',
    # Fourth batch value = "hdr" with header hkey=hval (a later capture: offset 0 again)
    b'\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00E\x00\x00\x00\x00\x02\\'
    b'\xd8\xefR\x00\x00\x00\x00\x00\x00\x00\x00\x01e\x85\xb6\xf3\xc1\x00\x00'
    b'\x01e\x85\xb6\xf3\xc1\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff'
    b'\xff\xff\x00\x00\x00\x01&\x00\x00\x00\x01\x06hdr\x02\x08hkey\x08hval',
]

KP_V1 = [
    # First Message value == "123"
    b'\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x19G\x86(\xc2\x01\x00\x00'
    b'\x00\x01^\x18g\xab\xae\xff\xff\xff\xff\x00\x00\x00\x03123',
    # Second Message value == ""
    b'\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x16\xef\x98\xc9 \x01\x00'
    b'\x00\x00\x01^\x18g\xaf\xc0\xff\xff\xff\xff\x00\x00\x00\x00',
    # Third Message value == ""
    b'\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x16_\xaf\xfb^\x01\x00\x00'
    b'\x00\x01^\x18g\xb0r\xff\xff\xff\xff\x00\x00\x00\x00',
    # Fourth Message value = "123"
    b'\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x19\xa8\x12W \x01\x00\x00'
    b'\x00\x01^\x18g\xb8\x03\xff\xff\xff\xff\x00\x00\x00\x03123',
]

KP_V0 = [
    # First Message value == "123"
    b'\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x11\xfe\xb0\x1d\xbf\x00'
    b'\x00\xff\xff\xff\xff\x00\x00\x00\x03123',
    # Second Message value == ""
    b'\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x0eyWH\xe0\x00\x00\xff'
    b'\xff\xff\xff\x00\x00\x00\x00',
    # Third Message value == ""
    b'\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x0eyWH\xe0\x00\x00\xff'
    b'\xff\xff\xff\x00\x00\x00\x00',
    # Fourth Message value = "123"
    b'\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x11\xfe\xb0\x1d\xbf\x00'
    b'\x00\xff\xff\xff\xff\x00\x00\x00\x03123',
]

# Single-record control batch (abort). Synthetic, not broker bytes: its
# stored CRC (0x6597ffd0) does not match its contents (research notes §6).
KP_CONTROL_V2 = (
    b'\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00R\x00\x00\x00\x00'
    b'\x02e\x97\xff\xd0\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00'
    b'\x98\x96\x7f\x00\x00\x00\x00\x00\x98\x96'
    b'\x7f\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff'
    b'\x00\x00\x00\x01@\x00\x00\x00\x08\x00\x00\x00\x00,opaque-control-message\x00'
)


def test_kafka_python_v2_broker_vectors():
    first3 = b"".join(KP_V2[:3])
    got = pylog_records(first3)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_type) for r in got] == [
        (0, None, b"123", (), 0), (1, None, b"", (), 0), (2, None, b"", (), 0), (3, None, b"123", (), 0),
    ]
    assert got[0].timestamp == 1503229838908  # as kafka-python's own test asserts
    # second batch: second record's timestampDelta is varlong 0xd0 0x02 = 168 ms
    assert got[2].timestamp - got[1].timestamp == 168
    infos = scan(first3).batches
    assert [b.partition_leader_epoch for b in infos] == [1, 2, 2]
    assert infos[0].crc == 0x0318A270
    (hdr,) = pylog_records(KP_V2[3])
    assert (hdr.offset, hdr.value, hdr.headers) == (0, b"hdr", (("hkey", b"hval"),))
    assert scan(KP_V2[3]).batches[0].crc == 0x5CD8EF52
    # each batch decodes the same through kafka-python
    assert as_tuples(got) == kafka_python_records(first3)


def test_kafka_python_v2_vectors_offset_order_and_trailing_bytes():
    everything = b"".join(KP_V2)
    assert len(everything) == 299  # kafka-python: valid_bytes() == 299
    # the fourth capture restarts at offset 0: a log must not go backwards
    result = scan(everything)
    assert len(result.batches) == 3 and result.status == _native.ECORRUPT
    assert result.valid_bytes == len(b"".join(KP_V2[:3]))
    # 4 stray bytes after complete batches are a torn tail, not corruption
    result = scan(b"".join(KP_V2[:3]) + b"\x00" * 4)
    assert len(result.batches) == 3 and result.status == _native.ETRUNCATED


@pytest.mark.parametrize("magic,vectors", [(1, KP_V1), (0, KP_V0)])
def test_kafka_python_legacy_broker_vectors(magic, vectors):
    data = b"".join(vectors)
    got = pylog_records(data)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (0, None, b"123", ()), (1, None, b"", ()), (2, None, b"", ()), (3, None, b"123", ()),
    ]
    infos = scan(data).batches
    assert {b.magic for b in infos} == {magic}
    if magic == 1:
        assert got[0].timestamp == 1503648000942
        assert infos[0].crc == 0x478628C2  # 1199974594, as kafka-python asserts
    else:
        assert [r.timestamp for r in got] == [-1] * 4  # v0 has no timestamp
        assert infos[0].crc == 0xFEB01DBF  # -22012481 & 0xffffffff
    result = scan(data + b"\x00" * 4)
    assert (len(result.batches), result.valid_bytes, result.status) == (4, len(data), _native.ETRUNCATED)


def test_kafka_python_synthetic_control_batch_fails_its_crc():
    result = scan(KP_CONTROL_V2)
    assert result.batches == [] and result.status == _native.ECRC
    # framing alone is fine: it is a control batch with one record
    (info,) = scan(KP_CONTROL_V2, verify_crc=False).batches
    batch = RecordBatch(info, memoryview(KP_CONTROL_V2))
    assert batch.is_control and not batch.is_transactional
    (r,) = batch.records()
    assert r.key == b"\x00\x00\x00\x00"  # version 0, type 0 = ABORT
    assert r.value == b"opaque-control-message"


# ---------------------------------------------------------------------------
# Real broker bytes: segmentio/kafka-go Fetch responses
# ---------------------------------------------------------------------------


def fetch_response_records(name: str) -> Tuple[bytes, int]:
    """(record set, high watermark) of a one-topic, one-partition Fetch response (v7-v10)."""
    raw = bytes.fromhex((DATA / "kafka-go" / f"{name}.hex").read_text().strip())
    size, _corr, _throttle, err, _session, ntopics = struct.unpack_from(">iiihii", raw, 0)
    assert size + 4 == len(raw) and err == 0 and ntopics == 1
    pos = 22
    (tlen,) = struct.unpack_from(">h", raw, pos)
    pos += 2 + tlen
    nparts, _part, perr, hw, _lso, _start, naborted = struct.unpack_from(">iihqqqi", raw, pos)
    assert nparts == 1 and perr == 0 and naborted == -1
    pos += 38
    (rsize,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    assert pos + rsize == len(raw)
    return raw[pos:], hw


GREEK = {"a": b"alpha", "b": b"beta", "c": b"gamma", "d": b"delta", "e": b"epsilon", "f": b"zeta",
         "g": b"eta", "h": b"theta"}

# expected filler letters per fixture, from kafka-go's message_test.go
KAFKA_GO = {
    "v1-v1": "abcd",
    "v1c-v1c": "abcd",
    "v1c-v1-v1c": "abcdef",
    "v2-v2": "abcd",
    "v2c-v2c": "abcd",
    "v2c-v2-v2c": "abcdef",
    "v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc": "ababcdcdefefghghghgh",
}


@pytest.mark.parametrize("name", sorted(KAFKA_GO))
def test_kafka_go_broker_fetch_responses(name):
    records, hw = fetch_response_records(name)
    got = pylog_records(records)  # every CRC verified, whole record set consumed
    letters = KAFKA_GO[name]
    assert [r.offset for r in got] == list(range(len(letters))) == list(range(hw))
    assert [(r.key, r.value) for r in got] == [
        (GREEK[c], b'{"count":0,"filler":"%s"}' % (c.encode() * 10)) for c in letters
    ]
    assert all(r.headers == () and r.timestamp_type == 0 for r in got)
    assert all(1_633_000_000_000 < r.timestamp < 1_634_000_000_000 for r in got)
    # kafka-python's reader agrees on every field
    assert as_tuples(got) == kafka_python_records(records)


def test_kafka_go_v2_batch_header_matches_research_notes():
    records, _ = fetch_response_records("v2-v2")
    first, second = scan(records).batches
    assert (first.size, first.crc, first.attributes, first.records_count) == (150, 0x3978FC3B, 0, 2)
    assert (first.base_timestamp, first.max_timestamp) == (1633414495929, 1633414495954)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (-1, -1, -1)
    assert (second.base_offset, second.crc) == (2, 0xFA7514AB)
    compressed, _ = fetch_response_records("v2c-v2c")
    assert [b.attributes & 7 for b in scan(compressed).batches] == [1, 1]
    assert compressed[61:64] == b"\x1f\x8b\x08"  # a gzip member follows the header


# ---------------------------------------------------------------------------
# Kafka's layout computed independently: an end-transaction marker
# ---------------------------------------------------------------------------


def test_commit_marker_bytes_match_kafka_layout():
    # Research notes §1.6: a COMMIT marker (control batch, attributes 0x30)
    # with baseOffset 5, epoch 0, producerId 1000, producerEpoch 0,
    # coordinatorEpoch 0 and timestamp 1700000000000 is these 78 bytes,
    # computed by following Kafka's EndTransactionMarker / DefaultRecordBatch.
    expected = bytes.fromhex(
        "0000000000000005" "00000042" "00000000" "02" "a1ac499f" "0030" "00000000"
        "0000018bcfe56800" "0000018bcfe56800" "00000000000003e8" "0000" "ffffffff" "00000001"
        "20" "00" "00" "00" "08" "00000001" "0c" "0000" "00000000" "00"
    )
    marker = Record(value=b"\x00\x00" + b"\x00\x00\x00\x00", key=b"\x00\x00" + b"\x00\x01",
                    timestamp=1_700_000_000_000)
    data = encode_batch([marker], now_ms=0, base_offset=5, partition_leader_epoch=0, producer_id=1000,
                        producer_epoch=0, transactional=True, control=True)
    assert bytes(data) == expected
    b = DefaultRecordBatch(expected)
    assert b.validate_crc() and b.is_control_batch and b.is_transactional
    (r,) = list(b)
    assert r.commit and r.version == 0
