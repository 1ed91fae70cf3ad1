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
from typing import IO, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from pylog import _native
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
    """A one-line progress bar on stderr (only when enabled)."""

    def __init__(self, total: int, enabled: bool, stream: IO[str] = sys.stderr):
        self.total = max(total, 1)
        self.done = 0
        self.enabled = enabled
        self.stream = stream

    def advance(self, n: int, label: str = "") -> None:
        self.done += n
        if not self.enabled:
            return
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r[{bar:<30}] {frac * 100:5.1f}% {label[-40:]:<40}")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


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


def _record_line(r: Record, print_data: bool) -> str:
    line = (
        f"| offset: {r.offset} {'LogAppendTime' if r.timestamp_type else 'CreateTime'}: {r.timestamp} "
        f"keySize: {-1 if r.key is None else len(r.key)} valueSize: {-1 if r.value is None else len(r.value)}"
    )
    if print_data:
        hdrs = ",".join(f"{k}:{_show_bytes(v)}" for k, v in r.headers)
        line += f" headerKeys: [{hdrs}] key: {_show_bytes(r.key)} payload: {_show_bytes(r.value)}"
    return line


def dump_log_file(path: str, out: IO[str], *, print_data: bool, deep: bool) -> bool:
    """Print every batch of a ``.log`` file; False (after an error line) on damage."""
    with open(path, "rb") as f:
        data = f.read()
    view = memoryview(data)
    result = scan(view, verify_crc=True)
    ok = True
    for info in result.batches:
        batch = RecordBatch(info, view[info.position : info.position + info.size], path)
        out.write(_batch_line(batch, True) + "\n")
        if not (deep or print_data):
            continue
        try:
            for rec in batch.records():
                out.write(_record_line(rec, print_data) + "\n")
        except PylogError as exc:
            _error(f"{path}: cannot decode records of the batch at byte position {info.position}: {exc}")
            ok = False
    if result.status != _native.OK:
        ok = False
        pos = result.valid_bytes
        # Show the header of the bad batch when its framing holds (a CRC mismatch).
        bad = scan(view[pos:], verify_crc=False, max_batches=1)
        if bad.batches:
            info = bad.batches[0]._replace(position=pos)
            out.write(_batch_line(RecordBatch(info, view[pos : pos + info.size], path), False) + "\n")
        _error(
            f"{path}: {result.reason} at byte position {pos} "
            f"({len(data) - pos} bytes from there to the end of the file are not valid batches)"
        )
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
                ok = dump_log_file(path, sys.stdout, print_data=args.print_data, deep=args.deep_iteration) and ok
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
    for log_path in _segment_logs(part_dir):
        with open(log_path, "rb") as f:
            data = f.read()
        totals["segments"] += 1
        result = scan(data, verify_crc=True)
        totals["batches"] += len(result.batches)
        totals["records"] += sum(b.records_count for b in result.batches)
        totals["bytes"] += len(data)
        if damaged_from is not None:
            problems.append((log_path, 0, len(data), "follows a damaged segment (recovery deletes it)"))
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
    log = Log.open(part_dir)
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


def _describe_log_dir(log_dir: str, prefix: str = "") -> Iterator[str]:
    rps = _read_offsets_quiet(os.path.join(log_dir, RECOVERY_POINT_FILE))
    hws = _read_offsets_quiet(os.path.join(log_dir, HW_CHECKPOINT_FILE))
    for p in _partition_dirs(log_dir):
        tp = parse_partition_dir(p)
        assert tp is not None
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
    root = args.dir
    if not os.path.isdir(root):
        _error(f"{root}: not a directory")
        return 1
    meta_path = os.path.join(root, METADATA_FILE)
    if os.path.exists(meta_path):
        try:
            with open(meta_path, "rb") as f:
                meta = json.loads(f.read().decode("utf-8"))
            print(f"Cluster: {root} brokers: {meta.get('brokers')} controllerEpoch: {meta.get('controller_epoch')}")
            for st in sorted(meta.get("partitions", []), key=lambda s: (s["topic"], s["partition"])):
                print(
                    f"Topic: {st['topic']} Partition: {st['partition']} Leader: {st['leader']} "
                    f"LeaderEpoch: {st['leader_epoch']} Replicas: {','.join(map(str, st['replicas']))} "
                    f"Isr: {','.join(map(str, st['isr']))}"
                )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _error(f"{meta_path}: cannot read cluster metadata: {exc}")
            return 1
    dirs = _log_dirs(root)
    for d in dirs:
        prefix = f"Broker: {os.path.basename(d)[len('broker-'):]} " if d != root else ""
        for line in _describe_log_dir(d, prefix):
            print(line)
    try:
        for line in _group_lag_lines(root, dirs):
            print(line)
    except (OSError, PylogError) as exc:
        _error(f"{root}: cannot read consumer group offsets: {exc}")
        return 1
    return 0


