#!/usr/bin/env python3
"""Spark scan speed: the ``pylog`` source vs Parquet vs JSON lines, same rows, ``noop`` sink.

A script (not collected by pytest). Steps, all in one run:

1. write ``--records`` records of ``--value-size`` random bytes (seeded,
   incompressible; every 10th with a 16-byte key) to ``--partitions`` partitions of one topic with
   :meth:`pylog.Log.append`, ``--batch`` records per batch;
2. start one SparkSession (``local[2]``, like the tests) and register the source;
3. write the source's rows once to Parquet (snappy) and once to JSON lines
   (Spark's writer; binary columns become base64 strings), outside any timer;
4. time ``df.write.format("noop").mode("overwrite").save()`` for each input,
   ``--repeat`` times each, interleaved; report the best and the median,
   rows/s and the ratios. The first, cold run of each is discarded (Python
   worker start-up). Inputs: the ``pylog`` source; Parquet read as Spark
   plans it by default and read as exactly one Spark partition per file
   (as many as the source has: the like-for-like baseline); JSON lines; and
   ``ceiling``, a trivial Python data source that yields one prebuilt Arrow
   batch of the same schema over and over (no reading, no decoding): the
   fastest any Python data source can be on this machine;
5. for every run, the CPU seconds used by the JVM and by the Python
   workers (from ``/proc``): the machine has 2 cores and every input is
   CPU-bound, so ``cpu vs parquet`` (Parquet's CPU seconds / the input's)
   is the ratio that shared-machine noise disturbs least.

Each input is checked outside the timer: same row count and same
``sum(offset)`` and ``sum(length(value))``.

Usage::

    .venv/bin/python benchmarks/bench_spark.py                    # 5,000,000 x 100 B
    .venv/bin/python benchmarks/bench_spark.py --records 500000   # quick

``benchmarks/profile_spark.py`` breaks the time down further (batch sizes,
partitions, per-column cost, JVM profiles).
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
    from pylog.record import Record

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
    ap.add_argument("--conf", action="append", default=[], help="extra Spark conf k=v (repeatable)")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = args.dir or tempfile.mkdtemp(prefix="pylog-bench-spark-")
    logs = os.path.join(work, "logs")
    made = os.path.join(work, "logs.done")
    shape = f"{args.records} {args.value_size} {args.partitions} {args.batch} {args.seed}"
    print(f"load average at start {os.getloadavg()[0]:.1f}", flush=True)
    try:
        reused = os.path.exists(made) and open(made).read() == shape
        if reused:
            print(f"reusing the log in {logs} ({shape})", flush=True)  # --dir: the same data as last time
        else:
            if os.path.exists(made):
                os.unlink(made)
            for old in (logs, os.path.join(work, "parquet"), os.path.join(work, "json")):
                shutil.rmtree(old, ignore_errors=True)
            os.makedirs(logs)
            t_write = write_logs(logs, "bench", args.partitions, args.records, args.value_size, args.batch, args.seed)
            with open(made, "w") as f:
                f.write(shape)
            print(f"wrote {args.records:,} records in {t_write:.1f} s", flush=True)
        log_bytes = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(logs) for f in fs)
        print(f"{log_bytes / 1e6:.0f} MB of log", flush=True)

        import profile_spark
        from pyspark import cloudpickle
        from profile_spark import cpu_snapshot, local_session, make_sources

        cloudpickle.register_pickle_by_value(profile_spark)  # workers cannot import benchmarks/

        spark = local_session(args.conf)
        _, CachedSource = make_sources()
        spark.dataSource.register(CachedSource)
        jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())

        def source():
            return spark.read.format("pylog").option("subscribe", "bench").load(logs)

        pq, js = os.path.join(work, "parquet"), os.path.join(work, "json")
        for out, write in ((pq, lambda: source().write.mode("overwrite").parquet(pq)),
                           (js, lambda: source().write.mode("overwrite").json(js))):
            if reused and os.path.exists(os.path.join(out, "_SUCCESS")):
                continue  # --dir: made from this same log by an earlier run
            write()
        schema = source().schema
        json_schema = "key string, value string, topic string, partition int, offset long, timestamp timestamp, timestampType int"
        n_files = len([f for f in os.listdir(pq) if f.endswith(".parquet")])
        n_parts = source().rdd.getNumPartitions()
        whole_files = {"spark.sql.files.maxPartitionBytes": str(1 << 40), "spark.sql.files.openCostInBytes": str(1 << 40)}

        def parquet(per_file: bool):
            def make():
                for k, v in whole_files.items():
                    spark.conf.set(k, v) if per_file else spark.conf.unset(k)
                return spark.read.schema(schema).parquet(pq)

            return make

        def ceiling():
            return (
                spark.read.format("cached_prof").option("rows", str(args.records)).option("parts", str(n_parts))
                .option("batchRows", "65536").option("timing", os.path.join(work, "ceiling.jsonl"))
                .option("label", "ceiling").load()
            )

        inputs = {
            "pylog": source,
            "parquet": parquet(False),
            f"parquet_{n_files}": parquet(True),
            "ceiling": ceiling,
            "json": lambda: spark.read.schema(json_schema).json(js),
        }
        for name, make in inputs.items():
            if name == "ceiling":
                assert make().count() == args.records
                continue
            length = "length(value)" if name != "json" else "length(unbase64(value))"
            got = make().selectExpr("count(*)", "sum(offset)", f"sum({length})").first()
            print(f"check {name}: rows={got[0]:,} sum(offset)={got[1]:,} bytes={got[2]:,}", flush=True)
            assert got[0] == args.records and got[2] == args.records * args.value_size, (name, got)

        times = {name: [] for name in inputs}
        cpus = {name: [] for name in inputs}
        parts = {name: [] for name in inputs}  # CPU seconds by where: JVM task threads, rest of the JVM, Python
        for name, make in inputs.items():  # cold run, discarded
            make().write.format("noop").mode("overwrite").save()
        for _ in range(args.repeat):
            for name, make in inputs.items():
                df = make()
                c0 = cpu_snapshot(jvm_pid)
                t0 = time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                times[name].append(time.perf_counter() - t0)
                c1 = cpu_snapshot(jvm_pid)
                cpus[name].append(sum(c1.values()) - sum(c0.values()))
                parts[name].append({k: c1[k] - c0[k] for k in c0})
        sizes = {"parquet": pq, f"parquet_{n_files}": pq, "json": js}
        print()
        print(f"# {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, pyspark {spark.version}, local[2]")
        print(f"# {args.records:,} records x {args.value_size} B, {args.partitions} partitions, noop sink, "
              f"best/median of {args.repeat}, load average {os.getloadavg()[0]:.1f}"
              + (f", conf {' '.join(args.conf)}" if args.conf else ""))
        pq_cpu = statistics.median(cpus[f"parquet_{n_files}"])
        print(f"{'input':10} {'best s':>7} {'median s':>9} {'Mrows/s':>8} {'cpu s':>6} {'cpu vs parquet_' + str(n_files):>18} "
              f"{'on disk MB':>11} {'jvm task':>8} {'jvm other':>9} {'python':>6}")
        for name, ts in times.items():
            best = min(ts)
            disk = log_bytes if name == "pylog" else sum(
                os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(sizes[name]) for f in fs
            ) if name in sizes else 0
            c = statistics.median(cpus[name])
            print(f"{name:10} {best:7.2f} {statistics.median(ts):9.2f} {args.records / best / 1e6:8.2f} {c:6.2f} "
                  f"{pq_cpu / c:17.2f}x {disk / 1e6:11.0f} "
                  + " ".join(f"{statistics.median(x[k] for x in parts[name]):{w}.2f}"
                             for k, w in (("jvm tasks", 8), ("jvm other", 9), ("python", 6))))
        b = {k: min(v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        base = f"parquet_{n_files}"
        # Ratios per round (same round, same machine load), then the median over rounds.
        per_round = statistics.median(times[base][i] / times["pylog"][i] for i in range(args.repeat))
        print(f"pylog rows/s vs {base} (one Spark partition per file, like the source): best {b[base] / b['pylog']:.2f}x, "
              f"median of per-round ratios {per_round:.2f}x (target >= 0.8x)")
        print(f"pylog rows/s vs parquet (Spark's default split): best {b['parquet'] / b['pylog']:.2f}x, "
              f"median {med['parquet'] / med['pylog']:.2f}x")
        print(f"ceiling (prebuilt Arrow) rows/s vs {base}: best {b[base] / b['ceiling']:.2f}x, "
              f"median of per-round ratios "
              f"{statistics.median(times[base][i] / times['ceiling'][i] for i in range(args.repeat)):.2f}x")
        print(f"pylog rows/s vs json lines: best {b['json'] / b['pylog']:.2f}x (target > 1x)")
        spark.stop()
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
