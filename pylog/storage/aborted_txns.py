"""The aborted transactions a read_committed fetch needs (Kafka's ``collectAbortedTransactions``).

A read_committed fetch of a partition returns the batches of ``[fetch_offset,
end)`` (all below the last stable offset) together with the list of aborted
transactions whose records may be among them: ``(producer id, first offset)``
for each transaction whose ABORT marker is at or after ``fetch_offset`` and
whose first record is before the fetch's *upper bound*. The consumer
(:mod:`pylog.client.txn_filter`) drops a transactional batch of such a producer
from the transaction's first offset until that producer's ABORT marker.

The entries live in the ``.txnindex`` of the segment that holds each ABORT
marker (:mod:`pylog.storage.txn_index`). A marker at or after ``fetch_offset``
is in the segment holding ``fetch_offset`` or a later one, so the search starts
there and walks forward, as Kafka's ``LocalLog.collectAbortedTransactions``
does, until a segment's index reports the search complete (an entry whose
``last_stable_offset`` is at or past the upper bound: every later abort has a
first offset at or past it too) or the segments run out.

The upper bound (:func:`fetch_upper_bound`) may be larger than the end of the
fetched data - a larger bound only adds entries whose first offset is past
every fetched batch, which the consumer never reaches - but never smaller:
Kafka takes the offset the segment's offset index gives for the fetch's last
byte, else the next segment's base offset, else the log end offset; pylog also
caps it by the last stable offset, above which a read_committed fetch returns
nothing.

Nothing here does I/O itself: the functions take the per-segment indexes
(anything with :meth:`~pylog.storage.txn_index.TransactionIndex.collect_aborted`;
a real index reads its file once, on first use).

Complexity: O(log segments) to find the first segment plus O(entries) of the
segments walked. Durability: none (reads only). Thread-safety: pure functions;
the indexes' owner (the log's lock) serializes calls that reach a
:class:`~pylog.storage.txn_index.TransactionIndex`.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import List, Optional, Protocol, Sequence, Tuple

from pylog.errors import InvalidOffsetError
from pylog.storage.txn_index import AbortedTxn


class AbortedTxnSource(Protocol):
    """One segment's aborted-transaction index (:class:`~pylog.storage.txn_index.TransactionIndex`)."""

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> Tuple[List[AbortedTxn], bool]: ...


def fetch_upper_bound(*, fetched_end: Optional[int], next_segment_base: Optional[int], log_end_offset: int,
                      last_stable_offset: int) -> int:
    """The upper bound of the aborted-transaction search for one fetch.

    ``fetched_end`` is the first offset after the fetched data when the reader
    knows it (one past the last batch's last offset, or what the offset index
    gives for the fetch's last byte), None when it does not; then the next
    segment's base offset (None: the fetch read the active segment) or the log
    end offset stands in, as in Kafka's ``addAbortedTransactions``. The result
    is capped by ``last_stable_offset`` (a read_committed fetch stops there),
    but never below ``fetched_end``.

    >>> fetch_upper_bound(fetched_end=None, next_segment_base=100, log_end_offset=250, last_stable_offset=90)
    90
    >>> fetch_upper_bound(fetched_end=None, next_segment_base=None, log_end_offset=250, last_stable_offset=300)
    250

    Complexity: O(1).
    """
    if fetched_end is not None:
        bound = fetched_end
    elif next_segment_base is not None:
        bound = next_segment_base
    else:
        bound = log_end_offset
    capped = min(bound, last_stable_offset)
    return capped if fetched_end is None else max(capped, fetched_end)


def collect_aborted_transactions(segments: Sequence[Tuple[int, AbortedTxnSource]], fetch_offset: int,
                                 upper_bound: int) -> List[AbortedTxn]:
    """The aborted transactions overlapping ``[fetch_offset, upper_bound)``, in marker order.

    ``segments`` are ``(base offset, transaction index)`` for the log's
    segments in base-offset order (all of them, or those from the one holding
    ``fetch_offset`` on). An entry is returned when its marker is at or after
    ``fetch_offset`` and its first offset is before ``upper_bound``; the walk
    stops at the first segment whose index reports the search complete. An
    empty range (``upper_bound <= fetch_offset``) has none.

    Raises :class:`~pylog.errors.InvalidOffsetError` when the base offsets do
    not increase strictly (a caller's bug: the search could then miss a
    segment). Complexity: see the module docstring.
    """
    if upper_bound <= fetch_offset:
        return []
    bases = [base for base, _ in segments]
    for i in range(1, len(bases)):
        if bases[i] <= bases[i - 1]:
            raise InvalidOffsetError(f"segment base offsets must increase: {bases[i]} follows {bases[i - 1]} "
                                     f"(aborted-transaction search from offset {fetch_offset})")
    # the segment holding fetch_offset: the last one whose base is at or below it (or the first)
    start = max(bisect_right(bases, fetch_offset) - 1, 0)
    found: List[AbortedTxn] = []
    for _, index in segments[start:]:
        entries, complete = index.collect_aborted(fetch_offset, upper_bound)
        found.extend(entries)
        if complete:
            break
    return found


__all__ = ["AbortedTxnSource", "fetch_upper_bound", "collect_aborted_transactions"]
