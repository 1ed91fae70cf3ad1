"""Streaming reads (availableNow, rate limits, checkpoint restarts) and reads during appends."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pylog
from .helpers import record_for, write_partition

pytestmark = pytest.mark.spark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_available_now(spark, path, sink, **options):
    """One availableNow run into a parquet sink; returns the rows per micro-batch."""
    r = spark.readStream.format("pylog").option("path", path)
    for k, v in options.items():
        r = r.option(k, v)
    q = (
        r.load()
        .selectExpr("topic", "partition", "offset", "key", "value")
        .writeStream.format("parquet")
        .option("path", os.path.join(sink, "data"))
        .option("checkpointLocation", os.path.join(sink, "cp"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def sink_rows(spark, sink):
    rows = spark.read.parquet(os.path.join(sink, "data")).collect()
    return sorted((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows)


def expected(topic, counts):
    out = []
    for p, n in counts.items():
        for i in range(n):
            rec = record_for(topic, p, i)
            out.append((topic, p, i, rec.key, rec.value))
    return sorted(out)


def test_available_now_rate_limit_and_restart_from_checkpoint(spark, tmp_path):
    d, sink = str(tmp_path / "logs"), str(tmp_path / "sink")
    write_partition(d, "s", 0, 600)
    write_partition(d, "s", 1, 200)
    batches = run_available_now(spark, d, sink, subscribe="s", startingOffsets="earliest", maxOffsetsPerTrigger="300")
    assert sum(batches) == 800 and len(batches) >= 3 and max(batches) <= 300
    assert sink_rows(spark, sink) == expected("s", {0: 600, 1: 200})

    # More data, and a partition that did not exist: a restart reads only what is new.
    lg = pylog.Log.open(os.path.join(d, "s-1"))
    lg.append([record_for("s", 1, i) for i in range(200, 350)])
    lg.close()
    write_partition(d, "s", 2, 50)
    batches = run_available_now(spark, d, sink, subscribe="s", startingOffsets="earliest", maxOffsetsPerTrigger="300")
    assert sum(batches) == 200
    assert sink_rows(spark, sink) == expected("s", {0: 600, 1: 350, 2: 50})


def test_streaming_starts_at_latest_and_rejects_ending_offsets(spark, tmp_path):
    d, sink = str(tmp_path / "logs"), str(tmp_path / "sink")
    write_partition(d, "l", 0, 100)
    assert run_available_now(spark, d, sink, subscribe="l") == []
    lg = pylog.Log.open(os.path.join(d, "l-0"))
    lg.append([record_for("l", 0, i) for i in range(100, 130)])
    lg.close()
    assert run_available_now(spark, d, sink, subscribe="l") == [30]
    assert [r[2] for r in sink_rows(spark, sink)] == list(range(100, 130))
    with pytest.raises(Exception, match="ending offset not valid in streaming"):
        run_available_now(spark, d, str(tmp_path / "other"), subscribe="l", endingOffsets="latest")


def test_reads_while_another_process_appends(spark, tmp_path):
    """Every read is a dense prefix of exactly the records written: never torn, never out of order."""
    d, sink = str(tmp_path / "logs"), str(tmp_path / "sink")
    write_partition(d, "live", 0, 100)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.spark.appender", d, "live", "300"],
        cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "started"
        seen_batch, seen_stream = [], []
        for _ in range(3):  # the appender runs throughout: it stops only when told, below
            rows = (
                spark.read.format("pylog").option("subscribe", "live").load(d)
                .select("offset", "key", "value").collect()
            )
            got = sorted((r["offset"], r["key"], r["value"]) for r in rows)
            assert [g[0] for g in got] == list(range(len(got)))
            want = [record_for("live", 0, o) for o, _, _ in got]
            assert [(k, v) for _, k, v in got] == [(w.key, w.value) for w in want]
            seen_batch.append(len(got))
            run_available_now(spark, d, sink, subscribe="live", startingOffsets="earliest", maxOffsetsPerTrigger="2000")
            streamed = sink_rows(spark, sink)
            assert [r[2] for r in streamed] == list(range(len(streamed)))
            seen_stream.append(len(streamed))
        assert proc.poll() is None
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        end = int(proc.stdout.readline())
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_available_now(spark, d, sink, subscribe="live", startingOffsets="earliest", maxOffsetsPerTrigger="2000")
    assert sink_rows(spark, sink) == expected("live", {0: end})
    assert seen_batch == sorted(seen_batch) and seen_stream == sorted(seen_stream)
    assert end > seen_batch[0] >= 100
