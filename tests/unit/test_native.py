"""The C core (pylog/_native): checksums, status codes, varints, indexes.

Each test pins a fact a bug in the C would break: published CRC check
values, agreement of the hardware and table CRC paths on every lane
boundary, Kafka's zig-zag varint bytes, Kafka's sparse-index append rule and
the binary search of AbstractIndex (exercised through ffi, as the storage
layer calls them).
"""
from __future__ import annotations

import bisect
import os
import random
import struct
import zlib

import pytest

from pylog import _native
from pylog._native import ffi, lib
from pylog.errors import CorruptRecordError, InvalidOffsetError, NativeError, PylogError
from pylog import record as rec
from pylog.record.codec import decode_headers

# ---------------------------------------------------------------------------
# CRC-32C and CRC-32
# ---------------------------------------------------------------------------

# RFC 3720 (iSCSI) appendix B.4 test vectors, plus the CRC catalogue "check"
# value for the ASCII digits.
RFC3720_VECTORS = [
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (b"123456789", 0xE3069283),
]

LANE = 8192  # crc.c's lane length: the 3-way path takes 3 * LANE bytes at a time


@pytest.mark.parametrize("data,expected", RFC3720_VECTORS)
def test_crc32c_published_vectors(data, expected):
    assert _native.crc32c(data) == expected
    assert _native.crc32c_table(data) == expected
    assert rec.py_crc32c(data) == expected


def test_crc32c_rfc3720_descending_vector():
    # RFC 3720 B.4: 32 bytes descending 31..0 -> 0x113FDB5C
    data = bytes(range(31, -1, -1))
    assert _native.crc32c(data) == 0x113FDB5C
    assert _native.crc32c_table(data) == 0x113FDB5C


def test_crc32c_empty():
    assert _native.crc32c(b"") == 0
    assert _native.crc32c_table(b"") == 0
    assert _native.crc32c(b"", 0x12345678) == 0x12345678


def _cpu_has_crc_instruction() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return False
    flags = " ".join(line for line in info.splitlines() if line.startswith(("flags", "Features")))
    return " sse4_2" in flags or " crc32" in flags


@pytest.mark.skipif(not _cpu_has_crc_instruction(), reason="this CPU has no CRC32C instruction")
def test_hardware_path_is_detected():
    # Where the CPU advertises the instruction, the fast path must be in use:
    # otherwise the hardware-vs-table tests below compare the table with itself.
    assert _native.crc32c_hardware() is True


def _lengths():
    lengths = set(range(0, 130))
    for k in (1, 2, 3, 4):
        for d in (-9, -8, -7, -1, 0, 1, 7, 8, 9):
            lengths.add(3 * LANE * k + d)
    for d in (-1, 0, 1):
        lengths.add(LANE + d)
        lengths.add(2 * LANE + d)
    return sorted(n for n in lengths if n >= 0)


def test_crc32c_hardware_matches_table_on_lane_boundaries():
    rng = random.Random(1)
    blob = rng.randbytes(3 * LANE * 4 + 64)
    mv = memoryview(blob)
    for n in _lengths():
        for start in (0, 1, 3, 7):  # misaligned starts exercise the alignment prologue
            chunk = mv[start : start + n]
            assert _native.crc32c(chunk) == _native.crc32c_table(chunk), (n, start)


def test_crc32c_matches_python_oracle_on_lane_boundaries():
    rng = random.Random(2)
    for n in (0, 1, 7, 8, 9, 3 * LANE - 1, 3 * LANE, 3 * LANE + 1):
        data = rng.randbytes(n)
        assert _native.crc32c(data) == rec.py_crc32c(data), n


def test_crc32c_incremental_equals_whole():
    rng = random.Random(3)
    data = rng.randbytes(3 * LANE * 2 + 100)
    whole = _native.crc32c(data)
    for split in (0, 1, 5, 8, 100, 3 * LANE - 1, 3 * LANE, 3 * LANE + 1, len(data) - 1, len(data)):
        a, b = data[:split], data[split:]
        assert _native.crc32c(b, _native.crc32c(a)) == whole, split
        assert _native.crc32c_table(b, _native.crc32c_table(a)) == whole, split
        # the two paths may be mixed: they compute the same register
        assert _native.crc32c(b, _native.crc32c_table(a)) == whole, split
    # byte-at-a-time, across the first lane boundary region
    crc = 0
    for i in range(200):
        crc = _native.crc32c(data[i : i + 1], crc)
    assert crc == _native.crc32c(data[:200])


