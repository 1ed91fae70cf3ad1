"""Fetched bytes to consumer records, a whole run of batches per C call.

A fetch response holds up to ``max_partition_fetch_bytes`` of consecutive
batches. Decoding them one :class:`~pylog.record.RecordBatch` at a
time costs tens of microseconds of Python per batch on top of the records
themselves; :class:`FetchDecoder` instead asks the C core
(``plg_decode_fetch_run``) for every record of the leading *plain* batches
at once - uncompressed v2, not control, no headers, no null value, one
leader epoch and timestamp type, keys all null or all present (what a
producer of plain values writes) - as columns: absolute offsets and
timestamps, and Python ``struct`` formats that cut every key and value out
of the fetched buffer in one ``unpack_from`` call. The run is handed over
as a :class:`RecordRun`, whose records are built (one ``map``/``zip``) when
they are taken. Any other batch (compressed,
with headers or tombstones, legacy, reaching the high watermark) goes to the
caller's general per-batch decoder, and the run resumes after it.

The C walk checks the framing and the CRC of every batch (the consumer's
``check.crcs``), bounds-checks every field, and reports a malformed entry,
which becomes :class:`~pylog.errors.CorruptRecordError` with its position
in the response - after the records of the batches before it were handed
over, as the per-batch decoder does.

Complexity: O(bytes) in C plus O(records) tuple construction; the Python
overhead is per run (usually one per response), not per batch.

Thread-safety: a decoder reuses its scratch arrays, so one decoder belongs
to one thread (the consumer's loop thread).
"""
from __future__ import annotations

from itertools import repeat
from typing import Any, Callable, Iterator, List, Optional

from pylog.client.txn_filter import AbortedTransaction, ReadCommittedFilter
from pylog.errors import CorruptRecordError
from pylog.record import RecordBatch, scan
from pylog.record.codec import decode_columns, record_fields
from pylog.record.fetch_run import (
    MAX_RUN_RECORDS,
    RUN_CORRUPT,
    RUN_END,
    RUN_SLOW,
    FetchRunScratch,
    run_fields,
    scratch_for,
)

_new_tuple = tuple.__new__


def batch_records(batch: RecordBatch, topic: str, partition: int, record_cls: Any) -> List[Any]:
    """All records of one batch as ``record_cls`` tuples (the general path: any codec, headers,
    tombstones, legacy magic), decoded columnwise (one C call; tuples built by map/zip)."""
    info = batch.info
    if info.magic != 2:
        return [record_cls(topic, partition, r.offset, r.key, r.value, r.timestamp, r.headers, r.timestamp_type)
                for r in batch.records()]
    count = info.records_count
    if count == 0:
        return []
    data = batch.records_section()
    cols = decode_columns(data, count, batch.path, info.position)
    tst = batch.timestamp_type
    values, keys, headers, timestamps, offsets = record_fields(
        data, cols, info.base_offset, info.base_timestamp, tst, info.max_timestamp, batch.path, info.position)
    return list(map(_new_tuple, repeat(record_cls), zip(
        repeat(topic), repeat(partition), offsets, keys, values, timestamps, headers, repeat(tst),
        repeat(info.partition_leader_epoch))))



class RecordRun:
    """The records of one run, as columns; ``take`` builds them into record tuples.

    The consumer buffers runs and builds records only when ``poll`` hands
    them out, ``max_poll_records`` at a time: a record object then lives from
    the ``poll`` that returns it until the application drops it, instead of
    from the fetch (up to ``max_partition_fetch_bytes`` ahead). Record tuples
    are NamedTuples, which CPython's collector never untracks, so each one
    alive across collections is scanned again by every older-generation
    collection; building late keeps most of them out of those (measured in
    docs/benchmarks.md).

    ``offsets`` is a range or a list; ``keys`` a tuple, or None when every key
    is null; ``timestamps`` a list, or one int shared by every record.

    Thread-safety: immutable; ``take`` may run on any thread.
    """

    __slots__ = ("record_cls", "topic", "partition", "offsets", "keys", "values", "timestamps",
                 "timestamp_type", "leader_epoch")

    def __init__(self, record_cls: Any, topic: str, partition: int, offsets: Any, keys: Optional[tuple],
                 values: tuple, timestamps: Any, timestamp_type: int, leader_epoch: int):
        self.record_cls = record_cls
        self.topic = topic
        self.partition = partition
        self.offsets = offsets
        self.keys = keys
        self.values = values
        self.timestamps = timestamps
        self.timestamp_type = timestamp_type
        self.leader_epoch = leader_epoch

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.take(0, len(self.values)))

    def offset_at(self, i: int) -> int:
        """The offset of record ``i`` (no record built)."""
        return self.offsets[i]

    def take(self, i: int, j: int) -> List[Any]:
        """Records ``i`` to ``j - 1`` as record tuples. O(j - i)."""
        whole = i == 0 and j >= len(self.values)
        keys = repeat(None) if self.keys is None else (self.keys if whole else self.keys[i:j])
        ts = self.timestamps
        timestamps = repeat(ts) if type(ts) is int else (ts if whole else ts[i:j])
        return list(map(_new_tuple, repeat(self.record_cls), zip(
            repeat(self.topic), repeat(self.partition), self.offsets if whole else self.offsets[i:j], keys,
            self.values if whole else self.values[i:j], timestamps, repeat(()), repeat(self.timestamp_type),
            repeat(self.leader_epoch))))


