"""The stream reader's admission control without a SparkSession: minOffsetsPerTrigger, maxTriggerDelay,
maxOffsetsPerTrigger, called the way Spark's driver calls them (offsets as JSON dicts)."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pylog  # noqa: E402
from pylog.errors import InvalidConfigurationError  # noqa: E402
from pylog.spark.datasource import PylogStreamReader, _Options  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows  # noqa: E402
from .helpers import record_for, write_partition  # noqa: E402


def append(d, topic, p, start, n):
    lg = pylog.Log.open(os.path.join(d, f"{topic}-{p}"))
    lg.append([record_for(topic, p, i) for i in range(start, start + n)])
    lg.close()


def reader(d, **opts):
    r = PylogStreamReader(_Options({"path": d, "subscribe": "m", "startingOffsets": "earliest", **opts}))
    clock = {"now": 1_000_000_000}
    r._now_ms = lambda: clock["now"]
    return r, clock


def test_min_offsets_per_trigger_holds_a_trigger_until_enough_or_the_delay_passed(tmp_path):
    d = str(tmp_path)
    write_partition(d, "m", 0, 30)
    write_partition(d, "m", 1, 10)
    r, clock = reader(d, minOffsetsPerTrigger="100", maxTriggerDelay="1m")
    limit = r.getDefaultReadLimit()
    assert limit == ReadMinRows(100)
    start = r.initialOffset()
    assert start == {"m": {"0": 0, "1": 0}}
    # Kafka's first trigger always runs (its last trigger time starts at 0).
    end = r.latestOffset(start, limit)
    assert end == {"m": {"0": 30, "1": 10}}
    # 60 new offsets < 100 and 59 s since that trigger: held (the start comes back).
    append(d, "m", 0, 30, 60)
    clock["now"] += 59_000
    assert r.latestOffset(end, limit) == end
    # 50 more: 110 >= 100, let through.
    append(d, "m", 1, 10, 50)
    end2 = r.latestOffset(end, limit)
    assert end2 == {"m": {"0": 90, "1": 60}}
    # 1 new record is held until maxTriggerDelay (1 minute) has passed since the last batch.
    append(d, "m", 0, 90, 1)
    clock["now"] += 59_999
    assert r.latestOffset(end2, limit) == end2
    clock["now"] += 1
    assert r.latestOffset(end2, limit) == {"m": {"0": 91, "1": 60}}
    # ReadAllAvailable (what Spark passes in some modes) is never held.
    append(d, "m", 0, 91, 1)
    assert r.latestOffset({"m": {"0": 91, "1": 60}}, ReadAllAvailable()) == {"m": {"0": 92, "1": 60}}


def test_min_and_max_offsets_per_trigger_together(tmp_path):
    d = str(tmp_path)
    write_partition(d, "m", 0, 300)
    write_partition(d, "m", 1, 100)
    r, clock = reader(d, minOffsetsPerTrigger="50", maxOffsetsPerTrigger="200")
    limit = r.getDefaultReadLimit()
    assert limit == ReadMaxRows(200)
    start = r.initialOffset()
    end = r.latestOffset(start, limit)
    assert end == {"m": {"0": 150, "1": 50}}  # 200 split 3:1 by backlog (Kafka's rateLimit)
    clock["now"] += 1000
    assert r.latestOffset(end, limit) == {"m": {"0": 300, "1": 100}}  # 200 left >= 50
    # availableNow ignores minOffsetsPerTrigger (it would otherwise wait for ever).
    r2, _ = reader(d, minOffsetsPerTrigger="1000", maxOffsetsPerTrigger="1000")
    r2.prepareForTriggerAvailableNow()
    s2 = r2.initialOffset()
    r2._last_trigger_ms = r2._now_ms()  # as if a batch had just run
    assert r2.latestOffset(s2, r2.getDefaultReadLimit()) == {"m": {"0": 300, "1": 100}}


@pytest.mark.parametrize(
    "opts,message",
    [
        ({"minOffsetsPerTrigger": "500", "maxOffsetsPerTrigger": "100"}, "must not be greater than 'maxOffsetsPerTrigger'"),
        ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, "must be a duration such as '15m'"),
        ({"minOffsetsPerTrigger": "-5"}, "must be a positive integer"),
    ],
)
def test_bad_trigger_options(tmp_path, opts, message):
    write_partition(str(tmp_path), "m", 0, 1)
    with pytest.raises(InvalidConfigurationError, match=message):
        reader(str(tmp_path), **opts)


def test_durations_parse_like_spark():
    from pylog.spark.options import parse_duration_ms

    assert [parse_duration_ms(v, "x") for v in ("15m", "30s", "500ms", "2h", "1d", "250", "3min")] == [
        900_000, 30_000, 500, 7_200_000, 86_400_000, 250, 180_000]


def test_stream_with_fail_on_unknown_topic_false_picks_the_topic_up_when_it_appears(tmp_path):
    d = str(tmp_path)
    write_partition(d, "other", 0, 5)
    with pytest.raises(Exception, match=r"subscribed topic\(s\) m not found.*failOnUnknownTopic=false"):
        reader(d)
    r, _ = reader(d, failOnUnknownTopic="false")
    start = r.initialOffset()
    assert start == {}
    assert r.latestOffset(start, ReadAllAvailable()) == {}
    write_partition(d, "m", 0, 7)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == {"m": {"0": 7}}
    parts = r.partitions(start, end)
    assert [(p.spec.topic, p.spec.partition, p.spec.start, p.spec.end) for p in parts] == [("m", 0, 0, 7)]
