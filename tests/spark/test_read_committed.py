"""The Spark source under kafka.isolation.level=read_committed (issue 17 item 4).

Without Spark: random transactional histories (three producers committing, aborting, leaving
transactions open; plain records; rolls, so producer snapshots exist), written by a real Log; then the
directory is read read-only. The LSO the driver computes (layout.last_stable_offset) equals the model's
for every high watermark, and read_range of any [start, end) below it returns exactly the model's
committed records, in order, with compressed batches among them. With Spark: a batch read and a
streaming availableNow read return the committed records below the LSO, read_uncommitted everything.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

import pylog  # noqa: E402
from pylog.record import Record, encode_batch  # noqa: E402
from pylog.spark import layout  # noqa: E402
from pylog.spark.reader import ReadSpec, arrow_schema, read_range  # noqa: E402
from pylog.storage import checkpoint  # noqa: E402
from pylog.storage.fileio import FileIO  # noqa: E402


class History:
    """Writes a transactional history to a real log and keeps the model of it."""

    def __init__(self, part: str) -> None:
        self.log = pylog.Log.open(part, segment_bytes=2048, retention_ms=-1)
        self.records: List[Tuple[int, bytes, Optional[int]]] = []  # offset, value, txn
        self.outcome: Dict[int, Optional[bool]] = {}
        self.first: Dict[int, int] = {}
        self.marker: Dict[int, int] = {}
        self.open: Dict[int, int] = {}
        self.seq = {1: 0, 2: 0, 3: 0}

    def plain(self, n: int = 1) -> None:
        base = self.log.log_end_offset
        self.log.append([b"p%d" % (base + i) for i in range(n)])
        self.records += [(base + i, b"p%d" % (base + i), None) for i in range(n)]

    def txn(self, pid: int, n: int, gzip: bool = False) -> None:
        txn = self.open.get(pid)
        base = self.log.log_end_offset
        if txn is None:
            txn = self.open[pid] = len(self.outcome)
            self.outcome[txn] = None
            self.first[txn] = base
        values = [b"t%d-%d" % (txn, base + i) for i in range(n)]
        batch = encode_batch([Record(value=v) for v in values], now_ms=0, producer_id=pid, producer_epoch=0,
                             base_sequence=self.seq[pid], transactional=True, compression="gzip" if gzip else None)
        self.seq[pid] += n
        assert self.log.append_as_leader(batch, leader_epoch=0).base_offset == base
        self.records += [(base + i, v, txn) for i, v in enumerate(values)]

    def end(self, pid: int, commit: bool) -> None:
        txn = self.open.pop(pid)
        self.outcome[txn] = commit
        self.marker[txn] = self.log.log_end_offset
        self.log.append_marker(pid, 0, commit, 0, 0)

    def lso(self, hw: int) -> int:
        lso = hw
        for txn, first in self.first.items():
            if self.outcome[txn] is None or self.marker[txn] >= hw:
                lso = min(lso, first)
        return lso

    def committed(self, start: int, end: int) -> List[Tuple[int, bytes]]:
        return [(o, v) for o, v, t in self.records if start <= o < end and (t is None or self.outcome[t])]


def rows(spec: ReadSpec) -> List[Tuple[int, bytes]]:
    batches = list(read_range(spec, chunk_bytes=700))
    if not batches:
        return []
    return [(r["offset"], r["value"]) for r in pa.Table.from_batches(batches, schema=arrow_schema(False)).to_pylist()]


op = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 3)),
    st.tuples(st.just("txn"), st.integers(1, 3), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("roll")),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=30), data=st.data())
def test_lso_and_committed_reads_match_the_model(tmp_path_factory, ops, data):
    part = os.path.join(str(tmp_path_factory.mktemp("rc")), "t-0")
    h = History(part)
    try:
        for o in ops:
            if o[0] == "plain":
                h.plain(o[1])
            elif o[0] == "txn":
                h.txn(o[1], o[2], o[3])
            elif o[0] == "end":
                if o[1] in h.open:
                    h.end(o[1], o[2])
            elif h.log.segments[h.log.segments.keys()[-1]].size:
                h.log.roll()  # the writer snapshots its producer state (with open transactions) here
    finally:
        h.log.close()
    leo = h.log.log_end_offset
    ro = pylog.Log.open(part, read_only=True)
    try:
        for hw in sorted({0, leo, data.draw(st.integers(0, leo))}):
            assert layout.last_stable_offset(ro, hw) == h.lso(hw), hw
        assert layout.last_stable_offset(ro, None) == h.lso(leo)
    finally:
        ro.close()
    lso = h.lso(leo)
    start = data.draw(st.integers(0, lso))
    end = data.draw(st.integers(start, lso))
    assert rows(ReadSpec("t", 0, part, start, end, read_committed=True)) == h.committed(start, end)
    # read_uncommitted is unchanged: every data record of the range
    assert [o for o, _ in rows(ReadSpec("t", 0, part, start, end))] == [o for o, _, _ in h.records
                                                                         if start <= o < end]


def test_a_damaged_snapshot_is_passed_over(tmp_path):
    part = os.path.join(str(tmp_path), "t-0")
    h = History(part)
    h.plain(2)
    h.txn(1, 2)                    # 2..3, stays open
    h.log.roll()                   # snapshot at 4 holds the open transaction
    h.plain(1)
    h.log.close()
    snaps = [n for n in os.listdir(part) if n.endswith(".snapshot")]
    assert snaps
    ro = pylog.Log.open(part, read_only=True)
    try:
        assert layout.last_stable_offset(ro, None) == 2
        for n in snaps:
            with open(os.path.join(part, n), "r+b") as f:
                f.write(b"\xff\xff")
        assert layout.last_stable_offset(ro, None) == 2  # from the log start instead
    finally:
        ro.close()


def _write_topic(d: str) -> History:
    h = History(os.path.join(d, "orders-0"))
    h.plain(2)                     # 0, 1
    h.txn(1, 3)                    # 2..4  committed
    h.txn(2, 2, gzip=True)         # 5..6  aborted
    h.end(1, True)                 # 7
    h.end(2, False)                # 8
    h.plain(1)                     # 9
    h.txn(3, 2)                    # 10..11 open: the LSO is 10
    h.plain(1)                     # 12
    h.log.close()
    return h


@pytest.mark.spark
def test_spark_batch_and_stream_read_committed(spark, tmp_path):
    d = str(tmp_path / "logs")
    h = _write_topic(d)

    def read(**opts: str) -> List[Tuple[int, bytes]]:
        r = spark.read.format("pylog").option("path", d).option("subscribe", "orders")
        for k, v in opts.items():
            r = r.option(k, v)
        return sorted((x.offset, bytes(x.value)) for x in r.load().select("offset", "value").collect())

    assert read(**{"kafka.isolation.level": "read_committed"}) == h.committed(0, 10) == [
        (0, b"p0"), (1, b"p1"), (2, b"t0-2"), (3, b"t0-3"), (4, b"t0-4"), (9, b"p9")]
    assert read(**{"isolation.level": "read_committed"}) == h.committed(0, 10)
    assert [o for o, _ in read()] == [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12]
    # an ending offset past the LSO is past "latest"
    with pytest.raises(Exception, match="past the latest readable offset 10"):
        read(**{"kafka.isolation.level": "read_committed", "endingOffsets": json.dumps({"orders": {"0": 12}})})
    # with a replication-offset-checkpoint the high watermark bounds it too: HW 8 leaves the ABORT
    # marker at 8 unreplicated, so its transaction (first offset 5) is unstable: LSO 5; HW 7 leaves
    # the COMMIT at 7 too: LSO 2
    hw_file = os.path.join(d, "replication-offset-checkpoint")
    checkpoint.write_offsets(FileIO(), hw_file, {("orders", 0): 8})
    assert read(**{"kafka.isolation.level": "read_committed"}) == h.committed(0, 5)
    checkpoint.write_offsets(FileIO(), hw_file, {("orders", 0): 7})
    assert read(**{"kafka.isolation.level": "read_committed"}) == [(0, b"p0"), (1, b"p1")]
    os.remove(os.path.join(d, "replication-offset-checkpoint"))
    # streaming: latest is the LSO, the aborted records never come out
    out = str(tmp_path / "out")
    q = (spark.readStream.format("pylog").option("path", d).option("subscribe", "orders")
         .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed").load()
         .selectExpr("offset", "value").writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination()
    got = sorted((x.offset, bytes(x.value)) for x in spark.read.parquet(out).collect())
    assert got == h.committed(0, 10)
    end = q.lastProgress["sources"][0]["endOffset"]
    assert (json.loads(end) if isinstance(end, str) else end) == {"orders": {"0": 10}}  # the LSO
