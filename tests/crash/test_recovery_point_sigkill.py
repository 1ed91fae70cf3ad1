"""kill -9 in the middle of a segment: recovery starts at the index entry at or below the recovery point
(issue 18), and every returned append survives with its bytes intact.

The child appends to a log with 1 MB segments, flushing (fsync, recovery-point checkpoint) every few
appends, and prints ``base last`` for each append that returned; the parent kills it with SIGKILL after a
random number of them, reopens the log and checks that every returned record is there and holds exactly
what was written, that the recovery scanned only the tail of the segment (from the index entry below
the recovery point), that every index entry names the batch ending at its offset, and that the segment
state it rebuilt is that of a whole-segment scan.
Rounds reuse the directory, so each round also recovers from the previous kill.
"""
from __future__ import annotations

import os
import random
import textwrap
from typing import Dict

import pylog
from killed_writer import kill_after_lines

WRITER = textwrap.dedent(
    """
    import random, sys
    import pylog
    path, seed = sys.argv[1], int(sys.argv[2])
    rnd = random.Random(seed)
    log = pylog.Log.open(path, segment_bytes=1 << 20, index_interval_bytes=512, recovery_checkpoint_interval_ms=0)
    out = sys.stdout
    k = 0
    while True:
        n = rnd.randint(1, 8)
        start = log.log_end_offset
        res = log.append([pylog.Record(value=b"rec-%d-" % (start + i) + b"x" * rnd.randint(0, 300))
                          for i in range(n)])
        k += 1
        if k % 7 == 0:
            log.flush()
        out.write("%d %d\\n" % (res.base_offset, res.last_offset))
        out.flush()
    """
)


def _state(seg) -> tuple:
    """What a whole-segment scan must agree with. (The index entries themselves may differ: a writer that
    reopens the log starts counting index bytes afresh, so its entries need not fall where one scan of
    the whole segment puts them; each must still name the batch that ends at its offset.)"""
    st = seg._state
    return seg.size, int(st.max_timestamp_so_far), int(st.offset_of_max_timestamp), seg.next_offset()


def _assert_index_valid(seg) -> None:
    data = bytes(seg.offset_index.data)
    for i in range(0, len(data), 8):
        rel, pos = int.from_bytes(data[i:i + 4], "big"), int.from_bytes(data[i + 4:i + 8], "big")
        assert seg.translate_offset(seg.base_offset + rel) == (pos, seg.base_offset + rel), (rel, pos)


def test_sigkill_mid_segment_recovers_from_the_recovery_point(tmp_path) -> None:
    rnd = random.Random(20261125)
    path = str(tmp_path / "mid-0")
    acked: Dict[int, int] = {}
    partial = 0
    for _ in range(6):
        for base, last in kill_after_lines(WRITER, [path, str(rnd.randrange(1 << 30))], rnd.randint(30, 120)):
            acked[base] = last
        log = pylog.Log.open(path, segment_bytes=1 << 20, index_interval_bytes=512)
        rec = log.recovery
        assert rec is not None and not rec.clean_shutdown
        log._check()
        for base, last in acked.items():  # the page cache outlives the process: every returned append
            assert last < log.log_end_offset, f"returned offsets {base}..{last} lost (log end {log.log_end_offset})"
        offset = log.log_start_offset
        while offset < log.log_end_offset:  # nothing torn read: every record is the one written
            recs = list(log.read(offset))
            assert recs and recs[0].offset == offset
            for r in recs:
                assert r.offset == offset and r.value.startswith(b"rec-%d-" % offset), (offset, r.value[:20])
                offset += 1
        seg = log.segments.peekitem(log.segments.bisect_right(rec.recovery_point) - 1)[1]
        if rec.bytes_scanned < seg.size:
            partial += 1
        _assert_index_valid(seg)
        got = _state(seg)
        seg.recover()  # the whole segment from byte 0 gives the same state
        assert _state(seg) == got
        log.close()
    assert partial >= 3, partial  # the recovery point was mid-segment: the scan started there
    assert len([n for n in os.listdir(path) if n.endswith(".log")]) == 1  # all in one segment
