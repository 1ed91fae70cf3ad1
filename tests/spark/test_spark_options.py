"""Option checking, timestamp options, maxRecordsPerPartition, unknown topics, the streaming sink and
the executor import check, through the shared SparkSession (see conftest)."""
from __future__ import annotations

import json
import os

import pytest

import pylog
from .helpers import BASE_TS, pylog_rows, record_for, write_partition

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("optlogs"))
    write_partition(d, "ts", 0, 300, batch=20)
    write_partition(d, "ts", 1, 100, batch=30)
    return d


def read(spark, path, **options):
    r = spark.read.format("pylog").option("path", path)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def offsets(df):
    """{partition: sorted offsets} of a read."""
    out = {}
    for r in df.select("partition", "offset").collect():
        out.setdefault(r["partition"], []).append(r["offset"])
    return {p: sorted(v) for p, v in out.items()}


def ts_of(i):
    """A timestamp whose earliest record at or after it is record ``i`` (helpers: BASE_TS + 7i + i%5, increasing)."""
    return BASE_TS + 7 * i


@pytest.mark.parametrize(
    "opts,message",
    [
        ({"startingOffset": "earliest"}, r"unknown option 'startingoffset'.*did you mean 'startingOffsets'.*known options: assign"),
        ({"kafka.bootstrap.servers": "localhost:9092"}, r"'kafka.bootstrap.servers' does not apply.*no broker to connect to"),
        ({"kafka.security.protocol": "SSL"}, r"does not apply.*Kafka client settings do not apply"),
        ({"groupIdPrefix": "x"}, r"does not apply.*no consumer group"),
        ({"kafka.auto.offset.reset": "earliest"}, r"use startingOffsets"),
        ({"startingTimestamp": "-5"}, r"cannot be negative"),
        ({"startingTimestamp": "yesterday"}, r"must be a timestamp in milliseconds"),
        ({"startingOffsetsByTimestamp": '{"ts":{"0":1}}'}, r"must list every selected partition"),
        ({"startingTimestamp": str(ts_of(10_000))}, r"no record of ts-0 .* startingOffsetsByTimestampStrategy=latest"),
        ({"startingOffsetsByTimestampStrategy": "newest"}, r"must be 'error' or 'latest'"),
        ({"maxRecordsPerPartition": "0"}, r"must be a positive integer"),
        ({"maxTriggerDelay": "5m"}, r"only applies with minOffsetsPerTrigger"),
    ],
)
def test_bad_source_options_are_refused_by_name(spark, logdir, opts, message):
    with pytest.raises(Exception, match=message):
        read(spark, logdir, subscribe="ts", **opts).collect()


def test_timestamp_options_follow_kafkas_precedence_and_rules(spark, logdir):
    assert offsets(read(spark, logdir, subscribe="ts", startingTimestamp=str(ts_of(40)))) == {
        0: list(range(40, 300)), 1: list(range(40, 100))}
    by_ts = json.dumps({"ts": {"0": ts_of(250), "1": ts_of(10)}})
    ending = json.dumps({"ts": {"0": ts_of(260), "1": ts_of(10_000)}})
    # startingOffsetsByTimestamp wins over startingOffsets; an ending timestamp with no match is "latest".
    got = read(spark, logdir, subscribe="ts", startingOffsetsByTimestamp=by_ts, startingOffsets="earliest",
               endingOffsetsByTimestamp=ending)
    assert offsets(got) == {0: list(range(250, 260)), 1: list(range(10, 100))}
    # startingTimestamp wins over startingOffsetsByTimestamp; endingTimestamp over endingOffsets.
    got = read(spark, logdir, subscribe="ts", startingTimestamp=str(ts_of(95)), startingOffsetsByTimestamp=by_ts,
               endingTimestamp=str(ts_of(98)), endingOffsets="latest")
    assert offsets(got) == {0: [95, 96, 97], 1: [95, 96, 97]}
    # No record that late in ts-1: "latest" starts it at its end (nothing read), ts-0 from 150.
    late = json.dumps({"ts": {"0": ts_of(150), "1": ts_of(5_000)}})
    got = read(spark, logdir, subscribe="ts", startingOffsetsByTimestamp=late,
               startingOffsetsByTimestampStrategy="latest")
    assert offsets(got) == {0: list(range(150, 300))}
    with pytest.raises(Exception, match="ending timestamp not valid in streaming"):
        q = (spark.readStream.format("pylog").option("subscribe", "ts").option("endingTimestamp", "1").load(logdir)
             .writeStream.format("noop").trigger(availableNow=True).start())
        q.awaitTermination()


