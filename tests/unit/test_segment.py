"""LogSegment: Kafka's sparse index rule, translate_offset, recover, truncate_to."""
from __future__ import annotations

import os
import random
import struct
from typing import List, Tuple

import pytest

from pylog.storage.fileio import FileIO
from pylog.record import encode_batch, scan
from pylog.storage.segment import LogSegment, filename_prefix


def test_filename_prefix_is_kafkas() -> None:
    assert filename_prefix(0) == "00000000000000000000"
    assert filename_prefix(38) == "00000000000000000038"
    assert filename_prefix(2**63 - 1) == "09223372036854775807"


def _fill(seg: LogSegment, base: int, rnd: random.Random, n: int) -> List[Tuple[int, int, int, int, int]]:
    """Append n random batches; returns (position, size, base, last, max_ts) for each."""
    out = []
    offset = base
    ts = 1_000
    for _ in range(n):
        count = rnd.randint(1, 6)
        stamps = [ts + rnd.randint(-50, 100) for _ in range(count)]
        ts += 10
        from pylog import Record

        data = encode_batch([Record(value=b"v" * rnd.randint(0, 300), timestamp=t) for t in stamps],
                            now_ms=0, base_offset=offset)
        pos = seg.append(data, offset + count - 1, max(stamps), offset + count - 1)
        out.append((pos, len(data), offset, offset + count - 1, max(stamps)))
        offset += count
    return out


def _kafka_indexes(batches, base: int, interval: int) -> Tuple[bytes, bytes]:
    """Kafka's LogSegment.append rule, written out: the expected .index and .timeindex bytes."""
    index, tindex = b"", b""
    since = 0
    max_ts, max_off = -1, base
    last_time_ts = -1
    for pos, size, first, last, ts in batches:
        if ts > max_ts:
            max_ts, max_off = ts, last
        if since > interval:
            index += struct.pack(">ii", last - base, pos)
            if max_ts > last_time_ts:
                tindex += struct.pack(">qi", max_ts, max_off - base)
                last_time_ts = max_ts
            since = 0
        since += size
    return index, tindex


@pytest.mark.parametrize("interval", [0, 100, 1000, 4096])
@pytest.mark.parametrize("seed", [1, 2])
def test_index_entries_follow_kafkas_rule(tmp_path, interval: int, seed: int) -> None:
    io = FileIO()
    base = 1000
    seg = LogSegment(io, str(tmp_path), base, index_interval_bytes=interval)
    batches = _fill(seg, base, random.Random(seed), 60)
    seg.flush()
    want_index, want_time = _kafka_indexes(batches, base, interval)
    prefix = os.path.join(str(tmp_path), filename_prefix(base))
    assert open(prefix + ".index", "rb").read() == want_index
    assert open(prefix + ".timeindex", "rb").read() == want_time
    # The first append never creates an entry.
    if want_index:
        assert struct.unpack(">ii", want_index[:8])[1] > 0
    seg.close()


def test_recover_rebuilds_the_same_indexes(tmp_path) -> None:
    io = FileIO()
    seg = LogSegment(io, str(tmp_path), 0, index_interval_bytes=200)
    batches = _fill(seg, 0, random.Random(3), 80)
    seg.flush()
    prefix = os.path.join(str(tmp_path), filename_prefix(0))
    index, tindex = open(prefix + ".index", "rb").read(), open(prefix + ".timeindex", "rb").read()
    size = seg.size
    seg.close()
    os.unlink(prefix + ".index")
    with open(prefix + ".timeindex", "wb") as f:
        f.write(b"junk")
    seg = LogSegment(io, str(tmp_path), 0, index_interval_bytes=200)
    rec = seg.recover()
    assert (rec.valid_bytes, rec.truncated_bytes, rec.reason) == (size, 0, "")
    assert [(b.base_offset, b.last_offset) for b in rec.batches] == [(b[2], b[3]) for b in batches]
    seg.flush()
    assert open(prefix + ".index", "rb").read() == index
    assert open(prefix + ".timeindex", "rb").read() == tindex
    assert seg.max_timestamp_so_far == max(b[4] for b in batches)
    seg.close()


