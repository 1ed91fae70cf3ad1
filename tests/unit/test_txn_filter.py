"""The read_committed filter (pylog/client/txn_filter.py): the edge cases, on logs built with the real encoders.

Each test builds a partition's log with :class:`txn_history.TxnLog` (real data
and marker batches), asks the real ``.txnindex`` collection for each fetch's
aborted list, and checks the records handed out and the next position. The
random interleavings are in tests/property/test_read_committed_model.py.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pytest

from txn_history import NOW_MS, TxnLog

from pylog.client.txn_filter import AbortedTransaction, ReadCommittedFilter, control_type, filter_fetch
from pylog.errors import CorruptRecordError
from pylog.record import Record, encode_batch, iter_batches, py_encode_legacy
from pylog.storage.aborted_txns import collect_aborted_transactions
from pylog.storage.control_record import ControlRecordType

P1, P2 = 1000, 1001


def fetch(log: TxnLog, tmp: str, pos: int, batches: int, *, segments: Sequence[int] = (0,),
          lso: Optional[int] = None) -> Tuple[List[int], int, List[AbortedTransaction]]:
    """One read_committed fetch of ``batches`` batches at ``pos``: (offsets handed out, next position,
    the aborted list the broker sent)."""
    first = log.batch_index_at(pos)
    payload, end = log.fetch_bytes(first, batches)
    d = os.path.join(tmp, f"fetch-{pos}-{batches}")
    os.makedirs(d)
    segs = log.segment_indexes(d, segments)
    try:
        aborted = [AbortedTransaction(e.producer_id, e.first_offset)
                   for e in collect_aborted_transactions(segs, pos, end)]
    finally:
        for _, idx in segs:
            idx.close()
    out = filter_fetch(payload, pos, aborted, last_stable_offset=log.log_end_offset if lso is None else lso)
    return [r.offset for r in out.records], out.next_offset, aborted


def test_abort_marker_in_the_next_fetch(tmp_path: Path) -> None:
    log = TxnLog()
    log.data(P1, 3, transactional=True)   # 0-2
    log.data(-1, 1, transactional=False)  # 3
    log.data(P1, 2, transactional=True)   # 4-5
    log.end(P1, commit=False)             # 6: ABORT
    log.data(P1, 1, transactional=True)   # 7: P1's next transaction ...
    log.end(P1, commit=True)              # 8: ... committed
    # the first fetch ends before the marker: the index already lists the abort (the marker is below the LSO)
    offsets, nxt, aborted = fetch(log, str(tmp_path), 0, 3)
    assert aborted == [AbortedTransaction(P1, 0)]
    assert offsets == [3] and nxt == 6
    # the next fetch starts at the marker: the abort is listed again, and the marker ends it
    offsets, nxt, aborted = fetch(log, str(tmp_path), 6, 3)
    assert aborted == [AbortedTransaction(P1, 0)]
    assert offsets == [7] and nxt == 9


def test_two_consecutive_aborted_transactions_of_one_producer(tmp_path: Path) -> None:
    log = TxnLog()
    log.data(P1, 2, transactional=True)   # 0-1  aborted
    log.data(P2, 1, transactional=True)   # 2    committed
    log.end(P1, commit=False)             # 3
    log.data(P1, 2, transactional=True)   # 4-5  aborted again
    log.end(P1, commit=False)             # 6
    log.end(P2, commit=True)              # 7
    log.data(P1, 1, transactional=True)   # 8    committed
    log.end(P1, commit=True)              # 9
    offsets, nxt, aborted = fetch(log, str(tmp_path), 0, 8)
    assert sorted(aborted) == [AbortedTransaction(P1, 0), AbortedTransaction(P1, 4)]
    assert offsets == [2, 8] and nxt == 10
    # the same log fetched one batch at a time gives the same records
    pos, seen = 0, []
    while pos < log.log_end_offset:
        got, pos, _ = fetch(log, str(tmp_path), pos, 1)
        seen += got
    assert seen == [2, 8]


def test_aborted_list_in_any_order(tmp_path: Path) -> None:
    log = TxnLog()
    log.data(P1, 1, transactional=True)   # 0
    log.end(P1, commit=False)             # 1
    log.data(P1, 1, transactional=True)   # 2
    log.end(P1, commit=False)             # 3
    log.data(P1, 1, transactional=True)   # 4
    log.end(P1, commit=True)              # 5
    payload, _ = log.fetch_bytes(0, len(log.batches))
    for aborted in ([AbortedTransaction(P1, 0), AbortedTransaction(P1, 2)],
                    [AbortedTransaction(P1, 2), AbortedTransaction(P1, 0)]):
        out = filter_fetch(payload, 0, aborted)
        assert [r.offset for r in out.records] == [4] and out.next_offset == 6 and out.dropped_batches == 5


def test_transaction_that_began_before_the_fetch_start(tmp_path: Path) -> None:
    log = TxnLog()
    log.data(P1, 2, transactional=True)   # 0-1  aborted, began before the fetch
    log.data(P2, 2, transactional=True)   # 2-3  committed, began before the fetch
    log.data(-1, 1, transactional=False)  # 4
    log.data(P1, 1, transactional=True)   # 5
    log.data(P2, 1, transactional=True)   # 6
    log.end(P1, commit=False)             # 7
    log.end(P2, commit=True)              # 8
    offsets, nxt, aborted = fetch(log, str(tmp_path), 4, 5, segments=(0, 4))
    assert aborted == [AbortedTransaction(P1, 0)]
    assert offsets == [4, 6] and nxt == 9
    # a start inside a batch: the committed batch's records below the position are not returned
    offsets, nxt, _ = fetch(log, str(tmp_path), 3, 6)
    assert offsets == [3, 4, 6] and nxt == 9


def test_marker_before_the_fetch_start_does_not_abort_the_next_transaction(tmp_path: Path) -> None:
    # the index lists P1's abort (marker 2) in the segment; a fetch from 3 must not get it, or P1's
    # committed transaction at 3 would be dropped (no ABORT marker in this fetch would end it)
    log = TxnLog()
    log.data(P1, 2, transactional=True)   # 0-1
    log.end(P1, commit=False)             # 2
    log.data(P1, 1, transactional=True)   # 3
    log.end(P1, commit=True)              # 4
    offsets, nxt, aborted = fetch(log, str(tmp_path), 3, 2)
    assert aborted == [] and offsets == [3] and nxt == 5


def test_non_transactional_batches_of_an_aborted_producer_are_kept() -> None:
    log = TxnLog()
    log.data(P1, 1, transactional=True)   # 0  aborted
    log.data(P1, 1, transactional=False)  # 1  idempotent, same producer id: not part of the transaction
    log.end(P1, commit=False)             # 2
    payload, _ = log.fetch_bytes(0, 3)
    out = filter_fetch(payload, 0, [AbortedTransaction(P1, 0)])
    assert [r.offset for r in out.records] == [1] and out.next_offset == 3


def test_every_control_batch_is_dropped_and_passed() -> None:
    # a LEADER_CHANGE control batch (no producer id, not transactional), then a plain record
    ctrl = encode_batch([Record(value=b"\x00\x00\x00\x00", key=b"\x00\x00\x00\x02", timestamp=NOW_MS)],
                        now_ms=NOW_MS, base_offset=0, control=True)
    plain = encode_batch([b"x"], now_ms=NOW_MS, base_offset=1)
    out = filter_fetch(bytes(ctrl) + bytes(plain), 0, [])
    assert [(r.offset, r.value) for r in out.records] == [(1, b"x")] and out.next_offset == 2
    batch = next(iter_batches(bytes(ctrl)))
    assert control_type(batch) == ControlRecordType.LEADER_CHANGE
    assert not ReadCommittedFilter([]).keep(batch)
    # a response made of markers only still moves the position
    log = TxnLog()
    log.data(P1, 1, transactional=True)
    log.end(P1, commit=True)
    payload, _ = log.fetch_bytes(1, 1)
    out = filter_fetch(payload, 1, [])
    assert out.records == [] and out.next_offset == 2 and out.dropped_batches == 1


def test_malformed_control_key_names_the_offset() -> None:
    bad = encode_batch([Record(value=b"\x00\x00\x00\x00\x00\x00", key=b"\x00", timestamp=NOW_MS)], now_ms=NOW_MS,
                       base_offset=41, producer_id=P1, producer_epoch=0, transactional=True, control=True)
    with pytest.raises(CorruptRecordError, match="at offset 41") as exc:
        filter_fetch(bytes(bad), 0, [], path="t-0 fetch")
    assert exc.value.path == "t-0 fetch"


def test_last_stable_offset_is_enforced_and_torn_tail_ignored() -> None:
    log = TxnLog()
    log.data(-1, 2, transactional=False)  # 0-1
    log.data(P1, 2, transactional=True)   # 2-3 open: the LSO is 2
    log.data(-1, 1, transactional=False)  # 4
    payload, _ = log.fetch_bytes(0, 3)
    out = filter_fetch(payload, 0, [], last_stable_offset=2)
    assert [r.offset for r in out.records] == [0, 1] and out.next_offset == 2
    # a batch straddling the LSO (a broker never sends one): only its records below it, position at the LSO
    out = filter_fetch(payload, 0, [], last_stable_offset=1)
    assert [r.offset for r in out.records] == [0] and out.next_offset == 1
    # a torn last batch is not returned and does not move the position
    first, _ = log.fetch_bytes(0, 1)
    out = filter_fetch(payload[:len(first) + 20], 0, [])
    assert [r.offset for r in out.records] == [0, 1] and out.next_offset == 2


def test_legacy_messages_are_kept() -> None:
    data = py_encode_legacy(0, b"old", magic=1) + py_encode_legacy(1, b"older", magic=0)
    out = filter_fetch(data, 0, [AbortedTransaction(P1, 0)])
    assert [(r.offset, r.value) for r in out.records] == [(0, b"old"), (1, b"older")] and out.next_offset == 2


def test_filter_state_follows_the_batches() -> None:
    log = TxnLog()
    log.data(P1, 1, transactional=True)   # 0 aborted
    log.end(P1, commit=False)             # 1
    log.data(P1, 1, transactional=True)   # 2 committed
    log.end(P1, commit=True)              # 3
    payload, _ = log.fetch_bytes(0, 4)
    f = ReadCommittedFilter([AbortedTransaction(P1, 0)])
    assert [f.keep(b) for b in iter_batches(payload)] == [False, False, True, False]
