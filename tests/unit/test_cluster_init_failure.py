"""A Cluster whose __init__ fails leaks no loop thread and leaves no broker holding its directory.

Real-time clusters (the ones with a ``pylog-loop`` thread), real files.
"""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from pylog import errors
from pylog.cluster import Cluster


def _loops() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "pylog-loop" and t.is_alive())


def test_reopening_with_another_broker_count_fails_without_leaking_the_loop(tmp_path) -> None:
    with Cluster(tmp_path / "c", brokers=3) as c:
        c.create_topic("t", partitions=1, replication_factor=3)
    before = _loops()
    with pytest.raises(errors.PylogError) as info:
        Cluster(tmp_path / "c", brokers=1)
    assert "broker" in str(info.value)
    assert _loops() == before
    with Cluster(tmp_path / "c", brokers=3) as c:  # nothing was left holding the directory
        assert c.producer(acks="all").send("t", b"v").result().offset == 0


def _lock_free(path) -> bool:
    """True when another process can open the partition at ``path`` as a writer (no one holds its dir lock)."""
    r = subprocess.run([sys.executable, "-c", "import sys, pylog; pylog.Log.open(sys.argv[1]).close()", str(path)],
                       capture_output=True, text=True, timeout=120)
    return r.returncode == 0


def test_a_failure_after_the_brokers_started_stops_them_and_the_loop(tmp_path, monkeypatch) -> None:
    """Any late failure (here injected into the last step of __init__) stops the started brokers, so
    their log directories are unlocked, and joins the loop thread before the error propagates."""
    with Cluster(tmp_path / "c", brokers=2) as c:
        c.create_topic("t", partitions=1, replication_factor=2)

    def boom(self) -> None:
        raise errors.KafkaStorageError("injected failure at the end of Cluster.__init__")

    monkeypatch.setattr(Cluster, "_schedule_maintenance", boom)
    before = _loops()
    with pytest.raises(errors.KafkaStorageError, match="injected"):
        Cluster(tmp_path / "c", brokers=2)
    assert _loops() == before
    assert _lock_free(tmp_path / "c" / "broker-0" / "t-0") and _lock_free(tmp_path / "c" / "broker-1" / "t-0")


def test_a_broker_directory_locked_by_another_process_fails_init(tmp_path) -> None:
    """Another process holds broker-1's directory: Cluster() raises LogDirLockedError naming it,
    leaks no loop thread, and works once the other process is gone."""
    with Cluster(tmp_path / "c", brokers=2) as c:
        c.create_topic("t", partitions=1, replication_factor=2)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, pylog; log = pylog.Log.open(sys.argv[1]); print('held', flush=True); sys.stdin.read()",
         str(tmp_path / "c" / "broker-1" / "t-0")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _loops()
        with pytest.raises(errors.LogDirLockedError) as info:
            Cluster(tmp_path / "c", brokers=2)
        assert "broker-1" in str(info.value) and "another process" in str(info.value)
        assert _loops() == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    with Cluster(tmp_path / "c", brokers=2) as c:
        assert c.producer(acks="all").send("t", b"v").result().offset == 0


def test_a_second_cluster_on_the_same_path_in_one_process_is_refused(tmp_path) -> None:
    with Cluster(tmp_path / "c", brokers=1) as c:
        c.create_topic("t", partitions=1, replication_factor=1)
        with pytest.raises(errors.LogDirLockedError) as info:
            Cluster(tmp_path / "c", brokers=1)
        assert "already open in this process" in str(info.value)
        assert c.producer(acks=1).send("t", b"still works").result().offset == 0
