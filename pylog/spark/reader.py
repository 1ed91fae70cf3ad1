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

from pylog.errors import CorruptRecordError, InvalidConfigurationError, OffsetOutOfRangeError
from pylog.record import compression as codecs
from pylog.record import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchInfo,
    RecordBatch,
    scan,
)
from pylog.record.codec import COLUMN_WIDTHS, ColumnTarget
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
_I64 = struct.Struct("<q")


def _const_i32(v: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(_I32.pack(v) * n)])


def _const_i64(v: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(_I64.pack(v) * n)])


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


_IOTA64: List[pa.Array] = [pa.array([0], pa.int64())]
_IOTA_BYTES: List[bytes] = [b""]


def _iota64(n: int) -> pa.Array:
    cur = _IOTA64[0]
    if len(cur) < n:
        cur = pa.array(range(max(n, 2 * len(cur))), pa.int64())
        _IOTA64[0] = cur
    return cur.slice(0, n)


def _iota_bytes(n: int) -> bytes:
    """0..n-1 as little-endian int32 bytes: what a dense batch's offset deltas look like."""
    cur = _IOTA_BYTES[0]
    if len(cur) < 4 * n:
        cur = _iota32(max(n, 1024)).buffers()[1].to_pybytes()[: 4 * max(n, 1024)]
        _IOTA_BYTES[0] = cur
    return cur[: 4 * n]


def _spans_of(infos: List[BatchInfo], bases: List[int]) -> Iterator[Tuple[int, int, int]]:
    k = 0
    for info, b in zip(infos, bases):
        yield k, info.records_count, b
        k += info.records_count


def _binary_from_lens(lens: pa.Array, data: pa.Buffer, n: int) -> pa.Array:
    """A binary array from int32 lengths (-1: null) and the values copied back to back."""
    valid = pc.greater_equal(lens, 0)
    if pc.all(valid).as_py():
        validity = None
        nulls = 0
        clipped = lens
    else:
        validity = valid.buffers()[1]
        nulls = n - pc.sum(valid).as_py()
        clipped = pc.max_element_wise(lens, pa.scalar(0, pa.int32()))
    ends = pc.cumulative_sum(clipped)
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), ends])
    return pa.Array.from_buffers(pa.binary(), n, [validity, offsets.buffers()[1], data], null_count=nulls)


