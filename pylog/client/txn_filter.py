"""The read_committed filter of one fetch response (the aborted-transaction handling of Kafka's ``CompletedFetch``).

A read_committed fetch returns only batches below the partition's last stable
offset (LSO), so every transaction with records among them has ended: its
COMMIT or ABORT marker is in the log below the LSO, in this response or a later
one. With the batches comes the list of aborted transactions that may overlap
them, ``(producer id, first offset)`` each
(:func:`pylog.storage.aborted_txns.collect_aborted_transactions`). The rules,
applied to the batches in offset order (Kafka's consumer, read from
``CompletedFetch.nextFetchedRecord``):

* a batch with a producer id first moves every listed transaction whose first
  offset is at or below the batch's last offset into the set of *aborted
  producers* (the list is taken in first-offset order, whatever order it came in);
* an ABORT marker (a control batch whose first record's key has type ABORT)
  takes its producer out of that set: the producer's records after it belong to
  a later transaction;
* a transactional batch of a producer in the set is dropped (its transaction
  was aborted);
* every control batch is dropped (COMMIT and ABORT markers, and any other type);
* everything else - committed transactional batches, non-transactional ones
  (idempotent or not), legacy messages - is kept.

The position advances past every batch below the LSO, kept or dropped, so a
response that ends with a marker or an aborted transaction is not fetched again.

:class:`ReadCommittedFilter` holds the state for one response and decides batch
by batch (for a decoder that walks the batches itself);
:func:`filter_fetch` applies it to a whole response's bytes.

The consumer's fetcher uses the filter through
:meth:`pylog.client.fetch_decoder.FetchDecoder.decode_committed` for every
read_committed response with a non-empty aborted list (docs/transactions.md, "Read side").

Complexity: O(batches + aborted entries · log entries) for the decisions; a
control batch costs one record decode. Durability: none. Thread-safety: a
:class:`ReadCommittedFilter` belongs to the thread that decodes its response;
:func:`filter_fetch` is a pure function.
"""
from __future__ import annotations

import heapq
from typing import Iterable, List, NamedTuple, Optional, Protocol, Set, Tuple

from pylog.record import NO_PRODUCER_ID, Buffer, Record, RecordBatch, iter_batches
from pylog.storage.control_record import ControlRecordType, parse_control_type


class AbortedTxnEntry(Protocol):
    """What the filter reads of an aborted transaction (a FetchResponse entry or a
    :class:`~pylog.storage.txn_index.AbortedTxn`)."""

    @property
    def producer_id(self) -> int: ...

    @property
    def first_offset(self) -> int: ...


class AbortedTransaction(NamedTuple):
    """One entry of a fetch response's aborted-transaction list (Kafka's ``FetchResponse.AbortedTransaction``)."""

    producer_id: int
    first_offset: int


class FilteredFetch(NamedTuple):
    """The outcome of :func:`filter_fetch`: the records handed out and the next fetch position."""

    records: List[Record]
    next_offset: int
    #: batches dropped: aborted transactional batches and control batches (a statistic)
    dropped_batches: int


def control_type(batch: RecordBatch) -> Optional[ControlRecordType]:
    """The type of a control batch's first record; None for a control batch without records.

    Raises :class:`~pylog.errors.CorruptRecordError` (naming the batch's path,
    position and offset) for a short or null key or a negative key version.
    O(first record) (the whole batch is decoded: a marker batch has one record).
    """
    records = batch.records()
    if not records:
        return None
    first = records[0]
    return parse_control_type(first.key, path=batch.path, position=batch.info.position, offset=first.offset)


