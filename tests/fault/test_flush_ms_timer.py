"""``flush_ms`` has a timer: the cluster's periodic maintenance flushes an idle log's tail.

Kafka flushes a log from ``LogManager.flushDirtyLogs`` (every
``log.flush.scheduler.interval.ms``) once ``flush.ms`` has passed since its
last flush; a check on append alone never flushes a log that stopped
receiving appends. The simulated cluster's brokers run on a SimDisk: a hard
stop (``stop_broker(b, clean=False)``) is a power loss of ``b`` that drops
every byte not fsynced.
"""
from __future__ import annotations

import os

import pylog
from pylog.cluster import Cluster
from pylog.runtime.log_maintenance import run_maintenance
from pylog.storage.fileio import SimulatedDiskIO

FLUSH_MS = 10_000


def _values(c: Cluster, topic: str) -> list:
    """What the restarted single broker's replica holds (read straight from its log)."""
    assert c.scheduler.wait_until(lambda: c._serving([(topic, 0)]), 30_000)
    log = c.brokers[0].rm.partitions[(topic, 0)].log
    return [r.value for r in log.read(log.log_start_offset, 1 << 30)] if log.log_end_offset else []


def test_idle_records_survive_power_loss_once_flush_ms_has_passed(tmp_path) -> None:
    c = Cluster(tmp_path, brokers=1, seed=11, log_config={"flush_ms": FLUSH_MS})
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks=1)
        for i in range(5):
            p.send("t", b"%d" % i).result()  # within flush_ms of the log's creation: no append flushes
        log = c.brokers[0].rm.partitions[("t", 0)].log
        assert log.recovery_point == 0  # nothing fsynced yet
        # No further appends: only the timer can flush.
        c.advance(FLUSH_MS + 2 * Cluster.log_maintenance_check_ms)
        assert log.recovery_point == 5
        c.stop_broker(0, clean=False)  # power loss
        c.start_broker(0)
        assert _values(c, "t") == [b"%d" % i for i in range(5)]
    finally:
        c.close()


def test_records_younger_than_flush_ms_can_be_lost(tmp_path) -> None:
    c = Cluster(tmp_path, brokers=1, seed=12, log_config={"flush_ms": FLUSH_MS})
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks=1)
        for i in range(5):
            p.send("t", b"%d" % i).result()
        c.advance(FLUSH_MS // 2)  # maintenance runs, but flush_ms has not passed
        assert c.brokers[0].rm.partitions[("t", 0)].log.recovery_point == 0
        c.stop_broker(0, clean=False)
        c.start_broker(0)
        assert _values(c, "t") == []
    finally:
        c.close()


def test_run_maintenance_flushes_only_logs_that_are_due(tmp_path) -> None:
    disk, now = SimulatedDiskIO(), [1_000]
    logs = {}
    for name, cfg in (("due", {"flush_ms": 100}), ("young", {"flush_ms": 10_000}), ("never", {})):
        logs[(name, 0)] = pylog.Log.open(os.path.join(tmp_path, f"{name}-0"), file_io=disk,
                                         clock_ms=lambda: now[0], **cfg)
    for log in logs.values():
        log.append([b"a", b"b"])
    now[0] += 100
    summary = run_maintenance(logs, {}, lambda g, t, p: None, now[0])
    assert summary.flushed == [("due", 0)]
    assert [logs[tp].recovery_point for tp in (("due", 0), ("young", 0), ("never", 0))] == [2, 0, 0]
    # Flushed and nothing new: not due again, however long it stays idle.
    now[0] += 1_000_000
    assert run_maintenance(logs, {}, lambda g, t, p: None, now[0]).flushed == [("young", 0)]
    for log in logs.values():
        log.abandon()
    disk.crash()  # power loss: what the timer flushed is kept, the rest is lost
    ends = {}
    for (name, _), log in logs.items():
        with pylog.Log.open(log.dir, file_io=disk, clock_ms=lambda: now[0]) as again:
            ends[name] = [r.value for r in again.read(0)] if again.log_end_offset else []
    assert ends == {"due": [b"a", b"b"], "young": [b"a", b"b"], "never": []}
