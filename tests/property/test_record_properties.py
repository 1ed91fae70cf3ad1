"""Property tests: the C record code against the pure-Python oracle.

* encode: C ``encode_batch`` == ``py_encode_batch`` byte for byte;
* decode: ``RecordBatch.records()`` == ``py_decode_batch``, for well-formed
  batches and for CRC-valid batches whose records were mangled (both reject,
  or both return the same records; the C side only ever raises
  CorruptRecordError);
* every codec round-trips;
* index lookup == bisect over a sorted list, across the warm-section edge;
* scan on random or damaged bytes never crashes and returns only batches
  that really are valid; a torn tail yields exactly the complete batches.

Run more examples with HYPOTHESIS_PROFILE=ci or exhaustive (tests/conftest.py).
"""
from __future__ import annotations

import bisect
import random
import struct
import zlib
from typing import List, Tuple

import hypothesis.strategies as st
import pytest
from hypothesis import event, given

from pylog import _native
from pylog._native import ffi, lib
from pylog.errors import CorruptRecordError
from pylog.record import compression as codecs
from pylog.record import (
    LOG_APPEND_TIME,
    Record,
    RecordBatch,
    encode_batch,
    iter_batches,
    py_crc32c,
    py_decode_batch,
    py_encode_batch,
    py_encode_legacy,
    scan,
)

INT64 = (-(2**63), 2**63 - 1)
INT32 = (-(2**31), 2**31 - 1)

# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=200)
header = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40))
headers = st.lists(header, max_size=4).map(tuple)


@st.composite
def record_lists(draw, min_size=1, max_size=30):
    """Records with explicit timestamps; deltas from the first may be negative."""
    n = draw(st.integers(min_size, max_size))
    if draw(st.booleans()):
        base = draw(st.integers(0, 2**45))  # realistic epoch milliseconds
        ts = st.integers(max(0, base - 10**6), base + 10**6)
    else:
        ts = st.integers(-(2**62), 2**62 - 1)  # every delta from the first still fits in int64
    return [
        Record(draw(maybe_bytes), draw(maybe_bytes), draw(headers), draw(ts)) for _ in range(n)
    ]


batch_header = st.fixed_dictionaries(
    {
        "base_offset": st.integers(0, 2**62),
        "partition_leader_epoch": st.integers(*INT32),
        "producer_id": st.integers(*INT64),
        "producer_epoch": st.integers(-(2**15), 2**15 - 1),
        "base_sequence": st.integers(*INT32),
        "transactional": st.booleans(),
        "control": st.booleans(),
    }
)


def _attributes(h: dict) -> int:
    return (0x10 if h["transactional"] else 0) | (0x20 if h["control"] else 0)


def _py_kwargs(h: dict) -> dict:
    return {
        "base_offset": h["base_offset"],
        "partition_leader_epoch": h["partition_leader_epoch"],
        "producer_id": h["producer_id"],
        "producer_epoch": h["producer_epoch"],
        "base_sequence": h["base_sequence"],
        "attributes": _attributes(h),
    }


def only_batch(data) -> RecordBatch:
    found = scan(data)
    assert found.status == _native.OK and len(found.batches) == 1, found
    return RecordBatch(found.batches[0], memoryview(data))


def expected_records(records: List[Record], base_offset: int) -> List[Record]:
    return [
        Record(r.value, r.key, tuple(r.headers), r.timestamp, base_offset + i, 0) for i, r in enumerate(records)
    ]


# ---------------------------------------------------------------------------
# encode / decode against the oracle
# ---------------------------------------------------------------------------


@given(records=record_lists(), h=batch_header)
def test_c_encode_equals_python_oracle(records, h):
    c = encode_batch(records, now_ms=0, **h)
    py = py_encode_batch(records, **_py_kwargs(h))
    assert bytes(c) == py


@pytest.mark.parametrize(
    "stamps",
    [[-(2**62), 2**62], [2**62, -(2**62) - 1], [0, 2**63], [-(2**63) - 1], [2**63 - 1, -2]],
)
def test_encode_refuses_timestamps_outside_int64_deltas(stamps):
    from pylog.errors import InvalidRecordError

    with pytest.raises(InvalidRecordError):
        encode_batch([Record(b"v", timestamp=t) for t in stamps], now_ms=0)


