#!/usr/bin/env python3
"""pylog against its peers on the same generated data, in one process run.

Prints one table: absolute rates for pylog and each peer, the ratio, the
target from issue 2 ("Speed") and whether it is MET. The peers are

* a raw Python ``BufferedWriter`` (``open(path, "wb")``) writing each value as
  a 4-byte big-endian length followed by the value (one ``write`` per value,
  the faster of the two obvious loops on this machine), then ``flush()`` and
  one ``os.fsync``;
* (information only) the kernel's floor for the same bytes: the writer's
  file content prepared before the timer in chunks of ``--batch`` values,
  one ``os.write`` per chunk, then one ``os.fsync`` - what no Python writer
  can beat;
* SQLite through the standard ``sqlite3`` module: ``CREATE TABLE t (id INTEGER
  PRIMARY KEY, v BLOB)``, ``journal_mode=WAL``, ``synchronous=NORMAL``, rows
  inserted with one ``executemany`` in one transaction; reads are ``SELECT v
  FROM t ORDER BY id`` fetched 1,000 rows at a time, and point lookups
  ``SELECT v FROM t WHERE id = ?``.

Every figure is the best of ``--repeat`` runs (wall clock, ``perf_counter``);
pylog and its peers take turns run by run, so a busy moment on a shared
machine does not land on one contender only.
Data is ``--records`` values of ``--value-size`` random bytes (seeded), kept
in memory before any timer starts. The timed pylog append is the whole life
of a log (issue 18): ``Log.open`` of a new partition directory, ``append`` of
lists of ``--batch`` values (flush policy "never": no fsync between appends),
``close()`` (fsync of the segment and its indexes, the checkpoints, the
clean-shutdown marker) - against the writer's loop plus its one fsync.
SQLite's ``executemany`` runs in one transaction (``synchronous=NORMAL``: its
WAL checkpoint does its own syncs). Reads come from the page cache: this
measures CPU cost, not the disk.

Each result row is also checked for correctness outside the timer (same
count, same values), so a fast wrong answer cannot pass.

Usage::

    .venv/bin/python benchmarks/compare.py                    # the full run (1,000,000 records, 1 GB reopen log)
    .venv/bin/python benchmarks/compare.py --records 100000 --reopen-bytes 200000000   # a quick run
    .venv/bin/python benchmarks/compare.py --json results.json
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pylog
from pylog import _native
from pylog.storage.log import Log

MiB = 1 << 20
GiB = 1 << 30


# --------------------------------------------------------------------- helpers
def best_of(repeat: int, run: Callable[[], Any], setup: Optional[Callable[[], Any]] = None) -> Tuple[float, Any]:
    """Run ``setup`` (untimed) then ``run`` (timed) ``repeat`` times; the fastest time and its result."""
    best = float("inf")
    result: Any = None
    for _ in range(repeat):
        arg = setup() if setup is not None else None
        gc.collect()
        t0 = time.perf_counter()
        out = run() if arg is None else run(arg)
        dt = time.perf_counter() - t0
        if dt < best:
            best, result = dt, out
    return best, result


def interleaved(repeat: int, contenders: Dict[str, Tuple[Callable[..., Any], Optional[Callable[[], Any]]]]
                ) -> Dict[str, Tuple[float, Any]]:
    """Best time of each contender over ``repeat`` rounds, taking turns (A, B, C, A, B, C, ...).

    Taking turns spreads the noise of a shared machine over every contender
    instead of letting a busy minute land on one of them. Each entry is
    ``(run, setup)``: ``setup`` (untimed, may be None) returns the argument
    passed to ``run``. The result kept is that of the last round.
    """
    best: Dict[str, Tuple[float, Any]] = {}
    for _ in range(repeat):
        for name, (fn, setup) in contenders.items():
            arg = setup() if setup is not None else None
            gc.collect()
            t0 = time.perf_counter()
            out = fn() if setup is None else fn(arg)
            dt = time.perf_counter() - t0
            prev = best.get(name, (float("inf"), None))[0]
            best[name] = (min(prev, dt), out)
    return best


def make_values(n: int, size: int, seed: int) -> List[bytes]:
    """``n`` distinct values of ``size`` random bytes, the same for every peer."""
    blob = random.Random(seed).randbytes(n * size)
    return [blob[i * size : (i + 1) * size] for i in range(n)]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M/s"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k/s"
    return f"{x:.0f} /s"


def open_log(path: str, **cfg: Any) -> Log:
    return Log.open(path, **cfg)


def fresh_dir(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


# ----------------------------------------------------------------- the peers
def pylog_append(path: str, batches: Sequence[List[bytes]]) -> int:
    """Log.open of a new partition directory, the appends, close(): the log's whole life."""
    log = open_log(path)
    append = log.append
    for b in batches:
        append(b)
    end = log.log_end_offset
    log.close()
    return end


