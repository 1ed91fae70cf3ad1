"""The ``pylog`` command next to Kafka's tools (issue 19, item 4), run as ``python -m pylog`` subprocesses:
describe's topic filter, dump-log's offsets decoder and resync past damage, keyed produce through the
producer's partitioner, consume over every partition with kafka-console-consumer's print properties and
--follow, groups --reset-offsets (dry run by default), --version."""
from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import time
from typing import Optional

import pytest

import pylog
from pylog import Log, Record


def run(*args: str, stdin: Optional[bytes] = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", *args], input=stdin, capture_output=True, timeout=180)


def seg(part: str, base: int = 0) -> str:
    return os.path.join(part, f"{base:020d}.log")


def test_version():
    r = run("--version")
    assert r.returncode == 0
    assert r.stdout.decode().strip() == f"pylog {pylog.__version__} (distribution pylog-kafka)"


# ------------------------------------------------------------------ describe


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory):
    """A closed simulated cluster dir: topic orders (2 partitions), a group that committed, __consumer_offsets."""
    d = str(tmp_path_factory.mktemp("parity-cluster"))
    c = pylog.Cluster(d, brokers=1, seed=5)
    try:
        c.create_topic("orders", partitions=2, replication_factor=1)
        c.create_topic("audit", partitions=1, replication_factor=1)
        p = c.producer()
        for i in range(6):
            p.send("orders", b"v%d" % i, partition=i % 2).result()
        cons = c.consumer("billing", ["orders"], auto_offset_reset="earliest", enable_auto_commit=False)
        got = []
        while len(got) < 6:
            got += cons.poll(timeout=1.0)
        cons.commit({("orders", 0): 2, ("orders", 1): 3})
        cons.close(autocommit=False)
    finally:
        c.close()
    return d


def test_describe_hides_internal_topics_unless_asked(cluster_dir):
    r = run("describe", cluster_dir)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "__consumer_offsets" not in out
    assert "Topic: orders Partition: 1 Leader: 0" in out and "Topic: audit Partition: 0" in out
    assert "Group: billing Topic: orders Partition: 1 CommittedOffset: 3 LogEndOffset: 3 Lag: 0" in out
    assert b"Internal topics not shown: __consumer_offsets" in r.stderr and b"--include-internal" in r.stderr
    assert run("describe", "--exclude-internal", cluster_dir).stdout == r.stdout  # Kafka's flag: the default here

    r = run("describe", "--include-internal", cluster_dir)
    assert r.returncode == 0 and b"Topic: __consumer_offsets Partition: 0 " in r.stdout and r.stderr == b""


def test_describe_one_topic(cluster_dir):
    r = run("describe", "--topic", "orders", cluster_dir)
    assert r.returncode == 0, r.stderr
    topics = set(re.findall(r"Topic: (\S+) ", r.stdout.decode()))
    assert topics == {"orders"}
    assert len(r.stdout.decode().splitlines()) == 1 + 2 + 2 + 2  # cluster line, 2 leader lines, 2 replica lines, 2 lag
    r = run("describe", "--topic", "__consumer_offsets", cluster_dir)  # named: shown though internal
    assert r.returncode == 0 and b"Topic: __consumer_offsets " in r.stdout
    r = run("describe", "--topic", "nope", cluster_dir)
    assert r.returncode == 1 and b"no such topic: nope" in r.stderr


# ------------------------------------------------------------------ dump-log


def _offsets_segments(cluster_dir: str):
    base = os.path.join(cluster_dir, "broker-0")
    return [seg(os.path.join(base, n)) for n in sorted(os.listdir(base))
            if n.startswith("__consumer_offsets-") and os.path.getsize(seg(os.path.join(base, n))) > 0]


