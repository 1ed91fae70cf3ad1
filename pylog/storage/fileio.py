"""The file layer every storage write goes through, and its crash simulation.

:class:`FileIO` is the real thing: thin wrappers over ``os`` file-descriptor
calls. :class:`SimulatedDiskIO` sits on the same files but remembers, per file,
how many bytes were fsynced; :meth:`SimulatedDiskIO.crash` then throws away
everything that was not - exactly what a power loss does to a page cache -
and it can inject ``ENOSPC``/``EIO`` on the Nth write or fsync, or an error
(``EMFILE``, ``ENOSPC``, ``EIO``, ...) at the Nth file operation of any kind
(:attr:`SimulatedDiskIO.fail_op_at`), which is how the fault sweep in
``tests/fault/test_fault_at_every_operation.py`` checks that every multi-file
step is all-or-nothing. The storage
layer never calls ``os`` directly for its files, so the same code runs on
either, and the cluster simulator gives each broker its own
:class:`SimulatedDiskIO`.

Model of what survives (documented in docs/durability.md):

* bytes written past a file's last fsync are lost on crash (files are
  append-mostly: logs, indexes);
* a truncation is kept (it can only remove bytes);
* a file created, or renamed into place, is lost on crash unless its
  directory was fsynced after the create/rename (POSIX: a new directory
  entry is durable only after fsync of the directory).

Thread-safety: :class:`FileIO` is stateless. :class:`SimulatedDiskIO` guards
its bookkeeping with a lock.
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple


def _load_syncfs() -> Any:
    """Linux's ``syncfs(fd)`` through ctypes, or None where it does not exist."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = ctypes.CDLL(None, use_errno=True).syncfs
        fn.argtypes = [ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    except (OSError, AttributeError):
        return None


_syncfs = _load_syncfs()
#: a batch with more distinct directories than this on one filesystem is made durable with one
#: ``syncfs`` instead of one fsync per directory (see :meth:`FileIO.batched_dir_syncs`)
SYNCFS_MIN_DIRS = 8


class FileIO:
    """Real file I/O on file descriptors (the default)."""

    def open(self, path: str, *, create: bool = True, read_only: bool = False) -> int:
        """Open ``path`` for positional reads and writes; returns an fd."""
        flags = os.O_RDONLY if read_only else os.O_RDWR | (os.O_CREAT if create else 0)
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)

    def close(self, fd: int) -> None:
        os.close(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def identity(self, fd: int) -> Tuple[int, int]:
        """``(st_dev, st_ino)`` of the open file: which file it is, whatever its name now.

        A segment whose descriptor was released reopens its path and compares
        (:mod:`pylog.storage.segment_cache`): a rename keeps the identity, another
        file renamed over the name does not (a file deleted and created again may
        get the freed inode number back: then only the size check guards).
        """
        st = os.fstat(fd)
        return st.st_dev, st.st_ino

    def path_identity(self, path: str) -> Tuple[Tuple[int, int], int]:
        """``((st_dev, st_ino), size)`` of the file at ``path`` without opening it (raises
        OSError, e.g. FileNotFoundError): how a segment that starts released learns its size."""
        st = os.stat(path)
        return (st.st_dev, st.st_ino), st.st_size

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        """Read up to ``n`` bytes at ``offset`` (short only at end of file)."""
        chunks = []
        while n > 0:
            b = os.pread(fd, n, offset)
            if not b:
                break
            chunks.append(b)
            n -= len(b)
            offset += len(b)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def pwrite(self, fd: int, data: object, offset: int) -> None:
        """Write all of ``data`` at ``offset``."""
        n = os.pwrite(fd, data, offset)  # type: ignore[arg-type]
        if n == len(data):  # type: ignore[arg-type]
            return
        view = memoryview(data)[n:]  # type: ignore[arg-type]
        offset += n
        while len(view):
            n = os.pwrite(fd, view, offset)
            view = view[n:]
            offset += n

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def batched_dir_syncs(self) -> Iterator[None]:
        """Within the block, :meth:`fsync_dir` calls made by this thread are collected, not run;
        on leaving it each distinct directory is made durable once (:meth:`sync_dirs`).

        This is how a batch of created partitions costs one directory sync, not several per
        partition (Kafka's LeaderAndIsr handling creates all its logs, then checkpoints once).
        Nested blocks join the outermost one. Calls from other threads are not deferred.

        Durability: a directory entry created or renamed inside the block (a partition
        directory, a segment file, an atomically replaced checkpoint) is durable when the block
        is left, not when the call that made it returns; file contents fsynced inside the block
        (:meth:`fsync`) are durable at once as before. :meth:`write_file_atomic` inside the block
        writes its temp file at once (errors raised there) but syncs and renames it at the exit:
        first every such temp file is made durable (one ``syncfs`` per filesystem when there are
        many, else one fsync each), then each is renamed into place, then the directories are
        synced - so each replaced file is still either wholly old or wholly new after a crash,
        and readers inside the block see the old content (Kafka's leader-epoch checkpoints of a
        LeaderAndIsr batch, KAFKA-15046, are written the same lazy way). So a caller must not
        make a *later* step's correctness depend on an earlier deferred entry within the block
        (e.g. delete segments after a checkpoint rename). A failing sync or rename at the exit
        raises the first OSError after trying every file and directory.

        Complexity: O(distinct directories + replaced files) at exit (one ``syncfs`` per
        filesystem on Linux when more than :data:`SYNCFS_MIN_DIRS`). Thread-safety: the deferral
        is per thread; the block itself must not be entered concurrently on one FileIO.
        """
        if "fsync_dir" in self.__dict__:  # an outer block collects for us
            yield
            return
        owner = threading.get_ident()
        real = self.fsync_dir
        real_atomic = self.write_file_atomic
        pending: Dict[str, None] = {}
        replaced: Dict[str, str] = {}  # final path -> its written, not yet synced or renamed temp file

        def deferred(path: str) -> None:
            if threading.get_ident() != owner:
                real(path)
            else:
                pending[os.path.abspath(path)] = None

        def deferred_atomic(path: str, data: bytes) -> None:
            if threading.get_ident() != owner:
                real_atomic(path, data)
                return
            tmp = path + ".tmp"
            fd = self.open(tmp)
            try:
                try:
                    if self.size(fd):  # a leftover (or this batch's earlier) temp file; a new one is empty
                        self.truncate(fd, 0)
                    self.pwrite(fd, data, 0)
                finally:
                    self.close(fd)
            except OSError:
                replaced.pop(path, None)
                try:
                    self.unlink(tmp)
                except OSError:
                    pass
                raise
            replaced[path] = tmp

        self.fsync_dir = deferred  # type: ignore[method-assign]
        self.write_file_atomic = deferred_atomic  # type: ignore[method-assign]
        try:
            yield
        finally:
            del self.fsync_dir
            del self.write_file_atomic
            failed = sys.exc_info()[0] is not None
            first: Optional[OSError] = None
            try:
                self._sync_files(list(replaced.values()))
                for path, tmp in replaced.items():
                    try:
                        self.replace(tmp, path)
                        pending[os.path.abspath(os.path.dirname(path) or ".")] = None
                    except OSError as exc:
                        first = first or exc
            except OSError as exc:  # the temp files are not durable: none is renamed into place
                first = exc
                for tmp in replaced.values():
                    try:
                        self.unlink(tmp)
                    except OSError:
                        pass
            try:
                self.sync_dirs(list(pending))
            except OSError as exc:
                first = first or exc
            if first is not None and not failed:
                raise first

    @staticmethod
    def _syncfs_groups(paths: List[str], flags: int) -> Tuple[List[str], Optional[OSError]]:
        """One ``syncfs(2)`` per filesystem holding more than :data:`SYNCFS_MIN_DIRS` of ``paths``
        (opened with ``flags``); returns the paths left to sync one by one (fewer on their
        filesystem, or unreadable) and the first error."""
        assert _syncfs is not None
        by_dev: Dict[int, List[str]] = {}
        rest: List[str] = []
        first: Optional[OSError] = None
        for p in paths:
            try:
                by_dev.setdefault(os.stat(p).st_dev, []).append(p)
            except OSError:
                rest.append(p)  # gone or unreadable: the one-by-one sync reports it
        for group in by_dev.values():
            if len(group) <= SYNCFS_MIN_DIRS:
                rest.extend(group)
                continue
            fd = os.open(group[0], flags)
            try:
                if _syncfs(fd) != 0:
                    import ctypes

                    e = ctypes.get_errno()
                    first = first or OSError(e, f"syncfs: {os.strerror(e)}", group[0])
            finally:
                os.close(fd)
        return rest, first

    def _sync_files(self, paths: List[str]) -> None:
        """Make the contents of the files ``paths`` durable: one ``syncfs`` per filesystem for many
        files with the real file layer on Linux, else one fsync each. Raises the first OSError."""
        rest = paths
        if _syncfs is not None and type(self).fsync is FileIO.fsync and len(paths) > SYNCFS_MIN_DIRS:
            rest, first = self._syncfs_groups(paths, os.O_RDONLY)
            if first is not None:
                raise first
        for p in rest:
            fd = self.open(p, create=False)
            try:
                self.fsync(fd)
            finally:
                self.close(fd)

    def sync_dirs(self, paths: List[str]) -> None:
        """Make the entries of every directory in ``paths`` durable (as :meth:`fsync_dir` on each).

        On Linux with the real file layer and more than :data:`SYNCFS_MIN_DIRS` directories on
        one filesystem, one ``syncfs(2)`` per filesystem does it (it writes back every dirty inode
        and the journal of that filesystem, a superset of the directory fsyncs; errors are
        reported since Linux 5.8). Subclasses that override :meth:`fsync_dir` (the simulated disk)
        get one :meth:`fsync_dir` per directory. Raises the first OSError after trying all.
        """
        first: Optional[OSError] = None
        rest = paths
        if _syncfs is not None and type(self).fsync_dir is FileIO.fsync_dir and len(paths) > SYNCFS_MIN_DIRS:
            rest, first = self._syncfs_groups(paths, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        for p in rest:
            try:
                self.fsync_dir(p)
            except OSError as exc:
                first = first or exc
        if first is not None:
            raise first

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> List[str]:
        return os.listdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_file_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data``: write a temp file, fsync, rename, fsync the directory.

        Durability: after return the new content survives power loss; a crash
        in between leaves either the old or the new file, never a mix. A failure
        before the rename removes the temp file again (best effort) and leaves
        the old file; a failure of the final directory fsync leaves the new file
        in place, not yet durable (a power loss may bring the old one back).
        """
        tmp = path + ".tmp"
        fd = self.open(tmp)
        try:
            try:
                self.truncate(fd, 0)
                self.pwrite(fd, data, 0)
                self.fsync(fd)
            finally:
                self.close(fd)
            self.replace(tmp, path)
        except OSError:
            try:  # leave the directory as it was: the old file, no temp file
                self.unlink(tmp)
            except OSError:
                pass
            raise
        self.fsync_dir(os.path.dirname(path) or ".")


class _FileState:
    __slots__ = ("synced_size", "durable_name")

    def __init__(self, synced_size: int, durable_name: bool):
        self.synced_size = synced_size
        self.durable_name = durable_name


class SimulatedDiskIO(FileIO):
    """Real files plus a model of the page cache: :meth:`crash` drops unsynced bytes.

    Files that existed before this object saw them count as fully synced.
    ``fail_write_after=N`` makes the (N+1)th write raise ``OSError(fail_errno)``;
    ``fail_fsync_after`` does the same for fsync. While writes fail (``N``
    writes done), :meth:`makedirs` of a directory that does not exist fails the
    same way (only a refused one counts as a write): a new directory needs a block written
    (a full disk refuses ``mkdir`` with ENOSPC, a failing one with EIO), and a
    new partition's directory is the first thing its open writes. Likewise,
    while fsyncs fail (``fail_fsync_after`` fsyncs done), :meth:`fsync_dir`
    fails too (only a refused one counts as an fsync): a disk that cannot sync
    a file cannot sync a directory either.

    Operation faults: every call that can fail on a real disk or descriptor
    table - :meth:`open`, :meth:`pwrite`, :meth:`fsync`, :meth:`truncate`,
    :meth:`replace`, :meth:`unlink`, :meth:`fsync_dir`, :meth:`makedirs`,
    :meth:`listdir`, :meth:`read_file` - counts one operation in :attr:`ops`
    (``close``, ``size``, ``exists`` and ``pread`` on an open descriptor do
    not). With ``fail_op_at=N`` operations N, N+1, ... N+``fail_op_count``-1
    (1-based, counted from the last :meth:`heal` or reset of :attr:`ops`)
    raise ``OSError(fail_op_errno)`` before touching anything;
    ``fail_op_count=None`` fails every operation from N on (a full disk or
    descriptor table stays full). :attr:`op_log` lists ``(kind, path)`` of
    every counted operation since :meth:`reset_ops` or :meth:`arm` (None
before: a long simulation keeps no log), for a test to say which one it
failed.
    """

    #: the operations counted by :attr:`ops` (and failed by ``fail_op_at``)
    COUNTED_OPS = ("open", "pwrite", "fsync", "truncate", "replace", "unlink", "fsync_dir", "makedirs", "listdir",
                   "read_file")

    def __init__(self, *, fail_write_after: Optional[int] = None, fail_fsync_after: Optional[int] = None,
                 fail_errno: int = errno.ENOSPC, fail_op_at: Optional[int] = None, fail_op_count: Optional[int] = 1,
                 fail_op_errno: int = errno.EIO):
        self._lock = threading.Lock()
        self._files: Dict[str, _FileState] = {}
        self._fd_paths: Dict[int, str] = {}
        self._pending_names: Dict[str, Set[str]] = {}  # dir -> names created/renamed since its fsync
        self._removed: Dict[str, bytes] = {}  # unlinked (not yet dir-synced) files: name -> content
        self.fail_write_after = fail_write_after
        self.fail_fsync_after = fail_fsync_after
        self.fail_errno = fail_errno
        self.writes = 0
        self.fsyncs = 0
        self.fail_op_at = fail_op_at
        self.fail_op_count = fail_op_count
        self.fail_op_errno = fail_op_errno
        self.ops = 0
        self.op_log: Optional[List[Tuple[str, str]]] = None  # recorded from reset_ops()/arm() on
        self.failed_ops: List[Tuple[int, str, str]] = []  # (op number, kind, path) of each injected failure

    def _op(self, kind: str, path: object) -> None:
        """Count one operation; raise the injected error when it is due. Call with ``_lock`` held."""
        self.ops += 1
        if self.op_log is not None:
            self.op_log.append((kind, str(path)))
        at = self.fail_op_at
        if at is not None and self.ops >= at and (self.fail_op_count is None or self.ops < at + self.fail_op_count):
            self.failed_ops.append((self.ops, kind, str(path)))
            raise OSError(self.fail_op_errno, os.strerror(self.fail_op_errno), str(path))

    def reset_ops(self) -> None:
        """Count (and record in :attr:`op_log`) operations from zero again."""
        with self._lock:
            self.ops = 0
            self.op_log = []
            self.failed_ops = []

    def arm(self, at: int, errno_: int, *, count: Optional[int] = 1) -> None:
        """Fail the ``at``-th operation from now (1-based) with ``errno_`` (``count`` of them; None: all later ones)."""
        self.reset_ops()
        with self._lock:
            self.fail_op_at, self.fail_op_errno, self.fail_op_count = at, errno_, count

    def heal(self) -> None:
        """Stop every injected fault (the disk was replaced, space or descriptors freed)."""
        with self._lock:
            self.fail_op_at = None
            self.fail_write_after = None
            self.fail_fsync_after = None

    def _state(self, path: str) -> _FileState:
        st = self._files.get(path)
        if st is None:
            size = os.path.getsize(path) if os.path.exists(path) else 0
            st = self._files[path] = _FileState(size, True)
        return st

    def open(self, path: str, *, create: bool = True, read_only: bool = False) -> int:
        path = os.path.abspath(path)
        with self._lock:
            self._op("open", path)
            existed = os.path.exists(path)
            fd = super().open(path, create=create, read_only=read_only)
            if not existed:
                self._files[path] = _FileState(0, False)
                self._pending_names.setdefault(os.path.dirname(path), set()).add(path)
            else:
                self._state(path)
            self._fd_paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._fd_paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: object, offset: int) -> None:
        with self._lock:
            self._op("pwrite", self._fd_paths.get(fd))
            self.writes += 1
            if self.fail_write_after is not None and self.writes > self.fail_write_after:
                raise OSError(self.fail_errno, os.strerror(self.fail_errno), self._fd_paths.get(fd))
        super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        with self._lock:
            self._op("fsync", self._fd_paths.get(fd))
            self.fsyncs += 1
            if self.fail_fsync_after is not None and self.fsyncs > self.fail_fsync_after:
                raise OSError(self.fail_errno, os.strerror(self.fail_errno), self._fd_paths.get(fd))
            super().fsync(fd)
            path = self._fd_paths.get(fd)
            if path is not None:
                self._state(path).synced_size = os.fstat(fd).st_size

    def truncate(self, fd: int, size: int) -> None:
        with self._lock:
            self._op("truncate", self._fd_paths.get(fd))
            super().truncate(fd, size)
            path = self._fd_paths.get(fd)
            if path is not None:
                st = self._state(path)
                st.synced_size = min(st.synced_size, size)

    def replace(self, src: str, dst: str) -> None:
        """Rename ``src`` over ``dst``; until a directory fsync makes it durable, :meth:`crash` undoes it.

        As on a journaling file system (rename is atomic), an undone rename leaves the
        source under its old name with its synced bytes (if that name was durable) and the
        destination with its previously durable content (absent if it never was durable):
        never both names gone.
        """
        src, dst = os.path.abspath(src), os.path.abspath(dst)
        with self._lock:
            self._op("replace", dst)
            st = self._state(src)
            if src not in self._removed and st.durable_name:
                with open(src, "rb") as f:
                    self._removed[src] = f.read()[: st.synced_size]
            if os.path.exists(dst) and dst not in self._removed:
                dst_st = self._state(dst)
                if dst_st.durable_name:
                    with open(dst, "rb") as f:
                        self._removed[dst] = f.read()[: dst_st.synced_size]
            super().replace(src, dst)
            self._files[dst] = _FileState(st.synced_size, False)
            self._files.pop(src, None)
            self._pending_names.setdefault(os.path.dirname(dst), set()).add(dst)
            self._pending_names.setdefault(os.path.dirname(src), set()).add(src)
            for fd, p in self._fd_paths.items():
                if p == src:
                    self._fd_paths[fd] = dst

    def unlink(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            self._op("unlink", path)
            st = self._state(path)
            if st.durable_name and path not in self._removed:
                with open(path, "rb") as f:
                    self._removed[path] = f.read()[: st.synced_size]
            super().unlink(path)
            self._files.pop(path, None)
            self._pending_names.setdefault(os.path.dirname(path), set()).add(path)

    def fsync_dir(self, path: str) -> None:
        path = os.path.abspath(path)
        with self._lock:
            self._op("fsync_dir", path)
            if self.fail_fsync_after is not None and self.fsyncs >= self.fail_fsync_after:
                self.fsyncs += 1  # a failed attempt counts, as a failed fsync does
                raise OSError(self.fail_errno, os.strerror(self.fail_errno), path)
            super().fsync_dir(path)
            for name in self._pending_names.pop(path, set()):
                if name in self._files:
                    self._files[name].durable_name = True
                self._removed.pop(name, None)

    def makedirs(self, path: str) -> None:
        with self._lock:
            self._op("makedirs", path)
            if (self.fail_write_after is not None and self.writes >= self.fail_write_after
                    and not os.path.isdir(path)):
                self.writes += 1  # a failed attempt counts, as a failed write does
                raise OSError(self.fail_errno, os.strerror(self.fail_errno), path)
        super().makedirs(path)

    def listdir(self, path: str) -> List[str]:
        with self._lock:
            self._op("listdir", path)
        return super().listdir(path)

    def read_file(self, path: str) -> bytes:
        with self._lock:
            self._op("read_file", path)
        return super().read_file(path)

    def crash(self) -> None:
        """Lose every byte and directory entry that was not made durable.

        Call with every fd of this disk closed or abandoned (the process "died").
        """
        with self._lock:
            for fd in list(self._fd_paths):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fd_paths.clear()
            for path, st in list(self._files.items()):
                if not os.path.exists(path):
                    continue
                if not st.durable_name:
                    os.unlink(path)
                    continue
                if os.path.getsize(path) > st.synced_size:
                    os.truncate(path, st.synced_size)
            for path, content in self._removed.items():
                with open(path, "wb") as f:  # an unlink that never reached the disk
                    f.write(content)
            self._files.clear()
            self._removed.clear()
            self._pending_names.clear()
            self.writes = self.fsyncs = 0
