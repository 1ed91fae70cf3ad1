"""The ``pylog`` Spark data source: batch and streaming reads, and a batch writer.

Schema and options are those of Spark's Kafka source, so code written for
``format("kafka")`` moves over by changing the format name (and giving the
directory as ``path``)::

    pylog.spark.register(spark)
    df = (spark.read.format("pylog").option("path", "/data/logs")
          .option("subscribe", "orders").load())

See docs/spark.md for every option. Needs pyspark >= 4.2 and pyarrow.

Where code runs: ``DataSource``/reader construction and ``partitions()`` run
in Spark's planner Python process on the driver, ``read()`` in executor
Python workers on a pickled copy; so the reader keeps only plain data
(:class:`~pylog.spark.reader.ReadSpec`) and opens logs inside ``read()``.

Thread-safety: Spark calls each object from one thread.
"""
from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Dict, Iterator, List, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pylog.errors import InvalidConfigurationError, LogDirLockedError, OffsetOutOfRangeError
from pylog.record.murmur import partition_for_key
from pylog.spark import layout
from pylog.spark.layout import Range, TopicPartition
from pylog.spark.options import SINK_OPTIONS, SOURCE_OPTIONS, check_options, parse_duration_ms
from pylog.spark.reader import ReadSpec, read_range, report_data_loss

if TYPE_CHECKING:
    from pylog.record import Record

log = logging.getLogger(__name__)


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (DDL: :data:`~pylog.spark.reader.SPARK_DDL`), every field nullable."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header, containsNull=True)))
    return StructType(fields)


class PylogPartition(InputPartition):
    """One Spark partition: a picklable :class:`ReadSpec` (no open handles)."""

    def __init__(self, spec: ReadSpec):
        super().__init__(spec)
        self.spec = spec