def test_dump_log_offsets_decoder(cluster_dir):
    files = _offsets_segments(cluster_dir)
    assert files
    r = run("dump-log", "--offsets-decoder", *files)
    assert r.returncode == 0, r.stderr
    commits = {}
    groups = []
    for line in r.stdout.decode().splitlines():
        m = re.match(r"\| offset: \d+ CreateTime: \d+ keySize: \d+ valueSize: -?\d+ headerKeys: \[\] key: (\{.*\}) "
                     r"payload: (.*)$", line)
        if not m:
            continue
        key, value = json.loads(m.group(1)), json.loads(m.group(2))
        if key["type"] == "offset_commit":
            commits[(key["group"], key["topic"], key["partition"])] = value["offset"]
            assert value["version"] == 3 and value["leaderEpoch"] >= -1 and value["commitTimestamp"] > 0
        else:
            assert key["type"] == "group_metadata" and key["group"] == "billing"
            groups.append(value)
    assert commits == {("billing", "orders", 0): 2, ("billing", "orders", 1): 3}
    joined = [g for g in groups if g is not None and g["members"]]
    assert joined and joined[0]["protocolType"] == "consumer"
    assert joined[0]["members"][0]["subscription"] == ["orders"]
    assert sorted(joined[0]["members"][0]["assignment"]) == ["orders-0", "orders-1"]


def test_dump_log_offsets_decoder_on_a_plain_topic_is_an_error(cluster_dir):
    r = run("dump-log", "--offsets-decoder", seg(os.path.join(cluster_dir, "broker-0", "orders-0")))
    assert r.returncode == 1 and b"is not a __consumer_offsets record" in r.stderr and b"Traceback" not in r.stderr
    assert b"offset 0 " in r.stderr


def test_dump_log_skip_record_metadata(tmp_path):
    part = str(tmp_path / "t-0")
    with Log.open(part) as log:
        log.append([Record(b"v1", key=b"k1"), Record(b"v2")])
    r = run("dump-log", "--skip-record-metadata", seg(part))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines()[1:] == ["key: k1 payload: v1", "key: null payload: v2"]


def _three_batches(tmp_path):
    part = str(tmp_path / "t-0")
    with Log.open(part) as log:
        for name in (b"first", b"second", b"third"):
            log.append([Record(name + b"-%d" % i) for i in range(3)])
    out = run("dump-log", seg(part)).stdout.decode()
    return seg(part), [int(p) for p in re.findall(r"position: (\d+) ", out)]


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0xFF]))


def test_dump_log_goes_on_past_a_bad_crc(tmp_path):
    path, pos = _three_batches(tmp_path)
    _flip(path, pos[1] + 70)  # inside the second batch's records: its header still frames it
    r = run("dump-log", "--print-data", path)
    assert r.returncode == 1
    out = r.stdout.decode()
    assert re.findall(r"baseOffset: (\d+) .* isvalid: (\w+)", out) == [("0", "true"), ("3", "false"), ("6", "true")]
    assert "payload: third-2" in out and "payload: second-0" not in out
    err = r.stderr.decode()
    assert f"at byte position {pos[1]}; its header is readable: resuming after it, byte position {pos[2]}" in err


def test_dump_log_resyncs_after_an_unreadable_header(tmp_path):
    path, pos = _three_batches(tmp_path)
    _flip(path, pos[1] + 16)  # the second batch's magic byte: its framing cannot be trusted
    r = run("dump-log", path)
    assert r.returncode == 1
    assert re.findall(r"baseOffset: (\d+) ", r.stdout.decode()) == ["0", "6"]
    err = r.stderr.decode()
    assert f"at byte position {pos[1]}; its header is not readable: resuming at the next valid batch, " \
           f"byte position {pos[2]} ({pos[2] - pos[1]} bytes skipped)" in err


def test_dump_log_stops_with_a_report_when_nothing_valid_follows(tmp_path):
    path, pos = _three_batches(tmp_path)
    size = os.path.getsize(path)
    _flip(path, pos[2] + 16)
    r = run("dump-log", path)
    assert r.returncode == 1
    assert re.findall(r"baseOffset: (\d+) ", r.stdout.decode()) == ["0", "3"]
    assert f"at byte position {pos[2]} ({size - pos[2]} bytes from there to the end of the file are not valid " \
           f"batches)".encode() in r.stderr


