"""The Spark source's executor and planner halves, without Spark: Arrow batches vs pylog's reader."""
from __future__ import annotations

import json
import os

import pytest

pa = pytest.importorskip("pyarrow")

import pylog  # noqa: E402
from pylog.errors import CorruptRecordError, InvalidConfigurationError, OffsetOutOfRangeError  # noqa: E402
from pylog.spark import layout  # noqa: E402
from pylog.spark.reader import DataLossError, ReadSpec, arrow_schema, read_range  # noqa: E402
from .helpers import corrupt_batch, pylog_rows, segment_files, write_hw, write_partition  # noqa: E402


def arrow_rows(spec: ReadSpec, chunk_bytes: int = 1 << 20):
    batches = list(read_range(spec, chunk_bytes=chunk_bytes))
    for b in batches:
        assert b.schema.equals(arrow_schema(spec.include_headers))
    rows = pa.Table.from_batches(batches, schema=arrow_schema(spec.include_headers)).to_pylist() if batches else []
    out = []
    for r in rows:
        assert r["topic"] == spec.topic and r["partition"] == spec.partition
        assert r["timestampType"] == 0
        ms = round(r["timestamp"].timestamp() * 1000)
        heads = tuple((h["key"], h["value"]) for h in r["headers"]) if spec.include_headers and r["headers"] else None
        out.append((r["key"], r["value"], r["offset"], ms, heads))
    return out


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("logs"))
    write_partition(d, "orders", 0, 1200)
    write_partition(d, "orders", 1, 333, batch=7)
    return d


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("start,end", [(0, 1200), (1, 1199), (49, 51), (600, 601), (1199, 1200)])
def test_arrow_rows_equal_pylog_reader(logdir, headers, start, end):
    part = os.path.join(logdir, "orders-0")
    spec = ReadSpec("orders", 0, part, start, end, include_headers=headers)
    got = arrow_rows(spec, chunk_bytes=4096)  # small chunks: many Arrow batches, batches cut at chunk ends
    want = pylog_rows(part, start, end)
    if not headers:
        want = [w[:4] + (None,) for w in want]
    assert len(segment_files(part)) >= 3
    assert got == want


def test_arrow_schema_matches_spark_conversion():
    pytest.importorskip("pyspark")
    from pyspark.sql.pandas.types import to_arrow_schema

    from pylog.spark.datasource import kafka_schema

    for h in (False, True):
        assert to_arrow_schema(kafka_schema(h), timezone="UTC").equals(arrow_schema(h))


def test_split_ranges_cover_every_offset_once():
    ranges = [layout.Range("a", 0, "/x", 0, 1000), layout.Range("a", 1, "/y", 10, 13), layout.Range("b", 0, "/z", 5, 5)]
    for k in (1, 2, 3, 7, 50, 5000):
        pieces = layout.split_ranges(ranges, k)
        covered = sorted((p.topic, p.partition, o) for p in pieces for o in range(p.start, p.end))
        want = sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))
        assert covered == want
        assert all(p.end > p.start for p in pieces)
        if k > 2:
            assert len(pieces) >= min(k, 1003) * 0.5


def test_describe_uses_high_watermark_and_best_replica(tmp_path):
    single = str(tmp_path / "single")
    write_partition(single, "t", 0, 100)
    st = layout.describe(single, [("t", 0)])[("t", 0)]
    assert (st.latest, st.high_watermark) == (100, None)
    write_hw(single, {("t", 0): 60})
    assert layout.describe(single, [("t", 0)])[("t", 0)].latest == 60

    cluster = tmp_path / "cluster"
    for broker, n, hw in ((1, 80, 50), (2, 100, 70), (3, 90, 70)):
        write_partition(str(cluster / f"broker-{broker}"), "t", 0, n)
        write_hw(str(cluster / f"broker-{broker}"), {("t", 0): hw})
    st = layout.describe(str(cluster), [("t", 0)])[("t", 0)]
    assert (st.broker, st.latest, st.log_end_offset) == (2, 70, 100)


