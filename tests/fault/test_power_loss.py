"""Power loss and disk errors through SimulatedDiskIO (the file layer that forgets unsynced bytes).

* flush policies: whatever was acknowledged after an fsync survives crash();
  unflushed data may vanish, but the log reopens consistent;
* ENOSPC / EIO on write or fsync: append raises KafkaStorageError, no partial
  batch remains, and the log keeps working.
"""
from __future__ import annotations

import errno
import os
import random
from typing import Dict, Optional

import pytest

import pylog
from pylog.errors import KafkaStorageError
from pylog.storage.fileio import FileIO, SimulatedDiskIO


def _open(path: str, disk: FileIO, now: list, **cfg: object) -> pylog.Log:
    cfg.setdefault("segment_bytes", 2048)
    cfg.setdefault("index_interval_bytes", 128)
    return pylog.Log.open(path, file_io=disk, clock_ms=lambda: now[0], retention_ms=-1, **cfg)


def _value(offset: int) -> bytes:
    return b"value-%d-" % offset + bytes([offset % 256]) * (offset % 37)


def _check_values(log: pylog.Log) -> None:
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        recs = list(log.read(offset))
        assert recs
        for r in recs:
            assert r.offset == offset and r.value == _value(offset), offset
            offset += 1


def _append(log: pylog.Log, n: int) -> pylog.AppendResult:
    start = log.log_end_offset
    return log.append([_value(start + i) for i in range(n)])


@pytest.mark.parametrize("seed", range(8))
def test_flush_every_append_survives_power_loss(tmp_path, seed: int) -> None:
    """flush_messages=1: every append that returned is durable."""
    rnd = random.Random(seed)
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    acked = 0
    for _ in range(4):
        log = _open(path, disk, now, flush_messages=1)
        for _ in range(rnd.randint(1, 40)):
            acked = _append(log, rnd.randint(1, 5)).last_offset + 1
            now[0] += rnd.randint(0, 3)
        log.abandon()
        disk.crash()
        log = _open(path, disk, now, flush_messages=1)
        log._check()
        assert log.log_end_offset == acked
        _check_values(log)
        log.close()


@pytest.mark.parametrize("seed", range(8))
def test_explicit_flush_bounds_the_loss(tmp_path, seed: int) -> None:
    """No flush policy: everything below the last flush() survives; the tail may vanish whole."""
    rnd = random.Random(seed)
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    for _ in range(4):
        log = _open(path, disk, now)
        flushed = log.log_end_offset
        bases = {log.log_end_offset}
        for _ in range(rnd.randint(1, 60)):
            res = _append(log, rnd.randint(1, 5))
            bases.add(res.last_offset + 1)
            if rnd.random() < 0.15:
                log.flush()
                flushed = log.log_end_offset
        end = log.log_end_offset
        log.abandon()
        disk.crash()
        log = _open(path, disk, now)
        log._check()
        assert flushed <= log.log_end_offset <= end
        assert log.log_end_offset in bases  # whole batches only
        _check_values(log)
        log.close()


@pytest.mark.parametrize("n", [3, 10])
def test_flush_messages_n_loses_fewer_than_n(tmp_path, n: int) -> None:
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now, flush_messages=n)
    for _ in range(57):
        _append(log, 1)
    end = log.log_end_offset
    log.abandon()
    disk.crash()
    log = _open(path, disk, now, flush_messages=n)
    assert end - n < log.log_end_offset <= end
    assert log.log_end_offset == end - end % n
    _check_values(log)
    log.close()


def test_flush_ms_flushes_once_the_interval_passes(tmp_path) -> None:
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now, flush_ms=100)
    _append(log, 5)
    now[0] += 99
    _append(log, 5)  # 99 ms since the last flush: not yet
    assert log.recovery_point == 0
    now[0] += 1
    _append(log, 5)  # 100 ms: this append is flushed before it returns
    assert log.recovery_point == 15
    _append(log, 5)  # unflushed again
    log.abandon()
    disk.crash()
    log = _open(path, disk, now, flush_ms=100)
    assert log.log_end_offset == 15
    _check_values(log)
    log.close()


def test_no_flush_policy_can_lose_everything_unflushed(tmp_path) -> None:
    """The default (no flush) keeps nothing past the last fsync; the log is still consistent."""
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now, segment_bytes=1 << 20)
    for _ in range(20):
        _append(log, 3)
    log.abandon()
    disk.crash()
    log = _open(path, disk, now)
    assert log.log_end_offset == 0 and log.log_start_offset == 0
    log._check()
    assert _append(log, 1).base_offset == 0
    log.close()


def test_roll_makes_the_rolled_segment_durable(tmp_path) -> None:
    """A roll fsyncs the old segment (Kafka flushes on roll): its records survive power loss."""
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now, segment_bytes=1 << 20)
    for _ in range(10):
        _append(log, 2)
    log.roll()
    _append(log, 2)
    log.abandon()
    disk.crash()
    log = _open(path, disk, now)
    assert log.log_end_offset == 20
    _check_values(log)
    log.close()


def test_clean_close_survives_power_loss(tmp_path) -> None:
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now)
    for _ in range(30):
        _append(log, 3)
    log.delete_records_before(7)
    log.close()
    disk.crash()
    log = _open(path, disk, now)
    assert log.recovery.clean_shutdown and log.recovery.segments_scanned == 0
    assert (log.log_start_offset, log.log_end_offset) == (7, 90)
    _check_values(log)
    log.close()


