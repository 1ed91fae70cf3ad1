"""A Cluster whose __init__ fails leaks no loop thread and leaves no broker holding its directory.

Note: a broker log directory locked by another process does not fail __init__ (the partition
fails to open on the loop and the cluster starts without that replica), so it is not a case here.

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