def test_translate_offset_matches_a_linear_scan(tmp_path) -> None:
    io = FileIO()
    seg = LogSegment(io, str(tmp_path), 500, index_interval_bytes=150)
    batches = _fill(seg, 500, random.Random(4), 70)
    last = batches[-1][3]
    for target in range(490, last + 3):
        want = next(((b[0], b[3]) for b in batches if b[3] >= target), None)
        assert seg.translate_offset(target) == want, target
    assert seg.next_offset() == last + 1
    seg.close()


def test_truncate_to_cuts_at_a_batch_boundary(tmp_path) -> None:
    io = FileIO()
    seg = LogSegment(io, str(tmp_path), 0, index_interval_bytes=100)
    batches = _fill(seg, 0, random.Random(5), 40)
    pos, size, first, last, _ = batches[20]
    target = first + (last - first) // 2 + (1 if last > first else 0)
    removed = seg.truncate_to(target)
    assert removed == batches[-1][0] + batches[-1][1] - pos
    assert seg.size == pos == os.path.getsize(seg.log_path)
    assert seg.next_offset() == first
    # Indexes hold nothing at or past the cut, and the max timestamp is that of what is left.
    for rel, p in struct.iter_unpack(">ii", bytes(seg.offset_index.data)):
        assert rel < target and p < pos
    assert seg.max_timestamp_so_far == max(b[4] for b in batches[:20])
    data = open(seg.log_path, "rb").read()
    assert [b.base_offset for b in scan(data).batches] == [b[2] for b in batches[:20]]
    assert seg.truncate_to(10**6) == 0
    seg.close()


def test_recover_stops_at_the_first_bad_batch(tmp_path) -> None:
    io = FileIO()
    seg = LogSegment(io, str(tmp_path), 0, index_interval_bytes=100)
    batches = _fill(seg, 0, random.Random(6), 10)
    seg.close()
    pos = batches[6][0]
    with open(os.path.join(str(tmp_path), filename_prefix(0) + ".log"), "r+b") as f:
        f.seek(pos + 30)  # inside the CRC-covered part of batch 6
        b = f.read(1)
        f.seek(pos + 30)
        f.write(bytes([b[0] ^ 0x40]))
    seg = LogSegment(io, str(tmp_path), 0, index_interval_bytes=100)
    rec = seg.recover()
    assert rec.valid_bytes == pos
    assert rec.truncated_bytes == batches[-1][0] + batches[-1][1] - pos
    assert rec.reason == "checksum mismatch"
    assert seg.next_offset() == batches[6][2]
    assert os.path.getsize(seg.log_path) == pos
    seg.close()


def test_recover_rejects_offsets_outside_the_segment(tmp_path) -> None:
    """A batch below the segment's base offset (e.g. a misnamed file) is not accepted."""
    io = FileIO()
    seg = LogSegment(io, str(tmp_path), 100, index_interval_bytes=100)
    good = encode_batch([b"a"], now_ms=0, base_offset=100)
    bad = encode_batch([b"b"], now_ms=0, base_offset=50)
    seg.append(good, 100, 0, 100)
    seg.io.pwrite(seg.fd, bytes(bad), len(good))
    seg.close()
    seg = LogSegment(io, str(tmp_path), 100, index_interval_bytes=100)
    rec = seg.recover()
    assert rec.valid_bytes == len(good) and rec.truncated_bytes == len(bad)
    assert "offset" in rec.reason
    seg.close()


def test_on_become_inactive_adds_the_final_time_entry(tmp_path) -> None:
    """Kafka force-appends (maxTimestampSoFar, offsetOfMaxTimestamp) when a segment is rolled."""
    io = FileIO()
    seg = LogSegment(io, str(tmp_path), 0, index_interval_bytes=4096)
    batches = _fill(seg, 0, random.Random(7), 3)  # too few bytes for any sparse entry
    assert len(seg.time_index) == 0
    seg.on_become_inactive()
    seg.flush()
    best = max(batches, key=lambda b: b[4])
    data = open(os.path.join(str(tmp_path), filename_prefix(0) + ".timeindex"), "rb").read()
    assert data == struct.pack(">qi", best[4], best[3])
    seg.on_become_inactive()  # idempotent
    assert len(seg.time_index) == 1
    seg.close()