class _Options:
    """The options shared by batch and streaming reads, parsed once."""

    def __init__(self, options: Mapping[str, str]):
        check_options(options, SOURCE_OPTIONS, "the pylog source")
        opts = {k.lower(): v for k, v in options.items()}
        self.raw = opts
        path = opts.get("path")
        if not path:
            raise InvalidConfigurationError(
                "the pylog source needs the log or cluster directory: .option('path', dir) or .load(dir)"
            )
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise InvalidConfigurationError(f"log directory {self.path} does not exist")
        self.include_headers = layout.parse_bool(opts, "includeheaders", False)
        self.fail_on_data_loss = layout.parse_bool(opts, "failondataloss", True)
        self.min_partitions = layout.parse_positive_int(opts, "minpartitions")
        self.max_offsets_per_trigger = layout.parse_positive_int(opts, "maxoffsetspertrigger")
        self.min_offsets_per_trigger = layout.parse_positive_int(opts, "minoffsetspertrigger")
        if "maxtriggerdelay" in opts and self.min_offsets_per_trigger is None:
            raise InvalidConfigurationError("option 'maxTriggerDelay' only applies with minOffsetsPerTrigger")
        self.max_trigger_delay_ms = parse_duration_ms(opts.get("maxtriggerdelay", "15m"), "maxTriggerDelay")
        if (
            self.min_offsets_per_trigger is not None
            and self.max_offsets_per_trigger is not None
            and self.min_offsets_per_trigger > self.max_offsets_per_trigger
        ):
            raise InvalidConfigurationError(
                f"option 'minOffsetsPerTrigger' ({self.min_offsets_per_trigger}) must not be greater than "
                f"'maxOffsetsPerTrigger' ({self.max_offsets_per_trigger})"
            )
        self.max_records_per_partition = layout.parse_positive_int(opts, "maxrecordsperpartition")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise InvalidConfigurationError(
                f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}"
            )
        self.timestamp_strategy = strategy
        self.read_committed = layout.isolation_level(opts) == "read_committed"
        self.data_loss_log = opts.get("datalosslog")
        layout.select_partitions(self.path, opts)  # validates subscribe/subscribePattern/assign now

    def partitions(self) -> List[TopicPartition]:
        return layout.select_partitions(self.path, self.raw)

    def starting(self, states: Dict[TopicPartition, layout.PartitionState], default: str) -> Dict[TopicPartition, int]:
        """Starting offsets: ``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets`` (Kafka's precedence)."""
        o = self.raw
        if o.get("startingtimestamp") is not None:
            ts = layout.parse_timestamp(o["startingtimestamp"], "startingTimestamp")
            return layout.resolve_timestamps(
                {tp: ts for tp in states}, "startingTimestamp", states, starting=True, strategy=self.timestamp_strategy
            )
        if o.get("startingoffsetsbytimestamp") is not None:
            given = layout.parse_offsets_json(o["startingoffsetsbytimestamp"], "startingOffsetsByTimestamp")
            return layout.resolve_timestamps(
                given, "startingOffsetsByTimestamp", states, starting=True, strategy=self.timestamp_strategy
            )
        return layout.resolve(
            o.get("startingoffsets", default), "startingOffsets", states,
            allow_latest=default == "latest", allow_earliest=True,
        )

    def ending(self, states: Dict[TopicPartition, layout.PartitionState]) -> Dict[TopicPartition, int]:
        """Batch ending offsets: ``endingTimestamp`` > ``endingOffsetsByTimestamp`` > ``endingOffsets``."""
        o = self.raw
        if o.get("endingtimestamp") is not None:
            ts = layout.parse_timestamp(o["endingtimestamp"], "endingTimestamp")
            return layout.resolve_timestamps({tp: ts for tp in states}, "endingTimestamp", states, starting=False)
        if o.get("endingoffsetsbytimestamp") is not None:
            given = layout.parse_offsets_json(o["endingoffsetsbytimestamp"], "endingOffsetsByTimestamp")
            return layout.resolve_timestamps(given, "endingOffsetsByTimestamp", states, starting=False)
        return layout.resolve(
            o.get("endingoffsets", "latest"), "endingOffsets", states, allow_latest=True, allow_earliest=False
        )

    def states(self, tps: Optional[Sequence[TopicPartition]] = None) -> Dict[TopicPartition, layout.PartitionState]:
        return layout.describe(self.path, self.partitions() if tps is None else tps,
                               read_committed=self.read_committed)

    def spec(self, r: Range) -> ReadSpec:
        return ReadSpec(
            r.topic, r.partition, r.dir, r.start, r.end, self.include_headers, self.fail_on_data_loss,
            self.read_committed, self.data_loss_log,
        )

    def plan(
        self, starts: Dict[TopicPartition, int], ends: Dict[TopicPartition, int], states: Dict[TopicPartition, layout.PartitionState]
    ) -> List[PylogPartition]:
        ranges = []
        for tp, end in sorted(ends.items()):
            st = states[tp]
            start, lost = layout.check_start(tp, starts.get(tp, st.log_start_offset), st, self.fail_on_data_loss)
            if lost:
                report_data_loss(self.spec(Range(tp[0], tp[1], st.dir, 0, 0)), starts[tp], start, lost)
            if start > end:
                msg = f"{tp[0]}-{tp[1]}: starting offset {start} is after the ending offset {end}"
                if self.fail_on_data_loss:
                    raise OffsetOutOfRangeError(msg)
                log.warning("pylog: %s; nothing read", msg)
                continue
            ranges.append(Range(tp[0], tp[1], st.dir, start, end))
        ranges = layout.split_max_records(ranges, self.max_records_per_partition)
        return [PylogPartition(self.spec(r)) for r in layout.split_ranges(ranges, self.min_partitions)]


