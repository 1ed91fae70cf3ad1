"""The writer's map of the active segment (LogSegment._mapped): headroom, correctness, bounds.

The map is made with room past the end of the file and made again only when
the file outgrows it (doubling, bounded by the segment size), so reads of
bytes appended after the map was made - the unflushed tail - go through a
shared mapping of the page cache. Model: the bytes appended so far (and the
records they hold); every read must return exactly those bytes and records,
never anything past the logical end.
"""
from __future__ import annotations

import mmap
import os
import tempfile
from typing import List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pylog
from pylog.storage import segment as segment_mod
from pylog.record import scan


@pytest.fixture(autouse=True)
def _small_headroom(monkeypatch: pytest.MonkeyPatch) -> None:
    # One page of minimum headroom, so small tests outgrow and remap the map many times.
    monkeypatch.setattr(segment_mod, "MAP_MIN_BYTES", mmap.PAGESIZE)


def _file_bytes(seg) -> bytes:
    with open(seg.log_path, "rb") as f:
        return f.read()


op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 6), st.integers(0, 700)),
    st.tuples(st.just("read"), st.floats(0, 1), st.integers(1, 5000)),
    st.tuples(st.just("get"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("fetch"), st.floats(0, 1), st.integers(1, 5000)),
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
)


@given(st.sampled_from([8192, 32768, 1 << 30]), st.lists(op, min_size=1, max_size=40))
def test_interleaved_appends_and_reads_return_what_was_appended(segment_bytes: int, ops: List[Tuple]) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = pylog.Log.open(os.path.join(d, "t-0"), segment_bytes=segment_bytes)
        values: List[bytes] = []  # the model: values[offset]
        n = 0
        for kind, a, b in ops:
            if kind == "append":
                batch = [(b"%d:" % (n + i)) + bytes([(n + i) % 251]) * b for i in range(a)]
                log.append(batch)
                values += batch
                n += a
            elif kind == "truncate" and n:
                cut = int(a * n)
                log.truncate_to(cut)
                n = log.log_end_offset  # whole batches go
                del values[n:]
            elif kind in ("read", "get", "fetch") and n:
                off = min(int(a * n), n - 1)
                if kind == "get":
                    assert log.get(off).value == values[off]
                elif kind == "read":
                    assert [(r.offset, r.value) for r in log.read(off, b)] == \
                        [(o, values[o]) for o in range(off, off + len(list(log.read(off, b))))]
                    assert [r.value for r in log.read(off, 1 << 30)] == values[off:]
                else:
                    data = log.fetch(off, b)
                    res = scan(data, verify_crc=True)
                    assert res.valid_bytes == len(data) and res.batches
                    assert res.batches[0].base_offset <= off <= res.batches[0].last_offset
            # The active segment through its map: exactly the file's bytes, nothing past the end.
            seg = log.active_segment
            disk = _file_bytes(seg)
            assert seg.size == len(disk)
            for pos in sorted({0, len(disk) // 3, len(disk) // 2, max(0, len(disk) - 1), len(disk)}):
                assert seg.read(pos, 1 << 30) == disk[pos:]
                assert seg.read(pos, 7) == disk[pos : pos + 7]
            if seg._map_ptr is not None:
                assert seg._map_len >= seg.size
                if seg.map_limit is not None:
                    assert seg._map_len <= max(seg.map_limit, seg.size) + mmap.PAGESIZE
            log._check()
        if n:
            assert [r.value for r in log.read(log.log_start_offset, 1 << 30)] == values
        log.close()


def test_appends_do_not_remap_the_active_segment_each_time(tmp_path) -> None:
    """Before: every read after an append unmapped and mapped the whole file again."""
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"))
    value = b"x" * 100
    for i in range(3000):
        off = log.log_end_offset
        log.append([value])
        assert [r.value for r in log.read(off)] == [value]  # the unflushed tail, through the map
    seg = log.active_segment
    assert seg.size > 16 * mmap.PAGESIZE
    # One map per doubling of the file past the first page: a handful, not one per append.
    assert seg.maps_made <= (seg.size // mmap.PAGESIZE).bit_length() + 1
    log.close()


def test_the_map_is_bounded_by_the_segment_size(tmp_path) -> None:
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"), segment_bytes=3 * mmap.PAGESIZE)
    for i in range(200):
        log.append([b"y" * 200])
        log.get(log.log_end_offset - 1)
        seg = log.active_segment
        assert seg._map_len <= max(3 * mmap.PAGESIZE, seg.size) + mmap.PAGESIZE
    assert len(log.segments) > 3
    log.close()