def test_encode_accepts_the_extreme_int64_deltas():
    for stamps in ([-(2**62), 2**62 - 1], [2**62 - 1, -(2**62)], [-(2**63), -1], [2**63 - 1], [2**63 - 1, -1]):
        recs = [Record(b"v", timestamp=t) for t in stamps]
        data = encode_batch(recs, now_ms=0)
        assert bytes(data) == py_encode_batch(recs)
        assert [r.timestamp for r in only_batch(data).records()] == stamps


@given(values=st.lists(st.binary(max_size=100), min_size=1, max_size=50), now=st.integers(0, 2**50))
def test_c_encode_plain_values_equals_oracle(values, now):
    # the all-bytes fast path: no keys, no headers, every timestamp = now_ms
    c = encode_batch(values, now_ms=now, base_offset=7)
    assert bytes(c) == py_encode_batch([Record(v, timestamp=now) for v in values], base_offset=7)


@given(values=st.lists(st.binary(max_size=300), min_size=1, max_size=60), now=st.integers(*INT64),
       pid=st.integers(-1, 2**63 - 1), epoch=st.integers(-1, 2**15 - 1), seq=st.integers(-1, 2**31 - 1),
       transactional=st.booleans(), hint=st.sampled_from([True, None]))
def test_producer_fast_path_equals_oracle(values, now, pid, epoch, seq, transactional, hint):
    # base offset 0 and no leader epoch: the scalar C entry point (plg_batch_encode_values), into a
    # buffer sized by an upper bound and cut to size; whatever the hint, the bytes are the oracle's
    c = encode_batch(values, now_ms=now, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     transactional=transactional, plain=hint)
    py = py_encode_batch([Record(v, timestamp=now) for v in values], producer_id=pid, producer_epoch=epoch,
                         base_sequence=seq, attributes=0x10 if transactional else 0)
    assert bytes(c) == py
    assert [r.value for r in only_batch(c).records()] == values


def test_producer_fast_path_refuses_what_the_general_path_refuses():
    from pylog.errors import InvalidRecordError

    with pytest.raises(InvalidRecordError):
        encode_batch([], now_ms=0, plain=True)
    # the C entry point checks its own inputs too: no records, a negative (null) length
    used = ffi.new("uint64_t *")
    out = bytearray(100)
    lens = ffi.new("int32_t[]", [-1])
    assert lib.plg_batch_encode_values(b"", lens, 1, 0, -1, -1, -1, 0, ffi.from_buffer(out), 100, used) == lib.PLG_EINVAL
    assert lib.plg_batch_encode_values(b"", lens, 0, 0, -1, -1, -1, 0, ffi.from_buffer(out), 100, used) == lib.PLG_EINVAL
    ok = ffi.new("int32_t[]", [3])
    assert lib.plg_batch_encode_values(b"abc", ok, 1, 0, -1, -1, -1, 0, ffi.from_buffer(out), 10, used) == lib.PLG_EOVERFLOW


@given(records=record_lists(), h=batch_header)
def test_c_decode_equals_python_oracle(records, h):
    data = py_encode_batch(records, **_py_kwargs(h))
    header, expected = py_decode_batch(data)
    batch = only_batch(data)
    assert batch.records() == expected
    assert expected == expected_records(records, h["base_offset"])
    assert (batch.base_offset, batch.last_offset) == (h["base_offset"], h["base_offset"] + len(records) - 1)
    assert batch.base_timestamp == header["base_timestamp"]
    assert batch.max_timestamp == header["max_timestamp"]
    assert batch.partition_leader_epoch == h["partition_leader_epoch"]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        h["producer_id"], h["producer_epoch"], h["base_sequence"],
    )
    assert batch.is_transactional == h["transactional"] and batch.is_control == h["control"]
    assert batch.records_count == len(records)
    values = batch.values()
    assert [None if v is None else bytes(v) for v in values] == [r.value for r in records]


