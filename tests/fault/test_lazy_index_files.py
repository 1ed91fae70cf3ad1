"""Index files created lazily (issue 18, ``create_topic``): a new segment has only its ``.log``.

Its ``.index``/``.timeindex`` appear with the first index entry written or with the first flush of
the segment holding data (Kafka's LazyIndex). Random sequences of appends (small batches that make
no index entry, and large ones that do), reads by offset and by timestamp, rolls, truncations,
flushes, clean reopens and power losses (``SimulatedDiskIO.crash``) against a plain list of the
values, checking after every step:

* every record present is the one written, by offset and by timestamp;
* after a power loss the log ends exactly at its recovery point (unflushed bytes vanish, a
  truncation is kept; nothing flushed is lost), and every segment's index entries are entries a
  rebuild from the whole segment makes (nothing stale or torn is trusted);
* no index is rebuilt (a whole-segment scan) below the recovery point after a power loss, nor
  anywhere after a clean close: a flushed segment holding data has both index files, durably;
* a new segment has no index files (the laziness is real, so the rest tests it).
"""
from __future__ import annotations

import os
import random
from typing import List

import pytest

import pylog
from pylog.record import Record
from pylog.storage.fileio import SimulatedDiskIO
from pylog.storage.segment import LogSegment

INDEX_INTERVAL = 512


def _value(offset: int) -> bytes:
    return b"v%d-" % offset + bytes([offset % 251]) * (offset % 37)


def _ts(offset: int) -> int:
    return 1_000_000 + 10 * offset


def _open(path: str, disk: SimulatedDiskIO) -> pylog.Log:
    return pylog.Log.open(path, file_io=disk, clock_ms=lambda: 5_000, retention_ms=-1, segment_bytes=6_000,
                          index_interval_bytes=INDEX_INTERVAL, recovery_checkpoint_interval_ms=0)


def _check(log: pylog.Log, values: List[bytes]) -> None:
    assert log.log_start_offset == 0 and log.log_end_offset == len(values)
    for off in range(len(values)):
        r = log.get(off)
        assert r.offset == off and r.value == values[off] and r.timestamp == _ts(off), off
    got = [r.value for r in log.read(0, 1 << 30)] if values else []
    assert got == values
    for off in range(0, len(values), 7):  # timestamps grow with offsets: the first at or after is itself
        assert log.offset_for_time(_ts(off)) == off
    assert log.offset_for_time(_ts(len(values))) is None
    log._check()


def _no_index_files(seg: LogSegment) -> None:
    assert seg.size == 0 and not os.path.exists(seg.offset_index.path), seg
    assert not os.path.exists(seg.time_index.path), seg


def _entries(data: bytes, size: int) -> set:
    return {bytes(data[i:i + size]) for i in range(0, len(data), size)}


def _rebuild_agrees(log: pylog.Log) -> None:
    """Each segment's index entries are entries a scan of the whole segment makes (an index may lag:
    a sparse index missing its newest entries is still valid), and its size, max timestamp and next
    offset are the scan's. (A rolled segment's time index also holds its final max-timestamp entry,
    which a scan does not add: only the active one's time index is compared.)"""
    for seg in log.segments.values():
        active = seg is log.active_segment
        idx, tidx = bytes(seg.offset_index.data), bytes(seg.time_index.data)
        st = seg._state
        before = (seg.size, int(st.max_timestamp_so_far), seg.next_offset())
        seg.recover()
        st = seg._state
        assert (seg.size, int(st.max_timestamp_so_far), seg.next_offset()) == before, seg
        assert _entries(idx, 8) <= _entries(bytes(seg.offset_index.data), 8), seg
        if active:
            assert _entries(tidx, 12) <= _entries(bytes(seg.time_index.data), 12), seg


