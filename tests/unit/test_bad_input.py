"""Bad input: each is a pylog.errors exception saying what and where, and nothing is written.

(I/O errors injected with SimulatedDiskIO - ENOSPC/EIO on write and fsync -
are in tests/fault/test_power_loss.py.)
"""
from __future__ import annotations

import os
from typing import Dict, Iterator

import pytest

import pylog
from pylog import errors
from pylog.storage.log import validate_topic


@pytest.fixture
def log(tmp_path) -> Iterator[pylog.Log]:
    lg = pylog.Log.open(str(tmp_path / "orders-2"), max_message_bytes=1000, segment_bytes=4096)
    lg.append([b"a", b"b", b"c"])
    yield lg
    lg.close()


def _files(log: pylog.Log) -> Dict[str, int]:
    return {n: os.path.getsize(os.path.join(log.dir, n)) for n in sorted(os.listdir(log.dir))}


class _Unchanged:
    """Asserts the log end, the log start and every file size are as before."""

    def __init__(self, log: pylog.Log):
        self.log = log

    def __enter__(self) -> "_Unchanged":
        self.before = (self.log.log_start_offset, self.log.log_end_offset, _files(self.log))
        return self

    def __exit__(self, *exc: object) -> None:
        assert (self.log.log_start_offset, self.log.log_end_offset, _files(self.log)) == self.before
        self.log._check()


@pytest.mark.parametrize("offset", [-1, -100, 4, 1000, 2**70])
def test_read_out_of_range(log: pylog.Log, offset: int) -> None:
    with _Unchanged(log), pytest.raises(errors.OffsetOutOfRangeError) as info:
        list(log.read(offset))
    msg = str(info.value)
    assert str(offset) in msg and "orders-2" in msg and "log end 3" in msg
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("offset", ["1", 1.0, None, True])
def test_read_offset_of_the_wrong_type(log: pylog.Log, offset: object) -> None:
    with _Unchanged(log), pytest.raises(errors.PylogError) as info:
        list(log.read(offset))  # type: ignore[arg-type]
    assert type(offset).__name__ in str(info.value)


@pytest.mark.parametrize("max_bytes", [-1, "10", None])
def test_read_bad_max_bytes(log: pylog.Log, max_bytes: object) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        list(log.read(0, max_bytes))  # type: ignore[arg-type]
    assert "max_bytes" in str(info.value)


@pytest.mark.parametrize("call", ["truncate_to", "delete_records_before"])
@pytest.mark.parametrize("offset", [-1, "2", 2.0, None])
def test_truncation_offsets(log: pylog.Log, call: str, offset: object) -> None:
    with _Unchanged(log), pytest.raises(errors.OffsetOutOfRangeError) as info:
        getattr(log, call)(offset)
    assert repr(offset) in str(info.value) or str(offset) in str(info.value)


def test_delete_records_past_the_end(log: pylog.Log) -> None:
    with _Unchanged(log), pytest.raises(errors.OffsetOutOfRangeError) as info:
        log.delete_records_before(4)
    assert "4" in str(info.value) and "orders-2" in str(info.value)


@pytest.mark.parametrize(
    "records, what",
    [
        (["text"], "record 0"),
        ([b"ok", 7], "record 1"),
        ([b"ok", b"ok", 1.5], "record 2"),
        ([pylog.Record(value="text")], "value"),
        ([pylog.Record(value=b"v", key="k")], "key"),
        ([pylog.Record(value=b"v", timestamp="now")], "timestamp"),
        ([pylog.Record(value=b"v", timestamp=1.5)], "timestamp"),
        ([pylog.Record(value=b"v", headers=[("h",)])], "header"),
        ([pylog.Record(value=b"v", headers=[("h", b"x", b"y")])], "header"),
        ([pylog.Record(value=b"v", headers=[(b"h", b"x")])], "header"),
        ([pylog.Record(value=b"v", headers=[("h", "x")])], "header"),
        ([pylog.Record(value=b"v", headers=[None])], "header"),
        ([pylog.Record(value=b"v", headers="h=x")], "header"),
        ([], "at least one record"),
    ],
)
def test_bad_records_write_nothing(log: pylog.Log, records: list, what: str) -> None:
    with _Unchanged(log), pytest.raises(errors.InvalidRecordError) as info:
        log.append(records)
    assert what in str(info.value)
    assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("records", [b"abc", "abc", pylog.Record(value=b"v"), None])
def test_append_needs_a_list(log: pylog.Log, records: object) -> None:
    with _Unchanged(log), pytest.raises(errors.PylogError) as info:
        log.append(records)  # type: ignore[arg-type]
    assert "list" in str(info.value)


