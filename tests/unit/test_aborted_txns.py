"""Collecting a fetch's aborted transactions from the segments' ``.txnindex`` (pylog/storage/aborted_txns.py)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

import pytest

from pylog.errors import InvalidOffsetError
from pylog.storage.aborted_txns import AbortedTxnSource, collect_aborted_transactions, fetch_upper_bound
from pylog.storage.txn_index import AbortedTxn, TransactionIndex


class Untouchable:
    """A segment index the search must not reach."""

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> Tuple[List[AbortedTxn], bool]:
        raise AssertionError(f"segment asked for [{fetch_offset}, {upper_bound})")


def index(tmp_path: Path, base: int, *entries: AbortedTxn) -> TransactionIndex:
    idx = TransactionIndex(os.path.join(str(tmp_path), "%020d.txnindex" % base), base)
    for e in entries:
        idx.append(e)
    return idx


def test_walks_from_the_segment_holding_the_fetch_offset_until_complete(tmp_path: Path) -> None:
    a = AbortedTxn(1, 5, 12, 12)     # marker in segment 10, began in segment 0
    b = AbortedTxn(2, 15, 25, 26)    # marker in segment 20; LSO 26 at that abort
    c = AbortedTxn(3, 30, 35, 36)    # past the upper bound: not returned
    segs: List[Tuple[int, AbortedTxnSource]] = [
        (0, Untouchable()),          # holds no marker at or after the fetch offset
        (10, index(tmp_path, 10, a)),
        (20, index(tmp_path, 20, b)),
        (40, Untouchable()),         # b's LSO reached the upper bound: the search stops before
    ]
    assert collect_aborted_transactions(segs, 11, 26) == [a, b]
    # c's first offset is at the bound: not listed, and its segment finishes the search
    segs[3] = (30, index(tmp_path, 30, c))
    assert collect_aborted_transactions(segs[:4], 11, 30) == [a, b]
    assert collect_aborted_transactions(segs[:4], 11, 31) == [a, b, c]


def test_marker_before_the_fetch_offset_is_not_listed(tmp_path: Path) -> None:
    seg = index(tmp_path, 0, AbortedTxn(7, 0, 2, 3))
    assert collect_aborted_transactions([(0, seg)], 3, 10) == []
    assert collect_aborted_transactions([(0, seg)], 2, 10) == [AbortedTxn(7, 0, 2, 3)]


def test_fetch_offset_below_the_first_segment_and_empty_range(tmp_path: Path) -> None:
    seg = index(tmp_path, 100, AbortedTxn(7, 90, 101, 102))
    # a fetch offset below the first segment base (log start moved): start at the first segment
    assert collect_aborted_transactions([(100, seg)], 50, 200) == [AbortedTxn(7, 90, 101, 102)]
    assert collect_aborted_transactions([(100, Untouchable())], 120, 120) == []


def test_bases_must_increase(tmp_path: Path) -> None:
    with pytest.raises(InvalidOffsetError, match="must increase: 10 follows 10"):
        collect_aborted_transactions([(0, Untouchable()), (10, Untouchable()), (10, Untouchable())], 5, 9)


def test_fetch_upper_bound() -> None:
    # the fetched end wins when known, even above the LSO (never below the fetched data)
    assert fetch_upper_bound(fetched_end=40, next_segment_base=100, log_end_offset=300, last_stable_offset=50) == 40
    assert fetch_upper_bound(fetched_end=60, next_segment_base=None, log_end_offset=300, last_stable_offset=50) == 60
    # else the next segment's base, else the log end, capped by the LSO
    assert fetch_upper_bound(fetched_end=None, next_segment_base=100, log_end_offset=300, last_stable_offset=150) == 100
    assert fetch_upper_bound(fetched_end=None, next_segment_base=None, log_end_offset=300, last_stable_offset=150) == 150
    assert fetch_upper_bound(fetched_end=None, next_segment_base=None, log_end_offset=120, last_stable_offset=150) == 120
