"""One Kafka log directory (an entry of ``log.dirs``): its lock and root files.

A log directory holds partition directories (``<topic>-<partition>``) and, at
its root, Kafka's per-directory files:

* ``.lock`` - an fcntl lock held while a writer has the directory open; a
  second writer in another process gets :class:`LogDirLockedError`. Within
  one process the :class:`LogDir` object is shared, and opening the same
  partition twice is refused the same way;
* ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``;
* ``cleaner-offset-checkpoint`` - per compacted partition, the offset the
  log cleaner has cleaned up to (the first dirty offset), Kafka's format;
* ``.kafka_cleanshutdown`` - present only while no writer has the directory
  open and every partition was closed cleanly; its presence lets a reopen
  skip recovery entirely.

Readers (``read_only=True``) take no lock and write nothing.

Per process: a forked child forgets the LogDirs its parent opened (it does
not inherit the fcntl lock), so opening the directory in the child takes the
lock afresh (LogDirLockedError while the parent holds it), and the handles
the child inherited write nothing (see :func:`_after_fork_in_child`).

Thread-safety: all methods are guarded by one lock per directory.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from typing import Dict, Iterator, List, Optional, Set, Tuple

from pylog.errors import CorruptCheckpointError, KafkaStorageError, LogDirLockedError
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
#: per partition, the high watermark a broker last checkpointed (Kafka's name; written by replication)
HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
#: a cluster directory holds one log directory per broker, ``broker-<id>``
BROKER_DIR_PREFIX = "broker-"
#: a cluster (or queue) directory's controller metadata, beside the broker directories (written by replication)
CLUSTER_METADATA_FILE = "cluster-metadata.json"

TopicPartition = Tuple[str, int]

_registry: Dict[str, "LogDir"] = {}
_registry_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """Forget the parent's log directories in a forked child.

    The child inherits the registry but not the fcntl locks (POSIX record locks
    belong to the process), so sharing a parent's LogDir would write the
    directory without holding its lock. The registry is emptied (an open in the
    child then takes the lock afresh and gets LogDirLockedError while the parent
    holds it), the registry lock and each inherited LogDir's lock are replaced
    (another thread may have held them at the fork), and each inherited LogDir
    is marked as the parent's: its lock fd is closed (this does not release the
    parent's lock) and releasing it writes nothing.
    """
    global _registry_lock
    _registry_lock = threading.Lock()
    for d in list(_registry.values()):
        d._inherited = True
        d.lock = threading.RLock()
        if d._lock_fd is not None:
            try:
                os.close(d._lock_fd)
            except OSError:
                pass
            d._lock_fd = None
    _registry.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def check_not_locked(path: str) -> None:
    """Raise :class:`LogDirLockedError` if the log directory ``path`` is in use.

    In use means open in this process (the registry) or its ``.lock`` held by
    another process (probed with a non-blocking fcntl lock that is dropped at
    once). Used before starting a broker, whose partitions otherwise fail one
    by one on its loop thread. A check, not a reservation: a process may take
    the lock right after it. Complexity: O(1). Thread-safety: any thread.
    """
    real = os.path.realpath(path)
    with _registry_lock:
        if real in _registry:
            raise LogDirLockedError(f"log directory {path} is already open in this process")
    lock_path = os.path.join(real, LOCK_FILE)
    if not os.path.exists(lock_path):
        return
    fd = os.open(lock_path, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise LogDirLockedError(f"log directory {path} is locked by another process ({lock_path})") from None
    finally:
        os.close(fd)  # drops the probe lock (this process holds no other lock on that file)


class LogDir:
    """Shared, reference-counted state of one log directory in this process."""

    def __init__(self, path: str, io: FileIO):
        self.path = path
        self.io = io
        self.lock = threading.RLock()
        self._refs = 0
        self._lock_fd: Optional[int] = None
        #: the thread inside :meth:`deferred_checkpoints`, and whether it skipped a write
        self._defer_owner: Optional[int] = None
        self._defer_pending = False
        self._open: Set[TopicPartition] = set()
        self._dirty: Set[TopicPartition] = set()  # unclean at acquire and not yet recovered
        self.was_clean = False
        self.recovery_points: Dict[TopicPartition, int] = {}
        self.log_start_offsets: Dict[TopicPartition, int] = {}
        self.cleaner_offsets: Dict[TopicPartition, int] = {}
        #: True in a forked child for a LogDir its parent opened: the parent owns the directory
        self._inherited = False

    # ---- acquisition -------------------------------------------------------------
    @classmethod
    def acquire(cls, path: str, io: FileIO) -> "LogDir":
        """Open (or share) the writer's handle on ``path``, creating the directory."""
        real = os.path.realpath(path)
        with _registry_lock:
            d = _registry.get(real)
            if d is None:
                d = cls(real, io)
                d._open_dir()
                _registry[real] = d
            d._refs += 1
            return d

    def _open_dir(self) -> None:
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise KafkaStorageError(f"log directory {self.path} is a file, not a directory")
        try:
            self.io.makedirs(self.path)
        except OSError as exc:
            raise KafkaStorageError(f"cannot create log directory {self.path}: {exc.strerror}") from exc
        lock_path = os.path.join(self.path, LOCK_FILE)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            raise KafkaStorageError(f"cannot open {lock_path}: {exc.strerror}") from exc
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirLockedError(
                f"log directory {self.path} is locked by another process ({lock_path}); "
                "open it with read_only=True to read while that writer runs"
            ) from None
        self._lock_fd = fd
        marker = os.path.join(self.path, CLEAN_SHUTDOWN_FILE)
        self.was_clean = self.io.exists(marker)
        try:
            self.recovery_points = checkpoint.read_offsets(self.io, os.path.join(self.path, RECOVERY_POINT_FILE))
        except CorruptCheckpointError:
            self.recovery_points = {}  # recovery then scans every segment: slow but safe
            self.was_clean = False
        try:
            self.log_start_offsets = checkpoint.read_offsets(self.io, os.path.join(self.path, LOG_START_FILE))
        except CorruptCheckpointError:
            self.log_start_offsets = {}
        try:
            self.cleaner_offsets = checkpoint.read_offsets(self.io, os.path.join(self.path, CLEANER_OFFSET_FILE))
        except CorruptCheckpointError:
            self.cleaner_offsets = {}  # the cleaner then starts from the log start: more work, same result
        if not self.was_clean:
            self._dirty = {tp for tp in (_parse_partition_dir(n) for n in self.io.listdir(self.path)) if tp}
        if self.was_clean:
            # While a writer is open the directory is not clean.
            self.io.unlink(marker)
            self.io.fsync_dir(self.path)

    def release_writes_checkpoints(self) -> bool:
        """True when the next :meth:`release` is the last one and writes both offset checkpoints
        (this process owns the directory and holds one reference): a closing log may then leave
        its checkpoint to it. O(1). Thread-safety: a snapshot under the registry lock."""
        with _registry_lock:
            return self._refs == 1 and not self._inherited

    def release(self) -> None:
        """Drop one reference; the last one writes checkpoints, the clean marker, and unlocks.

        A LogDir inherited across fork (see :func:`_after_fork_in_child`) writes nothing: the
        parent process still owns the directory.
        """
        with _registry_lock:
            self._refs -= 1
            if self._refs > 0 or self._inherited:
                return
            _registry.pop(self.path, None)
        with self.lock:
            try:
                self._write_checkpoints_now()
                self._defer_pending = False
                if not self._dirty:
                    self.io.write_file_atomic(
                        os.path.join(self.path, CLEAN_SHUTDOWN_FILE), b'{"version":0,"brokerEpoch":-1}'
                    )
            except OSError as exc:
                if isinstance(exc, KafkaStorageError):
                    raise
                where = f" ({exc.filename})" if exc.filename else ""
                raise KafkaStorageError(
                    exc.errno, f"writing the checkpoints of log directory {self.path} failed: {exc.strerror or exc}{where}"
                ) from exc
            finally:
                if self._lock_fd is not None:
                    os.close(self._lock_fd)  # closing releases the fcntl lock
                    self._lock_fd = None

    def abandon(self) -> None:
        """Forget this directory without writing anything, as a crashed process would.

        Used by the cluster simulator to model a broker crash: checkpoints and the
        clean-shutdown marker are not written, and the lock is released.
        """
        with _registry_lock:
            if _registry.get(self.path) is self:
                _registry.pop(self.path, None)
            self._refs = 0
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # ---- partitions -------------------------------------------------------------------
    def register(self, tp: TopicPartition) -> bool:
        """Mark ``tp`` open; returns True when it must run crash recovery."""
        with self.lock:
            if tp in self._open:
                raise LogDirLockedError(f"partition {tp[0]}-{tp[1]} in {self.path} is already open in this process")
            self._open.add(tp)
            return not self.was_clean

    def recovered(self, tp: TopicPartition) -> None:
        with self.lock:
            self._dirty.discard(tp)

    def mark_dirty(self, tp: TopicPartition) -> None:
        """A partition closed uncleanly (or failed): the next open must recover."""
        with self.lock:
            self._dirty.add(tp)

    def unregister(self, tp: TopicPartition) -> None:
        with self.lock:
            self._open.discard(tp)

    def forget(self, tp: TopicPartition) -> None:
        """The partition was deleted: drop its checkpoint entries."""
        with self.lock:
            self.recovery_points.pop(tp, None)
            self.log_start_offsets.pop(tp, None)
            if self.cleaner_offsets.pop(tp, None) is not None:
                self.write_cleaner_checkpoint()
            self._dirty.discard(tp)

    def _check_owned(self) -> None:
        if self._inherited:
            raise LogDirLockedError(
                f"log directory {self.path} was opened by the parent of this forked process, which holds its "
                "lock: reopen it in this process (read_only=True to read while the parent writes)")

    def write_checkpoints(self) -> None:
        """Atomically rewrite the recovery-point and log-start checkpoints.

        Inside :meth:`deferred_checkpoints` (on the thread that entered it) this only notes
        that a write is due. Complexity: O(partitions) per call.
        Durability: temp + fsync + rename + directory fsync before return (or, deferred, when
        the block ends or the directory is released)."""
        if self._defer_owner is not None and self._defer_owner == threading.get_ident():
            self._defer_pending = True
            return
        self._write_checkpoints_now()

    @contextlib.contextmanager
    def deferred_checkpoints(self) -> Iterator[None]:
        """Within the block, :meth:`write_checkpoints` from this thread writes nothing; the block's
        end (or the directory's release by its last log's close, inside it) writes them once.

        A broker closing N partitions rewrote both whole-directory files N times (O(N^2) bytes,
        2N fsyncs); Kafka's LogManager.shutdown checkpoints once after closing every log. A crash
        inside the block leaves the previous checkpoints and no clean-shutdown marker: the next
        open recovers from the older recovery points (more scanning, the same result).
        Nested blocks join the outer one. Thread-safety: other threads write at once, as before.
        """
        if self._defer_owner is not None:
            yield
            return
        self._defer_owner = threading.get_ident()
        self._defer_pending = False
        try:
            yield
        finally:
            self._defer_owner = None
        if self._defer_pending and self._lock_fd is not None and not self._inherited:
            self._defer_pending = False
            self._write_checkpoints_now()

    def _write_checkpoints_now(self) -> None:
        with self.lock:
            self._check_owned()
            checkpoint.write_offsets(self.io, os.path.join(self.path, RECOVERY_POINT_FILE), self.recovery_points)
            checkpoint.write_offsets(self.io, os.path.join(self.path, LOG_START_FILE), self.log_start_offsets)

    def set_cleaner_offset(self, tp: TopicPartition, offset: Optional[int]) -> None:
        """Record (or with None forget) how far ``tp`` is cleaned, and rewrite the checkpoint.

        Durability: atomic replace (temp, fsync, rename, fsync dir) before return.
        """
        with self.lock:
            if offset is None:
                if self.cleaner_offsets.pop(tp, None) is None:
                    return
            else:
                if self.cleaner_offsets.get(tp) == offset:
                    return
                self.cleaner_offsets[tp] = offset
            self.write_cleaner_checkpoint()

    def write_cleaner_checkpoint(self) -> None:
        """Atomically rewrite ``cleaner-offset-checkpoint`` (Kafka's LogCleanerManager file)."""
        with self.lock:
            self._check_owned()
            checkpoint.write_offsets(self.io, os.path.join(self.path, CLEANER_OFFSET_FILE), self.cleaner_offsets)