def writer_append(path: str, values: Sequence[bytes]) -> int:
    pack = struct.Struct(">I").pack
    with open(path, "wb") as w:  # io.BufferedWriter, default buffer size
        write = w.write
        for v in values:
            write(pack(len(v)) + v)
        w.flush()
        os.fsync(w.fileno())
        return w.tell()


def kernel_floor(path: str, chunks: Sequence[bytes]) -> int:
    """The same bytes as :func:`writer_append`, prepared in chunks: one ``os.write`` per chunk, one fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write = os.write
        n = 0
        for c in chunks:
            n += write(fd, c)
        os.fsync(fd)
        return n
    finally:
        os.close(fd)


def sqlite_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def sqlite_append(path: str, rows: Sequence[Tuple[bytes]]) -> sqlite3.Connection:
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(path + suffix)
        except FileNotFoundError:
            pass
    conn = sqlite_connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t (v) VALUES (?)", rows)
    conn.execute("COMMIT")
    return conn


def pylog_read_records(log: Log) -> Tuple[int, bytes]:
    off, end, n = log.log_start_offset, log.log_end_offset, 0
    last = b""
    read = log.read
    while off < end:
        recs = list(read(off, MiB))
        n += len(recs)
        off = recs[-1].offset + 1
        last = recs[-1].value
    return n, last


def _walk_batches(log: Log, per_batch: Callable[[Any], Tuple[int, Any]]) -> Tuple[int, bytes]:
    """Read every batch with read_batches; per_batch gives (values seen, last value)."""
    off, end, n = log.log_start_offset, log.log_end_offset, 0
    last: Any = b""
    while off < end:
        batches = log.read_batches(off, MiB)
        for b in batches:
            k, last = per_batch(b)
            n += k
        off = batches[-1].last_offset + 1
    return n, bytes(last)


def _memoryviews(b: Any) -> Tuple[int, Any]:
    vals = b.values()
    return len(vals), vals[-1]


def _columns(b: Any) -> Tuple[int, Any]:
    cols = b.value_columns()
    return len(cols), cols.value(len(cols) - 1)


def pylog_read_zero_copy(log: Log) -> Tuple[int, bytes]:
    """One memoryview per value (RecordBatch.values)."""
    return _walk_batches(log, _memoryviews)


def pylog_read_columns(log: Log) -> Tuple[int, bytes]:
    """The zero-copy batch reader: per batch one memoryview of its bytes plus
    position/length arrays (RecordBatch.value_columns), no object per record."""
    return _walk_batches(log, _columns)


def sqlite_scan(conn: sqlite3.Connection, chunk: int) -> Tuple[int, bytes]:
    cur = conn.execute("SELECT v FROM t ORDER BY id")
    n = 0
    last = b""
    fetch = cur.fetchmany
    while True:
        rows = fetch(chunk)
        if not rows:
            break
        n += len(rows)
        last = rows[-1][0]
    return n, last


def pylog_random(log: Log, offsets: Sequence[int]) -> List[bytes]:
    """Point reads with ``Log.get`` (one C call over the mapped segment)."""
    get = log.get
    return [get(o).value for o in offsets]


def pylog_random_via_read(log: Log, offsets: Sequence[int]) -> List[bytes]:
    """Point reads through the batch reader: ``next(log.read(offset, 1))``."""
    read = log.read
    return [next(read(o, 1)).value for o in offsets]


def sqlite_random(conn: sqlite3.Connection, offsets: Sequence[int]) -> List[bytes]:
    ex = conn.execute
    q = "SELECT v FROM t WHERE id = ?"
    return [ex(q, (o + 1,)).fetchone()[0] for o in offsets]  # rowids start at 1


def fill_log(path: str, target_bytes: int, batches: Sequence[List[bytes]], **cfg: Any) -> Tuple[int, float]:
    """Append ``batches`` over and over until the log holds ``target_bytes``; close it cleanly."""
    log = open_log(path, **cfg)
    t0 = time.perf_counter()
    try:
        while log.size_in_bytes < target_bytes:
            for b in batches:
                log.append(b)
                if log.size_in_bytes >= target_bytes:
                    break
        size = log.size_in_bytes
    finally:
        log.close()
    return size, time.perf_counter() - t0


def crash_with_tail(path: str, tail: Sequence[List[bytes]], repeat: int, **cfg: Any) -> Dict[str, Any]:
    """flush(), append ``tail`` unflushed, abandon() (a killed process), time the reopen.

    ``recovery_checkpoint_interval_ms=0`` makes ``flush()`` write the
    recovery-point checkpoint (by default it is rewritten at most every 60 s).
    """
    runs: List[Tuple[float, int, int]] = []  # (seconds, bytes scanned, log bytes before the tail)
    for _ in range(repeat):
        log = open_log(path, recovery_checkpoint_interval_ms=0, **cfg)
        log.flush()  # the recovery point is now the log end, and checkpointed
        size = log.size_in_bytes
        for b in tail:
            log.append(b)
        expected_end = log.log_end_offset
        log.abandon()
        gc.collect()
        t0 = time.perf_counter()
        log = open_log(path, recovery_checkpoint_interval_ms=0, **cfg)
        dt = time.perf_counter() - t0
        rec = log.recovery
        assert rec is not None and not rec.clean_shutdown, "abandon() should force a recovery"
        assert log.log_end_offset == expected_end, (log.log_end_offset, expected_end)
        runs.append((dt, rec.bytes_scanned, size))
        log.close()
    best = min(runs)
    return {
        "log_bytes": best[2],
        "tail_bytes": sum(len(v) for b in tail for v in b),
        "seconds": best[0],
        "bytes_scanned": best[1],
    }


# ------------------------------------------------------------------- the run
def run(args: argparse.Namespace) -> Dict[str, Any]:
    n, size, bsz, rep = args.records, args.value_size, args.batch, args.repeat
    root = args.dir or tempfile.mkdtemp(prefix="pylog-compare-")
    os.makedirs(root, exist_ok=True)
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if not args.quiet else (lambda *a: None)
    payload = n * size
    rows: List[Dict[str, Any]] = []
    extra: Dict[str, Any] = {}

    def row(name: str, unit: str, mine: float, peer_name: str, peer: Optional[float], target: str,
            met: Optional[bool], ratio: Optional[float] = None, note: str = "") -> None:
        if ratio is None and peer:
            ratio = mine / peer
        rows.append(dict(name=name, unit=unit, pylog=mine, peer=peer_name, peer_value=peer, ratio=ratio,
                         target=target, met=met, note=note))

    try:
        say(f"generating {n:,} values of {size} bytes ...")
        values = make_values(n, size, args.seed)
        batches = [values[i : i + bsz] for i in range(0, n, bsz)]
        sql_rows = [(v,) for v in values]

        # ---- append
        say("append: pylog, BufferedWriter, SQLite, kernel floor (taking turns) ...")
        pl_path = os.path.join(root, "pylog", "bench-0")

        def pl_setup() -> str:
            fresh_dir(os.path.dirname(pl_path))
            return pl_path

        def pl_run(path: str) -> int:
            return pylog_append(path, batches)

        fpath = os.path.join(root, "floor.bin")
        pack = struct.Struct(">I").pack
        floor_chunks = [b"".join(pack(len(v)) + v for v in b) for b in batches]

        wpath = os.path.join(root, "writer.bin")
        dbpath = os.path.join(root, "sqlite.db")
        conns: List[sqlite3.Connection] = []

        def sql_append() -> int:
            for c in conns:
                c.close()
            conns.clear()
            conns.append(sqlite_append(dbpath, sql_rows))
            return n

        got = interleaved(rep, {
            "pylog": (pl_run, pl_setup),
            "BufferedWriter": (lambda: writer_append(wpath, values), None),
            "SQLite": (sql_append, None),
            "floor": (lambda: kernel_floor(fpath, floor_chunks), None),
        })
        t_pl, t_bw, t_sq = got["pylog"][0], got["BufferedWriter"][0], got["SQLite"][0]
        t_fl = got["floor"][0]
        assert got["pylog"][1] == n
        assert got["BufferedWriter"][1] == got["floor"][1] == n * (size + 4)
        with open(wpath, "rb") as a, open(fpath, "rb") as b:
            assert a.read() == b.read()
        os.unlink(wpath)
        os.unlink(fpath)
        del floor_chunks
        log = open_log(pl_path)  # every run wrote the same bytes; the last one, reopened cleanly
        assert log.recovery is not None and log.recovery.clean_shutdown
        assert log.log_end_offset == n
        for c in conns:
            c.close()
        conn = sqlite_connect(dbpath)  # a fresh connection, as a reader would have
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == n
        name = "Log.open + append (lists of %d) + close()" % bsz
        row(name, "records/s", n / t_pl, "BufferedWriter + one fsync", n / t_bw, ">= 1.2x", n / t_pl >= 1.2 * n / t_bw)
        row(name, "records/s", n / t_pl, "SQLite executemany", n / t_sq, ">= 8x", n / t_pl >= 8.0 * n / t_sq)
        row("(info) kernel floor: the writer's bytes, one os.write per %d values + one fsync" % bsz, "records/s",
            n / t_fl, "BufferedWriter + one fsync", n / t_bw, "", None, note="no Python writer beats this")
        extra["append_seconds"] = {"pylog": t_pl, "BufferedWriter": t_bw, "SQLite": t_sq, "kernel_floor": t_fl}
        extra["log_bytes"] = log.size_in_bytes

        # ---- sequential reads, in a process that also holds a million live objects (issue 18): an
        # application's own data, which every older-generation collection scans
        live = [[i] for i in range(1_000_000)]
        say("sequential read: pylog Records, pylog zero-copy, SQLite scan (taking turns) ...")
        contenders: Dict[str, Tuple[Callable[..., Any], Optional[Callable[[], Any]]]] = {
            "records": (lambda: pylog_read_records(log), None),
            "zero_copy": (lambda: pylog_read_zero_copy(log), None),
            "SQLite": (lambda: sqlite_scan(conn, bsz), None),
        }
        contenders["columnar"] = (lambda: pylog_read_columns(log), None)
        got = interleaved(rep, contenders)
        for name, (_, (cnt, last)) in got.items():
            assert cnt == n and last == values[-1], (name, cnt, n)
        t_rd, t_zc, t_ss = got["records"][0], got["zero_copy"][0], got["SQLite"][0]
        t_col = got["columnar"][0]
        row("sequential read into Record objects (1M live objects held)", "records/s", n / t_rd, "SQLite scan",
            n / t_ss, ">= 1.0x", n / t_rd >= 1.0 * n / t_ss)
        row("zero-copy batch read (RecordBatch.value_columns)", "records/s", n / t_col, "SQLite scan", n / t_ss,
            ">= 5x", n / t_col >= 5.0 * n / t_ss)
        row("(info) one memoryview per value (RecordBatch.values)", "records/s", n / t_zc, "SQLite scan", n / t_ss,
            "", None, note="a Python object per record: ~0.2 us each")
        extra["read_seconds"] = {"pylog_records": t_rd, "pylog_value_columns": t_col,
                                 "pylog_values_memoryviews": t_zc, "SQLite_scan": t_ss}

        # ---- random reads
        k = args.random_reads
        rnd = random.Random(args.seed + 1)
        offsets = [rnd.randrange(n) for _ in range(k)]
        say(f"random reads: {k:,} by offset ...")
        small_path = log.dir
        log.close()  # one opener per partition directory per process
        reopened: List[Log] = []

        def reopen() -> Log:
            # Log.get is timed on a freshly opened log each round: the CRC checks and record anchors of
            # the batches it touches are paid inside the round, as after a restart.
            while reopened:
                reopened.pop().close()
            reopened.append(open_log(small_path))
            return reopened[0]

        got = interleaved(rep, {
            "pylog": (lambda lg: pylog_random(lg, offsets), reopen),
            "via_read": (lambda: pylog_random_via_read(reopened[0], offsets), None),
            "SQLite": (lambda: sqlite_random(conn, offsets), None),
        })
        expect = [values[o] for o in offsets]
        for name, (_, vals) in got.items():
            assert [bytes(v) for v in vals] == expect, name
        t_rp, t_rr, t_rs = got["pylog"][0], got["via_read"][0], got["SQLite"][0]
        while reopened:
            reopened.pop().close()
        del live
        row(f"{k:,} random reads by offset (Log.get, after reopen)", "reads/s", k / t_rp, "SQLite point lookups", k / t_rs,
            ">= 3x", k / t_rp >= 3.0 * k / t_rs)
        row(f"{k:,} random reads by offset (next(Log.read(o, 1)))", "reads/s", k / t_rr, "SQLite point lookups",
            k / t_rs, "", None, note="the batch reader, for comparison")
        extra["random_read_us"] = {"pylog": t_rp / k * 1e6, "pylog_via_read": t_rr / k * 1e6, "SQLite": t_rs / k * 1e6}
        conn.close()

        # ---- CRC32C
        say("CRC32C ...")
        buf = random.Random(args.seed + 2).randbytes(MiB)
        loops = 32  # 32 MiB per timed run; many short runs, the best counts (robust on a busy machine)
        runs = max(rep, args.crc_mib // loops)
        crc = _native.crc32c

        def crc_run() -> int:
            c = 0
            for _ in range(loops):
                c = crc(buf)
            return c

        t_crc, c = best_of(runs, crc_run)
        assert c == _native.crc32c_table(buf)
        gbps = loops * MiB / t_crc / 1e9
        hw = _native.crc32c_hardware()
        row("CRC32C on 1 MiB buffers" + ("" if hw else " (table path: no CPU instruction)"), "GB/s", gbps, "", None,
            ">= 10 GB/s", gbps >= 10.0 if hw else None)

        # ---- reopen of a cleanly closed big log
        big = os.path.join(fresh_dir(os.path.join(root, "big")), "bench-0")
        say(f"building a {args.reopen_bytes / 1e9:.2f} GB log (segment_bytes={args.segment_bytes}) ...")
        big_size, t_fill = fill_log(big, args.reopen_bytes, batches, segment_bytes=args.segment_bytes)
        extra["big_log"] = {"bytes": big_size, "fill_seconds": t_fill,
                            "segments": len([f for f in os.listdir(big) if f.endswith(".log")])}
        say("reopen ...")
        times = []
        for _ in range(max(rep, 3)):
            gc.collect()
            t0 = time.perf_counter()
            lg = open_log(big, segment_bytes=args.segment_bytes)
            times.append(time.perf_counter() - t0)
            assert lg.recovery is not None and lg.recovery.clean_shutdown and lg.recovery.bytes_scanned == 0
            lg.close()
        t_open = min(times)
        row(f"reopen of a cleanly closed {big_size / 1e9:.2f} GB log", "ms", t_open * 1e3, "", None, "< 50 ms",
            t_open * 1e3 < 50.0 if big_size >= 1e9 * 0.99 else None,
            note=f"median {statistics.median(times) * 1e3:.1f} ms")

        # ---- crash recovery: same unflushed tail, two log sizes
        tail_n = args.tail_records
        tail = [values[i : i + bsz] for i in range(0, min(tail_n, n), bsz)]
        say("crash recovery: small log ...")
        small = crash_with_tail(small_path, tail, rep)
        say("crash recovery: big log ...")
        large = crash_with_tail(big, tail, rep, segment_bytes=args.segment_bytes)
        growth = large["seconds"] / small["seconds"]
        size_ratio = large["log_bytes"] / small["log_bytes"]
        for label, r in (("small", small), ("big", large)):
            row(f"crash recovery, {r['log_bytes'] / 1e6:,.0f} MB log + {r['tail_bytes'] / 1e6:.1f} MB unflushed tail",
                "ms", r["seconds"] * 1e3, "", None, "proportional to tail" if label == "big" else "",
                None, note=f"scanned {r['bytes_scanned'] / 1e6:,.1f} MB")
        # Proportional to the tail, not the log: a log `size_ratio` times bigger with the same tail
        # must not take more than 2x as long to recover.
        rows[-1]["met"] = growth <= 2.0 if size_ratio >= 4.0 else None  # too close in size to tell
        rows[-1]["ratio"] = growth
        rows[-1]["peer"] = "small log"
        rows[-1]["note"] += f"; {size_ratio:.1f}x the log, {growth:.1f}x the time"
        extra["crash_recovery"] = {"small": small, "big": large}
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return {"rows": rows, "extra": extra}


def machine() -> Dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "pylog": pylog.__version__,
        "crc32c_hardware": _native.crc32c_hardware(),
        "load_average_1min_at_start": round(os.getloadavg()[0], 2),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def print_table(result: Dict[str, Any], args: argparse.Namespace) -> None:
    m = result["machine"]
    print(f"pylog {m['pylog']} vs peers — {m['date']}")
    print(f"machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}; SQLite {m['sqlite']}; "
          f"CRC32C instruction: {'yes' if m['crc32c_hardware'] else 'no'}; load average (1 min) "
          f"{m['load_average_1min_at_start']} at start, {m['load_average_1min_at_end']} at end")
    print(f"data: {args.records:,} records x {args.value_size} bytes, batches of {args.batch}; "
          f"best of {args.repeat}; command: {result['command']}")
    print()
    head = ("benchmark", "pylog", "peer", "peer value", "ratio", "target", "status", "note")
    lines = []
    for r in result["rows"]:
        unit = r["unit"]

        def val(x: Optional[float]) -> str:
            if x is None:
                return ""
            if unit in ("records/s", "reads/s"):
                return fmt_rate(x)
            if unit == "GB/s":
                return f"{x:.1f} GB/s"
            return f"{x:,.1f} {unit}"

        status = "" if r["met"] is None else ("MET" if r["met"] else "NOT MET")
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        lines.append((r["name"], val(r["pylog"]), r["peer"], val(r["peer_value"]), ratio, r["target"], status, r.get("note", "")))
    widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(head)]
    fmt = "  ".join("{:<%d}" % w if i in (0, 2, 5, 6, 7) else "{:>%d}" % w for i, w in enumerate(widths))
    print(fmt.format(*head))
    print("  ".join("-" * w for w in widths))
    for l in lines:
        print(fmt.format(*l).rstrip())
    ex = result["extra"]
    if "random_read_us" in ex:
        print()
        rr = ex["random_read_us"]
        print("random read latency: pylog Log.get %.1f us, next(Log.read(o, 1)) %.1f us, SQLite %.1f us"
              % (rr["pylog"], rr["pylog_via_read"], rr["SQLite"]))
    if "big_log" in ex:
        b = ex["big_log"]
        print("big log: %d bytes in %d segment(s), written in %.1f s" % (b["bytes"], b["segments"], b["fill_seconds"]))
    met = [r for r in result["rows"] if r["met"] is not None]
    print(f"targets met: {sum(1 for r in met if r['met'])} of {len(met)}")


def markdown_table(result: Dict[str, Any]) -> str:
    """The result rows as a Markdown table (for docs/benchmarks.md)."""
    out = ["| benchmark | pylog | peer | peer rate | ratio | target | status | note |",
           "|---|--:|---|--:|--:|---|---|---|"]
    for r in result["rows"]:
        unit = r["unit"]

        def val(x: Optional[float]) -> str:
            if x is None:
                return ""
            if unit in ("records/s", "reads/s"):
                return fmt_rate(x)[:-2].rstrip() + " " + unit
            if unit == "GB/s":
                return f"{x:.1f} GB/s"
            return f"{x:,.1f} {unit}"

        status = "" if r["met"] is None else ("**MET**" if r["met"] else "**NOT MET**")
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        out.append(f"| {r['name']} | {val(r['pylog'])} | {r['peer']} | {val(r['peer_value'])} | {ratio} | "
                   f"{r['target'].replace('>=', '≥')} | {status} | {r.get('note', '')} |")
    return "\n".join(out) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="records to append and read (default 1,000,000)")
    p.add_argument("--value-size", type=int, default=100, help="bytes per value (default 100)")
    p.add_argument("--batch", type=int, default=1000, help="values per pylog append (default 1,000)")
    p.add_argument("--random-reads", type=int, default=10_000, help="random reads by offset (default 10,000)")
    p.add_argument("--reopen-bytes", type=int, default=10**9,
                   help="size of the log reopened and crashed (default 1 GB: one 1 GiB segment)")
    p.add_argument("--segment-bytes", type=int, default=GiB, help="segment_bytes of that log (default 1 GiB)")
    p.add_argument("--tail-records", type=int, default=100_000, help="unflushed records before a crash (default 100,000)")
    p.add_argument("--crc-mib", type=int, default=1024, help="MiB hashed in all, in timed runs of 32 MiB (default 1024)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best counts (default 3)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--dir", help="work directory (default: a fresh temporary directory, removed afterwards)")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--markdown", metavar="PATH", help="also write the table as Markdown to PATH")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = p.parse_args(argv)
    if args.records < args.batch or args.records <= 0:
        p.error("--records must be at least --batch")
    result = {"machine": machine(), "command": " ".join([os.path.relpath(sys.argv[0])] + list(sys.argv[1:] if argv is None else argv)),
              "args": vars(args)}
    result.update(run(args))
    result["machine"]["load_average_1min_at_end"] = round(os.getloadavg()[0], 2)
    print_table(result, args)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
