"""The ``pylog`` command, run as ``python -m pylog`` in a subprocess on real log directories."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import List, Optional

import pytest

import pylog
from pylog import Log, Record


def run(*args: str, stdin: Optional[bytes] = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pylog", *args], input=stdin, capture_output=True, timeout=120
    )


def write_log(tmp_path, batches: List[List[Record]], append_kw: Optional[dict] = None, roll_after: int = -1,
              **config) -> str:
    part = os.path.join(str(tmp_path), "orders-0")
    log = Log.open(part, **config)
    try:
        for i, recs in enumerate(batches):
            log.append(recs, leader_epoch=3, **(append_kw or {}))
            if i == roll_after:
                log.roll()
    finally:
        log.close()
    return part


def seg(part: str, ext: str, base: int = 0) -> str:
    return os.path.join(part, f"{base:020d}.{ext}")


def test_every_verb_has_help():
    for verb in ("dump-log", "verify", "describe", "produce", "consume", "bench"):
        r = run(verb, "--help")
        assert r.returncode == 0, (verb, r.stderr)
        assert b"usage: pylog" in r.stdout
    assert run("--help").returncode == 0
    assert run().returncode == 2  # a verb is required


def test_dump_log_batches_records_and_indexes(tmp_path):
    t0 = int(time.time() * 1000)  # recent: old timestamps would make retention delete the segment
    batches = [
        [Record(b"v0", key=b"k0", timestamp=t0), Record(b"v1", timestamp=t0 + 1, headers=(("h", b"x"),))],
        [Record(b"caf\xc3\xa9\x00", key=None, timestamp=t0 + 2)],
    ]
    # A tiny index interval makes every batch get an index entry.
    part = write_log(tmp_path, batches, append_kw=dict(producer_id=7, producer_epoch=1, base_sequence=0),
                     index_interval_bytes=1)
    r = run("dump-log", "--print-data", seg(part, "log"))
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    lines = [l for l in out.splitlines() if l.startswith("baseOffset")]
    assert len(lines) == 2
    assert "baseOffset: 0 lastOffset: 1 count: 2" in lines[0]
    assert "partitionLeaderEpoch: 3" in lines[0] and "isvalid: true" in lines[0]
    assert "position: 0 " in lines[0]
    assert "producerId: 7 producerEpoch: 1" in lines[0] and "baseSequence: 0" in lines[0]
    assert "isTransactional: false isControl: false" in lines[0] and "magic: 2 compresscodec: none" in lines[0]
    size0 = int(re.search(r"size: (\d+)", lines[0]).group(1))
    assert f"baseOffset: 2 lastOffset: 2 count: 1" in lines[1] and f"position: {size0} " in lines[1]
    assert f"| offset: 0 CreateTime: {t0} keySize: 2 valueSize: 2 headerKeys: [] key: k0 payload: v0" in out
    assert "headerKeys: [h:x] key: null payload: v1" in out
    assert "key: null payload: café\\x00" in out
    # Without --print-data, no records; with --deep-iteration, records without payloads.
    plain = run("dump-log", seg(part, "log")).stdout.decode()
    assert "| offset" not in plain
    deep = run("dump-log", "--deep-iteration", seg(part, "log")).stdout.decode()
    assert f"| offset: 2 CreateTime: {t0 + 2}" in deep and "payload" not in deep

    r = run("dump-log", seg(part, "index"), seg(part, "timeindex"))
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    # As in Kafka, an entry is added once index_interval_bytes were written since
    # the last one: here for the second batch only, at its position.
    idx = re.findall(r"^offset: (\d+) position: (\d+)$", out, re.M)
    assert idx == [("2", str(size0))]
    tidx = re.findall(r"^timestamp: (\d+) offset: (\d+)$", out, re.M)
    assert tidx and tidx[-1] == (str(t0 + 2), "2")


def test_dump_log_compressed_deep_iteration(tmp_path):
    part = write_log(tmp_path, [[Record(b"a" * 50), Record(b"b" * 50)]], append_kw=dict(compression="gzip"))
    out = run("dump-log", "--deep-iteration", "--print-data", seg(part, "log")).stdout.decode()
    assert "compresscodec: gzip" in out
    assert "payload: " + "b" * 50 in out


def flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0xFF]))


def test_flipped_byte_reported_by_dump_log_and_verify_then_repaired(tmp_path):
    part = write_log(tmp_path, [[Record(b"first-%d" % i) for i in range(3)], [Record(b"second")], [Record(b"third")]])
    log_path = seg(part, "log")
    out = run("dump-log", log_path).stdout.decode()
    positions = [int(p) for p in re.findall(r"position: (\d+) ", out)]
    assert len(positions) == 3
    size = os.path.getsize(log_path)
    flip(log_path, positions[1] + 70)  # inside the second batch's records: a CRC mismatch

    r = run("dump-log", log_path)
    assert r.returncode == 1
    err = r.stderr.decode()
    assert log_path in err and f"byte position {positions[1]}" in err
    assert "Traceback" not in err
    assert "isvalid: false" in r.stdout.decode()

    r = run("verify", str(tmp_path))
    assert r.returncode == 1
    out = r.stdout.decode()
    assert f"PROBLEM {log_path} at byte position {positions[1]}" in out
    assert f"({size - positions[1]} bytes would be dropped)" in out
    assert "problems: 1" in out

    # --repair without --yes asks, and "n" leaves the file alone.
    r = run("verify", "--repair", str(tmp_path), stdin=b"n\n")
    assert r.returncode == 1 and os.path.getsize(log_path) == size

    r = run("verify", "--repair", "--yes", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert os.path.getsize(log_path) == positions[1]
    r = run("verify", str(tmp_path))
    assert r.returncode == 0 and "problems: 0" in r.stdout.decode()
    r = run("consume", str(tmp_path), "--topic", "orders", "--from-beginning")
    assert r.stdout == b"first-0\nfirst-1\nfirst-2\n"


def test_corrupt_index_fails_validation(tmp_path):
    part = write_log(tmp_path, [[Record(b"x")], [Record(b"y")]], index_interval_bytes=1)
    with open(seg(part, "index"), "ab") as f:
        f.write(b"\x00\x00\x00")  # not a whole entry
    r = run("dump-log", seg(part, "index"))
    assert r.returncode == 1 and b"fails validation" in r.stderr
    r = run("verify", str(tmp_path))
    assert r.returncode == 1 and seg(part, "index").encode() in r.stdout


def test_describe_log_dir(tmp_path):
    part = write_log(tmp_path, [[Record(b"%d" % i) for i in range(5)], [Record(b"x")]], roll_after=0)
    log = Log.open(part)
    try:
        log.delete_records_before(2)
        expected = (log.log_start_offset, log.log_end_offset, len(log.segments))
        assert expected == (2, 6, 2)
    finally:
        log.close()
    r = run("describe", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert f"Topic: orders Partition: 0 LogStartOffset: {expected[0]} LogEndOffset: 6 " in out
    assert f"Segments: {expected[2]} LeaderEpoch: 3 RecoveryPoint: 6" in out
    assert expected[1] == 6


def test_describe_does_not_need_the_lock(tmp_path):
    part = write_log(tmp_path, [[Record(b"a")]])
    log = Log.open(part)  # a writer holds the directory
    try:
        r = run("describe", str(tmp_path))
        assert r.returncode == 0, r.stderr
        assert b"LogEndOffset: 1 " in r.stdout
    finally:
        log.close()


def test_describe_cluster_dir(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=3)
    try:
        c.create_topic("orders", partitions=1, replication_factor=3, min_insync_replicas=2)
        for i in range(4):
            c.producer(acks="all").send("orders", b"v%d" % i).result()
        info = [p for p in c.describe("orders") if p.topic == "orders"][0]
    finally:
        c.close()
    r = run("describe", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert f"Topic: orders Partition: 0 Leader: {info.leader} LeaderEpoch: {info.leader_epoch}" in out
    assert "Replicas: " + ",".join(map(str, info.replicas)) in out
    assert "Isr: " + ",".join(map(str, info.isr)) in out
    assert out.count("Broker: ") == 3
    assert f"Broker: {info.leader} Topic: orders Partition: 0 LogStartOffset: 0 LogEndOffset: 4" in out


def test_produce_consume_round_trip(tmp_path):
    lines = b"k1:v1\nno key here\nk2:a:b\n\xff\xfe:bin\n"
    r = run("produce", str(tmp_path), "--topic", "t", "--partition", "1", "--key-separator", ":", stdin=lines)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"" and b"Produced 4 records" in r.stderr
    r = run("consume", str(tmp_path), "--topic", "t", "--partition", "1", "--from-beginning", "--print-key",
            "--key-separator", "=")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"k1=v1\nnull=no key here\nk2=a:b\n\xff\xfe=bin\n"
    with Log.open(os.path.join(str(tmp_path), "t-1"), read_only=True) as log:
        recs = list(log.read(0))
    assert [(r.key, r.value) for r in recs] == [(b"k1", b"v1"), (None, b"no key here"), (b"k2", b"a:b"), (b"\xff\xfe", b"bin")]
    # Appends continue after the existing records; --offset and --max-messages select.
    run("produce", str(tmp_path), "--topic", "t", "--partition", "1", stdin=b"more\n")
    r = run("consume", str(tmp_path), "--topic", "t", "--partition", "1", "--offset", "2", "--max-messages", "2")
    assert r.stdout == b"a:b\nbin\n"
    r = run("consume", str(tmp_path), "--topic", "t", "--partition", "1", "--offset", "4")
    assert r.stdout == b"more\n"
    r = run("consume", str(tmp_path), "--topic", "t", "--partition", "1", "--offset", "99")
    assert r.returncode == 1 and b"outside" in r.stderr


def test_missing_inputs_are_errors_not_tracebacks(tmp_path):
    r = run("dump-log", str(tmp_path / "00000000000000000000.log"))
    assert r.returncode == 1 and b"no such file" in r.stderr and b"Traceback" not in r.stderr
    r = run("consume", str(tmp_path), "--topic", "nope")
    assert r.returncode == 1 and b"Traceback" not in r.stderr
    r = run("verify", str(tmp_path / "absent"))
    assert r.returncode == 1


def test_index_entry_that_points_at_the_wrong_batch(tmp_path):
    part = write_log(tmp_path, [[Record(b"x")], [Record(b"y")], [Record(b"z")]], index_interval_bytes=1)
    entries = run("dump-log", seg(part, "index")).stdout.decode()
    assert re.findall(r"^offset: (\d+) ", entries, re.M) == ["1", "2"]
    with open(seg(part, "index"), "r+b") as f:
        f.seek(4)
        f.write((1).to_bytes(4, "big"))  # entry 0 now points inside the first batch
    r = run("dump-log", seg(part, "index"))
    assert r.returncode == 1
    assert b"index entry 0 (byte position 0) maps offset 1 to log position 1, but no batch starts there" in r.stderr


def test_verify_progress_bar_and_index_repair(tmp_path):
    part = write_log(tmp_path, [[Record(b"x")], [Record(b"y")]], index_interval_bytes=1)
    r = run("verify", "--progress", str(tmp_path))
    assert r.returncode == 0 and b"100.0%" in r.stderr
    assert b"partitions: 1 segments: 1 batches: 2 records: 2" in r.stdout
    r = run("verify", str(tmp_path))
    assert b"%" not in r.stderr  # no bar when stderr is not a terminal
    with open(seg(part, "index"), "ab") as f:
        f.write(b"\x00\x00\x00")
    r = run("verify", "--repair", "--yes", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert b"index fails validation" in r.stdout
    assert os.path.getsize(seg(part, "index")) % 8 == 0
    r = run("verify", str(tmp_path))
    assert r.returncode == 0 and b"problems: 0" in r.stdout


def test_repair_refuses_while_a_writer_holds_the_directory(tmp_path):
    part = write_log(tmp_path, [[Record(b"x")], [Record(b"y")]])
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys, pylog; l = pylog.Log.open(sys.argv[1]); print('open', flush=True); "
         "sys.stdin.read(); l.close()", part],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        assert writer.stdout.readline() == b"open\n"
        size = os.path.getsize(seg(part, "log"))
        flip(seg(part, "log"), size - 3)  # damage it under the writer
        rp = open(os.path.join(str(tmp_path), "recovery-point-offset-checkpoint"), "rb").read()
        r = run("verify", "--repair", "--yes", str(tmp_path))
        assert r.returncode == 1 and b"locked by a running writer" in r.stderr
        assert os.path.getsize(seg(part, "log")) == size
        assert open(os.path.join(str(tmp_path), "recovery-point-offset-checkpoint"), "rb").read() == rp
    finally:
        writer.communicate(b"", timeout=60)


def test_log_dir_with_a_topic_named_broker_is_not_a_cluster(tmp_path):
    """verify and describe find every partition of a log dir holding ``broker-0`` (topic "broker").

    The CLI once took any ``broker-*`` folder for a broker's log directory: it
    then saw only the ``broker-0`` partition and missed ``orders-0`` (the Spark
    source, with another rule, saw both). One rule now: storage.logdir.list_log_dirs.
    """
    for tp, n in (("broker-0", 2), ("orders-0", 3)):
        log = Log.open(os.path.join(str(tmp_path), tp))
        log.append([Record(b"%d" % i) for i in range(n)])
        log.close()
    r = run("describe", str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "Broker: " not in out
    assert "Topic: broker Partition: 0 LogStartOffset: 0 LogEndOffset: 2 " in out
    assert "Topic: orders Partition: 0 LogStartOffset: 0 LogEndOffset: 3 " in out
    r = run("verify", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert b"partitions: 2 " in r.stdout, r.stdout
