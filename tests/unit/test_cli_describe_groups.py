"""``pylog describe``: consumer-group lag read back from ``__consumer_offsets`` (subprocess on real directories)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Dict, Tuple

from pylog import Log, Record
from pylog.cluster import Cluster
from pylog.replication.offsets_topic import (
    OFFSETS_TOPIC,
    GroupMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)


def describe(path: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", "describe", path], capture_output=True, timeout=120)


def group_rows(out: str) -> Dict[Tuple[str, str, int], Tuple[int, str, str]]:
    rows = {}
    for m in re.finditer(r"^Group: (\S+) Topic: (\S+) Partition: (\d+) CommittedOffset: (\d+) LogEndOffset: (\S+) "
                         r"Lag: (\S+)$", out, re.M):
        rows[(m.group(1), m.group(2), int(m.group(3)))] = (int(m.group(4)), m.group(5), m.group(6))
    return rows


def test_describe_shows_each_groups_committed_offset_and_lag(tmp_path):
    path = str(tmp_path / "cluster")
    with Cluster(path, brokers=3, seed=5) as c:
        c.create_topic("orders", partitions=2, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        futures = [p.send("orders", b"a%d" % i, partition=0) for i in range(10)]
        futures += [p.send("orders", b"b%d" % i, partition=1) for i in range(3)]
        assert [f.result().offset for f in futures] == list(range(10)) + list(range(3))
        billing = c.consumer("billing", ["orders"], enable_auto_commit=False)
        billing.poll(1.0)  # joins the group: its coordinator is known before the first commit
        billing.commit({("orders", 0): 2})
        billing.commit({("orders", 0): 4, ("orders", 1): 3})  # the later commit wins
        audit = c.consumer("audit", ["orders"], enable_auto_commit=False)
        audit.poll(1.0)
        audit.commit({("orders", 1): 1})
        hw = {row.partition: row.high_watermark for row in c.describe("orders")}
        assert hw == {0: 10, 1: 3}
        billing.close()
        audit.close()
    r = describe(path)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    rows = group_rows(out)
    assert rows == {
        ("billing", "orders", 0): (4, "10", "6"),
        ("billing", "orders", 1): (3, "3", "0"),
        ("audit", "orders", 1): (1, "3", "2"),
    }, out


def _append(log: Log, key: bytes, value) -> None:
    log.append([Record(value, key=key)])


def test_describe_replays_offsets_log_tombstones_and_latest_commit(tmp_path):
    """A hand-written log dir: latest commit per key wins, a tombstone removes it, group records are skipped."""
    root = tmp_path / "logs"
    offsets = Log.open(str(root / f"{OFFSETS_TOPIC}-0"))
    try:
        _append(offsets, encode_offset_commit_key("g1", "t", 0), encode_offset_commit_value(OffsetCommitValue(5)))
        _append(offsets, encode_group_metadata_key("g1"),
                encode_group_metadata_value(GroupMetadataValue("consumer", 1, "range", "m1", 0, ())))
        _append(offsets, encode_offset_commit_key("g1", "t", 0), encode_offset_commit_value(OffsetCommitValue(7)))
        _append(offsets, encode_offset_commit_key("g2", "t", 0), encode_offset_commit_value(OffsetCommitValue(1)))
        _append(offsets, encode_offset_commit_key("g2", "t", 0), None)  # tombstone: g2's offset is deleted
        _append(offsets, encode_offset_commit_key("g3", "gone", 0), encode_offset_commit_value(OffsetCommitValue(2)))
    finally:
        offsets.close()
    t0 = Log.open(str(root / "t-0"))
    try:
        t0.append([Record(b"x%d" % i) for i in range(9)])
    finally:
        t0.close()
    r = describe(str(root))
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    assert group_rows(out) == {("g1", "t", 0): (7, "9", "2"), ("g3", "gone", 0): (2, "-", "-")}, out


def test_describe_reports_a_corrupt_offsets_record(tmp_path):
    root = tmp_path / "logs"
    offsets = Log.open(str(root / f"{OFFSETS_TOPIC}-3"))
    try:
        _append(offsets, b"\x00\x09garbage", b"\x00\x03")
    finally:
        offsets.close()
    r = describe(str(root))
    err = r.stderr.decode()
    assert r.returncode == 1
    assert "Traceback" not in err and f"{OFFSETS_TOPIC}-3 offset 0" in err and "unknown key version 9" in err
    assert os.path.isdir(root / f"{OFFSETS_TOPIC}-3")


def test_transactional_offsets_count_only_once_committed(tmp_path):
    """send_offsets_to_transaction writes the offsets as a transactional batch: describe must replay them
    as the coordinator does - an aborted transaction's offsets are not committed, an open one's not yet."""
    path = str(tmp_path / "cluster")
    with Cluster(path, brokers=3, seed=11) as c:
        c.create_topic("in", partitions=3, replication_factor=3, min_insync_replicas=2)
        c.create_topic("out", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        for part in range(3):
            for i in range(10):
                p.send("in", b"x", partition=part)
        p.flush()
        t = c.producer(transactional_id="copier")
        t.init_transactions()
        for offsets, commit in (({("in", 0): 4}, True), ({("in", 0): 9, ("in", 1): 7}, False)):
            t.begin_transaction()
            t.send("out", b"y").result()
            t.send_offsets_to_transaction(offsets, "copiers")
            (t.commit_transaction if commit else t.abort_transaction)()
        t.begin_transaction()  # left open: its offsets are pending
        t.send("out", b"z").result()
        t.send_offsets_to_transaction({("in", 2): 3}, "copiers")
        c.advance(1_000)  # the markers of the abort
    r = describe(path)
    out = r.stdout.decode()
    assert r.returncode == 0, out + r.stderr.decode()
    rows = {k: v for k, v in group_rows(out).items() if k[0] == "copiers"}
    assert rows == {("copiers", "in", 0): (4, "10", "6")}, out