def test_options_validation(logdir):
    with pytest.raises(InvalidConfigurationError, match="exactly one"):
        layout.select_partitions(logdir, {})
    with pytest.raises(InvalidConfigurationError, match="exactly one"):
        layout.select_partitions(logdir, {"subscribe": "orders", "assign": '{"orders":[0]}'})
    assert layout.select_partitions(logdir, {"subscribepattern": "ord.*"}) == [("orders", 0), ("orders", 1)]
    assert layout.select_partitions(logdir, {"subscribepattern": "ord"}) == []
    assert layout.select_partitions(logdir, {"assign": '{"orders":[1]}'}) == [("orders", 1)]
    states = layout.describe(logdir, [("orders", 0), ("orders", 1)])
    with pytest.raises(InvalidConfigurationError, match="every selected partition"):
        layout.resolve('{"orders":{"0":1}}', "startingOffsets", states, allow_latest=True, allow_earliest=True)
    with pytest.raises(InvalidConfigurationError, match="latest"):
        layout.resolve("latest", "startingOffsets", states, allow_latest=False, allow_earliest=True)
    got = layout.resolve('{"orders":{"0":-2,"1":-1}}', "s", states, allow_latest=True, allow_earliest=True)
    assert got == {("orders", 0): 0, ("orders", 1): 333}


def test_corrupt_batch_raises_naming_file_or_is_skipped_and_reported(tmp_path):
    d = str(tmp_path)
    write_partition(d, "t", 0, 600, compress_every=0)
    part = os.path.join(d, "t-0")
    seg = segment_files(part)[0]
    pos, base, last = corrupt_batch(seg, 3)
    with pytest.raises(CorruptRecordError) as exc:
        list(read_range(ReadSpec("t", 0, part, 0, 600)))
    assert seg in str(exc.value) and "failOnDataLoss" in str(exc.value)

    report = str(tmp_path / "loss.jsonl")
    spec = ReadSpec("t", 0, part, 0, 600, fail_on_data_loss=False, data_loss_log=report)
    got = [r[2] for r in arrow_rows(spec)]
    assert got == [o for o in range(600) if not base <= o <= last]
    entries = [json.loads(line) for line in open(report)]
    assert [(e["from"], e["until"], e["file"]) for e in entries] == [(base, last + 1, seg)]


def test_retention_loss(tmp_path):
    d = str(tmp_path)
    write_partition(d, "t", 0, 400)
    lg = pylog.Log.open(os.path.join(d, "t-0"))
    start = lg.delete_records_before(130)
    lg.close()
    part = os.path.join(d, "t-0")
    with pytest.raises(DataLossError, match=r"offsets \[0, 1\d\d\)"):
        list(read_range(ReadSpec("t", 0, part, 0, 400)))
    rows = arrow_rows(ReadSpec("t", 0, part, 0, 400, fail_on_data_loss=False))
    assert rows[0][2] == start and [r[2] for r in rows] == list(range(start, 400))
    state = layout.describe(d, [("t", 0)])[("t", 0)]
    with pytest.raises(OffsetOutOfRangeError, match="failOnDataLoss"):
        layout.check_start(("t", 0), 0, state, True)
    assert layout.check_start(("t", 0), 0, state, False)[0] == start


def test_truncated_after_planning_is_data_loss(tmp_path):
    d = str(tmp_path)
    write_partition(d, "t", 0, 300)
    part = os.path.join(d, "t-0")
    lg = pylog.Log.open(part)
    lg.truncate_to(200)
    lg.close()
    with pytest.raises(DataLossError, match=r"\[200, 300\)"):
        list(read_range(ReadSpec("t", 0, part, 0, 300)))


def test_split_ranges_around_a_corrupt_batch(tmp_path):
    """A range ending right before the damage reads cleanly; the next one reports the damage once."""
    d = str(tmp_path)
    write_partition(d, "t", 0, 500, compress_every=0)
    part = os.path.join(d, "t-0")
    seg = segment_files(part)[0]
    _, base, last = corrupt_batch(seg, 4)
    assert [r[2] for r in arrow_rows(ReadSpec("t", 0, part, 0, base - 34))] == list(range(base - 34))
    assert [r[2] for r in arrow_rows(ReadSpec("t", 0, part, 0, base))] == list(range(base))
    report = str(tmp_path / "loss.jsonl")
    spec = ReadSpec("t", 0, part, base - 10, 500, fail_on_data_loss=False, data_loss_log=report)
    assert [r[2] for r in arrow_rows(spec)] == list(range(base - 10, base)) + list(range(last + 1, 500))
    assert [(e["from"], e["until"]) for e in map(json.loads, open(report))] == [(base, last + 1)]