class PylogDataSource(DataSource):
    """``format("pylog")``: Spark's Kafka source schema over pylog/Kafka log directories."""

    @classmethod
    def name(cls) -> str:
        return "pylog"

    def schema(self) -> StructType:
        return kafka_schema(layout.parse_bool(self.options, "includeHeaders", False))

    def _check_schema(self, schema: StructType) -> None:
        want = self.schema()
        if schema != want:
            raise InvalidConfigurationError(
                f"the pylog source has a fixed schema (Spark's Kafka source) and cannot be set with a custom one: "
                f"expected {want.simpleString()}, got {schema.simpleString()}"
            )

    def reader(self, schema: StructType) -> "PylogBatchReader":
        self._check_schema(schema)
        return PylogBatchReader(_Options(self.options))

    def streamReader(self, schema: StructType) -> "PylogStreamReader":
        self._check_schema(schema)
        for name, what in (("endingOffsets", "ending offset"), ("endingTimestamp", "ending timestamp"),
                           ("endingOffsetsByTimestamp", "ending timestamp")):
            if self.options.get(name) is not None:
                raise InvalidConfigurationError(f"{what} not valid in streaming queries (option {name})")
        return PylogStreamReader(_Options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> "PylogWriter":
        if overwrite:
            raise InvalidConfigurationError("the pylog sink only appends: use mode('append')")
        return PylogWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "PylogStreamWriter":
        if overwrite:
            raise InvalidConfigurationError(
                "the pylog sink only appends: use outputMode('append') or 'update' (a log cannot be overwritten)"
            )
        return PylogStreamWriter(dict(self.options), schema)


class PylogBatchReader(DataSourceReader):
    """Batch read: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest)."""

    def __init__(self, opts: _Options):
        self.opts = opts

    def partitions(self) -> List[InputPartition]:
        o = self.opts
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if name.lower() in o.raw:
                log.warning("pylog: option %s only applies to streaming queries; ignored by a batch read", name)
        states = o.states()
        starts = o.starting(states, "earliest")
        ends = o.ending(states)
        for tp, e in ends.items():
            if e > states[tp].latest:
                msg = (
                    f"{tp[0]}-{tp[1]}: ending offset {e} is past the latest readable offset {states[tp].latest} "
                    f"(high watermark or log end of {states[tp].dir})"
                )
                if o.fail_on_data_loss:
                    raise OffsetOutOfRangeError(msg)
                log.warning("pylog: %s; reading up to %d", msg, states[tp].latest)
                ends[tp] = states[tp].latest
        return list(o.plan(starts, ends, states))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class PylogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads with offsets ``{"topic": {"0": next_offset}}``.

    ``maxOffsetsPerTrigger`` is applied through admission control and split
    across partitions in proportion to their backlog (Kafka's rule);
    ``trigger(availableNow=True)`` reads up to the offsets seen when the query
    starts, in limited batches. New partitions start at the earliest offset.
    ``commit`` is a no-op: the log is never changed by a reader.
    """

    def __init__(self, opts: _Options):
        self.opts = opts
        self._available_now: Optional[Dict[TopicPartition, int]] = None
        #: when the last micro-batch was let through under minOffsetsPerTrigger (Kafka starts at 0,
        #: so the first trigger always runs)
        self._last_trigger_ms = 0
        self._now_ms = lambda: int(time.time() * 1000)  # replaced by tests

    def _latest(self) -> Dict[TopicPartition, int]:
        return {tp: st.latest for tp, st in self.opts.states().items()}

    def initialOffset(self) -> dict:
        o = self.opts
        states = o.states()
        return layout.offsets_to_json(o.starting(states, "latest"))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _delay_batch(self, begin: Dict[TopicPartition, int], end: Dict[TopicPartition, int]) -> bool:
        """Kafka's delayBatch: hold the trigger while fewer than minOffsetsPerTrigger offsets are new,
        unless maxTriggerDelay has passed since the last batch was let through."""
        now = self._now_ms()
        if now - self._last_trigger_ms >= self.opts.max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        new = sum(e - begin.get(tp, 0) for tp, e in end.items())
        if new < (self.opts.min_offsets_per_trigger or 0):
            return True
        self._last_trigger_ms = now
        return False

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def reportLatestOffset(self) -> Optional[dict]:
        return layout.offsets_to_json(self._latest())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = layout.offsets_from_json(start)
        latest = self._latest() if self._available_now is None else dict(self._available_now)
        states = None
        for tp in latest:
            if tp not in begin:
                states = states or self.opts.states(list(latest))
                begin[tp] = states[tp].log_start_offset
        end = {tp: max(e, begin.get(tp, e)) for tp, e in latest.items()}
        if (
            self.opts.min_offsets_per_trigger
            and self._available_now is None  # availableNow reads everything there is, then ends
            and not isinstance(limit, ReadAllAvailable)
            and self._delay_batch(begin, end)
        ):
            return start
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, limit.max_rows)
        # Keep partitions that vanished from the directory at their last offset.
        for tp, b in begin.items():
            end.setdefault(tp, b)
        return layout.offsets_to_json(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s = layout.offsets_from_json(start)
        e = {tp: o for tp, o in layout.offsets_from_json(end).items() if o > s.get(tp, -1)}
        if not e:
            return []
        states = self.opts.states(sorted(e))
        for tp in e:
            s.setdefault(tp, states[tp].log_start_offset)
        return list(self.opts.plan(s, e, states))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint (idempotent, may arrive late)."""


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Spark turns an empty partitions() list into one InputPartition(None).
    if partition.value is None:
        return iter(())
    return read_range(partition.value)


def _rate_limit(begin: Dict[TopicPartition, int], end: Dict[TopicPartition, int], limit: int) -> Dict[TopicPartition, int]:
    """Kafka's rateLimit: share ``limit`` in proportion to each partition's backlog."""
    sizes = {tp: e - begin.get(tp, e) for tp, e in end.items()}
    total = sum(v for v in sizes.values() if v > 0)
    if total <= limit:
        return end
    out = {}
    for tp, e in end.items():
        b = begin.get(tp, e)
        size = sizes[tp]
        if size <= 0:
            out[tp] = e
            continue
        share = limit * (size / total)
        n = int(-(-share // 1)) if share < 1 else int(share)
        out[tp] = min(e, b + n)
    return out


# ---------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------


class PylogCommitMessage(WriterCommitMessage):
    """What one task appended: ``{(topic, partition): (first offset, last offset)}``."""

    def __init__(self, appended: Dict[TopicPartition, List[int]]):
        self.appended = appended


#: Kafka's choice for a keyed record: ``toPositive(murmur2(key)) % numPartitions`` (the record layer's one murmur2)
default_partition = partition_for_key


class _Appender:
    """The sink's work, shared by the batch and the streaming writer: rows -> appended batches.

    Columns (Spark's Kafka sink): ``value`` (binary or string, required),
    ``key``, ``headers`` (``array<struct<key:string,value:binary>>``),
    ``partition`` (int), ``topic`` (used when the ``topic`` option is
    absent; the option overrides the column). A row without a partition goes
    to Kafka's murmur2 choice for its key, or, without a key, to the task's
    own partition (task id modulo the partition count).

    Durability: each task appends batches of up to ``batchSize`` records and
    fsyncs before it reports success. A failed or retried task leaves what it
    appended before failing (whole batches; never a torn record), so the
    sink is at-least-once, like Kafka's. See docs/spark.md.
    """

    def __init__(self, options: Dict[str, str], schema: StructType):
        check_options(options, SINK_OPTIONS, "the pylog sink")
        opts = {k.lower(): v for k, v in options.items()}
        path = opts.get("path")
        if not path:
            raise InvalidConfigurationError("the pylog sink needs the log directory: .option('path', dir) or .save(dir)")
        self.path = os.path.abspath(path)
        if os.path.isdir(self.path) and layout.is_cluster_dir(self.path):
            raise InvalidConfigurationError(
                f"{self.path} is a cluster directory: write through the cluster's producer, not into a replica"
            )
        names = [f.name.lower() for f in schema.fields]
        if "value" not in names:
            raise InvalidConfigurationError("the pylog sink needs a 'value' column (binary or string)")
        self.topic = opts.get("topic")
        if not self.topic and "topic" not in names:
            raise InvalidConfigurationError("the pylog sink needs a topic: .option('topic', name) or a 'topic' column")
        self.default_partitions = layout.parse_positive_int(opts, "numpartitions") or 1
        self.batch_size = layout.parse_positive_int(opts, "batchsize") or 1000
        self.lock_timeout_s = (layout.parse_positive_int(opts, "locktimeoutms") or 120_000) / 1000
        # Partition counts are fixed here, on the driver, before any task runs:
        # a task that looked at the directory itself could see another task's
        # half-created topic and send a key to the wrong partition.
        self.partition_counts: Dict[str, int] = {}
        if os.path.isdir(self.path):
            for t, p in layout.list_topic_partitions(self.path):
                self.partition_counts[t] = max(self.partition_counts.get(t, 0), p + 1)

    def _num_partitions(self, topic: str) -> int:
        return self.partition_counts.get(topic, self.default_partitions)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PylogCommitMessage:
        from pyspark import TaskContext

        from pylog.storage.log import validate_topic
        from pylog.record import Record

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        pending: Dict[TopicPartition, List[Record]] = {}
        counts: Dict[str, int] = {}
        for rb in iterator:
            cols = {name.lower(): rb.column(i) for i, name in enumerate(rb.schema.names)}
            values = cols["value"].to_pylist()
            n = len(values)
            keys = cols["key"].to_pylist() if "key" in cols else [None] * n
            heads = cols["headers"].to_pylist() if "headers" in cols else [None] * n
            parts = cols["partition"].to_pylist() if "partition" in cols else [None] * n
            topics = [self.topic] * n if self.topic else cols["topic"].to_pylist()
            for v, k, h, p, t in zip(values, keys, heads, parts, topics):
                if t is None:
                    raise InvalidConfigurationError("a row has a null topic and no 'topic' option is set")
                if t not in counts:
                    validate_topic(t)
                    counts[t] = self._num_partitions(t)
                if isinstance(v, str):
                    v = v.encode()
                if isinstance(k, str):
                    k = k.encode()
                if p is None:
                    p = default_partition(k, counts[t]) if k is not None else task % counts[t]
                elif not 0 <= p < counts[t]:
                    raise InvalidConfigurationError(
                        f"partition {p} does not exist for topic {t!r} ({counts[t]} partitions in {self.path}; "
                        "the option numPartitions sets the count for a new topic)"
                    )
                hdrs = tuple((x["key"], x["value"]) for x in h) if h else ()
                pending.setdefault((t, p), []).append(Record(value=v, key=k, headers=hdrs))
        return PylogCommitMessage(self._append(pending))

    def _append(self, pending: Dict[TopicPartition, List[Record]]) -> Dict[TopicPartition, List[int]]:
        """Append each partition's records in turn (sorted by topic, partition): open, append whole
        batches, fsync, close. A task that fails part-way leaves the partitions before the failure
        appended and fsynced, the rest untouched (never a partial batch).

        Complexity: O(records). Durability: each partition is fsynced before the next is opened.
        """
        from pylog.storage.log import Log

        appended: Dict[TopicPartition, List[int]] = {}
        for tp in sorted(pending):
            deadline = time.monotonic() + self.lock_timeout_s
            delay = 0.01
            while True:
                try:
                    lg = Log.open(os.path.join(self.path, f"{tp[0]}-{tp[1]}"))
                    break
                except LogDirLockedError:
                    # Another task's writer holds the directory: wait for it (tasks are short).
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
            try:
                first = last = None
                batch: List[Record] = []
                size = 0
                limit = lg.config.max_message_bytes // 2
                for r in pending[tp]:
                    rsize = len(r.value or b"") + len(r.key or b"") + 32
                    if batch and (len(batch) >= self.batch_size or size + rsize > limit):
                        res = lg.append(batch)
                        first = res.base_offset if first is None else first
                        last = res.last_offset
                        batch, size = [], 0
                    batch.append(r)
                    size += rsize
                if batch:
                    res = lg.append(batch)
                    first = res.base_offset if first is None else first
                    last = res.last_offset
                lg.flush()
                assert first is not None and last is not None  # pending[tp] holds at least one record
                appended[tp] = [first, last]
            finally:
                lg.close()
        return appended

    def _committed(self, messages: List[Optional[WriterCommitMessage]], what: str) -> None:
        total = sum(
            last - first + 1
            for m in messages
            if isinstance(m, PylogCommitMessage)
            for first, last in m.appended.values()
        )
        log.info("pylog sink: %s: %d records appended to %s", what, total, self.path)

    def _aborted(self, messages: List[Optional[WriterCommitMessage]], what: str) -> None:
        appended = {tp: r for m in messages if isinstance(m, PylogCommitMessage) for tp, r in m.appended.items()}
        log.warning(
            "pylog sink: %s aborted; records appended by its successful tasks stay in %s (a log only appends, "
            "and a retry appends them again): %s",
            what, self.path, appended,
        )


class PylogWriter(_Appender, DataSourceArrowWriter):
    """``df.write.format("pylog")``: append rows to topics in a log directory (see :class:`_Appender`).

    A failed job leaves what its successful tasks appended (``abort`` logs
    it): at-least-once, as Spark's Kafka sink. Thread-safety: Spark calls
    each writer object from one thread; tasks of one job take turns on a
    partition directory's lock.
    """

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._committed(messages, "job")

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._aborted(messages, "job")


class PylogStreamWriter(_Appender, DataSourceStreamArrowWriter):
    """``df.writeStream.format("pylog")``: each micro-batch appends its rows (see :class:`_Appender`).

    At-least-once, as Spark's Kafka sink: a micro-batch whose tasks appended
    records and then failed (a task error, a killed executor, the driver
    stopped before Spark recorded the batch in the checkpoint's commit log)
    is run again on restart with the same offsets, and appends those
    records a second time. Nothing is appended twice by a micro-batch that
    completed. Deduplicate downstream by a key in the value where that
    matters (docs/spark.md).
    """

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._committed(messages, f"micro-batch {batchId}")

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._aborted(messages, f"micro-batch {batchId}")
