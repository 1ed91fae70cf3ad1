"""``pylog describe DIR``: offsets, sizes and epochs per partition, the cluster's leaders and ISRs,
each consumer group's committed offsets and lag, and the open transactions (read-only; takes no lock).

Open transactions (Ongoing, PrepareCommit, PrepareAbort) come from the running owner's transaction
coordinators when a process owns the directory (``pylog.open``: asked as a client over its socket,
Kafka's ListTransactions then DescribeTransactions), else from the ``__transaction_state`` log on disk
(the last value per transactional id, read to the log end of the leader's copy of each partition,
as a coordinator loading it does).

Thread-safety: a command-line entry point; one thread.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Set, Tuple

from pylog.cli.common import METADATA_FILE, error, partition_dirs_of
from pylog.errors import CorruptRecordError, PylogError
from pylog.replication.controller import read_metadata_json
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO
from pylog.storage.log import LEADER_EPOCH_CHECKPOINT, Log
from pylog.storage.logdir import HW_CHECKPOINT_FILE, RECOVERY_POINT_FILE, list_log_dirs, parse_partition_dir


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
    for p in partition_dirs_of(log_dir):
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
        error(f"{root}: not a directory")
        return 1
    keep = _topic_filter(args)
    hidden: Dict[str, int] = {}
    seen_topics = set()
    meta_path = os.path.join(root, METADATA_FILE)
    if os.path.exists(meta_path):
        try:
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
            error(f"{meta_path}: cannot read cluster metadata: {type(exc).__name__}: {exc}")
            return 1
    dirs = list_log_dirs(root)
    for broker, d in dirs:
        prefix = f"Broker: {broker} " if broker is not None else ""
        for p in partition_dirs_of(d):
            tp = parse_partition_dir(p)
            if tp is not None:
                seen_topics.add(tp[0])
        for line in _describe_log_dir(d, prefix, keep, hidden):
            print(line)
    missing = sorted(set(args.topic or ()) - seen_topics)
    if missing:
        error(f"{root}: no such topic: {', '.join(missing)}")
        return 1
    try:
        for line in _group_lag_lines(root, dirs):
            if not args.topic or _lag_line_topic(line) in args.topic:
                print(line)
    except (OSError, PylogError) as exc:
        error(f"{root}: cannot read consumer group offsets: {exc}")
        return 1
    try:
        for line in _open_transaction_lines(root, dirs, set(args.topic or ())):
            print(line)
    except (OSError, PylogError) as exc:
        error(f"{root}: cannot read the open transactions: {exc}")
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
        meta = read_metadata_json(os.path.join(root, METADATA_FILE))  # the snapshot plus its delta log
        return {(st["topic"], st["partition"]): st["leader"] for st in meta.get("partitions", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, PylogError):
        return {}


def _replica_views(dirs: List[Tuple[Optional[int], str]]
                   ) -> Dict[Tuple[str, int], List[Tuple[Optional[int], str, Optional[int]]]]:
    """``{tp: [(broker id or None, partition dir, checkpointed HW or None)]}`` over the log dirs."""
    out: Dict[Tuple[str, int], List[Tuple[Optional[int], str, Optional[int]]]] = {}
    for broker, d in dirs:
        hws = _read_offsets_quiet(os.path.join(d, HW_CHECKPOINT_FILE))
        for p in partition_dirs_of(d):
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


def _group_lag_lines(root: str, dirs: List[Tuple[Optional[int], str]]) -> Iterator[str]:
    """One line per committed (group, topic, partition): committed offset, log end (the HW) and lag.

    Committed offsets are replayed from ``__consumer_offsets`` by the group
    coordinator's own ``load`` (the latest commit per key wins, a null value - a
    tombstone - deletes it, a transactional commit counts once its COMMIT marker is
    in the log), from the leader's copy of each offsets partition up to its HW.
    The log end is the leader's checkpointed high watermark (Kafka's
    LOG-END-OFFSET for a read_uncommitted consumer), else its log end offset.
    """
    from pylog.replication.group_coordinator import GroupCoordinator
    from pylog.replication.offsets_topic import OFFSETS_TOPIC, read_log_entries

    views = _replica_views(dirs)
    leaders = _leaders(root)
    commits: Dict[Tuple[str, str, int], int] = {}
    for tp in sorted(t for t in views if t[0] == OFFSETS_TOPIC):
        path, hw = _pick_replica(views[tp], leaders.get(tp))
        log = Log.open(path, read_only=True)
        try:
            # The coordinator's own load: transactional offsets count only once their COMMIT marker is
            # in the log (an aborted or still-open TxnOffsetCommit is not a committed offset).
            loader = GroupCoordinator(-1)
            try:
                loader.load(tp[1], 0, read_log_entries(log, hw), 0)
            except CorruptRecordError as exc:  # "<dir>/__consumer_offsets-<p> offset <o>: what"
                raise CorruptRecordError(f"{os.path.dirname(path)}{os.sep}{exc}") from None
            for gid, g in loader.groups.items():
                for (topic, partition), value in g.offsets.items():
                    commits[(gid, topic, partition)] = value.offset
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


#: the states of a transaction that is open (its outcome not yet in every partition)
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


class OpenTransaction(NamedTuple):
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: Optional[int]
    partitions: Tuple[Tuple[str, int], ...]

    def line(self) -> str:
        parts = ",".join(f"{t}-{p}" for t, p in self.partitions) or "-"
        return (f"Transaction: {self.transactional_id} State: {self.state} ProducerId: {self.producer_id} "
                f"ProducerEpoch: {self.producer_epoch} TimeoutMs: {self.timeout_ms} "
                f"StartTime: {'-' if self.start_ms is None else self.start_ms} Partitions: {parts}")


def _open_transaction_lines(root: str, dirs: List[Tuple[Optional[int], str]], topics: Set[str]) -> Iterator[str]:
    """One line per open transaction (of ``topics`` when given: those with a partition of one), sorted by id:
    from the running owner if there is one, else decoded from the directory."""
    live = _live_open_transactions(root)
    rows = live if live is not None else _logged_open_transactions(root, dirs)
    for row in sorted(rows):
        if not topics or any(t in topics for t, _ in row.partitions):
            yield row.line()


def running_owner(root: str) -> bool:
    """True when a process owns the queue directory ``root`` (``pylog.open``): its ``pylog.owner`` file
    exists and the owner lock is held (by another process, or by a :class:`~pylog.shared.SharedCluster`
    of this one). Takes the lock for an instant only when nobody holds it. Thread-safety: one thread."""
    import fcntl

    import json

    from pylog.shared import OWNER_INFO_FILE, OWNER_LOCK_FILE

    path = os.path.realpath(root)
    try:
        with open(os.path.join(path, OWNER_INFO_FILE)) as f:
            pid = json.load(f).get("pid")
    except (OSError, ValueError, AttributeError):
        return False  # no owner file (none runs, or it closed), or one being replaced
    if pid == os.getpid():
        return True  # this process owns it (closing a descriptor of the lock file here would release its lock)
    try:
        fd = os.open(os.path.join(path, OWNER_LOCK_FILE), os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # held: an owner runs
    finally:
        os.close(fd)  # (releases the instant's lock, if taken)
    return False


def _live_open_transactions(root: str) -> Optional[List[OpenTransaction]]:
    """The open transactions as the running owner's coordinators hold them; None when no process owns
    ``root`` (or it went away while asked: the directory is read instead)."""
    if not running_owner(root):
        return None
    from pylog.errors import TransactionalIdNotFoundError
    from pylog.shared import SharedCluster

    # A client of the owner. Should the owner exit between the check and the connection, this process
    # becomes the owner (the directory's recovery runs, as with ``pylog groups``); its coordinator then
    # holds what it loaded from the log, the same rows the directory reading would give.
    q = SharedCluster(root, open_timeout_ms=10_000)
    try:
        rows = []
        for listing in q.list_transactions(state_filters=OPEN_STATES):
            try:
                d = q.describe_transactions([listing.transactional_id])[listing.transactional_id]
            except TransactionalIdNotFoundError:
                continue  # expired meanwhile
            if d.state in OPEN_STATES:
                rows.append(OpenTransaction(d.transactional_id, d.state, d.producer_id, d.producer_epoch,
                                            d.transaction_timeout_ms, d.transaction_start_time_ms,
                                            d.topic_partitions))
        return rows
    finally:
        q.close()


def _logged_open_transactions(root: str, dirs: List[Tuple[Optional[int], str]]) -> List[OpenTransaction]:
    """The open transactions recorded in ``__transaction_state``: per partition the leader's copy (else
    the one with the highest checkpointed HW) read to its log end, the last value per transactional id
    winning and a null value removing it, keys of an unknown version skipped, and (with the cluster
    metadata) ids of another partition skipped - as the coordinator's load. Raises CorruptRecordError
    naming the file and offset of a record that does not decode."""
    from pylog.replication.txn_log import TRANSACTION_STATE_TOPIC, decode_key, decode_value, \
        partition_for_transactional_id

    views = _replica_views(dirs)
    leaders = _leaders(root)
    try:
        meta = read_metadata_json(os.path.join(root, METADATA_FILE))
        counts = {t["name"]: t["partitions"] for t in meta.get("topics", [])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, PylogError):
        counts = {}
    n = counts.get(TRANSACTION_STATE_TOPIC)
    rows: List[OpenTransaction] = []
    for tp in sorted(t for t in views if t[0] == TRANSACTION_STATE_TOPIC):
        path, _hw = _pick_replica(views[tp], leaders.get(tp))
        last: Dict[str, Any] = {}
        log = Log.open(path, read_only=True)
        try:
            offset, end = log.log_start_offset, log.log_end_offset
            while offset < end:
                got = False
                for rec in log.read(offset, max_offset=end):
                    got = True
                    offset = rec.offset + 1
                    if rec.key is None:
                        continue
                    try:
                        tid = decode_key(rec.key)
                        if tid is None or (isinstance(n, int) and partition_for_transactional_id(tid, n) != tp[1]):
                            continue
                        value = decode_value(rec.value)
                    except CorruptRecordError as exc:
                        raise CorruptRecordError(f"{path} offset {rec.offset}: {exc}") from None
                    if value is None:
                        last.pop(tid, None)
                    else:
                        last[tid] = value
                if not got:
                    break
        finally:
            log.close()
        for tid, v in last.items():
            if v.state.kafka_name in OPEN_STATES:
                rows.append(OpenTransaction(tid, v.state.kafka_name, v.producer_id, v.producer_epoch,
                                            v.transaction_timeout_ms,
                                            None if v.start_timestamp_ms < 0 else v.start_timestamp_ms,
                                            tuple(sorted(v.partitions))))
    return rows


def add_parser(sub: Any) -> None:
    """Register the ``describe`` verb on the ``pylog`` command's subparsers."""
    s = sub.add_parser("describe", help="offsets, sizes and epochs of each partition (read-only)",
                       description="Per partition: log start/end, size, segments, leader epoch, recovery point, HW; "
                                   "leader, replicas and ISR for a cluster dir; then each consumer group's committed "
                                   "offset, log end and lag per partition (from __consumer_offsets); then each open "
                                   "transaction (from the running owner's coordinators, else from "
                                   "__transaction_state).")
    s.add_argument("dir", metavar="DIR")
    s.add_argument("--topic", action="append", metavar="TOPIC",
                   help="only this topic (repeatable); its consumer groups' lag lines and the open transactions "
                        "writing to it too")
    internal = s.add_mutually_exclusive_group()
    internal.add_argument("--include-internal", action="store_true",
                          help="also show internal topics (__consumer_offsets, ...), hidden by default")
    internal.add_argument("--exclude-internal", action="store_true",
                          help="hide internal topics (kafka-topics.sh's flag; the default here)")
