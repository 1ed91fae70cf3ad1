"""The ``.txnindex`` aborted-transaction index (pylog.storage.txn_index).

Kafka's TransactionIndexTest cases (positions after reopen, collect with and
without the early stop, truncate, reset, rename, flush, delete), the 34-byte
entry layout of Kafka's ``AbortedTxn`` written field by field, and damaged
files: each is refused with CorruptIndexError naming the file and the byte
position of the bad entry.
"""
from __future__ import annotations

import os
import struct
from typing import List

import pytest

from pylog.errors import CorruptIndexError, InvalidOffsetError, LogClosedError
from pylog.storage.fileio import SimulatedDiskIO
from pylog.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode_entries

TXNS = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


@pytest.fixture
def path(tmp_path: object) -> str:
    return os.path.join(str(tmp_path), "00000000000000000000.txnindex")


def _filled(path: str, txns: List[AbortedTxn] = TXNS, start: int = 0) -> TransactionIndex:
    idx = TransactionIndex(path, start)
    for t in txns:
        idx.append(t)
    return idx


def test_entry_layout_golden() -> None:
    e = AbortedTxn(983493, 137, 299, 200)
    assert e.encode() == bytes.fromhex("0000" "00000000000f01c5" "0000000000000089" "000000000000012b"
                                       "00000000000000c8")
    assert ENTRY_SIZE == 34 and decode_entries(e.encode(), "f", 0) == [e]


def test_file_is_created_lazily_and_positions_survive_reopen(path: str) -> None:
    idx = TransactionIndex(path, 0)
    assert idx.all_aborted() == [] and idx.last_offset is None
    idx.flush()
    assert not os.path.exists(path)  # no aborts: no file, as Kafka
    for t in TXNS:
        idx.append(t)
    idx.flush()
    idx.close()
    assert os.path.getsize(path) == 4 * 34
    again = TransactionIndex(path, 0)
    extra = AbortedTxn(3, 50, 60, 55)
    again.append(extra)
    assert again.all_aborted() == TXNS + [extra] and again.last_offset == 60
    again.close()
    with open(path, "rb") as f:
        assert f.read() == b"".join(t.encode() for t in TXNS + [extra])


def test_collect_aborted_kafkas_cases(path: str) -> None:
    idx = _filled(path)
    assert idx.collect_aborted(0, 100) == (TXNS, False)
    assert idx.collect_aborted(0, 32) == (TXNS[:3], True)
    assert idx.collect_aborted(0, 35) == (TXNS, True)
    assert idx.collect_aborted(10, 35) == (TXNS, True)
    assert idx.collect_aborted(11, 35) == (TXNS[1:], True)
    assert idx.collect_aborted(20, 41) == (TXNS[2:], False)


def test_truncate_and_reset(path: str) -> None:
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    idx = _filled(path, txns)
    idx.truncate_to(51)
    assert idx.collect_aborted(0, 100)[0] == txns
    idx.truncate_to(50)
    assert idx.collect_aborted(0, 100)[0] == txns[:3]
    assert os.path.getsize(path) == 3 * 34
    idx.append(AbortedTxn(9, 40, 45, 40))  # after a truncation, appends continue from the new end
    idx.reset()
    assert idx.collect_aborted(0, 100) == ([], False) and os.path.getsize(path) == 0
    idx.append(AbortedTxn(9, 1, 2, 1))
    assert TransactionIndex(path, 0).all_aborted() == [AbortedTxn(9, 1, 2, 1)]


def test_append_refusals(path: str) -> None:
    idx = TransactionIndex(path, 100)
    idx.append(AbortedTxn(1, 105, 115, 113))
    with pytest.raises(InvalidOffsetError, match="must follow 115"):
        idx.append(AbortedTxn(0, 100, 115, 111))
    with pytest.raises(InvalidOffsetError, match="must follow 115"):
        idx.append(AbortedTxn(0, 100, 110, 111))
    with pytest.raises(InvalidOffsetError, match="after its marker"):
        idx.append(AbortedTxn(0, 130, 120, 111))
    with pytest.raises(InvalidOffsetError, match="below the base offset 100"):
        TransactionIndex(path + "2", 100).append(AbortedTxn(0, 1, 99, 1))
    assert idx.all_aborted() == [AbortedTxn(1, 105, 115, 113)]


