"""Loading a partition directory and recovering it after a crash (Kafka's LogLoader).

On open:

1. segment replacements the log cleaner left half done are finished: a
   ``.swap`` segment is complete (it was fsynced before being renamed from
   ``.cleaned``), so the live segments in the offset range it covers are
   deleted and it is renamed into place (Kafka's LogLoader); then leftover
   temporary files (``.cleaned``, ``.deleted``, ``.tmp``) and index files
   without a ``.log`` are removed;
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
from typing import Callable, Dict, List, Optional, Tuple

from sortedcontainers import SortedDict

from pylog.errors import KafkaStorageError
from pylog.storage.fileio import FileIO
from pylog.storage.record import BatchInfo
from pylog.storage.segment import LogSegment

log = logging.getLogger("pylog.storage")

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_TEMP_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX, ".tmp")
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


def _parse_segment_file(name: str) -> Optional[Tuple[int, str, str]]:
    """``(base offset, kind, suffix)`` for ``<20 digits>.<kind>[<suffix>]``, else None."""
    head, dot, rest = name.partition(".")
    if not dot or len(head) != 20 or not head.isdigit():
        return None
    kind, _, suffix = rest.partition(".")
    if kind not in ("log", "index", "timeindex", "txnindex", "snapshot"):
        return None
    return int(head), kind, "." + suffix if suffix else ""


def _swap_ranges(io: FileIO, directory: str, swaps: List[int], *, index_interval_bytes: int) -> Dict[int, int]:
    """For each ``<base>.log.swap``: the offsets ``[base, end)`` it replaces.

    ``end`` is the swap segment's next offset (Kafka's LogLoader), and at
    least ``base + 1``, so the live segment with the swap's own base offset is
    always replaced, even when cleaning left the swap segment empty.
    """
    out: Dict[int, int] = {}
    for base in swaps:
        seg = LogSegment(io, directory, base, index_interval_bytes=index_interval_bytes, read_only=True, suffix=SWAP_SUFFIX)
        try:
            out[base] = max(base + 1, seg.next_offset())
        finally:
            seg.close()
    return out


def _complete_swaps(io: FileIO, directory: str, names: List[str], *, index_interval_bytes: int,
                    removed: List[str]) -> None:
    """Finish the segment replacements a crash interrupted (Kafka's LogLoader).

    A ``.swap`` file exists only once the cleaned segment was fully written and
    fsynced, so it is complete: every live segment whose base offset falls in
    the range it replaces is deleted, then the swap files are renamed to live
    names. ``.cleaned`` files (an unfinished clean) and ``.deleted`` files are
    removed by the caller.
    """
    parsed = [(n, _parse_segment_file(n)) for n in names]
    swaps = sorted(p[0] for n, p in parsed if p is not None and p[1] == "log" and p[2] == SWAP_SUFFIX)
    if not swaps:
        return
    ranges = _swap_ranges(io, directory, swaps, index_interval_bytes=index_interval_bytes)
    for n, p in parsed:
        if p is None or p[2] != "" or p[1] == "snapshot":  # producer snapshots are not segment files
            continue
        if any(lo <= p[0] < hi for lo, hi in ranges.items()):
            io.unlink(os.path.join(directory, n))
            removed.append(n)
    io.fsync_dir(directory)
    for n, p in parsed:
        if p is not None and p[2] == SWAP_SUFFIX and p[0] in ranges and p[1] != "log":
            io.replace(os.path.join(directory, n), os.path.join(directory, n[: -len(SWAP_SUFFIX)]))
    for base in swaps:  # the .log last: an index renamed without its log is removed as an orphan
        name = f"{base:020d}.log"
        io.replace(os.path.join(directory, name + SWAP_SUFFIX), os.path.join(directory, name))
    io.fsync_dir(directory)
    log.warning("completed %d interrupted segment swap(s) in %s (replaced %s)", len(swaps), directory, removed)


def load_segments(
    io: FileIO, directory: str, *, index_interval_bytes: int, read_only: bool, now_ms: int,
    result: Optional["RecoveryResult"] = None,
) -> "SortedDict[int, LogSegment]":
    """Open every segment in ``directory``.

    A writer first completes interrupted swaps, then removes temp files
    (``.cleaned``, ``.deleted``, ``.tmp``) and orphan indexes. A reader
    (``read_only``) changes nothing: it reads a complete ``.swap`` segment in
    place of the live segments it replaces, so it sees every offset either as
    it was or as cleaned while a writer's cleaner swaps segments in.
    """
    if read_only:
        return _load_read_only(io, directory, index_interval_bytes=index_interval_bytes, now_ms=now_ms)
    removed: List[str] = result.temp_files_removed if result is not None else []
    names = io.listdir(directory)
    _complete_swaps(io, directory, names, index_interval_bytes=index_interval_bytes, removed=removed)
    names = io.listdir(directory)
    logs = {n for n in names if n.endswith(".log") and n[:-4].isdigit() and len(n) == 24}
    segments: SortedDict = SortedDict()
    unlinked = False
    for n in names:
        path = os.path.join(directory, n)
        if n.endswith(_TEMP_SUFFIXES):
            io.unlink(path)
            removed.append(n)
            unlinked = True
        elif n.endswith(_INDEX_SUFFIXES) and f"{n.split('.', 1)[0]}.log" not in logs:
            io.unlink(path)
            unlinked = True
    if unlinked:
        io.fsync_dir(directory)
    for n in sorted(logs):
        base = _base_offset(n)
        segments[base] = LogSegment(
            io, directory, base, index_interval_bytes=index_interval_bytes, read_only=False, created_ms=now_ms
        )
    return segments


def _load_read_only(io: FileIO, directory: str, *, index_interval_bytes: int, now_ms: int) -> "SortedDict[int, LogSegment]":
    for _attempt in range(20):
        segments: SortedDict = SortedDict()
        names = io.listdir(directory)
        parsed = [_parse_segment_file(n) for n in names]
        swaps = sorted(p[0] for p in parsed if p is not None and p[1] == "log" and p[2] == SWAP_SUFFIX)
        try:
            ranges = _swap_ranges(io, directory, swaps, index_interval_bytes=index_interval_bytes)
            for p in parsed:
                if p is None or p[1] != "log" or p[2] not in ("", SWAP_SUFFIX):
                    continue
                base, _, suffix = p
                if suffix == "" and any(lo <= base < hi for lo, hi in ranges.items()):
                    continue  # being replaced by a complete cleaned segment
                segments[base] = LogSegment(
                    io, directory, base, index_interval_bytes=index_interval_bytes, read_only=True,
                    created_ms=now_ms, suffix=suffix,
                )
            return segments
        except FileNotFoundError:
            # The writer renamed or deleted a file after listdir() (a swap
            # finishing, retention): list again rather than miss a segment.
            for seg in segments.values():
                seg.close()
    raise KafkaStorageError(f"{directory}: segment files kept changing while a reader listed them")


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
