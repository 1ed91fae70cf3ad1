"""The controller's metadata file cannot be written (disk full): no change it failed to store is acted on.

Issue 14, item 2. Kafka applies a controller change (ISR shrink or expand, leader
election, topic creation) only once its metadata record is committed. Here the
store writes ``cluster-metadata.json`` before it changes anything in memory; a
failed write applies nothing, the controller stops acting and resigns, and the
leader whose AlterPartition went unanswered keeps the old ISR in its maximal ISR,
so the HW never passes a replica the file still lists in the ISR
(docs/replication.md, "Controller").
"""
from __future__ import annotations

import errno
import json
import logging
import os
from typing import Dict, List

import pytest

from pylog import errors
from pylog.cluster import METADATA_FILE, Cluster
from pylog.replication.controller import load_metadata

LAG_MS = 2_000


def _cluster(path, seed: int = 5, session_timeout_ms: int = 1_500) -> Cluster:
    return Cluster(path, brokers=3, seed=seed, replica_lag_time_max_ms=LAG_MS, session_timeout_ms=session_timeout_ms,
                   heartbeat_interval_ms=250, log_config={"flush_messages": 1})


def _fail_metadata(c: Cluster, fail: bool) -> None:
    disk = c.store.io
    disk.fail_errno = errno.ENOSPC
    disk.fail_write_after = disk.writes if fail else None


def _drive(c: Cluster, ms: int, escaped: List[BaseException]) -> None:
    """Run ``ms`` of virtual time; an exception escaping the loop is kept (as the real-time loop
    thread keeps it) and time goes on."""
    end = c.now_ms + ms
    while c.now_ms < end:
        try:
            c.advance(min(50, end - c.now_ms))
        except Exception as exc:  # noqa: BLE001 - the point: nothing may escape
            escaped.append(exc)


def _file_isr(path) -> List[int]:
    # what the files hold: the snapshot plus its delta log (the store appends each change there)
    stored = load_metadata(os.path.join(path, METADATA_FILE), [0, 1, 2])
    return list(stored.partitions[("t", 0)].isr)


def _read_back(c: Cluster, n: int) -> Dict[int, bytes]:
    cons = c.consumer(None, ["t"], fetch_max_wait_ms=50)
    got: Dict[int, bytes] = {}
    for _ in range(100):
        for r in cons.poll(0.2):
            got[r.offset] = r.value
        if len(got) >= n:
            break
    cons.close()
    return got


def _setup(c: Cluster):
    # replicas (0, 1, 2), leader 0: after a restart the offline selector picks 1 first
    c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2, start_index=0, shift=0)
    assert c.describe("t")[0].replicas == (0, 1, 2) and c.leader_of("t") == 0
    p = c.producer(acks="all", request_timeout_ms=3_000, delivery_timeout_ms=60_000)
    acked: Dict[int, bytes] = {}
    for i in range(10):
        acked[p.send("t", b"a%d" % i).result().offset] = b"a%d" % i
    return p, acked


def test_isr_shrink_not_stored_is_not_applied_and_nothing_acked_is_lost_after_restart(tmp_path, caplog):
    """The issue's scenario: metadata disk full, a follower falls out, the ISR shrink cannot be
    stored. The leader must keep the old ISR (HW stays at the removed follower's LEO, no
    acks=all acknowledged past it); after a restart from the file nothing acknowledged is lost."""
    escaped: List[BaseException] = []
    # A session timeout longer than the lag time: the leader proposes the shrink (AlterPartition)
    # before broker 1's session expires, and the controller cannot store it.
    c = _cluster(tmp_path, session_timeout_ms=3 * LAG_MS)
    try:
        p, acked = _setup(c)
        _fail_metadata(c, True)
        c.partition_network([1])  # broker 1 falls out of the ISR
        futs = [(p.send("t", b"b%d" % i), b"b%d" % i) for i in range(30)]
        with caplog.at_level(logging.ERROR, logger="pylog.replication"):
            _drive(c, int(2.5 * LAG_MS), escaped)
        leader = c.brokers[0].rm.partitions[("t", 0)]
        follower_leo = c.brokers[1].rm.partitions[("t", 0)].log_end_offset
        assert leader.log_end_offset == 40  # the 30 sends were appended by the leader
        assert leader.isr == {0, 1, 2}, "the leader applied an ISR change the controller could not store"
        assert leader.high_watermark <= follower_leo == 10
        assert _file_isr(tmp_path) == [0, 1, 2]
        assert c.store.partitions[("t", 0)].isr == (0, 1, 2)  # memory = file
        assert c.store.controller_id is None  # the controller stopped acting
        assert c.store.write_error is not None and "No space left" in c.store.write_error
        assert any("cannot store" in r.getMessage() for r in caplog.records)
        for fut, value in futs:
            if fut.done() and fut.exception() is None:
                acked[fut.result().offset] = value
        assert max(acked) == 9  # nothing acknowledged past the follower the file still has in the ISR
    finally:
        c.close()  # the metadata disk still fails: the file keeps ISR [0, 1, 2]
    assert not escaped, f"escaped the loop: {escaped[:3]!r}"
    # Restart from the file: broker 1 (short log, in the file's ISR) is elected first.
    c2 = _cluster(tmp_path, seed=6, session_timeout_ms=3 * LAG_MS)
    try:
        got = _read_back(c2, max(acked) + 1)
        lost = {off: v for off, v in acked.items() if got.get(off) != v}
        assert not lost, f"acknowledged acks=all records lost after the restart: {sorted(lost)[:5]}"
    finally:
        c2.close()


