"""Finding partitions in a log directory or a cluster directory, and planning reads.

Driver-side half of the Spark data source, with no Spark import so that it
can be used and tested on its own.

Two layouts are understood:

* a **log directory** (one broker's ``log.dirs`` entry, or a directory written
  by :class:`pylog.Log`): ``<dir>/<topic>-<partition>/`` folders. When the
  directory has a ``replication-offset-checkpoint`` file, a partition is read
  below the high watermark recorded there (a partition missing from the file
  has a high watermark of 0); without that file everything up to the log end
  (every complete, CRC-valid batch) is readable;
* a **cluster directory**: ``<dir>/broker-<id>/`` log directories. Per
  partition the replica whose checkpointed high watermark is highest is read,
  below that high watermark (ties go to the replica with the longer log, then
  the lowest broker id).

Offsets follow Spark's Kafka source: ``{"topic": {"0": 23}}`` JSON with string
partition keys, ``-2`` for earliest and ``-1`` for latest.

Under ``kafka.isolation.level=read_committed`` "latest" is the partition's last
stable offset (:func:`last_stable_offset`, computed read-only from the
directory: the newest producer snapshot at or below the high watermark, then the
batch headers after it), so an open transaction is never planned.

Thread-safety: stateless functions. Complexity: O(partitions) log opens, each
O(segments) (see :meth:`pylog.Log.open` with ``read_only=True``).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from pylog.errors import (
    CorruptCheckpointError,
    CorruptRecordError,
    InvalidConfigurationError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO
from pylog.record import ATTR_CONTROL, ATTR_TRANSACTIONAL
from pylog.storage.log import Log
from pylog.storage.producer_state import SNAPSHOT_SUFFIX, decode_snapshot, snapshot_name
from pylog.storage.logdir import HW_CHECKPOINT_FILE, list_log_dirs, parse_partition_dir, partition_dirs

EARLIEST = -2
LATEST = -1

TopicPartition = Tuple[str, int]


@dataclass(frozen=True)
class PartitionState:
    """What the driver knows about one topic-partition when it plans a read.

    ``latest`` is the exclusive end a consumer may read up to: the high
    watermark when the directory records one, else the log end offset; under
    read_committed (``last_stable_offset`` set) the last stable offset below it.
    """

    topic: str
    partition: int
    dir: str  # the chosen replica's partition directory
    log_start_offset: int
    log_end_offset: int
    high_watermark: Optional[int]
    broker: Optional[int] = None
    last_stable_offset: Optional[int] = None  # read_committed only

    @property
    def latest(self) -> int:
        end = self.log_end_offset if self.high_watermark is None else min(self.high_watermark, self.log_end_offset)
        if self.last_stable_offset is not None:
            end = min(end, self.last_stable_offset)
        return max(self.log_start_offset, end)


def last_stable_offset(log: Log, high_watermark: Optional[int]) -> int:
    """The LSO of a log opened read-only: min(``high_watermark`` (None: the log end), the first offset of
    every transaction open at the log end and of every one whose marker is at or above the high
    watermark) - what :meth:`Log.last_stable_offset` answers on the writer, computed without writing.

    Reads the newest producer snapshot at or below the high watermark (its open transactions) and the
    batch headers after it (a transactional data batch opens its producer's transaction, a control batch
    of that producer ends it); a snapshot that does not decode is passed over for an older one, or the
    log start. Raises :class:`CorruptRecordError` (naming the file and byte) for a damaged batch after the
    snapshot. Complexity: O(bytes after the snapshot) header reads (a writer snapshots at every roll, so
    about one segment). Thread-safety: reads only; safe next to a writer process.
    """
    leo = log.log_end_offset
    hw = leo if high_watermark is None else min(high_watermark, leo)
    start = log.log_start_offset
    ongoing: Dict[int, int] = {}
    try:
        names = os.listdir(log.dir)
    except OSError:
        names = []
    snaps = sorted(int(n[:20]) for n in names
                   if n.endswith(SNAPSHOT_SUFFIX) and len(n) == 20 + len(SNAPSHOT_SUFFIX) and n[:20].isdigit())
    for off in reversed(snaps):
        if off > hw or off < start:
            continue
        path = os.path.join(log.dir, snapshot_name(off))
        try:
            with open(path, "rb") as f:
                entries = decode_snapshot(f.read(), path)
        except (OSError, CorruptRecordError):
            continue  # gone (a writer's cleanup) or damaged: an older one, or the log start
        ongoing = {e.producer_id: e.txn_first_offset for e in entries if e.txn_first_offset >= 0}
        start = off
        break
    lso = hw
    for info in log.read_batch_infos(start, leo):
        if info.magic != 2 or info.producer_id < 0:
            continue
        if info.attributes & ATTR_CONTROL:
            first = ongoing.pop(info.producer_id, None)
            if first is not None and info.base_offset >= hw:
                lso = min(lso, first)  # completed, but its marker is not below the high watermark yet
        elif info.attributes & ATTR_TRANSACTIONAL:
            ongoing.setdefault(info.producer_id, info.base_offset)
    for first in ongoing.values():
        lso = min(lso, first)
    return lso


def is_cluster_dir(path: str) -> bool:
    """True when ``path`` holds ``broker-<id>`` log directories (:func:`pylog.storage.logdir.list_log_dirs`)."""
    return _log_dirs(path)[0][0] is not None


def _log_dirs(path: str) -> List[Tuple[Optional[int], str]]:
    try:
        return list_log_dirs(path)
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidConfigurationError(f"log directory {path} does not exist") from None


def _read_hws(log_dir: str) -> Optional[Dict[TopicPartition, int]]:
    p = os.path.join(log_dir, HW_CHECKPOINT_FILE)
    if not os.path.exists(p):
        return None
    try:
        return checkpoint.read_offsets(FileIO(), p)
    except CorruptCheckpointError:
        raise


def list_topic_partitions(path: str) -> Dict[TopicPartition, List[Tuple[Optional[int], str]]]:
    """Every ``(topic, partition)`` found, with the (broker, partition dir) of each replica."""
    found: Dict[TopicPartition, List[Tuple[Optional[int], str]]] = {}
    for broker, ld in _log_dirs(path):
        for full in partition_dirs(ld):
            tp = parse_partition_dir(full)
            assert tp is not None  # partition_dirs lists only <topic>-<partition> names
            found.setdefault(tp, []).append((broker, full))
    return found


def _open_state(tp: TopicPartition, broker: Optional[int], pdir: str, hw: Optional[int],
                read_committed: bool = False) -> PartitionState:
    log = Log.open(pdir, read_only=True)
    try:
        lso = last_stable_offset(log, hw) if read_committed else None
        return PartitionState(tp[0], tp[1], pdir, log.log_start_offset, log.log_end_offset, hw, broker, lso)
    finally:
        log.close()


def describe(path: str, wanted: Iterable[TopicPartition], *,
             read_committed: bool = False) -> Dict[TopicPartition, PartitionState]:
    """State of each wanted partition, choosing the replica with the highest high watermark (with
    ``read_committed``: the highest last stable offset)."""
    replicas = list_topic_partitions(path)
    cluster = is_cluster_dir(path)
    hw_cache: Dict[str, Optional[Dict[TopicPartition, int]]] = {}
    out: Dict[TopicPartition, PartitionState] = {}
    for tp in wanted:
        cands = []
        for broker, pdir in replicas.get(tp, []):
            ld = os.path.dirname(pdir)
            if ld not in hw_cache:
                hw_cache[ld] = _read_hws(ld)
            hws = hw_cache[ld]
            if hws is None:
                hw = 0 if cluster else None
            else:
                hw = hws.get(tp, 0)
            cands.append(_open_state(tp, broker, pdir, hw, read_committed))
        if not cands:
            raise UnknownTopicOrPartitionError(f"partition {tp[0]}-{tp[1]} not found under {path}")
        cands.sort(key=lambda s: (-(s.latest), -s.log_end_offset, s.broker if s.broker is not None else -1))
        out[tp] = cands[0]
    return out


# ---------------------------------------------------------------------------
# Options: which partitions, which offsets
# ---------------------------------------------------------------------------


def select_partitions(path: str, options: Dict[str, str]) -> List[TopicPartition]:
    """Apply exactly one of ``subscribe``, ``subscribePattern``, ``assign`` (Kafka's rule).

    A topic named in ``subscribe`` that has no partition directory under
    ``path`` raises :class:`UnknownTopicOrPartitionError` unless the option
    ``failOnUnknownTopic`` is ``false`` (then it gives no rows until it
    appears; a stream picks it up from its earliest offset).
    """
    given = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(given) != 1:
        raise InvalidConfigurationError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be given "
            f"(got {len(given)}: {', '.join(given) or 'none'})"
        )
    kind = given[0]
    have = list_topic_partitions(path)
    if kind == "subscribe":
        topics = {t.strip() for t in options["subscribe"].split(",") if t.strip()}
        if not topics:
            raise InvalidConfigurationError("option 'subscribe' lists no topic")
        missing = sorted(topics - {tp[0] for tp in have})
        if missing and parse_bool(options, "failonunknowntopic", True):
            known = sorted({tp[0] for tp in have})
            raise UnknownTopicOrPartitionError(
                f"subscribed topic(s) {', '.join(missing)} not found under {path} (topics there: "
                f"{', '.join(known) or 'none'}); set the option failOnUnknownTopic=false to read them once they exist"
            )
        return sorted(tp for tp in have if tp[0] in topics)
    if kind == "subscribepattern":
        try:
            pat = re.compile(options["subscribepattern"])
        except re.error as exc:
            raise InvalidConfigurationError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
        return sorted(tp for tp in have if pat.fullmatch(tp[0]))
    try:
        spec = json.loads(options["assign"])
        wanted = sorted({(str(t), int(p)) for t, ps in spec.items() for p in ps})
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidConfigurationError(
            f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, got {options['assign']!r} ({exc})"
        ) from None
    for tp in wanted:
        if tp not in have:
            raise UnknownTopicOrPartitionError(f"assigned partition {tp[0]}-{tp[1]} not found under {path}")
    return wanted


def parse_offsets_json(text: str, what: str) -> Dict[TopicPartition, int]:
    """``{"t":{"0":23}}`` -> ``{("t", 0): 23}``; raises InvalidConfigurationError."""
    try:
        spec = json.loads(text)
        out = {}
        for t, parts in spec.items():
            for p, off in parts.items():
                if isinstance(off, bool) or not isinstance(off, int):
                    raise TypeError(f"offset {off!r} is not an integer")
                out[(str(t), int(p))] = off
        return out
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidConfigurationError(
            f"option {what!r} must be 'earliest', 'latest' or JSON like {{\"topic\":{{\"0\":23}}}}, "
            f"got {text!r} ({exc})"
        ) from None


def offsets_to_json(offsets: Dict[TopicPartition, int]) -> Dict[str, Dict[str, int]]:
    out: Dict[str, Dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def offsets_from_json(obj: Dict[str, Dict[str, int]]) -> Dict[TopicPartition, int]:
    return {(t, int(p)): int(o) for t, parts in obj.items() for p, o in parts.items()}


def resolve(
    spec: str, what: str, states: Dict[TopicPartition, PartitionState], *, allow_latest: bool, allow_earliest: bool
) -> Dict[TopicPartition, int]:
    """Turn ``earliest``/``latest``/JSON into concrete offsets for every partition in ``states``."""
    s = spec.strip()
    if s.lower() == "earliest":
        if not allow_earliest:
            raise InvalidConfigurationError(f"{what} can't be 'earliest'")
        return {tp: st.log_start_offset for tp, st in states.items()}
    if s.lower() == "latest":
        if not allow_latest:
            raise InvalidConfigurationError(f"{what} can't be 'latest' for batch queries (Kafka's rule)")
        return {tp: st.latest for tp, st in states.items()}
    given = parse_offsets_json(s, what)
    if set(given) != set(states):
        missing = sorted(set(states) - set(given))
        extra = sorted(set(given) - set(states))
        raise InvalidConfigurationError(
            f"when {what} holds specific offsets it must list every selected partition "
            f"(missing: {missing}, not selected: {extra})"
        )
    out = {}
    for tp, off in given.items():
        if off == EARLIEST:
            if not allow_earliest:
                raise InvalidConfigurationError(f"{what}: -2 (earliest) is not allowed for {tp[0]}-{tp[1]}")
            out[tp] = states[tp].log_start_offset
        elif off == LATEST:
            out[tp] = states[tp].latest
        elif off < 0:
            raise InvalidConfigurationError(f"{what}: offset {off} for {tp[0]}-{tp[1]} is not valid")
        else:
            out[tp] = off
    return out


def parse_timestamp(value: str, what: str) -> int:
    """A millisecond timestamp option (``startingTimestamp``/``endingTimestamp``): an int >= 0."""
    try:
        ts = int(str(value).strip())
    except ValueError:
        raise InvalidConfigurationError(
            f"option {what!r} must be a timestamp in milliseconds since the epoch, e.g. \"1700000000000\"; got {value!r}"
        ) from None
    if ts < 0:
        raise InvalidConfigurationError(f"option {what!r}: the timestamp cannot be negative, got {ts}")
    return ts


def resolve_timestamps(
    given: Dict[TopicPartition, int],
    what: str,
    states: Dict[TopicPartition, PartitionState],
    *,
    starting: bool,
    strategy: str = "error",
) -> Dict[TopicPartition, int]:
    """Kafka's ``offsetsForTimes`` per partition: the earliest offset whose timestamp is >= the given one.

    Only offsets below "latest" (the high watermark or log end) count. When
    no such offset exists: an ending bound becomes latest; a starting bound
    raises :class:`OffsetOutOfRangeError` (``strategy="error"``, Kafka's
    default for ``startingOffsetsByTimestampStrategy``) or becomes latest
    (``strategy="latest"``).

    Complexity: one read-only log open per partition plus Kafka's
    time-index lookup (O(log n) in the index, one batch scan).
    """
    if set(given) != set(states):
        missing = sorted(set(states) - set(given))
        extra = sorted(set(given) - set(states))
        raise InvalidConfigurationError(
            f"{what} must list every selected partition (missing: {missing}, not selected: {extra})"
        )
    out: Dict[TopicPartition, int] = {}
    for tp, ts in sorted(given.items()):
        if ts < 0:
            raise InvalidConfigurationError(f"{what}: the timestamp for {tp[0]}-{tp[1]} cannot be negative, got {ts}")
        st = states[tp]
        log = Log.open(st.dir, read_only=True)
        try:
            found = log.offset_for_time(ts)
        finally:
            log.close()
        if found is not None and found < st.latest:
            out[tp] = max(found, st.log_start_offset)
        elif not starting or strategy == "latest":
            out[tp] = st.latest
        else:
            raise OffsetOutOfRangeError(
                f"{what}: no record of {tp[0]}-{tp[1]} in {st.dir} has a timestamp >= {ts} (below offset {st.latest}); "
                "set the option startingOffsetsByTimestampStrategy=latest to start at the latest offset instead"
            )
    return out


def split_max_records(ranges: List[Range], max_records: Optional[int]) -> List[Range]:
    """Cut every range into ``ceil(size / max_records)`` nearly equal pieces (Kafka's maxRecordsPerPartition)."""
    if not max_records:
        return ranges
    out: List[Range] = []
    for r in ranges:
        parts = max(1, -(-r.size // max_records))
        for i in range(parts):
            a = r.start + r.size * i // parts
            b = r.start + r.size * (i + 1) // parts
            if b > a:
                out.append(Range(r.topic, r.partition, r.dir, a, b))
    return out


@dataclass(frozen=True)
class Range:
    """An offset range ``[start, end)`` of one partition, read from replica ``dir``."""

    topic: str
    partition: int
    dir: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: List[Range], min_partitions: Optional[int]) -> List[Range]:
    """Split big ranges so there are about ``min_partitions`` of them (Kafka's minPartitions).

    Each range gets a share of ``min_partitions`` proportional to its size
    (at least one), and is cut into that many nearly equal offset ranges.
    The pieces cover every offset of the input exactly once.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: List[Range] = []
    for r in ranges:
        parts = max(1, min(r.size, int(r.size * min_partitions / total + 0.5)))  # Math.round
        for i in range(parts):
            a = r.start + r.size * i // parts
            b = r.start + r.size * (i + 1) // parts
            if b > a:
                out.append(Range(r.topic, r.partition, r.dir, a, b))
    return out


def check_start(
    tp: TopicPartition, start: int, state: PartitionState, fail_on_data_loss: bool
) -> Tuple[int, Optional[str]]:
    """Move ``start`` up to the log start when retention removed offsets below it.

    Returns the start to use and a data-loss message (None when nothing was
    lost); raises :class:`OffsetOutOfRangeError` when ``fail_on_data_loss``.
    """
    if start >= state.log_start_offset:
        return start, None
    msg = (
        f"offsets [{start}, {state.log_start_offset}) of {tp[0]}-{tp[1]} are no longer in {state.dir}: "
        f"the log start offset is now {state.log_start_offset} (removed by retention or delete_records)"
    )
    if fail_on_data_loss:
        raise OffsetOutOfRangeError(msg + ". Set the option failOnDataLoss=false to skip them.")
    return state.log_start_offset, msg


def parse_bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    v = options.get(key)
    if v is None:
        return default
    v = str(v).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise InvalidConfigurationError(f"option {key!r} must be true or false, got {v!r}")


def parse_positive_int(options: Dict[str, str], key: str) -> Optional[int]:
    v = options.get(key)
    if v is None:
        return None
    try:
        n = int(str(v).strip())
    except ValueError:
        n = 0
    if n <= 0:
        raise InvalidConfigurationError(f"option {key!r} must be a positive integer, got {v!r}")
    return n


def isolation_level(options: Dict[str, str]) -> str:
    """``read_uncommitted`` (default) or ``read_committed``, from ``kafka.isolation.level``/``isolation.level``."""
    v = options.get("kafka.isolation.level") or options.get("isolation.level") or "read_uncommitted"
    v = v.strip().lower()
    if v not in ("read_uncommitted", "read_committed"):
        raise InvalidConfigurationError(
            f"option 'kafka.isolation.level' must be read_uncommitted or read_committed, got {v!r}"
        )
    return v
