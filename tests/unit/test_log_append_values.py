"""Log.append's plain case (a list of bytes values, encoded and sealed from the list's items in one
C call) against the general encoder, and a clean close that writes each log-dir checkpoint once."""
from __future__ import annotations

import os
from typing import List

import pytest

from pylog import Log
from pylog.errors import InvalidConfigurationError, InvalidRecordError
from pylog.record import Record
from pylog.storage.fileio import FileIO


def _segment_bytes(path: str) -> bytes:
    with open(os.path.join(path, "00000000000000000000.log"), "rb") as f:
        return f.read()


def test_list_of_bytes_writes_what_the_general_path_writes(tmp_path) -> None:
    # same calls, one log fed lists (the C path), the other tuples (the general encoder): same bytes
    now = [1_700_000_000_000]
    batches = [[bytes([i, j % 256]) * (j % 50) for j in range(1 + i * 37 % 400)] for i in range(25)]
    fast = Log.open(str(tmp_path / "a-0"), clock_ms=lambda: now[0])
    slow = Log.open(str(tmp_path / "b-0"), clock_ms=lambda: now[0])
    for i, b in enumerate(batches):
        now[0] += 3
        epoch = -1 if i < 10 else i // 10
        r1 = fast.append(list(b), leader_epoch=epoch)
        r2 = slow.append(tuple(b), leader_epoch=epoch)
        assert r1 == r2
    assert fast.log_end_offset == slow.log_end_offset == sum(map(len, batches))
    assert fast.epochs._entries == slow.epochs._entries
    assert fast.epochs._entries[0] == (1, sum(len(b) for b in batches[:10]))
    fast.close()
    slow.close()
    assert _segment_bytes(str(tmp_path / "a-0")) == _segment_bytes(str(tmp_path / "b-0"))
    with Log.open(str(tmp_path / "a-0")) as log:
        got = [r.value for r in log.read(0, 1 << 30)]
    assert got == [v for b in batches for v in b]


def test_items_that_are_not_bytes_take_the_general_path(tmp_path) -> None:
    with Log.open(str(tmp_path / "t-0")) as log:
        log.append([b"a", bytearray(b"b"), memoryview(b"c"), Record(value=b"d", key=b"k")])
        with pytest.raises(InvalidRecordError):
            log.append([b"a", 5])  # type: ignore[list-item]
        with pytest.raises(InvalidRecordError):
            log.append([])
        with pytest.raises(InvalidConfigurationError):
            log.append([b"x"], leader_epoch="1")  # type: ignore[arg-type]
        assert log.log_end_offset == 4
        assert [(r.key, r.value) for r in log.read(0, 1 << 20)] == [
            (None, b"a"), (None, b"b"), (None, b"c"), (b"k", b"d")]


def test_compacted_topic_still_refuses_keyless_values(tmp_path) -> None:
    with Log.open(str(tmp_path / "t-0"), cleanup_policy="compact") as log:
        with pytest.raises(InvalidRecordError):
            log.append([b"no key"])
        assert log.log_end_offset == 0


class CountingIO(FileIO):
    def __init__(self) -> None:
        super().__init__()
        self.atomic: List[str] = []

    def write_file_atomic(self, path: str, data: bytes) -> None:
        self.atomic.append(os.path.basename(path))
        super().write_file_atomic(path, data)


def test_clean_close_writes_each_checkpoint_once(tmp_path) -> None:
    io = CountingIO()
    log = Log.open(str(tmp_path / "t-0"), file_io=io)
    log.append([b"v"] * 10)
    io.atomic.clear()
    log.close()
    assert sorted(io.atomic) == [".kafka_cleanshutdown", "log-start-offset-checkpoint",
                                 "recovery-point-offset-checkpoint"]
    with open(tmp_path / "recovery-point-offset-checkpoint") as f:
        assert f.read().split("\n")[2] == "t 0 10"
    with Log.open(str(tmp_path / "t-0")) as again:
        assert again.recovery is not None and again.recovery.clean_shutdown
        assert again.log_end_offset == 10


def test_a_changed_checkpoint_is_written_again(tmp_path) -> None:
    io = CountingIO()
    a = Log.open(str(tmp_path / "a-0"), file_io=io)
    b = Log.open(str(tmp_path / "b-0"), file_io=io)
    a.append([b"v"] * 3)
    a.close()  # b still open: the directory stays locked, a's entries are written
    b.append([b"w"] * 5)
    io.atomic.clear()
    b.close()
    assert io.atomic.count("recovery-point-offset-checkpoint") == 1
    with open(tmp_path / "recovery-point-offset-checkpoint") as f:
        assert sorted(f.read().split("\n")[2:4]) == ["a 0 3", "b 0 5"]
