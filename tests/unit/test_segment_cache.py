"""Bounded open segment files (issue 18 item 5; pylog/storage/segment_cache.py).

* a 10,000-segment log opens, reads every record and answers point reads with
  at most 300 descriptors (counted in /proc/self/fd), and none left after close;
* a released segment whose file was deleted, replaced or cut meanwhile raises a
  ``pylog.errors`` exception naming the file when it is next used;
* a segment with unflushed bytes is fsynced before its descriptor is released
  (a power loss right after keeps them), and an fsync failure there is raised
  with the segment left open;
* ``max_open_segments`` is validated and can be changed on an open log.

The property tests (concurrent readers, the LRU model) are in
tests/property/test_segment_lru_readers.py.
"""
from __future__ import annotations

import errno
import os
import sys
from typing import List

import pytest

import pylog
from pylog.errors import CorruptRecordError, InvalidConfigurationError, KafkaStorageError
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO, SimulatedDiskIO
from pylog.storage.logdir import CLEAN_SHUTDOWN_FILE, LOG_START_FILE, RECOVERY_POINT_FILE
from pylog.record import encode_batch
from pylog.storage.segment import LogSegment
from pylog.storage.segment_cache import DEFAULT_MAX_OPEN_SEGMENTS, SegmentCache

linux = pytest.mark.skipif(sys.platform != "linux", reason="counts /proc/self/fd")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _value(offset: int) -> bytes:
    return b"value-%d" % offset


def build_segments(root: str, n: int) -> str:
    """A cleanly shut down log ``t-0`` of ``n`` one-record segments, written directly (no
    roll per segment: 10,000 rolls with their fsyncs and checkpoints take a minute)."""
    part = os.path.join(root, "t-0")
    os.makedirs(part)
    for base in range(n):
        prefix = os.path.join(part, f"{base:020d}")
        with open(prefix + ".log", "wb") as f:
            f.write(encode_batch([_value(base)], now_ms=1_000_000 + base, base_offset=base))
        open(prefix + ".index", "wb").close()
        open(prefix + ".timeindex", "wb").close()
    io = FileIO()
    checkpoint.write_offsets(io, os.path.join(root, RECOVERY_POINT_FILE), {("t", 0): n})
    checkpoint.write_offsets(io, os.path.join(root, LOG_START_FILE), {("t", 0): 0})
    with open(os.path.join(root, CLEAN_SHUTDOWN_FILE), "wb") as f:
        f.write(b'{"version":0,"brokerEpoch":-1}')
    return part


