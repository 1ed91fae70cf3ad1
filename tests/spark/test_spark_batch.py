"""Batch reads and writes through a real local SparkSession (one per test run, see conftest)."""
from __future__ import annotations

import json
import os

import pytest

import pylog
from .helpers import corrupt_batch, pylog_rows, segment_files, write_hw, write_partition

pytestmark = pytest.mark.spark

COUNTS = {("orders", 0): 900, ("orders", 1): 250, ("orders", 2): 0, ("events", 0): 120}


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("sparklogs"))
    for (t, p), n in COUNTS.items():
        if n:
            write_partition(d, t, p, n, batch=40 if p else 25)
        else:
            pylog.Log.open(os.path.join(d, f"{t}-{p}")).close()
    return d


def read(spark, path, **options):
    r = spark.read.format("pylog").option("path", path)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def ranges(df):
    """{(topic, partition): (min, max, count, distinct)} of a read."""
    from pyspark.sql import functions as F

    rows = df.groupBy("topic", "partition").agg(F.min("offset"), F.max("offset"), F.count("*")).collect()
    return {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}


def test_rows_equal_pylog_reader(spark, logdir):
    df = read(spark, logdir, subscribe="orders,events", includeHeaders="true")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.selectExpr(
        "key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType", "headers"
    ).collect()
    got = sorted(
        (
            r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["ts"], r["timestampType"],
            tuple((h["key"], h["value"]) for h in r["headers"]) if r["headers"] is not None else None,
        )
        for r in rows
    )
    want = sorted(
        (t, p, off, k, v, ts, 0, h)
        for (t, p) in COUNTS
        for (k, v, off, ts, h) in pylog_rows(os.path.join(logdir, f"{t}-{p}"))
    )
    assert len(got) == sum(COUNTS.values())
    assert got == want
    plain = read(spark, logdir, subscribe="orders")
    assert plain.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert plain.selectExpr("count(*)", "count(key)", "count(value)").first() == (
        1150,
        sum(1 for i in range(900) if i % 3) + sum(1 for i in range(250) if i % 3),
        sum(1 for i in range(900) if i % 11 != 5) + sum(1 for i in range(250) if i % 11 != 5),
    )


def test_topic_selection(spark, logdir):
    assert set(ranges(read(spark, logdir, subscribePattern="ev.*"))) == {("events", 0)}
    assert ranges(read(spark, logdir, assign=json.dumps({"orders": [1], "events": [0]}))) == {
        ("orders", 1): (0, 249, 250),
        ("events", 0): (0, 119, 120),
    }
    with pytest.raises(Exception, match="exactly one of the options"):
        read(spark, logdir).collect()


@pytest.mark.parametrize(
    "start,end,want",
    [
        (None, None, {("orders", 0): (0, 899, 900), ("orders", 1): (0, 249, 250)}),
        ("earliest", "latest", {("orders", 0): (0, 899, 900), ("orders", 1): (0, 249, 250)}),
        (
            {"orders": {"0": 10, "1": -2, "2": -2}},
            {"orders": {"0": 20, "1": -1, "2": -1}},
            {("orders", 0): (10, 19, 10), ("orders", 1): (0, 249, 250)},
        ),
        (
            {"orders": {"0": 899, "1": 249, "2": -1}},
            None,
            {("orders", 0): (899, 899, 1), ("orders", 1): (249, 249, 1)},
        ),
        ({"orders": {"0": -1, "1": 250, "2": 0}}, None, {}),
    ],
)
def test_offsets_options(spark, logdir, start, end, want):
    opts = {"subscribe": "orders"}
    if start is not None:
        opts["startingOffsets"] = start if isinstance(start, str) else json.dumps(start)
    if end is not None:
        opts["endingOffsets"] = end if isinstance(end, str) else json.dumps(end)
    assert ranges(read(spark, logdir, **opts)) == want


@pytest.mark.parametrize(
    "opts,message",
    [
        ({"startingOffsets": "latest"}, "can't be 'latest' for batch"),
        ({"endingOffsets": '{"orders":{"0":-2,"1":-1,"2":-1}}'}, "-2 \\(earliest\\) is not allowed"),
        ({"startingOffsets": '{"orders":{"0":1}}'}, "must list every selected partition"),
        ({"endingOffsets": '{"orders":{"0":901,"1":-1,"2":-1}}'}, "ending offset 901 is past the latest"),
        ({"startingOffsets": '{"orders":{"0":50,"1":0,"2":0}}', "endingOffsets": '{"orders":{"0":40,"1":-1,"2":-1}}'},
         "starting offset 50 is after the ending offset 40"),
        ({"minPartitions": "0"}, "must be a positive integer"),
    ],
)
def test_bad_offsets_options_fail_clearly(spark, logdir, opts, message):
    with pytest.raises(Exception, match=message):
        read(spark, logdir, subscribe="orders", **opts).collect()


