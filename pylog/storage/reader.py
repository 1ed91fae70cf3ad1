"""Batches read from a segment into :class:`~pylog.record.Record` objects, a run of batches per C call.

:meth:`pylog.storage.log.Log.read` hands the chunks it read (whole, framed,
CRC-checked batches) to :func:`records_of_chunk`, which takes the consumer's
``poll`` path (``docs/consumer-groups.md``, "How fetched bytes become
records"): one ``plg_decode_fetch_run`` call finds every record of the leading
*plain* batches (uncompressed v2, not control, no headers, no null value, one
timestamp type, keys all null or all present) as columns - absolute offsets,
timestamps, and ``struct`` formats that cut every key and value out of the
chunk in one ``unpack_from``. Any other batch (compressed, headers,
tombstones, legacy magic, reaching ``below``) is decoded by
:meth:`RecordBatch.records` and the run resumes after it.

The records are built by the C send-path extension's ``make_records``
(``pylog/_native/sendpath/sendpath.c``): ``Record`` is a NamedTuple, which CPython's
cycle collector tracks for its whole life (it untracks only exact tuples), so a
program holding many records made every older-generation collection scan
them all. A record of bytes, ``None`` and ints cannot be part of a reference
cycle, so ``make_records`` untracks it at once (``untrack_records`` does the
same for the general path's records); records with headers stay tracked. Without the extension (a build without
it) the same records are built by ``map``/``zip`` and stay tracked.

The plain-batch walk checks the CRC again (the chunk was checked when it was
read); a record field out of its batch's bounds raises
:class:`~pylog.errors.CorruptRecordError` naming the file and position.

Complexity: O(bytes) in C plus O(records) object construction; the Python
overhead is per run of batches, not per batch or record.
Thread-safety: reentrant; the scratch arrays are taken from a pool, one per
call in progress.
"""
from __future__ import annotations

from itertools import repeat
from typing import Any, List, Optional, Tuple

from pylog.errors import CorruptRecordError
from pylog.record import BatchInfo, Record, RecordBatch
from pylog.record.fetch_run import (
    RUN_CORRUPT,
    RUN_END,
    RUN_SLOW,
    give_back,
    make_records as _make_records,
    run_fields,
    scratch_for,
    take_scratch,
    untrack_records as _untrack_records,
)

_new_tuple = tuple.__new__


def build_records(values: Tuple[Any, ...], keys: Any, offsets: Any, timestamps: Any, timestamp_type: int) -> List[Record]:
    """``Record(values[i], keys[i], (), timestamps[i], offsets[i], timestamp_type)`` for every i.

    ``keys`` None: every key is null; ``offsets`` an int: the first of
    consecutive offsets; ``timestamps`` an int: shared by every record.
    Built (and untracked by the cycle collector) in C when the extension is
    built, by ``map``/``zip`` otherwise; the two give equal lists.
    """
    if _make_records is not None:
        return _make_records(Record, values, keys, offsets, timestamps, timestamp_type)  # type: ignore[no-any-return]
    n = len(values)
    offs = range(offsets, offsets + n) if type(offsets) is int else offsets
    ts = repeat(timestamps) if type(timestamps) is int else timestamps
    return list(map(_new_tuple, repeat(Record), zip(
        values, repeat(None) if keys is None else keys, repeat(()), ts, offs, repeat(timestamp_type))))


def records_of_chunk(view: memoryview, infos: List[BatchInfo], path: str, position: int, low: int,
                     below: int) -> Tuple[List[Record], Optional[CorruptRecordError]]:
    """The records with ``low <= offset < below`` of the consecutive batches ``infos`` in ``view``.

    ``view`` holds the batches (``infos[0].position == 0``; positions relative
    to ``view``), read at byte ``position`` of the file ``path`` (for errors).
    Control batches yield nothing. Returns the records and None, or - for a
    bad CRC or a malformed record - the records of the batches before the bad
    one and the :class:`CorruptRecordError` to raise after them (a reader
    gets every good record before the damage, as it did batch by batch).
    """
    out: List[Record] = []
    try:
        _decode_chunk(view, infos, path, position, low, below, out)
    except CorruptRecordError as exc:
        return out, exc
    return out, None


def _decode_chunk(view: memoryview, infos: List[BatchInfo], path: str, position: int, low: int,
                  below: int, out: List[Record]) -> None:
    if not infos:
        return
    last = infos[-1]
    total = last.position + last.size
    at = 0
    i = 0  # infos[i] is the first batch at or after `at`
    prev_last = -1
    s = take_scratch(scratch_for(total))
    try:
        while at < total:
            run = s.decode(view, at, total, low, below, prev_last, path, position)
            count = run.records
            if count:
                values, keys = run_fields(run, view, at)
                out += build_records(values, keys, run.offsets, run.timestamps, run.timestamp_type)
            at += run.consumed
            prev_last = run.last_offset
            stop = run.stop
            if stop == RUN_END:
                break
            if stop == RUN_CORRUPT:
                raise CorruptRecordError(f"invalid batch: {run.stop_reason}", path=path, position=position + at)
            if stop != RUN_SLOW:
                continue  # the scratch was full: the run goes on from here
            while i < len(infos) and infos[i].position < at:
                i += 1
            if i == len(infos) or infos[i].position != at:  # pragma: no cover - infos are consecutive
                raise CorruptRecordError("batch framing changed while reading", path=path, position=position + at)
            info = infos[i]
            batch = RecordBatch(info._replace(position=position + at), view[at : at + info.size], path)
            if not batch.is_control and batch.last_offset >= low:
                recs = batch.records()
                if recs and (recs[0].offset < low or batch.last_offset >= below or recs[-1].offset >= below):
                    recs = [r for r in recs if low <= r.offset < below]
                if _untrack_records is not None:
                    _untrack_records(recs)
                out += recs
            at += info.size
            prev_last = info.last_offset
    finally:
        give_back(s)


__all__ = ["build_records", "records_of_chunk"]