def test_dump_log_progress_bar(tmp_path):
    path, _ = _three_batches(tmp_path)
    r = run("dump-log", "--progress", path)
    assert r.returncode == 0 and b"100.0%" in r.stderr and b"ETA" in r.stderr and b"/s" in r.stderr


# ------------------------------------------------------------------ produce


def test_keyed_produce_uses_the_producers_partitioner(tmp_path):
    keys = [b"user-%d" % i for i in range(40)]
    # Where the producer puts each key (a 3-partition topic of a simulated cluster).
    c = pylog.Cluster(str(tmp_path / "c"), brokers=1, seed=1)
    try:
        c.create_topic("t", partitions=3, replication_factor=1)
        prod = c.producer()
        want = {k: prod.send("t", b"x", key=k).result().partition for k in keys}
    finally:
        c.close()
    assert len(set(want.values())) == 3
    d = tmp_path / "logs"
    for p in range(3):
        Log.open(str(d / f"t-{p}")).close()  # a log dir whose topic has 3 partitions
    lines = b"".join(k + b":v-" + k + b"\n" for k in keys)
    r = run("produce", str(d), "--topic", "t", "--property", "parse.key=true", "--property", "key.separator=:",
            stdin=lines)
    assert r.returncode == 0, r.stderr
    got = {}
    for p in range(3):
        with Log.open(str(d / f"t-{p}"), read_only=True) as log:
            for rec in log.read(0):
                got[rec.key] = p
                assert rec.value == b"v-" + rec.key
    assert got == want
    assert b"Produced 40 records to t-0 (offsets 0.." in r.stderr


def test_keyed_produce_to_a_queue_dir_goes_through_its_producer(tmp_path):
    d = str(tmp_path / "q")
    with pylog.open(d) as q:
        q.create_topic("t", partitions=3)
        prod = q.producer()
        want = {k: prod.send("t", b"x", key=k).result().partition for k in (b"a", b"b", b"c", b"d", b"e")}
        prod.close()
        r = run("produce", d, "--topic", "t", "--property", "parse.key=true", "--property", "key.separator=\\t",
                stdin=b"a\t1\nb\t2\nc\t3\nd\t4\ne\t5\n")
        assert r.returncode == 0, r.stderr
        cons = q.consumer(None, auto_offset_reset="earliest")
        cons.assign([("t", p) for p in range(3)])
        got = []
        while len(got) < 10:
            got += cons.poll(timeout=5.0)
        cons.close()
    placed = {x.key: x.partition for x in got if x.value != b"x"}
    assert placed == want


@pytest.mark.parametrize("prop, message", [
    ("parse.key", b"expected NAME=VALUE"),
    ("parse.keys=true", b"not a producer property; known: key.separator, parse.key"),
    ("parse.key=yes", b"expected true or false"),
])
def test_bad_producer_property(tmp_path, prop, message):
    r = run("produce", str(tmp_path), "--topic", "t", "--property", prop, stdin=b"a\n")
    assert r.returncode == 2 and message in r.stderr and b"Traceback" not in r.stderr
    assert not os.path.exists(tmp_path / "t-0")  # nothing written


# ------------------------------------------------------------------ consume


def _two_partitions(tmp_path):
    d = str(tmp_path)
    with Log.open(os.path.join(d, "t-0")) as log:
        log.append([Record(b"a", key=b"ka", headers=[("h", b"1"), ("n", None)], timestamp=1000)])
    with Log.open(os.path.join(d, "t-1")) as log:
        log.append([Record(b"b", timestamp=2000), Record(None, key=b"kc", timestamp=3000)])
    return d