def test_record_over_max_message_bytes(log: pylog.Log) -> None:
    with _Unchanged(log), pytest.raises(errors.RecordTooLargeError) as info:
        log.append([b"x" * 1000])
    msg = str(info.value)
    assert "max_message_bytes=1000" in msg and "orders-2" in msg and "offset 3" in msg
    assert log.append([b"x" * 900]).base_offset == 3  # a smaller one still fits


def test_a_request_with_one_batch_over_max_message_bytes_names_that_batch(log: pylog.Log) -> None:
    # a leader's append of several batches: the error names the batch over the limit, not the first
    from pylog.record import encode_batch

    end = log.log_end_offset
    data = encode_batch([b"a"], now_ms=1, base_offset=0) + encode_batch([b"x" * 1000], now_ms=1, base_offset=1)
    with _Unchanged(log), pytest.raises(errors.RecordTooLargeError) as info:
        log.append_batches(bytes(data))
    assert f"batch at offset {end + 1} " in str(info.value) and "max_message_bytes=1000" in str(info.value)


@pytest.mark.parametrize("batches", [1, 2])
def test_a_follower_copies_batches_over_max_message_bytes(log: pylog.Log, batches: int) -> None:
    """Kafka's appendAsFollower ignores max.message.bytes: the leader checked each batch under the
    config of its time, and a replica with a smaller limit now must still copy its leader's log.
    (One batch and several take different append paths.) segment_bytes still applies."""
    from pylog.record import encode_batch

    end = log.log_end_offset
    data = encode_batch([b"x" * 1000], now_ms=1, base_offset=end)
    if batches == 2:
        data += encode_batch([b"a"], now_ms=1, base_offset=end + 1)
    res = log.append_batches(bytes(data), assign_offsets=False)
    assert (res.base_offset, res.last_offset) == (end, end + batches - 1)
    assert [r.value for r in log.read(end)] == [b"x" * 1000, b"a"][:batches]
    too_big = encode_batch([b"y" * 4200], now_ms=1, base_offset=log.log_end_offset)
    with _Unchanged(log), pytest.raises(errors.RecordTooLargeError, match="segment_bytes=4096"):
        log.append_batches(bytes(too_big), assign_offsets=False)


def test_raw_batches_that_are_not_batches(log: pylog.Log) -> None:
    with _Unchanged(log), pytest.raises(errors.CorruptRecordError) as info:
        log.append_batches(b"\x00" * 70)
    assert "orders-2" in str(info.value)
    with _Unchanged(log), pytest.raises(errors.CorruptRecordError):
        log.append_batches(b"")


@pytest.mark.parametrize(
    "config, what",
    [
        ({"segment_bytes": 10}, "segment_bytes"),
        ({"segment_bytes": 0}, "segment_bytes"),
        ({"segment_bytes": "1MB"}, "segment_bytes"),
        ({"segment_bytes": 4096.0}, "segment_bytes"),
        ({"segment_bytes": True}, "segment_bytes"),
        ({"index_interval_bytes": -1}, "index_interval_bytes"),
        ({"max_message_bytes": 10}, "max_message_bytes"),
        ({"flush_messages": 0}, "flush_messages"),
        ({"flush_ms": -5}, "flush_ms"),
        ({"flush_ms": "5"}, "flush_ms"),
        ({"retention_bytes": -2}, "retention_bytes"),
        ({"retention_ms": None}, "retention_ms"),
        ({"segment_size": 4096}, "segment_size"),
        ({"log.segment.bytes": 4096}, "log.segment.bytes"),
    ],
)
def test_bad_config_creates_nothing(tmp_path, config: dict, what: str) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        pylog.Log.open(str(tmp_path / "t-0"), **config)
    assert what in str(info.value)
    assert isinstance(info.value, ValueError)
    assert os.listdir(tmp_path) == []


def test_partition_path_that_is_a_file(tmp_path) -> None:
    path = tmp_path / "t-0"
    path.write_bytes(b"not a directory")
    with pytest.raises(errors.KafkaStorageError) as info:
        pylog.Log.open(str(path))
    assert str(path) in str(info.value) and "file" in str(info.value)
    assert path.read_bytes() == b"not a directory"
    assert sorted(os.listdir(tmp_path)) == ["t-0"]


def test_log_dir_that_is_a_file(tmp_path) -> None:
    root = tmp_path / "logs"
    root.write_bytes(b"x")
    with pytest.raises(errors.KafkaStorageError) as info:
        pylog.Log.open(str(root / "t-0"))
    assert str(root) in str(info.value)
    assert root.read_bytes() == b"x"