def _parse_partition_dir(name: str) -> Optional[TopicPartition]:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def parse_partition_dir(path: str) -> Optional[TopicPartition]:
    """``(topic, partition)`` from a directory named ``<topic>-<partition>``, else None."""
    return _parse_partition_dir(os.path.basename(os.path.normpath(path)))


# --------------------------------------------------------------------------- discovery


def broker_id_of(path: str, name: str) -> Optional[int]:
    """The broker id when ``path/name`` is a broker's log directory of a cluster directory, else None.

    A broker directory is named ``broker-<id>`` and holds no segment file: a
    partition folder ``broker-<n>`` of a topic named ``broker`` (which holds
    ``.log`` segments) is a partition, not a broker.

    Complexity: one ``listdir`` of ``path/name``. Thread-safety: stateless.
    """
    if not name.startswith(BROKER_DIR_PREFIX) or not name[len(BROKER_DIR_PREFIX):].isdigit():
        return None
    full = os.path.join(path, name)
    if not os.path.isdir(full) or any(n.endswith(".log") for n in os.listdir(full)):
        return None
    return int(name[len(BROKER_DIR_PREFIX):])


def list_log_dirs(root: str) -> List[Tuple[Optional[int], str]]:
    """The log directories under ``root`` as ``(broker id, path)``, in name order.

    A cluster directory (one holding ``broker-<id>`` directories, see
    :func:`broker_id_of`) gives one entry per broker; any other directory is a
    log directory itself: ``[(None, root)]``. The CLI and the Spark source both
    discover directories with this one rule.

    Raises FileNotFoundError/NotADirectoryError when ``root`` is not a directory
    (callers name the path in their own error).

    Complexity: one ``listdir`` of ``root`` plus one per ``broker-*`` entry.
    Thread-safety: stateless.
    """
    brokers: List[Tuple[Optional[int], str]] = []
    for n in sorted(os.listdir(root)):
        b = broker_id_of(root, n)
        if b is not None:
            brokers.append((b, os.path.join(root, n)))
    return brokers or [(None, root)]


def partition_dirs(log_dir: str) -> List[str]:
    """The partition directories (``<topic>-<partition>``) of one log directory, in name order.

    Directories of deleted partitions (``<topic>-<p>.<uuid>-delete``) and files are left out.

    Complexity: one ``listdir`` and one ``stat`` per entry. Thread-safety: stateless.
    """
    out = []
    for n in sorted(os.listdir(log_dir)):
        p = os.path.join(log_dir, n)
        if _parse_partition_dir(n) is not None and os.path.isdir(p):
            out.append(p)
    return out