def test_consume_every_partition_with_kafka_print_properties(tmp_path):
    d = _two_partitions(tmp_path)
    r = run("consume", d, "--topic", "t", "--from-beginning")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"a\nb\nnull\n"
    r = run("consume", d, "--topic", "t", "--from-beginning", "--property", "print.timestamp=true",
            "--property", "print.partition=true", "--property", "print.offset=true", "--property", "print.headers=true",
            "--property", "print.key=true", "--property", "key.separator= | ", "--property", "null.literal=<null>")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines() == [
        "CreateTime:1000 | Partition:0 | Offset:0 | h:1,n:<null> | ka | a",
        "CreateTime:2000 | Partition:1 | Offset:0 | NO_HEADERS | <null> | b",
        "CreateTime:3000 | Partition:1 | Offset:1 | NO_HEADERS | kc | <null>",
    ]
    r = run("consume", d, "--topic", "t", "--partition", "1", "--offset", "1", "--property", "print.value=false",
            "--property", "print.offset=true")
    assert r.stdout == b"Offset:1\t\n"
    assert b"Processed a total of 1 messages" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--property", "print.offsets=true"], b"not a consumer property"),
    (["--property", "print.offset=1"], b"expected true or false"),
    (["--offset", "0"], b"--offset needs --partition"),
])
def test_bad_consume_arguments(tmp_path, args, message):
    d = _two_partitions(tmp_path)
    r = run("consume", d, "--topic", "t", *args)
    assert r.returncode == 2 and message in r.stderr and b"Traceback" not in r.stderr


