"""Many partitions (issue 18, item 4): batched directory syncs, one checkpoint write per shutdown,
no per-partition work on an idle tick - and none of it weakens what survives a power loss.

The cluster tests run on the seeded simulator, whose brokers each have a SimulatedDiskIO: stopping
a broker with ``clean=False`` drops every byte and directory entry that was not fsynced.
"""
from __future__ import annotations

import os
import threading
from collections import Counter
from typing import List

import pylog
from pylog.replication import controller as controller_mod
from pylog.replication.partition import Partition
from pylog.storage.fileio import FileIO, SimulatedDiskIO
from pylog.storage.logdir import RECOVERY_POINT_FILE

N = controller_mod.LEADER_AND_ISR_BATCH_MIN_PARTITIONS + 16  # above it: one LeaderAndIsr per broker


class _CountingDisk(SimulatedDiskIO):
    def __init__(self) -> None:
        super().__init__()
        self.dir_syncs: List[str] = []

    def fsync_dir(self, path: str) -> None:
        self.dir_syncs.append(os.path.abspath(path))
        super().fsync_dir(path)


def _make(disk: SimulatedDiskIO, path: str) -> None:
    fd = disk.open(path)
    disk.pwrite(fd, b"x", 0)
    disk.fsync(fd)
    disk.close(fd)


def test_batched_dir_syncs_defer_each_directory_to_one_sync_at_the_end(tmp_path) -> None:
    disk = _CountingDisk()
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    with disk.batched_dir_syncs():
        for i in range(5):
            _make(disk, str(a / f"f{i}"))
            disk.fsync_dir(str(a))
        _make(disk, str(b / "g"))
        disk.fsync_dir(str(b))
        with disk.batched_dir_syncs():  # a nested block joins the outer one
            disk.fsync_dir(str(a))
        assert disk.dir_syncs == []  # nothing synced yet: a power loss now loses the new names
    assert sorted(disk.dir_syncs) == [str(a), str(b)]
    disk.crash()
    assert sorted(os.listdir(a)) == [f"f{i}" for i in range(5)] and os.listdir(b) == ["g"]


def test_a_power_loss_inside_the_block_loses_the_deferred_names(tmp_path) -> None:
    disk = _CountingDisk()
    with disk.batched_dir_syncs():
        _make(disk, str(tmp_path / "f"))
        disk.fsync_dir(str(tmp_path))
        disk.crash()
    assert not (tmp_path / "f").exists()


def test_other_threads_are_not_deferred(tmp_path) -> None:
    disk = _CountingDisk()
    with disk.batched_dir_syncs():
        t = threading.Thread(target=disk.fsync_dir, args=(str(tmp_path),))
        t.start()
        t.join()
        assert disk.dir_syncs == [str(tmp_path)]


def test_an_atomic_replace_in_a_batch_is_whole_old_until_the_end_and_whole_new_after(tmp_path) -> None:
    """write_file_atomic inside the block writes its temp file at once, syncs and renames it at the
    end (one sync for the whole batch, as Kafka writes a LeaderAndIsr batch's epoch checkpoints): a
    power loss inside the block keeps the old content, one after it the new; never a mix."""
    disk = _CountingDisk()
    path = str(tmp_path / "cp")
    disk.write_file_atomic(path, b"old")
    with disk.batched_dir_syncs():
        disk.write_file_atomic(path, b"newer content")
        disk.write_file_atomic(path, b"new")  # the last write of the batch wins
        assert open(path, "rb").read() == b"old"  # not renamed yet
        fsyncs = disk.fsyncs
    assert disk.fsyncs == fsyncs + 1 and open(path, "rb").read() == b"new"
    disk.crash()
    assert open(path, "rb").read() == b"new" and not os.path.exists(path + ".tmp")
    disk2 = _CountingDisk()
    try:
        with disk2.batched_dir_syncs():
            disk2.write_file_atomic(path, b"lost")
            disk2.crash()  # the power went: the block's end finds its temp file gone
    except FileNotFoundError:
        pass
    assert open(path, "rb").read() == b"new"


def test_a_failing_sync_at_the_end_of_a_batch_renames_nothing(tmp_path) -> None:
    disk = _CountingDisk()
    paths = [str(tmp_path / f"cp{i}") for i in range(3)]
    for p in paths:
        disk.write_file_atomic(p, b"old")
    try:
        with disk.batched_dir_syncs():
            for p in paths:
                disk.write_file_atomic(p, b"new")
            disk.fail_fsync_after = disk.fsyncs + 1  # the second temp file's sync fails
    except OSError:
        pass
    else:
        raise AssertionError("the failed sync was not raised")
    disk.heal()
    disk.crash()
    assert [open(p, "rb").read() for p in paths] == [b"old"] * 3


