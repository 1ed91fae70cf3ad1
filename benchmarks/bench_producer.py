"""Producer benchmark (issue 4, "Speed"): ``producer.send`` one record per call, 100-byte values, RF=1.

Targets: >= 821,557 records/s (Kafka 2014, one producer thread, no replication)
and >= 20x SQLite autocommit inserts (one transaction, so one commit, per row,
the ``sqlite3`` module's defaults: rollback journal, ``synchronous=FULL``).

The pylog figure is end to end: the clock runs from the first ``send`` until
``flush()`` returns, i.e. until every record is acknowledged (``acks``) by the
in-process broker, real time, one partition, RF=1; the ``send`` loop alone
(records queued per second) is printed too. Each pylog record is checked
afterwards (count, offsets), so a fast wrong answer fails.

Script (one run prints both rates and the ratio)::

    nice .venv/bin/python benchmarks/bench_producer.py                  # 1,000,000 records
    nice .venv/bin/python benchmarks/bench_producer.py --records 200000 --sqlite-rows 500
    nice .venv/bin/python benchmarks/bench_producer.py --records 300000 --compare-send-paths 5  # C vs closure

pytest-benchmark::

    .venv/bin/python -m pytest benchmarks -k "producer_send or sqlite_autocommit" --benchmark-only -q
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from typing import Any, Dict

import pytest

from pylog.cluster import Cluster

KAFKA_2014_ONE_PRODUCER = 821_557
VALUE = b"v" * 100


def pylog_send(n: int, *, acks: Any = "all", batch_size: int = 16384, linger_ms: int = 0,
               compression_type: Any = None, root: str = "") -> Dict[str, float]:
    """``n`` sends of 100-byte values then ``flush()``; returns rates and the batch count."""
    root = root or tempfile.mkdtemp(prefix="pylog-bench-producer-")
    c = Cluster(root, brokers=1)
    try:
        c.create_topic("b", partitions=1, replication_factor=1)
        p = c.producer(acks=acks, batch_size=batch_size, linger_ms=linger_ms, compression_type=compression_type)
        for _ in range(2000):  # warm up: producer id, first batches
            p.send("b", VALUE)
        p.flush()
        start_offset = c.describe("b")[0].high_watermark
        send = p.send
        v = VALUE
        batches0 = p.batches_sent
        c0 = time.process_time()
        t0 = time.perf_counter()
        for _ in range(n):
            send("b", v)
        t1 = time.perf_counter()
        p.flush()
        t2 = time.perf_counter()
        cpu = time.process_time() - c0
        last = send("b", v).result(timeout=60)
        if acks != 0:
            assert last.offset == start_offset + n, (last, start_offset, n)
        assert p.record_errors == 0
        batches = p.batches_sent - batches0
        p.close()
        return {"records_per_s": n / (t2 - t0), "send_loop_per_s": n / (t1 - t0), "seconds": t2 - t0,
                "batches": batches, "cpu_us_per_record": cpu / n * 1e6, "buffer_waits": p.buffer_waits}
    finally:
        c.close()
        shutil.rmtree(root, ignore_errors=True)


def sqlite_autocommit(rows: int, *, wal: bool = False) -> Dict[str, float]:
    """``rows`` single-row INSERTs, each its own transaction (autocommit)."""
    d = tempfile.mkdtemp(prefix="pylog-bench-sqlite-")
    try:
        conn = sqlite3.connect(os.path.join(d, "t.db"), isolation_level=None)
        if wal:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
        ins = "INSERT INTO t (v) VALUES (?)"
        t0 = time.perf_counter()
        for _ in range(rows):
            conn.execute(ins, (VALUE,))
        dt = time.perf_counter() - t0
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == rows
        conn.close()
        return {"records_per_s": rows / dt, "seconds": dt}
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------ pytest-benchmark
@pytest.mark.parametrize("acks", ["all", 1])
def test_producer_send(benchmark: Any, throughput: Any, acks: Any) -> None:
    """100,000 sends of 100-byte values + flush, real time, RF=1."""
    n = 100_000
    out: Dict[str, float] = {}

    def run() -> None:
        out.update(pylog_send(n, acks=acks))

    benchmark.pedantic(run, rounds=3, warmup_rounds=0)
    benchmark.extra_info["bytes"] = n * len(VALUE)
    throughput(n * len(VALUE), n)
    assert out["records_per_s"] > 0


def test_sqlite_autocommit_insert(benchmark: Any, throughput: Any) -> None:
    """The peer: 200 autocommit single-row inserts (rollback journal, synchronous=FULL)."""
    n = 200
    benchmark.pedantic(lambda: sqlite_autocommit(n), rounds=3, warmup_rounds=0)
    benchmark.extra_info["bytes"] = n * len(VALUE)
    throughput(n * len(VALUE), n)


def compare_send_paths(records: int, pairs: int) -> None:
    """The C send path (sendpath.c) against the Python closure it replaces, interleaved in one
    process (issue 15's "one send path, or a measured reason for two"): per pair and the median."""
    import statistics
    import threading

    import pylog.client.producer as prod

    c_path = (prod._SendPath, prod._Lock)
    if c_path[0] is None:
        raise SystemExit("the send-path extension is not built: nothing to compare")
    rows: Dict[str, list] = {"C SendPath.send": [], "Python closure": []}
    try:
        for _ in range(pairs):
            for name in rows:
                prod._SendPath, prod._Lock = c_path if name.startswith("C") else (None, threading.Lock)
                rows[name].append(pylog_send(records))
    finally:
        prod._SendPath, prod._Lock = c_path
    for name, rs in rows.items():
        for key, unit in (("records_per_s", "records/s end to end"), ("send_loop_per_s", "records/s send loop"),
                          ("cpu_us_per_record", "us CPU per record")):
            vals = [r[key] for r in rs]
            print(f"{name:>16}: {unit:>22}: median {statistics.median(vals):>12,.2f}  runs "
                  + " ".join(f"{v:,.2f}" for v in vals))


# ---------------------------------------------------------------------- script
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--sqlite-rows", type=int, default=1_000)
    ap.add_argument("--batch-size", type=int, default=16384)
    ap.add_argument("--linger-ms", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (pylog and SQLite take turns)")
    ap.add_argument("--compare-send-paths", type=int, default=0, metavar="PAIRS",
                    help="only compare the C send path with the Python closure, PAIRS interleaved runs each")
    args = ap.parse_args()
    if args.compare_send_paths:
        compare_send_paths(args.records, args.compare_send_paths)
        return
    best_pl: Dict[str, float] = {}
    best_sq: Dict[str, float] = {}
    best_wal: Dict[str, float] = {}
    for _ in range(args.repeat):
        r = pylog_send(args.records, batch_size=args.batch_size, linger_ms=args.linger_ms)
        if r["records_per_s"] > best_pl.get("records_per_s", 0):
            best_pl = r
        s = sqlite_autocommit(args.sqlite_rows)
        if s["records_per_s"] > best_sq.get("records_per_s", 0):
            best_sq = s
        w = sqlite_autocommit(args.sqlite_rows * 10, wal=True)
        if w["records_per_s"] > best_wal.get("records_per_s", 0):
            best_wal = w
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.1f}; best of {args.repeat}")
    print(f"pylog producer.send, acks=all, RF=1, 100-byte values, batch_size={args.batch_size}, "
          f"linger_ms={args.linger_ms}, {args.records:,} records:")
    print(f"  end to end (send .. flush acknowledged): {best_pl['records_per_s']:>12,.0f} records/s "
          f"({best_pl['batches']:.0f} batches)")
    print(f"  send loop alone (records queued):        {best_pl['send_loop_per_s']:>12,.0f} records/s")
    print(f"  CPU (all threads) per record:            {best_pl['cpu_us_per_record']:>12.2f} us "
          f"(about load-independent: 1e6 / this ~ the rate on one free core)")
    print(f"  times send() blocked for buffer_memory:  {best_pl['buffer_waits']:>12,.0f} "
          f"(buffer_memory fills once the leader acknowledges slower than send() queues)")
    print(f"SQLite autocommit INSERT per row (journal=delete, synchronous=FULL): {best_sq['records_per_s']:,.0f} rows/s")
    print(f"SQLite autocommit INSERT per row (WAL, synchronous=NORMAL):         {best_wal['records_per_s']:,.0f} rows/s")
    ratio = best_pl["records_per_s"] / best_sq["records_per_s"]
    ratio_wal = best_pl["records_per_s"] / best_wal["records_per_s"]
    ok_abs = best_pl["records_per_s"] >= KAFKA_2014_ONE_PRODUCER
    print(f"vs Kafka 2014 one producer ({KAFKA_2014_ONE_PRODUCER:,} records/s): "
          f"{best_pl['records_per_s'] / KAFKA_2014_ONE_PRODUCER:.2f}x ({'MET' if ok_abs else 'NOT MET'})")
    print(f"vs SQLite autocommit: {ratio:,.1f}x (target >= 20x: {'MET' if ratio >= 20 else 'NOT MET'}); "
          f"vs SQLite WAL autocommit: {ratio_wal:,.1f}x")


if __name__ == "__main__":
    main()