def _leaders(root: str) -> Dict[Tuple[str, int], int]:
    """``{(topic, partition): leader}`` from a cluster dir's metadata ({} when absent or unreadable)."""
    try:
        with open(os.path.join(root, METADATA_FILE), "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
        return {(st["topic"], st["partition"]): st["leader"] for st in meta.get("partitions", [])}
    except (OSError, ValueError, KeyError, TypeError):
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


def _stdin_records(sep: Optional[bytes]) -> Iterator[Record]:
    for raw in sys.stdin.buffer:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        key = None
        if sep is not None and sep in line:
            key, line = line.split(sep, 1)
        yield Record(line, key=key)


def _open_queue(path: str) -> Optional[object]:
    """``pylog.open(path)`` (a client of the running owner, or the owner), or None after printing why not."""
    import pylog

    try:
        return pylog.open(path)
    except (OSError, PylogError) as exc:
        _error(f"{path}: {exc}")
        return None


def _produce_to_queue(args: argparse.Namespace, sep: Optional[bytes]) -> int:
    """``pylog produce`` on a queue directory: a producer of ``pylog.open(DIR)``."""
    q = _open_queue(args.dir)
    if q is None:
        return 1
    n = 0
    offsets: List[int] = []
    try:
        with q.producer(acks=args.acks if args.acks == "all" else int(args.acks)) as prod:
            futures = [prod.send(args.topic, r.value, key=r.key, partition=args.partition) for r in _stdin_records(sep)]
            prod.flush()
            for f in futures:
                offsets.append(f.result().offset)
            n = len(futures)
    except (OSError, PylogError) as exc:
        _error(f"{args.dir}: {args.topic}-{args.partition}: {exc}")
        return 1
    finally:
        q.close()
    where = f" (offsets {offsets[0]}..{offsets[-1]})" if n and args.acks != "0" else ""
    print(f"Produced {n} records to {args.topic}-{args.partition}{where}", file=sys.stderr)
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    path = os.path.join(args.dir, f"{args.topic}-{args.partition}")
    sep = args.key_separator.encode() if args.key_separator is not None else None
    if _is_queue_dir(args.dir):
        return _produce_to_queue(args, sep)
    n = 0
    first = last = None
    try:
        log = Log.open(path)
    except (OSError, PylogError) as exc:
        _error(f"{path}: {exc}")
        return 1
    try:
        pending: List[Record] = []

        def flush_pending() -> None:
            nonlocal first, last
            if pending:
                res = log.append(pending)
                first = res.base_offset if first is None else first
                last = res.last_offset
                pending.clear()

        for rec in _stdin_records(sep):
            pending.append(rec)
            n += 1
            if len(pending) >= args.batch_size:
                flush_pending()
        flush_pending()
        log.flush()
    except (OSError, PylogError) as exc:
        _error(f"{path}: {exc}")
        return 1
    finally:
        log.close()
    where = f" (offsets {first}..{last})" if n else ""
    print(f"Produced {n} records to {args.topic}-{args.partition}{where}", file=sys.stderr)
    return 0


def _consume_from_queue(args: argparse.Namespace, sep: bytes) -> int:
    """``pylog consume`` on a queue directory: a consumer of ``pylog.open(DIR)``.

    With ``--group``: subscribe as that group, start at its committed offset
    (else the beginning with ``--from-beginning``, else the end), and commit
    what was printed. Without: read the one partition from ``--offset`` /
    ``--from-beginning`` / the end. Stops at ``--max-messages``,
    ``--to-offset`` or after ``--timeout-ms`` without a record.
    """
    out = sys.stdout.buffer
    q = _open_queue(args.dir)
    if q is None:
        return 1
    n = 0
    try:
        reset = "earliest" if args.from_beginning else "latest"
        if args.group is not None:
            cons = q.consumer(args.group, [args.topic], auto_offset_reset=reset, enable_auto_commit=False)
        else:
            cons = q.consumer(None, auto_offset_reset=reset)
            cons.assign([(args.topic, args.partition)])
            if args.offset is not None:
                cons.seek(args.topic, args.partition, args.offset)
        consumed: Dict[Tuple[str, int], int] = {}
        done = False
        while not done:
            recs = cons.poll(timeout=args.timeout_ms / 1000.0)
            if not recs:
                break
            for rec in recs:
                if args.group is None and rec.partition != args.partition:
                    continue
                if args.to_offset is not None and rec.offset >= args.to_offset:
                    done = True
                    break
                if args.print_key:
                    out.write((rec.key or b"null") + sep)
                out.write((rec.value if rec.value is not None else b"null") + b"\n")
                consumed[(rec.topic, rec.partition)] = rec.offset + 1
                n += 1
                if args.max_messages is not None and n >= args.max_messages:
                    done = True
                    break
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
    sep = (args.key_separator if args.key_separator is not None else "\t").encode()
    if _is_queue_dir(args.dir):
        return _consume_from_queue(args, sep)
    if args.group is not None:
        _error(f"{args.dir}: --group needs a queue/cluster directory (made by pylog.open), not a log directory")
        return 2
    path = os.path.join(args.dir, f"{args.topic}-{args.partition}")
    try:
        log = Log.open(path, read_only=True)
    except (OSError, PylogError) as exc:
        _error(f"{path}: {exc}")
        return 1
    out = sys.stdout.buffer
    n = 0
    end = log.log_end_offset if args.to_offset is None else min(args.to_offset, log.log_end_offset)
    try:
        if args.offset is not None:
            offset = args.offset
        elif args.from_beginning:
            offset = log.log_start_offset
        else:
            offset = log.log_end_offset  # like kafka-console-consumer: only new records (none, for a dir)
        if offset < log.log_start_offset or offset > log.log_end_offset:
            _error(f"offset {offset} is outside [{log.log_start_offset}, {log.log_end_offset}] of {path}")
            return 1
        while offset < end and (args.max_messages is None or n < args.max_messages):
            got = False
            for rec in log.read(offset, max_offset=end):
                if rec.offset >= end:
                    break
                got = True
                if args.print_key:
                    out.write((rec.key or b"null") + sep)
                out.write((rec.value if rec.value is not None else b"null") + b"\n")
                n += 1
                offset = rec.offset + 1
                if args.max_messages is not None and n >= args.max_messages:
                    break
            if not got:
                break
    except (OSError, PylogError) as exc:
        out.flush()
        _error(f"{path}: {exc}")
        return 1
    finally:
        log.close()
    out.flush()
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
                   "pip install 'pylog[plot]' (the plot extra), or pip install 'matplotlib>=3.8'")
            return 1
    topics = tuple(t for t in args.topics if t)
    cfg = SimConfig(
        seed=args.seed, brokers=args.brokers, topics=topics, partitions=args.partitions, rf=args.rf,
        min_isr=args.min_isr, duration_ms=args.duration, produce_rate=args.produce_rate, max_burst=args.burst,
        crash_rate=args.crash_rate, stop_rate=args.stop_rate, restart_rate=args.restart_rate,
        partition_rate=args.partition_rate, heal_rate=args.heal_rate, slow_rate=args.slow_rate, loss=args.loss,
        max_latency_ms=args.max_latency_ms, disk_fail_rate=args.disk_fail_rate,
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
    print(f"pylog sim: seed {cfg.seed}, {cfg.brokers} brokers, {'topic' if len(topics) == 1 else 'topics'} "
          f"{','.join(topics)} with {cfg.partitions} partition{'' if cfg.partitions == 1 else 's'} each, "
          f"RF {cfg.rf}, min ISR {cfg.min_isr}, {cfg.duration_ms / 1000:.3f} s of virtual time")
    print(f"rates per step: produce {cfg.produce_rate:g} (bursts of 1-{cfg.max_burst}), crash {cfg.crash_rate:g}, "
          f"stop {cfg.stop_rate:g}, restart {cfg.restart_rate:g}, partition {cfg.partition_rate:g}, "
          f"heal {cfg.heal_rate:g}, slow {cfg.slow_rate:g}, disk failure {cfg.disk_fail_rate:g}; message loss {cfg.loss:g}, "
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
    if args.reset_offsets and args.to_offset is None:
        _error("--reset-offsets needs --to-offset")
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
            tps = _partitions_arg(q, args.topic, args.partition)
            q.alter_group_offsets(args.reset_offsets, {tp: args.to_offset for tp in tps})
            print(f"Group {args.reset_offsets}: offset {args.to_offset} for " + ", ".join(f"{t}-{p}" for t, p in tps))
        else:
            for row in q.list_groups():
                print(f"Group: {row.group_id} State: {row.state} ProtocolType: {row.protocol_type or '-'}")
    except (OSError, PylogError) as exc:
        _error(f"{args.dir}: {exc}")
        return 1
    finally:
        q.close()
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
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    _add_serve_parser(sub)

    d = sub.add_parser("dump-log", help="print the batches/records of .log files and the entries of index files",
                       description="Like kafka-dump-log: print batches of .log files, entries of .index/.timeindex files.")
    d.add_argument("files", nargs="+", metavar="FILE")
    d.add_argument("--print-data", action="store_true", help="print each record's key, value and headers (implies --deep-iteration)")
    d.add_argument("--deep-iteration", action="store_true", help="print each record, decompressing compressed batches")

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

    pr = sub.add_parser("produce", help="append lines from stdin to a partition",
                        description="Read lines from stdin and append each as a record to <DIR>/<TOPIC>-<PARTITION>.")
    pr.add_argument("dir", metavar="DIR")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--partition", type=int, default=0)
    pr.add_argument("--key-separator", default=None, help="split each line into key and value at the first SEP")
    pr.add_argument("--batch-size", type=int, default=500, help="records per appended batch (default 500)")
    pr.add_argument("--acks", choices=["0", "1", "all"], default="all",
                    help="queue directories only (see below): the producer's acks (default all)")
    pr.epilog = ("DIR is a log directory (holding <TOPIC>-<PARTITION>/), or a queue/cluster directory made by "
                 "pylog.open (holding cluster-metadata.json): then the records go through a producer - to the "
                 "process that owns the directory if one is running - and --partition is honoured as given.")

    c = sub.add_parser("consume", help="print records of a partition (read-only)",
                       description="Print the values (and keys) of <DIR>/<TOPIC>-<PARTITION>, one per line.")
    c.add_argument("dir", metavar="DIR")
    c.add_argument("--topic", required=True)
    c.add_argument("--partition", type=int, default=0)
    g = c.add_mutually_exclusive_group()
    g.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    g.add_argument("--offset", type=int, default=None, help="start at offset N")
    c.add_argument("--to-offset", type=int, default=None, help="stop before offset N (exclusive)")
    c.add_argument("--max-messages", type=int, default=None)
    c.add_argument("--group", default=None,
                   help="queue directories only: consume as consumer group G (subscribe to the topic, start at the "
                        "group's committed offset, commit what was printed)")
    c.add_argument("--timeout-ms", type=int, default=1000,
                   help="queue directories only: stop after this long without a record (default 1000)")
    c.epilog = ("DIR is a log directory (read-only, like kafka-dump-log's input), or a queue/cluster directory made "
                "by pylog.open (holding cluster-metadata.json): then a consumer reads below the high watermark, "
                "through the process that owns the directory if one is running.")
    c.add_argument("--print-key", action="store_true")
    c.add_argument("--key-separator", default=None, help="printed between key and value (default: tab)")

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
                     help="set the committed offset of an empty group for --topic [--partition] to --to-offset")
    gr.add_argument("--topic", default=None)
    gr.add_argument("--partition", type=int, default=None, help="default: every partition of --topic")
    gr.add_argument("--to-offset", type=int, default=None)

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
    try:
        return handlers[args.verb](args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 1


if __name__ == "__main__":
    sys.exit(main())
