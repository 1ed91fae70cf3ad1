"""Property tests: the Spark source's C decoder into Arrow buffers (``arrow.c``, :mod:`pylog._native.arrow`).

* Against a pure-Python model: for any mix of plain batches, keyed and
  keyless, tombstones and empty values, headers, compressed, control and
  log-append-time batches, offset gaps, and any ``[start, end)``, the Arrow
  batch built by :func:`pylog.spark.reader.build_arrow` holds exactly the
  model's rows (offset, timestamp in microseconds, timestamp type, key,
  value, headers) - whether the batches are decoded by one C call over the
  chunk or batch by batch.
* Against the pure-Python oracle on damaged bytes (records changed, CRC
  resealed, so the damage reaches the record decoder): the reader returns
  exactly ``py_decode_batch``'s records when the oracle accepts the batch,
  and raises :class:`CorruptRecordError` naming the file when it refuses it -
  never a crash, never other data.

The sanitizer pass of ``./dev test`` runs this file against the ASan+UBSan
build of the C core.
"""
from __future__ import annotations

import struct
from typing import Any, List, Optional, Sequence, Tuple

import hypothesis.strategies as st
import pytest
from hypothesis import given

pa = pytest.importorskip("pyarrow")

from pylog._native.arrow import ArrowColumns  # noqa: E402
from pylog.errors import CorruptRecordError  # noqa: E402
from pylog.record import Record, encode_batch, iter_batches, py_crc32c, py_decode_batch, py_record_bytes, scan  # noqa: E402
from pylog.spark.reader import ReadSpec, arrow_schema, build_arrow  # noqa: E402

TOPIC, PART, PATH = "t", 3, "/logs/t-3/00000000000000000000.log"
ATTR_LOG_APPEND_TIME = 0x08
ATTR_CONTROL = 0x20
I64 = 1 << 64


def build_batch(records: Sequence[Record], deltas: Sequence[int], *, base_offset: int, attributes: int = 0,
                max_ts: Optional[int] = None) -> bytes:
    """An uncompressed v2 batch whose i-th record has offset delta ``deltas[i]``."""
    base_ts = records[0].timestamp
    body = b"".join(py_record_bytes(r, r.timestamp - base_ts, d) for r, d in zip(records, deltas))
    if max_ts is None:
        max_ts = max(r.timestamp for r in records)
    tail = struct.pack(">hiqqqhii", attributes, deltas[-1], base_ts, max_ts, -1, -1, -1, len(records)) + body
    return struct.pack(">qiibI", base_offset, len(tail) + 9, 0, 2, py_crc32c(tail)) + tail


KINDS = ["plain_keyless", "plain_keyed", "mixed_keys", "tombstone", "headers", "gzip", "control", "log_append_time"]


@st.composite
def chunks(draw: Any) -> bytes:
    """Consecutive batches, as one chunk of a segment."""
    out = bytearray()
    offset = draw(st.integers(0, 50))
    ts = 1_700_000_000_000
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(KINDS))
        n = draw(st.integers(1, 12))
        gaps = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)) if draw(st.booleans()) else [0] * n
        deltas, d = [], 0
        for g in gaps:
            deltas.append(d)
            d += 1 + g
        recs = []
        for i in range(n):
            value: Optional[bytes] = draw(st.binary(max_size=30))
            key: Optional[bytes] = None
            heads: tuple = ()
            if kind == "plain_keyed":
                key = draw(st.binary(max_size=8))
            elif kind == "mixed_keys":
                key = draw(st.none() | st.binary(max_size=8))
            elif kind == "tombstone" and i % 2 == 0:
                value = None
            elif kind == "headers":
                heads = (("h", draw(st.none() | st.binary(max_size=5))),) * draw(st.integers(0, 2))
            ts += draw(st.integers(-5, 5))
            recs.append(Record(value=value, key=key, headers=heads, timestamp=ts))
        if kind == "gzip":
            data = bytes(encode_batch(recs, now_ms=ts, base_offset=offset, compression="gzip"))
            last = offset + n - 1
        else:
            attrs = {"control": ATTR_CONTROL, "log_append_time": ATTR_LOG_APPEND_TIME}.get(kind, 0)
            data = build_batch(recs, deltas, base_offset=offset, attributes=attrs,
                               max_ts=ts + 1000 if kind == "log_append_time" else None)
            last = offset + deltas[-1]
        out += data
        offset = last + 1 + draw(st.integers(0, 3))
    return bytes(out)


