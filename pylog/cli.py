"""The ``pylog`` command: inspect, verify, repair and use log directories.

Verbs (each has ``--help``), modelled on Kafka's tools:

* ``dump-log FILE...`` - batches, records, index and time index entries (kafka-dump-log);
* ``verify DIR`` - CRC-check every batch and validate every index; ``--repair`` truncates as recovery does;
* ``describe DIR`` - offsets, sizes and epochs per partition; leader/replicas/ISR for a cluster dir;
* ``produce DIR --topic T`` / ``consume DIR --topic T`` - console producer and consumer;
* ``bench`` - runs ``benchmarks/compare.py`` from a checkout;
* ``sim`` - a seeded fault simulation of a cluster: each invariant's result, ``--plot`` draws the timeline.

Exit status: 0 when everything was valid, 1 when damage or an error was found,
2 for bad usage. Corrupt input yields an error line naming the file and byte
position, never a traceback. See docs/cli.md.

Thread-safety: a command-line entry point; not meant to be called concurrently.
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import struct
import subprocess
import sys
import time
from typing import IO, Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from pylog import _native
from pylog._version import __version__
from pylog.errors import CorruptRecordError, LogDirLockedError, PylogError
from pylog.storage import checkpoint
from pylog.storage.compression import NAMES as CODEC_NAMES
from pylog.storage.fileio import FileIO
from pylog.storage.index import OffsetIndex, TimeIndex
from pylog.storage.log import LEADER_EPOCH_CHECKPOINT, Log
from pylog.storage.logdir import CLEAN_SHUTDOWN_FILE, LOCK_FILE, RECOVERY_POINT_FILE, parse_partition_dir
from pylog.storage.record import Record, RecordBatch, scan

HW_CHECKPOINT_FILE = "replication-offset-checkpoint"  # replication.replica_manager's name (not imported: layering)
METADATA_FILE = "cluster-metadata.json"


# --------------------------------------------------------------------------- helpers


def _show_bytes(b: Optional[bytes]) -> str:
    """Bytes as UTF-8 text with escapes for what is not printable UTF-8; ``null`` for None."""
    if b is None:
        return "null"
    text = bytes(b).decode("utf-8", errors="backslashreplace")
    out = []
    for ch in text:
        if ch == "\\" or ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _base_offset_of(path: str) -> int:
    stem = os.path.basename(path).split(".", 1)[0]
    if not stem.isdigit():
        raise PylogError("not a segment file name (<20-digit base offset>.log/.index/.timeindex)")
    return int(stem)


def _error(msg: str) -> None:
    print(f"ERROR: {msg}", file=sys.stderr, flush=True)


class Progress:
    """A one-line progress bar on stderr with rate and ETA (only when enabled).

    ``total`` is the amount of work (bytes, records or offsets, named by
    ``unit``) or None when it is not known in advance (stdin): then the line
    shows the count and the rate only. Redrawn at most 10 times a second, so
    a tight loop pays one clock read per :meth:`advance`. No dependency
    (tqdm would do the same; the CLI keeps to the standard library).

    Thread-safety: one thread. Complexity: O(1) per :meth:`advance`.
    """

    def __init__(self, total: Optional[int], enabled: bool, stream: Optional[IO[str]] = None, unit: str = "B"):
        self.total = None if total is None else max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.unit = unit
        self._start = time.monotonic()
        self._drawn = 0.0

    @staticmethod
    def _human(n: float, unit: str) -> str:
        for prefix in ("", "k", "M", "G", "T"):
            if abs(n) < 1000 or prefix == "T":
                return f"{n:.0f} {prefix}{unit}" if prefix == "" else f"{n:.1f} {prefix}{unit}"
            n /= 1000.0
        return f"{n:.1f} {unit}"  # pragma: no cover

    def line(self, label: str = "") -> str:
        """The bar as it would be drawn now (without the carriage return)."""
        elapsed = max(time.monotonic() - self._start, 1e-6)
        rate = self.done / elapsed
        speed = f"{self._human(rate, self.unit)}/s"
        if self.total is None:
            return f"{self._human(self.done, self.unit)} {speed} {label[-40:]}"
        frac = min(1.0, self.done / self.total)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = "--:--" if left == float("inf") else f"{int(left) // 60}:{int(left) % 60:02d}"
        bar = "#" * int(frac * 30)
        return f"[{bar:<30}] {frac * 100:5.1f}% {speed} ETA {eta} {label[-40:]}"

    def advance(self, n: int, label: str = "") -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        finished = self.total is not None and self.done >= self.total
        if now - self._drawn < 0.1 and not finished:
            return
        self._drawn = now
        self.stream.write("\r" + f"{self.line(label):<100}")
        self.stream.flush()

    def finish(self, complete: bool = False) -> None:
        """End the line; ``complete``: all the work was done (e.g. stdin read to its end, whose byte
        count the caller only approximated)."""
        if complete and self.total is not None:
            self.done = self.total
        if self.enabled:
            self.stream.write("\r" + f"{self.line():<100}" + "\n")
            self.stream.flush()


def _progress_enabled(args: argparse.Namespace) -> bool:
    """The bar is drawn when stderr is a terminal, or with ``--progress``."""
    return bool(getattr(args, "progress", False)) or sys.stderr.isatty()


# --------------------------------------------------------------------------- dump-log


def _batch_line(b: RecordBatch, valid: bool) -> str:
    codec = CODEC_NAMES.get(b.compression, str(b.compression))
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
        f"baseSequence: {b.base_sequence} partitionLeaderEpoch: {b.partition_leader_epoch} "
        f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
        f"producerId: {b.producer_id} producerEpoch: {b.producer_epoch} position: {b.info.position} "
        f"CreateTime: {b.max_timestamp} size: {b.size_in_bytes} magic: {b.magic} "
        f"compresscodec: {codec} crc: {b.info.crc} isvalid: {str(valid).lower()}"
    )


def _record_line(r: Record, print_data: bool, skip_metadata: bool = False,
                 decoded: Optional[Tuple[str, str]] = None) -> str:
    """One ``| offset: ...`` line; ``decoded`` replaces the key and payload text (``--offsets-decoder``)."""
    key, payload = decoded if decoded is not None else (_show_bytes(r.key), _show_bytes(r.value))
    if skip_metadata:
        return f"key: {key} payload: {payload}"
    line = (
        f"| offset: {r.offset} {'LogAppendTime' if r.timestamp_type else 'CreateTime'}: {r.timestamp} "
        f"keySize: {-1 if r.key is None else len(r.key)} valueSize: {-1 if r.value is None else len(r.value)}"
    )
    if print_data:
        hdrs = ",".join(f"{k}:{_show_bytes(v)}" for k, v in r.headers)
        line += f" headerKeys: [{hdrs}] key: {key} payload: {payload}"
    return line


def decode_offsets_record(key: Optional[bytes], value: Optional[bytes]) -> Tuple[str, str]:
    """Key and value of a ``__consumer_offsets`` record as JSON text (kafka-dump-log's ``--offsets-decoder``).

    An offset commit key prints as ``{"type":"offset_commit","version":1,"group":G,"topic":T,"partition":P}``
    and its value as ``{"version":3,"offset":O,"leaderEpoch":E,"metadata":M,"commitTimestamp":T}``
    (``expireTimestamp`` too for version 1); a group metadata key as ``{"type":"group_metadata",...}`` and its
    value with the generation, protocol, leader and members (each member's subscribed topics and assigned
    partitions decoded). A null value (a tombstone: the offset or group was deleted) prints ``null``.
    Raises :class:`~pylog.errors.CorruptRecordError` naming what could not be decoded.
    Complexity: O(bytes of the record).
    """
    from pylog.replication import offsets_topic as ot

    if key is None:
        raise CorruptRecordError(f"{ot.OFFSETS_TOPIC} record without a key")
    k = ot.decode_key(key)
    kv = struct.unpack_from(">h", key)[0]
    if isinstance(k, ot.OffsetCommitKey):
        key_obj: Dict[str, Any] = {"type": "offset_commit", "version": kv, "group": k.group, "topic": k.topic,
                                   "partition": k.partition}
    else:
        key_obj = {"type": "group_metadata", "version": kv, "group": k.group}
    if value is None:
        return json.dumps(key_obj), "null"
    vv = struct.unpack_from(">h", value)[0] if len(value) >= 2 else -1
    if isinstance(k, ot.OffsetCommitKey):
        v = ot.decode_offset_commit_value(value)
        val_obj: Dict[str, Any] = {"version": vv, "offset": v.offset, "leaderEpoch": v.leader_epoch,
                                   "metadata": v.metadata, "commitTimestamp": v.commit_timestamp}
        if vv == 1:
            val_obj["expireTimestamp"] = v.expire_timestamp
    else:
        g = ot.decode_group_metadata_value(value)
        members = []
        for m in g.members:
            member: Dict[str, Any] = {"memberId": m.member_id, "groupInstanceId": m.group_instance_id,
                                      "clientId": m.client_id, "clientHost": m.client_host,
                                      "rebalanceTimeout": m.rebalance_timeout, "sessionTimeout": m.session_timeout}
            if g.protocol_type == "consumer":
                try:
                    member["subscription"] = ot.decode_subscription(m.subscription)[0] if m.subscription else []
                    member["assignment"] = [f"{t}-{p}" for t, p in ot.decode_assignment(m.assignment)] if m.assignment else []
                except CorruptRecordError as exc:
                    member["protocolError"] = str(exc)
            members.append(member)
        val_obj = {"version": vv, "protocolType": g.protocol_type, "generation": g.generation,
                   "protocol": g.protocol, "leader": g.leader, "currentStateTimestamp": g.current_state_timestamp,
                   "members": members}
    return json.dumps(key_obj), json.dumps(val_obj)


_LEGACY_OR_V2 = frozenset((0, 1, 2))


def _next_valid_batch(view: memoryview, start: int, magics: Any) -> Optional[int]:
    """The first position at or after ``start`` where a whole, CRC-valid batch begins, or None.

    Candidates are positions whose magic byte (byte 16 of a batch or legacy
    message) is one of ``magics``; each is checked by a one-batch scan with
    CRCs. Complexity: O(bytes) candidates, each O(batch size) at worst.
    """
    n = len(view)
    for pos in range(start, n - 17 + 1):
        if view[pos + 16] not in magics:
            continue
        r = scan(view[pos:], verify_crc=True, max_batches=1)
        if r.batches:
            return pos
    return None


def dump_log_file(path: str, out: IO[str], *, print_data: bool, deep: bool, offsets_decoder: bool = False,
                  skip_metadata: bool = False, progress: Optional[Progress] = None) -> bool:
    """Print every batch of a ``.log`` file; False (after error lines) on damage.

    Past a bad batch it goes on, as a reader of a damaged disk wants: when the
    bad batch's framing (its length) can still be read, it is printed with
    ``isvalid: false`` and the dump resumes right after it; otherwise the
    bytes are searched for the next position where a whole, CRC-valid batch
    starts, and the dump resumes there. Each skip is an ``ERROR`` line naming
    the byte positions; a damaged tail with no valid batch after it ends the
    file with one. Complexity: O(bytes) (plus O(records) with record output).
    """
    with open(path, "rb") as f:
        data = f.read()
    view = memoryview(data)
    ok = True
    pos = 0
    magics = set()
    with_records = deep or print_data or offsets_decoder or skip_metadata
    while pos < len(data):
        result = scan(view[pos:], verify_crc=True)
        for rel in result.batches:
            info = rel._replace(position=rel.position + pos)
            magics.add(info.magic)
            batch = RecordBatch(info, view[info.position : info.position + info.size], path)
            if not skip_metadata:
                out.write(_batch_line(batch, True) + "\n")
            if not with_records:
                continue
            try:
                for rec in batch.records():
                    decoded = None
                    if offsets_decoder and not batch.is_control:
                        try:
                            decoded = decode_offsets_record(rec.key, rec.value)
                        except (CorruptRecordError, struct.error) as exc:
                            _error(f"{path}: offset {rec.offset} (batch at byte position {info.position}) is not a "
                                   f"__consumer_offsets record: {exc}")
                            ok = False
                    out.write(_record_line(rec, print_data or offsets_decoder or skip_metadata, skip_metadata,
                                           decoded) + "\n")
            except PylogError as exc:
                _error(f"{path}: cannot decode records of the batch at byte position {info.position}: {exc}")
                ok = False
        if progress is not None:
            progress.advance(result.valid_bytes, os.path.basename(path))
        if result.status == _native.OK:
            break
        ok = False
        bad_at = pos + result.valid_bytes
        # Show the header of the bad batch when its framing holds (a CRC mismatch).
        bad = scan(view[bad_at:], verify_crc=False, max_batches=1)
        resume: Optional[int] = None
        if bad.batches:
            info = bad.batches[0]._replace(position=bad_at)
            out.write(_batch_line(RecordBatch(info, view[bad_at : bad_at + info.size], path), False) + "\n")
            resume = bad_at + info.size
            how = "its header is readable: resuming after it"
        else:
            resume = _next_valid_batch(view, bad_at + 1, magics or _LEGACY_OR_V2)
            how = "its header is not readable: resuming at the next valid batch"
        if resume is None or resume >= len(data):
            _error(
                f"{path}: {result.reason} at byte position {bad_at} "
                f"({len(data) - bad_at} bytes from there to the end of the file are not valid batches)"
            )
            if progress is not None:
                progress.advance(len(data) - bad_at)
            break
        _error(f"{path}: {result.reason} at byte position {bad_at}; {how}, byte position {resume} "
               f"({resume - bad_at} bytes skipped)")
        if progress is not None:
            progress.advance(resume - bad_at)
        pos = resume
    out.flush()
    return ok


def _log_size_for(index_path: str) -> int:
    log_path = index_path.rsplit(".", 1)[0] + ".log"
    try:
        return os.path.getsize(log_path)
    except OSError:
        return 2**31 - 1


def _batches_by_position(index_path: str) -> Optional[Dict[int, Tuple[int, int]]]:
    """``{position: (base_offset, last_offset)}`` of the segment's batches, None without a .log."""
    log_path = index_path.rsplit(".", 1)[0] + ".log"
    try:
        with open(log_path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    return {b.position: (b.base_offset, b.last_offset) for b in scan(data, verify_crc=False).batches}


def dump_index_file(path: str, out: IO[str]) -> bool:
    """Print the entries of an ``.index`` or ``.timeindex`` file; False when it fails validation."""
    base = _base_offset_of(path)
    is_time = path.endswith(".timeindex")
    idx = (TimeIndex if is_time else OffsetIndex)(FileIO(), path, base, read_only=True)
    ok = True
    try:
        idx.load(_log_size_for(path))
        data = bytes(idx.data)
    except CorruptRecordError as exc:
        _error(f"{path}: fails validation: {exc}")
        ok = False
        with open(path, "rb") as f:
            data = f.read()
    size = 12 if is_time else 8
    batch_at = _batches_by_position(path) if not is_time else None
    for i in range(len(data) // size):
        if is_time:
            ts, rel = struct.unpack_from(">qi", data, i * size)
            out.write(f"timestamp: {ts} offset: {base + rel}\n")
        else:
            rel, pos = struct.unpack_from(">ii", data, i * size)
            out.write(f"offset: {base + rel} position: {pos}\n")
            if batch_at is not None:
                span = batch_at.get(pos)
                if span is None or not span[0] <= base + rel <= span[1]:
                    found = "no batch starts there" if span is None else f"the batch there holds offsets {span[0]}..{span[1]}"
                    _error(f"{path}: index entry {i} (byte position {i * size}) maps offset {base + rel} "
                           f"to log position {pos}, but {found}")
                    ok = False
    if len(data) % size:
        _error(f"{path}: {len(data) % size} trailing bytes at byte position {len(data) - len(data) % size}")
        ok = False
    out.flush()
    return ok


def cmd_dump_log(args: argparse.Namespace) -> int:
    ok = True
    for path in args.files:
        print(f"Dumping {path}", flush=True)
        try:
            if not os.path.isfile(path):
                _error(f"{path}: no such file")
                ok = False
            elif path.endswith(".log"):
                progress = Progress(os.path.getsize(path), _progress_enabled(args))
                ok = dump_log_file(path, sys.stdout, print_data=args.print_data, deep=args.deep_iteration,
                                   offsets_decoder=args.offsets_decoder, skip_metadata=args.skip_record_metadata,
                                   progress=progress) and ok
                progress.finish()
            elif path.endswith((".index", ".timeindex")):
                ok = dump_index_file(path, sys.stdout) and ok
            else:
                _error(f"{path}: not a .log, .index or .timeindex file")
                ok = False
        except (OSError, PylogError) as exc:
            _error(f"{path}: {exc}")
            ok = False
    return 0 if ok else 1


# --------------------------------------------------------------------------- directory walking


def _log_dirs(root: str) -> List[str]:
    """The log directories under ``root``: its ``broker-*`` subdirectories, or ``root`` itself."""
    brokers = sorted(
        os.path.join(root, n) for n in os.listdir(root) if n.startswith("broker-") and os.path.isdir(os.path.join(root, n))
    )
    return brokers or [root]


def _partition_dirs(log_dir: str) -> List[str]:
    if parse_partition_dir(log_dir) is not None and any(n.endswith(".log") for n in os.listdir(log_dir)):
        return [log_dir]
    out = []
    for n in sorted(os.listdir(log_dir)):
        p = os.path.join(log_dir, n)
        if os.path.isdir(p) and parse_partition_dir(p) is not None:
            out.append(p)
    return out


def _segment_logs(part_dir: str) -> List[str]:
    return sorted(
        os.path.join(part_dir, n) for n in os.listdir(part_dir) if n.endswith(".log") and n[:-4].isdigit()
    )


# --------------------------------------------------------------------------- verify


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
    logs = _segment_logs(part_dir)
    for i, log_path in enumerate(logs):
        with open(log_path, "rb") as f:
            data = f.read()
        totals["segments"] += 1
        result = scan(data, verify_crc=True)
        totals["batches"] += len(result.batches)
        totals["records"] += sum(b.records_count for b in result.batches)
        totals["bytes"] += len(data)
        base = _base_offset_of(log_path)
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
        elif result.status != _native.OK:
            damaged_from = result.valid_bytes
            problems.append((log_path, result.valid_bytes, len(data) - result.valid_bytes, result.reason))
        for ext, cls in ((".index", OffsetIndex), (".timeindex", TimeIndex)):
            ipath = log_path[:-4] + ext
            if not os.path.exists(ipath):
                continue
            idx = cls(FileIO(), ipath, _base_offset_of(ipath), read_only=True)
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
    for log_path in _segment_logs(part_dir):
        with open(log_path, "rb") as f:
            if scan(f.read(), verify_crc=True).status != _native.OK:
                first_bad = _base_offset_of(log_path)
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
        _error(f"{root}: not a directory")
        return 1
    parts = [p for d in _log_dirs(root) for p in _partition_dirs(d)]
    total = sum(os.path.getsize(s) for p in parts for s in _segment_logs(p))
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
            _error(f"{p}: repair failed: {exc}")
            failed = True
    return 1 if failed else 0


# --------------------------------------------------------------------------- describe


def _read_offsets_quiet(path: str) -> Dict[Tuple[str, int], int]:
    try:
        return checkpoint.read_offsets(FileIO(), path)
    except (OSError, PylogError):
        return {}


def _is_internal(topic: str) -> bool:
    """Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``): names starting with ``__``."""
    return topic.startswith("__")


def _topic_filter(args: argparse.Namespace) -> Any:
    """``describe``'s choice of topics: ``--topic`` (repeatable) if given, else all but the internal ones
    unless ``--include-internal``. A topic named with ``--topic`` is shown even if internal."""
    wanted = set(args.topic or ())
    include_internal = bool(args.include_internal)

    def keep(topic: str) -> bool:
        if wanted:
            return topic in wanted
        return include_internal or not _is_internal(topic)

    return keep


def _describe_log_dir(log_dir: str, prefix: str = "", keep: Any = None, hidden: Optional[Dict[str, int]] = None
                      ) -> Iterator[str]:
    rps = _read_offsets_quiet(os.path.join(log_dir, RECOVERY_POINT_FILE))
    hws = _read_offsets_quiet(os.path.join(log_dir, HW_CHECKPOINT_FILE))
    for p in _partition_dirs(log_dir):
        tp = parse_partition_dir(p)
        assert tp is not None
        if keep is not None and not keep(tp[0]):
            if hidden is not None:
                hidden[tp[0]] = hidden.get(tp[0], 0) + 1
            continue
        try:
            log = Log.open(p, read_only=True)
        except (OSError, PylogError) as exc:
            yield f"{prefix}Topic: {tp[0]} Partition: {tp[1]} ERROR: {exc}"
            continue
        try:
            try:
                epochs = checkpoint.read_epochs(FileIO(), os.path.join(p, LEADER_EPOCH_CHECKPOINT))
                epoch = str(epochs[-1][0]) if epochs else "-1"
            except (OSError, PylogError):
                epoch = "unreadable"
            rp = rps.get(tp)
            hw = hws.get(tp)
            yield (
                f"{prefix}Topic: {tp[0]} Partition: {tp[1]} LogStartOffset: {log.log_start_offset} "
                f"LogEndOffset: {log.log_end_offset} Size: {log.size_in_bytes} Segments: {len(log.segments)} "
                f"LeaderEpoch: {epoch} RecoveryPoint: {'-' if rp is None else rp} "
                f"HighWatermark: {'-' if hw is None else hw}"
            )
        finally:
            log.close()


def cmd_describe(args: argparse.Namespace) -> int:
    """``pylog describe DIR``: see docs/cli.md. Internal topics are summarised in one line unless
    ``--include-internal`` (or ``--topic __consumer_offsets``) asks for them."""
    root = args.dir
    if not os.path.isdir(root):
        _error(f"{root}: not a directory")
        return 1
    keep = _topic_filter(args)
    hidden: Dict[str, int] = {}
    seen_topics = set()
    meta_path = os.path.join(root, METADATA_FILE)
    if os.path.exists(meta_path):
        try:
            from pylog.replication.controller import read_metadata_json

            meta = read_metadata_json(meta_path)  # the snapshot plus its delta log
            print(f"Cluster: {root} brokers: {meta.get('brokers')} controllerEpoch: {meta.get('controller_epoch')}")
            for st in sorted(meta.get("partitions", []), key=lambda s: (s["topic"], s["partition"])):
                seen_topics.add(st["topic"])
                if not keep(st["topic"]):
                    continue
                print(
                    f"Topic: {st['topic']} Partition: {st['partition']} Leader: {st['leader']} "
                    f"LeaderEpoch: {st['leader_epoch']} Replicas: {','.join(map(str, st['replicas']))} "
                    f"Isr: {','.join(map(str, st['isr']))}"
                )
        except (OSError, ValueError, KeyError, TypeError, AttributeError, PylogError) as exc:  # a damaged file
            _error(f"{meta_path}: cannot read cluster metadata: {type(exc).__name__}: {exc}")
            return 1
    dirs = _log_dirs(root)
    for d in dirs:
        prefix = f"Broker: {os.path.basename(d)[len('broker-'):]} " if d != root else ""
        for p in _partition_dirs(d):
            tp = parse_partition_dir(p)
            if tp is not None:
                seen_topics.add(tp[0])
        for line in _describe_log_dir(d, prefix, keep, hidden):
            print(line)
    missing = sorted(set(args.topic or ()) - seen_topics)
    if missing:
        _error(f"{root}: no such topic: {', '.join(missing)}")
        return 1
    try:
        for line in _group_lag_lines(root, dirs):
            if not args.topic or _lag_line_topic(line) in args.topic:
                print(line)
    except (OSError, PylogError) as exc:
        _error(f"{root}: cannot read consumer group offsets: {exc}")
        return 1
    if hidden:
        summary = ", ".join(f"{t} ({n} partition replicas)" for t, n in sorted(hidden.items()) if _is_internal(t))
        if summary:
            print(f"Internal topics not shown: {summary}; --include-internal shows them", file=sys.stderr)
    return 0


def _lag_line_topic(line: str) -> str:
    """The topic of a ``Group: G Topic: T Partition: P ...`` line."""
    return line.split(" Topic: ", 1)[1].split(" Partition: ", 1)[0]


def _leaders(root: str) -> Dict[Tuple[str, int], int]:
    """``{(topic, partition): leader}`` from a cluster dir's metadata ({} when absent or unreadable)."""
    try:
        from pylog.replication.controller import read_metadata_json

        meta = read_metadata_json(os.path.join(root, METADATA_FILE))  # the snapshot plus its delta log
        return {(st["topic"], st["partition"]): st["leader"] for st in meta.get("partitions", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, PylogError):
        return {}


def _replica_views(dirs: List[str]) -> Dict[Tuple[str, int], List[Tuple[Optional[int], str, Optional[int]]]]:
    """``{tp: [(broker id or None, partition dir, checkpointed HW or None)]}`` over the log dirs."""
    out: Dict[Tuple[str, int], List[Tuple[Optional[int], str, Optional[int]]]] = {}
    for d in dirs:
        name = os.path.basename(d)
        broker = int(name[len("broker-"):]) if name.startswith("broker-") and name[len("broker-"):].isdigit() else None
        hws = _read_offsets_quiet(os.path.join(d, HW_CHECKPOINT_FILE))
        for p in _partition_dirs(d):
            tp = parse_partition_dir(p)
            assert tp is not None
            out.setdefault(tp, []).append((broker, p, hws.get(tp)))
    return out


def _pick_replica(views: List[Tuple[Optional[int], str, Optional[int]]], leader: Optional[int]) -> Tuple[str, Optional[int]]:
    """The leader's copy of a partition when known, else the copy with the highest checkpointed HW."""
    for broker, p, hw in views:
        if leader is not None and broker == leader:
            return p, hw
    broker, p, hw = max(views, key=lambda v: (v[2] if v[2] is not None else -1, v[1]))
    return p, hw


def _group_lag_lines(root: str, dirs: List[str]) -> Iterator[str]:
    """One line per committed (group, topic, partition): committed offset, log end (the HW) and lag.

    Committed offsets are replayed from ``__consumer_offsets`` as a coordinator
    loading the partition does (the latest commit per key wins; a null value, a
    tombstone, deletes it), from the leader's copy of each offsets partition.
    The log end is the leader's checkpointed high watermark (Kafka's
    LOG-END-OFFSET for a read_uncommitted consumer), else its log end offset.
    """
    from pylog.replication.offsets_topic import OFFSETS_TOPIC, OffsetCommitKey, decode_key, decode_offset_commit_value

    views = _replica_views(dirs)
    leaders = _leaders(root)
    commits: Dict[Tuple[str, str, int], int] = {}
    for tp in sorted(t for t in views if t[0] == OFFSETS_TOPIC):
        path, hw = _pick_replica(views[tp], leaders.get(tp))
        log = Log.open(path, read_only=True)
        try:
            end = log.log_end_offset if hw is None else min(hw, log.log_end_offset)
            offset = log.log_start_offset
            while offset < end:
                got = False
                for rec in log.read(offset, max_offset=end):
                    got = True
                    offset = rec.offset + 1
                    if rec.key is None:
                        continue
                    try:
                        key = decode_key(rec.key)
                        if not isinstance(key, OffsetCommitKey):
                            continue
                        gtp = (key.group, key.topic, key.partition)
                        if rec.value is None:
                            commits.pop(gtp, None)
                        else:
                            commits[gtp] = decode_offset_commit_value(rec.value).offset
                    except CorruptRecordError as exc:
                        raise CorruptRecordError(f"{path} offset {rec.offset}: {exc}") from None
                if not got:
                    break
        finally:
            log.close()
    for (group, topic, partition), committed in sorted(commits.items()):
        tp_views = views.get((topic, partition))
        if not tp_views:
            yield (f"Group: {group} Topic: {topic} Partition: {partition} CommittedOffset: {committed} "
                   f"LogEndOffset: - Lag: -")
            continue
        path, hw = _pick_replica(tp_views, leaders.get((topic, partition)))
        if hw is None:
            log = Log.open(path, read_only=True)
            try:
                hw = log.log_end_offset
            finally:
                log.close()
        yield (f"Group: {group} Topic: {topic} Partition: {partition} CommittedOffset: {committed} "
               f"LogEndOffset: {hw} Lag: {max(0, hw - committed)}")


# --------------------------------------------------------------------------- produce / consume


def _is_queue_dir(path: str) -> bool:
    """A directory made by ``pylog.open`` / ``Cluster`` (rather than one broker's log directory)."""
    return os.path.isfile(os.path.join(path, "cluster-metadata.json"))


PRODUCER_PROPERTIES = {"parse.key": "false", "key.separator": "\t"}
CONSUMER_PROPERTIES = {"print.timestamp": "false", "print.key": "false", "print.value": "true",
                       "print.offset": "false", "print.partition": "false", "print.headers": "false",
                       "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
                       "null.literal": "null"}
_BOOLEAN_PROPERTIES = {"parse.key", "print.timestamp", "print.key", "print.value", "print.offset",
                       "print.partition", "print.headers"}


def parse_properties(items: Sequence[str], known: Dict[str, str], verb: str) -> Dict[str, str]:
    """``--property NAME=VALUE`` arguments (kafka-console-producer/consumer's) over the defaults in ``known``.

    Separator values take ``\\t``, ``\\n`` and ``\\\\`` escapes (a shell passes ``"\\t"`` as two
    characters). Raises :class:`~pylog.errors.InvalidConfigurationError` for an item without ``=``, an
    unknown name (the message lists the known ones) or a boolean that is not true/false.
    """
    from pylog.errors import InvalidConfigurationError

    props = dict(known)
    for item in items:
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq:
            raise InvalidConfigurationError(f"--property {item!r}: expected NAME=VALUE")
        if name not in known:
            raise InvalidConfigurationError(
                f"--property {name!r} is not a {verb} property; known: {', '.join(sorted(known))}")
        if name in _BOOLEAN_PROPERTIES:
            if value.strip().lower() not in ("true", "false"):
                raise InvalidConfigurationError(f"--property {name}={value!r}: expected true or false")
            value = value.strip().lower()
        else:
            value = value.replace("\\\\", "\0").replace("\\t", "\t").replace("\\n", "\n").replace("\0", "\\")
        props[name] = value
    return props


def _stdin_records(sep: Optional[bytes]) -> Iterator[Record]:
    """Records from stdin lines; with ``sep`` the key is what comes before its first occurrence (a line
    without it has a null key, as kafka-console-producer's ``parse.key`` would refuse: we keep the line)."""
    for raw in sys.stdin.buffer:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        key = None
        if sep is not None and sep in line:
            key, line = line.split(sep, 1)
        yield Record(line, key=key)


def _stdin_progress(args: argparse.Namespace) -> Progress:
    """A bar over stdin's bytes when stdin is a regular file (``< file``), else a count with a rate."""
    try:
        st = os.fstat(sys.stdin.fileno())
        import stat

        total = st.st_size if stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError, AttributeError):
        total = None
    return Progress(total, _progress_enabled(args), unit="B" if total is not None else " records")


def _open_queue(path: str) -> Optional[object]:
    """``pylog.open(path)`` (a client of the running owner, or the owner), or None after printing why not."""
    from pylog.local_queue import open as open_queue

    try:
        return open_queue(path)
    except (OSError, PylogError) as exc:
        _error(f"{path}: {exc}")
        return None


def _produce_separator(args: argparse.Namespace) -> Tuple[Optional[bytes], Dict[str, str]]:
    """The key separator (None: values only) from ``--key-separator`` or ``--property parse.key=true``."""
    props = parse_properties(args.property or (), PRODUCER_PROPERTIES, "producer")
    if args.key_separator is not None:
        return args.key_separator.encode(), props
    if props["parse.key"] == "true":
        if not props["key.separator"]:
            from pylog.errors import InvalidConfigurationError

            raise InvalidConfigurationError("--property key.separator must not be empty")
        return props["key.separator"].encode(), props
    return None, props


def _where(partitions: Dict[int, List[int]], topic: str) -> str:
    """``t-0 (offsets 0..4), t-1 (offsets 0..2)``."""
    return ", ".join(f"{topic}-{p} (offsets {o[0]}..{o[-1]})" if o else f"{topic}-{p}"
                     for p, o in sorted(partitions.items()))


def _produce_to_queue(args: argparse.Namespace, sep: Optional[bytes]) -> int:
    """``pylog produce`` on a queue directory: a producer of ``pylog.open(DIR)`` (its partitioner picks
    the partition from the key unless ``--partition`` is given)."""
    q: Any = _open_queue(args.dir)
    if q is None:
        return 1
    n = 0
    done: Dict[int, List[int]] = {}
    progress = _stdin_progress(args)
    try:
        with q.producer(acks=args.acks if args.acks == "all" else int(args.acks)) as prod:
            futures = []
            for r in _stdin_records(sep):
                futures.append(prod.send(args.topic, r.value, key=r.key, partition=args.partition))
                progress.advance(len(r.value or b"") + len(r.key or b"") + 1 if progress.unit == "B" else 1)
            prod.flush()
            for f in futures:
                meta = f.result()
                done.setdefault(meta.partition, [])
                if args.acks != "0":
                    done[meta.partition].append(meta.offset)
            n = len(futures)
    except (OSError, PylogError) as exc:
        progress.finish()
        where = args.topic if args.partition is None else f"{args.topic}-{args.partition}"
        _error(f"{args.dir}: {where}: {exc}")
        return 1
    finally:
        q.close()
    progress.finish(complete=True)
    print(f"Produced {n} records to {_where(done, args.topic) or args.topic}", file=sys.stderr)
    return 0


def _topic_partitions(log_dir: str, topic: str) -> List[int]:
    """Partition numbers of ``topic`` in a log directory (its ``<topic>-<n>`` folders), sorted."""
    out = []
    try:
        names = os.listdir(log_dir)
    except OSError:
        return []
    for n in names:
        tp = parse_partition_dir(os.path.join(log_dir, n))
        if tp is not None and tp[0] == topic and os.path.isdir(os.path.join(log_dir, n)):
            out.append(tp[1])
    return sorted(out)


def cmd_produce(args: argparse.Namespace) -> int:
    """``pylog produce DIR --topic T``: stdin lines as records (see docs/cli.md).

    Without ``--partition`` a keyed record goes to murmur2(key) mod the partition count, as the producer's
    default partitioner does; records without a key fill one batch per partition in turn.
    """
    try:
        sep, _props = _produce_separator(args)
    except PylogError as exc:
        _error(str(exc))
        return 2
    if _is_queue_dir(args.dir):
        return _produce_to_queue(args, sep)
    from pylog.client.partitioner import partition_for_key

    if args.partition is not None:
        partitions = [args.partition]
    else:
        partitions = _topic_partitions(args.dir, args.topic) or [0]
    logs: Dict[int, Log] = {}
    done: Dict[int, List[int]] = {}
    n = 0
    progress = _stdin_progress(args)

    def log_for(p: int) -> Log:
        if p not in logs:
            logs[p] = Log.open(os.path.join(args.dir, f"{args.topic}-{p}"))
        return logs[p]

    try:
        pending: Dict[int, List[Record]] = {}
        sticky = 0

        def flush(p: int) -> None:
            recs = pending.pop(p, [])
            if recs:
                res = log_for(p).append(recs)
                done.setdefault(p, []).extend((res.base_offset, res.last_offset))

        for rec in _stdin_records(sep):
            if args.partition is not None:
                p = args.partition
            elif rec.key is not None:
                p = partitions[partition_for_key(rec.key, len(partitions))]  # the producer's murmur2
            else:
                p = partitions[sticky % len(partitions)]
            pending.setdefault(p, []).append(rec)
            n += 1
            progress.advance(len(rec.value or b"") + len(rec.key or b"") + 1 if progress.unit == "B" else 1)
            if len(pending[p]) >= args.batch_size:
                flush(p)
                if rec.key is None:
                    sticky += 1
        for p in list(pending):
            flush(p)
        for log in logs.values():
            log.flush()
    except (OSError, PylogError) as exc:
        progress.finish()
        _error(f"{args.dir}: {args.topic}: {exc}")
        return 1
    finally:
        for log in logs.values():
            log.close()
    progress.finish(complete=True)
    where = {p: [o[0], o[-1]] for p, o in done.items()}
    print(f"Produced {n} records to {_where(where, args.topic) or args.topic}", file=sys.stderr)
    return 0


class RecordFormatter:
    """kafka-console-consumer's ``DefaultMessageFormatter``: ``[CreateTime:T<sep>][Partition:P<sep>]
    [Offset:O<sep>][headers<sep>][key<sep>]value<line.separator>`` as the ``print.*`` properties ask.

    Headers print as ``k:v`` joined by ``headers.separator`` (``NO_HEADERS`` when there are none); a null
    key, value or header value prints ``null.literal``. Thread-safety: immutable. Complexity: O(record).
    """

    def __init__(self, props: Dict[str, str]):
        self.p = {k: (v == "true") for k, v in props.items() if k in _BOOLEAN_PROPERTIES}
        self.sep = props["key.separator"].encode()
        self.line = props["line.separator"].encode()
        self.hsep = props["headers.separator"].encode()
        self.null = props["null.literal"].encode()

    def format(self, rec: Any) -> bytes:
        out = []
        if self.p["print.timestamp"]:
            kind = "LogAppendTime" if getattr(rec, "timestamp_type", 0) else "CreateTime"
            out.append(f"{kind}:{rec.timestamp}".encode() if rec.timestamp >= 0 else b"NO_TIMESTAMP")
            out.append(self.sep)
        if self.p["print.partition"]:
            out += [b"Partition:%d" % rec.partition, self.sep]
        if self.p["print.offset"]:
            out += [b"Offset:%d" % rec.offset, self.sep]
        if self.p["print.headers"]:
            hs = [k.encode() + b":" + (self.null if v is None else bytes(v)) for k, v in rec.headers]
            out += [self.hsep.join(hs) if hs else b"NO_HEADERS", self.sep]
        if self.p["print.key"]:
            out += [self.null if rec.key is None else bytes(rec.key), self.sep]
        if self.p["print.value"]:
            out.append(self.null if rec.value is None else bytes(rec.value))
        out.append(self.line)
        return b"".join(out)


class _PartitionRecord(NamedTuple):
    """A log record with its partition (the formatter prints ``Partition:``)."""

    partition: int
    offset: int
    timestamp: Optional[int]  # as Record's (a record read from a log always has one)
    timestamp_type: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Sequence[Tuple[str, Optional[bytes]]]


def _consume_props(args: argparse.Namespace) -> Dict[str, str]:
    props = parse_properties(args.property or (), CONSUMER_PROPERTIES, "consumer")
    if args.print_key:
        props["print.key"] = "true"
    if args.key_separator is not None:
        props["key.separator"] = args.key_separator
    return props


def _check_consume_args(args: argparse.Namespace) -> Optional[str]:
    if args.offset is not None and args.partition is None:
        return "--offset needs --partition (as kafka-console-consumer)"
    if args.group is not None and (args.offset is not None or args.partition is not None):
        return "--group reads the group's assignment: it takes neither --partition nor --offset"
    return None


def _consume_from_queue(args: argparse.Namespace, fmt: RecordFormatter) -> int:
    """``pylog consume`` on a queue directory: a consumer of ``pylog.open(DIR)``.

    With ``--group``: subscribe as that group, start at its committed offset
    (else the beginning with ``--from-beginning``, else the end), and commit
    what was printed. Without: read ``--partition`` (default every partition
    of the topic) from ``--offset`` / ``--from-beginning`` / the end. Stops at
    ``--max-messages``, ``--to-offset``, or after ``--timeout-ms`` without a
    record (1000 ms by default; with ``--follow`` only when given).
    """
    out = sys.stdout.buffer
    q: Any = _open_queue(args.dir)
    if q is None:
        return 1
    n = 0
    idle_ms = args.timeout_ms if args.timeout_ms is not None else (None if args.follow else 1000)
    try:
        reset = "earliest" if args.from_beginning else "latest"
        if args.group is not None:
            cons = q.consumer(args.group, [args.topic], auto_offset_reset=reset, enable_auto_commit=False)
        else:
            cons = q.consumer(None, auto_offset_reset=reset)
            parts = [args.partition] if args.partition is not None else [r.partition for r in q.describe(args.topic)]
            cons.assign([(args.topic, p) for p in parts])
            if args.offset is not None:
                cons.seek(args.topic, args.partition, args.offset)
        consumed: Dict[Tuple[str, int], int] = {}
        done = False
        idle = 0.0
        while not done:
            recs = cons.poll(timeout=0.5 if idle_ms is None else min(0.5, idle_ms / 1000.0))
            if not recs:
                idle += 0.5 if idle_ms is None else min(0.5, idle_ms / 1000.0)
                if idle_ms is not None and idle * 1000 >= idle_ms:
                    break
                continue
            idle = 0.0
            for rec in recs:
                if args.to_offset is not None and rec.offset >= args.to_offset:
                    if args.partition is not None or args.group is not None:
                        done = True
                        break
                    continue  # every partition stops at --to-offset; the others may still be below it
                out.write(fmt.format(rec))
                consumed[(rec.topic, rec.partition)] = rec.offset + 1
                n += 1
                if args.max_messages is not None and n >= args.max_messages:
                    done = True
                    break
            out.flush()
        out.flush()
        if args.group is not None and consumed:
            cons.commit(consumed)  # exactly what was printed (at-least-once for the rest)
        cons.close()
    except (OSError, PylogError) as exc:
        out.flush()
        _error(f"{args.dir}: {args.topic}: {exc}")
        return 1
    finally:
        q.close()
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    """``pylog consume DIR --topic T``: print records (see docs/cli.md)."""
    problem = _check_consume_args(args)
    if problem:
        _error(problem)
        return 2
    try:
        fmt = RecordFormatter(_consume_props(args))
    except PylogError as exc:
        _error(str(exc))
        return 2
    if _is_queue_dir(args.dir):
        return _consume_from_queue(args, fmt)
    if args.group is not None:
        _error(f"{args.dir}: --group needs a queue/cluster directory (made by pylog.open), not a log directory")
        return 2
    parts = [args.partition] if args.partition is not None else _topic_partitions(args.dir, args.topic)
    if not parts:
        _error(f"{args.dir}: no partition of topic {args.topic!r} ({args.topic}-<N>/) here")
        return 1
    out = sys.stdout.buffer
    n = 0
    total = 0
    positions: Dict[int, int] = {}
    # Starting positions: --offset, the log start (--from-beginning), or the end (only new records).
    for p in parts:
        path = os.path.join(args.dir, f"{args.topic}-{p}")
        try:
            with Log.open(path, read_only=True) as log:
                if args.offset is not None:
                    start = args.offset
                elif args.from_beginning:
                    start = log.log_start_offset
                else:
                    start = log.log_end_offset  # like kafka-console-consumer: only new records
                if start < log.log_start_offset or start > log.log_end_offset:
                    _error(f"offset {start} is outside [{log.log_start_offset}, {log.log_end_offset}] of {path}")
                    return 1
                positions[p] = start
                end = log.log_end_offset if args.to_offset is None else min(args.to_offset, log.log_end_offset)
                total += max(0, end - start)
        except (OSError, PylogError) as exc:
            _error(f"{path}: {exc}")
            return 1
    idle_ms = args.timeout_ms
    idle = 0.0
    if args.max_messages is not None:
        total = min(total, args.max_messages)
    progress = Progress(total, _progress_enabled(args) and not args.follow, unit=" records")
    try:
        while True:
            got_any = False
            for p in parts:
                path = os.path.join(args.dir, f"{args.topic}-{p}")
                # Reopened each round: a writer in another process may have appended (and rolled segments).
                with Log.open(path, read_only=True) as log:
                    end = log.log_end_offset if args.to_offset is None else min(args.to_offset, log.log_end_offset)
                    offset = positions[p]
                    if offset < log.log_start_offset:  # retention deleted what was not read yet
                        offset = log.log_start_offset
                    while offset < end and (args.max_messages is None or n < args.max_messages):
                        got = False
                        for rec in log.read(offset, max_offset=end):
                            if rec.offset >= end:
                                break
                            got = got_any = True
                            out.write(fmt.format(_PartitionRecord(p, rec.offset, rec.timestamp, rec.timestamp_type,
                                                                  rec.key, rec.value, rec.headers)))
                            n += 1
                            progress.advance(1, f"{args.topic}-{p}")
                            offset = rec.offset + 1
                            if args.max_messages is not None and n >= args.max_messages:
                                break
                        if not got:
                            break
                    positions[p] = offset
            out.flush()
            if args.max_messages is not None and n >= args.max_messages:
                break
            if args.to_offset is not None and all(positions[p] >= args.to_offset for p in parts):
                break
            if not args.follow:
                break
            if got_any:
                idle = 0.0
                continue
            time.sleep(0.2)
            idle += 0.2
            if idle_ms is not None and idle * 1000 >= idle_ms:
                break
    except (OSError, PylogError) as exc:
        out.flush()
        progress.finish()
        _error(f"{args.dir}: {args.topic}: {exc}")
        return 1
    out.flush()
    progress.finish()
    print(f"Processed a total of {n} messages", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace, extra: Sequence[str]) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(here, "benchmarks", "compare.py")
    if not os.path.exists(script):
        _error(
            f"{script} not found: `pylog bench` needs a source checkout of pylog "
            "(benchmarks/ is not part of an installed package)"
        )
        return 1
    return subprocess.call([sys.executable, script, *extra])


# --------------------------------------------------------------------------- sim


MAX_PLOTTED_PARTITIONS = 8


def _duration_ms(text: str) -> int:
    """``60s``, ``1500ms``, ``2m`` or a bare number of seconds, as milliseconds."""
    t = text.strip().lower()
    try:
        if t.endswith("ms"):
            ms = float(t[:-2])
        elif t.endswith("s"):
            ms = float(t[:-1]) * 1000
        elif t.endswith("m"):
            ms = float(t[:-1]) * 60_000
        else:
            ms = float(t) * 1000
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 60s, 1500ms, 2m)") from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"duration must be positive, got {text!r}")
    return int(ms)


def _rate(text: str) -> float:
    try:
        r = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a probability: {text!r}") from None
    if not 0.0 <= r <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is a probability per step in [0, 1], got {text!r}")
    return r


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return n


def _sim_replay(args: argparse.Namespace) -> str:
    parts = [
        "pylog sim", f"--brokers {args.brokers}", f"--topics {','.join(args.topics)}",
        f"--partitions {args.partitions}", f"--rf {args.rf}", f"--min-isr {args.min_isr}", f"--seed {args.seed}",
        f"--duration {args.duration}ms", f"--produce-rate {args.produce_rate:g}", f"--burst {args.burst}",
        f"--crash-rate {args.crash_rate:g}", f"--stop-rate {args.stop_rate:g}", f"--restart-rate {args.restart_rate:g}",
        f"--partition-rate {args.partition_rate:g}", f"--heal-rate {args.heal_rate:g}",
        f"--slow-rate {args.slow_rate:g}", f"--loss {args.loss:g}", f"--max-latency-ms {args.max_latency_ms}",
    ]
    if args.disk_fail_rate:
        parts.append(f"--disk-fail-rate {args.disk_fail_rate:g}")
    if args.metadata_fail_rate:
        parts.append(f"--metadata-fail-rate {args.metadata_fail_rate:g}")
    if args.inject_bug:
        parts.append(f"--inject-bug {args.inject_bug}")
    return " ".join(parts)


def cmd_sim(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    from pylog.errors import InvalidConfigurationError
    from pylog.simulation import BUGS, INVARIANTS, SimConfig, Simulation, partition_sort_key, plot_trace

    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            _error("pylog sim --plot needs matplotlib, which is not installed: "
                   "pip install 'pylog-kafka[plot]' (the plot extra), or pip install 'matplotlib>=3.8'")
            return 1
    topics = tuple(t for t in args.topics if t)
    cfg = SimConfig(
        seed=args.seed, brokers=args.brokers, topics=topics, partitions=args.partitions, rf=args.rf,
        min_isr=args.min_isr, duration_ms=args.duration, produce_rate=args.produce_rate, max_burst=args.burst,
        crash_rate=args.crash_rate, stop_rate=args.stop_rate, restart_rate=args.restart_rate,
        partition_rate=args.partition_rate, heal_rate=args.heal_rate, slow_rate=args.slow_rate, loss=args.loss,
        max_latency_ms=args.max_latency_ms, disk_fail_rate=args.disk_fail_rate,
        metadata_fail_rate=args.metadata_fail_rate,
    )
    try:
        cfg.validate()
        if args.inject_bug is not None and args.inject_bug not in BUGS:
            raise InvalidConfigurationError(f"unknown --inject-bug {args.inject_bug!r}; known: {', '.join(sorted(BUGS))}")
    except PylogError as exc:
        _error(str(exc))
        return 2
    path = args.dir or tempfile.mkdtemp(prefix="pylog-sim-")
    if args.dir and os.path.exists(args.dir) and os.listdir(args.dir):
        _error(f"{args.dir}: not empty (a simulation needs a new directory)")
        return 1
    assert cfg.duration_ms is not None  # the CLI always sets it (--duration has a default)
    print(f"pylog sim: seed {cfg.seed}, {cfg.brokers} brokers, {'topic' if len(topics) == 1 else 'topics'} "
          f"{','.join(topics)} with {cfg.partitions} partition{'' if cfg.partitions == 1 else 's'} each, "
          f"RF {cfg.rf}, min ISR {cfg.min_isr}, {cfg.duration_ms / 1000:.3f} s of virtual time")
    print(f"rates per step: produce {cfg.produce_rate:g} (bursts of 1-{cfg.max_burst}), crash {cfg.crash_rate:g}, "
          f"stop {cfg.stop_rate:g}, restart {cfg.restart_rate:g}, partition {cfg.partition_rate:g}, "
          f"heal {cfg.heal_rate:g}, slow {cfg.slow_rate:g}, disk failure {cfg.disk_fail_rate:g}, "
          f"metadata-write failure {cfg.metadata_fail_rate:g}; message loss {cfg.loss:g}, "
          f"latency 1-{cfg.max_latency_ms} ms" + (f"; INJECTED BUG: {args.inject_bug}" if args.inject_bug else ""))
    sys.stdout.flush()
    try:
        sim = Simulation(path, cfg, trace=True, sample_ms=args.sample_ms, bug=args.inject_bug)
        result = sim.run()
    except PylogError as exc:
        _error(f"simulation stopped: {type(exc).__name__}: {exc}\nreplay: {_sim_replay(args)}")
        return 1
    except Exception:  # noqa: BLE001 - a crash of the simulated system is a finding: show it, then how to replay
        import traceback

        traceback.print_exc()
        _error(f"the simulation crashed (traceback above)\nreplay: {_sim_replay(args)}")
        return 1
    finally:
        if not args.dir:
            shutil.rmtree(path, ignore_errors=True)
    st = result.stats
    trace = result.trace
    assert trace is not None
    print(f"ran {st['steps']} steps, {st['virtual_ms'] / 1000:.3f} s virtual: produced {st['produced']}, "
          f"acked {st['acked']}, crashes {st['crashes']}, clean stops {st['stops']}, restarts {st['restarts']}, "
          f"network partitions {st['partitions']}, heals {st['heals']}, slowed {st['slows']}, "
          f"leader changes {st['leader_changes']}")
    width = max(len(n) for n, _ in INVARIANTS)
    for name, what in INVARIANTS:
        v = result.violations.get(name)
        if v is None:
            print(f"PASS {name:<{width}}  {what}")
        else:
            print(f"FAIL {name:<{width}}  first violation: {v}")
    n_samples = sum(len(p.times) for p in trace.partitions.values())
    print(f"trace: {n_samples} samples of {len(trace.partitions)} partition(s), {len(trace.events)} events, "
          f"{len(trace.leader_changes)} leader changes, sha256 {trace.digest()[:16]}")
    if args.trace:
        with open(args.trace, "w", encoding="utf-8") as f:
            json.dump(trace.to_json(), f, sort_keys=True)
    if args.plot:
        failed = sorted(result.violations.values(), key=lambda v: v.t_ms)
        title = (f"pylog sim --seed {cfg.seed}: {cfg.brokers} brokers, RF {cfg.rf}, min ISR {cfg.min_isr} - "
                 + ("all invariants held" if result.ok else f"{len(failed)} invariant(s) FAILED"))
        chosen = args.plot_partition or sorted(trace.partitions, key=partition_sort_key)[:MAX_PLOTTED_PARTITIONS]
        if not args.plot_partition and len(trace.partitions) > MAX_PLOTTED_PARTITIONS:
            print(f"plot: drawing the first {MAX_PLOTTED_PARTITIONS} of {len(trace.partitions)} partitions "
                  "(choose others with --plot-partition)")
        try:
            drawn = plot_trace(trace, args.plot, partitions=chosen, title=title, violations=failed)
        except (OSError, PylogError) as exc:
            _error(f"{args.plot}: cannot draw the plot: {exc}")
            return 1
        print(f"plot: {args.plot} ({', '.join(drawn)})")
    if result.ok:
        print(f"RESULT: PASS - all {len(INVARIANTS)} invariants held")
        return 0
    print(f"replay: {_sim_replay(args)}")
    print(f"RESULT: FAIL - {len(result.violations)} of {len(INVARIANTS)} invariants violated")
    return 1


# --------------------------------------------------------------------------- groups


def _partitions_arg(q: Any, topic: str, partition: Optional[int]) -> List[Tuple[str, int]]:
    if partition is not None:
        return [(topic, partition)]
    return [(topic, row.partition) for row in q.describe(topic)]


def cmd_groups(args: argparse.Namespace) -> int:
    """``pylog groups DIR``: Kafka's kafka-consumer-groups on a queue/cluster directory (see docs/cli.md)."""
    if not _is_queue_dir(args.dir):
        _error(f"{args.dir}: groups needs a queue/cluster directory (made by pylog.open), not a log directory")
        return 1
    if (args.delete_offsets or args.reset_offsets) and not args.topic:
        _error("--delete-offsets and --reset-offsets need --topic")
        return 2
    if args.reset_offsets:
        spec = _reset_spec(args)
        if isinstance(spec, str):
            _error(spec)
            return 2
    elif _reset_spec(args) is not None or args.execute or args.dry_run:
        _error("--to-*, --shift-by, --dry-run and --execute go with --reset-offsets")
        return 2
    q: Any = _open_queue(args.dir)
    if q is None:
        return 1
    try:
        if args.describe:
            g = args.describe
            d = q.describe_group(g)
            print(f"Group: {g} State: {d.state} ProtocolType: {d.protocol_type or '-'} Protocol: {d.protocol or '-'} "
                  f"Generation: {d.generation} Leader: {d.leader or '-'}")
            for m in d.members:
                parts = ",".join(f"{t}-{p}" for t, p in m.assignment) or "-"
                static = f" InstanceId: {m.group_instance_id}" if m.group_instance_id else ""
                print(f"Member: {m.member_id}{static} ClientId: {m.client_id} Host: {m.client_host} Assignment: {parts}")
            committed = q.list_group_offsets(g)
            ends: Dict[str, Dict[int, int]] = {}
            for (t, p), v in sorted(committed.items()):
                if t not in ends:
                    try:
                        ends[t] = {row.partition: row.high_watermark for row in q.describe(t)}
                    except PylogError:
                        ends[t] = {}
                hw = ends[t].get(p, -1)
                lag = max(0, hw - v.offset) if hw >= 0 else "-"
                print(f"Topic: {t} Partition: {p} CommittedOffset: {v.offset} LogEndOffset: {hw if hw >= 0 else '-'} "
                      f"Lag: {lag}")
        elif args.delete:
            q.delete_group(args.delete)
            print(f"Deleted group {args.delete}")
        elif args.delete_offsets:
            tps = _partitions_arg(q, args.topic, args.partition)
            q.delete_group_offsets(args.delete_offsets, tps)
            print(f"Deleted the offsets of group {args.delete_offsets} for "
                  + ", ".join(f"{t}-{p}" for t, p in tps))
        elif args.reset_offsets:
            return _reset_offsets(q, args, spec)
        else:
            for row in q.list_groups():
                print(f"Group: {row.group_id} State: {row.state} ProtocolType: {row.protocol_type or '-'}")
    except (OSError, PylogError) as exc:
        _error(f"{args.dir}: {exc}")
        return 1
    finally:
        q.close()
    return 0


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO 8601 (``2026-11-25T12:00:00``, ``...:00.500``, ``...Z``, ``...+02:00``,
    or a date alone) as epoch milliseconds; a time without an offset is UTC (Kafka's tool takes the
    local zone; a shared CLI should not depend on the machine's). Raises InvalidConfigurationError."""
    import datetime as _dt

    from pylog.errors import InvalidConfigurationError

    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    try:
        d = _dt.datetime.fromisoformat(t)
    except ValueError:
        raise InvalidConfigurationError(
            f"--to-datetime {text!r} is not an ISO 8601 time (e.g. 2026-11-25T12:00:00, 2026-11-25T12:00:00.500+02:00)"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return int(round(d.timestamp() * 1000))


def _reset_spec(args: argparse.Namespace) -> Any:
    """``(kind, value)`` of the chosen --to-*/--shift-by, None when none, or an error string."""
    chosen = [(k, v) for k, v in (("to-offset", args.to_offset), ("shift-by", args.shift_by),
                                  ("to-datetime", args.to_datetime),
                                  ("to-earliest", True if args.to_earliest else None),
                                  ("to-latest", True if args.to_latest else None)) if v is not None]
    if not chosen:
        return None if not args.reset_offsets else (
            "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime")
    kind, value = chosen[0]
    if kind == "to-datetime":
        try:
            value = parse_datetime_ms(args.to_datetime)  # the value chosen
        except PylogError as exc:
            return str(exc)
    if kind == "to-offset" and value < 0:
        return f"--to-offset must be >= 0, got {value}"
    return kind, value


def _offsets_for_time(q: Any, tps: List[Tuple[str, int]], ts: int) -> Dict[Tuple[str, int], Optional[int]]:
    """The first offset at or after ``ts`` per partition (None: no such record): the consumer's ``offsets_for_times``."""
    cons = q.consumer(None)
    try:
        got = cons.offsets_for_times({tp: ts for tp in tps})
        return {tp: (None if v is None else v.offset) for tp, v in got.items()}
    finally:
        cons.close()

def _reset_offsets(q: Any, args: argparse.Namespace, spec: Tuple[str, Any]) -> int:
    """kafka-consumer-groups --reset-offsets: print the plan; apply it with --execute.

    As in Kafka the group must be inactive (no members: state Empty, or a group that does not exist
    yet); a --to-offset or --shift-by target outside [log start, high watermark] is clamped to it with
    a warning; --shift-by needs a committed offset; --to-datetime takes the first offset whose timestamp
    is at or after the time (the end when there is none).
    """
    from pylog.errors import GroupIdNotFoundError

    group = args.reset_offsets
    try:
        state = q.describe_group(group).state
    except GroupIdNotFoundError:
        state = "Dead"
    if state not in ("Empty", "Dead"):
        _error(f"group {group!r}: assignments can only be reset if the group is inactive, but the current state "
               f"is {state} (stop its consumers first)")
        return 1
    tps = _partitions_arg(q, args.topic, args.partition)
    rows = {r.partition: r for r in q.describe(args.topic)}
    for t, p in tps:
        if p not in rows:
            _error(f"{args.topic}-{p}: no such partition (the topic has {len(rows)})")
            return 1
    cons = q.consumer(None)
    try:
        cons.assign(tps)
        cons.seek_to_beginning(*tps)
        starts = {tp: cons.position(*tp) for tp in tps}
        cons.seek_to_end(*tps)
        ends = {tp: cons.position(*tp) for tp in tps}
    finally:
        cons.close()
    committed = {tp: v.offset for tp, v in q.list_group_offsets(group).items()}
    kind, value = spec
    plan: Dict[Tuple[str, int], int] = {}
    if kind == "to-datetime":
        found = _offsets_for_time(q, tps, value)
    for tp in tps:
        if kind == "to-earliest":
            target = starts[tp]
        elif kind == "to-latest":
            target = ends[tp]
        elif kind == "to-offset":
            target = value
        elif kind == "shift-by":
            if tp not in committed:
                _error(f"group {group!r} has no committed offset for {tp[0]}-{tp[1]} to shift")
                return 1
            target = committed[tp] + value
        else:
            f = found[tp]
            target = ends[tp] if f is None else f
        clamped = min(max(target, starts[tp]), ends[tp])
        if clamped != target:
            print(f"WARN: new offset {target} for {tp[0]}-{tp[1]} is outside [{starts[tp]}, {ends[tp]}]; "
                  f"using {clamped}", file=sys.stderr)
        plan[tp] = clamped
    print(f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<10}")
    for (t, p), o in sorted(plan.items()):
        print(f"{group:<30} {t:<30} {p:<10} {o:<10}")
    if not args.execute:
        print("Dry run: nothing changed (add --execute to apply)", file=sys.stderr)
        return 0
    q.alter_group_offsets(group, plan)
    return 0


# --------------------------------------------------------------------------- main


def cmd_serve(args: argparse.Namespace) -> int:
    """``pylog serve DIR``: a cluster whose brokers speak the Kafka protocol, in the foreground.

    Prints ``bootstrap_servers=HOST:PORT,...`` once the listeners are up, then
    serves until SIGINT or SIGTERM, which stop every broker cleanly (logs
    flushed and closed: nothing acknowledged is lost). docs/kafka-protocol.md.
    """
    import signal
    import threading

    from pylog.cluster import Cluster
    from pylog.errors import PylogError

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            cluster = Cluster(args.dir, brokers=args.brokers, listen=args.listen, num_partitions=args.partitions,
                              default_replication_factor=args.replication_factor)
        except PylogError as exc:
            _error(f"pylog serve: {exc}")
            return 1
        try:
            print(f"bootstrap_servers={cluster.bootstrap_servers}", flush=True)
            while not stop.wait(0.2):
                pass
        finally:
            cluster.close()
        print("stopped cleanly", flush=True)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _add_serve_parser(sub: Any) -> None:
    sv = sub.add_parser("serve", help="run a cluster that speaks the Kafka protocol (foreground, Ctrl-C stops)",
                        description="Run a pylog cluster in DIR whose brokers listen for Kafka clients; prints the "
                        "bootstrap servers, stops cleanly on SIGINT/SIGTERM. No TLS/SASL: loopback by default.")
    sv.add_argument("dir", metavar="DIR")
    sv.add_argument("--brokers", type=_positive_int, default=1, help="brokers (default 1)")
    sv.add_argument("--listen", default="127.0.0.1:9092",
                    help="HOST:PORT of broker 0; broker N listens on PORT+N; port 0 picks free ports "
                    "(default 127.0.0.1:9092)")
    sv.add_argument("--replication-factor", type=_positive_int, default=None,
                    help="replication factor of topics created by clients (default min(3, brokers))")
    sv.add_argument("--partitions", type=_positive_int, default=1,
                    help="partitions of auto-created topics (Kafka's num.partitions, default 1)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pylog", description="Inspect, verify and use pylog log directories.")
    p.add_argument("--version", action="version", version=f"pylog {__version__} (distribution pylog-kafka)")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    _add_serve_parser(sub)

    d = sub.add_parser("dump-log", help="print the batches/records of .log files and the entries of index files",
                       description="Like kafka-dump-log: print batches of .log files, entries of .index/.timeindex files.")
    d.add_argument("files", nargs="+", metavar="FILE")
    d.add_argument("--print-data", action="store_true", help="print each record's key, value and headers (implies --deep-iteration)")
    d.add_argument("--deep-iteration", action="store_true", help="print each record, decompressing compressed batches")
    d.add_argument("--offsets-decoder", action="store_true",
                   help="decode the records as __consumer_offsets commits and group metadata (JSON; implies --print-data)")
    d.add_argument("--skip-record-metadata", action="store_true",
                   help="print only each record's key and payload (no batch lines, offsets or sizes)")
    d.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")

    v = sub.add_parser("verify", help="CRC-check every batch and validate every index under DIR",
                       description="Walk a log dir (or a cluster dir with broker-*/), check every batch CRC and index; exit 1 on damage.")
    v.add_argument("dir", metavar="DIR")
    v.add_argument("--repair", action="store_true", help="truncate damaged partitions as recovery does (asks first)")
    v.add_argument("--yes", action="store_true", help="do not ask before repairing")
    v.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")

    s = sub.add_parser("describe", help="offsets, sizes and epochs of each partition (read-only)",
                       description="Per partition: log start/end, size, segments, leader epoch, recovery point, HW; "
                                   "leader, replicas and ISR for a cluster dir; then each consumer group's committed "
                                   "offset, log end and lag per partition (from __consumer_offsets).")
    s.add_argument("dir", metavar="DIR")
    s.add_argument("--topic", action="append", metavar="TOPIC",
                   help="only this topic (repeatable); its consumer groups' lag lines too")
    internal = s.add_mutually_exclusive_group()
    internal.add_argument("--include-internal", action="store_true",
                          help="also show internal topics (__consumer_offsets, ...), hidden by default")
    internal.add_argument("--exclude-internal", action="store_true",
                          help="hide internal topics (kafka-topics.sh's flag; the default here)")

    pr = sub.add_parser("produce", help="append lines from stdin to a topic (keys through the partitioner)",
                        description="Read lines from stdin and append each as a record of TOPIC, like "
                                    "kafka-console-producer. Without --partition a keyed record goes to "
                                    "murmur2(key) mod the partition count (the producer's default partitioner).")
    pr.add_argument("dir", metavar="DIR")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--partition", type=int, default=None, help="write every record to partition N")
    pr.add_argument("--property", action="append", metavar="NAME=VALUE", default=[],
                    help="parse.key=true and key.separator=SEP (default tab) split each line into key and value")
    pr.add_argument("--key-separator", default=None, help="short for --property parse.key=true --property key.separator=SEP")
    pr.add_argument("--batch-size", type=int, default=500, help="records per appended batch (default 500)")
    pr.add_argument("--acks", choices=["0", "1", "all"], default="all",
                    help="queue directories only (see below): the producer's acks (default all)")
    pr.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    pr.epilog = ("DIR is a log directory (holding <TOPIC>-<PARTITION>/; the partition count is the number of "
                 "those folders, 1 for a new topic), or a queue/cluster directory made by pylog.open (holding "
                 "cluster-metadata.json): then the records go through a producer - to the process that owns "
                 "the directory if one is running.")

    c = sub.add_parser("consume", help="print records of a topic's partitions (read-only on a log dir)",
                       description="Print the records of TOPIC (every partition, or --partition N), one per line, "
                                   "like kafka-console-consumer; --follow waits for new records.")
    c.add_argument("dir", metavar="DIR")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, default=None, help="only partition N (default: every partition)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    g.add_argument("--offset", type=int, default=None, help="start at offset N (needs --partition)")
    c.add_argument("--to-offset", type=int, default=None, help="stop each partition before offset N (exclusive)")
    c.add_argument("--max-messages", type=int, default=None)
    c.add_argument("--follow", action="store_true",
                   help="keep waiting for new records (until Ctrl-C, --max-messages or --timeout-ms)")
    c.add_argument("--property", action="append", metavar="NAME=VALUE", default=[],
                   help="kafka-console-consumer's print.timestamp, print.partition, print.offset, print.headers, "
                        "print.key, print.value (true/false), key.separator, headers.separator, line.separator, "
                        "null.literal")
    c.add_argument("--group", default=None,
                   help="queue directories only: consume as consumer group G (subscribe to the topic, start at the "
                        "group's committed offset, commit what was printed)")
    c.add_argument("--timeout-ms", type=int, default=None,
                   help="stop after this long without a new record (default: 1000 on a queue directory without "
                        "--follow; never with --follow)")
    c.add_argument("--progress", action="store_true", help="show the progress bar even when stderr is not a terminal")
    c.epilog = ("DIR is a log directory (read-only, like kafka-dump-log's input), or a queue/cluster directory made "
                "by pylog.open (holding cluster-metadata.json): then a consumer reads below the high watermark, "
                "through the process that owns the directory if one is running.")
    c.add_argument("--print-key", action="store_true", help="short for --property print.key=true")
    c.add_argument("--key-separator", default=None, help="short for --property key.separator=SEP (default: tab)")

    gr = sub.add_parser("groups", help="list, describe, delete consumer groups and their offsets (queue dirs)",
                        description="Like kafka-consumer-groups, on a queue/cluster directory made by pylog.open "
                                    "(through the process that owns it, if one is running). Without an action: "
                                    "list every group.")
    gr.add_argument("dir", metavar="DIR")
    act = gr.add_mutually_exclusive_group()
    act.add_argument("--describe", metavar="GROUP", help="state, members and their partitions, committed offsets and lag")
    act.add_argument("--delete", metavar="GROUP", help="delete an empty group (its offsets too)")
    act.add_argument("--delete-offsets", metavar="GROUP", help="delete the group's offsets of --topic [--partition]")
    act.add_argument("--reset-offsets", metavar="GROUP",
                     help="plan (and with --execute, set) the committed offsets of an inactive group for --topic "
                          "[--partition]; one of --to-earliest, --to-latest, --to-offset, --shift-by, --to-datetime")
    gr.add_argument("--topic", default=None)
    gr.add_argument("--partition", type=int, default=None, help="default: every partition of --topic")
    to = gr.add_mutually_exclusive_group()
    to.add_argument("--to-offset", type=int, default=None, help="reset to offset N (clamped to the log's range)")
    to.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    to.add_argument("--to-latest", action="store_true", help="reset to the end (the high watermark)")
    to.add_argument("--shift-by", type=int, default=None, help="move the committed offset by N (negative: back)")
    to.add_argument("--to-datetime", default=None, metavar="YYYY-MM-DDTHH:mm:SS.sss",
                    help="reset to the first offset whose timestamp is at or after this time (ISO 8601; UTC "
                         "unless it has an offset such as +02:00 or Z)")
    run_mode = gr.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    run_mode.add_argument("--execute", action="store_true", help="apply the plan")

    sub.add_parser("bench", help="run benchmarks/compare.py (a source checkout only); other arguments go to it",
                   description="Run benchmarks/compare.py with the given arguments and print its ratio table.",
                   add_help=False)

    m = sub.add_parser("sim", help="run a seeded fault simulation of a cluster and check its invariants",
                       description="Run a seeded, virtual-time simulation of a cluster with crashes, clean stops, "
                                   "restarts, network partitions and slow brokers; print each invariant's result "
                                   "(exit 1 on any failure) and, with --plot, draw the replication timeline. "
                                   "Rates are probabilities per step; a step is one action followed by 5 ms - 2 s "
                                   "of virtual time.")
    m.add_argument("--brokers", type=_positive_int, default=3, help="brokers in the cluster (default 3)")
    m.add_argument("--topics", type=lambda t: t.split(","), default=["sim"], help="comma-separated topic names (default: sim)")
    m.add_argument("--partitions", type=_positive_int, default=1, help="partitions per topic (default 1)")
    m.add_argument("--rf", type=_positive_int, default=3, help="replication factor (default 3)")
    m.add_argument("--min-isr", type=int, default=2, help="min.insync.replicas (default 2)")
    m.add_argument("--seed", type=int, default=0, help="the seed: same seed and options, same run (default 0)")
    m.add_argument("--duration", type=_duration_ms, default=60_000, help="virtual time to run: 60s (default), 1500ms, 2m")
    m.add_argument("--produce-rate", type=_rate, default=0.40, help="chance per step of a produce burst (0.40)")
    m.add_argument("--burst", type=_positive_int, default=8, help="records per burst: 1..N (8)")
    m.add_argument("--crash-rate", type=_rate, default=0.105, help="chance per step of a hard crash (0.105)")
    m.add_argument("--stop-rate", type=_rate, default=0.045, help="chance per step of a clean stop (0.045)")
    m.add_argument("--restart-rate", type=_rate, default=0.15, help="chance per step of restarting a stopped broker (0.15)")
    m.add_argument("--partition-rate", type=_rate, default=0.08, help="chance per step of a network partition (0.08)")
    m.add_argument("--heal-rate", type=_rate, default=0.08, help="chance per step of healing the network (0.08)")
    m.add_argument("--slow-rate", type=_rate, default=0.04, help="chance per step of slowing a broker (0.04)")
    m.add_argument("--disk-fail-rate", type=_rate, default=0.0,
                   help="chance per step of a broker's disk failing every write until a restart step replaces it (0)")
    m.add_argument("--metadata-fail-rate", type=_rate, default=0.0,
                   help="chance per step of cluster-metadata.json writes starting to fail (ENOSPC), or working "
                        "again if they fail: the controller stops acting meanwhile (0)")
    m.add_argument("--loss", type=_rate, default=0.0, help="probability each message is lost (0)")
    m.add_argument("--max-latency-ms", type=_positive_int, default=5, help="network latency is 1..N ms (5)")
    m.add_argument("--plot", metavar="FILE.png", default=None, help="draw the timeline (needs the plot extra: matplotlib)")
    m.add_argument("--plot-partition", action="append", metavar="TOPIC-P", default=[],
                   help="only draw this partition (repeatable; default: the first 8)")
    m.add_argument("--trace", metavar="FILE.json", default=None, help="write the recorded trace as JSON")
    m.add_argument("--sample-ms", type=_positive_int, default=20, help="trace sampling interval in virtual ms (20)")
    m.add_argument("--dir", default=None, help="keep the cluster's files in DIR (new or empty; default: a temp dir, removed)")
    # Not imported from pylog.simulation (the other verbs need neither it nor matplotlib);
    # tests/unit/test_cli_sim.py keeps this list equal to pylog.simulation.BUGS.
    m.add_argument("--inject-bug", metavar="BUG", default=None,
                   help="test-only: switch on a known replication bug to see the checks catch it: "
                        "no-epoch-truncation (a follower skips the KIP-101 leader-epoch truncation) or "
                        "hw-ignores-followers (the leader advances the HW without waiting for the ISR)")
    from pylog.cli_topics import add_parser as add_topics_parser

    add_topics_parser(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``pylog`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        if argv[1:2] in (["-h"], ["--help"]):
            print("usage: pylog bench [compare.py arguments...]\n\n"
                  "Run benchmarks/compare.py from a source checkout with the given arguments.\n"
                  "See `python benchmarks/compare.py --help` for its options.")
            return 0
        return cmd_bench(argparse.Namespace(), argv[1:])
    args = build_parser().parse_args(argv)
    handlers = {"dump-log": cmd_dump_log, "verify": cmd_verify, "describe": cmd_describe,
                "produce": cmd_produce, "consume": cmd_consume, "sim": cmd_sim, "groups": cmd_groups,
                "serve": cmd_serve}
    from pylog.cli_topics import cmd_topics

    handlers["topics"] = cmd_topics
    try:
        return handlers[args.verb](args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
