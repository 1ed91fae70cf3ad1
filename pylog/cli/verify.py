"""``pylog verify DIR``: CRC-check every batch and validate every index; ``--repair`` truncates as recovery does.

Durability: ``--repair`` truncates through :class:`pylog.Log` recovery (fsynced before it returns).
Thread-safety: a command-line entry point; one thread.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from pylog.cli.common import base_offset_of, error, partition_dirs_of, segment_logs
from pylog.cli.progress import Progress
from pylog.errors import CorruptRecordError, LogDirLockedError, PylogError
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO
from pylog.storage.index import OffsetIndex, TimeIndex
from pylog.storage.log import Log
from pylog.storage.logdir import CLEAN_SHUTDOWN_FILE, LOCK_FILE, RECOVERY_POINT_FILE, list_log_dirs, parse_partition_dir
from pylog.record import scan


def verify_partition(part_dir: str, progress: Progress, totals: Dict[str, int]) -> List[Tuple[str, int, int, str]]:
    """CRC-check every batch and validate every index of one partition; return the problems."""
    problems: List[Tuple[str, int, int, str]] = []
    damaged_from: Optional[int] = None
    # Holes between segments (a deleted, emptied or cut middle .log): the offsets after one
    # segment's last batch up to the next segment's base offset. A compacted log has such gaps
    # by design; a log whose segments show gaps inside them is taken to be one.
    holes: List[Tuple[str, int, int, str]] = []
    compacted = False
    prev: Optional[Tuple[str, int, int]] = None  # (file, offset after its last batch, its size)
    logs = segment_logs(part_dir)
    for i, log_path in enumerate(logs):
        with open(log_path, "rb") as f:
            data = f.read()
        totals["segments"] += 1
        result = scan(data, verify_crc=True)
        totals["batches"] += len(result.batches)
        totals["records"] += sum(b.records_count for b in result.batches)
        totals["bytes"] += len(data)
        base = base_offset_of(log_path)
        compacted = compacted or any(a.last_offset + 1 != b.base_offset for a, b in zip(result.batches, result.batches[1:]))
        end = result.batches[-1].last_offset + 1 if result.batches else base
        if prev is not None and not data and base < prev[1]:
            pass  # an empty leftover of a failed roll inside the previous segment's offsets: the open deletes it
        else:
            if prev is not None and base > prev[1]:
                holes.append((prev[0], prev[2], sum(os.path.getsize(x) for x in logs[i:]),
                              f"offsets {prev[1]}..{base - 1} are missing before {os.path.basename(log_path)} "
                              f"(a deleted, emptied or cut segment: opening the log refuses; --repair truncates "
                              f"it at offset {prev[1]}, deleting every later segment)"))
            prev = (log_path, end, len(data))
        if damaged_from is not None:
            problems.append((log_path, 0, len(data), "follows a damaged segment (opening refuses; --repair deletes it)"))
        elif not result.ok:
            damaged_from = result.valid_bytes
            problems.append((log_path, result.valid_bytes, len(data) - result.valid_bytes, result.reason))
        for ext, cls in ((".index", OffsetIndex), (".timeindex", TimeIndex)):
            ipath = log_path[:-4] + ext
            if not os.path.exists(ipath):
                continue
            idx = cls(FileIO(), ipath, base_offset_of(ipath), read_only=True)
            try:
                idx.load(len(data))
            except CorruptRecordError as exc:
                problems.append((ipath, 0, 0, f"index fails validation ({exc}); recovery rebuilds it"))
        progress.advance(len(data), os.path.basename(part_dir))
    if not compacted:
        problems += holes
    return problems


def _repair_partition(part_dir: str) -> str:
    """Run Kafka-style recovery on one partition: force a scan from the damaged segment on."""
    log_dir = os.path.dirname(os.path.abspath(part_dir))
    tp = parse_partition_dir(part_dir)
    assert tp is not None
    # Recovery scans from the recovery point and only after an unclean shutdown:
    # lower the point to the first damaged segment and drop the clean marker.
    first_bad: Optional[int] = None
    for log_path in segment_logs(part_dir):
        with open(log_path, "rb") as f:
            if not scan(f.read(), verify_crc=True).ok:
                first_bad = base_offset_of(log_path)
                break
    # Hold the writer's lock (the same fcntl record lock LogDir takes) before
    # changing anything. Record locks belong to the process, so Log.open below
    # shares it; this descriptor is closed only after the log is closed,
    # because closing it would drop the process's lock.
    lock_fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise LogDirLockedError(f"log directory {log_dir} is locked by a running writer; stop it first") from None
        return _recover_locked(part_dir, log_dir, tp, first_bad)
    finally:
        os.close(lock_fd)


def _recover_locked(part_dir: str, log_dir: str, tp: Tuple[str, int], first_bad: Optional[int]) -> str:
    io = FileIO()
    rp_path = os.path.join(log_dir, RECOVERY_POINT_FILE)
    if first_bad is not None:
        try:
            points = checkpoint.read_offsets(io, rp_path)
        except CorruptRecordError:
            points = {}
        points[tp] = min(points.get(tp, first_bad), first_bad)
        checkpoint.write_offsets(io, rp_path, points)
    marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
    if os.path.exists(marker):
        os.unlink(marker)
    log = Log.open(part_dir, repair=True)  # truncate at a hole or damage (the user asked: --repair)
    try:
        for seg in log.segments.values():
            seg.ensure_indexes()  # rebuilds an invalid index
        rec = log.recovery
        note = f"{part_dir}: recovered, log end offset {log.log_end_offset}"
        if rec is not None and rec.truncated:
            note += f", truncated {rec.bytes_truncated} bytes at {'; '.join(rec.truncated_at)}"
    finally:
        log.close()
    return note


def cmd_verify(args: argparse.Namespace) -> int:
    root = args.dir
    if not os.path.isdir(root):
        error(f"{root}: not a directory")
        return 1
    parts = [p for _, d in list_log_dirs(root) for p in partition_dirs_of(d)]
    total = sum(os.path.getsize(s) for p in parts for s in segment_logs(p))
    progress = Progress(total, args.progress or sys.stderr.isatty())
    totals = {"partitions": len(parts), "segments": 0, "batches": 0, "records": 0, "bytes": 0}
    damaged: Dict[str, List[Tuple[str, int, int, str]]] = {}
    for p in parts:
        try:
            probs = verify_partition(p, progress, totals)
        except (OSError, PylogError) as exc:
            probs = [(p, 0, 0, str(exc))]
        if probs:
            damaged[p] = probs
    progress.finish()
    n_problems = sum(len(v) for v in damaged.values())
    for probs in damaged.values():
        for file, pos, nbytes, reason in probs:
            print(f"PROBLEM {file} at byte position {pos}: {reason} ({nbytes} bytes would be dropped)")
    print(
        f"partitions: {totals['partitions']} segments: {totals['segments']} batches: {totals['batches']} "
        f"records: {totals['records']} bytes: {totals['bytes']} problems: {n_problems}"
    )
    if not damaged:
        return 0
    if not args.repair:
        return 1
    print("Repair will drop:")
    for probs in damaged.values():
        for file, pos, nbytes, reason in probs:
            print(f"  {file} from byte position {pos}: {nbytes} bytes ({reason})")
    if not args.yes:
        sys.stdout.flush()
        sys.stderr.write("Proceed? [y/N] ")
        sys.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            print("Not repaired.")
            return 1
    failed = False
    for p in damaged:
        try:
            print(_repair_partition(p))
        except (OSError, PylogError) as exc:
            error(f"{p}: repair failed: {exc}")
            failed = True
    return 1 if failed else 0


def add_parser(sub: Any) -> None:
    """Register the ``verify`` verb on the ``pylog`` command's subparsers."""
    v = sub.add_parser("verify", help="CRC-check every batch and validate every index under DIR",
                       description="Walk a log dir (or a cluster dir with broker-*/), check every batch CRC and index; exit 1 on damage.")
    v.add_argument("dir", metavar="DIR")
    v.add_argument("--repair", action="store_true", help="truncate damaged partitions as recovery does (asks first)")
    v.add_argument("--yes", action="store_true", help="do not ask before repairing")
    v.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