def model(data: bytes, start: int, end: int, headers: bool) -> List[tuple]:
    """The rows Spark must get, from the pure-Python decoder (gzip batches: the general decoder)."""
    rows: List[tuple] = []
    at = 0
    while at + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, at + 8)[0]
        raw = data[at : at + size]
        at += size
        attrs = struct.unpack_from(">h", raw, 21)[0]
        if attrs & ATTR_CONTROL:
            continue
        if attrs & 0x07:
            recs = list(next(iter_batches(raw)).records())
        else:
            recs = py_decode_batch(raw)[1]
        lat = bool(attrs & ATTR_LOG_APPEND_TIME)
        max_ts = struct.unpack_from(">q", raw, 35)[0]
        for r in recs:
            if start <= r.offset < end:
                ms = max_ts if lat else r.timestamp
                us = (ms * 1000) % I64
                us = us - I64 if us >= 1 << 63 else us  # int64 wrap-around, as Arrow's kernels
                heads = [{"key": k, "value": v} for k, v in r.headers] if r.headers else None
                rows.append((r.key, r.value, TOPIC, PART, r.offset, us, int(lat)) + ((heads,) if headers else ()))
    return rows


def arrow_rows(rb: Optional[Any], headers: bool) -> List[tuple]:
    if rb is None:
        return []
    assert rb.schema.equals(arrow_schema(headers))
    rb.validate(full=True)
    cols = [rb.column(i).to_pylist() for i in range(rb.num_columns)]
    cols[5] = rb.column(5).cast(pa.int64()).to_pylist()  # microseconds, without datetime's range limits
    return list(zip(*cols))


def read(data: bytes, start: int, end: int, headers: bool, split: bool) -> Optional[Any]:
    res = scan(data, verify_crc=True)
    assert res.ok and res.valid_bytes == len(data)
    infos = [b for b in res.batches if b.base_offset < end and b.last_offset >= start]
    if not infos:
        return None
    if split:  # one batch per call: the batch-by-batch path (and its chunk of one)
        parts = [build_arrow(memoryview(data), [i], ReadSpec(TOPIC, PART, "/logs/t-3", start, end, headers), PATH)
                 for i in infos]
        parts = [p for p in parts if p is not None]
        return pa.Table.from_batches(parts, schema=arrow_schema(headers)).combine_chunks().to_batches()[0] \
            if parts else None
    return build_arrow(memoryview(data), infos, ReadSpec(TOPIC, PART, "/logs/t-3", start, end, headers), PATH)


@given(chunks(), st.integers(0, 120), st.integers(0, 140), st.booleans(), st.booleans())
def test_arrow_rows_are_the_models(data: bytes, start: int, span: int, headers: bool, split: bool) -> None:
    end = start + span
    got = arrow_rows(read(data, start, end, headers, split), headers)
    assert got == model(data, start, end, headers)


@st.composite
def damaged(draw: Any) -> Tuple[bytes, int]:
    """One uncompressed batch with some records bytes changed and the CRC resealed; and its size."""
    n = draw(st.integers(1, 6))
    recs = [Record(value=draw(st.binary(max_size=12)), key=draw(st.none() | st.binary(max_size=4)),
                   headers=(("k", b"v"),) * draw(st.integers(0, 1)), timestamp=1000 + i) for i in range(n)]
    raw = bytearray(build_batch(recs, list(range(n)), base_offset=draw(st.integers(0, 1000))))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(61, len(raw) - 1))
        raw[at] = draw(st.integers(0, 255))
    if draw(st.booleans()):  # also cut or grow the records section (the length is kept consistent)
        cut = draw(st.integers(-3, 3))
        raw = raw[:cut] if cut < 0 else raw + bytes(cut)
        struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">I", raw, 17, py_crc32c(bytes(raw[21:])))
    return bytes(raw), len(raw)


@given(damaged(), st.booleans())
def test_damaged_records_match_the_oracle_or_are_refused(batch: Tuple[bytes, int], headers: bool) -> None:
    data, _ = batch
    res = scan(data, verify_crc=True)
    if not res.batches:
        return  # the framing itself is refused (scan's own tests cover that)
    try:
        _, recs = py_decode_batch(data)
        want: Optional[List[Record]] = recs
    except ValueError:
        want = None
    if want is not None and headers:
        try:  # the Spark headers column needs UTF-8 keys; a key that is not is the reader's error too
            for r in want:
                for k, _v in r.headers:
                    k.encode()
        except UnicodeEncodeError:
            return
    spec = ReadSpec(TOPIC, PART, "/logs/t-3", 0, 1 << 62, headers)
    if want is None:
        with pytest.raises(CorruptRecordError) as err:
            build_arrow(memoryview(data), res.batches, spec, PATH)
        assert err.value.path == PATH
        return
    got = arrow_rows(build_arrow(memoryview(data), res.batches, spec, PATH), headers)
    assert [(g[0], g[1], g[4], g[5]) for g in got] == [
        (r.key, r.value, r.offset, (r.timestamp * 1000) % I64 - (I64 if (r.timestamp * 1000) % I64 >= 1 << 63 else 0))
        for r in want
    ]