def test_ending_past_latest_is_clamped_without_fail_on_data_loss(spark, logdir):
    df = read(
        spark, logdir, subscribe="orders", failOnDataLoss="false", endingOffsets='{"orders":{"0":5000,"1":-1,"2":-1}}'
    )
    assert ranges(df)[("orders", 0)] == (0, 899, 900)


def test_min_partitions_split_covers_every_offset_once(spark, logdir):
    from pyspark.sql.functions import spark_partition_id

    df = read(spark, logdir, subscribe="orders", minPartitions="9")
    assert df.rdd.getNumPartitions() >= 8
    per_task = df.groupBy(spark_partition_id().alias("task"), "partition").count().collect()
    assert sum(1 for r in per_task if r["partition"] == 0) >= 5  # orders-0 really was split
    offsets = sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())
    assert offsets == [(0, o) for o in range(900)] + [(1, o) for o in range(250)]


def test_reads_below_high_watermark_and_picks_best_replica(spark, tmp_path):
    single = str(tmp_path / "single")
    write_partition(single, "t", 0, 100)
    write_hw(single, {("t", 0): 64})
    assert ranges(read(spark, single, subscribe="t")) == {("t", 0): (0, 63, 64)}

    cluster = tmp_path / "cluster"
    for broker, n, hw in ((0, 100, 40), (1, 90, 85), (2, 60, 60)):
        write_partition(str(cluster / f"broker-{broker}"), "t", 0, n)
        write_hw(str(cluster / f"broker-{broker}"), {("t", 0): hw})
    df = read(spark, str(cluster), subscribe="t")
    assert ranges(df) == {("t", 0): (0, 84, 85)}
    with pytest.raises(Exception, match="past the latest readable offset 85"):
        read(spark, str(cluster), subscribe="t", endingOffsets='{"t":{"0":90}}').collect()


def test_corrupt_segment_error_names_file_or_is_skipped_and_reported(spark, tmp_path):
    d = str(tmp_path / "logs")
    write_partition(d, "c", 0, 500, compress_every=0)
    seg = segment_files(os.path.join(d, "c-0"))[0]
    _, base, last = corrupt_batch(seg, 4)
    with pytest.raises(Exception) as exc:
        read(spark, d, subscribe="c").collect()
    assert "CorruptRecordError" in str(exc.value) and seg in str(exc.value)

    report = str(tmp_path / "loss.jsonl")
    df = read(spark, d, subscribe="c", failOnDataLoss="false", dataLossLog=report, minPartitions="3")
    got = sorted(r["offset"] for r in df.select("offset").collect())
    assert got == [o for o in range(500) if not base <= o <= last]
    entries = [json.loads(line) for line in open(report)]
    assert [(e["from"], e["until"], e["file"]) for e in entries] == [(base, last + 1, seg)]


def test_custom_schema_is_refused(spark, logdir):
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("pylog").schema("value binary").option("subscribe", "orders").load(logdir).collect()


def test_writer_appends_and_partitions_like_kafka(spark, tmp_path):
    from pylog.spark.datasource import default_partition

    d = str(tmp_path / "out")
    rows = [(f"k{i}" if i % 5 else None, f"value-{i}") for i in range(300)]
    src = spark.createDataFrame(rows, "key string, value string").repartition(2)
    src.write.format("pylog").mode("append").option("topic", "w").option("numPartitions", "3").save(d)
    back = read(spark, d, subscribe="w").selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "partition").collect()
    assert sorted(((r["k"], r["v"]) for r in back), key=str) == sorted(rows, key=str)
    for r in back:
        if r["k"] is not None:
            assert r["partition"] == default_partition(r["k"].encode(), 3)
    # Offsets in each partition are dense from 0 (two tasks took turns on the directory lock).
    for p in range(3):
        lg = pylog.Log.open(os.path.join(d, f"w-{p}"), read_only=True)
        assert [r.offset for r in lg.read(0, 1 << 20)] == list(range(lg.log_end_offset))
        lg.close()

    hdr = spark.createDataFrame(
        [(b"a", b"1", 2, [("h", b"x")]), (None, b"2", 0, None)],
        "key binary, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    hdr.write.format("pylog").mode("append").option("topic", "w").save(d)
    lg = pylog.Log.open(os.path.join(d, "w-2"), read_only=True)
    last = list(lg.read(0, 1 << 20))[-1]
    assert (last.key, last.value, tuple(last.headers)) == (b"a", b"1", (("h", b"x"),))
    lg.close()
    with pytest.raises(Exception, match="partition 7 does not exist"):
        spark.createDataFrame([(b"v", 7)], "value binary, partition int").write.format("pylog").mode("append").option(
            "topic", "w"
        ).save(d)