def test_crc32c_accepts_all_buffer_types():
    data = bytes(range(256)) * 10
    expected = _native.crc32c(data)
    assert _native.crc32c(bytearray(data)) == expected
    assert _native.crc32c(memoryview(data)) == expected


def test_crc32c_detects_every_single_bit_flip():
    data = bytearray(os.urandom(64))
    base = _native.crc32c(data)
    for i in range(len(data) * 8):
        data[i // 8] ^= 1 << (i % 8)
        assert _native.crc32c(data) != base
        data[i // 8] ^= 1 << (i % 8)


def test_crc32_equals_zlib():
    rng = random.Random(4)
    for n in list(range(0, 70)) + [1000, 4095, 4096, 4097, 3 * LANE + 1]:
        data = rng.randbytes(n)
        assert _native.crc32(data) == zlib.crc32(data), n
    data = rng.randbytes(5000)
    assert _native.crc32(data[1234:], _native.crc32(data[:1234])) == zlib.crc32(data)
    assert _native.crc32(b"123456789") == 0xCBF43926  # the catalogue check value


def test_crc_functions_reject_null_out_pointer():
    assert lib.plg_crc32c(ffi.NULL, 0, 0, ffi.NULL) == lib.PLG_EINVAL
    assert lib.plg_crc32c_table(ffi.NULL, 0, 0, ffi.NULL) == lib.PLG_EINVAL
    assert lib.plg_crc32(ffi.NULL, 0, 0, ffi.NULL) == lib.PLG_EINVAL
    out = ffi.new("uint32_t *")
    assert lib.plg_crc32c(ffi.NULL, 5, 0, out) == lib.PLG_EINVAL


# ---------------------------------------------------------------------------
# Status codes -> exceptions
# ---------------------------------------------------------------------------

CODES = {
    "PLG_ETRUNCATED": CorruptRecordError,
    "PLG_ECORRUPT": CorruptRecordError,
    "PLG_ECRC": CorruptRecordError,
    "PLG_EMAGIC": CorruptRecordError,
    "PLG_EORDER": InvalidOffsetError,
    "PLG_EOVERFLOW": NativeError,
    "PLG_EINVAL": NativeError,
}


def test_ok_does_not_raise():
    assert _native.check(lib.PLG_OK, "anything") is None
    assert _native.strerror(lib.PLG_OK) == "ok"


@pytest.mark.parametrize("name,exc", sorted(CODES.items()))
def test_status_maps_to_exception(name, exc):
    rc = getattr(lib, name)
    assert rc < 0
    with pytest.raises(exc) as info:
        _native.check(rc, "read batch", path="/x/00000000000000000000.log", position=4096)
    err = info.value
    assert isinstance(err, PylogError)
    assert type(err) is exc  # not a subclass that would change handling
    msg = str(err)
    assert "read batch" in msg
    assert _native.strerror(rc) in msg
    if exc is CorruptRecordError:
        assert err.path == "/x/00000000000000000000.log"
        assert err.position == 4096
        assert "00000000000000000000.log" in msg and "4096" in msg


# status codes that callers test for explicitly rather than raise
NOT_ERRORS = ["PLG_ENOTFOUND", "PLG_EUNSUPPORTED"]


def test_status_codes_are_distinct_and_described():
    values = [getattr(lib, name) for name in list(CODES) + NOT_ERRORS]
    assert len(set(values)) == len(values)
    texts = [_native.strerror(v) for v in values]
    assert len(set(texts)) == len(texts)
    assert all(t != "unknown error" for t in texts)
    assert _native.strerror(-12345) == "unknown error"


def test_unknown_status_is_a_native_error():
    with pytest.raises(NativeError, match="status -12345"):
        _native.check(-12345, "frobnicate")


def test_module_constants_match_the_header():
    assert _native.OK == 0
    assert (_native.ETRUNCATED, _native.ECORRUPT, _native.ECRC, _native.EMAGIC) == (
        lib.PLG_ETRUNCATED, lib.PLG_ECORRUPT, lib.PLG_ECRC, lib.PLG_EMAGIC,
    )
    assert _native.BATCH_OVERHEAD == 61
    assert _native.LOG_OVERHEAD == 12
    assert ffi.string(lib.plg_version()).decode() == __import__("pylog").__version__


def test_corrupt_bytes_raise_corrupt_record_error_with_position():
    a = bytes(rec.encode_batch([b"a"], now_ms=1, base_offset=0))
    b = bytearray(rec.encode_batch([b"b"], now_ms=1, base_offset=1))
    b[-1] ^= 0xFF  # CRC now wrong
    with pytest.raises(CorruptRecordError) as info:
        list(rec.iter_batches(a + bytes(b), path="seg.log"))
    assert info.value.position == len(a)
    assert info.value.path == "seg.log"


# ---------------------------------------------------------------------------
# Varints
# ---------------------------------------------------------------------------

# Kafka's zig-zag examples (research notes 1.3) and the width edges.
VARINT_BYTES = [
    (0, "00"), (-1, "01"), (1, "02"), (3, "06"), (25, "32"), (33, "42"), (44, "58"),
    (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f"),
    (2**63 - 1, "feffffffffffffffff01"), (-(2**63), "ffffffffffffffffff01"),
]


def _encode(value: int, cap: int = 16):
    out = ffi.new("uint8_t[]", max(cap, 1))
    used = ffi.new("uint64_t *")
    rc = lib.plg_varint_encode(value, out, cap, used)
    return rc, bytes(ffi.buffer(out, used[0])) if rc == lib.PLG_OK else None


def _decode(data: bytes):
    val = ffi.new("int64_t *")
    used = ffi.new("uint64_t *")
    buf = ffi.new("uint8_t[]", data or b"\x00")
    rc = lib.plg_varint_decode(buf, len(data), val, used)
    return rc, int(val[0]), int(used[0])


@pytest.mark.parametrize("value,hexbytes", VARINT_BYTES)
def test_varint_bytes(value, hexbytes):
    expected = bytes.fromhex(hexbytes)
    assert _encode(value) == (lib.PLG_OK, expected)
    assert rec.py_varint(value) == expected
    rc, got, used = _decode(expected + b"\xaa")  # trailing byte must not be consumed
    assert (rc, got, used) == (lib.PLG_OK, value, len(expected))


def test_varint_round_trip_random():
    rng = random.Random(5)
    values = [rng.randrange(-(2**63), 2**63) for _ in range(2000)]
    values += [rng.randrange(-(2**31), 2**31) for _ in range(2000)]
    for v in values:
        rc, enc = _encode(v)
        assert rc == lib.PLG_OK and enc == rec.py_varint(v)
        assert _decode(enc) == (lib.PLG_OK, v, len(enc))


def test_varint_encode_needs_room():
    assert _encode(300, cap=1)[0] == lib.PLG_EOVERFLOW
    assert _encode(300, cap=2) == (lib.PLG_OK, bytes.fromhex("d804"))
    assert _encode(-(2**63), cap=9)[0] == lib.PLG_EOVERFLOW


@pytest.mark.parametrize(
    "data,rc",
    [
        (b"", "PLG_ETRUNCATED"),
        (b"\x80", "PLG_ETRUNCATED"),
        (b"\xff\xff\xff", "PLG_ETRUNCATED"),
        (b"\x80" * 10 + b"\x00", "PLG_ECORRUPT"),  # 11 bytes: longer than a varlong
        (b"\xff" * 9 + b"\x02", "PLG_ECORRUPT"),  # 10th byte > 1: bits past 64
        (b"\xff" * 9 + b"\x7f", "PLG_ECORRUPT"),
    ],
)
def test_varint_decode_rejects(data, rc):
    assert _decode(data)[0] == getattr(lib, rc)


def test_varint_decode_accepts_the_widest_legal_varlong():
    assert _decode(b"\xff" * 9 + b"\x01") == (lib.PLG_OK, -(2**63), 10)
    assert _decode(b"\xfe" + b"\xff" * 8 + b"\x01") == (lib.PLG_OK, 2**63 - 1, 10)


def test_python_oracle_varint_agrees_on_overflow():
    with pytest.raises(ValueError):
        rec.py_read_varint(b"\xff" * 9 + b"\x02", 0)
    with pytest.raises(ValueError):
        rec.py_read_varint(b"\xff\xff\xff\xff\x1f", 0, max_bytes=5)  # 35 bits in an int32
    assert rec.py_read_varint(b"\xff\xff\xff\xff\x0f", 0, max_bytes=5) == (-(2**31), 5)


# ---------------------------------------------------------------------------
# Offset and time index lookup
# ---------------------------------------------------------------------------


def _offset_index(entries):
    return b"".join(struct.pack(">ii", r, p) for r, p in entries)


def _time_index(entries):
    return b"".join(struct.pack(">qi", t, r) for t, r in entries)


def offset_lookup(idx: bytes, target: int):
    rel = ffi.new("int32_t *")
    pos = ffi.new("int32_t *")
    buf = ffi.from_buffer(idx)
    assert lib.plg_offset_index_lookup(buf, len(idx), target, rel, pos) == lib.PLG_OK
    return int(rel[0]), int(pos[0])


def time_lookup(idx: bytes, target: int):
    ts = ffi.new("int64_t *")
    rel = ffi.new("int32_t *")
    buf = ffi.from_buffer(idx)
    assert lib.plg_time_index_lookup(buf, len(idx), target, ts, rel) == lib.PLG_OK
    return int(ts[0]), int(rel[0])


def test_offset_lookup_empty_index_is_segment_start():
    assert offset_lookup(b"", 0) == (0, 0)
    assert offset_lookup(b"", 2**31 - 1) == (0, 0)


def test_offset_lookup_basic():
    entries = [(10, 4100), (20, 8300), (35, 12500)]
    idx = _offset_index(entries)
    assert offset_lookup(idx, 0) == (0, 0)  # below the first entry
    assert offset_lookup(idx, 9) == (0, 0)
    assert offset_lookup(idx, 10) == (10, 4100)
    assert offset_lookup(idx, 19) == (10, 4100)
    assert offset_lookup(idx, 20) == (20, 8300)
    assert offset_lookup(idx, 34) == (20, 8300)
    assert offset_lookup(idx, 35) == (35, 12500)
    assert offset_lookup(idx, 2**31 - 1) == (35, 12500)


def test_offset_lookup_ignores_a_partial_trailing_entry():
    idx = _offset_index([(10, 100), (20, 200)]) + b"\x00\x00\x00\x30\x00"
    assert offset_lookup(idx, 100) == (20, 200)


@pytest.mark.parametrize("n", [1, 2, 1023, 1024, 1025, 1026, 1027, 2048, 3001])
def test_offset_lookup_matches_bisect_around_the_warm_section(n):
    # Kafka searches the last 8192 bytes (1024 offset entries) first: the
    # boundary entry n-1-1024 and its neighbours are where a bug would hide.
    rng = random.Random(n)
    rels = sorted(rng.sample(range(1, 10 * n + 10), n))
    entries = [(r, 8 * r + 1) for r in rels]
    idx = _offset_index(entries)
    boundary = max(0, n - 1 - 1024)
    targets = {0, rels[0] - 1, rels[-1] + 1, 2**31 - 1}
    for i in {0, boundary - 1, boundary, boundary + 1, n - 1}:
        if 0 <= i < n:
            targets.update({rels[i] - 1, rels[i], rels[i] + 1})
    targets.update(rng.randrange(0, 10 * n + 20) for _ in range(200))
    for t in sorted(targets):
        i = bisect.bisect_right(rels, t) - 1
        expected = entries[i] if i >= 0 else (0, 0)
        assert offset_lookup(idx, t) == expected, t


def test_time_lookup_empty_and_below():
    assert time_lookup(b"", 123) == (-1, 0)
    idx = _time_index([(1000, 5), (2000, 9)])
    assert time_lookup(idx, 999) == (-1, 0)
    assert time_lookup(idx, -(2**63)) == (-1, 0)


@pytest.mark.parametrize("n", [1, 681, 682, 683, 684, 1500])
def test_time_lookup_matches_bisect_around_the_warm_section(n):
    # 8192 // 12 = 682 time entries in the warm section
    rng = random.Random(n)
    stamps = sorted(rng.sample(range(1_600_000_000_000, 1_600_000_000_000 + 100 * n), n))
    entries = [(t, i * 3) for i, t in enumerate(stamps)]
    idx = _time_index(entries)
    boundary = max(0, n - 1 - 682)
    targets = {stamps[0] - 1, stamps[-1] + 1, 2**63 - 1}
    for i in {0, boundary - 1, boundary, boundary + 1, n - 1}:
        if 0 <= i < n:
            targets.update({stamps[i] - 1, stamps[i], stamps[i] + 1})
    targets.update(rng.randrange(stamps[0] - 5, stamps[-1] + 5) for _ in range(200))
    for t in sorted(targets):
        i = bisect.bisect_right(stamps, t) - 1
        expected = entries[i] if i >= 0 else (-1, 0)
        assert time_lookup(idx, t) == expected, t


def test_lookups_reject_null_outputs():
    assert lib.plg_offset_index_lookup(ffi.NULL, 0, 0, ffi.NULL, ffi.NULL) == lib.PLG_EINVAL
    assert lib.plg_time_index_lookup(ffi.NULL, 8, 0, ffi.new("int64_t *"), ffi.new("int32_t *")) == lib.PLG_EINVAL


# ---------------------------------------------------------------------------
# Index validation
# ---------------------------------------------------------------------------


def index_check(idx: bytes, is_time: bool, log_size: int = 1 << 30):
    n = ffi.new("uint64_t *")
    rc = lib.plg_index_check(ffi.from_buffer(idx), len(idx), 1 if is_time else 0, log_size, n)
    return rc, int(n[0])


def test_index_check_accepts_valid_files():
    assert index_check(b"", False) == (lib.PLG_OK, 0)
    assert index_check(b"", True) == (lib.PLG_OK, 0)
    assert index_check(_offset_index([(3, 4200), (9, 8400), (12, 12600)]), False, 12601) == (lib.PLG_OK, 3)
    assert index_check(_time_index([(100, 3), (200, 9), (300, 9)]), True) == (lib.PLG_OK, 3)


@pytest.mark.parametrize(
    "entries,extra,log_size",
    [
        ([(3, 4200)], b"\x00", 1 << 20),  # not a multiple of 8
        ([(3, 4200), (3, 8400)], b"", 1 << 20),  # offsets not strictly increasing
        ([(5, 4200), (3, 8400)], b"", 1 << 20),
        ([(3, 4200), (5, 4200)], b"", 1 << 20),  # positions not strictly increasing
        ([(3, 4200), (5, 100)], b"", 1 << 20),
        ([(-1, 4200)], b"", 1 << 20),  # negative relative offset
        ([(3, -5)], b"", 1 << 20),  # negative position
        ([(3, 4200)], b"", 4200),  # position at/after the end of the log
        ([(3, 4200), (0, 0), (0, 0)], b"", 1 << 20),  # a preallocated zero tail
    ],
)
def test_index_check_rejects_bad_offset_index(entries, extra, log_size):
    assert index_check(_offset_index(entries) + extra, False, log_size)[0] == lib.PLG_ECORRUPT


@pytest.mark.parametrize(
    "idx",
    [
        _time_index([(100, 3)]) + b"\x00" * 4,  # not a multiple of 12
        _time_index([(200, 3), (100, 4)]),  # timestamps decrease
        _time_index([(100, 5), (200, 4)]),  # offsets decrease
        _time_index([(100, -1)]),  # negative relative offset
    ],
)
def test_index_check_rejects_bad_time_index(idx):
    assert index_check(idx, True)[0] == lib.PLG_ECORRUPT


def test_index_check_rejects_random_garbage():
    rng = random.Random(9)
    for _ in range(200):
        n = rng.randrange(2, 40)
        blob = rng.randbytes(8 * n)
        rels = [struct.unpack_from(">i", blob, 8 * i)[0] for i in range(n)]
        poss = [struct.unpack_from(">i", blob, 8 * i + 4)[0] for i in range(n)]
        valid = (
            all(r >= 0 for r in rels) and all(p >= 0 for p in poss)
            and all(a < b for a, b in zip(rels, rels[1:])) and all(a < b for a, b in zip(poss, poss[1:]))
        )
        assert (index_check(blob, False, 1 << 31)[0] == lib.PLG_OK) == valid


# ---------------------------------------------------------------------------
# Sparse index bookkeeping: Kafka's LogSegment.append rule
# ---------------------------------------------------------------------------


def new_state(base_offset=0, interval=4096):
    st = ffi.new("plg_segment_state_t *")
    st.base_offset = base_offset
    st.size = 0
    st.bytes_since_last_index_entry = 0
    st.index_interval_bytes = interval
    st.max_timestamp_so_far = -1
    st.offset_of_max_timestamp = -1
    st.last_index_offset = base_offset - 1
    st.last_time_index_timestamp = -1
    st.last_time_index_offset = -1
    return st


def after_append(st, nbytes, last_offset, max_ts=-1, offset_of_max_ts=None):
    idx = ffi.new("uint8_t[8]")
    tidx = ffi.new("uint8_t[12]")
    flags = ffi.new("uint32_t *")
    if offset_of_max_ts is None:
        offset_of_max_ts = last_offset
    rc = lib.plg_segment_after_append(st, nbytes, last_offset, max_ts, offset_of_max_ts, idx, tidx, flags)
    entry = struct.unpack(">ii", bytes(idx)) if flags[0] & 1 else None
    tentry = struct.unpack(">qi", bytes(tidx)) if flags[0] & 2 else None
    return rc, entry, tentry


def test_first_append_never_indexes():
    st = new_state(interval=100)
    assert after_append(st, 10_000_000, 99) == (lib.PLG_OK, None, None)
    assert st.size == 10_000_000
    # the second append, whatever its size, gets the entry: last offset -> start
    assert after_append(st, 1, 100) == (lib.PLG_OK, (100, 10_000_000), None)


def test_entry_needs_strictly_more_than_the_interval():
    st = new_state(interval=100)
    assert after_append(st, 100, 0)[1] is None  # 100 bytes since the last entry: not > 100
    assert after_append(st, 50, 1)[1] is None
    # now 150 > 100: this append (offsets 2..4, starting at byte 150) is indexed
    assert after_append(st, 30, 4)[1] == (4, 150)
    assert st.bytes_since_last_index_entry == 30  # reset, then this append counted
    assert after_append(st, 70, 5)[1] is None  # 30 bytes since
    assert after_append(st, 1, 6)[1] is None  # 100: not > 100
    assert after_append(st, 1, 7)[1] == (7, 251)


def test_entry_offsets_are_relative_to_the_segment_base():
    st = new_state(base_offset=1_000_000, interval=0)
    after_append(st, 10, 1_000_004)
    assert after_append(st, 10, 1_000_009)[1] == (9, 10)


def test_time_entry_follows_the_largest_timestamp():
    st = new_state(interval=0)
    assert after_append(st, 10, 4, max_ts=500, offset_of_max_ts=2) == (lib.PLG_OK, None, None)
    # an older timestamp: the largest so far (500 at offset 2) is what is indexed
    assert after_append(st, 10, 9, max_ts=400, offset_of_max_ts=7) == (lib.PLG_OK, (9, 10), (500, 2))
    # max timestamp did not grow: offset entry only
    assert after_append(st, 10, 12, max_ts=450) == (lib.PLG_OK, (12, 20), None)
    assert after_append(st, 10, 15, max_ts=900, offset_of_max_ts=14) == (lib.PLG_OK, (15, 30), (900, 14))
    assert st.max_timestamp_so_far == 900


def test_no_time_entry_without_timestamps():
    st = new_state(interval=0)
    after_append(st, 10, 0)
    assert after_append(st, 10, 1) == (lib.PLG_OK, (1, 10), None)


def test_segment_after_append_matches_kafka_model():
    # Kafka LogSegment.append, written out plainly, over random appends
    rng = random.Random(11)
    for interval in (0, 1, 100, 4096):
        st = new_state(base_offset=500, interval=interval)
        size = since = 0
        offset = 499
        max_ts, max_ts_off = -1, -1
        last_time_ts = -1
        for _ in range(500):
            nbytes = rng.choice([61, 70, 200, 1000, 4097, rng.randrange(61, 9000)])
            count = rng.randrange(1, 20)
            first, offset = offset + 1, offset + count
            ts = rng.randrange(1000, 2000)
            if ts > max_ts:
                max_ts, max_ts_off = ts, rng.randrange(first, offset + 1)
            want_entry = want_time = None
            if since > interval:
                want_entry = (offset - 500, size)
                if max_ts > last_time_ts:
                    want_time = (max_ts, max_ts_off - 500)
                    last_time_ts = max_ts
                since = 0
            since += nbytes
            size += nbytes
            got = after_append(st, nbytes, offset, ts, max_ts_off if max_ts == ts else first)
            assert got == (lib.PLG_OK, want_entry, want_time)
        assert st.size == size and st.bytes_since_last_index_entry == since


@pytest.mark.parametrize(
    "last_offset,reason",
    [(99, "below the base offset"), (100 + 2**31, "beyond int32 of the base"), (2**63 - 1, "far beyond")],
)
def test_out_of_range_offsets_are_refused_without_changing_state(last_offset, reason):
    st = new_state(base_offset=100, interval=0)
    after_append(st, 10, 105)
    before = bytes(ffi.buffer(st))
    assert after_append(st, 10, last_offset)[0] == lib.PLG_EORDER, reason
    assert bytes(ffi.buffer(st)) == before


def test_non_increasing_offset_is_refused_without_changing_state():
    st = new_state(interval=0)
    after_append(st, 10, 5)
    assert after_append(st, 10, 9, max_ts=100)[1] == (9, 10)
    before = bytes(ffi.buffer(st))
    rc, entry, tentry = after_append(st, 10, 9, max_ts=5000)
    assert (rc, entry, tentry) == (lib.PLG_EORDER, None, None)
    assert bytes(ffi.buffer(st)) == before  # the larger timestamp was not taken either


def test_time_entry_offset_going_backwards_is_refused():
    st = new_state(interval=0)
    after_append(st, 10, 5, max_ts=100, offset_of_max_ts=5)
    after_append(st, 10, 9, max_ts=200, offset_of_max_ts=9)  # time entry (100, 5)
    after_append(st, 10, 12, max_ts=300, offset_of_max_ts=12)  # time entry (200, 9)
    before = bytes(ffi.buffer(st))
    assert after_append(st, 10, 20, max_ts=400, offset_of_max_ts=3)[0] == lib.PLG_EORDER
    assert bytes(ffi.buffer(st)) == before


def test_segment_after_append_rejects_null_arguments():
    st = new_state()
    buf8, buf12, flags = ffi.new("uint8_t[8]"), ffi.new("uint8_t[12]"), ffi.new("uint32_t *")
    assert lib.plg_segment_after_append(ffi.NULL, 1, 0, -1, 0, buf8, buf12, flags) == lib.PLG_EINVAL
    assert lib.plg_segment_after_append(st, 1, 0, -1, 0, ffi.NULL, buf12, flags) == lib.PLG_EINVAL


# ---------------------------------------------------------------------------
# Batch helpers reached through ffi: find, re-stamp, gather, headers, legacy
# ---------------------------------------------------------------------------


def _three_batches():
    out = bytearray()
    for base, n in ((0, 3), (3, 1), (4, 5)):
        out += rec.encode_batch([b"x" * 10] * n, now_ms=1, base_offset=base)
    return bytes(out)


def find_batch(data: bytes, target: int):
    pos = ffi.new("uint64_t *")
    last = ffi.new("int64_t *")
    rc = lib.plg_find_batch(ffi.from_buffer(data), len(data), target, pos, last)
    return rc, int(pos[0]), int(last[0])


def test_find_batch():
    data = _three_batches()
    infos = rec.scan(data).batches
    for target, i in ((0, 0), (2, 0), (3, 1), (4, 2), (8, 2)):
        assert find_batch(data, target) == (lib.PLG_OK, infos[i].position, infos[i].last_offset)
    assert find_batch(data, 9) == (lib.PLG_OK, len(data), -1)
    # a torn tail stops the walk quietly
    assert find_batch(data[:-1], 8) == (lib.PLG_OK, infos[2].position, -1)
    bad = bytearray(data)
    bad[infos[1].position + 16] = 7  # bad magic in the second batch
    assert find_batch(bytes(bad), 5) == (lib.PLG_EMAGIC, infos[1].position, -1)


def test_set_base_offset_restamps_and_keeps_crcs_valid():
    data = bytearray(_three_batches())
    assert rec.set_base_offset(data, 1000, 7) == (3, 1009)
    found = rec.scan(data)
    assert found.status == _native.OK
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in found.batches] == [
        (1000, 1002, 7), (1003, 1003, 7), (1004, 1008, 7),
    ]


def test_set_base_offset_refuses_legacy_and_torn_input_unchanged():
    legacy = bytearray(rec.py_encode_legacy(0, b"v"))
    with pytest.raises(CorruptRecordError):
        rec.set_base_offset(legacy, 5, 0)
    assert legacy == rec.py_encode_legacy(0, b"v")
    data = bytearray(_three_batches())
    torn = data[:-3]
    before = bytes(torn)
    with pytest.raises(CorruptRecordError):
        rec.set_base_offset(torn, 5, 0)
    assert torn == before  # validation happens before any byte is written


def test_set_base_offset_refuses_offset_overflow():
    data = bytearray(_three_batches())
    before = bytes(data)
    with pytest.raises(NativeError):
        rec.set_base_offset(data, 2**63 - 5, 0)
    assert data == before


def test_gather_spans():
    buf = b"0123456789"
    pos = ffi.new("uint32_t[]", [0, 5, 9, 2])
    lens = ffi.new("int32_t[]", [3, -1, 1, 0])
    out = ffi.new("uint8_t[]", 16)
    offsets = ffi.new("int32_t[]", 5)
    used = ffi.new("uint64_t *")
    assert lib.plg_gather(buf, len(buf), pos, lens, 4, out, 16, offsets, used) == lib.PLG_OK
    assert bytes(ffi.buffer(out, used[0])) == b"0129"
    assert list(offsets) == [0, 3, 3, 4, 4]
    assert lib.plg_gather(buf, len(buf), pos, lens, 4, out, 3, offsets, used) == lib.PLG_EOVERFLOW
    bad_pos = ffi.new("uint32_t[]", [8])
    bad_len = ffi.new("int32_t[]", [3])  # runs past the end of buf
    assert lib.plg_gather(buf, len(buf), bad_pos, bad_len, 1, out, 16, offsets, used) == lib.PLG_ECORRUPT
    far = ffi.new("uint32_t[]", [2**32 - 1])
    assert lib.plg_gather(buf, len(buf), far, bad_len, 1, out, 16, offsets, used) == lib.PLG_ECORRUPT


def test_decode_headers_single_record_span():
    span = rec.py_varint(2) + b"ab" + rec.py_varint(-1) + rec.py_varint(1) + b"c" + rec.py_varint(2) + b"xy"
    assert decode_headers(span, 2, None, None) == (("ab", None), ("c", b"xy"))
    for cut in range(len(span)):
        with pytest.raises(CorruptRecordError):
            decode_headers(span[:cut], 2, None, None)
    with pytest.raises(CorruptRecordError):
        decode_headers(span + b"\x00", 2, None, None)  # bytes left over
    with pytest.raises(CorruptRecordError):
        decode_headers(span, 10**9, None, None)  # refused before allocating


def test_decode_legacy_fields():
    msg = rec.py_encode_legacy(42, b"value", b"key", magic=1, timestamp=1234)
    out = ffi.new("plg_legacy_message_t *")
    assert lib.plg_decode_legacy(msg, len(msg), out) == lib.PLG_OK
    assert (out.offset, out.magic, out.timestamp) == (42, 1, 1234)
    assert msg[out.key_pos : out.key_pos + out.key_len] == b"key"
    assert msg[out.value_pos : out.value_pos + out.value_len] == b"value"
    for cut in range(len(msg)):  # the size field no longer matches: never reads past len
        assert lib.plg_decode_legacy(msg[:cut], cut, out) != lib.PLG_OK


# ---- RecordBatch.value_columns: the columnar zero-copy reader -----------------

@pytest.mark.parametrize("compression", [None, "gzip"])
def test_value_columns_match_records(compression):
    from pylog.record import Record, encode_batch, iter_batches

    items = [b"a", None, Record(b"ccc", b"k"), Record(b"", None, [("h", b"x")]), b"z" * 300]
    batch = next(iter(iter_batches(encode_batch(items, now_ms=1, compression=compression))))
    cols = batch.value_columns()
    assert len(cols) == len(items)
    got = [None if cols.value(i) is None else bytes(cols.value(i)) for i in range(len(cols))]
    assert got == [r.value for r in batch.records()]
    assert list(cols.lengths) == [-1 if r.value is None else len(r.value) for r in batch.records()]
    if compression is None:  # zero-copy: the buffer is the batch's own memory
        assert cols.buffer.obj is batch.buffer.obj


def test_value_columns_of_legacy_messages():
    from pylog.record import iter_batches, py_encode_legacy

    data = py_encode_legacy(0, b"v0", magic=0) + py_encode_legacy(1, None, b"k", magic=1, timestamp=5)
    cols = [b.value_columns() for b in iter_batches(data)]
    assert [None if c.value(0) is None else bytes(c.value(0)) for c in cols] == [b"v0", None]