def test_columns_refuse_overflow_and_keep_whole_batches_only() -> None:
    """Caps too small are an error, not a write past them; a failed batch leaves the counters at
    the batches before it."""
    recs = [Record(value=b"x" * 10, key=b"k", timestamp=5) for _ in range(4)]
    one = build_batch(recs, [0, 1, 2, 3], base_offset=0)
    bufs = {name: pa.allocate_buffer(64) for name in
            ("offset", "timestamp", "timestamp_type", "value_offsets", "value_validity", "value_data",
             "key_offsets", "key_validity", "key_data")}
    cols = ArrowColumns({k: b.address for k, b in bufs.items()}, 6, 64, 64)
    assert cols.batches(one, 0, len(one), PATH, "x") == len(one)
    assert (cols.rows, cols.value_used, cols.key_used, cols.key_nulls) == (4, 40, 4, 0)
    with pytest.raises(Exception) as err:  # 4 more rows do not fit in 6
        cols.batches(one, 0, len(one), PATH, "x")
    assert not isinstance(err.value, CorruptRecordError)
    assert (cols.rows, cols.value_used, cols.key_used) == (4, 40, 4)
    bad = bytearray(one)
    bad[61] = 0x7F  # the first record's length now runs past the batch
    struct.pack_into(">I", bad, 17, py_crc32c(bytes(bad[21:])))
    cols = ArrowColumns({k: b.address for k, b in bufs.items()}, 8, 64, 64)
    with pytest.raises(CorruptRecordError) as bad_err:
        cols.batches(one + bytes(bad), 0, 2 * len(one), PATH, "x")
    assert bad_err.value.position == len(one)  # the second batch's position
    assert (cols.rows, cols.value_used, cols.key_used) == (4, 40, 4)


@given(st.binary(max_size=300), st.integers(0, 40), st.booleans(), st.integers(0, 0x3F))
def test_any_bytes_are_decoded_or_refused_never_written_past_the_caps(raw: bytes, count: int, whole: bool,
                                                                       attributes: int) -> None:
    """Arbitrary bytes (no scan first): every call returns or raises a pylog error; the sanitizer
    pass checks that nothing is read or written out of bounds. A guard byte after each buffer stays."""
    from pylog.errors import PylogError

    cap_rows, cap = 16, 64
    sizes = {"offset": 8 * cap_rows, "timestamp": 8 * cap_rows, "timestamp_type": 4 * cap_rows,
             "value_offsets": 4 * (cap_rows + 1), "key_offsets": 4 * (cap_rows + 1),
             "value_validity": (cap_rows + 7) // 8, "key_validity": (cap_rows + 7) // 8,
             "value_data": cap, "key_data": cap, "header_count": 4 * cap_rows}
    bufs = {k: bytearray(n + 1) for k, n in sizes.items()}
    for b in bufs.values():
        b[-1] = 0xA5
    held = {k: pa.py_buffer(b) for k, b in bufs.items()}
    cols = ArrowColumns({k: b.address for k, b in held.items()}, cap_rows, cap, cap)
    try:
        if whole:  # a v2 batch header (CRC not checked here) around the bytes, then the bytes again
            tail = struct.pack(">hiqqqhii", attributes, count, 1000, 2000, -1, -1, -1, count) + raw
            data = struct.pack(">qiibI", 5, len(tail) + 9, 0, 2, 0) + tail + raw
            at = cols.batches(data, 0, len(data), PATH, "fuzz")
            assert 0 <= at <= len(data)
        else:
            cols.records(raw, count, 7, 1000, 2000, attributes, PATH, 0, "fuzz")
            assert cols.rows == count
    except PylogError:
        pass
    assert cols.rows <= cap_rows and cols.value_used <= cap and cols.key_used <= cap
    assert all(b[-1] == 0xA5 for b in bufs.values())


def test_a_huge_record_count_is_refused_before_any_buffer_is_sized() -> None:
    """A batch claiming 2**31 - 1 records (scan refuses such a header today; build_arrow does not
    rely on it) is a CorruptRecordError naming the file, not a 16 GB allocation; a claim that fits
    but is wrong is the C decoder's CorruptRecordError."""
    raw = build_batch([Record(value=b"v", timestamp=1)], [0], base_offset=0)
    info = scan(raw, verify_crc=True).batches[0]
    spec = ReadSpec(TOPIC, PART, "/logs/t-3", 0, 10)
    with pytest.raises(CorruptRecordError) as err:
        build_arrow(memoryview(raw), [info._replace(records_count=2**31 - 1)], spec, PATH)
    assert err.value.path == PATH and "2147483647 records" in str(err.value)
    with pytest.raises(CorruptRecordError) as err:
        build_arrow(memoryview(raw), [info._replace(records_count=2)], spec, PATH)
    assert err.value.path == PATH