def test_real_file_layer_batch_with_many_directories(tmp_path) -> None:
    """Above SYNCFS_MIN_DIRS directories the real layer syncs the filesystem once (Linux) or each
    directory: either way the block ends without error and every file is there."""
    io = FileIO()
    dirs = [tmp_path / f"d{i}" for i in range(20)]
    with io.batched_dir_syncs():
        for d in dirs:
            io.makedirs(str(d))
            io.write_file_atomic(str(d / "cp"), b"1")
    assert all((d / "cp").read_bytes() == b"1" for d in dirs)


def _sim(tmp_path, seed: int = 3) -> pylog.Cluster:
    return pylog.Cluster(str(tmp_path / "c"), brokers=3, seed=seed)


def test_power_loss_right_after_create_topic_keeps_every_partition(tmp_path) -> None:
    """create_topic returned: every replica's directory and segment, and every leader's leader-epoch
    checkpoint, is durable on every broker (the batch's directory sync ran before the broker answered)."""
    c = _sim(tmp_path)
    c.create_topic("t", partitions=N, replication_factor=3, min_insync_replicas=2)
    leaders = {p: c.leader_of("t", p) for p in range(N)}
    # what each broker has applied (a leader's LeaderAndIsr before it serves; a follower's may
    # still be in flight when create_topic returns - the controller resends it after a restart)
    applied = {b: sorted(p for (t, p) in broker.rm.partitions if t == "t") for b, broker in c.brokers.items()}
    assert all(any(leaders[p] == b for p in ps) for b, ps in applied.items())
    for b in list(c.brokers):
        c.stop_broker(b, clean=False)  # crash(): unsynced bytes and names are gone
    for b, broker in c.brokers.items():
        for p in applied[b]:
            d = os.path.join(broker.log_dir, f"t-{p}")
            assert os.path.isfile(os.path.join(d, "00000000000000000000.log")), (b, p)
            # index files are created lazily (the first index entry or flush with data): none yet
            assert not os.path.exists(os.path.join(d, "00000000000000000000.index")), (b, p)
            if leaders[p] == b:  # a new leader records its epoch before it serves
                with open(os.path.join(d, "leader-epoch-checkpoint"), "rb") as f:
                    assert f.read().split(b"\n")[:3] == [b"0", b"1", b"0 0"], (b, p)
    for b in list(c.brokers):
        c.start_broker(b)
    p = c.producer(acks="all")
    assert p.send("t", b"v", partition=N - 1).result(timeout=30).offset == 0
    c.close()


def test_a_broker_syncs_a_batch_of_new_partitions_once_per_directory(tmp_path, monkeypatch) -> None:
    calls: Counter = Counter()
    real = SimulatedDiskIO.fsync_dir

    def counting(self: SimulatedDiskIO, path: str) -> None:
        calls[os.path.abspath(path)] += 1
        real(self, path)

    c = _sim(tmp_path)
    monkeypatch.setattr(SimulatedDiskIO, "fsync_dir", counting)
    c.create_topic("t", partitions=N, replication_factor=3)
    for b, broker in c.brokers.items():
        assert calls[os.path.abspath(broker.log_dir)] <= 2, calls[os.path.abspath(broker.log_dir)]  # not N
        for p in range(N):
            assert calls[os.path.abspath(os.path.join(broker.log_dir, f"t-{p}"))] <= 2
    c.close()


def test_clean_shutdown_writes_the_log_dir_checkpoints_once(tmp_path, monkeypatch) -> None:
    c = _sim(tmp_path)
    c.create_topic("t", partitions=N, replication_factor=3)
    writes: Counter = Counter()
    real = SimulatedDiskIO.write_file_atomic

    def counting(self: SimulatedDiskIO, path: str, data: bytes) -> None:
        writes[path] += 1
        real(self, path, data)

    monkeypatch.setattr(SimulatedDiskIO, "write_file_atomic", counting)
    dirs = [b.log_dir for b in c.brokers.values()]
    c.close()
    for d in dirs:
        assert writes[os.path.join(d, RECOVERY_POINT_FILE)] == 1, writes  # was once per partition
        assert os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
    c2 = pylog.Cluster(str(tmp_path / "c"), brokers=3, seed=4)
    for b in c2.brokers.values():  # reopened clean: nothing to recover
        assert b.last_stop_clean
    c2.close()


def test_an_idle_tick_does_no_per_partition_work(tmp_path, monkeypatch) -> None:
    c = _sim(tmp_path)
    c.create_topic("t", partitions=N, replication_factor=3)
    c.advance(2_000)
    calls: Counter = Counter()
    for name in ("resend_proposal", "maybe_shrink_isr"):
        real = getattr(Partition, name)

        def counting(self: Partition, *a: object, _real=real, _name=name, **k: object) -> object:
            calls[_name] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(Partition, name, counting)
    c.advance(3_000)  # about 60 ticks per broker; no ISR change, no ISR-expiry pass (every 15 s)
    assert calls["resend_proposal"] == 0, calls  # was once per replica per tick
    for b in c.brokers.values():
        b.rm._check()
    c.close()
