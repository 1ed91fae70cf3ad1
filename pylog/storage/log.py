"""One partition's log (Kafka's ``UnifiedLog``) over its segments (:mod:`pylog.storage.local_log`).

>>> import tempfile, os, pylog
>>> d = tempfile.mkdtemp()
>>> log = pylog.Log.open(os.path.join(d, "orders-0"))
>>> log.append([b"a", b"b"]).last_offset
1
>>> [r.value for r in log.read(0)]
[b'a', b'b']
>>> log.close()

Offsets are dense and strictly increasing; every append is one batch (or the
caller's batches), written whole or not at all. Segments roll on
``segment_bytes``/``segment_ms``; the log start offset moves with retention
and :meth:`Log.delete_records_before`; :meth:`Log.truncate_to` removes a
suffix (replicas use it to drop a divergent tail).

Every append takes one pipeline: a validator checks (and for a leader
stamps) the batches - one C call for one batch, one C walk for a
follower's chunk, a scan for anything else - then one write path
(``_write_validated``). The log owns the idempotent-producer state
(:attr:`Log.producer_state`, :mod:`pylog.storage.producer_state`):
:meth:`Log.append_as_leader` validates a client's batch against it, every
write records its producer ids, a roll snapshots it, truncation reloads it
and recovery rebuilds it; nothing above storage keeps it. Transactions live
there too: :meth:`Log.append_marker` writes COMMIT/ABORT control batches, an
abort adds an entry to its segment's ``.txnindex``, and
:attr:`Log.first_unstable_offset`, :meth:`Log.last_stable_offset` and
:meth:`Log.aborted_transactions` answer a read_committed fetch (see
docs/transactions.md, "The partition side").

Durability (see docs/durability.md):

* after :meth:`append` returns, the batch is in the OS page cache: it survives
  a crash of this process, not a power loss or OS crash;
* after :meth:`flush` returns (or an append under ``flush_messages=1``),
  everything up to :attr:`log_end_offset` survives power loss;
* ``flush_messages=N`` / ``flush_ms=T`` flush after N records / T ms, so a
  power loss can cost at most the records since the last flush (``flush_ms``
  is checked on append and by :meth:`flush_if_due`, which a cluster's
  periodic maintenance calls, so an idle log's tail is flushed too);
* a clean :meth:`close` flushes, checkpoints and writes the clean-shutdown
  marker, so reopening scans nothing; after a crash, reopening validates the
  log from the offset-index entry at or below the recovery point and
  truncates a torn tail;
* producer snapshots are written atomically (temp file, fsync, rename) at
  a roll and a clean close; one past the log end after a crash is deleted
  on open, and the state is rebuilt from the newest valid snapshot plus the
  batches after it.

Thread-safety: every public method takes the log's lock, so one Log may be
shared by threads. Another process may open the same partition with
``read_only=True`` and read while this one appends; it never sees a torn
batch (framing and CRC are checked on every read).
"""
from __future__ import annotations

import functools
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING, Callable, Iterator, List, Literal, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union,
)

from sortedcontainers import SortedDict

from pylog.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    InvalidConfigurationError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    PylogError,
    RecordTooLargeError,
)
from pylog.metrics import RateMeter
from pylog.storage import checkpoint
from pylog.storage.epoch_cache import LeaderEpochCache
from pylog.storage.fileio import FileIO
from pylog.storage.local_log import LocalLog
from pylog.storage.log_config import CLEANUP_POLICIES, LogConfig, validate_topic  # (re-exported here)
from pylog.storage.loader import RecoveryResult, check_segments, load_segments, recover
from pylog.storage.logdir import LogDir, parse_partition_dir
from pylog.storage.aborted_txns import collect_aborted_transactions
from pylog.storage.control_record import ControlRecordType, EndTransactionMarker, marker_of_batch
from pylog.storage.producer_state import ProducerBatch, ProducerStateManager
from pylog.storage.txn_index import AbortedTxn, TransactionIndex
from pylog.record import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    BATCH_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    BatchInfo,
    Record,
    RecordBatch,
    RecordInput,
    encode_batch,
    scan,
    set_base_offset,
)
from pylog.record.codec import encode_values_at
from pylog.record.framing import batch_length_of, check_one, leader_epoch_of, stamp_one
from pylog.storage.segment import LogSegment
from pylog.storage.segment_cache import SegmentCache

if TYPE_CHECKING:
    from pylog.metrics import Metric

_logger = logging.getLogger(__name__)
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
T = TypeVar("T")




