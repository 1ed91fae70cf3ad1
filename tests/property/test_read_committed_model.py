"""read_committed end to end against a pure-Python model (hypothesis).

A random history interleaves several transactional producers' batches with
their COMMIT/ABORT markers, idempotent (non-transactional, with a producer id)
and plain batches, leaving some transactions open; a random high watermark
gives the LSO (Kafka's: the first offset of a transaction that is open or whose
marker is not below the HW). The segments are cut at random batch boundaries,
each with a real ``.txnindex`` holding the aborts whose marker it contains.

A consumer starts at a random offset below the LSO and fetches until it reaches
it: each fetch takes a random number of batches (so a fetch may end in the
middle of a transaction, or just before its marker), a random upper bound at or
above the fetch's end for the aborted-transaction search, and gets the aborted
list from :func:`collect_aborted_transactions` in a random order. The records
:func:`filter_fetch` hands out, over all the fetches, must equal the model's
committed view in order (the model asks each batch's transaction for its
outcome; it uses neither the markers nor the index); no control record is
returned; every fetch advances the position exactly past its last batch
(markers and aborted batches included). The consumer's decoder
(:meth:`pylog.client.fetch_decoder.FetchDecoder.decode_committed`) hands out the
same records and next offset as :func:`filter_fetch` for every fetch.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import List, Tuple

from hypothesis import given, strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "unit"))

from txn_history import TxnLog  # noqa: E402

from pylog.client.fetch_decoder import FetchDecoder  # noqa: E402
from pylog.client.txn_filter import AbortedTransaction, filter_fetch  # noqa: E402
from pylog.client.types import ConsumerRecord  # noqa: E402
from pylog.storage.aborted_txns import collect_aborted_transactions, fetch_upper_bound  # noqa: E402
from pylog.storage.txn_index import TransactionIndex  # noqa: E402

TXN_PIDS = (1000, 1001, 1002)
IDEMPOTENT_PID = 2000

# one step of a history: (kind, producer (for an end: which open transaction), records in the batch)
_step = st.tuples(st.sampled_from(["txn", "txn", "txn", "commit", "abort", "abort", "idempotent", "plain"]),
                  st.integers(0, len(TXN_PIDS) - 1), st.integers(1, 3))


def build(steps: List[Tuple[str, int, int]]) -> TxnLog:
    log = TxnLog()
    for kind, p, n in steps:
        pid = TXN_PIDS[p]
        if kind == "txn":
            log.data(pid, n, transactional=True)
        elif kind in ("commit", "abort"):  # ends one of the open transactions, if any
            open_pids = sorted(log.open)
            if open_pids:
                log.end(open_pids[p % len(open_pids)], commit=kind == "commit")
        elif kind == "idempotent":
            log.data(IDEMPOTENT_PID, n, transactional=False)
        else:
            log.data(-1, n, transactional=False)
    return log


@given(st.lists(_step, min_size=8, max_size=60), st.data())
def test_read_committed_fetches_equal_the_committed_view(steps: List[Tuple[str, int, int]],
                                                         data: st.DataObject) -> None:
    log = build(steps)
    # most histories end their transactions (else the LSO stays near the first open one)
    for pid in sorted(log.open):
        if data.draw(st.integers(0, 3), label=f"end open transaction of {pid}"):
            log.end(pid, commit=data.draw(st.booleans(), label="commit"))
    if not log.batches:
        return
    leo = log.log_end_offset
    bounds = log.boundaries()
    hw = data.draw(st.one_of(st.just(leo), st.sampled_from(bounds)), label="high watermark")
    lso = log.last_stable_offset(hw)
    start = data.draw(st.integers(0, lso), label="start offset")
    seg_bases = sorted({0} | set(data.draw(st.lists(st.sampled_from(bounds[1:-1] or [0]), max_size=4),
                                          label="segment bases")))
    directory = tempfile.mkdtemp(prefix="readcommitted-")
    segments: List[Tuple[int, TransactionIndex]] = []
    try:
        segments = log.segment_indexes(directory, seg_bases)
        seen: List[Tuple[int, bytes]] = []
        decoder = FetchDecoder(ConsumerRecord)
        pos = start
        while pos < lso:
            first = log.batch_index_at(pos)
            below = sum(1 for b in log.batches[first:] if b.base_offset < lso)
            count = data.draw(st.integers(1, min(below, 8)), label="batches in fetch")
            payload, fetched_end = log.fetch_bytes(first, count)
            assert fetched_end <= lso
            later = [b for b in seg_bases if b > pos]
            upper = data.draw(st.sampled_from([
                fetched_end,
                fetch_upper_bound(fetched_end=fetched_end, next_segment_base=None, log_end_offset=leo,
                                  last_stable_offset=lso),
                fetch_upper_bound(fetched_end=None, next_segment_base=later[0] if later else None,
                                  log_end_offset=leo, last_stable_offset=lso),
                leo,
            ]), label="upper bound")
            upper = max(upper, fetched_end)  # never below the fetched data (the broker's rule)
            entries = collect_aborted_transactions(segments, pos, upper)
            aborted = data.draw(st.permutations([AbortedTransaction(e.producer_id, e.first_offset)
                                                 for e in entries]), label="aborted list order")
            out = filter_fetch(payload, pos, aborted, last_stable_offset=lso)
            assert out.next_offset == fetched_end, (pos, fetched_end, out)
            # the consumer's decoder (run decoder between the listed transactions, filter inside
            # them) hands out the same records and moves to the same offset
            got: List[ConsumerRecord] = []
            pairs = [(a.producer_id, a.first_offset) for a in aborted]
            nxt = decoder.decode_committed(payload, pos, lso, pairs, "t", 0, got.extend)
            assert nxt == out.next_offset, (pos, nxt, out.next_offset)
            assert [(r.offset, r.value) for r in got] == [(r.offset, r.value) for r in out.records]
            assert all(r.key == b"k" for r in got)
            for r in out.records:
                assert r.key == b"k", f"control record at {r.offset} handed out"
                assert pos <= r.offset < fetched_end
            seen.extend((r.offset, r.value) for r in out.records)
            pos = out.next_offset
        assert pos == lso
        assert seen == log.committed_view(start, lso)
    finally:
        for _, idx in segments:
            idx.close()
        shutil.rmtree(directory, ignore_errors=True)