def test_consume_follow_sees_records_appended_later(tmp_path):
    d = _two_partitions(tmp_path)
    # 3 records are there; --max-messages 5 ends the run only once the two appended below were read, whenever
    # the reader gets to them (without --follow it would stop at the 3: test_consume_every_partition_...).
    proc = subprocess.Popen([sys.executable, "-m", "pylog", "consume", d, "--topic", "t", "--follow",
                             "--from-beginning", "--max-messages", "5", "--property", "print.partition=true"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with Log.open(os.path.join(d, "t-1")) as log:
            log.append([Record(b"late-1")])
        with Log.open(os.path.join(d, "t-0")) as log:
            log.append([Record(b"late-0")])
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert sorted(out.decode().splitlines()) == ["Partition:0\ta", "Partition:0\tlate-0", "Partition:1\tb",
                                                 "Partition:1\tlate-1", "Partition:1\tnull"]


# ------------------------------------------------------------------ groups --reset-offsets


def rungroups(*args: str) -> subprocess.CompletedProcess:
    return run("groups", *args)


def test_reset_offsets_every_strategy_dry_run_then_execute(tmp_path):
    d = str(tmp_path / "q")
    q = pylog.open(d)
    try:
        q.create_topic("jobs", partitions=2)
        p = q.producer()
        # An hour ago (older timestamps would fall to the 7-day time retention), on a whole second:
        # partition 0 gets base+0..base+400 ms, partition 1 base+500..base+900 ms.
        base = (int(time.time()) - 3600) * 1000
        for i in range(10):
            p.send("jobs", b"%d" % i, partition=i // 5, timestamp=base + 100 * i).result(30)

        def iso(ms: int, tz: datetime.timezone = datetime.timezone.utc) -> str:
            return datetime.datetime.fromtimestamp(ms / 1000, tz).isoformat(timespec="milliseconds")
        p.close()
        q.alter_group_offsets("g", {("jobs", 0): 2, ("jobs", 1): 4})

        def plan(*how: str, execute: bool = False):
            r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs", *how, *(["--execute"] if execute else []))
            assert r.returncode == 0, r.stderr
            lines = r.stdout.decode().splitlines()
            assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
            return {int(x.split()[2]): int(x.split()[3]) for x in lines[1:]}, r.stderr

        def committed():
            return {tp[1]: v.offset for tp, v in q.list_group_offsets("g").items()}

        assert plan("--to-earliest")[0] == {0: 0, 1: 0}
        assert plan("--to-latest")[0] == {0: 5, 1: 5}
        assert plan("--shift-by", "-3")[0] == {0: 0, 1: 1}  # 2-3 clamped to the log start
        got, err = plan("--shift-by", "2")
        assert got == {0: 4, 1: 5} and b"outside [0, 5]" in err  # 4+2 clamped to the end
        assert plan("--to-offset", "3")[0] == {0: 3, 1: 3}
        assert plan("--to-datetime", iso(base + 250).replace("+00:00", "Z"))[0] == {0: 3, 1: 0}
        assert plan("--to-datetime", iso(base + 700).replace("+00:00", ""))[0] == {0: 5, 1: 2}  # UTC without a zone
        plus2 = datetime.timezone(datetime.timedelta(hours=2))
        assert plan("--to-datetime", iso(base + 700, plus2))[0] == {0: 5, 1: 2}
        assert b"Dry run" in plan("--to-earliest")[1]
        assert committed() == {0: 2, 1: 4}  # all of the above were dry runs

        assert plan("--to-datetime", iso(base + 250), execute=True)[0] == {0: 3, 1: 0}
        assert committed() == {0: 3, 1: 0}
        r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs", "--partition", "1", "--shift-by", "2", "--execute")
        assert r.returncode == 0, r.stderr
        assert committed() == {0: 3, 1: 2}
    finally:
        q.close()


def test_reset_offsets_bad_inputs(tmp_path):
    d = str(tmp_path / "q")
    q = pylog.open(d)
    try:
        q.create_topic("jobs", partitions=1)
        q.producer().send("jobs", b"x").result(30)
        r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs", "--to-datetime", "yesterday")
        assert r.returncode == 2 and b"'yesterday' is not an ISO 8601 time" in r.stderr
        r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs")
        assert r.returncode == 2 and b"needs one of --to-earliest" in r.stderr
        r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs", "--to-earliest", "--to-latest")
        assert r.returncode == 2 and b"not allowed with" in r.stderr
        r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs", "--shift-by", "1")
        assert r.returncode == 1 and b"no committed offset for jobs-0 to shift" in r.stderr
        r = rungroups(d, "--to-earliest")
        assert r.returncode == 2 and b"go with --reset-offsets" in r.stderr

        # An active group is refused, in a dry run too (Kafka checks before planning).
        c = q.consumer("g", ["jobs"], auto_offset_reset="earliest", enable_auto_commit=False)
        got = []
        while not got:
            got = c.poll(timeout=1.0)
        c.commit()
        for extra in ([], ["--execute"]):
            r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs", "--to-earliest", *extra)
            assert r.returncode == 1 and b"can only be reset if the group is inactive" in r.stderr
            assert b"current state is Stable" in r.stderr and r.stdout == b""
        assert {tp: v.offset for tp, v in q.list_group_offsets("g").items()} == {("jobs", 0): 1}
        c.close()
        r = rungroups(d, "--reset-offsets", "g", "--topic", "jobs", "--to-earliest", "--execute")
        assert r.returncode == 0, r.stderr
        assert {tp: v.offset for tp, v in q.list_group_offsets("g").items()} == {("jobs", 0): 0}
    finally:
        q.close()


def test_produce_and_consume_progress_bars(tmp_path):
    src = tmp_path / "lines.txt"
    src.write_bytes(b"".join(b"k%d:v%d\n" % (i, i) for i in range(50)))
    d = str(tmp_path / "logs")
    with open(src, "rb") as f:  # stdin is a file: a bar over its bytes
        r = subprocess.run([sys.executable, "-m", "pylog", "produce", d, "--topic", "t", "--key-separator", ":",
                            "--progress"], stdin=f, capture_output=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert b"100.0%" in r.stderr and b"ETA" in r.stderr and b"B/s" in r.stderr
    r = run("consume", d, "--topic", "t", "--from-beginning", "--progress")
    assert r.returncode == 0 and r.stdout.count(b"\n") == 50
    assert b"100.0%" in r.stderr and b"records/s" in r.stderr
    r = run("consume", d, "--topic", "t", "--from-beginning")
    assert b"%" not in r.stderr  # no bar when stderr is not a terminal