@pytest.mark.parametrize("seed", range(8))
def test_segments_without_index_files_read_roll_truncate_recover_and_survive_power_loss(
        tmp_path, monkeypatch, seed: int) -> None:
    rebuilt: List[int] = []  # base offsets of segments whose indexes were rebuilt by a scan
    real_recover = LogSegment.recover

    def recover(self: LogSegment, **kw: object) -> object:
        rebuilt.append(self.base_offset)
        return real_recover(self, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "recover", recover)
    rnd = random.Random(seed)
    disk = SimulatedDiskIO()
    path = str(tmp_path / "t-0")
    log = _open(path, disk)
    assert os.listdir(path) == ["00000000000000000000.log"]  # a new log: its directory and one .log
    values: List[bytes] = []
    flushed = 0  # the log end at the last flush (what a power loss keeps)
    for _step in range(40):
        op = rnd.choice(["small", "small", "large", "roll", "truncate", "flush", "reopen", "crash", "read"])
        if op in ("small", "large"):
            n = rnd.randint(1, 3) if op == "small" else rnd.randint(20, 60)
            start = len(values)
            new = [_value(start + i) for i in range(n)]
            log.append([Record(v, timestamp=_ts(start + i)) for i, v in enumerate(new)])
            values += new
        elif op == "roll":
            old = log.active_segment
            if log.roll() is not old:
                _no_index_files(log.active_segment)  # a new segment: its .log only
            flushed = len(values)  # a roll fsyncs the old segment and moves the recovery point
        elif op == "truncate" and values:
            to = rnd.randint(0, len(values))
            log.truncate_to(to)
            # a batch straddling the cut goes whole (as in Kafka): the log says where it ended
            del values[log.log_end_offset:]
            flushed = min(flushed, len(values))
        elif op == "flush":
            log.flush()
            flushed = len(values)
        elif op == "reopen":
            log.close()
            for seg_name in os.listdir(path):  # a cleanly closed segment with data has both indexes
                if seg_name.endswith(".log") and os.path.getsize(os.path.join(path, seg_name)):
                    assert os.path.exists(os.path.join(path, seg_name[:-4] + ".index")), seg_name
                    assert os.path.exists(os.path.join(path, seg_name[:-4] + ".timeindex")), seg_name
            rebuilt.clear()
            log = _open(path, disk)
            assert log.recovery is not None and log.recovery.clean_shutdown
            _check(log, values)
            assert rebuilt == [], f"a cleanly closed segment's index was rebuilt: {rebuilt}"
            flushed = len(values)
        elif op == "crash":
            durable = log.recovery_point  # a roll by an append moves it too
            assert durable >= flushed
            log.abandon()
            disk.crash()
            del values[durable:]
            rebuilt.clear()
            log = _open(path, disk)
            assert log.log_end_offset == durable  # unflushed bytes vanish, flushed ones are all there
            rp_base = log.segments.keys()[max(0, log.segments.bisect_right(log.recovery.recovery_point) - 1)]
            _check(log, values)
            below = [b for b in rebuilt if b < rp_base]
            assert below == [], f"indexes below the recovery point (segment {rp_base}) rebuilt: {below}"
            _rebuild_agrees(log)
            flushed = len(values)  # on the simulated disk what survived a crash counts as synced
        _check(log, values)
    log.close()
    with _open(path, SimulatedDiskIO()) as again:
        _check(again, values)


def test_a_new_partition_writes_one_file_and_its_untouched_close_fsyncs_no_segment(tmp_path) -> None:
    """Creating a partition: its directory and its ``.log``, nothing listed, read or written in it
    (no empty leader-epoch checkpoint, no index files); closing it untouched fsyncs none of its
    files, nor does closing it again after a clean reopen; after a power loss it is the same empty
    log. Then one append: the close fsyncs the ``.log`` (and the time index's final entry), makes
    both index files and syncs their names, and a power loss right after keeps the record with no index rebuilt."""
    disk = SimulatedDiskIO()
    path = str(tmp_path / "t-0")
    disk.reset_ops()
    log = _open(path, disk)
    in_dir = [(k, os.path.basename(p)) for k, p in disk.op_log if p.startswith(path)]
    assert in_dir == [("makedirs", "t-0"), ("open", "00000000000000000000.log"), ("fsync_dir", "t-0")], in_dir
    disk.reset_ops()
    log.close()
    assert [p for k, p in disk.op_log if k == "fsync" and p.startswith(path)] == [], disk.op_log
    for _ in range(2):
        disk.reset_ops()
        with _open(path, disk) as log:
            assert log.recovery is not None and log.recovery.clean_shutdown and log.log_end_offset == 0
        assert [p for k, p in disk.op_log if k == "fsync" and p.startswith(path)] == [], disk.op_log
    disk.crash()
    assert sorted(os.listdir(path)) == ["00000000000000000000.log"]
    log = _open(path, disk)
    log.append([Record(_value(0), timestamp=_ts(0))])
    disk.reset_ops()
    log.close()
    synced = sorted(os.path.basename(p) for k, p in disk.op_log if k == "fsync" and p.startswith(path))
    # the .log, and the time index with the final max-timestamp entry; the offset index is empty: no fsync
    assert synced == ["00000000000000000000.log", "00000000000000000000.timeindex"], synced
    assert ("fsync_dir", path) in disk.op_log
    disk.crash()
    assert {"00000000000000000000.index", "00000000000000000000.timeindex"} <= set(os.listdir(path))
    with _open(path, disk) as log:
        _check(log, [_value(0)])
