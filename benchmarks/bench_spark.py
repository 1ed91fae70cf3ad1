#!/usr/bin/env python3
"""Spark scan speed: the ``pylog`` source vs Parquet vs JSON lines, same rows, ``noop`` sink.

A script (not collected by pytest). Steps, all in one run:

1. write ``--records`` records of ``--value-size`` random bytes (seeded,
   incompressible; every 10th with a 16-byte key) to ``--partitions`` partitions of one topic with
   :meth:`pylog.Log.append`, ``--batch`` records per batch;
2. start one SparkSession (``local[2]``, like the tests) and register the source;
3. write the source's rows once to Parquet (snappy) and once to JSON lines
   (Spark's writer; binary columns become base64 strings), outside any timer;
4. time ``df.write.format("noop").mode("overwrite").save()`` for each of the
   three inputs, ``--repeat`` times each, interleaved; report the best and
   the median, rows/s and the ratios. The first, cold run of each is
   discarded (Python worker start-up).

Each input is checked outside the timer: same row count and same
``sum(offset)`` and ``sum(length(value))``.

Usage::

    .venv/bin/python benchmarks/bench_spark.py                    # 5,000,000 x 100 B
    .venv/bin/python benchmarks/bench_spark.py --records 500000   # quick
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time


def write_logs(root: str, topic: str, partitions: int, records: int, value_size: int, batch: int, seed: int) -> float:
    import pylog
    from pylog.storage.record import Record

    rnd = random.Random(seed)
    started = time.perf_counter()
    per = records // partitions
    for p in range(partitions):
        n = per + (1 if p < records % partitions else 0)
        lg = pylog.Log.open(os.path.join(root, f"{topic}-{p}"))
        done = 0
        while done < n:
            k = min(batch, n - done)
            blob = rnd.randbytes(k * value_size)  # random: Parquet cannot compress it away
            recs = []
            for i in range(k):
                v = blob[i * value_size : (i + 1) * value_size]
                recs.append(Record(value=v, key=v[:16]) if i % 10 == 0 else v)
            lg.append(recs)
            done += k
        lg.close()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = args.dir or tempfile.mkdtemp(prefix="pylog-bench-spark-")
    logs = os.path.join(work, "logs")
    os.makedirs(logs, exist_ok=True)
    try:
        t_write = write_logs(logs, "bench", args.partitions, args.records, args.value_size, args.batch, args.seed)
        log_bytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(logs) for f in fs)
        print(f"wrote {args.records:,} records in {t_write:.1f} s ({log_bytes / 1e6:.0f} MB of log)", flush=True)

        from pyspark.sql import SparkSession

        import pylog.spark

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        pylog.spark.register(spark)

        def source():
            return spark.read.format("pylog").option("subscribe", "bench").load(logs)

        pq, js = os.path.join(work, "parquet"), os.path.join(work, "json")
        source().write.mode("overwrite").parquet(pq)
        source().write.mode("overwrite").json(js)
        schema = source().schema
        json_schema = "key string, value string, topic string, partition int, offset long, timestamp timestamp, timestampType int"
        inputs = {
            "pylog": source,
            "parquet": lambda: spark.read.schema(schema).parquet(pq),
            "json": lambda: spark.read.schema(json_schema).json(js),
        }
        for name, make in inputs.items():
            length = "length(value)" if name != "json" else "length(unbase64(value))"
            got = make().selectExpr("count(*)", "sum(offset)", f"sum({length})").first()
            print(f"check {name}: rows={got[0]:,} sum(offset)={got[1]:,} bytes={got[2]:,}", flush=True)
            assert got[0] == args.records and got[2] == args.records * args.value_size, (name, got)

        times = {name: [] for name in inputs}
        for name, make in inputs.items():  # cold run, discarded
            make().write.format("noop").mode("overwrite").save()
        for _ in range(args.repeat):
            for name, make in inputs.items():
                t0 = time.perf_counter()
                make().write.format("noop").mode("overwrite").save()
                times[name].append(time.perf_counter() - t0)
        sizes = {"parquet": pq, "json": js}
        print()
        print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, pyspark {spark.version}, local[2]")
        print(f"# {args.records:,} records x {args.value_size} B, {args.partitions} partitions, noop sink, "
              f"best/median of {args.repeat}")
        print(f"{'input':8} {'best s':>7} {'median s':>9} {'Mrows/s':>8} {'on disk MB':>11}")
        for name, ts in times.items():
            best = min(ts)
            disk = log_bytes if name == "pylog" else sum(
                os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(sizes[name]) for f in fs
            )
            print(f"{name:8} {best:7.2f} {statistics.median(ts):9.2f} {args.records / best / 1e6:8.2f} {disk / 1e6:11.0f}")
        b = {k: min(v) for k, v in times.items()}
        print(f"pylog rows/s vs parquet: {b['parquet'] / b['pylog']:.2f}x (target >= 0.8x)")
        print(f"pylog rows/s vs json lines: {b['json'] / b['pylog']:.2f}x (target > 1x)")
        spark.stop()
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