def test_controller_resumes_when_the_store_works_again(tmp_path):
    """Once the file can be written again a broker claims the controller role (a new epoch), the
    shrink is stored and applied, and the held-back sends complete."""
    escaped: List[BaseException] = []
    c = _cluster(tmp_path)
    try:
        p, acked = _setup(c)
        epoch = c.store.controller_epoch
        _fail_metadata(c, True)
        c.partition_network([1])
        futs = [(p.send("t", b"b%d" % i), b"b%d" % i) for i in range(5)]
        _drive(c, 5 * LAG_MS, escaped)
        assert c.store.controller_id is None and not any(f.done() for f, _ in futs)
        _fail_metadata(c, False)
        _drive(c, 3 * LAG_MS, escaped)
        assert c.store.controller_id is not None and c.store.controller_epoch == epoch + 1
        assert c.store.write_error is None
        assert _file_isr(tmp_path) == [0, 2] and c.brokers[0].rm.partitions[("t", 0)].isr == {0, 2}
        for fut, value in futs:
            acked[fut.result(timeout=30).offset] = value
        assert sorted(acked) == list(range(15))
    finally:
        c.close()
    assert not escaped, f"escaped the loop: {escaped[:3]!r}"


def test_create_topic_on_a_full_metadata_disk_raises_a_storage_error_and_creates_nothing(tmp_path):
    c = _cluster(tmp_path)
    try:
        _fail_metadata(c, True)
        with pytest.raises(errors.KafkaStorageError) as info:
            c.create_topic("t", partitions=2, replication_factor=3)
        assert isinstance(info.value, errors.MetadataStorageError) and METADATA_FILE in str(info.value)
        assert "t" not in c.store.topics and not c.store.partitions
        _fail_metadata(c, False)
        c.create_topic("t", partitions=2, replication_factor=3)  # a new controller takes over
        assert c.producer().send("t", b"v", partition=1).result().offset == 0
    finally:
        c.close()


def test_real_time_loop_thread_keeps_running_and_nothing_escapes(tmp_path):
    """Real time (one loop thread): the failing store is logged, the controller resigns, no exception
    reaches the loop thread's error list, and the controller comes back once the file works."""
    from pylog.storage.fileio import FileIO

    class FullDisk(FileIO):
        full = False

        def write_file_atomic(self, path: str, data: bytes) -> None:
            if self.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            super().write_file_atomic(path, data)

        def pwrite(self, fd: int, data: object, offset: int) -> None:  # the metadata log's appends
            if self.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "cluster-metadata.log")
            super().pwrite(fd, data, offset)

    c = Cluster(tmp_path, brokers=3, session_timeout_ms=1_000, heartbeat_interval_ms=100,
                replica_lag_time_max_ms=1_000)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        c.producer(acks="all").send("t", b"v").result(timeout=30)
        disk = FullDisk()
        c.store.io = disk
        disk.full = True
        victim = next(b for b in (0, 1, 2) if b != c.store.controller_id and b != c.leader_of("t"))
        c.stop_broker(victim, clean=False)  # its session expires: the controller must drop it from the ISR
        assert c.scheduler.wait_until(lambda: c.store.controller_id is None, 60_000), "the controller kept acting"
        assert victim in c.store.partitions[("t", 0)].isr and victim in _file_isr(tmp_path)
        disk.full = False
        assert c.scheduler.wait_until(
            lambda: c.store.controller_id is not None and victim not in c.store.partitions[("t", 0)].isr, 60_000)
        assert victim not in _file_isr(tmp_path)
        assert c.producer(acks="all").send("t", b"w").result(timeout=30).offset == 1
        assert not c.scheduler.errors, c.scheduler.errors[:3]
    finally:
        c.close()