def test_max_records_per_partition_splits_and_covers_every_offset_once(spark, logdir):
    df = read(spark, logdir, subscribe="ts", maxRecordsPerPartition="70")
    # ts-0: 300 records -> 5 pieces of 60; ts-1: 100 -> 2 of 50.
    assert df.rdd.getNumPartitions() == 7
    assert offsets(df) == {0: list(range(300)), 1: list(range(100))}
    from pyspark.sql.functions import spark_partition_id

    sizes = sorted(r["count"] for r in df.groupBy(spark_partition_id().alias("t")).count().collect())
    assert sizes == [50, 50, 60, 60, 60, 60, 60]


def test_unknown_subscribed_topic_is_an_error_unless_asked(spark, logdir):
    with pytest.raises(Exception, match=r"subscribed topic\(s\) nope not found.*failOnUnknownTopic=false"):
        read(spark, logdir, subscribe="ts,nope").collect()
    assert offsets(read(spark, logdir, subscribe="ts,nope", failOnUnknownTopic="false"))[1] == list(range(100))
    assert read(spark, logdir, subscribe="nope", failOnUnknownTopic="false").count() == 0


def test_sink_refuses_unknown_options(spark, tmp_path):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match=r"unknown option 'topc' for the pylog sink \(did you mean 'topic'\?\)"):
        df.write.format("pylog").mode("append").option("topc", "t").save(str(tmp_path / "o"))
    with pytest.raises(Exception, match=r"'kafka.bootstrap.servers' does not apply to the pylog sink"):
        df.write.format("pylog").mode("append").option("topic", "t").option("kafka.bootstrap.servers", "h:1").save(
            str(tmp_path / "o"))


def _leo(part_dir):
    lg = pylog.Log.open(part_dir, read_only=True)
    try:
        return lg.log_end_offset
    finally:
        lg.close()


def _rows(part_dir):
    return [(k, v, h) for k, v, _o, _ts, h in pylog_rows(part_dir)]


def test_streaming_sink_writes_kafka_columns_and_a_retried_micro_batch_appends_again(spark, tmp_path):
    """A micro-batch that fails after appending part of its rows is run again on restart: what was
    appended appears twice (at-least-once, as Spark's Kafka sink), the rest once, nothing torn."""
    src, out, cp = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "cp")
    write_partition(src, "in", 0, 50)
    write_partition(src, "in", 1, 40)
    pylog.Log.open(os.path.join(out, "a-0")).close()
    # "b-0" is a file where the partition directory should be: appending to topic b fails.
    open(os.path.join(out, "b-0"), "w").close()

    def run():
        q = (
            spark.readStream.format("pylog").option("subscribe", "in").option("startingOffsets", "earliest")
            .option("includeHeaders", "true").load(src)
            .coalesce(1)  # one task: it appends topic a, then fails on topic b
            .selectExpr("CASE WHEN partition = 0 THEN 'a' ELSE 'b' END AS topic", "key", "value", "headers")
            .writeStream.format("pylog").option("checkpointLocation", cp).trigger(availableNow=True).start(out)
        )
        try:
            q.awaitTermination()
        except Exception:  # noqa: BLE001 - checked through q.exception()
            pass
        return q

    q = run()
    assert q.exception() is not None and "is a file" in str(q.exception())
    want_a, want_b = _rows(os.path.join(src, "in-0")), _rows(os.path.join(src, "in-1"))
    assert _rows(os.path.join(out, "a-0")) == want_a  # the failed micro-batch's first partition stayed

    os.remove(os.path.join(out, "b-0"))
    q = run()  # restart: Spark runs micro-batch 0 again with the same offsets
    assert q.exception() is None
    assert _rows(os.path.join(out, "a-0")) == want_a + want_a  # appended again by the retry
    assert _rows(os.path.join(out, "b-0")) == want_b
    assert want_a[0][2] is not None and any(k is not None for k, _v, _h in want_a)  # headers and keys went through
    # A later micro-batch that succeeds appends its records once.
    lg = pylog.Log.open(os.path.join(src, "in-1"))
    lg.append([record_for("in", 1, i) for i in range(40, 45)])
    lg.close()
    assert run().exception() is None
    assert _leo(os.path.join(out, "a-0")) == 100
    assert [v for _k, v, _h in _rows(os.path.join(out, "b-0"))] == [v for _k, v, _h in want_b] + [
        record_for("in", 1, i).value for i in range(40, 45)]


def test_executor_import_check_names_the_module_and_the_fix(spark):
    from pylog.errors import InvalidConfigurationError
    from pylog.spark import check_executor_imports

    check_executor_imports(spark)  # pylog, its C core and pyarrow import on this session's executors
    with pytest.raises(InvalidConfigurationError) as exc:
        check_executor_imports(spark, ("pylog", "no_such_module_for_pylog_test"))
    msg = str(exc.value)
    assert "no_such_module_for_pylog_test: ModuleNotFoundError" in msg
    assert "PYSPARK_PYTHON" in msg and "spark.pyspark.python" in msg