class _Arrays:
    """Arrow buffers for ``n`` records' decoded columns and their gathered values and keys,
    filled by the C core through a :class:`pylog.record.codec.ColumnTarget`."""

    def __init__(self, n: int, cap: int, max_batch_records: int):
        self.n = n
        m = max(n, 1)
        self.bufs = {name: pa.allocate_buffer(m * width) for name, width in COLUMN_WIDTHS.items()}
        self.values = pa.allocate_buffer(max(cap, 1))
        self.keys = pa.allocate_buffer(max(cap, 1))
        self.cap = cap
        self.target = ColumnTarget({name: buf.address for name, buf in self.bufs.items()}, self.values.address,
                                   self.keys.address, cap, max_batch_records)

    def int_array(self, name: str, typ: pa.DataType, n: int) -> pa.Array:
        return pa.Array.from_buffers(typ, n, [None, self.bufs[name]])


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
    cut off. Raises :class:`CorruptRecordError` (naming ``path``) when a
    CRC-valid batch holds malformed records.

    Complexity: O(bytes) in C plus O(batches) Python calls.
    """
    data = [i for i in infos if not (i.magic == 2 and i.attributes & ATTR_CONTROL)]
    if spec.read_committed and any(i.magic == 2 and i.attributes & ATTR_TRANSACTIONAL for i in data):
        first = next(i for i in data if i.attributes & ATTR_TRANSACTIONAL)
        raise InvalidConfigurationError(
            f"{spec.topic}-{spec.partition}: the transactional batch at offset {first.base_offset} in {path} cannot be "
            "read with kafka.isolation.level=read_committed yet (pylog has no transaction index); use read_uncommitted"
        )
    if not data:
        return None
    include_headers = spec.include_headers
    if any(i.magic != 2 for i in data):
        rb = _slow_batch(view, data, spec, path, include_headers)
        return _cut(rb, spec)
    sections = [_records_section(view[i.position : i.position + i.size], i, path) for i in data]
    n = sum(i.records_count for i in data)
    cap = sum(len(s) for s in sections)
    arr = _Arrays(n, cap, max(i.records_count for i in data))
    target = arr.target
    k = 0
    off_bases: List[int] = []
    dense = True
    prev_last = -1
    ts_parts: List[pa.Array] = []
    type_parts: List[Tuple[int, int]] = []
    any_key = False
    head_rows: Optional[List[object]] = [] if include_headers else None
    od_arr = arr.int_array("offset_delta", pa.int32(), n)
    tsd_arr = arr.int_array("timestamp_delta", pa.int64(), n)
    for info, section in zip(data, sections):
        c = info.records_count
        if target.decode_batch(section, k, c, f"malformed records in {spec.topic}-{spec.partition} batch at offset "
                               f"{info.base_offset}", path, info.position):
            any_key = True
        if dense and (
            info.last_offset - info.base_offset + 1 != c
            or (k and info.base_offset != prev_last + 1)
            or target.raw("offset_delta", k, c) != _iota_bytes(c)
        ):
            dense = False
        prev_last = info.last_offset
        off_bases.append(info.base_offset)
        if info.attributes & ATTR_LOG_APPEND_TIME:
            ts_parts.append(_const_i64(info.max_timestamp * 1000, c))
            type_parts.append((1, c))
        else:
            d = tsd_arr.slice(k, c)
            if target.raw("timestamp_delta", k, c) == bytes(8 * c):
                ts_parts.append(_const_i64(info.base_timestamp * 1000, c))
            else:
                ts_parts.append(pc.multiply(pc.add(d, pa.scalar(info.base_timestamp, pa.int64())), 1000))
            type_parts.append((0, c))
        if head_rows is not None:
            if target.raw("header_count", k, c) == bytes(4 * c):
                head_rows.extend([None] * c)
            else:
                rb = RecordBatch(info, view[info.position : info.position + info.size], path)
                head_rows.extend(
                    [{"key": hk, "value": hv} for hk, hv in r.headers] if r.headers else None for r in rb.records()
                )
        k += c
    values = _binary_from_lens(arr.int_array("value_len", pa.int32(), n), arr.values, n)
    if any_key:
        keys = _binary_from_lens(arr.int_array("key_len", pa.int32(), n), arr.keys, n)
    else:
        keys = pa.nulls(n, pa.binary())
    if dense:  # offsets first..first+n-1 (no compaction gaps): one Arrow call for the chunk
        offsets = pc.add(_iota64(n), pa.scalar(off_bases[0], pa.int64()))
    else:
        offsets = pa.concat_arrays(
            [pc.add(od_arr.slice(s, c), pa.scalar(b, pa.int64())) for s, c, b in _spans_of(data, off_bases)]
        )
    ts = ts_parts[0] if len(ts_parts) == 1 else pa.concat_arrays(ts_parts)
    if all(t == type_parts[0][0] for t, _ in type_parts):
        tstype = _const_i32(type_parts[0][0], n)
    else:
        tstype = pa.concat_arrays([_const_i32(t, c) for t, c in type_parts])
    cols = [
        keys,
        values,
        _const_string(spec.topic, n),
        _const_i32(spec.partition, n),
        offsets,
        ts.view(pa.timestamp("us", tz="UTC")),
        tstype,
    ]
    if head_rows is not None:
        cols.append(pa.array(head_rows, HEADERS_TYPE))
    rb = pa.RecordBatch.from_arrays(cols, schema=arrow_schema(include_headers))
    return _cut(rb, spec)


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


def _read_log(lg: Log, spec: ReadSpec, chunk_bytes: int) -> Iterator[pa.RecordBatch]:
    target, end = spec.start, spec.end
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
                    rb = build_arrow(view, [b for b in infos if b.last_offset >= target], spec_at(spec, target), path)
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
                    rb = build_arrow(wview, [b], spec_at(spec, target), path)
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
