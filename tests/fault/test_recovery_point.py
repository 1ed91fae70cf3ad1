"""Recovery from the recovery point (issue 18): after a crash, the segment holding the recovery point is
scanned from its offset-index entry at or below the recovery point, not from its first byte.

Power loss through SimulatedDiskIO (unsynced bytes vanish), plus torn tails written by hand (zeros and
garbage past the recovery point in the ``.log`` and both indexes, as a real disk may leave): nothing
acknowledged-and-flushed is lost, nothing torn is read, and the rebuilt indexes and segment state are
exactly what a scan of the whole segment gives.
"""
from __future__ import annotations

import os
import random

import pytest

import pylog
from pylog.storage.fileio import SimulatedDiskIO


def _value(offset: int) -> bytes:
    return b"value-%d-" % offset + bytes([offset % 251]) * (offset % 97)


def _open(path: str, disk: SimulatedDiskIO, **cfg: object) -> pylog.Log:
    return pylog.Log.open(path, file_io=disk, clock_ms=lambda: 1_000, retention_ms=-1,
                          segment_bytes=1 << 20, index_interval_bytes=256,
                          recovery_checkpoint_interval_ms=0, **cfg)  # flush() checkpoints the recovery point


def _fill(log: pylog.Log, batches: int, rnd: random.Random) -> None:
    for _ in range(batches):
        start = log.log_end_offset
        log.append([_value(start + i) for i in range(rnd.randint(1, 6))])


def _check_values(log: pylog.Log) -> None:
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        recs = list(log.read(offset))
        assert recs and recs[0].offset == offset
        for r in recs:
            assert r.offset == offset and r.value == _value(offset), offset
            offset += 1


def _segment_state(seg) -> tuple:
    st = seg._state
    return (bytes(seg.offset_index.data), bytes(seg.time_index.data), seg.size, int(st.max_timestamp_so_far),
            int(st.offset_of_max_timestamp), int(st.last_index_offset), int(st.last_time_index_timestamp),
            int(st.last_time_index_offset), seg.next_offset())


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tear", [None, "zeros", "garbage"])
def test_recovery_starts_at_the_index_entry_below_the_recovery_point(tmp_path, seed: int, tear) -> None:
    rnd = random.Random(seed)
    disk = SimulatedDiskIO()
    path = str(tmp_path / "t-0")
    log = _open(path, disk)
    _fill(log, rnd.randint(80, 160), rnd)
    log.flush()  # the recovery point: the middle of the one segment
    flushed = log.log_end_offset
    _fill(log, rnd.randint(1, 60), rnd)  # unflushed: may vanish
    log.abandon()
    disk.crash()
    seg_log = os.path.join(path, "00000000000000000000.log")
    if tear is not None:  # a torn write past the recovery point: the files grew but hold no valid bytes
        junk = (bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 600))) if tear == "garbage"
                else bytes(rnd.randint(1, 600)))
        for name, n in ((seg_log, len(junk)), (seg_log[:-4] + ".index", 8 * rnd.randint(1, 9)),
                        (seg_log[:-4] + ".timeindex", 12 * rnd.randint(1, 9))):
            with open(name, "ab") as f:
                f.write(junk[:n] if tear == "garbage" else bytes(n))
    size = os.path.getsize(seg_log)
    log = _open(path, disk)
    rec = log.recovery
    assert rec is not None and not rec.clean_shutdown and rec.recovery_point == flushed
    assert log.log_end_offset >= flushed  # nothing acknowledged-and-flushed lost
    assert 0 < rec.bytes_scanned < size, (rec.bytes_scanned, size)  # started mid-segment
    _check_values(log)  # nothing torn read: every record present is the one written
    log._check()
    seg = log.active_segment
    got = _segment_state(seg)
    seg.recover()  # the whole segment, from byte 0: the same indexes and state
    assert _segment_state(seg) == got
    _fill(log, 5, rnd)  # and the log goes on from there
    _check_values(log)
    log.close()


def test_an_index_entry_that_does_not_match_the_log_is_not_trusted(tmp_path) -> None:
    """The newest index entry below the recovery point is checked against the batch it names: a wrong
    one (here: its position moved by one byte, inside a batch) is skipped - the scan starts at the entry
    before it - and nothing is cut."""
    rnd = random.Random(7)
    disk = SimulatedDiskIO()
    path = str(tmp_path / "t-0")
    log = _open(path, disk)
    _fill(log, 120, rnd)
    log.flush()
    flushed = log.log_end_offset
    _fill(log, 10, rnd)
    log.abandon()
    disk.crash()
    seg_log = os.path.join(path, "00000000000000000000.log")
    index = seg_log[:-4] + ".index"
    with open(index, "r+b") as f:
        data = bytearray(f.read())
        for k in range(len(data) // 8 - 1, 0, -1):  # the newest entry below the recovery point: one byte on
            rel, pos = int.from_bytes(data[8 * k: 8 * k + 4], "big"), int.from_bytes(data[8 * k + 4: 8 * k + 8], "big")
            if rel < flushed:
                data[8 * k + 4: 8 * k + 8] = (pos + 1).to_bytes(4, "big")
                previous = int.from_bytes(data[8 * k - 4: 8 * k], "big")
                break
        f.seek(0)
        f.write(data)
    size = os.path.getsize(seg_log)
    log = _open(path, disk)
    assert log.recovery.bytes_scanned == size - previous  # from the entry before the wrong one
    assert log.log_end_offset >= flushed and not log.recovery.truncated_at
    _check_values(log)
    log._check()
    seg = log.active_segment
    got = _segment_state(seg)
    seg.recover()
    assert _segment_state(seg) == got  # the wrong entry was replaced by the right one
    log.close()
