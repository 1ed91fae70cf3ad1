"""A read-only reader in another process while this process compacts the log it reads.

The writer appends keyed records (key ``k<offset % 7>``, value ``v<offset>``),
rolls, and cleans over and over; the reader calls ``refresh()`` in a loop and
reads everything. Whatever moment of a segment swap the reader lands on, it
must see a consistent log: every record it reads is exactly the one written
at that offset, offsets strictly increase, and for every key the latest
record below the log end it saw is there (compaction never removes it, so a
reader that missed one would have seen a segment vanish mid-swap).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pylog
from pylog.storage.cleaner import Cleaner

K = 7

READER = """
    import json, sys, pylog
    K = 7
    path, want = sys.argv[1], int(sys.argv[2])
    log = pylog.Log.open(path, read_only=True)
    reads = 0
    while True:
        log.refresh()
        end = log.log_end_offset
        got = {}
        last = -1
        off = log.log_start_offset
        while off < end:
            batches = log.read_batches(off, 1 << 16)
            if not batches:
                break
            for b in batches:
                for r in b.records():
                    assert r.offset > last, ("not increasing", r.offset, last)
                    last = r.offset
                    assert r.key == b"k%d" % (r.offset % K) and r.value == b"v%d" % r.offset, (r.offset, r.key, r.value)
                    got[r.offset] = r.value
                off = b.last_offset + 1
        for k in range(K):
            latest = max((o for o in range(max(0, end - K), end) if o % K == k), default=None)
            if latest is not None and latest >= log.log_start_offset:
                assert latest in got, ("latest record of key", k, "at", latest, "missing; end", end, sorted(got)[-20:])
        reads += 1
        if end >= want:
            break
    print(json.dumps({"reads": reads, "end": end}))
"""


def test_reader_sees_a_consistent_log_while_the_writer_compacts(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    log = pylog.Log.open(path, cleanup_policy="compact", retention_ms=-1, segment_bytes=1024,
                         index_interval_bytes=128)
    final = 6000
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(READER), path, str(final)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cleaner = Cleaner()
    cleans = 0
    try:
        while log.log_end_offset < final:
            start = log.log_end_offset
            n = min(5, final - start)
            log.append([pylog.Record(b"v%d" % o, key=b"k%d" % (o % K)) for o in range(start, start + n)])
            if log.log_end_offset % 100 < 5:
                cleans += cleaner.clean(log, log.clock_ms(), force=True).cleaned
        log.roll()
        out, err = reader.communicate(timeout=300)
    finally:
        if reader.poll() is None:
            reader.kill()
        log.close()
    assert reader.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result["end"] >= final and result["reads"] > 1
    assert cleans > 10
