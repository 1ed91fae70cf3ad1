"""A descriptor that fails to close (EIO from close(2), as NFS and some FUSE file systems report
late write errors) must not leak the others: Log.close() closes every segment's files and
releases the directory, then raises the first error as KafkaStorageError."""
from __future__ import annotations

import errno
import os

import pytest

import pylog
from pylog import errors
from pylog.storage.fileio import FileIO


class CloseFailsOnce(FileIO):
    """Real files; once ``armed``, ``close`` of a descriptor of ``victim`` raises EIO once (after
    really closing it, as close(2) does: the descriptor is gone either way)."""

    def __init__(self, victim: str) -> None:
        self.victim = victim
        self.fds: dict = {}
        self.failed = False
        self.armed = False

    def open(self, path: str, **kw: object) -> int:
        fd = super().open(path, **kw)  # type: ignore[arg-type]
        self.fds[fd] = path
        return fd

    def close(self, fd: int) -> None:
        super().close(fd)
        if self.armed and not self.failed and self.fds.get(fd, "").endswith(self.victim):
            self.failed = True
            raise OSError(errno.EIO, os.strerror(errno.EIO), self.fds[fd])


def _open_fds(io: CloseFailsOnce) -> list:
    alive = []
    for fd, path in io.fds.items():
        try:
            os.fstat(fd)
        except OSError:
            continue
        alive.append(path)
    return alive


@pytest.mark.parametrize("victim", ["00000000000000000000.log", "00000000000000000000.index"])
def test_close_goes_on_past_a_failing_descriptor_and_raises_it(tmp_path, victim: str) -> None:
    path = tmp_path / "t-0"
    io = CloseFailsOnce(victim)
    log = pylog.Log.open(str(path), file_io=io, segment_bytes=4096, index_interval_bytes=100)
    for i in range(60):  # several segments, each with index entries
        log.append([b"v%03d" % i + b"x" * 200])
    assert len(log.segments) > 3
    io.armed = True
    with pytest.raises(errors.KafkaStorageError) as info:
        log.close()
    assert io.failed and info.value.errno == errno.EIO and victim in str(info.value)
    assert _open_fds(io) == []  # every other segment's and index's descriptor was closed too
    again = pylog.Log.open(str(path))  # the directory was released: no LogDirLockedError
    assert [r.value[:4] for r in again.read(0)] == [b"v%03d" % i for i in range(60)]
    again.close()
