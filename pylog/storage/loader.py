"""Loading a partition directory and recovering it after a crash (Kafka's LogLoader).

On open:

1. leftover temporary files (``.cleaned``, ``.swap``, ``.deleted``, ``.tmp``)
   and index files without a ``.log`` are removed;
2. every ``<base>.log`` becomes a :class:`LogSegment` (indexes load lazily
   and are rebuilt when missing or invalid);
3. after a clean shutdown nothing is scanned. Otherwise every segment from
   the one holding the recovery point onward is re-validated batch by batch
   (size, magic, CRC, increasing offsets); the first invalid byte truncates
   that segment and every later segment is deleted.

The result (:class:`RecoveryResult`) says what was done, and is logged.
Complexity: O(bytes after the recovery point); a clean open is O(segments).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, List

from sortedcontainers import SortedDict

from pylog.storage.fileio import FileIO
from pylog.storage.record import BatchInfo
from pylog.storage.segment import LogSegment

log = logging.getLogger("pylog.storage")

_TEMP_SUFFIXES = (".cleaned", ".swap", ".deleted", ".tmp")
_INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")


@dataclass
class RecoveryResult:
    """What opening a partition did: how much it scanned, cut and rebuilt."""

    path: str
    clean_shutdown: bool
    recovery_point: int
    segments_scanned: int = 0
    bytes_scanned: int = 0
    bytes_truncated: int = 0
    segments_deleted: List[int] = field(default_factory=list)
    temp_files_removed: List[str] = field(default_factory=list)
    truncated_at: List[str] = field(default_factory=list)  # "file@position: reason"
    seconds: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.bytes_truncated > 0 or bool(self.segments_deleted)


def _base_offset(name: str) -> int:
    return int(name.split(".", 1)[0])


def load_segments(
    io: FileIO, directory: str, *, index_interval_bytes: int, read_only: bool, now_ms: int
) -> "SortedDict[int, LogSegment]":
    """Open every segment in ``directory`` (removing temp and orphan files unless read-only)."""
    names = io.listdir(directory)
    logs = {n for n in names if n.endswith(".log") and n[:-4].isdigit() and len(n) == 24}
    segments: SortedDict = SortedDict()
    if not read_only:
        for n in names:
            path = os.path.join(directory, n)
            if n.endswith(_TEMP_SUFFIXES):
                io.unlink(path)
            elif n.endswith(_INDEX_SUFFIXES) and f"{n.split('.', 1)[0]}.log" not in logs:
                io.unlink(path)
    for n in sorted(logs):
        base = _base_offset(n)
        try:
            segments[base] = LogSegment(
                io, directory, base, index_interval_bytes=index_interval_bytes, read_only=read_only, created_ms=now_ms
            )
        except FileNotFoundError:
            if not read_only:
                raise
            # A reader raced the writer's retention or truncation: the segment
            # was deleted after listdir(), so it is no longer part of the log.
            continue
    return segments


def recover(
    segments: "SortedDict[int, LogSegment]",
    result: RecoveryResult,
    on_batches: Callable[[List[BatchInfo]], None],
) -> None:
    """Re-validate segments from the recovery point on; truncate at the first bad byte.

    ``on_batches`` sees every valid batch in order (the Log rebuilds its leader
    epoch cache from them). Mutates ``segments`` and ``result``.
    """
    started = time.perf_counter()
    if not segments:
        return
    bases = list(segments.keys())
    start_idx = max(0, segments.bisect_right(result.recovery_point) - 1)
    for i in range(start_idx, len(bases)):
        seg = segments[bases[i]]
        rec = seg.recover()
        result.segments_scanned += 1
        result.bytes_scanned += rec.valid_bytes + rec.truncated_bytes
        on_batches(rec.batches)
        if rec.truncated_bytes:
            result.bytes_truncated += rec.truncated_bytes
            result.truncated_at.append(f"{seg.log_path}@{rec.valid_bytes}: {rec.reason}")
            for later in bases[i + 1 :]:
                doomed = segments.pop(later)
                result.bytes_truncated += doomed.size
                doomed.delete()
                result.segments_deleted.append(later)
            break
    result.seconds = time.perf_counter() - started
    if result.truncated:
        log.warning(
            "recovered %s: scanned %d segment(s), %d bytes; truncated %d bytes at %s; deleted segments %s",
            result.path, result.segments_scanned, result.bytes_scanned, result.bytes_truncated,
            "; ".join(result.truncated_at), result.segments_deleted,
        )
    else:
        log.info("recovered %s: scanned %d segment(s), %d bytes, all valid", result.path,
                 result.segments_scanned, result.bytes_scanned)