@pytest.fixture(scope="module")
def ten_thousand(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_segments(str(tmp_path_factory.mktemp("many")), 10_000)


@linux
@pytest.mark.parametrize("read_only", [True, False])
def test_ten_thousand_segments_open_and_read_with_at_most_300_descriptors(ten_thousand: str, read_only: bool) -> None:
    n = 10_000
    part = ten_thousand
    before = _fds()
    log = pylog.Log.open(part, read_only=read_only, retention_ms=-1)
    try:
        assert len(log.segments) == n and log.log_end_offset == n
        peak = _fds() - before
        got = [r.value for r in log.read(0, max_bytes=1 << 30)]
        assert got == [_value(o) for o in range(n)]
        peak = max(peak, _fds() - before)
        for o in range(0, n, 37):  # point reads all over the log: each reopens a released segment
            assert log.get(o).value == _value(o)
        assert log.offset_for_time(1_000_000 + 9_000) == 9_000
        peak = max(peak, _fds() - before)
        assert peak <= 300, peak
        cache = log._segment_cache
        assert len(cache) <= DEFAULT_MAX_OPEN_SEGMENTS and cache.reopens > n
        cache._check()
    finally:
        log.close()
    assert _fds() == before  # every descriptor given back


def test_default_bound_is_a_few_hundred_descriptors() -> None:
    # at most three descriptors per open segment (.log, .index, .timeindex)
    assert pylog.storage.log.LogConfig().max_open_segments == DEFAULT_MAX_OPEN_SEGMENTS
    assert 3 * DEFAULT_MAX_OPEN_SEGMENTS <= 200


class NoSyncIO(FileIO):
    """Real files, no real fsyncs: rolls stay fast on a loaded machine (durability is checked
    with SimulatedDiskIO below)."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def _log_with_segments(path: str, segments: int, **cfg: object) -> pylog.Log:
    log = pylog.Log.open(path, segment_bytes=200, retention_ms=-1, max_open_segments=2, file_io=NoSyncIO(), **cfg)
    while len(log.segments) < segments:
        log.append([b"x" * 40 + b"%d" % log.log_end_offset])
    return log


def _released(log: pylog.Log) -> LogSegment:
    seg = log.segments.peekitem(0)[1]
    assert not log._segment_cache.is_open(seg) and seg._fd is None
    return seg


def test_a_deleted_released_segment_raises_kafka_storage_error_naming_it(tmp_path) -> None:
    with _log_with_segments(str(tmp_path / "t-0"), 4) as log:
        seg = _released(log)
        os.unlink(seg.log_path)
        with pytest.raises(KafkaStorageError, match="was removed") as err:
            log.get(0)
        assert seg.log_path in str(err.value) and err.value.errno == errno.ENOENT
        with pytest.raises(KafkaStorageError, match=seg.log_path):  # every later use too
            list(log.read(0))
        assert log.get(log.log_end_offset - 1)  # the other segments still read
        log._segment_cache._check()
        log.abandon()


def test_a_reader_whose_released_segment_the_writer_deleted_gets_offset_out_of_range(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    writer = _log_with_segments(path, 4)
    reader = pylog.Log.open(path, read_only=True, max_open_segments=2)
    try:
        seg = reader.segments.peekitem(0)[1]
        assert seg._fd is None  # listed first, released by the later ones
        writer.delete_records_before(writer.segments.keys()[1])  # retention: the first segment goes
        with pytest.raises(pylog.errors.OffsetOutOfRangeError, match="refresh") as err:
            list(reader.read(0))
        assert seg.log_path in str(err.value)
        reader.refresh()
        assert reader.log_start_offset == writer.log_start_offset
        assert [r.offset for r in reader.read(reader.log_start_offset)][0] == reader.log_start_offset
    finally:
        reader.close()
        writer.close()


def test_a_replaced_released_segment_raises_kafka_storage_error_naming_it(tmp_path) -> None:
    with _log_with_segments(str(tmp_path / "t-0"), 4) as log:
        seg = _released(log)
        with open(seg.log_path, "rb") as f:
            content = f.read()
        with open(seg.log_path + ".tmp", "wb") as f:  # the same bytes, another file, renamed over it
            f.write(content)
        os.replace(seg.log_path + ".tmp", seg.log_path)
        with pytest.raises(KafkaStorageError, match="replaced by another file") as err:
            log.get(0)
        assert seg.log_path in str(err.value)
        log.abandon()


def test_a_cut_released_segment_raises_corrupt_record_error_naming_it(tmp_path) -> None:
    with _log_with_segments(str(tmp_path / "t-0"), 4) as log:
        seg = _released(log)
        os.truncate(seg.log_path, seg.size - 10)
        with pytest.raises(CorruptRecordError, match="shrank") as err:
            log.get(0)
        assert err.value.path == seg.log_path and err.value.position == seg.size - 10
        log.abandon()


def test_a_renamed_segment_reopens_under_its_new_name(tmp_path) -> None:
    # the cleaner renames segments (.cleaned -> .swap -> live): the identity survives a rename
    with _log_with_segments(str(tmp_path / "t-0"), 4) as log:
        seg = _released(log)
        seg.change_suffix(".swap")
        assert log.get(0).value == b"x" * 40 + b"0"  # reopened: the renamed file
        assert seg._fd is not None and seg.log_path.endswith(".log.swap")
        seg.change_suffix("")


def test_release_fsyncs_a_segment_with_unflushed_bytes(tmp_path) -> None:
    io = SimulatedDiskIO()
    cache = SegmentCache(2)
    segs: List[LogSegment] = []
    data = encode_batch([b"unflushed"], now_ms=1, base_offset=0)
    a = LogSegment(io, str(tmp_path), 0, cache=cache)
    io.fsync_dir(str(tmp_path))
    a.append(data, 0, 1, 0)  # written, not fsynced
    fsyncs = io.fsyncs
    for base in (10, 20):  # the third segment evicts the least recently used: a
        segs.append(LogSegment(io, str(tmp_path), base, cache=cache))
        io.fsync_dir(str(tmp_path))
    assert not cache.is_open(a) and io.fsyncs > fsyncs
    for s in [a, *segs]:
        s.close()
    io.crash()  # power loss: only what was fsynced survives
    with open(a.log_path, "rb") as f:
        assert f.read() == bytes(data)


def test_a_failing_fsync_at_release_is_raised_and_the_segment_stays_open(tmp_path) -> None:
    io = SimulatedDiskIO()
    cache = SegmentCache(2)
    a = LogSegment(io, str(tmp_path), 0, cache=cache)
    a.append(encode_batch([b"unflushed"], now_ms=1, base_offset=0), 0, 1, 0)
    b = LogSegment(io, str(tmp_path), 10, cache=cache)
    io.fail_fsync_after = io.fsyncs
    with pytest.raises(OSError) as err:
        LogSegment(io, str(tmp_path), 20, cache=cache)
    assert err.value.errno == errno.ENOSPC
    assert cache.is_open(a) and a._fd is not None and a._dirty  # not released: nothing lost silently
    assert not os.path.exists(os.path.join(str(tmp_path), f"{20:020d}.log"))  # the new one created nothing
    io.heal()
    for s in (a, b):
        s.close()
    assert len(cache) == 0


def test_max_open_segments_is_validated_and_reconfigurable(tmp_path) -> None:
    for bad in (1, 0, "64", 2.5, True):
        with pytest.raises(InvalidConfigurationError, match="max_open_segments"):
            pylog.Log.open(str(tmp_path / "t-0"), max_open_segments=bad)
    log = pylog.Log.open(str(tmp_path / "t-1"), segment_bytes=200, retention_ms=-1, max_open_segments=10,
                         file_io=NoSyncIO())
    try:
        while len(log.segments) < 8:
            log.append([b"y" * 60])
        for o in range(log.log_end_offset):
            log.get(o)
        assert len(log._segment_cache) == 8
        log.reconfigure(log.config._replace(max_open_segments=3))
        assert len(log._segment_cache) == 3
        assert log.active_segment._fd is not None
        assert [r.value for r in log.read(0, 1 << 20)] == [b"y" * 60] * log.log_end_offset
        assert len(log._segment_cache) == 3
    finally:
        log.close()