@pytest.mark.parametrize("name", ["orders", "orders-", "orders-x", "orders-1a", "-3", "orders_0"])
def test_path_not_named_topic_partition(tmp_path, name: str) -> None:
    with pytest.raises(errors.InvalidTopicError) as info:
        pylog.Log.open(str(tmp_path / name))
    assert name in str(info.value) and "<topic>-<partition>" in str(info.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("topic", ["..", ".", "x" * 250, "a b", "caf\u00e9", "a+b"])
def test_invalid_topic_directory(tmp_path, topic: str) -> None:
    with pytest.raises(errors.InvalidTopicError) as info:
        pylog.Log.open(str(tmp_path / f"{topic}-0"))
    assert topic in str(info.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "x" * 250, "a\x00b", "tab\t", 7, None, b"bytes"])
def test_validate_topic_rejects(topic: object) -> None:
    with pytest.raises(errors.InvalidTopicError):
        validate_topic(topic)


@pytest.mark.parametrize("topic", ["a", "x" * 249, "a.b_c-D9", "__consumer_offsets", "..."])
def test_validate_topic_accepts(topic: str) -> None:
    assert validate_topic(topic) == topic


def test_closed_log_refuses_everything(log: pylog.Log) -> None:
    log.close()
    for call, args in [("append", ([b"x"],)), ("read_batches", (0,)), ("flush", ()), ("truncate_to", (0,)),
                       ("offset_for_time", (0,)), ("roll", ()), ("enforce_retention", ())]:
        with pytest.raises(errors.LogClosedError) as info:
            getattr(log, call)(*args)
        assert "orders-2" in str(info.value), call


# ---------------------------------------------------------------- the bad-input matrix (issue 6)
# One test per row; the cluster rows are in tests/unit/test_bad_input_cluster.py.

import errno as _errno
import subprocess as _subprocess
import sys as _sys
import textwrap as _textwrap

from pylog.storage.fileio import SimulatedDiskIO


@pytest.mark.parametrize("topic", ["", "..", "x" * 250])
def test_matrix_bad_topic_in_log_open(tmp_path, topic: str) -> None:
    """Log.open with an empty, ``..`` or 250-character topic: InvalidTopicError, nothing created.
    (A ``/`` in the path is a directory separator: ``a/b-0`` is partition ``b-0`` of log dir ``a``.)"""
    with pytest.raises(errors.InvalidTopicError) as info:
        pylog.Log.open(str(tmp_path / f"{topic}-0"))
    assert "topic" in str(info.value) or "<topic>-<partition>" in str(info.value)
    assert os.listdir(tmp_path) == []


def test_matrix_unknown_log_config_names_the_setting(tmp_path) -> None:
    with pytest.raises(errors.InvalidConfigurationError) as info:
        pylog.Log.open(str(tmp_path / "t-0"), flush_message=1)  # typo of flush_messages
    assert "flush_message" in str(info.value)
    assert os.listdir(tmp_path) == []
    with pytest.raises(errors.InvalidConfigurationError):
        pylog.storage.log.LogConfig.from_kwargs(retention_hours=1)


def test_matrix_oversized_record_names_topic_and_partition_and_log_stays_usable(tmp_path) -> None:
    path = str(tmp_path / "big-7")
    with pylog.Log.open(path, max_message_bytes=2000) as lg:
        lg.append([b"before"])
        with pytest.raises(errors.RecordTooLargeError) as info:
            lg.append([b"x" * 5000])
        assert "big-7" in str(info.value) and "max_message_bytes=2000" in str(info.value)
        assert lg.append([b"after"]).base_offset == 1
    with pylog.Log.open(path) as lg:
        assert [r.value for r in lg.read(0)] == [b"before", b"after"]


SECOND_WRITER = """
    import sys, pylog
    from pylog.errors import LogDirLockedError
    try:
        pylog.Log.open(sys.argv[1])
    except LogDirLockedError as exc:
        print("LOCKED", exc)
        sys.exit(0)
    sys.exit("opened a log another process is writing")
"""


