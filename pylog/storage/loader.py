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
   (size, magic, CRC, increasing offsets); the first invalid byte in the
   last segment holding data is a torn write: it truncates that segment (and
   the empty segments after it are deleted). Invalid bytes in a segment
   followed by segments holding data cannot come from a crash (a segment is
   fsynced before the next one is created): that is corruption, and the open
   fails with :class:`CorruptRecordError` unless ``repair`` is asked for
   (then Kafka's LogLoader rule: truncate there, delete every later segment);
4. :func:`check_segments` - an empty segment whose offsets belong to the
   segment before it (a roll that failed half way and could not remove its
   file) is deleted; then the segments must follow each other without a hole:
   a segment ending below the next one's base offset (a deleted, emptied or
   cut segment) is :class:`CorruptRecordError` naming the files and the
   missing offsets, unless ``repair`` (truncate there) or the log is compacted
   (compaction leaves such gaps, as in Kafka).

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

from pylog.errors import CorruptRecordError, KafkaStorageError
from pylog.storage.fileio import FileIO
from pylog.record import BatchInfo
from pylog.storage.segment import LogSegment
from pylog.storage.segment_cache import SegmentCache

log = logging.getLogger(__name__)

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
    #: empty segments deleted because their offsets belong to the segment before them (abandoned rolls)
    abandoned_segments: List[int] = field(default_factory=list)
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
    result: Optional["RecoveryResult"] = None, cache: Optional[SegmentCache] = None,
) -> "SortedDict[int, LogSegment]":
    """Open every segment in ``directory`` (through ``cache``: at most its bound stay open).

    A writer first completes interrupted swaps, then removes temp files
    (``.cleaned``, ``.deleted``, ``.tmp``) and orphan indexes. A reader
    (``read_only``) changes nothing: it reads a complete ``.swap`` segment in
    place of the live segments it replaces, so it sees every offset either as
    it was or as cleaned while a writer's cleaner swaps segments in.
    """
    if read_only:
        return _load_read_only(io, directory, index_interval_bytes=index_interval_bytes, now_ms=now_ms, cache=cache)
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
            io, directory, base, index_interval_bytes=index_interval_bytes, read_only=False, created_ms=now_ms,
            cache=cache,
        )
    return segments


