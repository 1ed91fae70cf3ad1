#!/usr/bin/env python3
"""Where a Spark scan of the ``pylog`` source spends its time (a script, not collected by pytest).

One SparkSession (``local[2]``), one log directory, many scan variants, each
timed to the ``noop`` sink in interleaved rounds; every figure is reported
as a ratio to Parquet measured in the same round (the machine is shared and
noisy, so absolute seconds drift; ratios hold). For every query it also
reads the CPU seconds used by

* the JVM, per thread group (``Executor task launch worker`` = the task
  threads that read Arrow from the Python socket or decode Parquet and turn
  columns into rows; everything else is summed as ``jvm other``), and
* the Python workers (every process below the JVM): ``read()`` itself plus
  PySpark's Arrow IPC writer,

from ``/proc``, and, for the Python variants, the seconds spent inside our
``read()`` generator (the rest of a Python task is PySpark writing Arrow IPC
to the JVM, or waiting for the JVM to take it). Every input is CPU-bound on
the 2 cores, so ``cpu vs parquet_4`` (Parquet's CPU seconds / the variant's)
is the ratio that other people's load disturbs least; ``--jfr DIR`` also
records each variant's first timed run with Java Flight Recorder.

Variants (``--only`` picks some by name):

* ``parquet``: the source's rows written by Spark to Parquet (snappy), one
  file per source partition, read with the same session;
* ``parquet_4``: the same, read as exactly 4 Spark partitions (one per file);
* ``pylog``: the source as shipped;
* ``pylog_rows=N``: the source with about N rows per Arrow batch (N x 112 bytes of log);
* ``pylog_min=N``: ``minPartitions=N``;
* ``cached_rows=N``: a trivial Python data source that yields ONE prebuilt
  Arrow batch of N rows (same schema, zero bytes for values) over and over
  until each partition has its rows: no reading, no decoding, no building:
  the ceiling of any Python data source on this machine;
* ``cached_value``: the same, only the ``value`` column; with
  ``parquet_value`` (Parquet, ``value`` only) for the per-column cost.

Usage::

    nice -n 10 .venv/bin/python benchmarks/profile_spark.py --dir /tmp/sprof     # makes the log once
    nice -n 10 .venv/bin/python benchmarks/profile_spark.py --dir /tmp/sprof --only parquet,pylog,cached_rows=65536
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------
# CPU accounting from /proc
# ---------------------------------------------------------------------------


def _stat_cpu(path: str) -> float:
    with open(path) as f:
        s = f.read()
    fields = s[s.rindex(")") + 2 :].split()
    return sum(int(x) for x in fields[11:15]) / TICK  # utime + stime + reaped children's


def _children(pid: int) -> List[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return out


def cpu_snapshot(jvm_pid: int) -> Dict[str, float]:
    """CPU seconds so far: JVM task threads, the rest of the JVM, and every Python process below the JVM."""
    snap = {"jvm tasks": 0.0, "jvm other": 0.0, "python": 0.0}
    with open(f"/proc/{jvm_pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    jvm_total = (int(fields[11]) + int(fields[12])) / TICK  # includes threads that have exited
    snap["python"] += (int(fields[13]) + int(fields[14])) / TICK  # reaped children
    for tid in os.listdir(f"/proc/{jvm_pid}/task"):
        try:
            with open(f"/proc/{jvm_pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{jvm_pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if name.startswith("Executor task"):
            snap["jvm tasks"] += (int(fields[11]) + int(fields[12])) / TICK
    snap["jvm other"] = jvm_total - snap["jvm tasks"]
    todo = _children(jvm_pid)
    while todo:
        pid = todo.pop()
        try:
            snap["python"] += _stat_cpu(f"/proc/{pid}/stat")
        except OSError:
            continue
        todo.extend(_children(pid))
    return snap


# ---------------------------------------------------------------------------
# Data sources used only here
# ---------------------------------------------------------------------------


def _timed(it, path: str, label: str):
    """Yield from ``it``; append (seconds inside ``it``, seconds in all, rows, batches) to ``path``."""
    start = time.perf_counter()
    inside = 0.0
    rows = batches = 0
    while True:
        t0 = time.perf_counter()
        try:
            rb = next(it)
        except StopIteration:
            inside += time.perf_counter() - t0
            break
        inside += time.perf_counter() - t0
        rows += rb.num_rows
        batches += 1
        yield rb
    total = time.perf_counter() - start
    line = json.dumps({"label": label, "inside": inside, "total": total, "rows": rows, "batches": batches})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (line + "\n").encode())
    os.close(fd)


def local_session(conf: "list[str]") -> "object":
    """The benchmarks' SparkSession: ``local[2]``, no UI, 2 GB driver, ``KEY=VALUE`` settings, pylog registered."""
    from pyspark.sql import SparkSession

    import pylog.spark

    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    for kv in conf:
        k, v = kv.split("=", 1)
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pylog.spark.register(spark)
    return spark