def test_offset_gaps_between_batches(tmp_path):
    """Batches copied with their own offsets (as from a compacted Kafka log) keep those offsets."""
    from pylog.record import encode_batch

    from .helpers import record_for

    part = os.path.join(str(tmp_path), "g-0")
    lg = pylog.Log.open(part)
    want = []
    for base in (0, 10, 500, 503):
        recs = [record_for("g", 0, base + i) for i in range(3)]
        lg.append_batches(encode_batch(recs, now_ms=0, base_offset=base), assign_offsets=False)
        want += [base, base + 1, base + 2]
    lg.close()
    for start, end in ((0, 506), (1, 502), (11, 504)):
        got = [r[2] for r in arrow_rows(ReadSpec("g", 0, part, start, end))]
        assert got == [o for o in want if start <= o < end]


def test_control_batches_skipped_and_read_committed_reads_the_committed_transaction(tmp_path):
    from pylog.record import Record, encode_batch

    part = os.path.join(str(tmp_path), "x-0")
    lg = pylog.Log.open(part)
    lg.append([b"a", b"b"])
    lg.append([b"t1"], producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    marker = encode_batch([Record(value=b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01")], now_ms=0,
                          base_offset=3, producer_id=5, producer_epoch=0, transactional=True, control=True)
    lg.append_batches(marker, assign_offsets=False)
    lg.append([b"c"])
    lg.close()
    rows = arrow_rows(ReadSpec("x", 0, part, 0, 5))
    assert [(r[2], r[1]) for r in rows] == [(0, b"a"), (1, b"b"), (2, b"t1"), (4, b"c")]
    assert [r[2] for r in arrow_rows(ReadSpec("x", 0, part, 0, 2, read_committed=True))] == [0, 1]
    # the COMMIT marker at 3 ends producer 5's transaction: read_committed reads it too
    assert [r[2] for r in arrow_rows(ReadSpec("x", 0, part, 0, 5, read_committed=True))] == [0, 1, 2, 4]


def test_topic_named_broker_is_not_a_cluster(tmp_path):
    d = str(tmp_path)
    write_partition(d, "broker", 1, 10)
    assert not layout.is_cluster_dir(d)
    assert layout.describe(d, [("broker", 1)])[("broker", 1)].latest == 10


GC_CYCLE = r"""
import gc, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
import fuzz_corpus as fc
from pylog.errors import CorruptRecordError
from pylog.spark.reader import ReadSpec, read_range

root = tempfile.mkdtemp()
part = os.path.join(root, "t-0")
os.makedirs(part)
bad = bytearray(fc.v2_batch([fc.make_record(i) for i in range(5)], 0))
bad[61] ^= 0x40  # first record's length varint: malformed records, then a fresh CRC
fc.reseal(bad)
with open(os.path.join(part, "00000000000000000000.log"), "wb") as f:
    f.write(bytes(bad))
errors = 0
for i in range(200):
    try:
        list(read_range(ReadSpec("t", 0, part, 0, 5)))
    except CorruptRecordError as exc:
        errors += 1
        cycle = {"exc": exc}
        cycle["self"] = cycle  # the exception and its frames now die only in the GC
    if i % 40 == 0:
        gc.collect()
gc.collect()
print("ok", errors)
"""


def test_decode_error_in_a_reference_cycle_does_not_crash_the_gc() -> None:
    """The Arrow builder holds a cffi export of the segment's bytes while it decodes; an error
    raised with the export alive, kept in a reference cycle, once crashed CPython's GC (the
    same pattern as pylog._native.batch). The export is released before the error leaves."""
    import subprocess
    import sys

    fuzz_dir = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fuzz")
    proc = subprocess.run([sys.executable, "-c", GC_CYCLE, fuzz_dir], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ok", "200"]