def test_truncation_is_durable(tmp_path) -> None:
    """truncate_to fsyncs: truncated records do not come back after power loss."""
    disk, now = SimulatedDiskIO(), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now, flush_messages=1)
    for _ in range(30):
        _append(log, 3)
    log.truncate_to(40)
    end = log.log_end_offset
    assert end <= 40
    log.abandon()
    disk.crash()
    log = _open(path, disk, now)
    assert log.log_end_offset == end
    _check_values(log)
    log.close()


# ---- injected I/O errors -------------------------------------------------------


def _sizes(path: str) -> Dict[str, int]:
    return {n: os.path.getsize(os.path.join(path, n)) for n in os.listdir(path) if n.endswith(".log")}


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
@pytest.mark.parametrize("nth", [0, 1, 3])
def test_write_error_leaves_no_partial_batch(tmp_path, err: int, nth: int) -> None:
    disk, now = SimulatedDiskIO(fail_errno=err), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now)
    for _ in range(5):
        _append(log, 4)
    end, sizes = log.log_end_offset, _sizes(path)
    disk.fail_write_after = disk.writes + nth
    failed: Optional[KafkaStorageError] = None
    for _ in range(nth + 2):
        try:
            _append(log, 4)
        except KafkaStorageError as exc:
            failed = exc
            break
        end, sizes = log.log_end_offset, _sizes(path)
    assert failed is not None
    assert failed.errno == err
    assert path in str(failed) or "p-0" in str(failed)
    assert log.log_end_offset == end
    assert _sizes(path) == sizes  # nothing of the failed batch remains
    disk.fail_write_after = None
    _append(log, 2)  # the log keeps working
    _check_values(log)
    log._check()
    log.close()
    log = _open(path, disk, now)
    _check_values(log)
    log.close()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_fsync_error_on_append_raises_storage_error(tmp_path, err: int) -> None:
    """flush_messages=1 and fsync fails: the append is not acknowledged (KafkaStorageError)."""
    disk, now = SimulatedDiskIO(fail_errno=err), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now, flush_messages=1)
    for _ in range(5):
        _append(log, 2)
    acked, sizes = log.log_end_offset, _sizes(path)
    disk.fail_fsync_after = disk.fsyncs
    with pytest.raises(KafkaStorageError) as info:
        _append(log, 2)
    assert info.value.errno == err
    # Not acknowledged, so not kept: the batch is cut off again, the log is usable.
    assert log.log_end_offset == acked
    assert _sizes(path) == sizes
    _check_values(log)
    log._check()
    # After a power loss only acknowledged records remain.
    disk.fail_fsync_after = None
    log.abandon()
    disk.crash()
    log = _open(path, disk, now, flush_messages=1)
    assert log.log_end_offset == acked
    _check_values(log)
    _append(log, 1)
    log.close()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_fsync_error_on_flush_raises_storage_error(tmp_path, err: int) -> None:
    disk, now = SimulatedDiskIO(fail_errno=err), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now)
    _append(log, 3)
    disk.fail_fsync_after = disk.fsyncs
    with pytest.raises(KafkaStorageError) as info:
        log.flush()
    assert info.value.errno == err and "p-0" in str(info.value)
    assert log.recovery_point == 0  # the recovery point only moves after a good fsync
    disk.fail_fsync_after = None
    log.flush()
    assert log.recovery_point == 3
    log.close()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO], ids=["ENOSPC", "EIO"])
def test_failed_close_is_not_a_clean_shutdown(tmp_path, err: int) -> None:
    """close() whose flush fails raises, and must not write the clean-shutdown marker:
    the next open has to validate the unflushed tail."""
    disk, now = SimulatedDiskIO(fail_errno=err), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now)
    for _ in range(10):
        _append(log, 3)
    disk.fail_fsync_after = disk.fsyncs
    with pytest.raises(KafkaStorageError):
        log.close()
    assert log.closed
    assert not os.path.exists(tmp_path / ".kafka_cleanshutdown")
    disk.fail_fsync_after = None
    disk.crash()
    log = _open(path, disk, now)
    assert not log.recovery.clean_shutdown
    log._check()
    _check_values(log)
    log.close()


@pytest.mark.parametrize("call", ["roll", "truncate_to", "delete_records_before", "enforce_retention",
                                  "truncate_fully_and_start_at"])
def test_disk_errors_in_maintenance_are_storage_errors(tmp_path, call: str) -> None:
    """Every write path turns an OSError into KafkaStorageError naming the partition, and
    the log stays consistent and usable once the disk recovers."""
    disk, now = SimulatedDiskIO(fail_errno=errno.EIO), [1_000]
    path = str(tmp_path / "p-0")
    log = _open(path, disk, now, segment_bytes=1024, retention_bytes=1024)
    for _ in range(40):
        _append(log, 2)
    args = {"roll": (), "truncate_to": (75,), "delete_records_before": (79,), "enforce_retention": (),
            "truncate_fully_and_start_at": (100,)}[call]
    disk.fail_fsync_after = disk.fsyncs
    log.config = log.config._replace(retention_bytes=0)
    with pytest.raises(KafkaStorageError) as info:
        getattr(log, call)(*args)
    assert info.value.errno == errno.EIO and "p-0" in str(info.value)
    disk.fail_fsync_after = None
    log._check()
    _check_values(log)
    end = log.log_end_offset
    assert _append(log, 1).base_offset == end
    log.close()
