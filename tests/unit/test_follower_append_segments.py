"""A follower appends a fetch holding more than ``segment_bytes`` (it used to raise RecordTooLargeError)."""
from __future__ import annotations

import os

import pytest

import pylog
from pylog.errors import RecordTooLargeError
from pylog.record import encode_batch


def test_a_fetch_larger_than_a_segment_is_appended_across_segments(tmp_path) -> None:
    cfg = dict(segment_bytes=1024)
    with pylog.Log.open(os.path.join(tmp_path, "a", "t-0"), **cfg) as leader, \
            pylog.Log.open(os.path.join(tmp_path, "b", "t-0"), **cfg) as follower:
        for i in range(30):
            leader.append([b"%03d" % i + b"v" * 200, b"x"], leader_epoch=i // 10)
        data = leader.fetch(0, 1 << 20)
        assert len(data) > 3 * 1024
        res = follower.append_batches(data, assign_offsets=False)
        assert (res.base_offset, res.last_offset, res.records_count) == (0, 59, 60)
        assert res.max_timestamp == max(b.max_timestamp for b in leader.read_batches(0, 1 << 20))
        assert follower.log_end_offset == leader.log_end_offset == 60
        assert [(r.offset, r.value) for r in follower.read(0, 1 << 20)] == \
            [(r.offset, r.value) for r in leader.read(0, 1 << 20)]
        assert len(follower.segments) > 3 and all(s.size <= 1024 for s in follower.segments.values())
        assert follower.epochs.entries == leader.epochs.entries == [(0, 0), (1, 20), (2, 40)]
        follower._check()


def test_a_single_batch_larger_than_a_segment_is_still_refused(tmp_path) -> None:
    with pylog.Log.open(os.path.join(tmp_path, "t-0"), segment_bytes=1024) as log:
        big = encode_batch([b"v" * 2000], now_ms=0, base_offset=0)
        with pytest.raises(RecordTooLargeError):
            log.append_batches(big, assign_offsets=False)
        assert log.log_end_offset == 0