def _load_read_only(io: FileIO, directory: str, *, index_interval_bytes: int, now_ms: int,
                    cache: Optional[SegmentCache] = None) -> "SortedDict[int, LogSegment]":
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
                    created_ms=now_ms, suffix=suffix, cache=cache,
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
    *,
    repair: bool = False,
) -> None:
    """Re-validate segments from the recovery point on; truncate at the first bad byte.

    The segment holding the recovery point is scanned from its offset-index
    entry at or below the recovery point (:meth:`LogSegment.recover`), not
    from its first byte: the bytes before it were fsynced with their index
    entries before the recovery point moved past them. Later segments are
    scanned whole.

    The first bad byte of the last segment holding data truncates it (a torn
    write) and deletes the (empty) segments after it. A bad byte in an earlier
    segment raises :class:`CorruptRecordError` (naming the file, the position
    and what follows) without changing any file, unless ``repair``: then it
    truncates that segment and deletes every later one, as Kafka's LogLoader.

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
        # Only the last segment holding data can have a torn tail (roll fsyncs a
        # segment before it creates the next): damage anywhere before it is
        # corruption, refused unless the caller asked for repair.
        tail = all(segments[b].size == 0 for b in bases[i + 1 :])
        # The segment holding the recovery point is scanned from the index entry at or below it:
        # every batch and index entry before that point was fsynced (docs/durability.md).
        rec = seg.recover(truncate=tail or repair, from_offset=result.recovery_point if i == start_idx else None)
        result.segments_scanned += 1
        result.bytes_scanned += rec.valid_bytes - rec.start_position + rec.truncated_bytes
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


def check_segments(
    segments: "SortedDict[int, LogSegment]", result: RecoveryResult, *, log_start: int, compacted: bool,
    repair: bool, recovery_point: int = 0,
) -> None:
    """Drop abandoned empty segments, then refuse (or repair) holes between segments.

    The rules (docs/durability.md, "Segments that do not follow each other"):

    * an **empty** segment whose base offset is below the end of the segment
      before it, or whose whole range lies below ``log_start``, holds nothing
      and never did: roll creates a segment only at the log end, so it is
      the file of a roll that failed (EMFILE, ENOSPC, EIO) and could not be
      removed. It is deleted - otherwise it would become the active segment
      (hiding the records after its base offset) or shadow the offsets of
      the segment before it. Kafka creates a segment only at the log end
      too, and its loader trusts the segment list; pylog checks it because it
      keeps appending after a failed roll where Kafka takes the log
      directory offline. The same holds for an empty **last** segment past a
      gap whose base offset is above the durable ``recovery_point``: a roll
      makes the recovery point its new base before it returns, so that
      segment's roll never completed - the leftover of a failed roll whose
      offsets a later truncation moved the log end below. (An empty last
      segment after a deleted middle segment has its base at or below the
      recovery point: the hole is reported);
    * a segment that ends below the next segment's base offset (offsets
      ``[end, next base)`` at or above ``log_start`` are missing: a deleted,
      emptied or cut middle ``.log``) is corruption in a log that is not
      compacted: :class:`CorruptRecordError` naming both files and the
      missing offsets, unless ``repair``, which truncates the log there
      (every later segment deleted, recorded in ``result``) as recovery does
      after a torn write. A compacted log has such gaps by design (Kafka):
      they are accepted;
    * a non-empty segment starting below the end of the one before it
      (overlapping offsets) is corruption the same way.

    Reading the end of each segment loads its indexes (``ensure_indexes``),
    rebuilding an invalid one; a segment followed by segments holding data
    is then never cut silently (:meth:`LogSegment.ensure_indexes`).
    Complexity: O(segments + index bytes), plus a scan of each segment whose
    index is invalid. Changes no file unless it deletes an abandoned segment
    or ``repair``.
    """
    bases = list(segments.keys())
    sizes = [segments[b].size for b in bases]
    # index of the last segment holding bytes: the segments after i are all empty iff i >= it
    last_with_data = max((i for i, s in enumerate(sizes) if s), default=-1)
    prev_end: Optional[int] = None
    prev_seg: Optional[LogSegment] = None
    for i, base in enumerate(bases):
        seg = segments[base]
        empty = sizes[i] == 0
        if empty and (
            (prev_end is not None and base < prev_end)
            or (i + 1 < len(bases) and bases[i + 1] <= log_start)
            or (i + 1 == len(bases) and prev_end is not None and base > prev_end and base > recovery_point)
        ):
            segments.pop(base)
            seg.delete()
            result.abandoned_segments.append(base)
            log.warning("%s: deleted the empty segment %s, left by a roll that failed (it never held a record: its "
                        "offsets belong to the segment before it, lie below the log start %d, or its roll never "
                        "reached the recovery point %d)", result.path, seg.log_path, log_start, recovery_point)
            continue
        if prev_end is not None and prev_seg is not None:
            problem = ""
            if base < prev_end and not empty:
                problem = (f"segment {seg.log_path} starts at offset {base} but {prev_seg.log_path} "
                           f"already holds offsets up to {prev_end - 1} (overlapping segments)")
            elif base > prev_end and not compacted and base > log_start:
                lo = max(prev_end, log_start)
                problem = (f"offsets {lo}..{base - 1} are missing: {prev_seg.log_path} ends at offset "
                           f"{prev_end} but the next segment {seg.log_path} starts at {base} "
                           f"(a deleted, emptied or cut segment)")
            if problem:
                later = [b for b in bases[i:] if b in segments]
                if not repair:
                    raise CorruptRecordError(
                        f"{problem}. Restore the file, or open with repair=True (pylog verify --repair) to "
                        f"truncate the log at offset {min(prev_end, base)}, deleting segments {later}",
                        path=prev_seg.log_path,
                    )
                for b in later:
                    doomed = segments.pop(b)
                    result.bytes_truncated += doomed.size
                    doomed.delete()
                    result.segments_deleted.append(b)
                result.truncated_at.append(f"{prev_seg.log_path}@end: {problem}")
                log.warning("repaired %s: %s; deleted segments %s", result.path, problem, later)
                return
        tail = i >= last_with_data  # (was all(s == 0 for s in sizes[i + 1:]): quadratic in segments)
        seg.ensure_indexes(truncate_damage=tail or repair)
        prev_end = base if empty else seg.next_offset()
        prev_seg = seg