def test_matrix_second_writer_process_names_the_lock_file(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    with pylog.Log.open(path) as lg:
        lg.append([b"a"])
        proc = _subprocess.run([_sys.executable, "-c", _textwrap.dedent(SECOND_WRITER), path],
                               capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("LOCKED") and os.path.join(str(tmp_path), ".lock") in proc.stdout
        assert lg.append([b"b"]).base_offset == 1  # the first writer is unaffected


import contextlib as _contextlib


@_contextlib.contextmanager
def _read_only(path: str):
    """Make ``path`` (a directory) read-only for real: chmod for a normal user; for root (whom
    chmod does not stop) a read-only bind mount of it, which needs CAP_SYS_ADMIN."""
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        try:
            yield
        finally:
            os.chmod(path, 0o755)
        return
    bind = _subprocess.run(["mount", "--bind", path, path], capture_output=True, text=True)
    if bind.returncode != 0:
        pytest.skip(f"running as root without mount permission, cannot make {path} read-only: {bind.stderr.strip()}")
    try:
        ro = _subprocess.run(["mount", "-o", "remount,ro,bind", path], capture_output=True, text=True)
        assert ro.returncode == 0, ro.stderr
        yield
    finally:
        _subprocess.run(["umount", path], check=True)


def _tree(root: str) -> Dict[str, int]:
    return {os.path.relpath(os.path.join(d, n), root): os.path.getsize(os.path.join(d, n))
            for d, _dirs, names in os.walk(root) for n in names}


def test_matrix_read_only_directory_is_a_clear_error_leaving_nothing(tmp_path) -> None:
    root = str(tmp_path / "ro")
    os.mkdir(root)
    with _read_only(root):
        with pytest.raises(errors.KafkaStorageError) as info:
            pylog.Log.open(os.path.join(root, "t-0"))
        assert root in str(info.value) and ("Read-only" in str(info.value) or "ermission" in str(info.value))
        assert os.listdir(root) == []  # no partial files: no lock, no partition dir, no checkpoint


def test_matrix_read_only_directory_with_a_log_refuses_writers_keeps_readers(tmp_path) -> None:
    root = str(tmp_path / "ro")
    with pylog.Log.open(os.path.join(root, "t-0")) as lg:
        lg.append([b"a", b"b"])
    before = _tree(root)
    with _read_only(root):
        with pytest.raises(errors.KafkaStorageError) as info:
            pylog.Log.open(os.path.join(root, "t-0"))
        assert root in str(info.value)
        with pylog.Log.open(os.path.join(root, "t-0"), read_only=True) as reader:
            assert [r.value for r in reader.read(0)] == [b"a", b"b"]
        assert _tree(root) == before


@pytest.mark.parametrize("where", ["write", "fsync"])
@pytest.mark.parametrize("err", [_errno.ENOSPC, _errno.EIO])
def test_matrix_disk_error_on_append(tmp_path, where: str, err: int) -> None:
    """ENOSPC/EIO on a write or an fsync during append (flush_messages=1): KafkaStorageError with
    that errno naming the partition, nothing acknowledged is lost after a power loss, nothing
    unacknowledged appears, and the log keeps working (append, reopen, every record reads back)."""
    disk = SimulatedDiskIO(fail_errno=err)
    path = str(tmp_path / "disk-3")
    lg = pylog.Log.open(path, file_io=disk, flush_messages=1)
    acked = [b"a0", b"a1"]
    for v in acked:
        lg.append([v])
    if where == "write":
        disk.fail_write_after = disk.writes
    else:
        disk.fail_fsync_after = disk.fsyncs
    with pytest.raises(errors.KafkaStorageError) as info:
        lg.append([b"not-acked"])
    assert info.value.errno == err and "disk-3" in str(info.value)
    disk.fail_write_after = disk.fail_fsync_after = None
    assert lg.log_end_offset == 2
    acked.append(b"a2")
    assert lg.append([b"a2"]).base_offset == 2
    lg.abandon()
    disk.crash()  # power loss: only what was fsynced remains
    with pylog.Log.open(path, file_io=disk) as again:
        assert [r.value for r in again.read(0)] == acked
        assert again.append([b"a3"]).base_offset == 3


@pytest.mark.parametrize("kind", ["fail_write_after", "fail_fsync_after"])
@pytest.mark.parametrize("err", [_errno.ENOSPC, _errno.EIO])
def test_matrix_disk_error_while_creating_a_log(tmp_path, kind: str, err: int) -> None:
    """A full or failing disk at Log.open: KafkaStorageError naming the log directory (it was a
    bare OSError from the checkpoint write in LogDir.release), and the lock is released."""
    disk = SimulatedDiskIO(fail_errno=err, **{kind: 0})
    with pytest.raises(errors.KafkaStorageError) as info:
        pylog.Log.open(str(tmp_path / "t-0"), file_io=disk)
    assert info.value.errno == err and str(tmp_path) in str(info.value)
    with pylog.Log.open(str(tmp_path / "t-0")) as lg:  # a healthy disk: opens, nothing half-made in the way
        assert lg.append([b"x"]).base_offset == 0