class ReadCommittedFilter:
    """Which batches of one read_committed fetch response are handed out (see the module docstring).

    ``aborted`` is the response's aborted-transaction list, in any order.
    Call :meth:`keep` once for every batch of the response, in offset order,
    the dropped ones included: the state (which producers are aborted at this
    point) follows the batches.

    Complexity: building O(n log n) for n entries; :meth:`keep` O(log n) per
    entry it takes from the list plus O(1), or one record decode for a control
    batch. Thread-safety: none (one response, one decoding thread).

    >>> f = ReadCommittedFilter([AbortedTransaction(producer_id=7, first_offset=10)])
    >>> f.is_aborted(7, 9), f.is_aborted(7, 10)
    (False, True)
    """

    __slots__ = ("_pending", "_aborted")

    def __init__(self, aborted: Iterable[AbortedTxnEntry]) -> None:
        self._pending: List[Tuple[int, int]] = [(a.first_offset, a.producer_id) for a in aborted]
        heapq.heapify(self._pending)
        self._aborted: Set[int] = set()

    def _take_up_to(self, offset: int) -> None:
        """Move every listed transaction that begins at or before ``offset`` into the aborted set."""
        pending = self._pending
        while pending and pending[0][0] <= offset:
            self._aborted.add(heapq.heappop(pending)[1])

    def is_aborted(self, producer_id: int, last_offset: int) -> bool:
        """Whether a transactional batch of ``producer_id`` ending at ``last_offset`` is aborted, given
        the batches seen so far (advances the state to ``last_offset`` like a batch would)."""
        self._take_up_to(last_offset)
        return producer_id in self._aborted

    def clear_below(self) -> int:
        """How far batches may go past this filter unseen: while no producer is aborted, the first offset
        of the next listed transaction (a very large number when none is left) - every batch whose
        last offset is below it is kept unless it is a control batch, and :meth:`keep` would change
        nothing for it; -1 while a producer is aborted (every batch must be shown). A decoder uses
        it to hand the stretches between aborted transactions to a faster path. O(1).

        >>> f = ReadCommittedFilter([AbortedTransaction(producer_id=7, first_offset=10)])
        >>> f.clear_below()
        10
        """
        if self._aborted:
            return -1
        return self._pending[0][0] if self._pending else 1 << 63

    def keep(self, batch: RecordBatch) -> bool:
        """True when ``batch``'s records are handed out; False for a control batch or an aborted
        transactional batch. Raises :class:`~pylog.errors.CorruptRecordError` for a control batch
        whose key is malformed."""
        info = batch.info
        if info.magic < 2:
            return True  # legacy messages carry no producer id, no transaction, no control flag
        control = batch.is_control
        if info.producer_id != NO_PRODUCER_ID:
            self._take_up_to(info.last_offset)
            if control:
                if control_type(batch) == ControlRecordType.ABORT:
                    self._aborted.discard(info.producer_id)
                return False
            if batch.is_transactional and info.producer_id in self._aborted:
                return False
        return not control


def filter_fetch(data: Buffer, fetch_offset: int, aborted: Iterable[AbortedTxnEntry], *,
                 last_stable_offset: Optional[int] = None, path: Optional[str] = None) -> FilteredFetch:
    """The records a read_committed consumer hands out from one fetch response, and its next position.

    ``data`` holds the response's batches (a torn batch at the end is ignored,
    as the consumer ignores a partial last batch); ``fetch_offset`` is the
    position the fetch was made at (records below it, in the first batch, are
    not returned); ``aborted`` is the response's aborted-transaction list.
    ``last_stable_offset``, when given, is enforced here too: no record at or
    above it is returned and the position does not move past it.

    The next position is one past the last offset of every batch wholly below
    the LSO (kept or dropped), else ``fetch_offset`` - or one past the last
    record returned from a batch that reaches the LSO.

    Raises :class:`~pylog.errors.CorruptRecordError` (with ``path`` and the
    byte position) for invalid bytes or a malformed control record; nothing of
    the response is returned then.

    Complexity: O(bytes) (CRC check and decode of the kept batches).
    """
    lso = last_stable_offset
    filt = ReadCommittedFilter(aborted)
    records: List[Record] = []
    nxt = fetch_offset
    dropped = 0
    for batch in iter_batches(data, path=path):
        info = batch.info
        if lso is not None and info.base_offset >= lso:
            break
        if info.last_offset < fetch_offset:
            filt.keep(batch)  # before the position: only the state moves (an ABORT marker, say)
            continue
        if not filt.keep(batch):
            dropped += 1
        else:
            for rec in batch.records():
                if rec.offset >= fetch_offset and (lso is None or rec.offset < lso):
                    records.append(rec)
                    nxt = max(nxt, rec.offset + 1)
        if lso is None or info.last_offset < lso:
            nxt = max(nxt, info.last_offset + 1)
    return FilteredFetch(records, nxt, dropped)


__all__ = ["AbortedTxnEntry", "AbortedTransaction", "FilteredFetch", "ReadCommittedFilter", "control_type",
           "filter_fetch"]
