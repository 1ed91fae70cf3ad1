"""``pylog topics`` (kafka-topics.sh) as a subprocess: on a new directory, through a running owner, bad inputs;
and ``pylog.open`` adopting the partition folders of a ``Log.open`` log directory."""
from __future__ import annotations

import os
import subprocess
import sys

import pylog


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", "topics", *args], capture_output=True, text=True,
                          timeout=180)


def test_create_list_describe_alter_delete_on_a_directory(tmp_path):
    d = str(tmp_path / "q")
    r = run(d, "--list")
    assert r.returncode == 1 and "not a pylog queue or cluster directory" in r.stderr
    assert not os.path.exists(os.path.join(d, "cluster-metadata.json"))  # no empty queue made by --list
    r = run(d, "--create", "--topic", "orders", "--partitions", "2", "--config", "retention.ms=60000")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Created topic orders.\n"
    r = run(d, "--create", "--topic", "orders")
    assert r.returncode == 1 and "'orders' already exists" in r.stderr
    assert run(d, "--create", "--topic", "orders", "--if-not-exists").returncode == 0
    r = run(d, "--alter", "--topic", "orders", "--partitions", "3", "--config", "cleanup.policy=compact")
    assert r.returncode == 0, r.stderr
    r = run(d, "--describe", "--topic", "orders")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Topic: orders\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: cleanup.policy=compact,retention.ms=60000",
        "\tTopic: orders\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: orders\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: orders\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0",
    ]
    r = run(d, "--alter", "--topic", "orders", "--partitions", "2")
    assert r.returncode == 1 and "InvalidPartitions" not in r.stderr and "must be greater" in r.stderr
    r = run(d, "--alter", "--topic", "orders", "--config", "retention.mss=5")
    assert r.returncode == 1 and "unknown config retention.mss" in r.stderr
    r = run(d, "--alter", "--topic", "orders", "--config", "retention.ms")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = run(d, "--alter", "--topic", "orders")
    assert r.returncode == 2
    r = run(d, "--delete", "--topic", "nope")
    assert r.returncode == 1 and "unknown topic 'nope'" in r.stderr
    assert run(d, "--delete", "--topic", "nope", "--if-exists").returncode == 0
    r = run(d, "--delete")
    assert r.returncode == 2 and "need --topic" in r.stderr
    r = run(d, "--delete", "--topic", "orders")
    assert r.returncode == 0 and r.stdout == "Deleted topic orders.\n", r.stderr
    assert run(d, "--list").stdout == ""
    # the owner closed cleanly: the renamed directories are gone too
    assert [n for n in os.listdir(os.path.join(d, "broker-0")) if n.startswith("orders")] == []


def test_topics_through_a_running_owner_and_include_internal(tmp_path):
    d = str(tmp_path / "q")
    q = pylog.open(d)
    try:
        q.create_topic("jobs", partitions=1)
        q.consumer("g", ["jobs"])  # makes __consumer_offsets
        r = run(d, "--list")
        assert r.returncode == 0 and r.stdout == "jobs\n", r.stderr
        r = run(d, "--list", "--include-internal")
        assert r.stdout == "__consumer_offsets\njobs\n"
        r = run(d, "--create", "--topic", "more", "--partitions", "2")
        assert r.returncode == 0, r.stderr
        assert q.list_topics() == ["jobs", "more"]  # the owner (this process) has it
        assert q.producer().send("more", b"x", partition=1).result(30).offset == 0
        r = run(d, "--alter", "--topic", "more", "--config", "segment.bytes=4096")
        assert r.returncode == 0, r.stderr
        assert q.topic_config("more")["segment_bytes"] == 4096
        r = run(d, "--delete", "--topic", "__consumer_offsets")
        assert r.returncode == 1 and "internal" in r.stderr
        r = run(d, "--delete", "--topic", "more")
        assert r.returncode == 0, r.stderr
        assert q.list_topics() == ["jobs"]
        assert not os.path.exists(os.path.join(d, "broker-0", "more-0"))
    finally:
        q.close()


def test_a_multi_broker_cluster_directory(tmp_path):
    d = str(tmp_path / "c")
    with pylog.Cluster(d, brokers=3) as c:
        c.create_topic("t", partitions=2, replication_factor=3)
    r = run(d, "--describe")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("Topic: t\tPartitionCount: 2\tReplicationFactor: 3\t")
    r = run(d, "--delete", "--topic", "t")
    assert r.returncode == 0, r.stderr
    with pylog.Cluster(d, brokers=3) as c:
        assert c.list_topics() == []


def test_pylog_open_adopts_the_partition_folders_of_a_log_open_directory(tmp_path):
    d = str(tmp_path / "data")
    for p, values in ((0, [b"a", b"b", b"c"]), (2, [b"x"])):
        with pylog.Log.open(os.path.join(d, f"orders-{p}")) as log:
            log.append(values)
    q = pylog.open(d)
    try:
        assert q.list_topics() == ["orders"]
        assert [(r.partition, r.high_watermark) for r in q.describe("orders")] == [(0, 3), (1, 0), (2, 1)]
        c = q.consumer(topics=["orders"], auto_offset_reset="earliest")
        got = []
        for _ in range(100):
            got += c.poll(timeout=0.2)
            if len(got) >= 4:
                break
        assert sorted((r.partition, r.offset, r.value) for r in got) == [
            (0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c"), (2, 0, b"x")]
        assert q.producer().send("orders", b"d", partition=0).result(30).offset == 3
    finally:
        q.close()
    assert sorted(n for n in os.listdir(d) if not n.startswith(".")) == ["broker-0", "cluster-metadata.json"]
    q = pylog.open(d)  # reopens as an ordinary queue directory
    try:
        assert q.describe("orders")[0].high_watermark == 4
    finally:
        q.close()


def test_adoption_refuses_while_a_log_open_writer_holds_the_directory(tmp_path):
    d = str(tmp_path / "data")
    log = pylog.Log.open(os.path.join(d, "orders-0"))
    try:
        log.append([b"a"])
        try:
            pylog.open(d, shared=False)
        except pylog.errors.LogDirLockedError as exc:
            assert d in str(exc)
        else:
            raise AssertionError("pylog.open adopted folders a live Log still writes")
        assert os.path.isdir(os.path.join(d, "orders-0"))  # untouched
        assert not os.path.exists(os.path.join(d, "cluster-metadata.json"))
    finally:
        log.close()