class FetchDecoder:
    """Decodes fetched partition data into ``record_cls`` tuples (see the module docstring).

    ``record_cls`` is a NamedTuple with the fields (topic, partition, offset,
    key, value, timestamp, headers, timestamp_type, leader_epoch).
    """

    __slots__ = ("record_cls", "next_offset", "_cap", "_scratch")

    def __init__(self, record_cls: Any):
        self.record_cls = record_cls
        self.next_offset = -1  # during decode(): the next fetch offset for what was handed over so far
        self._cap = 0
        self._grow(1024)

    def _grow(self, cap: int) -> None:
        """Scratch for ``cap`` records (reused; grown on demand, at most what one response can hold)."""
        self._cap = cap
        self._scratch = FetchRunScratch(cap)

    def decode(self, data: Any, pos: int, hw: int, topic: str, partition: int, emit: Callable[[Any], None],
               above_hw: Optional[Callable[[int], None]] = None) -> int:
        """Hand the records of ``data`` with ``pos <= offset < hw`` to ``emit``, in offset order.

        ``emit`` gets a :class:`RecordRun` for each run of plain batches and a
        list of records for each batch decoded by the general path
        (:func:`batch_records`). A record at or above ``hw`` is never handed
        out; ``above_hw(offset)`` hears of it (a leader must not serve one).
        Returns the next fetch offset: one past the last offset of every batch
        below ``hw`` (control batches and empty ones included, so a response
        ending with such a batch is not fetched forever), or ``pos``; while
        decoding, :attr:`next_offset` holds the same for what was handed over
        so far. Raises CorruptRecordError for malformed bytes, after emitting
        what came before them; stops silently at a torn tail.
        """
        view = memoryview(data)
        total = len(view)
        at = 0
        self.next_offset = nxt = pos
        last = -1  # offsets must increase from batch to batch, across runs and general batches too
        while at < total:
            run = self._run(view, at, total, pos, hw, last, topic, partition, emit)
            if run.next_offset > nxt:
                self.next_offset = nxt = run.next_offset
            at += run.consumed
            last = run.last_offset
            stop = run.stop
            if stop == RUN_END:
                break
            if stop != RUN_SLOW:
                continue  # the scratch was full: the run goes on from here
            batch = self._one_batch(view, at, last)
            if batch is None:
                break
            self.next_offset = nxt = max(nxt, self._general(batch, pos, hw, topic, partition, emit, above_hw))
            at += batch.info.size
            last = batch.info.last_offset
        return nxt

    def decode_committed(self, data: Any, pos: int, lso: int, aborted: Any, topic: str, partition: int,
                         emit: Callable[[Any], None], above_lso: Optional[Callable[[int], None]] = None) -> int:
        """:meth:`decode` for a read_committed response whose aborted-transaction list is not empty.

        A :class:`~pylog.client.txn_filter.ReadCommittedFilter` of ``aborted`` (``(producer_id,
        first_offset)`` pairs, any order) decides batch by batch from the first listed transaction's
        first offset until no listed producer is aborted any more: those batches go through the
        general path (the run decoder passes transactional batches through). The stretches before,
        between and after them, where the filter would keep every data batch
        (:meth:`~pylog.client.txn_filter.ReadCommittedFilter.clear_below`), go through the run
        decoder as in :meth:`decode` (it skips control batches itself). Hands out the records with
        ``pos <= offset < lso`` of the kept batches; returns the next fetch offset, one past every
        batch below ``lso`` (kept or dropped: markers and aborted transactions are not fetched
        again). Errors as :meth:`decode` (a malformed control record too).

        Complexity: as :meth:`decode`, plus one general decode per batch while a listed
        transaction is in effect and one record decode per marker there.
        """
        view = memoryview(data)
        total = len(view)
        at = 0
        self.next_offset = nxt = pos
        filt = ReadCommittedFilter([AbortedTransaction._make(a) for a in aborted])
        keep = filt.keep
        last = -1
        while at < total:
            clear = filt.clear_below()
            if clear > pos:
                # The run decoder up to the next listed transaction (or the LSO): the batch that
                # reaches it, or any the run leaves to the general path, comes back as RUN_SLOW.
                run = self._run(view, at, total, pos, clear if clear < lso else lso, last, topic, partition, emit)
                if run.next_offset > nxt:
                    self.next_offset = nxt = run.next_offset
                at += run.consumed
                last = run.last_offset
                stop = run.stop
                if stop == RUN_END:
                    break
                if stop != RUN_SLOW:
                    continue  # the scratch was full
            batch = self._one_batch(view, at, last)
            if batch is None:
                break
            info = batch.info
            at += info.size
            last = info.last_offset
            if keep(batch):
                nxt = max(nxt, self._general(batch, pos, lso, topic, partition, emit, above_lso))
            elif pos <= last < lso:
                nxt = max(nxt, last + 1)
            self.next_offset = nxt
        return nxt

    def _run(self, view: memoryview, at: int, total: int, pos: int, bound: int, last: int, topic: str,
             partition: int, emit: Callable[[Any], None]) -> Any:
        """One call of the C run decoder from ``view[at:]``: hands its records with ``pos <= offset <
        bound`` to ``emit`` as one :class:`RecordRun` and returns the run (its ``consumed``,
        ``next_offset``, ``last_offset`` and ``stop``); raises CorruptRecordError (position: the bad
        batch) when it stopped at malformed bytes. O(records of the run)."""
        need = scratch_for(total - at)
        if need > self._cap:
            self._grow(min(max(need, self._cap * 2), MAX_RUN_RECORDS))
        run = self._scratch.decode(view, at, total, pos, bound, last)
        count = run.records
        if count:
            first = run.offsets
            offsets: Any = range(first, first + count) if type(first) is int else first
            values, keys = run_fields(run, view, at)
            emit(RecordRun(self.record_cls, topic, partition, offsets, keys, values, run.timestamps,
                           run.timestamp_type, run.leader_epoch))
        if run.stop == RUN_CORRUPT:
            if run.next_offset > self.next_offset:  # what was handed over before the bad batch
                self.next_offset = run.next_offset
            raise CorruptRecordError(f"invalid batch: {run.stop_reason}", position=at + run.consumed)
        return run

    def _general(self, batch: RecordBatch, pos: int, hw: int, topic: str, partition: int,
                 emit: Callable[[Any], None], above_hw: Optional[Callable[[int], None]]) -> int:
        """One batch the run decoder leaves to the general path (compressed, headers, tombstones,
        legacy, control, or reaching the HW); returns the next fetch offset it allows."""
        nxt = pos
        last = batch.last_offset
        if last < pos:
            return nxt
        if batch.is_control:
            return last + 1
        recs = batch_records(batch, topic, partition, self.record_cls)
        # Filter when the batch reaches below the position or up to the HW - or when a record's
        # offset is past the batch's declared last offset (an inconsistent batch must not slip a
        # record at or above the HW through the last-offset check).
        if recs and (recs[0].offset < pos or last >= hw or max(r.offset for r in recs) > last):
            if above_hw is not None:
                for r in recs:
                    if r.offset >= hw:
                        above_hw(r.offset)
            recs = [r for r in recs if pos <= r.offset < hw]
        if recs:
            emit(recs)
            nxt = recs[-1].offset + 1
        # A batch below the HW moves the position past its last offset even when it yields no
        # record (an empty batch the cleaner keeps for its producer, or one whose remaining
        # records are all below the position): otherwise a response ending with it is refetched
        # forever.
        if last < hw:
            nxt = max(nxt, last + 1)
        return nxt

    @staticmethod
    def _one_batch(view: memoryview, at: int, last: int) -> Optional[RecordBatch]:
        """The batch at ``view[at:]`` for the general decoder (None at a torn tail); ``last`` is
        the last offset of the batch before it."""
        result = scan(view[at:], verify_crc=True, max_batches=1)
        if result.batches:
            info = result.batches[0]._replace(position=at)  # positions in errors: within the response
            if info.base_offset <= last if info.magic == 2 else info.last_offset <= last:
                raise CorruptRecordError(f"invalid batch: base offset {info.base_offset} is not above the "
                                         f"previous batch's last offset {last}", position=at)
            return RecordBatch(info, view[at:at + info.size])
        if not result.corrupt:
            return None
        raise CorruptRecordError(f"invalid batch: {result.reason}", position=at + result.valid_bytes)


__all__ = ["FetchDecoder", "RecordRun", "batch_records"]