def test_sanity_check_with_another_start_offset(path: str) -> None:
    _filled(path).close()
    bad = TransactionIndex(path, 100)
    with pytest.raises(CorruptIndexError, match="below the segment's base offset 100") as ei:
        bad.sanity_check()
    assert ei.value.path == path and ei.value.position == 0


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


GOOD = b"".join(t.encode() for t in TXNS)


@pytest.mark.parametrize("data,position,what", [
    (GOOD + b"\x00" * 7, 4 * 34, "torn entry: 7 bytes"),
    (GOOD[:34] + struct.pack(">h", 1) + GOOD[36:], 34, "unknown version 1"),
    (GOOD[:68] + AbortedTxn(9, 0, 15, 0).encode() + GOOD[102:], 68, "does not follow the previous entry's 15"),
    (GOOD[:102] + AbortedTxn(9, 70, 60, 0).encode(), 102, "starts at 70, after its marker at 60"),
    (AbortedTxn(9, 0, -5, 0).encode(), 0, "below the segment's base offset"),
])
def test_damaged_files_name_the_file_and_position(path: str, data: bytes, position: int, what: str) -> None:
    _write(path, data)
    for call in ("sanity_check", "all_aborted", "append"):
        idx = TransactionIndex(path, 0)
        with pytest.raises(CorruptIndexError, match=what) as ei:
            if call == "append":
                idx.append(AbortedTxn(1, 1000, 1001, 1000))
            else:
                getattr(idx, call)()
        assert ei.value.path == path and ei.value.position == position
        assert f"file {path}" in str(ei.value) and f"byte position {position}" in str(ei.value)
        idx.close()
    with open(path, "rb") as f:
        assert f.read() == data  # a read never repairs or extends a damaged file


def test_sanity_check_rereads_a_file_damaged_after_open(path: str) -> None:
    idx = _filled(path)
    idx.flush()
    with open(path, "r+b") as f:
        f.seek(34)
        f.write(b"\x00\x07")
    with pytest.raises(CorruptIndexError, match="unknown version 7"):
        idx.sanity_check()
    assert idx.all_aborted() == TXNS  # the entries known before stay usable


def test_rename_flush_delete_and_close(tmp_path: object, path: str) -> None:
    idx = _filled(path, TXNS[:1])
    renamed = os.path.join(str(tmp_path), "00000000000000000000.txnindex.deleted")
    idx.rename_to(renamed)
    idx.append(TXNS[1])
    assert idx.collect_aborted(0, 100)[0] == TXNS[:2] and not os.path.exists(path)
    assert TransactionIndex(renamed, 0).all_aborted() == TXNS[:2]
    assert idx.delete_if_exists() and not os.path.exists(renamed)
    assert not TransactionIndex(renamed, 0).delete_if_exists()
    with pytest.raises(LogClosedError):
        idx.append(TXNS[2])


def test_flush_makes_a_new_file_durable(path: str) -> None:
    disk = SimulatedDiskIO()
    idx = TransactionIndex(path, 0, file_io=disk)
    idx.append(TXNS[0])
    idx.flush()
    idx.append(TXNS[1])  # not flushed
    disk.crash()
    assert TransactionIndex(path, 0).all_aborted() == TXNS[:1]


def test_unflushed_new_file_is_lost_on_crash(path: str) -> None:
    disk = SimulatedDiskIO()
    TransactionIndex(path, 0, file_io=disk).append(TXNS[0])
    disk.crash()
    assert not os.path.exists(path)


def test_reset_works_on_a_damaged_file(path: str) -> None:
    _write(path, GOOD + b"\x01\x02\x03")
    idx = TransactionIndex(path, 0)
    idx.reset()
    assert os.path.getsize(path) == 0 and idx.all_aborted() == []
    idx.append(TXNS[0])
    idx.sanity_check()
    assert TransactionIndex(path, 0).all_aborted() == TXNS[:1]


def test_sanity_check_and_reset_reuse_the_open_descriptor(path: str) -> None:
    disk = SimulatedDiskIO()
    idx = TransactionIndex(path, 0, file_io=disk)
    for t in TXNS:
        idx.append(t)
    for _ in range(3):
        idx.sanity_check()
    idx.reset()
    idx.append(TXNS[0])
    assert len(disk._fd_paths) == 1  # one descriptor for the index, however often it re-reads
    idx.close()
    assert disk._fd_paths == {}