class AppendResult(NamedTuple):
    """Where an append landed: ``base_offset``..``last_offset`` inclusive."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    position: int
    records_count: int




def _producer_batches(batches: Sequence[BatchInfo], data: Union[bytes, bytearray, memoryview, None] = None,
                      path: Optional[str] = None) -> List[ProducerBatch]:
    """The batches of ``batches`` the producer state takes: idempotent ones and, when ``data`` (the
    bytes the infos' positions point into) is given, control batches with their marker."""
    out = []
    origin = batches[0].position if batches else 0  # ``data`` may be a slice starting at the first batch
    for b in batches:
        if b.producer_id < 0:
            continue
        if b.attributes & 0x20 and b.magic == 2:
            if data is not None:
                out.append(_control_batch(data, b, path, b.position - origin))
        elif b.base_sequence >= 0 or b.attributes & 0x10:
            out.append(ProducerBatch(b.producer_id, b.producer_epoch, b.base_sequence, b.base_offset, b.last_offset,
                                     b.max_timestamp, b.attributes))
    return out


def _control_batch(data: Union[bytes, bytearray, memoryview], b: BatchInfo, path: Optional[str] = None,
                   position: Optional[int] = None) -> ProducerBatch:
    """A control batch of ``data`` (at ``position``, default ``b.position``) with its marker decoded."""
    pos = b.position if position is None else position
    view = memoryview(data)[pos : pos + b.size]
    marker = marker_of_batch(RecordBatch(b, view, path))
    return ProducerBatch(b.producer_id, b.producer_epoch, b.base_sequence, b.base_offset, b.last_offset,
                         b.max_timestamp, b.attributes, marker)


def _has_txn_batch(batches: Sequence[BatchInfo]) -> bool:
    return any(b.attributes & 0x30 and b.producer_id >= 0 and b.magic == 2 for b in batches)


def _require_keys(records: Sequence[RecordInput], topic: str, partition: int) -> None:
    """A compacted log refuses records without a key (Kafka's LogValidator)."""
    for i, r in enumerate(records):
        if not isinstance(r, Record) or r.key is None:
            raise InvalidRecordError(
                f"record {i} for compacted topic {topic}-{partition} has no key: "
                "a log with cleanup_policy 'compact' needs a key on every record"
            )


def _require_batch_keys(buf: bytearray, batches: List[BatchInfo], topic: str, partition: int) -> None:
    view = memoryview(buf)
    for info in batches:
        batch = RecordBatch(info, view[info.position : info.position + info.size])
        if batch.is_control:
            continue
        for rec in batch.records():
            if rec.key is None:
                raise InvalidRecordError(
                    f"record at batch offset {info.base_offset} for compacted topic {topic}-{partition} has no key: "
                    "a log with cleanup_policy 'compact' needs a key on every record"
                )


@dataclass
class CleanerStats:
    """What the log cleaner did to this log since it was opened (for metrics)."""

    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    last_clean_ms: int = -1


def _storage_errors(what: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Turn an OSError from the disk into KafkaStorageError naming the partition."""

    def deco(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(self: "Log", *args: object, **kwargs: object) -> T:
            try:
                return fn(self, *args, **kwargs)
            except OSError as exc:
                self._raise_storage_error(exc, what)

        return wrapper

    return deco


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log(LocalLog):
    """One partition: append, read by offset or time, truncate, retain, recover (Kafka's ``UnifiedLog``
    over the segments of :class:`~pylog.storage.local_log.LocalLog`)."""

    #: Log.open(repair=True): truncate at a damaged middle segment or a hole instead of refusing
    _repair = False

    def __init__(self) -> None:  # use Log.open()
        raise TypeError("use pylog.Log.open(path, ...) to open a log")

    # ------------------------------------------------------------------ open
    @classmethod
    def open(
        cls,
        path: Union[str, "os.PathLike[str]"],
        *,
        read_only: bool = False,
        file_io: Optional[FileIO] = None,
        clock_ms: Optional[Callable[[], int]] = None,
        repair: bool = False,
        **config: object,
    ) -> "Log":
        """Open (creating when needed) the partition directory ``path``.

        ``path`` must be named ``<topic>-<partition>`` as in a Kafka log dir
        (e.g. ``/data/orders-0``). Its parent (``/data``) becomes a Kafka log
        directory (an entry of ``log.dirs``), shared by every partition opened
        under it; a writer creates or replaces there, and only there:

        * ``.lock`` - an fcntl lock held while a writer has any partition of
          ``/data`` open (a second writer process gets LogDirLockedError);
        * ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``
          - one line per partition of ``/data`` (written atomically);
        * ``cleaner-offset-checkpoint`` - only for compacted partitions;
        * ``.kafka_cleanshutdown`` - removed while a writer is open, written when
          the last partition closes cleanly.

        Inside ``path``: the segments (``.log``, ``.index``, ``.timeindex``),
        ``leader-epoch-checkpoint`` and producer snapshots. ``read_only=True``
        writes nothing anywhere. ``pylog.open("/data")`` later adopts such
        partition folders into its broker (pylog/storage/adopt.py) rather than ignoring
        them. Settings are those of :class:`LogConfig`.

        Raises :class:`LogDirLockedError` when another writer has the log
        directory, :class:`InvalidTopicError` for a bad directory name,
        :class:`InvalidConfigurationError` for a bad setting and
        :class:`KafkaStorageError` when the disk fails.

        Damage that is not a torn write - invalid bytes in a segment followed
        by segments holding data, or a hole between segments (a deleted,
        emptied or cut middle ``.log``) - raises :class:`CorruptRecordError`
        naming the file and the missing offsets, and changes no segment. With
        ``repair=True`` the log is truncated at the damage instead and every
        later segment deleted (what ``pylog verify --repair`` does); see
        docs/durability.md.

        Complexity: O(segments) after a clean shutdown; otherwise plus a scan
        of the bytes past the recovery point.
        """
        self = object.__new__(cls)
        self._repair = bool(repair)
        try:
            self._init(os.fspath(path), read_only, file_io or FileIO(), clock_ms or _wall_clock_ms,
                       LogConfig.from_kwargs(**config))
        except OSError as exc:
            if isinstance(exc, KafkaStorageError):
                raise
            where = f" ({exc.filename})" if exc.filename else ""
            raise KafkaStorageError(exc.errno, f"opening {os.fspath(path)} failed: {exc.strerror or exc}{where}") from exc
        return self

    def _init(self, path: str, read_only: bool, io: FileIO, clock: Callable[[], int], config: LogConfig) -> None:
        tp = parse_partition_dir(path)
        if tp is None:
            raise InvalidTopicError(
                f"{path!r}: a partition directory must be named <topic>-<partition> "
                "(Kafka's layout), e.g. /data/orders-0"
            )
        validate_topic(tp[0])
        self.dir = os.path.abspath(path)
        self.topic, self.partition = tp
        self.config = config
        self.read_only = read_only
        self.io = io
        self.clock_ms = clock
        self._lock = threading.RLock()
        #: at most config.max_open_segments segments hold descriptors and maps (the active one always)
        self._segment_cache = SegmentCache(config.max_open_segments, lock=self._lock, keep=self._keeps_open)
        self._compact_of: Optional[LogConfig] = None  # the config _compact was computed from
        #: idempotent-producer state, loaded by the first use of :attr:`producer_state`
        self._producers: Optional[ProducerStateManager] = None
        #: the offset of a marker just written whose .txnindex entry could not be (see _undo_marker)
        self._txn_index_failed_at: Optional[int] = None
        #: client batches :meth:`append_as_leader` recognised as retries and did not write again
        self.duplicate_appends_total = 0
        self._compact = False
        self._closed = False
        self._logdir: Optional[LogDir] = None
        self.recovery: Optional[RecoveryResult] = None
        # Metrics (counters since this object was opened) and the cleaner's bookkeeping.
        self.appended_records_total = 0
        self.appended_bytes_total = 0
        # Kafka's MessagesInPerSec / BytesInPerSec: windowed rates (two 30 s samples).
        self._append_records_rate = RateMeter()
        self._append_bytes_rate = RateMeter()
        self.cleaner_stats = CleanerStats()
        # Consumer-aware retention: no segment holding an offset >= this is deleted.
        self.retention_protect_from: Optional[int] = None
        # Replicated logs: the replica's high watermark (set by its replica manager); retention
        # never deletes a segment holding an offset at or above it (Kafka's deletableSegments).
        self.retention_high_watermark: Optional[Callable[[], int]] = None
        self.last_maintenance_ms: Optional[int] = None  # pylog.runtime.log_maintenance's schedule
        #: earliest tombstone delete horizon (the cleaner's; "unknown" until it looks)
        self._cleaner_next_horizon: Union[int, None, Literal["unknown"]] = "unknown"
        parent = os.path.dirname(self.dir)
        if read_only:
            if not os.path.isdir(self.dir):
                raise KafkaStorageError(f"partition directory {self.dir} does not exist")
            self._load_read_only()
            return
        if os.path.exists(self.dir) and not os.path.isdir(self.dir):
            raise KafkaStorageError(f"partition path {self.dir} is a file, not a directory")
        self._logdir = LogDir.acquire(parent, io)
        try:
            needs_recovery = self._logdir.register(tp)
            try:
                self._load(needs_recovery)
            except BaseException:
                for seg in getattr(self, "segments", {}).values():
                    try:
                        seg.close()
                    except OSError:
                        pass
                self._logdir.mark_dirty(tp)  # not recovered: the next open must check it again
                self._logdir.unregister(tp)
                raise
        except BaseException:
            self._logdir.release()
            raise

    def _load(self, needs_recovery: bool) -> None:
        io, tp, ld = self.io, (self.topic, self.partition), self._logdir
        assert ld is not None
        try:
            created = not io.exists(self.dir)
            io.makedirs(self.dir)
            if created:  # the new directory's entry must be durable before its records are
                io.fsync_dir(os.path.dirname(self.dir))
        except OSError as exc:
            raise KafkaStorageError(f"cannot create partition directory {self.dir}: {exc.strerror}") from exc
        now = self.clock_ms()
        recovery_point = ld.recovery_points.get(tp, 0)
        if created:
            # A directory this call made holds nothing to list, load or recover (no segment, no
            # epoch, no snapshot): the log starts empty, and the only file it makes is its first
            # .log. Not even an empty leader-epoch checkpoint - a missing one reads as empty, and
            # an empty log recreated after a power loss is the same log (docs/durability.md,
            # "Creating partitions").
            needs_recovery = False
        self.recovery = RecoveryResult(self.dir, clean_shutdown=not needs_recovery, recovery_point=recovery_point)
        #: this open made the directory: no snapshot can be in it but those this object writes
        self._created_dir = created
        if created:
            self.segments: SortedDict = SortedDict()
            self.epochs = LeaderEpochCache()
        else:
            self.segments = load_segments(
                io, self.dir, index_interval_bytes=self.config.index_interval_bytes, read_only=False, now_ms=now,
                result=self.recovery, cache=self._segment_cache,
            )
            epoch_path = os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT)
            try:
                self.epochs = LeaderEpochCache(checkpoint.read_epochs(io, epoch_path))
            except CorruptCheckpointError:
                self.epochs = LeaderEpochCache()
                needs_recovery = True
                recovery_point = self.recovery.recovery_point = 0  # rebuild the cache from every batch
            if not needs_recovery:  # a clean shutdown fsynced every segment before its marker
                for seg in self.segments.values():
                    seg.log_synced = True
        if needs_recovery and self.segments:
            rebuilt = LeaderEpochCache([(e, s) for e, s in self.epochs.entries if s < recovery_point])
            self.epochs = rebuilt

            def on_batches(batches: List[BatchInfo]) -> None:
                for b in batches:
                    if b.magic == 2:
                        self.epochs.assign(b.partition_leader_epoch, b.base_offset)

            recover(self.segments, self.recovery, on_batches, repair=self._repair)
        checkpointed_start = ld.log_start_offsets.get(tp, 0)
        if self.segments:
            check_segments(self.segments, self.recovery, log_start=checkpointed_start, compacted=self.config.compact,
                           repair=self._repair, recovery_point=ld.recovery_points.get(tp, 0))
        if self.segments and self.segments.peekitem(-1)[1].next_offset() < checkpointed_start:
            # Every record is below the durable log start (the tail was lost or
            # files were removed): restart the log empty there, as Kafka's
            # LogLoader does, rather than move the log start backwards.
            for base in list(self.segments.keys()):
                self.segments.pop(base).delete()
                self.recovery.segments_deleted.append(base)
            io.fsync_dir(self.dir)
            self.epochs.clear()
            needs_recovery = True
        if not self.segments:
            self.segments[checkpointed_start] = self._new_segment(checkpointed_start, in_new_directory=created)
            io.fsync_dir(self.dir)  # as roll() does for every later segment file
        self.active_segment.map_limit = self.config.segment_bytes
        self.log_end_offset = self.active_segment.next_offset()
        self.log_start_offset = max(ld.log_start_offsets.get(tp, 0), self.segments.keys()[0])
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset) if needs_recovery else self.log_end_offset
        # Kafka's LogLoader: drop epochs past the log end, then move the first
        # one up to the log start (a rebuild from batches can start below it).
        changed = self.epochs.truncate_from_end(self.log_end_offset)
        changed = self.epochs.truncate_from_start(self.log_start_offset) or changed
        if changed or needs_recovery:
            self._write_epochs()
        if needs_recovery:
            # A producer snapshot past the recovered log end describes records that are gone: drop
            # it now, before appends reuse those offsets (the state itself loads on first use).
            ProducerStateManager(self.dir, io).delete_snapshots_above(self.log_end_offset)
            self._recover_txn_indexes(recovery_point)
        with ld.lock:  # another partition's thread may be writing the checkpoints (iterating these)
            ld.recovery_points[tp] = self.recovery_point
            ld.log_start_offsets[tp] = self.log_start_offset
        ld.recovered(tp)
        self._unflushed_messages = 0
        self._last_flush_ms = now
        self._last_checkpoint_ms = now

    def _recover_txn_indexes(self, recovery_point: int) -> None:
        """After a crash: the ``.txnindex`` of every segment from the one holding the recovery point on
        loses the entries past the segment's records; a damaged one is emptied and the producer
        snapshots from its segment on deleted, so the producer-state load (which replays every
        marker after its snapshot into the indexes, :meth:`_index_aborted_txn`) rebuilds it. Entries
        below a snapshot are durable: a snapshot is written after the segments below it were fsynced."""
        keys = self.segments.keys()
        psm = ProducerStateManager(self.dir, self.io)
        for i in range(max(0, self.segments.bisect_right(recovery_point) - 1), len(keys)):
            base = keys[i]
            end = keys[i + 1] if i + 1 < len(keys) else self.log_end_offset
            idx = self.segments[base].txn_index
            try:
                idx.sanity_check()
                idx.truncate_to(end)
            except CorruptIndexError as exc:
                _logger.warning("%s-%d: rebuilding damaged transaction index (%s)", self.topic, self.partition, exc)
                idx.reset()
                psm.delete_snapshots_above(base)

    def _load_read_only(self) -> None:
        self.segments = load_segments(
            self.io, self.dir, index_interval_bytes=self.config.index_interval_bytes, read_only=True, now_ms=self.clock_ms(),
            cache=self._segment_cache,
        )
        self.epochs = LeaderEpochCache()
        ld_path = os.path.dirname(self.dir)
        try:
            starts = checkpoint.read_offsets(self.io, os.path.join(ld_path, "log-start-offset-checkpoint"))
        except CorruptCheckpointError:
            starts = {}
        if len(self.segments) > 1 and self.active_segment.size == 0:
            # An empty last .log inside the previous segment's offsets is a roll that failed
            # and could not remove its file (the writer's next open deletes it): it must not
            # end this reader's view of the log at its base offset.
            base, empty = self.segments.peekitem(-1)
            if base < self.segments.peekitem(-2)[1].next_offset():
                self.segments.popitem(-1)
                empty.close()
        if self.segments:
            self.log_end_offset = self.active_segment.next_offset()
            first = self.segments.keys()[0]
        else:
            self.log_end_offset = first = 0
        self.log_start_offset = min(max(starts.get((self.topic, self.partition), 0), first), self.log_end_offset)
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self._last_checkpoint_ms = 0

    def refresh(self) -> None:
        """Read-only logs: pick up segments and batches another process appended since."""
        with self._lock:
            self._ensure_open()
            if not self.read_only:
                return
            old = self.segments
            self._load_read_only()  # on an error the old view stays usable
            for seg in old.values():
                seg.close()

    def reconfigure(self, config: LogConfig) -> None:
        """Apply new settings to the open log (an altered topic config), as Kafka's
        ``UnifiedLog.updateConfig``: later appends, rolls, flushes, retention and cleaning use
        them; segments already written keep their index interval. ``config`` is validated first.

        Complexity: O(1). Durability: nothing is written. Thread-safety: takes the log's lock.
        """
        if not isinstance(config, LogConfig):
            raise InvalidConfigurationError(f"{self.dir}: reconfigure() takes a LogConfig, not {type(config).__name__}")
        config.validate()
        with self._lock:
            self._ensure_open()
            self.config = config
            self._segment_cache.resize(config.max_open_segments)
            if not self.read_only:
                self.active_segment.map_limit = config.segment_bytes

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    # ---------------------------------------------------------------- append
    def append(
        self,
        records: Sequence[RecordInput],
        *,
        leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        compression: Union[str, int, None] = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        compression_level: Optional[int] = None,
    ) -> AppendResult:
        """Append ``records`` as one batch at the log end; returns its offsets.

        ``compression`` names the codec and ``compression_level`` its level
        (KIP-390; None: Kafka's default for the codec, see
        :func:`pylog.record.compression.compress`).

        Items are bytes-like values or :class:`Record` objects. Raises
        :class:`InvalidRecordError` for a bad item and
        :class:`RecordTooLargeError` when the batch exceeds
        ``max_message_bytes``; in both cases nothing is written.

        The usual call - a ``list`` of ``bytes`` values, no producer id, no
        compression, a topic that is not compacted - is one C call that
        encodes and seals the batch straight from the list's items
        (:func:`~pylog.record.codec.encode_values_at`), then the shared
        write path; anything else takes the general encoder. Both write the
        same bytes.

        Complexity: O(bytes). Durability: see the module docstring - the
        batch is in the page cache when this returns (it survives a crash
        of this process), on disk after the next :meth:`flush` (fsync), a
        roll or :meth:`close`; nothing is held back in a user-space buffer.
        Thread-safety: takes the log's lock.
        """
        if (records.__class__ is list and compression is None and producer_id == -1 and producer_epoch == -1
                and base_sequence == -1 and transactional is False and leader_epoch.__class__ is int
                and compression_level is None):
            fast = self._append_values(records, leader_epoch)
            if fast is not None:
                return fast
        if isinstance(records, (bytes, bytearray, memoryview, str, Record)) or records is None:
            raise InvalidConfigurationError("append() takes a list of records; wrap a single record in a list")
        try:
            records = list(records)
        except TypeError:
            raise InvalidConfigurationError(
                f"append() takes a list of records, not {type(records).__name__} ({self.topic}-{self.partition})"
            ) from None
        for name, v in (("leader_epoch", leader_epoch), ("producer_id", producer_id),
                        ("producer_epoch", producer_epoch), ("base_sequence", base_sequence)):
            if v.__class__ is not int and (not isinstance(v, int) or isinstance(v, bool)):
                raise InvalidConfigurationError(
                    f"append(): {name} must be an int, not {type(v).__name__} ({v!r:.40}) ({self.topic}-{self.partition})")
        if self.config.compact:
            _require_keys(records, self.topic, self.partition)
        with self._lock:
            self._ensure_writable()
            batch = encode_batch(
                records,
                now_ms=self.clock_ms(),
                base_offset=self.log_end_offset,
                partition_leader_epoch=leader_epoch,
                compression=compression,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                transactional=transactional,
                compression_level=compression_level,
            )
            found = scan(batch, verify_crc=False)
            return self._append_validated(batch, found.batches)

    def _append_values(self, records: List[RecordInput], leader_epoch: int) -> Optional[AppendResult]:
        """:meth:`append`'s plain case: the batch encoded and sealed in one C call from the list's
        items, its header known without a scan (offsets ``log_end_offset`` onwards, every
        timestamp the clock's now), then :meth:`_write_validated`. None, having done nothing, when
        the list is not all ``bytes`` (or is empty, or too big for one call), or the topic is
        compacted (the general path then refuses key-less records precisely)."""
        with self._lock:
            if self._closed or self.read_only:
                self._ensure_writable()
            if self._is_compacted():
                return None
            base = self.log_end_offset
            now = self.clock_ms()
            buf = encode_values_at(records, now, base, leader_epoch)
            if buf is None:
                return None
            last = base + len(records) - 1
            return self._write_validated(buf, base, last, now, last, len(records), ((leader_epoch, base),),
                                         (len(buf), base))

    def append_as_leader(self, records: Union[bytes, bytearray, memoryview, Sequence[RecordInput]], *,
                         leader_epoch: int) -> AppendResult:
        """A leader's append of a produce request (Kafka's ``UnifiedLog.appendAsLeader``, origin CLIENT).

        ``records`` is one encoded RecordBatch v2 (bytes-like: exactly one
        batch, Kafka's rule for a produce request, else
        :class:`InvalidRecordError`) or a list of values / Records to encode
        here. The batch gets the next offsets and ``leader_epoch``. A batch
        with a producer id and sequence is validated against this log's
        :attr:`producer_state` before anything is written: a retry of one
        of the producer's last 5 batches is not written again and its
        original offsets come back (``position`` -1;
        :attr:`duplicate_appends_total` counts them); an out-of-order
        sequence or a fenced epoch raises OutOfOrderSequenceError /
        InvalidProducerEpochError. One descent: validate and stamp, write,
        record the producer state, roll (with its snapshot) - nothing for
        the caller to do afterwards.

        Complexity: O(bytes) (the CRC) + O(1). Durability: see the module
        docstring. Thread-safety: takes the log's lock.
        """
        if not isinstance(records, (bytes, bytearray, memoryview)):
            return self.append(list(records), leader_epoch=leader_epoch)
        n = len(records)
        if n < BATCH_OVERHEAD or batch_length_of(records) + 12 != n:
            raise InvalidRecordError(
                f"produce to {self.topic}-{self.partition}: a request must carry exactly one RecordBatch v2 "
                f"({n} bytes given)")
        ps = self._producers if self._producers is not None else self.producer_state
        if not self._is_compacted():  # the usual request, straight to the one-batch validator
            one = self._append_one(bytearray(records), True, leader_epoch, ps)
            if one is not None:
                return one
        return self._append_bytes(records, True, leader_epoch, ps)

    def append_batches(
        self, data: Union[bytes, bytearray, memoryview], *, assign_offsets: bool = True, leader_epoch: Optional[int] = None,
    ) -> AppendResult:
        """Append already-encoded RecordBatch v2 bytes (from a producer or a leader).

        With ``assign_offsets`` (a leader appending a producer's batches) the
        batches get consecutive offsets from the log end and, when given,
        ``leader_epoch``. Without it (a follower copying the leader: Kafka's
        ``appendAsFollower``) their offsets are kept and must start at or
        after the log end. Every batch is CRC-checked first; an invalid one
        raises CorruptRecordError and nothing is written. Either way the
        batches' producer ids and sequences go into :attr:`producer_state`
        (when loaded), so a follower deduplicates once it leads; nothing is
        validated against it here (:meth:`append_as_leader` does that).

        Complexity: O(bytes) (the CRC) + O(batches). Durability: see the
        module docstring. Thread-safety: takes the log's lock.
        """
        try:
            return self._append_bytes(data, assign_offsets, leader_epoch, None)
        except OSError:
            if self._txn_index_failed_at is not None:
                with self._lock:
                    self._undo_marker()
            raise

    def _append_bytes(self, data: Union[bytes, bytearray, memoryview], assign_offsets: bool,
                      leader_epoch: Optional[int], client: Optional[ProducerStateManager]) -> AppendResult:
        """The pipeline for encoded batches: validate and stamp (one of three validators, from the
        fastest that applies), then :meth:`_write_validated`. ``client``: the producer state a
        leader validates a client batch against before writing (None: no validation)."""
        if not assign_offsets:
            fetched = self._append_fetched(data)
            if fetched is not None:
                return fetched
        buf = bytearray(data)
        if not assign_offsets or not self._is_compacted():  # (a compacted topic's leader checks keys)
            one = self._append_one(buf, assign_offsets, leader_epoch, client)
            if one is not None:
                return one
        found = scan(buf, verify_crc=True)
        if not found.ok or found.valid_bytes != len(buf) or not found.batches:
            raise CorruptRecordError(
                f"append to {self.topic}-{self.partition}: invalid batch ({found.reason})", position=found.valid_bytes
            )
        if any(b.magic != 2 for b in found.batches):
            raise CorruptRecordError(f"append to {self.topic}-{self.partition}: only magic 2 batches can be appended")
        with self._lock:
            self._ensure_writable()
            if assign_offsets:
                if self.config.compact:
                    _require_batch_keys(buf, found.batches, self.topic, self.partition)
                epoch = leader_epoch if leader_epoch is not None else found.batches[0].partition_leader_epoch
                nxt = self.log_end_offset
                set_base_offset(buf, nxt, epoch)
                # The new offsets and epoch of each batch, as set_base_offset wrote them (no rescan).
                infos = []
                for b in found.batches:
                    span = b.last_offset - b.base_offset
                    infos.append(b._replace(base_offset=nxt, last_offset=nxt + span, partition_leader_epoch=epoch))
                    nxt += span + 1
                if client is not None:
                    for pb in _producer_batches(infos):
                        dup = self._duplicate_of(client, pb)
                        if dup is not None:
                            return dup
                    if any(b.attributes & 0x20 for b in infos):
                        raise InvalidRecordError(
                            f"produce to {self.topic}-{self.partition}: a client may not write control batches")
                return self._append_validated(buf, infos)
            if found.batches[0].base_offset < self.log_end_offset:
                raise self._below_end(found.batches[0].base_offset)
            if len(buf) > self.config.segment_bytes and len(found.batches) > 1:
                return self._append_across_segments(buf, found.batches)
            return self._append_validated(buf, found.batches, follower=True)

    def _duplicate_of(self, ps: ProducerStateManager, batch: ProducerBatch) -> Optional[AppendResult]:
        """The original offsets when ``batch`` retries one the producer state retains, else None
        (raises for a fenced epoch or a sequence out of order)."""
        dup = ps.validate(batch)
        if dup is None:
            return None
        self.duplicate_appends_total += 1
        return AppendResult(dup.first_offset, dup.last_offset, dup.timestamp, -1,
                            dup.last_offset - dup.first_offset + 1)

    def _append_fetched(self, data: Union[bytes, bytearray, memoryview]) -> Optional[AppendResult]:
        """A follower's append of fetched batches (:meth:`append_batches` without
        ``assign_offsets``), the usual case: one C walk (framing, magic,
        increasing offsets, CRC) over the caller's bytes, no copy, no
        :class:`BatchInfo` objects. Returns None, having written nothing, for
        anything unusual (an invalid batch, a legacy one, a chunk to split
        across segments): the general path then appends it or raises the
        precise error. A batch below the log end raises here, as there."""
        n = len(data)
        if n < BATCH_OVERHEAD:
            return None
        found = scan(data, verify_crc=True)
        if not found.ok or found.valid_bytes != n or not found.batches:
            return None
        with self._lock:
            self._ensure_writable()
            track = self._producers is not None
            if not track and _has_txn_batch(found.batches):
                track = self.producer_state is not None  # transactions need the state: load it now
            prev_last, n_records = -1, 0
            max_ts, offset_of_max, big_size, big_offset = -1, -1, -1, -1
            epoch_starts: List[Tuple[int, int]] = []
            producers: List[ProducerBatch] = []
            last_epoch = None
            for b in found.batches:
                if b.magic != 2:
                    return None
                last, ts, epoch = b.last_offset, b.max_timestamp, b.partition_leader_epoch
                prev_last = last
                n_records += b.records_count
                if ts > max_ts or offset_of_max < 0:
                    max_ts, offset_of_max = ts, last
                if b.size >= big_size:  # as max() over (size, base offset)
                    big_size, big_offset = b.size, b.base_offset
                if epoch != last_epoch:  # assign() ignores later batches of the latest epoch
                    epoch_starts.append((epoch, b.base_offset))
                    last_epoch = epoch
                if track and b.producer_id >= 0:
                    if b.attributes & 0x20:
                        producers.append(_control_batch(data, b))
                    elif b.base_sequence >= 0 or b.attributes & 0x10:
                        producers.append(ProducerBatch(b.producer_id, b.producer_epoch, b.base_sequence,
                                                       b.base_offset, last, ts, b.attributes))
            first_offset = found.batches[0].base_offset
            n_batches = len(found.batches)
            if first_offset < self.log_end_offset:
                raise self._below_end(first_offset)
            if n > self.config.segment_bytes and n_batches > 1:
                return None  # split across segments by the general path
            return self._write_validated(data, first_offset, prev_last, max_ts, offset_of_max, n_records,
                                         epoch_starts, (big_size, big_offset), follower=True, producers=producers)

    def _append_across_segments(self, buf: bytearray, batches: List[BatchInfo]) -> AppendResult:
        """A follower's fetch can hold more than ``segment_bytes``: append it in runs of whole
        batches that each fit in one segment (rolling between them), as if fetched in pieces.

        A single batch larger than ``segment_bytes`` still raises RecordTooLargeError. A run
        appended before a later run fails stays (it is a valid prefix of the leader's log, and
        the producer state took it in with the run).
        """
        view = memoryview(buf)
        limit = self.config.segment_bytes
        first: Optional[AppendResult] = None
        last: Optional[AppendResult] = None
        max_ts = -1
        i = 0
        while i < len(batches):
            j, size = i, 0
            while j < len(batches) and (j == i or size + batches[j].size <= limit):
                size += batches[j].size
                j += 1
            start = batches[i].position
            res = self._append_validated(view[start : start + size], batches[i:j], follower=True)
            first = first or res
            last = res
            max_ts = max(max_ts, res.max_timestamp)
            i = j
        assert first is not None and last is not None
        return AppendResult(first.base_offset, last.last_offset, max_ts, first.position,
                            last.last_offset - first.base_offset + 1)

    def _is_compacted(self) -> bool:
        """``config.compact``, recomputed only when ``config`` is replaced (it splits a string)."""
        cfg = self.config
        if cfg is not self._compact_of:
            self._compact_of, self._compact = cfg, cfg.compact
        return self._compact

    def _append_one(self, buf: bytearray, assign_offsets: bool, leader_epoch: Optional[int],
                    client: Optional[ProducerStateManager] = None) -> Optional[AppendResult]:
        """The usual append: ``buf`` is exactly one v2 batch (a producer's request, or a fetch that
        brought one batch). One C call checks its framing and CRC - and for a leader stamps the
        next offset and the epoch; then the client's producer state validates it (``client``), and
        it is written. Returns None (nothing done) when ``buf`` is anything else, for the general
        path to handle or refuse."""
        n = len(buf)
        if n < BATCH_OVERHEAD:
            return None
        with self._lock:
            if self._closed or self.read_only:
                self._ensure_writable()
            if assign_offsets:
                base = self.log_end_offset
                epoch = leader_epoch if leader_epoch is not None else leader_epoch_of(buf)
                info = stamp_one(buf, base, epoch)
                if info is None:
                    return None
            else:
                info = check_one(buf)
                if info is None:
                    return None
                base, epoch = info.base_offset, info.partition_leader_epoch
                if base < self.log_end_offset:
                    raise self._below_end(base)
            producers: Sequence[ProducerBatch] = ()
            last, max_ts, pid = info.last_offset, info.max_timestamp, info.producer_id
            if pid >= 0 and info.attributes & 0x30:  # a transaction's data or marker
                txn = self._txn_batch(buf, info, base, client)
                if isinstance(txn, AppendResult):
                    return txn
                producers = txn
            elif pid >= 0 and (client is not None or self._producers is not None):
                seq, p_epoch = info.base_sequence, info.producer_epoch
                if seq >= 0:
                    if client is not None:  # ProducerStateManager.validate, without building the batch first
                        dup = client.check(pid, p_epoch, seq, (seq + last - base) & 0x7FFFFFFF)
                        if dup is not None:
                            self.duplicate_appends_total += 1
                            return AppendResult(dup.first_offset, dup.last_offset, dup.timestamp, -1,
                                                dup.last_offset - dup.first_offset + 1)
                    producers = (ProducerBatch(pid, p_epoch, seq, base, last, max_ts, info.attributes),)
            return self._write_validated(buf, base, last, max_ts, last, info.records_count, ((epoch, base),),
                                         (info.size, base), follower=not assign_offsets, producers=producers)

    def _txn_batch(self, buf: bytearray, info: BatchInfo, base: int,
                   client: Optional[ProducerStateManager]) -> Union[AppendResult, Sequence[ProducerBatch]]:
        """:meth:`_append_one` for a transactional or control batch (under the lock): load the
        producer state (transactions need it), validate a client's batch, decode a marker."""
        ps = self.producer_state
        if info.attributes & 0x20:
            if client is not None:
                raise InvalidRecordError(
                    f"produce to {self.topic}-{self.partition}: a client may not write control batches")
            return (_control_batch(buf, info._replace(base_offset=base, last_offset=base + info.last_offset
                                                      - info.base_offset), position=0),)
        last = info.last_offset
        pb = ProducerBatch(info.producer_id, info.producer_epoch, info.base_sequence, base, last, info.max_timestamp,
                           info.attributes)
        if client is not None:
            dup = self._duplicate_of(ps, pb)
            if dup is not None:
                return dup
        return (pb,)

    def _below_end(self, base_offset: int) -> InvalidOffsetError:
        return InvalidOffsetError(
            f"append to {self.topic}-{self.partition}: batch offset {base_offset} "
            f"is below the log end offset {self.log_end_offset}"
        )

    def _append_validated(self, data: Union[bytes, bytearray, memoryview], batches: List[BatchInfo], *,
                          follower: bool = False) -> AppendResult:
        first, last = batches[0], batches[-1]
        max_ts = max(b.max_timestamp for b in batches)
        offset_of_max = next(b.last_offset for b in batches if b.max_timestamp == max_ts)
        if self._producers is None and _has_txn_batch(batches):
            self.producer_state  # transactions need the state: load it before the write
        return self._write_validated(data, first.base_offset, last.last_offset, max_ts, offset_of_max,
                                     sum(b.records_count for b in batches),
                                     [(b.partition_leader_epoch, b.base_offset) for b in batches],
                                     max((b.size, b.base_offset) for b in batches), follower=follower,
                                     producers=_producer_batches(batches, data) if self._producers is not None else ())

    def _write_validated(self, data: Union[bytes, bytearray, memoryview], first_offset: int, last_offset: int, max_ts: int,
                         offset_of_max: int, n_records: int, epoch_starts: Sequence[Tuple[int, int]],
                         largest_batch: Tuple[int, int], *, follower: bool = False,
                         producers: Sequence[ProducerBatch] = ()) -> AppendResult:
        """Write validated, offset-stamped batches ``[first_offset, last_offset]`` at the log end
        (under the lock): size limits, roll, segment append, epoch cache, flush policy, counters.
        ``largest_batch`` is (size, base offset) of the largest batch, for the size limit's error.
        A ``follower`` copying its leader skips ``max_message_bytes``, as Kafka's ``appendAsFollower``
        does (the leader checked it under the config of the time; a smaller value now must not strand
        a lagging replica); ``segment_bytes`` applies to both. ``producers``: the idempotent
        batches written, which the producer state (when loaded) records once the write stands.
        All-or-nothing: a failure after the bytes are written cuts them off again."""
        size = len(data)
        big_size, big_offset = largest_batch
        if big_size > self.config.max_message_bytes and not follower:
            raise RecordTooLargeError(
                f"batch at offset {big_offset} for {self.topic}-{self.partition} is {big_size} bytes, "
                f"over max_message_bytes={self.config.max_message_bytes}"
            )
        if size > self.config.segment_bytes:
            raise RecordTooLargeError(
                f"append of {size} bytes to {self.topic}-{self.partition} exceeds segment_bytes={self.config.segment_bytes}"
            )
        now = self.clock_ms()
        try:
            seg = self._maybe_roll(size, first_offset, last_offset, now)
        except OSError as exc:
            self._raise_storage_error(exc, f"roll before the append at offset {first_offset}")
        position = seg.append(data, last_offset, max_ts, offset_of_max)
        prev_end = self.log_end_offset
        prev_epochs: Optional[List[Tuple[int, int]]] = None  # the epoch cache before this append changed it
        self.log_end_offset = last_offset + 1
        count = self.log_end_offset - first_offset
        try:
            epochs = self.epochs
            entries = epochs._entries  # read in place: most appends leave the cache as it is
            for epoch, base in epoch_starts:
                if epoch < 0 or base < 0 or (entries and epoch == entries[-1][0] and base >= entries[-1][1]):
                    continue  # LeaderEpochCache.assign would change nothing (its first test)
                if prev_epochs is None:
                    prev_epochs = list(entries)
                epochs.assign(epoch, base)
            if prev_epochs is not None:
                self._write_epochs()
            self._unflushed_messages += count
            cfg = self.config
            if cfg.flush_messages is not None or cfg.flush_ms is not None:
                self._maybe_flush()
        except OSError as exc:
            # Not acknowledged, so not kept: cut the batch off again (all-or-nothing).
            self._unflushed_messages = max(0, self._unflushed_messages - count)
            try:
                seg.truncate_to(first_offset)
            except OSError:
                pass
            self.log_end_offset = prev_end
            if prev_epochs is not None:
                self.epochs = LeaderEpochCache(prev_epochs)
            self._raise_storage_error(exc, f"append at offset {first_offset}")
        ps = self._producers
        if ps is not None:
            if producers:
                ps.append(producers, self.log_end_offset)
            ps.map_end_offset = self.log_end_offset
        self.appended_records_total += n_records
        self.appended_bytes_total += size
        self._append_records_rate.record(now, n_records)
        self._append_bytes_rate.record(now, size)
        return AppendResult(first_offset, last_offset, max_ts, position, count)

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, now: Optional[int] = None) -> LogSegment:
        seg = self.active_segment
        if now is None:
            now = self.clock_ms()
        first_ts = seg.first_batch_timestamp if seg.first_batch_timestamp is not None else seg.created_ms
        seg_size = seg._state.size  # (LogSegment.size without the property call)
        if seg_size > 0 and (
            seg_size > self.config.segment_bytes - size
            or now - first_ts > self.config.segment_ms
            or last_offset - seg.base_offset > 0x7FFFFFFF
        ):
            return self.roll(first_offset)
        return seg

    @_storage_errors("roll")
    def roll(self, new_base: Optional[int] = None) -> LogSegment:
        """Close the active segment to appends and start a new one at the log end.

        All-or-nothing: the old segment is fsynced, then the new segment's three
        files are created and the directory fsynced; only then does the new
        segment become active. If any of these operations fails (EMFILE,
        ENOSPC, EIO) the files created so far are removed again, the old
        segment stays active and :class:`KafkaStorageError` is raised, so the
        directory holds what it held before (an extra fsync aside). A failure
        after that point (the recovery-point checkpoint, retention) is raised
        too, but the roll itself is complete: the new segment is active and
        durable.

        Durability: the rolled segment is fsynced and the recovery point moves
        to the new segment's base (as Kafka's roll-then-flush does).
        Complexity: O(1) plus retention. Thread-safety: takes the log's lock.
        """
        with self._lock:
            self._ensure_writable()
            base = self.log_end_offset if new_base is None else max(new_base, self.log_end_offset)
            old = self.active_segment
            if old.size == 0 and old.base_offset == base:
                return old
            seg = self._roll_segment(old, base)
            if base == self.log_end_offset:
                self._snapshot_producer_state()  # Kafka snapshots the producer state at every roll
            self._set_recovery_point(self.log_end_offset if base == self.log_end_offset else self.recovery_point)
            self._checkpoint()
            self.enforce_retention()
            return seg

    # ----------------------------------------------------------------- flush
    def _maybe_flush(self) -> None:
        cfg = self.config
        if cfg.flush_messages is not None and self._unflushed_messages >= cfg.flush_messages:
            self.flush()
        elif cfg.flush_ms is not None and self.clock_ms() - self._last_flush_ms >= cfg.flush_ms:
            self.flush()

    def flush_if_due(self, now_ms: Optional[int] = None) -> bool:
        """Flush when ``flush_ms`` is set, some data is unflushed and ``flush_ms`` has passed
        since the last flush; returns True when it flushed.

        The timer side of ``flush_ms`` (Kafka's ``LogManager.flushDirtyLogs``,
        run every ``log.flush.scheduler.interval.ms``): the append-time check
        alone never flushes a log that stopped receiving appends. The
        cluster's periodic maintenance calls this for every log
        (:mod:`pylog.runtime.log_maintenance`). A closed or read-only log is
        never due. ``now_ms`` defaults to the log's clock.

        Complexity: O(1) when not due, else :meth:`flush`. Durability: as
        :meth:`flush`. Thread-safety: takes the log's lock.
        """
        with self._lock:
            ms = self.config.flush_ms
            if ms is None or self._closed or self.read_only:
                return False
            if self.recovery_point >= self.log_end_offset and not self._unflushed_messages:
                return False  # nothing to flush
            now = self.clock_ms() if now_ms is None else now_ms
            if now - self._last_flush_ms < ms:
                return False
            self.flush()
            return True

    def flush(self) -> None:
        """fsync every segment with unflushed data and move the recovery point to the log end.

        Durability: after return, every record below :attr:`log_end_offset`
        survives power loss. The recovery-point checkpoint is rewritten at most
        every ``recovery_checkpoint_interval_ms`` (a stale one only means more
        scanning after a crash, never lost data).
        """
        with self._lock:
            self._ensure_writable()
            start = max(0, self.segments.bisect_right(self.recovery_point) - 1)
            try:
                for base in self.segments.keys()[start:]:
                    self.segments[base].flush()
            except OSError as exc:
                self._raise_storage_error(exc, "flush")
            self._unflushed_messages = 0
            now = self.clock_ms()
            self._last_flush_ms = now
            self._set_recovery_point(self.log_end_offset)
            if now - self._last_checkpoint_ms >= self.config.recovery_checkpoint_interval_ms:
                self._checkpoint()

    def _set_recovery_point(self, offset: int) -> None:
        self.recovery_point = offset
        if self._logdir is not None:
            self._logdir.recovery_points[(self.topic, self.partition)] = offset

    def _checkpoint(self) -> None:
        if self._logdir is not None:
            self._logdir.log_start_offsets[(self.topic, self.partition)] = self.log_start_offset
            self._logdir.write_checkpoints()
            self._last_checkpoint_ms = self.clock_ms()

    @_storage_errors("leader epoch checkpoint")
    def assign_epoch(self, epoch: int, start_offset: int) -> bool:
        """Record in the leader-epoch cache that ``epoch`` starts at ``start_offset``.

        A new leader calls this with the log end offset before it appends
        (Kafka's LeaderEpochFileCache.assign on becoming leader). Returns True
        when the cache changed. Durability: the leader-epoch-checkpoint is
        rewritten atomically before return; if that fails the cache is put back
        as it was and :class:`KafkaStorageError` raised (all-or-nothing).
        """
        with self._lock:
            self._ensure_writable()
            before = self.epochs.entries
            changed = self.epochs.assign(epoch, start_offset)
            if changed:
                try:
                    self._write_epochs()
                except OSError:
                    self.epochs = LeaderEpochCache(before)
                    raise
            return changed

    def _write_epochs(self) -> None:
        checkpoint.write_epochs(self.io, os.path.join(self.dir, LEADER_EPOCH_CHECKPOINT), self.epochs.entries)

    # -------------------------------------------------------- producer state
    @property
    def producer_state(self) -> ProducerStateManager:
        """The idempotent-producer state of this partition (Kafka's ``UnifiedLog.producerStateManager``).

        Loaded on first use (a replica's :class:`pylog.replication.partition.Partition`
        uses it from the start; a log nobody produces to idempotently never pays
        for it): the newest valid ``.snapshot`` at or below the log end, then the
        batches after it (:meth:`read_producer_batches`). From then on the log
        keeps it equal to its records, whatever appends: every batch written
        with a producer id and sequence is recorded (:meth:`append_as_leader`
        validates a client's first), a roll at the log end snapshots it, a
        truncation reloads it (snapshots above the cut are deleted whether or
        not it is loaded, and an open that recovered a crash deletes those
        above the recovered end), :meth:`truncate_fully_and_start_at` empties
        it, and a clean :meth:`close` snapshots it when it moved past its
        newest snapshot. ``map_end_offset`` equals :attr:`log_end_offset`.

        Raises :class:`KafkaStorageError` on a read-only or closed log, or
        when the log cannot be read back. Complexity: O(1) once loaded; the
        load reads the snapshot and the batch headers after it.
        Thread-safety: the load takes the log's lock; use the manager under
        it or from the one thread that appends.
        """
        ps = self._producers
        if ps is not None:
            return ps
        with self._lock:
            self._ensure_writable()
            if self._producers is None:
                ps = ProducerStateManager(self.dir, self.io, no_snapshots=self._created_dir)
                ps.on_abort = self._index_aborted_txn
                ps.load(self.log_start_offset, self.log_end_offset, self.read_producer_batches)
                self._producers = ps
            return self._producers

    def _batches_in(self, start: int, end: int) -> Iterator[RecordBatch]:
        """The batches holding offsets in ``[max(start, log start), end)``, in order, read as
        :meth:`read_batches` reads (CRC-checked) in 1 MiB steps. The caller holds the lock."""
        off = max(start, self.log_start_offset)
        while off < end:
            batches = self.read_batches(off, 1 << 20, max_offset=end)
            if not batches:
                break
            for b in batches:
                if b.last_offset >= off:
                    yield b
                off = b.last_offset + 1

    def read_producer_batches(self, start: int, end: int) -> List[ProducerBatch]:
        """What a producer-state rebuild replays: the idempotent, transactional and control batches
        of ``[start, end)`` as :class:`ProducerBatch` (control batches with their marker).
        Complexity: O(bytes of those batches). Thread-safety: takes the log's lock."""
        out: List[ProducerBatch] = []
        with self._lock:
            for b in self._batches_in(start, end):
                i = b.info
                if i.producer_id < 0 or i.magic != 2:
                    continue
                if i.attributes & ATTR_CONTROL:
                    out.append(ProducerBatch(i.producer_id, i.producer_epoch, i.base_sequence, i.base_offset,
                                             i.last_offset, i.max_timestamp, i.attributes, marker_of_batch(b)))
                elif i.base_sequence >= 0 or i.attributes & ATTR_TRANSACTIONAL:
                    out.append(ProducerBatch(i.producer_id, i.producer_epoch, i.base_sequence, i.base_offset,
                                             i.last_offset, i.max_timestamp, i.attributes))
        return out

    def _index_aborted_txn(self, txn: AbortedTxn) -> None:
        """The producer state's ``on_abort``: add ``txn`` to the ``.txnindex`` of the segment holding its
        marker, unless that index already has it (a rebuild replays markers the index may hold)."""
        i = self.segments.bisect_right(txn.last_offset) - 1
        if i < 0:
            return
        idx = self.segments.peekitem(i)[1].txn_index
        last = idx.last_offset
        if last is None or txn.last_offset > last:
            try:
                idx.append(txn)
            except OSError:
                ps = self._producers
                if ps is None or not ps.loading:  # a marker being written: the append undoes it
                    self._txn_index_failed_at = txn.last_offset
                raise

    def _undo_marker(self) -> None:
        """After a write whose ABORT marker's ``.txnindex`` entry failed (the error is being raised):
        cut the log at that marker - all-or-nothing for the marker and what followed it in the same
        append, as for any failed append - and reload the producer state to match. Under the lock."""
        at, self._txn_index_failed_at = self._txn_index_failed_at, None
        if at is None or at >= self.log_end_offset:
            return
        try:
            self.truncate_to(at)
            ps = self._producers
            if ps is not None:
                ps.truncate_and_reload(self.log_start_offset, self.log_end_offset, self.read_producer_batches)
        except (PylogError, OSError) as exc:
            _logger.warning("%s-%d: could not remove the marker at %d whose transaction index entry failed (%s)",
                            self.topic, self.partition, at, exc)

    # ---------------------------------------------------------- transactions
    @_storage_errors("transaction marker append")
    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      leader_epoch: int) -> AppendResult:
        """Write one COMMIT (``commit``) or ABORT control batch for ``producer_id`` at the log end
        (what a partition leader does for WriteTxnMarkers; Kafka's ``appendAsLeader`` with origin
        COORDINATOR). It ends the producer's ongoing transaction; an ABORT of a non-empty one adds an
        entry to the active segment's ``.txnindex`` (producer id, first offset, marker offset, the
        last stable offset at that moment).

        Raises InvalidProducerEpochError when ``producer_epoch`` is older than the producer's,
        TransactionCoordinatorFencedError when ``coordinator_epoch`` is older than the last
        marker's for this producer (nothing is written). Complexity: O(1) plus the write.
        Durability: as :meth:`append`. Thread-safety: takes the log's lock.
        """
        for name, v in (("producer_id", producer_id), ("producer_epoch", producer_epoch),
                        ("coordinator_epoch", coordinator_epoch), ("leader_epoch", leader_epoch)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidRecordError(f"append_marker to {self.topic}-{self.partition}: {name} must be a "
                                         f"non-negative int, got {v!r}")
        marker = EndTransactionMarker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                                      coordinator_epoch)
        with self._lock:
            ps = self.producer_state
            ps.validate_marker(producer_id, producer_epoch, coordinator_epoch)
            now = self.clock_ms()
            buf = bytearray(encode_batch([Record(key=marker.key(), value=marker.value(), timestamp=now)], now_ms=now,
                                         base_offset=self.log_end_offset, partition_leader_epoch=leader_epoch,
                                         producer_id=producer_id, producer_epoch=producer_epoch,
                                         transactional=True, control=True))
            try:
                res = self._append_one(buf, True, leader_epoch, None)
            except OSError:
                self._undo_marker()
                raise
            assert res is not None
            self._maybe_flush()
            return res

    @property
    def first_unstable_offset(self) -> Optional[int]:
        """The first offset of the oldest ongoing transaction (None when none is open). Loads the
        producer state. Complexity: O(ongoing transactions). Thread-safety: takes the log's lock."""
        with self._lock:
            return self.producer_state.first_unstable_offset

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: min(``high_watermark``, the first offset of every ongoing transaction and of every
        completed one whose marker is not below ``high_watermark``) - what a read_committed fetch may
        read up to. The caller (replication) owns the high watermark. Complexity: O(ongoing +
        unreplicated transactions). Thread-safety: takes the log's lock."""
        with self._lock:
            return self.producer_state.last_stable_offset(min(high_watermark, self.log_end_offset))

    def aborted_transactions(self, start: int, upper_bound: int) -> List[AbortedTxn]:
        """The aborted transactions a read_committed fetch of ``[start, upper_bound)`` needs (marker
        at or after ``start``, first offset before ``upper_bound``), from the segments' ``.txnindex``
        (:func:`pylog.storage.aborted_txns.collect_aborted_transactions`). Complexity: see there.
        Thread-safety: takes the log's lock."""
        with self._lock:
            if self.read_only:
                return collect_aborted_transactions(self._txn_indexes_from(start), start, upper_bound)
            self.producer_state  # a rebuild after a crash may still owe the index entries
            for _ in range(len(self.segments)):
                try:
                    return collect_aborted_transactions(self._txn_indexes_from(start), start, upper_bound)
                except CorruptIndexError as exc:
                    if not self._rebuild_txn_index(exc):
                        raise
            return collect_aborted_transactions(self._txn_indexes_from(start), start, upper_bound)

    def _txn_indexes_from(self, start: int) -> List[Tuple[int, TransactionIndex]]:
        """``(base, .txnindex)`` of the segment holding ``start`` and every later one (an abort whose
        marker is at or after ``start`` cannot be in an earlier one): a fetch near the log end walks
        only the last segments. O(segments from there). Under the lock."""
        segs = self.segments
        first = max(0, segs.bisect_right(start) - 1)
        return [(b, segs[b].txn_index) for b in segs.keys()[first:]]

    def fetch_committed(self, offset: int, max_bytes: int, last_stable_offset: int) -> Tuple[bytes, List[AbortedTxn]]:
        """What a leader serves a read_committed fetch from ``offset``: the bytes of whole batches
        below ``last_stable_offset`` (as :meth:`fetch` with ``max_offset``) and the aborted
        transactions that may overlap them (:meth:`aborted_transactions` of ``[offset, end)``,
        ``end`` one past the last batch returned: :func:`~pylog.storage.aborted_txns.fetch_upper_bound`
        with the fetched end known). Nothing (``b""``, ``[]``) at or above the LSO.

        The LSO never falls inside a batch (it is a HW or a transaction's first offset, both batch
        boundaries), so a batch is wholly below it or not returned. Complexity: the read, plus
        the index entries of the segments from the one holding ``offset`` to the first whose
        search is complete. Durability: none (reads). Thread-safety: takes the log's lock.
        """
        if offset >= last_stable_offset:
            return b"", []
        parts = []
        end = offset
        for _, _, view, infos in self._read_spans(offset, max_bytes, last_stable_offset, False):
            last = infos[-1]
            parts.append(view[: last.position + last.size])
            end = last.last_offset + 1
        if not parts:
            return b"", []
        data = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
        return data, self.aborted_transactions(offset, end)

    def _rebuild_txn_index(self, exc: CorruptIndexError) -> bool:
        """A damaged ``.txnindex`` (``exc`` names it) found while answering: empty it and reload the
        producer state from a snapshot at or below its segment (the replay adds its aborts back).
        False when ``exc`` names no segment's index. Complexity: the replay from that snapshot."""
        for base, seg in self.segments.items():
            if seg.txn_index.path == getattr(exc, "path", None):
                _logger.warning("%s-%d: rebuilding damaged transaction index (%s)", self.topic, self.partition, exc)
                seg.txn_index.reset()
                ps = self.producer_state
                ps.delete_snapshots_above(base)
                ps.load(self.log_start_offset, self.log_end_offset, self.read_producer_batches)
                return True
        return False

    def read_batch_infos(self, start: int, end: int) -> List[BatchInfo]:
        """Headers of the batches holding offsets in ``[max(start, log start), end)``, in order.
        Complexity: O(bytes of those batches), read as :meth:`read_batches` does (CRC-checked).
        Thread-safety: takes the log's lock."""
        with self._lock:
            return [b.info for b in self._batches_in(start, end)]

    def _snapshot_producer_state(self, *, only_if_moved: bool = False) -> None:
        """Write ``<log end>.snapshot`` when the state is loaded and covers exactly the log (a roll:
        the new segment's base; a close, ``only_if_moved``: when the state moved past its newest
        snapshot). A failure is logged: the log stands, the next load replays the records instead."""
        ps = self._producers
        if ps is None or ps.map_end_offset != self.log_end_offset:
            return
        try:
            if only_if_moved and ps.map_end_offset <= max(ps.snapshot_offsets(), default=0):
                return
            ps.take_snapshot()
        except OSError as exc:
            _logger.warning("%s-%d: producer snapshot at offset %d failed: %s", self.topic, self.partition,
                            ps.map_end_offset, exc)

    def _sync_producer_state(self) -> None:
        """After the log end moved down (a truncation, complete or not): make the producer state
        cover exactly ``[log start, log end)``, and drop snapshots above the end. The last resort,
        when even the headers cannot be read back, keeps only what is below the end."""
        leo = self.log_end_offset
        ps = self._producers
        if ps is None:
            try:
                ProducerStateManager(self.dir, self.io).delete_snapshots_above(leo)
            except OSError as exc:  # a later load deletes them too (they are above its log end)
                _logger.warning("%s-%d: removing producer snapshots above %d failed: %s", self.topic,
                                self.partition, leo, exc)
            return
        saved = ps.producers  # a reload replaces the dict, leaving this one as it was
        try:
            if self.log_start_offset > ps.map_end_offset:  # the log was emptied to restart further on
                ps.reset_memory(leo)
            elif ps.map_end_offset < leo:
                ps.append(self.read_producer_batches(ps.map_end_offset, leo), leo)
            elif ps.map_end_offset > leo:
                ps.truncate_and_reload(self.log_start_offset, leo, self.read_producer_batches)
        except (PylogError, OSError) as exc:
            _logger.warning("%s-%d: producer state could not be read back to offset %d (%s): keeping what "
                            "lies below it", self.topic, self.partition, leo, exc)
            ps.producers = saved
            ps.keep_below(leo)
        ps.map_end_offset = leo

    # ------------------------------------------------------- truncation, retention
    @_storage_errors("truncate to")
    def truncate_to(self, offset: int) -> int:
        """Remove every record at ``offset`` or above; returns bytes removed.

        Used by followers to drop a divergent tail. Truncation is at batch
        granularity. Durability: the truncated files are fsynced before return.

        On a disk error (``KafkaStorageError``) the log is a consistent prefix
        of what it was, ending between ``offset`` and the old end (later
        segments go newest first, their deletion is made durable before the
        segment holding ``offset`` is cut); a retry finishes the job, and a
        crash at any point leaves such a prefix too. Removed records never
        come back once this returns.
        Complexity: O(segments removed + index entries of the cut segment).
        Thread-safety: takes the log's lock.
        """
        with self._lock:
            self._ensure_writable()
            if not isinstance(offset, int) or offset < 0:
                raise OffsetOutOfRangeError(f"truncate_to needs a non-negative int offset, got {offset!r}")
            if offset >= self.log_end_offset:
                return 0
            if offset < self.log_start_offset:
                return self.truncate_fully_and_start_at(offset)
            end_before = self.log_end_offset
            try:
                return self._truncate_suffix(offset)
            finally:
                if self.log_end_offset < end_before:  # the producer state follows, even part-way
                    self._sync_producer_state()

    def _truncate_suffix(self, offset: int) -> int:
        """:meth:`truncate_to` for ``log start <= offset < log end`` (under the lock)."""
        removed = 0
        start_before, rp_before, epochs_before = self.log_start_offset, self.recovery_point, self.epochs.entries
        doomed = [b for b in self.segments.keys() if b > offset][: len(self.segments) - 1]
        removed += self._delete_newest_segments(len(doomed))
        seg = self.active_segment
        cut_error: Optional[OSError] = None
        try:
            removed += seg.truncate_to(offset)
        except OSError as exc:  # the segment ends at the cut in memory anyway (its flush retries the files)
            cut_error = exc
        # The in-memory state follows the files at once, so that a failing
        # fsync below leaves the log consistent (if not yet durable).
        self.log_end_offset = seg.next_offset()
        # A batch straddling the log start is removed whole, which can put
        # the log end below the log start (Kafka: logStartOffset = min(target, logStartOffset)).
        self._clamp_to_log_end()
        epochs_changed = self.epochs.entries != epochs_before
        start_moved = self.log_start_offset != start_before
        rp_moved = self.recovery_point != rp_before
        cleaned_to = self.cleaner_checkpoint
        if cleaned_to is not None and cleaned_to > self.log_end_offset:
            self.set_cleaner_checkpoint(self.log_end_offset)  # Kafka's maybeTruncateCheckpoint
        if cut_error is not None:
            raise cut_error
        seg.flush()
        if epochs_changed:
            self._write_epochs()
        if rp_moved or start_moved:
            self._checkpoint()
        return removed

    def _delete_newest_segments(self, n: int) -> int:
        """Delete the ``n`` newest segments (never all), newest first; returns their bytes.

        Each ``.log`` is unlinked before its segment leaves the map and the log
        end moves down to where the segment before it ends, so a failure at
        any step leaves a consistent shorter log - a prefix of the old one,
        every remaining record readable, memory agreeing with the files - that
        a retry finishes. The deletions are made durable (directory fsync)
        before the caller cuts the remaining segment: a power loss in between
        never leaves a cut segment followed by segments that come back (a hole).
        """
        if n <= 0:
            return 0
        keys = list(self.segments.keys())
        doomed = keys[len(keys) - n :]
        # Where the log ends once each doomed segment is gone, read before any
        # file changes, so that a failing read changes nothing.
        ends = {b: self.segments[keys[i - 1]].next_offset() for i, b in enumerate(keys) if b in doomed}
        removed = 0
        for base in reversed(doomed):
            seg = self.segments[base]
            size = seg.size
            seg.delete()
            del self.segments[base]
            removed += size
            self.log_end_offset = ends[base]
            self._clamp_to_log_end()
        self.io.fsync_dir(self.dir)
        return removed

    def _clamp_to_log_end(self) -> None:
        """Keep the log start, recovery point and epochs at or below a log end that moved down (in memory)."""
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
        if self.recovery_point > self.log_end_offset:
            self._set_recovery_point(self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)

    @_storage_errors("truncate fully and start at")
    def truncate_fully_and_start_at(self, offset: int) -> int:
        """Delete every segment and restart the log empty at ``offset`` (a follower whose
        leader's log starts past its end; ``truncate_to`` below the log start).

        Crash- and fault-safe in two phases. First the log-start checkpoint is
        rewritten with ``offset`` (atomically): if that fails, nothing changed and
        :class:`KafkaStorageError` is raised with the log still open. From then on
        an open of the directory restarts the log at ``offset`` whatever is left
        (the loader drops segments that end below the durable log start): the
        segments are deleted newest first and the new one created; if any of that
        fails the log is closed as a crashed one would be
        (:meth:`abandon`) and :class:`KafkaStorageError` raised - the next open
        finishes the job.

        Durability: everything (checkpoints, directory) is fsynced before return.
        Complexity: O(segments). Thread-safety: takes the log's lock.
        """
        with self._lock:
            self._ensure_writable()
            removed = self.size_in_bytes
            tp = (self.topic, self.partition)
            if self._logdir is not None:
                try:
                    with self._logdir.lock:
                        self._logdir.log_start_offsets[tp] = offset
                        self._logdir.write_checkpoints()
                except OSError:
                    with self._logdir.lock:
                        self._logdir.log_start_offsets[tp] = self.log_start_offset
                    raise
            try:
                self._delete_newest_segments(len(self.segments) - 1)
                first = self.active_segment
                if first.base_offset == offset:
                    first.truncate_to(offset)
                else:
                    seg = self._new_segment(offset)
                    self.segments[offset] = seg  # (the abandon below closes it on a failure)
                    self.io.fsync_dir(self.dir)
                    first.delete()
                    del self.segments[first.base_offset]
                self.log_end_offset = self.log_start_offset = offset
                self.epochs.clear()
                self.set_cleaner_checkpoint(None)
                self._set_recovery_point(offset)
                self.io.fsync_dir(self.dir)
                self._write_epochs()
                self._checkpoint()
            except OSError as exc:
                err = self._storage_error(exc, f"truncate fully and start at {offset}")
                self.abandon()
                raise err from exc
            self._clear_producer_state(offset)
            return removed

    def _clear_producer_state(self, offset: int) -> None:
        """The log restarted empty at ``offset``: no producer is known, no snapshot is valid."""
        ps = self._producers if self._producers is not None else ProducerStateManager(self.dir, self.io)
        try:
            ps.clear(offset)
        except OSError as exc:  # every old snapshot lies below the new log start: a load skips it
            ps.reset_memory(offset)
            _logger.warning("%s-%d: removing producer snapshots after restarting at %d failed: %s", self.topic,
                            self.partition, offset, exc)

    @_storage_errors("delete records before")
    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset``; delete segments wholly below it.

        Returns the new log start offset. Raises OffsetOutOfRangeError past the
        log end. Durability: the log-start checkpoint is written before return.
        """
        with self._lock:
            self._ensure_writable()
            if not isinstance(offset, int) or offset > self.log_end_offset or offset < 0:
                raise OffsetOutOfRangeError(
                    f"delete_records_before({offset!r}) for {self.topic}-{self.partition}: "
                    f"must be within [0, log end {self.log_end_offset}]"
                )
            if offset <= self.log_start_offset:
                return self.log_start_offset
            self._advance_log_start(offset, offset)
            return self.log_start_offset

    def _advance_log_start(self, new_start: int, delete_below: int) -> None:
        """Move the log start to ``new_start``: delete the segments wholly below
        ``delete_below`` (oldest first), make the new start durable (checkpoint),
        then cut the epoch cache. On a disk error the in-memory log start is what
        the next open would find (the old one, or the first remaining segment's base
        if some were deleted): the in-memory log never runs ahead of its files."""
        old_start = self.log_start_offset
        self.log_start_offset = new_start
        try:
            self._delete_segments_below(delete_below)
            self._checkpoint()
        except OSError:
            self.log_start_offset = min(max(old_start, self.segments.keys()[0]), self.log_end_offset)
            if self._logdir is not None:
                with self._logdir.lock:
                    self._logdir.log_start_offsets[(self.topic, self.partition)] = self.log_start_offset
            raise
        if self.epochs.truncate_from_start(self.log_start_offset):
            self._write_epochs()

    @_storage_errors("enforce retention")
    def enforce_retention(self, now_ms: Optional[int] = None, *, protect_from: Optional[int] = None) -> List[int]:
        """Delete whole old segments by ``retention_ms`` and ``retention_bytes``.

        Only when ``cleanup_policy`` includes ``delete`` (Kafka). Segments go
        oldest first and deletion stops at the first segment that is neither
        too old nor needed to get under ``retention_bytes``. A segment is too
        old when its largest timestamp is more than ``retention_ms`` before
        ``now_ms`` (default: the log's clock); size retention deletes a
        segment when what stays is still at least ``retention_bytes``.

        Never deleted: the active segment; a segment holding any offset at
        or above the replica's high watermark, when
        :attr:`retention_high_watermark` is set (a replicated log: Kafka's
        ``deletableSegments`` deletes a segment only when ``highWatermark >=``
        the next segment's base offset, so the log start never passes the
        HW and no record a leader change could still truncate, or that
        consumers have not been allowed to read, is removed); and -
        consumer-aware retention - a segment holding any offset >=
        ``protect_from`` or :attr:`retention_protect_from` (which the
        maintenance task sets to the slowest protected group's committed
        offset). The lowest of these bounds wins. Returns the deleted base
        offsets.

        Complexity: O(segments). Durability: the files are removed and the
        log-start checkpoint rewritten before return.
        """
        with self._lock:
            self._ensure_writable()
            cfg = self.config
            if not cfg.delete:
                return []
            now = self.clock_ms() if now_ms is None else now_ms
            floors = [p for p in (protect_from, self.retention_protect_from) if p is not None]
            if self.retention_high_watermark is not None:
                floors.append(self.retention_high_watermark())
            floor = min(floors) if floors else None
            doomed: List[int] = []
            keys = self.segments.keys()
            total = self.size_in_bytes
            for i in range(len(keys) - 1):  # never the active (last) segment
                seg = self.segments[keys[i]]
                if floor is not None and keys[i + 1] > floor:
                    break  # this segment holds offsets at or above the HW, or a protected group's position
                ts = seg.max_timestamp_so_far
                # An empty non-active segment (compaction removed all it held) has nothing to keep.
                too_old = cfg.retention_ms >= 0 and (seg.size == 0 or (ts >= 0 and now - ts > cfg.retention_ms))
                too_big = cfg.retention_bytes >= 0 and total - seg.size >= cfg.retention_bytes
                if not (too_old or too_big):
                    break
                doomed.append(keys[i])
                total -= seg.size
            if not doomed:
                return []
            new_start = keys[len(doomed)]
            self._advance_log_start(max(self.log_start_offset, new_start), new_start)
            return doomed

    # ------------------------------------------------------------- cleaner support
    @property
    def cleaner_checkpoint(self) -> Optional[int]:
        """The offset the log cleaner has cleaned up to (``cleaner-offset-checkpoint``), or None."""
        if self._logdir is None:
            return None
        return self._logdir.cleaner_offsets.get((self.topic, self.partition))

    def set_cleaner_checkpoint(self, offset: Optional[int]) -> None:
        """Record how far the cleaner got (None forgets it). Durability: atomic, fsynced."""
        if self._logdir is not None:
            self._logdir.set_cleaner_offset((self.topic, self.partition), offset)

    # --------------------------------------------------------------- metrics
    def metrics(self) -> List["Metric"]:
        """Samples for this partition (labels ``topic``, ``partition``), see pylog.metrics.

        Counters (``*_total``) count since this Log object was opened.
        Complexity: O(segments). Thread-safety: takes the log's lock.
        """
        from pylog.metrics import metric  # local: storage does not need metrics to work

        with self._lock:
            labels = {"topic": self.topic, "partition": self.partition}
            st = self.cleaner_stats
            return [
                metric("pylog_log_appended_records_total", "counter", "Records appended to the log.",
                       self.appended_records_total, **labels),
                metric("pylog_log_appended_bytes_total", "counter", "Bytes of batches appended to the log.",
                       self.appended_bytes_total, **labels),
                metric("pylog_log_append_records_rate", "gauge",
                       "Records appended per second over the last minute.",
                       self._append_records_rate.rate(self.clock_ms()), **labels),
                metric("pylog_log_append_bytes_rate", "gauge", "Bytes appended per second over the last minute.",
                       self._append_bytes_rate.rate(self.clock_ms()), **labels),
                metric("pylog_log_size_bytes", "gauge", "Bytes of all segments of the log.", self.size_in_bytes, **labels),
                metric("pylog_log_segments", "gauge", "Number of segments.", len(self.segments), **labels),
                metric("pylog_log_start_offset", "gauge", "First offset of the log.", self.log_start_offset, **labels),
                metric("pylog_log_end_offset", "gauge", "Offset the next record gets.", self.log_end_offset, **labels),
                metric("pylog_log_cleaner_runs_total", "counter", "Log cleaner runs that compacted this log.",
                       st.runs, **labels),
                metric("pylog_log_cleaner_bytes_read_total", "counter", "Bytes the log cleaner read.",
                       st.bytes_read, **labels),
                metric("pylog_log_cleaner_bytes_written_total", "counter", "Bytes the log cleaner wrote.",
                       st.bytes_written, **labels),
                metric("pylog_log_cleaner_records_removed_total", "counter",
                       "Records compaction removed (superseded, keyless, expired tombstones).",
                       st.records_removed, **labels),
                metric("pylog_log_cleaner_tombstones_removed_total", "counter",
                       "Tombstones removed after delete_retention_ms.", st.tombstones_removed, **labels),
            ]

    # ----------------------------------------------------------------- close
    def close(self) -> None:
        """Flush, checkpoint and release the directory (a clean shutdown). Idempotent."""
        with self._lock:
            if self._closed:
                return
            clean = False
            try:
                if not self.read_only:
                    self.active_segment.on_become_inactive()
                    self.flush()
                    ld = self._logdir
                    if ld is not None and ld.release_writes_checkpoints():
                        # The last log of the directory: its release below writes both checkpoints
                        # (then the clean-shutdown marker); writing them here too cost 4 more fsyncs.
                        ld.log_start_offsets[(self.topic, self.partition)] = self.log_start_offset
                    else:
                        self._checkpoint()
                    if self._producers is not None:
                        self._snapshot_producer_state(only_if_moved=True)  # Kafka's close: the next load replays nothing
                clean = True
            except OSError as exc:
                self._raise_storage_error(exc, "close")
            finally:
                self._closed = True
                close_error = self._close_segments()
                if self._logdir is not None:
                    tp = (self.topic, self.partition)
                    if not clean:  # not flushed: no clean-shutdown marker, the next open recovers
                        self._logdir.mark_dirty(tp)
                    self._logdir.unregister(tp)
                    try:
                        self._logdir.release()
                    except OSError as exc:
                        if clean:
                            self._raise_storage_error(exc, "close")
                if close_error is not None and clean:
                    self._raise_storage_error(close_error, "close")

    def abandon(self) -> None:
        """Drop the log as a killed process would: no flush, no checkpoint, no marker.

        Used by crash simulations; pair with SimulatedDiskIO.crash().
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_segments()  # a killed process's descriptors go away whatever happens
            if self._logdir is not None:
                self._logdir.mark_dirty((self.topic, self.partition))
                self._logdir.unregister((self.topic, self.partition))
                if not self._logdir._open:
                    self._logdir.abandon()
                else:
                    self._logdir.release()

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.dir!r}, log_start_offset={self.log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self.segments)})"
        )

    # ---------------------------------------------------------------- checks
    def _check(self) -> None:
        """Assert every invariant (tests call this after each step)."""
        bases = list(self.segments.keys())
        assert bases, "a log always has an active segment"
        assert bases == sorted(set(bases))
        assert 0 <= self.log_start_offset <= self.log_end_offset, (self.log_start_offset, self.log_end_offset)
        assert bases[-1] <= self.log_end_offset
        assert self.recovery_point <= self.log_end_offset
        for a, b in zip(bases, bases[1:]):
            seg = self.segments[a]
            if seg.size:
                assert seg.next_offset() <= b, f"segment {a} runs into {b}"
        assert self.active_segment.next_offset() == self.log_end_offset or self.active_segment.size == 0
        starts = [s for _, s in self.epochs.entries]
        epochs_ = [e for e, _ in self.epochs.entries]
        assert starts == sorted(set(starts)) and epochs_ == sorted(set(epochs_))
        assert all(s <= self.log_end_offset for s in starts)
        if self._producers is not None:
            assert self._producers.map_end_offset == self.log_end_offset, (self._producers.map_end_offset, self)
            self._producers._check()



__all__ = ["Log", "LogConfig", "AppendResult", "validate_topic", "CLEANUP_POLICIES"]

