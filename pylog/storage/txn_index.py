"""The ``.txnindex`` file: the aborted transactions of one segment (Kafka's ``TransactionIndex``).

One file per segment, named like the segment (``00000000000000000000.txnindex``),
holding one 34-byte entry (Kafka's ``AbortedTxn``) per transaction whose ABORT
marker was written into that segment, in marker order (big-endian):

=======  ======  ===================  =====================================================
offset   size    field                meaning
=======  ======  ===================  =====================================================
0        int16   version              0
2        int64   producer_id          the transaction's producer id
10       int64   first_offset         offset of the transaction's first record
18       int64   last_offset          offset of the ABORT marker; strictly increasing
26       int64   last_stable_offset   the partition's LSO when the marker was written
=======  ======  ===================  =====================================================

A read_committed fetch of ``[fetch_offset, upper_bound)`` asks every segment
from the one holding ``fetch_offset`` on for the aborted transactions that
overlap the range (:meth:`TransactionIndex.collect_aborted`), as Kafka's
``collectAbortedTxns``: ``last_offset >= fetch_offset and first_offset <
upper_bound``; an entry whose ``last_stable_offset >= upper_bound`` ends the
search (no later abort can overlap the range).

As in Kafka the file is created lazily, on the first append; a segment without
aborts has none. Reading the entries holds no descriptor afterwards (a query
over many old segments opens none); a change opens the file and keeps it open
until :meth:`TransactionIndex.close`. Unlike Kafka, the entries are read once into memory (the file
is small: one entry per abort) and queries are answered from there; the file is
written behind them, one ``pwrite`` per append.

Damage: a file whose length is not a multiple of 34, an entry of an unknown
version, a ``last_offset`` below the segment's base offset or not above the
previous one, or ``first_offset > last_offset`` makes :meth:`sanity_check` (and
any read) raise :class:`~pylog.errors.CorruptIndexError` naming the file and the
byte position of the bad entry; the log then empties the index and rebuilds it
from the segment's markers (:meth:`pylog.storage.log.Log.aborted_transactions`).

Durability: :meth:`TransactionIndex.append` only writes (page cache);
:meth:`TransactionIndex.flush` fsyncs the file, and its directory the first
time an object flushes (the file's name may not be durable yet: created by
this object, or by an earlier one that was closed without a flush). After a crash the file may lack the entries
written after the last flush; the log's recovery rebuilds it from the segment,
which is what Kafka's ``LogLoader`` does for every segment it recovers.

All I/O goes through the injected :class:`~pylog.storage.fileio.FileIO`; an
``OSError`` from it becomes :class:`~pylog.errors.KafkaStorageError` naming the
file and the operation, and the in-memory entries stay as they were before the
failed call (so memory never claims an entry the file may not hold, and a
failed truncation leaves the entries it could not remove).

Thread-safety: none; the owning log's lock serializes calls.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import List, Optional, Tuple

from pylog.errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError, LogClosedError
from pylog.storage.fileio import FileIO

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY_SIZE = 34
CURRENT_VERSION = 0

_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == ENTRY_SIZE


@dataclass(frozen=True)
class AbortedTxn:
    """One aborted transaction: producer id, first offset, marker offset and the LSO at the abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        """The 34-byte entry.

        >>> AbortedTxn(7, 10, 20, 10).encode().hex()
        '00000000000000000007000000000000000a0000000000000014000000000000000a'
        """
        return _ENTRY.pack(CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


def decode_entries(data: bytes, path: str, start_offset: int) -> List[AbortedTxn]:
    """Every entry of a ``.txnindex`` file's bytes, checked as :meth:`TransactionIndex.sanity_check` says.

    Raises :class:`CorruptIndexError` naming ``path`` and the byte position of the first bad entry.
    Complexity: O(len(data)).
    """
    out: List[AbortedTxn] = []
    whole = len(data) - len(data) % ENTRY_SIZE
    prev_last: Optional[int] = None
    for pos in range(0, whole, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != CURRENT_VERSION:
            raise CorruptIndexError(f"aborted transaction entry of unknown version {version} "
                                    f"(this build reads version {CURRENT_VERSION})", path=path, position=pos)
        if last < start_offset:
            raise CorruptIndexError(f"last offset {last} of aborted transaction (producer {pid}) is below "
                                    f"the segment's base offset {start_offset}", path=path, position=pos)
        if prev_last is not None and last <= prev_last:
            raise CorruptIndexError(f"last offset {last} of aborted transaction (producer {pid}) does not "
                                    f"follow the previous entry's {prev_last}", path=path, position=pos)
        if first > last:
            raise CorruptIndexError(f"aborted transaction (producer {pid}) starts at {first}, after its "
                                    f"marker at {last}", path=path, position=pos)
        out.append(AbortedTxn(pid, first, last, lso))
        prev_last = last
    if whole != len(data):
        raise CorruptIndexError(f"torn entry: {len(data) - whole} bytes after the last whole "
                                f"{ENTRY_SIZE}-byte entry", path=path, position=whole)
    return out


class TransactionIndex:
    """The aborted-transaction index of the segment starting at ``start_offset``, in file ``path``.

    Opening reads nothing; the file (if it exists) is read on first use.
    Complexity: :meth:`append` O(1) plus one write; :meth:`collect_aborted` O(entries);
    :meth:`truncate_to` O(entries) plus one truncate.
    """

    def __init__(self, path: str, start_offset: int, *, file_io: Optional[FileIO] = None):
        self.path = os.fspath(path)
        self.start_offset = start_offset
        self._io = file_io if file_io is not None else FileIO()
        self._fd: Optional[int] = None
        self._entries: Optional[List[AbortedTxn]] = None  # None: not read yet
        self._name_synced = False  # this object has fsynced the directory since it saw the file
        self._closed = False

    # ---- internals -------------------------------------------------------
    def _error(self, exc: OSError, what: str) -> KafkaStorageError:
        if isinstance(exc, KafkaStorageError):
            return exc
        return KafkaStorageError(exc.errno, f"{what} of transaction index {self.path} failed: {exc.strerror or exc}")

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"transaction index {self.path} is closed")

    def _load(self) -> List[AbortedTxn]:
        self._check_open()
        if self._entries is not None:
            return self._entries
        fd = self._fd
        if fd is None:
            if not self._io.exists(self.path):
                self._entries = []
                return self._entries
            try:
                fd = self._io.open(self.path, create=False)
            except OSError as exc:
                raise self._error(exc, "open") from exc
        try:
            data = self._io.pread(fd, self._io.size(fd), 0)
            entries = decode_entries(data, self.path, self.start_offset)
        except (OSError, CorruptIndexError) as exc:
            if fd != self._fd:
                self._io.close(fd)
            if isinstance(exc, CorruptIndexError):
                raise
            raise self._error(exc, "read") from exc
        if fd != self._fd:  # opened only to read: a query holds no descriptor (the next change reopens)
            try:
                self._io.close(fd)
            except OSError:
                pass
        self._entries = entries
        return entries

    def _open_existing(self) -> int:
        if self._fd is None:
            try:
                self._fd = self._io.open(self.path, create=False)
            except OSError as exc:
                raise self._error(exc, "open") from exc
        return self._fd

    # ---- queries ---------------------------------------------------------
    @property
    def last_offset(self) -> Optional[int]:
        """The marker offset of the last entry, or None when the index is empty."""
        entries = self._load()
        return entries[-1].last_offset if entries else None

    def all_aborted(self) -> List[AbortedTxn]:
        """Every entry, in file order."""
        return list(self._load())

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> Tuple[List[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)`` and whether the search is complete.

        An entry overlaps when ``last_offset >= fetch_offset and first_offset <
        upper_bound``. The flag is True when an entry with ``last_stable_offset >=
        upper_bound`` was reached (later segments cannot hold an overlapping
        abort), False when the caller must go on to the next segment.
        """
        found: List[AbortedTxn] = []
        for e in self._load():
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                found.append(e)
            if e.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        """Read and check the whole file; raise :class:`CorruptIndexError` naming the file and position."""
        if self._entries is not None:  # re-read: the file may have been damaged since
            entries = self._entries
            self._entries = None
            try:
                self._load()
            except BaseException:
                self._entries = entries
                raise
        else:
            self._load()

    # ---- changes ---------------------------------------------------------
    def append(self, txn: AbortedTxn) -> None:
        """Append one entry (one write; not fsynced, see :meth:`flush`).

        Raises :class:`InvalidOffsetError` when ``txn.last_offset`` does not
        follow the last entry's, is below the segment's base offset, or precedes
        ``txn.first_offset``; :class:`KafkaStorageError` when the disk fails (the
        index is then as before the call).
        """
        entries = self._load()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise InvalidOffsetError(f"last offset {txn.last_offset} of an aborted transaction must follow "
                                     f"{entries[-1].last_offset} in transaction index {self.path}")
        if txn.last_offset < self.start_offset:
            raise InvalidOffsetError(f"last offset {txn.last_offset} is below the base offset {self.start_offset} "
                                     f"of transaction index {self.path}")
        if txn.first_offset > txn.last_offset:
            raise InvalidOffsetError(f"aborted transaction starts at {txn.first_offset}, after its marker at "
                                     f"{txn.last_offset} ({self.path})")
        data = txn.encode()
        if self._fd is None:
            try:
                self._fd = self._io.open(self.path, create=True)
            except OSError as exc:
                raise self._error(exc, "create") from exc
        size = len(entries) * ENTRY_SIZE
        try:
            self._io.pwrite(self._fd, data, size)
        except OSError as exc:
            try:  # a short write must not leave a torn entry behind the ones memory knows
                self._io.truncate(self._fd, size)
            except OSError:
                pass  # the next append overwrites it; a reopen reports it (sanity_check) and recovery rebuilds
            raise self._error(exc, "append") from exc
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose marker is at or after ``offset`` (Kafka's ``truncateTo``)."""
        entries = self._load()
        keep = len(entries)
        for i, e in enumerate(entries):
            if e.last_offset >= offset:
                keep = i
                break
        if keep == len(entries):
            return
        fd = self._open_existing()  # entries exist, so the file does
        try:
            self._io.truncate(fd, keep * ENTRY_SIZE)
        except OSError as exc:
            raise self._error(exc, "truncate") from exc
        del entries[keep:]

    def reset(self) -> None:
        """Remove every entry (Kafka's ``reset``): truncate the file, if any, to 0 bytes.

        Works on a damaged file too (the file is not read): recovery resets an
        index before rebuilding it from the segment.
        """
        self._check_open()
        if self._fd is None:
            if not self._io.exists(self.path):
                self._entries = []
                return
            try:
                self._fd = self._io.open(self.path, create=False)
            except OSError as exc:
                raise self._error(exc, "open") from exc
        try:
            self._io.truncate(self._fd, 0)
        except OSError as exc:
            raise self._error(exc, "reset") from exc
        self._entries = []

    def flush(self) -> None:
        """Fsync the file, and its directory on this object's first flush (the file may have been created
        unsynced by this object or by an earlier one); nothing to do without a file."""
        self._check_open()
        if self._fd is None:
            # Only read (a query closes its descriptor): an earlier object may have left the file
            # unsynced, so the first flush of this object fsyncs it once all the same.
            if self._name_synced or not self._entries:
                return
            try:
                fd = self._io.open(self.path, create=False)
                try:
                    self._io.fsync(fd)
                finally:
                    self._io.close(fd)
                self._io.fsync_dir(os.path.dirname(os.path.abspath(self.path)))
                self._name_synced = True
            except OSError as exc:
                raise self._error(exc, "flush") from exc
            return
        try:
            self._io.fsync(self._fd)
            if not self._name_synced:  # the file may be new (here or in an earlier object that crashed)
                self._io.fsync_dir(os.path.dirname(os.path.abspath(self.path)))
                self._name_synced = True
        except OSError as exc:
            raise self._error(exc, "flush") from exc

    def close(self) -> None:
        """Close the file (idempotent). Does not fsync: call :meth:`flush` first for that."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self._io.close(fd)
            except OSError:
                pass  # close() errors mean nothing more for a file we never fsync here
        self._closed = True

    def rename_to(self, path: str) -> None:
        """Rename the file (if any) to ``path`` (Kafka's ``renameTo``: ``.deleted``, ``.cleaned``, ``.swap``).

        All-or-nothing: when the rename fails the index keeps its old name
        (Kafka's switches to the new name either way). Not durable until the
        caller fsyncs the directory (the segment's rename does that).
        """
        self._check_open()
        new = os.fspath(path)
        try:
            if self._fd is not None or self._io.exists(self.path):
                self._io.replace(self.path, new)
        except OSError as exc:
            raise self._error(exc, f"rename to {new}") from exc
        self.path = new
        self._name_synced = False

    def delete_if_exists(self) -> bool:
        """Close and delete the file; True when there was one."""
        self.close()
        try:
            if not self._io.exists(self.path):
                return False
            self._io.unlink(self.path)
        except OSError as exc:
            raise self._error(exc, "delete") from exc
        return True

    def _check(self) -> None:
        """Assert the invariants: entries strictly increasing and at or above the base offset."""
        if self._entries is None:
            return
        lasts = [e.last_offset for e in self._entries]
        assert all(a < b for a, b in zip(lasts, lasts[1:])), lasts
        assert all(e.first_offset <= e.last_offset for e in self._entries)
        assert not lasts or lasts[0] >= self.start_offset