@given(records=record_lists(max_size=10))
def test_log_append_time_batches_use_max_timestamp(records):
    data = py_encode_batch(records, attributes=0x08)
    got = only_batch(data).records()
    max_ts = max(r.timestamp for r in records)
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(max_ts, LOG_APPEND_TIME)] * len(records)
    assert [r.value for r in got] == [r.value for r in records]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@given(records=record_lists(max_size=20), base=st.integers(0, 2**40))
def test_every_codec_round_trips(codec, records, base):
    data = encode_batch(records, now_ms=0, base_offset=base, compression=codec)
    batch = only_batch(data)
    assert batch.compression == codecs.codec_id(codec)
    assert batch.records() == expected_records(records, base)
    if codec != "none":  # the compressed section really is compressed data of the plain one
        plain = encode_batch(records, now_ms=0, base_offset=base)
        assert codecs.decompress(batch.compression, bytes(data[61:])) == bytes(plain[61:])


@given(records=record_lists(max_size=8), codec=st.sampled_from([1, 2, 3, 4]), data=st.data())
def test_damaged_compressed_sections_raise_only_corrupt_record_error(records, codec, data):
    batch = bytearray(encode_batch(records, now_ms=0, compression=codec))
    body = batch[61:]
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] ^= data.draw(st.integers(1, 255))
    else:
        body = body[: data.draw(st.integers(0, len(body) - 1))]
    mangled = batch[:61] + body
    lib.plg_batch_seal(ffi.from_buffer(mangled), len(mangled))  # CRC-valid again
    try:
        got = only_batch(mangled).records()
    except CorruptRecordError:
        return
    assert len(got) == len(records)  # decoded records must still be complete ones


# ---------------------------------------------------------------------------
# malformed records inside a CRC-valid batch
# ---------------------------------------------------------------------------


def _reseal(data: bytearray) -> bytearray:
    assert lib.plg_batch_seal(ffi.from_buffer(data), len(data)) == lib.PLG_OK
    return data


def _mangle(draw, body: bytearray) -> bytearray:
    kind = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "varint"]))
    if kind == "truncate":
        return body[: draw(st.integers(0, max(0, len(body) - 1)))]
    if not body:
        return bytearray(draw(st.binary(min_size=1, max_size=20)))
    i = draw(st.integers(0, len(body) - 1))
    if kind == "flip":
        body[i] ^= 1 << draw(st.integers(0, 7))
    elif kind == "set":
        body[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0x7E, 0x03]))
    elif kind == "insert":
        body[i:i] = draw(st.binary(min_size=1, max_size=6))
    elif kind == "delete":
        del body[i : i + draw(st.integers(1, 6))]
    else:  # overwrite with an extreme varint (huge, negative or overlong)
        v = draw(st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f", b"\x80" * 10 + b"\x00",
                                  b"\x03", b"\x01", b"\xff" * 9 + b"\x01", b"\xff\xff\xff\xff\x1f"]))
        body[i : i + len(v)] = v
    return body


@given(records=record_lists(max_size=8), data=st.data())
def test_malformed_records_match_oracle_and_never_crash(records, data):
    batch = bytearray(py_encode_batch(records))
    body = batch[61:]
    for _ in range(data.draw(st.integers(1, 3))):
        body = _mangle(data.draw, body)
    count = len(records)
    if data.draw(st.booleans()):
        count = data.draw(st.sampled_from([0, count + 1, max(0, count - 1), 2**31 - 1, 10**6]))
    mangled = batch[:57] + struct.pack(">i", count) + body
    _reseal(mangled)
    try:
        expected = py_decode_batch(bytes(mangled))[1]
    except ValueError:
        expected = None
    event("oracle rejects" if expected is None else "oracle accepts")
    found = scan(mangled)
    if found.status != _native.OK:
        # the only header check that looks at records: recordsCount too large for the bytes
        assert found.status == _native.ECORRUPT and expected is None
        return
    batch_view = RecordBatch(found.batches[0], memoryview(mangled))
    if expected is None:
        with pytest.raises(CorruptRecordError):
            batch_view.records()
    else:
        assert batch_view.records() == expected


