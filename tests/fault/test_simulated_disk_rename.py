"""SimulatedDiskIO's renames and unlinks against a model of what a journaling file system keeps.

The model tracks inodes (their synced bytes) and two directory views: the
current one and the durable one (as of the last directory fsync). A crash
leaves exactly the durable view, each name with its inode's synced bytes: a
rename not yet made durable by a directory fsync leaves the source under its
old name (if that name was durable) and the destination with its previously
durable content (or absent if it never was durable) - never both names gone.

Files are only ever written when new (written, optionally fsynced, closed),
so an inode's synced bytes are fixed once its fd is closed. Real files in a
temporary directory; hypothesis drives the operation sequences.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Dict, List, Tuple

from hypothesis import given
from hypothesis import strategies as st

from pylog.storage.fileio import SimulatedDiskIO

NAMES = ["a", "b", "c"]


class Model:
    """Inodes and the current and durable directory views of one directory."""

    def __init__(self, initial: Dict[str, bytes]) -> None:
        self.synced: Dict[int, bytes] = {}
        self.cur: Dict[str, int] = {}
        for name, data in initial.items():
            self.cur[name] = self._new_inode(data)
        self.dur = dict(self.cur)

    def _new_inode(self, synced: bytes) -> int:
        ino = len(self.synced)
        self.synced[ino] = synced
        return ino

    def write_new(self, name: str, data: bytes, fsync: bool) -> None:
        self.cur[name] = self._new_inode(data if fsync else b"")

    def replace(self, src: str, dst: str) -> None:
        self.cur[dst] = self.cur.pop(src)

    def unlink(self, name: str) -> None:
        del self.cur[name]

    def fsync_dir(self) -> None:
        self.dur = dict(self.cur)

    def crash(self) -> Dict[str, bytes]:
        self.cur = dict(self.dur)
        return {name: self.synced[ino] for name, ino in self.dur.items()}


def _listing(d: str) -> Dict[str, bytes]:
    out = {}
    for name in os.listdir(d):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = f.read()
    return out


def _run(initial: Dict[str, bytes], ops: List[Tuple]) -> None:
    d = tempfile.mkdtemp(prefix="pylog-rename-")
    try:
        for name, data in initial.items():  # existing before the disk sees them: durable and synced
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        disk = SimulatedDiskIO()
        model = Model(initial)
        current: Dict[str, bytes] = dict(initial)  # what the files hold now (before any crash)
        p = lambda n: os.path.join(d, n)  # noqa: E731
        for op in ops:
            kind = op[0]
            if kind == "write":
                _, name, data, fsync = op
                if name in current:
                    continue  # only new files are written (see the module docstring)
                fd = disk.open(p(name))
                try:
                    disk.pwrite(fd, data, 0)
                    if fsync:
                        disk.fsync(fd)
                finally:
                    disk.close(fd)
                model.write_new(name, data, fsync)
                current[name] = data
            elif kind == "replace":
                _, src, dst = op
                if src not in current or src == dst:
                    continue
                disk.replace(p(src), p(dst))
                model.replace(src, dst)
                current[dst] = current.pop(src)
            elif kind == "unlink":
                _, name = op
                if name not in current:
                    continue
                disk.unlink(p(name))
                model.unlink(name)
                del current[name]
            elif kind == "fsync_dir":
                disk.fsync_dir(d)
                model.fsync_dir()
            else:  # crash
                disk.crash()
                want = model.crash()
                assert _listing(d) == want, f"after {ops}"
                current = dict(want)
            assert _listing(d) == current
        disk.crash()
        assert _listing(d) == model.crash(), f"after {ops}"
    finally:
        shutil.rmtree(d, ignore_errors=True)


names = st.sampled_from(NAMES)
ops = st.one_of(
    st.tuples(st.just("write"), names, st.binary(min_size=1, max_size=8), st.booleans()),
    st.tuples(st.just("replace"), names, names),
    st.tuples(st.just("unlink"), names),
    st.tuples(st.just("fsync_dir")),
    st.tuples(st.just("crash")),
)


@given(initial=st.dictionaries(names, st.binary(min_size=1, max_size=8), max_size=3), ops=st.lists(ops, max_size=12))
def test_crash_leaves_the_durable_directory_view(initial: Dict[str, bytes], ops: List[Tuple]) -> None:
    _run(initial, ops)


def test_undurable_rename_keeps_the_old_name_with_its_synced_bytes(tmp_path) -> None:
    """The reported case: write-temp-then-rename with no directory fsync, then a crash. The
    source's durable name and synced bytes come back, and the destination keeps its old content."""
    _run({"a": b"old-a", "b": b"old-b"}, [("replace", "a", "b"), ("crash",)])
    _run({"a": b"old-a"}, [("replace", "a", "b"), ("crash",)])  # b never durable: absent
    _run({"a": b"old-a"}, [("write", "b", b"new", True), ("replace", "b", "a"), ("crash",)])  # atomic replace undone
    _run({"a": b"old-a"}, [("write", "b", b"new", True), ("replace", "b", "a"), ("fsync_dir",), ("crash",)])
