"""``Log.fetch``'s fast path (``Log._fetch_tail``) serves exactly what the general path serves.

The fast path answers a fetch from where a recent append started, to the log
end, straight from the active segment's map; every other fetch walks the
batches (``read_batches``). Model: the general path's answer, the join of
the whole batches ``read_batches(offset, max_bytes, max_offset=...,
verify_crc=False)`` returns. Appends of one or several batches (as a leader
and as a follower), truncations, rolls and retention are interleaved so that
the remembered append starts (``LogSegment.recent_starts``) go stale in
every way a log can change under them.
"""
from __future__ import annotations

import os
import tempfile
from typing import List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pylog
from pylog.errors import CorruptRecordError
from pylog.record import encode_batch, scan


def _general(log: pylog.Log, offset: int, max_bytes: int, max_offset) -> bytes:
    return b"".join(bytes(b.buffer) for b in log.read_batches(offset, max_bytes, max_offset=max_offset,
                                                              verify_crc=False))


def _batches(base: int, sizes: List[int]) -> bytes:
    """Encoded v2 batches with consecutive offsets from ``base`` (what a follower fetches)."""
    out = b""
    for i, size in enumerate(sizes):
        out += encode_batch([b"x" * size], now_ms=1000, base_offset=base + i, partition_leader_epoch=0)
    return out


op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(0, 900)),
    st.tuples(st.just("follow"), st.integers(1, 4), st.integers(0, 900)),
    st.tuples(st.just("fetch"), st.floats(0, 1), st.integers(1, 6000)),
    st.tuples(st.just("fetch_hw"), st.floats(0, 1), st.floats(0, 1)),
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("roll"), st.just(0.0), st.just(0)),
    st.tuples(st.just("delete_before"), st.floats(0, 1), st.just(0)),
)


@given(st.sampled_from([4096, 16384, 1 << 30]), st.lists(op, min_size=1, max_size=50))
def test_fetch_matches_the_general_path(segment_bytes: int, ops: List[Tuple]) -> None:
    with tempfile.TemporaryDirectory() as d:
        log = pylog.Log.open(os.path.join(d, "t-0"), segment_bytes=segment_bytes)
        starts: List[int] = [0]  # offsets where appends started (where the fast path may apply)
        for kind, a, b in ops:
            end = log.log_end_offset
            if kind == "append":
                res = log.append([b"v" * b] * a)
                starts.append(res.base_offset)
            elif kind == "follow":
                sizes = [b // (i + 1) for i in range(a)]
                if len(_batches(end, sizes)) <= segment_bytes:
                    log.append_batches(_batches(end, sizes), assign_offsets=False)
                    starts.append(end)
            elif kind == "truncate" and end > log.log_start_offset:
                log.truncate_to(log.log_start_offset + int(a * (end - log.log_start_offset)))
            elif kind == "roll" and end > log.active_segment.base_offset:
                log.roll()
            elif kind == "delete_before" and end:
                log.delete_records_before(min(end, log.log_start_offset + int(a * (end - log.log_start_offset))))
            elif kind in ("fetch", "fetch_hw"):
                cands = [s for s in starts if log.log_start_offset <= s <= log.log_end_offset]
                if not cands:
                    continue
                offset = cands[int(a * (len(cands) - 1))]
                if kind == "fetch":
                    max_bytes, max_offset = b, None
                else:
                    max_bytes, max_offset = 1 << 20, offset + int(b * (end - offset))
                want = _general(log, offset, max_bytes, max_offset) if offset < end else b""
                got = log.fetch(offset, max_bytes, max_offset=max_offset) if offset < end else b""
                assert got == want, (kind, offset, max_bytes, max_offset)
                if got:
                    found = scan(got)
                    assert found.batches[0].base_offset <= offset <= found.batches[0].last_offset
                    assert found.valid_bytes == len(got)
        log.close()


def test_a_fetch_at_a_recent_append_start_takes_the_fast_path(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path serves the follower's usual fetch (no walk of the segments); a fetch from a batch
    it does not remember, or one stopped below the log end, goes the general way."""
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"))
    for i in range(5):
        log.append([b"value-%d" % i, b"more"])
    calls: List[int] = []
    real = log._read_spans
    monkeypatch.setattr(log, "_read_spans", lambda off, *a: calls.append(off) or real(off, *a))

    def fetch(offset: int, max_bytes: int = 1 << 20, max_offset=None) -> bytes:
        calls.clear()
        got = log.fetch(offset, max_bytes, max_offset=max_offset)
        general = bool(calls)
        assert got == _general(log, offset, max_bytes, max_offset)  # (the model reads through _read_spans too)
        return general

    assert not fetch(6)  # the fast path
    assert not fetch(0)
    assert fetch(7)  # inside a batch: not a remembered start
    assert fetch(4, max_offset=8)  # stopped below the log end
    assert fetch(2, max_bytes=10)  # more than max_bytes to the end
    log.close()


def test_stale_starts_after_a_truncation_are_never_served(tmp_path) -> None:
    """Truncate, then append batches of other sizes over the same offsets: a remembered position
    from before the truncation would point into the middle of a batch."""
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"))
    for i in range(6):
        log.append([b"a" * 50] * 2)  # offsets 0-11, a batch every 2 offsets
    log.truncate_to(4)
    assert log.active_segment.recent_starts == {}
    log.append([b"b" * 7] * 3)  # 4-6
    log.append([b"c" * 300])  # 7
    log.append([b"d"] * 4)  # 8-11
    for off in (4, 7, 8):
        assert log.fetch(off) == _general(log, off, 1 << 20, None)
        assert scan(log.fetch(off)).batches[0].base_offset == off
    log.close()


def test_the_fast_path_still_refuses_damaged_framing(tmp_path) -> None:
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"))
    for i in range(4):
        log.append([b"value-%d" % i])
    (batch,) = [b for b in log.read_batches(0) if b.base_offset == 2]
    with open(batch.path, "r+b") as f:  # the magic byte of the batch at offset 2
        f.seek(batch.info.position + 16)
        f.write(b"\x07")
    assert 1 in log.active_segment.recent_starts
    with pytest.raises(CorruptRecordError):
        log.fetch(2)
    assert scan(log.fetch(1)).batches[0].base_offset == 1  # stops before the damaged batch
    assert len(scan(log.fetch(1)).batches) == 1
    log.close()


def test_a_rolled_segment_forgets_its_starts(tmp_path) -> None:
    """Only the active segment serves the fast path; a rolled one keeps no starts (no memory
    held per segment of a long log), and fetches from it still answer across the roll."""
    log = pylog.Log.open(os.path.join(tmp_path, "t-0"))
    for i in range(3):
        log.append([b"value-%d" % i])
    old = log.active_segment
    assert set(old.recent_starts) == {0, 1, 2}
    log.roll()
    log.append([b"value-3"])
    assert old.recent_starts == {} and set(log.active_segment.recent_starts) == {3}
    assert [b.base_offset for b in scan(log.fetch(1)).batches] == [1, 2, 3]
    assert log.fetch(1) == _general(log, 1, 1 << 20, None)
    log.close()