@given(count=st.integers(0, 2**31 - 1), body=st.binary(max_size=64))
def test_decode_records_on_arbitrary_bytes_is_total(count, body):
    from pylog.record import decode_records

    try:
        got = decode_records(body, count, 0, 0)
    except CorruptRecordError:
        return
    assert len(got) == count


# ---------------------------------------------------------------------------
# index lookup == bisect
# ---------------------------------------------------------------------------


@st.composite
def sorted_unique(draw, lo, hi, max_size):
    """A sorted list of distinct ints; sizes often straddle the warm-section edge."""
    n = draw(st.integers(0, max_size))
    if max_size > 1100 and draw(st.booleans()):
        n = draw(st.integers(1020, 1100))  # around 1024 offset / 682 time entries and beyond
    elif draw(st.booleans()):
        n = draw(st.integers(675, 690))
    start = draw(st.integers(lo, hi - 4 * max_size - 10))
    rng = random.Random(draw(st.integers(0, 2**32)))  # gaps from a drawn seed: cheap for big lists
    out, v = [], start
    for _ in range(n):
        v += rng.randint(1, 4)
        out.append(v)
    return out


@given(rels=sorted_unique(0, 2**31 - 1, 2200), data=st.data())
def test_offset_index_lookup_equals_bisect(rels, data):
    entries = [(r, i * 100 + 7) for i, r in enumerate(rels)]
    idx = b"".join(struct.pack(">ii", r, p) for r, p in entries)
    targets = data.draw(st.lists(st.integers(0, 2**31 - 1), max_size=20))
    if rels:
        n = len(rels)
        b = max(0, n - 1 - 1024)  # Kafka's first "hot" entry
        for i in {0, n - 1, b - 1, b, b + 1} & set(range(n)):
            targets += [rels[i] - 1, rels[i], rels[i] + 1]
        targets += data.draw(st.lists(st.integers(rels[0] - 2, rels[-1] + 2), max_size=20))
    rel_out, pos_out = ffi.new("int32_t *"), ffi.new("int32_t *")
    for t in targets:
        if not 0 <= t <= 2**31 - 1:
            continue
        assert lib.plg_offset_index_lookup(idx, len(idx), t, rel_out, pos_out) == lib.PLG_OK
        i = bisect.bisect_right(rels, t) - 1
        assert (rel_out[0], pos_out[0]) == (entries[i] if i >= 0 else (0, 0)), t


@given(stamps=sorted_unique(-(2**62), 2**62, 1500), data=st.data())
def test_time_index_lookup_equals_bisect(stamps, data):
    entries = [(t, i) for i, t in enumerate(stamps)]
    idx = b"".join(struct.pack(">qi", t, r) for t, r in entries)
    targets = data.draw(st.lists(st.integers(*INT64), max_size=20))
    if stamps:
        n = len(stamps)
        b = max(0, n - 1 - 682)
        for i in {0, n - 1, b - 1, b, b + 1} & set(range(n)):
            targets += [stamps[i] - 1, stamps[i], stamps[i] + 1]
        targets += data.draw(st.lists(st.integers(stamps[0] - 2, stamps[-1] + 2), max_size=20))
    ts_out, rel_out = ffi.new("int64_t *"), ffi.new("int32_t *")
    for t in targets:
        assert lib.plg_time_index_lookup(idx, len(idx), t, ts_out, rel_out) == lib.PLG_OK
        i = bisect.bisect_right(stamps, t) - 1
        assert (ts_out[0], rel_out[0]) == (entries[i] if i >= 0 else (-1, 0)), t