def make_sources():
    """Defined inside a function so cloudpickle ships them to the workers by value."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from pylog.spark.datasource import PylogBatchReader, PylogDataSource, _Options
    from pylog.spark.reader import arrow_schema, read_range

    class ProfReader(PylogBatchReader):
        def __init__(self, opts, chunk_bytes: int, timing: str, label: str):
            super().__init__(opts)
            self.chunk_bytes, self.timing, self.label = chunk_bytes, timing, label

        def read(self, partition):
            if partition.value is None:
                return iter(())
            return _timed(read_range(partition.value, self.chunk_bytes), self.timing, self.label)

    class ProfSource(PylogDataSource):
        @classmethod
        def name(cls):
            return "pylog_prof"

        def reader(self, schema):
            o = self.options
            own = ("chunkbytes", "timing", "label")  # this variant's, not the source's (which refuses unknown options)
            rest = {k: v for k, v in o.items() if k.lower() not in own}
            return ProfReader(_Options(rest), int(o["chunkbytes"]), o["timing"], o["label"])

    class CachedReader(DataSourceReader):
        def __init__(self, options):
            self.rows = int(options["rows"])
            self.parts = int(options["parts"])
            self.batch_rows = int(options["batchrows"])
            self.value_only = options.get("valueonly") == "true"
            self.timing, self.label = options["timing"], options["label"]

        def partitions(self):
            per = self.rows // self.parts
            return [InputPartition((p, per + (1 if p < self.rows % self.parts else 0))) for p in range(self.parts)]

        def _batch(self, n: int, p: int):
            offsets = pa.array(range(0, 100 * (n + 1), 100), pa.int32())
            value = pa.Array.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(bytes(100 * n))])
            if self.value_only:
                return pa.RecordBatch.from_arrays([value], schema=pa.schema([pa.field("value", pa.binary())]))
            k = pa.array([b"k" * 16 if i % 10 == 0 else None for i in range(n)], pa.binary())
            cols = [
                k,
                value,
                pa.array(["bench"] * n, pa.string()),
                pa.array([p] * n, pa.int32()),
                pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, pa.int64()).view(pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32()),
            ]
            return pa.RecordBatch.from_arrays(cols, schema=arrow_schema(False))

        def read(self, partition):
            p, n = partition.value
            batch = self._batch(min(self.batch_rows, n), p)

            def gen():
                left = n
                while left > 0:
                    k = min(left, batch.num_rows)
                    yield batch if k == batch.num_rows else batch.slice(0, k)
                    left -= k

            return _timed(gen(), self.timing, self.label)

    class CachedSource(DataSource):
        @classmethod
        def name(cls):
            return "cached_prof"

        def schema(self):
            if self.options.get("valueonly") == "true":
                return "value binary"
            from pylog.spark.datasource import kafka_schema

            return kafka_schema(False)

        def reader(self, schema):
            return CachedReader(self.options)

    return ProfSource, CachedSource


# ---------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=None, help="work directory; the log and Parquet copies are kept there")
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    ap.add_argument("--conf", action="append", default=[], help="extra Spark conf k=v")
    ap.add_argument("--jfr", default=None, help="directory: record each variant's first timed run with Java Flight Recorder")
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = args.dir or tempfile.mkdtemp(prefix="pylog-prof-spark-")
    logs = os.path.join(work, "logs")
    if not os.path.isdir(logs):
        from bench_spark import write_logs

        os.makedirs(logs)
        write_logs(logs, "bench", args.partitions, args.records, 100, 1000, 1)
    timing = os.path.join(work, "timing.jsonl")

    spark = local_session(args.conf)
    ProfSource, CachedSource = make_sources()
    spark.dataSource.register(ProfSource)
    spark.dataSource.register(CachedSource)
    jvm_pid = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    sysprop = spark._jvm.java.lang.System.getProperty
    print("arrow.enable_unsafe_memory_access =", sysprop("arrow.enable_unsafe_memory_access"),
          "arrow.enable_null_check_for_get =", sysprop("arrow.enable_null_check_for_get"), flush=True)

    def src():
        return spark.read.format("pylog").option("subscribe", "bench").load(logs)

    pq = os.path.join(work, "parquet")
    pqv = os.path.join(work, "parquet_value")
    if not os.path.isdir(pq):
        src().write.mode("overwrite").parquet(pq)
    if not os.path.isdir(pqv):
        src().select("value").write.mode("overwrite").parquet(pqv)
    schema = src().schema
    n = args.records

    def pylog_rows(rows: int):
        return lambda: (
            spark.read.format("pylog_prof").option("subscribe", "bench")
            .option("chunkBytes", str(rows * 112)).option("timing", timing).option("label", f"pylog_rows={rows}")
            .load(logs)
        )

    def pylog_min(k: int):
        return lambda: (
            spark.read.format("pylog_prof").option("subscribe", "bench").option("minPartitions", str(k))
            .option("chunkBytes", str(1 << 20)).option("timing", timing).option("label", f"pylog_min={k}")
            .load(logs)
        )

    def cached(rows: int, value_only: bool = False, label: str = ""):
        return lambda: (
            spark.read.format("cached_prof").option("rows", str(n)).option("parts", str(args.partitions))
            .option("batchRows", str(rows)).option("valueOnly", "true" if value_only else "false")
            .option("timing", timing).option("label", label or f"cached_rows={rows}").load()
        )

    def parquet4():
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(1 << 40))
        spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 40))
        return spark.read.schema(schema).parquet(pq)

    def parquet_default():
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
        return spark.read.schema(schema).parquet(pq)

    def parquet_value():
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(1 << 40))
        spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 40))
        return spark.read.parquet(pqv)

    variants = {
        "parquet": parquet_default,
        "parquet_4": parquet4,
        "pylog": src,
        "pylog_rows=10000": pylog_rows(10_000),
        "pylog_rows=65536": pylog_rows(65_536),
        "pylog_rows=262144": pylog_rows(262_144),
        "pylog_rows=1250000": pylog_rows(1_250_000),
        "pylog_min=2": pylog_min(2),
        "pylog_min=8": pylog_min(8),
        "cached_rows=10000": cached(10_000),
        "cached_rows=65536": cached(65_536),
        "cached_rows=1250000": cached(1_250_000),
        "cached_value": cached(65_536, True, "cached_value"),
        "parquet_value": parquet_value,
    }
    if args.only:
        want = args.only.split(",")
        variants = {k: variants[k] for k in want}
    if "parquet" not in variants:
        variants = {"parquet": parquet_default, **variants}
    for name, make in variants.items():  # cold run + row-count check, outside the timer
        got = make().count()
        assert got == n, (name, got)
        make().write.format("noop").mode("overwrite").save()
    if os.path.exists(timing):
        os.unlink(timing)
    ratios: Dict[str, List[float]] = {k: [] for k in variants}
    secs: Dict[str, List[float]] = {k: [] for k in variants}
    cpu: Dict[str, List[Dict[str, float]]] = {k: [] for k in variants}
    for r in range(args.repeat):
        for name, make in variants.items():
            df = make()
            if args.jfr and r == 0:
                os.makedirs(args.jfr, exist_ok=True)
                subprocess.run(["jcmd", str(jvm_pid), "JFR.start", "name=prof", "settings=profile"],
                               check=True, capture_output=True)
            c0 = cpu_snapshot(jvm_pid)
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            dt = time.perf_counter() - t0
            c1 = cpu_snapshot(jvm_pid)
            if args.jfr and r == 0:
                out = os.path.join(os.path.abspath(args.jfr), name.replace("=", "_") + ".jfr")
                subprocess.run(["jcmd", str(jvm_pid), "JFR.stop", "name=prof", f"filename={out}"],
                               check=True, capture_output=True)
            secs[name].append(dt)
            cpu[name].append({k: c1[k] - c0[k] for k in c0})
        for name in variants:
            ratios[name].append(secs["parquet"][r] / secs[name][r])  # rows/s relative to parquet
        print(f"round {r + 1}: " + ", ".join(f"{k} {secs[k][r]:.2f}s" for k in variants), flush=True)

    inside: Dict[str, List[float]] = {}
    total: Dict[str, List[float]] = {}
    batches: Dict[str, int] = {}
    if os.path.exists(timing):
        with open(timing) as f:
            for line in f:
                d = json.loads(line)
                inside.setdefault(d["label"], []).append(d["inside"])
                total.setdefault(d["label"], []).append(d["total"])
                batches[d["label"]] = batches.get(d["label"], 0) + d["batches"]
    print()
    print(f"# {n:,} records x 100 B, {args.partitions} log partitions, local[2], noop sink, {args.repeat} rounds, "
          f"pyspark {spark.version}, load {os.getloadavg()[0]:.1f}")
    ref = "parquet_4" if "parquet_4" in variants else "parquet"
    print(f"{'variant':22} {'median s':>8} {'vs parquet':>10} {'(min-max)':>12} "
          f"{'jvm task cpu':>12} {'jvm other':>9} {'python cpu':>10} {'cpu vs ' + ref:>16} {'in read()':>9} {'rows/batch':>10}")
    pq_cpu = statistics.median(sum(x.values()) for x in cpu[ref])
    for name in variants:
        c = {k: statistics.median(x[k] for x in cpu[name]) for k in cpu[name][0]}
        label = "pylog_rows=9000" if name == "pylog" else name
        ins = sum(inside.get(label, [])) / args.repeat if name in inside or label in inside else float("nan")
        if name == "pylog":
            ins = float("nan")  # the shipped source is not wrapped
        nb = batches.get(label, 0) / args.repeat
        rpb = f"{n / nb:,.0f}" if nb else "-"
        rs = ratios[name]
        print(f"{name:22} {statistics.median(secs[name]):8.2f} {statistics.median(rs):9.2f}x "
              f"{min(rs):5.2f}-{max(rs):4.2f}x {c['jvm tasks']:12.2f} {c['jvm other']:9.2f} {c['python']:10.2f} "
              f"{pq_cpu / statistics.median(sum(x.values()) for x in cpu[name]):15.2f}x {ins:9.2f} {rpb:>10}")
    spark.stop()


if __name__ == "__main__":
    main()
