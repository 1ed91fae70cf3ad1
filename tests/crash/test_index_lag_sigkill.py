"""A writer SIGKILLed while its index files lag its log (entries written behind, pylog/storage/index.py).

The writer appends without a flush policy, with a small index interval and
large segments, so that at the kill the active segment's ``.index`` and
``.timeindex`` hold only part of the entries the log calls for (the rest were
in the dead process's memory). Then:

* a reader (``read_only``, no recovery, as a Spark executor or a second
  process opens a live directory) loads the lagging index files as they are
  and reads every returned record at its offset;
* the writer's reopen recovers and reads every record; after its clean close
  the index files are byte for byte those a full rebuild from the log gives.
"""
from __future__ import annotations

import os
import random
import shutil
import textwrap
from typing import List, Tuple

import pylog
from killed_writer import kill_after_lines
from pylog.storage.index import PENDING_ENTRIES

CONFIG = dict(segment_bytes=1 << 20, index_interval_bytes=64)
WRITER = textwrap.dedent(
    """
    import random, sys
    import pylog
    CONFIG = dict(segment_bytes=1 << 20, index_interval_bytes=64)
    path, seed = sys.argv[1], int(sys.argv[2])
    rnd = random.Random(seed)
    log = pylog.Log.open(path, **CONFIG)
    out = sys.stdout
    while True:
        n = rnd.randint(1, 4)
        start = log.log_end_offset
        res = log.append([pylog.Record(value=b"rec-%d-" % (start + i) + b"x" * rnd.randint(0, 120))
                          for i in range(n)])
        out.write("%d %d\\n" % (res.base_offset, res.last_offset))
        out.flush()
    """
)


def _kill_after(path: str, seed: int, appends: int) -> List[Tuple[int, int]]:
    return [(base, last) for base, last in kill_after_lines(WRITER, [path, str(seed)], appends)]


def _read_all(log: pylog.Log, end: int) -> None:
    offset = log.log_start_offset
    while offset < end:
        recs = list(log.read(offset))
        assert recs and recs[0].offset == offset, offset
        for r in recs:
            if r.offset >= end:
                break
            assert r.offset == offset and r.value.startswith(b"rec-%d-" % offset), (offset, r.value[:20])
            offset += 1


def _index_files(path: str) -> dict:
    out = {}
    for n in sorted(os.listdir(path)):
        if n.endswith((".index", ".timeindex")):
            with open(os.path.join(path, n), "rb") as f:
                out[n] = f.read()
    return out


def test_sigkill_with_lagging_index_files(tmp_path) -> None:
    rnd = random.Random(20261122)
    lagged = 0
    for r in range(4):
        # A fresh directory each round: the killed writer built its indexes from empty, as a
        # rebuild does (a writer reopening a segment restarts Kafka's bytes-since-last-entry
        # count, so its later entries can differ from a rebuild's).
        path = str(tmp_path / f"round{r}" / "lag-0")
        os.makedirs(path)
        acked = _kill_after(path, rnd.randrange(1 << 30), rnd.randint(300, 700))
        end = acked[-1][1] + 1
        on_disk = _index_files(path)

        reader = pylog.Log.open(path, read_only=True, **CONFIG)
        assert reader.log_end_offset >= end
        _read_all(reader, end)
        # Every offset is found through the lagging index (lookups start at an earlier entry).
        for off in rnd.sample(range(end), 50):
            assert next(iter(reader.read(off, max_bytes=1))).offset == off
        reader.close()

        log = pylog.Log.open(path, **CONFIG)
        log._check()
        assert not log.recovery.clean_shutdown
        assert log.log_end_offset >= end
        _read_all(log, end)
        log.close()
        rebuilt_from = _index_files(path)
        # What the killed writer left was a whole-entry prefix of the full index, short by at
        # most PENDING_ENTRIES entries.
        for name, data in on_disk.items():
            full = rebuilt_from[name]
            size = 8 if name.endswith(".index") else 12
            assert full.startswith(data) and len(data) % size == 0, name
            assert len(full) - len(data) <= PENDING_ENTRIES * size, name
            lagged += len(full) > len(data)

        # The clean close left the indexes a full rebuild gives.
        copy = str(tmp_path / f"copy{r}" / "lag-0")
        shutil.copytree(path, copy)
        for name in _index_files(copy):
            os.unlink(os.path.join(copy, name))
        rebuilt = pylog.Log.open(copy, **CONFIG)
        for seg in rebuilt.segments.values():
            seg.ensure_indexes()
        rebuilt.close()
        assert _index_files(copy) == rebuilt_from
    assert lagged, "the index files never lagged the log at a kill: the test did not test anything"