@given(blob=st.binary(max_size=400), target=st.integers(*INT32), ts=st.integers(*INT64))
def test_lookups_on_garbage_stay_in_bounds(blob, target, ts):
    # unsorted bytes: any answer must be one of the whole entries present
    rel_out, pos_out = ffi.new("int32_t *"), ffi.new("int32_t *")
    assert lib.plg_offset_index_lookup(blob, len(blob), target, rel_out, pos_out) == lib.PLG_OK
    entries = {struct.unpack_from(">ii", blob, 8 * i) for i in range(len(blob) // 8)}
    assert (rel_out[0], pos_out[0]) in entries | {(0, 0)}
    ts_out = ffi.new("int64_t *")
    assert lib.plg_time_index_lookup(blob, len(blob), ts, ts_out, rel_out) == lib.PLG_OK
    tentries = {struct.unpack_from(">qi", blob, 12 * i) for i in range(len(blob) // 12)}
    assert (ts_out[0], rel_out[0]) in tentries | {(-1, 0)}


# ---------------------------------------------------------------------------
# scan on random, damaged and torn bytes
# ---------------------------------------------------------------------------


def assert_valid_batch(data: bytes, b) -> None:
    """Checks a scanned batch against the format with no help from the C core."""
    chunk = data[b.position : b.position + b.size]
    assert len(chunk) == b.size
    base, length, _, magic = struct.unpack_from(">qiib", chunk, 0)
    assert length + 12 == b.size and magic == b.magic and base == b.base_offset >= 0
    if magic == 2:
        assert b.size >= 61
        (crc,) = struct.unpack_from(">I", chunk, 17)
        assert crc == b.crc == py_crc32c(chunk[21:])
        (lod,) = struct.unpack_from(">i", chunk, 23)
        assert lod >= 0 and b.last_offset == base + lod
    else:
        assert magic in (0, 1) and b.size >= 12 + (22 if magic == 1 else 14)
        (crc,) = struct.unpack_from(">I", chunk, 12)
        assert crc == b.crc == zlib.crc32(chunk[16:])
        assert b.last_offset == base


def assert_valid_scan(data: bytes, result) -> None:
    pos = 0
    prev_last = -1
    for b in result.batches:
        assert b.position == pos
        assert_valid_batch(data, b)
        assert b.base_offset > prev_last
        prev_last = b.last_offset
        pos += b.size
    assert result.valid_bytes == pos
    assert result.status in (_native.OK, _native.ETRUNCATED, _native.ECORRUPT, _native.ECRC, _native.EMAGIC)
    if result.status == _native.OK:
        assert pos == len(data)
    else:
        assert pos < len(data)


@st.composite
def logs(draw, min_batches=1, max_batches=6):
    """Concatenated valid entries (v2 batches, some legacy messages) with increasing offsets."""
    n = draw(st.integers(min_batches, max_batches))
    out = bytearray()
    spans: List[Tuple[int, int]] = []
    offset = draw(st.integers(0, 1000))
    for _ in range(n):
        start = len(out)
        kind = draw(st.sampled_from(["v2", "v2", "v2", "v1", "v0"]))
        if kind == "v2":
            recs = draw(record_lists(max_size=5))
            out += py_encode_batch(recs, base_offset=offset)
            offset += len(recs) + draw(st.integers(0, 3))
        else:
            out += py_encode_legacy(offset, draw(maybe_bytes), draw(maybe_bytes), magic=int(kind[1]),
                                    timestamp=draw(st.integers(0, 2**41)))
            offset += 1 + draw(st.integers(0, 3))
        spans.append((start, len(out)))
    return bytes(out), spans


@given(blob=st.binary(max_size=300))
def test_scan_random_bytes_never_crashes(blob):
    assert_valid_scan(blob, scan(blob))
    assert_valid_scan(blob, scan(blob, max_batches=1))


@given(log=logs(), garbage=st.binary(max_size=200))
def test_scan_valid_log_then_garbage(log, garbage):
    data, spans = log
    result = scan(data + garbage)
    assert_valid_scan(data + garbage, result)
    assert [(b.position, b.position + b.size) for b in result.batches[: len(spans)]] == spans
    assert len(result.batches) >= len(spans)


@given(log=logs(), data=st.data())
def test_scan_after_one_damaged_byte(log, data):
    raw, spans = log
    i = data.draw(st.integers(0, len(raw) - 1))
    damaged = bytearray(raw)
    damaged[i] ^= data.draw(st.integers(1, 255))
    damaged = bytes(damaged)
    result = scan(damaged)
    assert_valid_scan(damaged, result)
    j = next(k for k, (s, e) in enumerate(spans) if s <= i < e)
    start, end = spans[j]
    within = i - start
    # everything before the damaged entry comes back untouched
    assert [(b.position, b.position + b.size) for b in result.batches[:j]] == spans[:j]
    assert len(result.batches) >= j
    if within < 8:
        return  # the offset is not checksummed: the entry may stay valid with another offset
    if raw[start + 16] == 2 and 12 <= within < 16:
        # partitionLeaderEpoch lies outside the CRC: every batch stays valid
        assert len(result.batches) == len(spans) and result.status == _native.OK
        assert result.batches[j].partition_leader_epoch != scan(raw).batches[j].partition_leader_epoch
    else:
        # the length, the magic, the CRC or a checksummed byte: the entry is rejected
        assert len(result.batches) == j
        assert result.status != _native.OK


@given(log=logs(max_batches=4))
def test_scan_torn_tail_at_every_byte(log):
    data, spans = log
    start, end = spans[-1]
    complete = spans[:-1]
    for cut in range(start + 1, end):
        torn = data[:cut]
        result = scan(torn)
        assert [(b.position, b.position + b.size) for b in result.batches] == complete, cut
        assert result.status == _native.ETRUNCATED, cut
        assert result.valid_bytes == start
        assert [b.info.position for b in iter_batches(torn)] == [s for s, _ in complete]  # no exception
    assert scan(data).status == _native.OK and len(scan(data).batches) == len(spans)


@given(log=logs(min_batches=2, max_batches=4), data=st.data())
def test_scan_rejects_offsets_that_do_not_increase(log, data):
    raw, spans = log
    j = data.draw(st.integers(1, len(spans) - 1))
    prev_last = scan(raw).batches[j - 1].last_offset
    bad = bytearray(raw)
    # neither a v2 batch's CRC nor a legacy message's covers the offset
    bad[spans[j][0] : spans[j][0] + 8] = struct.pack(">q", data.draw(st.integers(0, prev_last)))
    result = scan(bytes(bad))
    assert len(result.batches) == j and result.status == _native.ECORRUPT
    assert result.valid_bytes == spans[j][0]


def test_scan_offset_order_is_checked_across_chunks():
    # scan() calls the C core 256 batches at a time: a backwards step right
    # after a chunk boundary, followed by a bad batch, must still be caught.
    parts = [py_encode_batch([Record(b"x", timestamp=0)], base_offset=i) for i in range(256)]
    parts.append(py_encode_batch([Record(b"x", timestamp=0)], base_offset=3))  # goes backwards
    parts.append(b"\x00" * 20)  # and the chunk then ends in garbage
    result = scan(b"".join(parts))
    assert len(result.batches) == 256
    assert result.status == _native.ECORRUPT
    assert result.valid_bytes == sum(len(p) for p in parts[:256])


# ---------------------------------------------------------------------------
# point lookup (plg_lookup_record) on valid and damaged segments
# ---------------------------------------------------------------------------

LOOKUP_CODES = {lib.PLG_OK, lib.PLG_ENOTFOUND, lib.PLG_EUNSUPPORTED, lib.PLG_ECRC, lib.PLG_ECORRUPT, lib.PLG_EMAGIC}


def lookup_record(log: bytes, idx: bytes, base: int, target: int, verified: int = 0):
    ref = ffi.new("plg_record_ref_t *")
    rc = lib.plg_lookup_record(log, len(log), idx, len(idx), base, target, verified, ref)
    return rc, ref


@st.composite
def segments(draw):
    """A segment: v2 batches (some compressed, some with offset gaps) and its offset index."""
    base = draw(st.integers(0, 2**40))
    out, idx, offset = bytearray(), bytearray(), base
    for _ in range(draw(st.integers(1, 6))):
        recs = draw(record_lists(max_size=6))
        if draw(st.booleans()) and len(recs) > 1:
            # a compacted batch keeps its offsets but loses records: drop one, re-encode by hand
            keep = draw(st.integers(0, len(recs) - 1))
            raw = bytearray(py_encode_batch(recs, base_offset=offset))
            header, decoded = py_decode_batch(bytes(raw))
            survivors = [r for i, r in enumerate(decoded) if i != keep]
            body = bytearray()
            for r in survivors:
                body += _py_record(r, header["base_timestamp"], r.offset - offset)
            raw = raw[:57] + struct.pack(">i", len(survivors)) + body
            _reseal(raw)
        else:
            raw = encode_batch(recs, now_ms=0, base_offset=offset,
                               compression=draw(st.sampled_from([None, None, None, "gzip"])))
        if out and draw(st.booleans()):
            idx += struct.pack(">ii", offset + len(recs) - 1 - base, len(out))
        out += raw
        offset += len(recs)
    return bytes(out), bytes(idx), base, offset


def _py_record(r: Record, base_ts: int, offset_delta: int) -> bytes:
    from pylog.record import py_varint

    rec = bytearray(b"\x00") + py_varint(r.timestamp - base_ts) + py_varint(offset_delta)
    for field in (r.key, r.value):
        rec += py_varint(-1) if field is None else py_varint(len(field)) + field
    rec += py_varint(len(r.headers))
    for hk, hv in r.headers:
        kb = hk.encode("utf-8", "surrogateescape")
        rec += py_varint(len(kb)) + kb + (py_varint(-1) if hv is None else py_varint(len(hv)) + hv)
    return py_varint(len(rec)) + bytes(rec)


@given(seg=segments(), data=st.data())
def test_lookup_record_agrees_with_full_decode(seg, data):
    log, idx, base, end = seg
    by_offset = {}
    compressed = set()
    for batch in iter_batches(log):
        for r in batch.records():
            by_offset[r.offset] = r
            if batch.compression:
                compressed.add(r.offset)
    for target in data.draw(st.lists(st.integers(base - 2, end + 2), min_size=1, max_size=10)):
        rc, ref = lookup_record(log, idx, base, target)
        if target in compressed:
            assert rc == lib.PLG_EUNSUPPORTED
        elif target not in by_offset:
            assert rc == lib.PLG_ENOTFOUND, target
        else:
            assert rc == lib.PLG_OK
            want = by_offset[target]
            key = log[ref.key_pos : ref.key_pos + ref.key_len] if ref.key_len >= 0 else None
            value = log[ref.value_pos : ref.value_pos + ref.value_len] if ref.value_len >= 0 else None
            assert (key, value, ref.timestamp, ref.offset, ref.header_count) == (
                want.key, want.value, want.timestamp, target, len(want.headers))


@given(seg=segments(), data=st.data())
def test_lookup_record_on_damaged_bytes_stays_in_bounds(seg, data):
    log, idx, base, end = seg
    log = bytearray(log)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(log) - 1))
        log[i] ^= data.draw(st.integers(1, 255))
    if data.draw(st.booleans()):
        log = log[: data.draw(st.integers(0, len(log)))]
    if data.draw(st.booleans()):
        idx = data.draw(st.binary(max_size=64))
    log = bytes(log)
    for target in data.draw(st.lists(st.integers(base - 2, end + 2), min_size=1, max_size=5)):
        for verified in (0, len(log)):
            rc, ref = lookup_record(log, idx, base, target, verified)
            assert rc in LOOKUP_CODES
            if rc == lib.PLG_OK:
                assert ref.batch_position + ref.batch_size <= len(log)
                for pos, n in ((ref.key_pos, ref.key_len), (ref.value_pos, ref.value_len)):
                    assert n >= -1 and pos + max(n, 0) <= ref.batch_position + ref.batch_size
                assert ref.headers_pos + ref.headers_len <= ref.batch_position + ref.batch_size
                if verified == 0:  # CRC checked: the batch really is intact
                    assert py_crc32c(log[ref.batch_position + 21 : ref.batch_position + ref.batch_size]) == \
                        struct.unpack_from(">I", log, ref.batch_position + 17)[0]
