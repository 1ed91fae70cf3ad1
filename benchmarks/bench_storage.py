"""Storage benchmarks (issue 2, "Speed"): one callable per benchmark.

Run: ``.venv/bin/python -m pytest benchmarks --benchmark-only -q`` (or
``./dev bench``, which also runs ``benchmarks/compare.py``). Rounds are fixed
and modest (``benchmark.pedantic``) so the whole file takes a few minutes on
two cores. ``extra_info["bytes"]`` is the value payload handled per round
(for reopen and recovery: the log or tail size), so MB/s = bytes / time; the
run ends with a throughput table.

Every benchmark also asserts its result (counts, offsets, values), so a
fast wrong answer fails instead of being timed.
"""
from __future__ import annotations

import os
import random
from typing import Any, Iterator, List, Optional

import pytest

from benchdata import MiB, batched, build_log, make_values
from pylog import _native
from pylog.storage.log import Log


# ---------------------------------------------------------------- appending
@pytest.mark.parametrize("batch", [100, 1000])
@pytest.mark.parametrize("size", [100, 1000])
def test_append_batch(benchmark: Any, throughput: Any, new_log_path: Any, size: int, batch: int) -> None:
    """Batch append, no fsync (flush policy "never"): 8 MiB of values per round."""
    n = (8 * MiB // size) // batch * batch
    batches = batched(make_values(n, size), batch)
    log = Log.open(new_log_path())
    ends: List[int] = []

    def run() -> None:
        for b in batches:
            log.append(b)
        ends.append(log.log_end_offset)

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    throughput(n * size, n)
    try:
        assert ends == [n * (i + 1) for i in range(len(ends))]
    finally:
        log.close()


@pytest.mark.parametrize("batch", [1, 100, 1000])
def test_append_flush_every_append(benchmark: Any, throughput: Any, new_log_path: Any, batch: int) -> None:
    """flush_messages=1: every append is fsynced before it returns; 50 appends of 100-byte values per round."""
    appends = 50
    batches = batched(make_values(appends * batch, 100), batch)
    log = Log.open(new_log_path(), flush_messages=1)

    def run() -> None:
        for b in batches:
            log.append(b)

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    throughput(appends * batch * 100, appends * batch)
    try:
        assert log.recovery_point == log.log_end_offset == 4 * appends * batch
    finally:
        log.close()


# ------------------------------------------------------------------ reading
READ_PAYLOAD = 20 * MiB


def _read_all_records(log: Log) -> int:
    off, end, n = log.log_start_offset, log.log_end_offset, 0
    while off < end:
        recs = list(log.read(off, MiB))
        n += len(recs)
        off = recs[-1].offset + 1
    return n


def _read_all_values(log: Log) -> int:
    off, end, n = log.log_start_offset, log.log_end_offset, 0
    while off < end:
        batches = log.read_batches(off, MiB)
        for b in batches:
            n += len(b.values())
        off = batches[-1].last_offset + 1
    return n


@pytest.mark.parametrize("size", [100, 1000])
def test_read_records(benchmark: Any, throughput: Any, filled_log: Any, size: int) -> None:
    """Sequential read of the whole log into Record objects (log.read, 1 MiB at a time)."""
    n = READ_PAYLOAD // size
    log = Log.open(filled_log(n, size, 1000), read_only=True)
    try:
        got = benchmark.pedantic(_read_all_records, args=(log,), rounds=5, warmup_rounds=1)
        throughput(n * size, n)
        assert got == n
    finally:
        log.close()


@pytest.mark.parametrize("size", [100, 1000])
def test_read_zero_copy(benchmark: Any, throughput: Any, filled_log: Any, size: int) -> None:
    """Sequential read of the whole log as memoryviews (log.read_batches + RecordBatch.values())."""
    n = READ_PAYLOAD // size
    log = Log.open(filled_log(n, size, 1000), read_only=True)
    try:
        got = benchmark.pedantic(_read_all_values, args=(log,), rounds=5, warmup_rounds=1)
        throughput(n * size, n)
        assert got == n
    finally:
        log.close()


@pytest.mark.parametrize("batch", [10, 1000])
@pytest.mark.parametrize("method", ["get", "read"])
def test_random_reads(benchmark: Any, throughput: Any, filled_log: Any, method: str, batch: int) -> None:
    """10,000 reads of one record at a random offset (100,000 records of 100 bytes).

    ``get``: ``Log.get(offset)``, the point read. ``read``: ``next(Log.read(offset, 1))``,
    which decodes the whole batch holding the offset.
    """
    n, k = 100_000, 10_000
    values = make_values(n, 100)
    rnd = random.Random(7)
    offsets = [rnd.randrange(n) for _ in range(k)]
    log = Log.open(filled_log(n, 100, batch))

    def run() -> List[Optional[bytes]]:
        if method == "get":
            get = log.get
            return [get(o).value for o in offsets]
        read = log.read
        return [next(read(o, 1)).value for o in offsets]

    try:
        got = benchmark.pedantic(run, rounds=5 if method == "get" else 1, warmup_rounds=1 if method == "get" else 0)
        throughput(k * 100, k)
        assert [None if v is None else bytes(v) for v in got] == [values[o] for o in offsets]
    finally:
        log.close()


def _sqlite_copy(directory: str, values: List[bytes]) -> str:
    """The values in a SQLite table (id INTEGER PRIMARY KEY, v BLOB), WAL, as compare.py builds it."""
    import sqlite3

    path = os.path.join(directory, "peer.db")
    if not os.path.exists(path):
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
        conn.executemany("INSERT INTO t (v) VALUES (?)", [(v,) for v in values])
        conn.commit()
        conn.close()
    return path


@pytest.mark.parametrize("who", ["pylog", "sqlite"])
def test_random_reads_after_reopen(benchmark: Any, throughput: Any, filled_log: Any, who: str) -> None:
    """10,000 ``Log.get`` at random offsets of 100,000 records in batches of 1,000, each round on a freshly
    opened log (so every batch's CRC check and record anchors are paid inside the round), against
    SQLite primary-key lookups (``SELECT v FROM t WHERE id = ?``) on a fresh connection. Issue 18's
    goal: pylog >= 3x SQLite. Compare the two rows of one run (the machine is shared)."""
    import sqlite3

    n, k = 100_000, 10_000
    values = make_values(n, 100)
    rnd = random.Random(7)
    offsets = [rnd.randrange(n) for _ in range(k)]
    path = filled_log(n, 100, 1000)
    db = _sqlite_copy(os.path.dirname(path), values)
    handles: List[Any] = []

    def setup() -> Any:
        while handles:
            handles.pop().close()
        handles.append(Log.open(path) if who == "pylog" else sqlite3.connect(db))
        return (handles[0],), {}

    def run(h: Any) -> List[bytes]:
        if who == "pylog":
            get = h.get
            return [get(o).value for o in offsets]
        ex = h.execute
        return [ex("SELECT v FROM t WHERE id = ?", (o + 1,)).fetchone()[0] for o in offsets]

    try:
        got = benchmark.pedantic(run, setup=setup, rounds=5, warmup_rounds=1)
        throughput(k * 100, k)
        assert got == [values[o] for o in offsets]
    finally:
        while handles:
            handles.pop().close()


@pytest.fixture(scope="module")
def million_live_objects() -> Iterator[List[Any]]:
    """A million live objects the cycle collector tracks (as an application holding data would have):
    every older-generation collection during a benchmark scans them."""
    objs = [[i] for i in range(1_000_000)]
    yield objs
    del objs


@pytest.mark.parametrize("who", ["pylog", "sqlite"])
def test_read_records_with_live_objects(benchmark: Any, throughput: Any, filled_log: Any,
                                        million_live_objects: Any, who: str) -> None:
    """The whole log read into records that the caller keeps (``Log.read``, 1 MiB at a time, into
    ``Record`` objects; SQLite: ``SELECT v FROM t ORDER BY id`` with ``fetchmany(1000)`` rows), in a
    process that also holds a million live objects. Issue 18's goal: pylog >= 1.0x SQLite."""
    import sqlite3

    n = READ_PAYLOAD // 100
    path = filled_log(n, 100, 1000)
    db = _sqlite_copy(os.path.dirname(path), make_values(n, 100)) if who == "sqlite" else ""
    log = Log.open(path, read_only=True)
    conn = sqlite3.connect(db) if who == "sqlite" else None
    assert len(million_live_objects) == 1_000_000

    def run() -> int:
        kept: List[Any] = []
        if conn is None:
            off, end = log.log_start_offset, log.log_end_offset
            while off < end:
                recs = list(log.read(off, MiB))
                kept.append(recs)
                off = recs[-1].offset + 1
        else:
            cur = conn.execute("SELECT v FROM t ORDER BY id")
            while True:
                rows = cur.fetchmany(1000)
                if not rows:
                    break
                kept.append(rows)
        return sum(map(len, kept))

    try:
        got = benchmark.pedantic(run, rounds=5, warmup_rounds=1)
        throughput(n * 100, n)
        assert got == n
    finally:
        log.close()
        if conn is not None:
            conn.close()


# ------------------------------------------------------- reopen and recovery
@pytest.mark.parametrize("segment_mib", [1024, 16])
def test_reopen_clean(benchmark: Any, throughput: Any, filled_log: Any, segment_mib: int) -> None:
    """Log.open of a cleanly closed ~110 MB log (1,000,000 x 100 bytes): must scan nothing."""
    n = 1_000_000
    path = filled_log(n, 100, 1000, segment_mib * MiB)
    opened: List[Log] = []

    def teardown() -> None:
        while opened:
            opened.pop().close()

    def run() -> None:
        opened.append(Log.open(path, segment_bytes=segment_mib * MiB))

    benchmark.pedantic(run, teardown=teardown, rounds=10, warmup_rounds=1)
    log = Log.open(path, segment_bytes=segment_mib * MiB)
    try:
        throughput(log.size_in_bytes, 0)  # bytes: the log reopened
        benchmark.extra_info["segments"] = len(log.segments)
        assert log.recovery is not None and log.recovery.clean_shutdown and log.recovery.bytes_scanned == 0
        assert log.log_end_offset == n
    finally:
        log.close()


@pytest.mark.parametrize(
    "log_records,tail_records,segment_mib",
    [(100_000, 10_000, 1024), (100_000, 100_000, 1024), (1_000_000, 10_000, 1024), (1_000_000, 10_000, 16)],
)
def test_crash_recovery(
    benchmark: Any, throughput: Any, new_log_path: Any, log_records: int, tail_records: int, segment_mib: int
) -> None:
    """Reopen after abandon() (a killed process) with ``tail_records`` appended after the last flush().

    Recovery scans from the start of the segment holding the recovery point;
    with the default 1 GiB segments that is the whole log here, with 16 MiB
    segments at most one segment plus the tail (``extra_info["bytes_scanned"]``).
    """
    path = new_log_path()
    cfg = dict(segment_bytes=segment_mib * MiB, recovery_checkpoint_interval_ms=0)
    build_log(path, log_records, 100, 1000, **cfg)
    tail = batched(make_values(tail_records, 100, seed=11), 1000)
    opened: List[Log] = []
    expected: List[int] = []
    scanned: List[int] = []

    def setup() -> None:
        while opened:
            opened.pop().close()
        log = Log.open(path, **cfg)
        log.flush()  # recovery point = log end, checkpointed
        for b in tail:
            log.append(b)
        expected.append(log.log_end_offset)
        log.abandon()

    def run() -> None:
        log = Log.open(path, **cfg)
        opened.append(log)
        assert log.recovery is not None
        scanned.append(log.recovery.bytes_scanned)

    benchmark.pedantic(run, setup=setup, rounds=3, warmup_rounds=0)
    try:
        throughput(tail_records * 100, tail_records)
        benchmark.extra_info["bytes_scanned"] = max(scanned)
        assert opened[-1].log_end_offset == expected[-1]
        assert not opened[-1].recovery.clean_shutdown
    finally:
        while opened:
            opened.pop().close()


# ------------------------------------------------------------------ CRC32C
@pytest.mark.parametrize("path", ["dispatch", "table"])
def test_crc32c_1mib(benchmark: Any, throughput: Any, path: str) -> None:
    """CRC32C of a 1 MiB buffer: the run-time choice (CPU instruction when present) and the table path."""
    buf = random.Random(3).randbytes(MiB)
    fn = _native.crc32c if path == "dispatch" else _native.crc32c_table
    got = benchmark.pedantic(fn, args=(buf,), rounds=200 if path == "dispatch" else 20, iterations=5, warmup_rounds=2)
    throughput(MiB, 0)
    assert got == _native.crc32c_table(buf)
