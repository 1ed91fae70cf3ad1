"""Executor-side half of the Spark data source: one offset range -> Arrow record batches.

:func:`read_range` opens a partition directory read-only, walks its segments
from the batch holding ``start`` and turns each chunk of whole, CRC-checked
record batches into one :class:`pyarrow.RecordBatch` with the columns of
Spark's Kafka source. There is no per-record Python work on this path for
uncompressed or compressed v2 batches: the C core decodes each batch into
position/length columns (``plg_decode_records``) and copies the values and
keys back to back (``plg_gather``); Arrow's offsets come from a cumulative
sum of the lengths. Headers (``includeHeaders=true``) and legacy (magic 0/1)
message sets take a slower path that builds Python objects.

Only complete batches are ever returned: a batch is framed and CRC-checked
before it is used, a torn tail that a writer is still appending is never
read (the range ends below it), and records at or past ``end`` are cut off.

Thread-safety: functions are re-entrant; each call opens its own handles.
No Spark import here, so the reader can be used (and benchmarked) alone.
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import struct
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Tuple, Union

import pyarrow as pa
import pyarrow.compute as pc

from pylog.client.txn_filter import ReadCommittedFilter
from pylog.errors import CorruptRecordError, OffsetOutOfRangeError
from pylog.record import compression as codecs
from pylog.record import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchInfo,
    RecordBatch,
    scan,
)
from pylog._native.arrow import FIXED_WIDTHS, ArrowColumns
from pylog._native.batch import check_record_count
from pylog.record.framing import batch_length_of
from pylog.storage.index import offset_index_entries
from pylog.storage.log import Log

log = logging.getLogger(__name__)

# Bytes of log read per Arrow batch (~70,000 records of 100 bytes). Fewer,
# bigger batches usually cost less CPU on both sides of Spark's Python-to-JVM
# Arrow transfer: ~65,000-row batches used 6-25% fewer CPU seconds per scan
# than ~9,000-row ones (1 MiB) in 4 of 5 runs; ~250,000 rows were no better
# (docs/spark.md, benchmarks/profile_spark.py).
CHUNK_BYTES = int(os.environ.get("PYLOG_SPARK_CHUNK_BYTES", 8 << 20))

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of Spark's Kafka schema (every field nullable, as Spark requires)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


SPARK_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
SPARK_DDL_HEADERS = SPARK_DDL + ", headers array<struct<key: string, value: binary>>"


@dataclass(frozen=True)
class ReadSpec:
    """One Spark task's work: offsets ``[start, end)`` of ``topic``-``partition`` in ``dir``.

    Plain, picklable data; native handles are opened by :func:`read_range`.
    """

    topic: str
    partition: int
    dir: str
    start: int
    end: int
    include_headers: bool = False
    fail_on_data_loss: bool = True
    read_committed: bool = False
    data_loss_log: Optional[str] = None


class DataLossError(OffsetOutOfRangeError):
    """Planned offsets are missing from the log (retention, truncation or damage)."""


def report_data_loss(spec: ReadSpec, start: int, end: int, reason: str, path: Optional[str] = None) -> None:
    """Log a skipped range (``failOnDataLoss=false``) and append it to ``dataLossLog`` when set."""
    where = f" in {path}" if path else ""
    log.warning("pylog: skipped offsets [%d, %d) of %s-%d%s: %s", start, end, spec.topic, spec.partition, where, reason)
    if spec.data_loss_log:
        line = json.dumps(
            {"topic": spec.topic, "partition": spec.partition, "from": start, "until": end, "file": path, "reason": reason}
        )
        fd = os.open(spec.data_loss_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------
# Arrow building
# ---------------------------------------------------------------------------

_I32 = struct.Struct("<i")


def _const_i32(v: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(_I32.pack(v) * n)])


def _const_string(s: str, n: int) -> pa.Array:
    b = s.encode()
    offsets = pc.multiply(_iota32(n + 1), pa.scalar(len(b), pa.int32()))
    return pa.Array.from_buffers(pa.string(), n, [None, offsets.buffers()[1], pa.py_buffer(b * n)])


_IOTA: List[pa.Array] = [pa.array([0], pa.int32())]


def _iota32(n: int) -> pa.Array:
    """0..n-1 as int32 (cached, grown by doubling)."""
    cur = _IOTA[0]
    if len(cur) < n:
        size = max(n, 2 * len(cur))
        cur = pa.array(range(size), pa.int32())
        _IOTA[0] = cur
    return cur.slice(0, n)


class _Constants:
    """The topic and partition columns of one partition's batches: built once at the largest row
    count seen and sliced from row 0 (a slice is zero-copy; Arrow's IPC writer sends only its rows).
    Re-entrant: a larger set replaces the cached one whole."""

    _cache: "dict[Tuple[str, int], Tuple[int, pa.Array, pa.Array]]" = {}

    @classmethod
    def get(cls, topic: str, partition: int, n: int) -> Tuple[pa.Array, pa.Array]:
        have = cls._cache.get((topic, partition))
        if have is None or have[0] < n:
            size = max(n, 1024, 2 * have[0] if have else 0)
            if len(cls._cache) > 64:  # one executor worker reads few partitions; bound it anyway
                cls._cache.clear()
            have = (size, _const_string(topic, size), _const_i32(partition, size))
            cls._cache[(topic, partition)] = have
        return have[1].slice(0, n), have[2].slice(0, n)


class _Columns:
    """Arrow buffers for ``n`` rows of one chunk, filled by the C core (:class:`ArrowColumns`):
    offset, timestamp (µs), timestamp type, and the value and key columns (offsets, validity,
    bytes back to back, at most ``cap`` bytes each). ``headers``: also each row's header count."""

    def __init__(self, n: int, cap: int, headers: bool):
        m = max(n, 1)
        names = ["offset", "timestamp", "timestamp_type"] + (["header_count"] if headers else [])
        self.bufs = {name: pa.allocate_buffer(m * FIXED_WIDTHS[name]) for name in names}
        for side in ("value", "key"):
            self.bufs[f"{side}_offsets"] = pa.allocate_buffer(4 * (m + 1))
            self.bufs[f"{side}_validity"] = pa.allocate_buffer((m + 7) // 8)
            self.bufs[f"{side}_data"] = pa.allocate_buffer(max(cap, 1))
        self.cols = ArrowColumns({name: buf.address for name, buf in self.bufs.items()}, n, cap, cap)

    def binary(self, side: str, n: int, used: int, nulls: int) -> pa.Array:
        b = self.bufs
        validity = b[f"{side}_validity"] if nulls else None
        return pa.Array.from_buffers(
            pa.binary(), n, [validity, b[f"{side}_offsets"], b[f"{side}_data"].slice(0, used)], null_count=nulls
        )


def _records_section(view: memoryview, info: BatchInfo, path: str) -> Union[memoryview, bytes]:
    body = view[BATCH_OVERHEAD:]
    codec = info.attributes & ATTR_COMPRESSION_MASK
    if codec == codecs.NONE:
        return body
    return codecs.decompress(codec, body, path=path, position=info.position)


def _slow_batch(
    view: memoryview, infos: List[BatchInfo], spec: ReadSpec, path: str, include_headers: bool
) -> pa.RecordBatch:
    """Python-object path: legacy message sets and ``includeHeaders`` with headers present."""
    keys, values, offs, tss, tstypes, heads = [], [], [], [], [], []
    for info in infos:
        rb = RecordBatch(info, view[info.position : info.position + info.size], path)
        for r in rb.records():
            keys.append(r.key)
            values.append(r.value)
            offs.append(r.offset)
            ts = r.timestamp if r.timestamp is not None else -1
            tss.append(ts * 1000)
            tstypes.append(r.timestamp_type if info.magic > 0 else -1)
            heads.append([{"key": k, "value": v} for k, v in r.headers] if r.headers else None)
    n = len(offs)
    cols = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        _const_string(spec.topic, n),
        _const_i32(spec.partition, n),
        pa.array(offs, pa.int64()),
        pa.array(tss, pa.int64()).view(pa.timestamp("us", tz="UTC")),
        pa.array(tstypes, pa.int32()),
    ]
    if include_headers:
        cols.append(pa.array(heads, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema(include_headers))


def build_arrow(
    view: memoryview, infos: List[BatchInfo], spec: ReadSpec, path: str
) -> Optional[pa.RecordBatch]:
    """One Arrow batch from whole record batches ``infos`` (positions relative to ``view``).

    Control batches are dropped; rows outside ``[spec.start, spec.end)`` are
    cut off. Under read_committed the caller has taken the aborted batches out of
    ``infos`` already (:class:`_Committed`). Raises :class:`CorruptRecordError` (naming ``path``) when a
    CRC-valid batch holds malformed records.

    Complexity: O(bytes) in C plus O(batches) Python calls.
    """
    data = [i for i in infos if not (i.magic == 2 and i.attributes & ATTR_CONTROL)]
    if not data:
        return None
    include_headers = spec.include_headers
    if any(i.magic != 2 for i in data):
        rb = _slow_batch(view, data, spec, path, include_headers)
        return _cut(rb, spec)
    what = f"malformed records in {spec.topic}-{spec.partition}"
    # Compressed batches are decompressed first (their size decides the buffers); the rest are
    # decoded where they lie in ``view``.
    inflated = {
        i.position: _records_section(view[i.position : i.position + i.size], i, path)
        for i in data
        if i.attributes & ATTR_COMPRESSION_MASK
    }
    for i in data:  # before sizing the buffers: a CRC-valid batch may still claim 2**31 records
        check_record_count(i.records_count, len(inflated[i.position]) if i.position in inflated
                           else i.size - BATCH_OVERHEAD, f"{what} batch at offset {i.base_offset}", path, i.position)
    n = sum(i.records_count for i in data)
    cap = sum(i.size for i in data if i.position not in inflated) + sum(len(x) for x in inflated.values())
    arr = _Columns(n, cap, include_headers)
    cols = arr.cols
    first, last = infos[0], infos[-1]
    if last.position + last.size - first.position == sum(i.size for i in infos):
        # The usual case: the batches lie back to back; one C call decodes every uncompressed one
        # up to the next compressed batch (control batches are skipped in C).
        by_pos = {i.position: i for i in infos}
        pos, stop = first.position, last.position + last.size
        while True:
            pos = cols.batches(view, pos, stop, path, what)
            if pos >= stop:
                break
            info = by_pos.get(pos)
            if info is None or not info.attributes & ATTR_COMPRESSION_MASK:
                raise CorruptRecordError(f"{what}: no decodable batch at byte {pos}", path=path, position=pos)
            if info.position in inflated:  # (a compressed control batch adds no rows)
                _decode_one(cols, inflated[info.position], info, path, what)
            pos += info.size
    else:
        for info in data:
            section = inflated.get(info.position)
            if section is None:
                section = view[info.position + BATCH_OVERHEAD : info.position + info.size]
            _decode_one(cols, section, info, path, what)
    if cols.rows != n:  # the C core checks each batch's count; this guards the walk itself
        raise CorruptRecordError(f"{what}: decoded {cols.rows} records, the batch headers say {n}",
                                 path=path, position=first.position)
    head_rows: Optional[List[object]] = None
    if include_headers:
        head_rows = [None] * n
        if cols.header_rows:
            counts = arr.bufs["header_count"].to_pybytes()
            k = 0
            for info in data:
                c = info.records_count
                if counts[4 * k : 4 * (k + c)] != bytes(4 * c):
                    rb = RecordBatch(info, view[info.position : info.position + info.size], path)
                    head_rows[k : k + c] = [
                        [{"key": hk, "value": hv} for hk, hv in r.headers] if r.headers else None for r in rb.records()
                    ]
                k += c
    topic, partition = _Constants.get(spec.topic, spec.partition, n)
    b = arr.bufs
    cols_out = [
        arr.binary("key", n, cols.key_used, cols.key_nulls),
        arr.binary("value", n, cols.value_used, cols.value_nulls),
        topic,
        partition,
        pa.Array.from_buffers(pa.int64(), n, [None, b["offset"]]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, b["timestamp"]]),
        pa.Array.from_buffers(pa.int32(), n, [None, b["timestamp_type"]]),
    ]
    if head_rows is not None:
        cols_out.append(pa.array(head_rows, HEADERS_TYPE))
    rb = pa.RecordBatch.from_arrays(cols_out, schema=arrow_schema(include_headers))
    return _cut(rb, spec)


def _decode_one(cols: ArrowColumns, section: Union[memoryview, bytes], info: BatchInfo, path: str, what: str) -> None:
    """One batch's (uncompressed or decompressed) records section into ``cols``."""
    check_record_count(info.records_count, len(section), what, path, info.position)
    cols.records(section, info.records_count, info.base_offset, info.base_timestamp, info.max_timestamp,
                 info.attributes, path, info.position, f"{what} batch at offset {info.base_offset}")


def _cut(rb: pa.RecordBatch, spec: ReadSpec) -> Optional[pa.RecordBatch]:
    """Rows with ``start <= offset < end`` (offsets are sorted: a prefix and a suffix go)."""
    offs = rb.column(4)
    n = len(offs)
    if n == 0:
        return None
    lo = 0
    if offs[0].as_py() < spec.start:
        lo = pc.sum(pc.less(offs, spec.start)).as_py() or 0
    hi = n
    if offs[n - 1].as_py() >= spec.end:
        hi = n - (pc.sum(pc.greater_equal(offs, spec.end)).as_py() or 0)
    if hi <= lo:
        return None
    return rb if (lo, hi) == (0, n) else rb.slice(lo, hi - lo)


# ---------------------------------------------------------------------------
# Walking the log
# ---------------------------------------------------------------------------


def _index_positions(seg: object) -> List[Tuple[int, int]]:
    """(offset, position) entries of a segment's offset index (empty when unusable)."""
    try:
        seg.ensure_indexes()  # type: ignore[attr-defined]
        data = bytes(seg.offset_index.data)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a damaged index only makes skipping coarser
        return []
    base = seg.base_offset  # type: ignore[attr-defined]
    return [(base + rel, pos) for rel, pos in offset_index_entries(data)]


def _damaged(spec: ReadSpec, target: int, reason: str, path: str, position: int) -> None:
    if spec.fail_on_data_loss:
        raise CorruptRecordError(
            f"corrupt data in {spec.topic}-{spec.partition} while reading offsets [{target}, {spec.end}): {reason}. "
            "Set the option failOnDataLoss=false to skip the damaged range",
            path=path,
            position=position,
        )


def read_range(spec: ReadSpec, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """Yield Arrow batches holding every record of ``[spec.start, spec.end)``.

    Raises :class:`CorruptRecordError` naming the segment file and byte
    position when a batch is damaged, and :class:`DataLossError` when offsets
    in the range are gone (retention, truncation); with
    ``fail_on_data_loss=False`` both are skipped and reported instead
    (:func:`report_data_loss`).

    Complexity: O(bytes read). Durability: reads only; never writes the log.
    """
    if spec.end <= spec.start:
        return
    lg = Log.open(spec.dir, read_only=True)
    try:
        yield from _read_log(lg, spec, chunk_bytes)
    finally:
        lg.close()


class _Committed:
    """read_committed for one task: Kafka's consumer-side filter (:class:`ReadCommittedFilter`) over
    the range's batches in offset order, with the aborted transactions of ``[start, end)`` from the
    segments' ``.txnindex`` (:meth:`Log.aborted_transactions`, read-only) - exactly what a
    read_committed fetch of the range would carry. The planned end is at or below the partition's
    last stable offset (:func:`pylog.spark.layout.last_stable_offset`), so every transaction in
    range has its marker in the log."""

    __slots__ = ("_filter",)

    def __init__(self, lg: Log, spec: ReadSpec) -> None:
        self._filter = ReadCommittedFilter(lg.aborted_transactions(spec.start, spec.end))

    def visible(self, view: memoryview, infos: List[BatchInfo], path: str) -> List[BatchInfo]:
        """``infos`` without the batches of aborted transactions (control batches stay: the decoder skips
        them). Every batch must be passed, in order, once. Raises :class:`CorruptRecordError` for a
        control batch whose key does not decode."""
        out = []
        for i in infos:
            batch = RecordBatch(i, view[i.position : i.position + i.size], path)
            if self._filter.keep(batch) or batch.is_control:
                out.append(i)
        return out


def _read_log(lg: Log, spec: ReadSpec, chunk_bytes: int) -> Iterator[pa.RecordBatch]:
    target, end = spec.start, spec.end
    committed = _Committed(lg, spec) if spec.read_committed else None
    if target < lg.log_start_offset:
        lost_to = min(lg.log_start_offset, end)
        reason = f"below the log start offset {lg.log_start_offset} (removed by retention or delete_records)"
        if spec.fail_on_data_loss:
            raise DataLossError(
                f"offsets [{target}, {lost_to}) of {spec.topic}-{spec.partition} are gone from {spec.dir}: {reason}. "
                "Set the option failOnDataLoss=false to skip them"
            )
        report_data_loss(spec, target, lost_to, reason)
        target = lost_to
    bases = list(lg.segments.keys())
    i = max(0, bisect.bisect_right(bases, target) - 1)
    last_path, last_pos = spec.dir, 0
    pending_loss: Optional[Tuple[int, str, str]] = None  # (from, reason, path) awaiting its end
    while target < end and i < len(bases):
        seg = lg.segments[bases[i]]
        path = seg.log_path
        size = seg.size
        try:
            found = seg.translate_offset(target)
            pos = None if found is None else found[0]
        except CorruptRecordError as exc:
            bad = exc.position or 0
            _damaged(spec, target, str(exc), path, bad)
            pos, pending_loss = _skip_to(seg, bad, size), (target, str(exc), path)
        if pos is None:
            i += 1
            continue
        while target < end and pos < size:
            chunk = seg.read(pos, min(chunk_bytes, size - pos))
            view = memoryview(chunk)
            res = scan(view, verify_crc=True)
            infos = [b for b in res.batches if b.base_offset < end]
            if pending_loss is not None and infos:
                lo, why, p = pending_loss
                report_data_loss(spec, lo, max(lo, infos[0].base_offset), why, p)
                pending_loss = None
            if infos:
                try:
                    mine = [b for b in infos if b.last_offset >= target]
                    if committed is not None:
                        mine = committed.visible(view, mine, path)
                    rb = build_arrow(view, mine, spec_at(spec, target), path) if mine else None
                except CorruptRecordError as exc:
                    if spec.fail_on_data_loss:
                        raise
                    rb = None
                    report_data_loss(spec, infos[0].base_offset, infos[-1].last_offset + 1, str(exc), path)
                if rb is not None and rb.num_rows:
                    yield rb
                target = max(target, infos[-1].last_offset + 1)
                last_path, last_pos = path, pos + infos[-1].position + infos[-1].size
            if len(infos) < len(res.batches) or target >= end:
                target = max(target, end)
                break  # the range ends here: whatever follows is not ours to judge
            pos += res.valid_bytes
            if res.ok:
                continue
            if res.torn:
                if res.valid_bytes:
                    continue
                whole = _read_whole(seg, pos, size)
                if whole is None:
                    break  # torn tail: nothing complete past here in this segment
                wview = memoryview(whole)
                wres = scan(wview, verify_crc=True, max_batches=1)
                if wres.batches:
                    b = wres.batches[0]
                    if b.base_offset >= end:
                        target = end
                        break
                    one = [b] if committed is None else committed.visible(wview, [b], path)
                    rb = build_arrow(wview, one, spec_at(spec, target), path) if one else None
                    if rb is not None and rb.num_rows:
                        yield rb
                    target = max(target, b.last_offset + 1)
                    pos += b.size
                    continue
                res = wres  # fall through to corruption handling
            reason = f"invalid batch: {res.reason}"
            _damaged(spec, target, reason, path, pos)
            pending_loss = (target, reason, path)
            nxt = _skip_to(seg, pos, size)
            if nxt is None:
                break
            pos = nxt
        i += 1
    if pending_loss is not None:
        lo, why, p = pending_loss
        nxt_start = bases[i] if i < len(bases) else end
        report_data_loss(spec, lo, min(max(lo, nxt_start), end), why, p)
        target = max(target, min(nxt_start, end))
    if target < end:
        reason = f"the log ends at offset {target} ({last_path} byte {last_pos}): truncated or damaged since planning"
        if spec.fail_on_data_loss:
            raise DataLossError(
                f"offsets [{target}, {end}) of {spec.topic}-{spec.partition} are missing from {spec.dir}: {reason}. "
                "Set the option failOnDataLoss=false to skip them"
            )
        report_data_loss(spec, target, end, reason, last_path)


def spec_at(spec: ReadSpec, target: int) -> ReadSpec:
    if target == spec.start:
        return spec
    return ReadSpec(
        spec.topic, spec.partition, spec.dir, target, spec.end, spec.include_headers, spec.fail_on_data_loss,
        spec.read_committed, spec.data_loss_log,
    )


def _skip_to(seg: object, bad_pos: int, size: int) -> Optional[int]:
    """Position of the first indexed batch after ``bad_pos`` in ``seg`` (None: none left)."""
    for _off, p in _index_positions(seg):
        if p > bad_pos and p < size:
            return p
    return None


def _read_whole(seg: object, pos: int, size: int) -> Optional[bytes]:
    """One batch at ``pos`` read whole (it is larger than a chunk); None for a torn tail."""
    head = seg.read(pos, LOG_OVERHEAD)  # type: ignore[attr-defined]
    if len(head) < LOG_OVERHEAD:
        return None
    n = batch_length_of(head)
    if n <= 0:
        return head  # invalid length: let scan report it
    if n > size - pos - LOG_OVERHEAD:
        return None
    return seg.read(pos, n + LOG_OVERHEAD)  # type: ignore[attr-defined]
