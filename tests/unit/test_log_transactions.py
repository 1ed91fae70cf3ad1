"""Transactions in the Log (issue 17 item 3): markers, first unstable offset / LSO, the .txnindex lifecycle."""
from __future__ import annotations

import os
import time

import pytest

import pylog
from pylog.errors import (
    InvalidProducerEpochError, InvalidRecordError, InvalidTxnStateError, TransactionCoordinatorFencedError,
)
from pylog.record import Record, encode_batch
from pylog.storage.fileio import SimulatedDiskIO
from pylog.storage.producer_state import decode_snapshot, encode_snapshot, ProducerEntry
from pylog.storage.txn_index import AbortedTxn


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True) -> bytes:
    return encode_batch([Record(value=b"v%d" % i) for i in range(n)], now_ms=int(time.time() * 1000), producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, transactional=transactional)


def open_log(d, **kw):
    return pylog.Log.open(os.path.join(str(d), "t-0"), **kw)


def test_abort_marker_writes_the_txnindex_entry_and_lso_follows(tmp_path):
    log = open_log(tmp_path)
    log.append([b"plain"])
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0)      # 1..2
    log.append_as_leader(txn_batch(2, 0), leader_epoch=0)      # 3..4
    assert log.first_unstable_offset == 1
    assert log.last_stable_offset(100) == 1 and log.last_stable_offset(0) == 0
    log.append_marker(1, 0, False, 3, 0)                       # abort at 5
    assert log.first_unstable_offset == 3
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 1, 5, 3)]
    assert os.path.exists(os.path.join(log.dir, "00000000000000000000.txnindex"))
    log.append_marker(2, 0, True, 3, 0)                        # commit at 6
    assert log.first_unstable_offset is None
    # the completed transactions stay unstable until the HW passes their markers
    assert log.last_stable_offset(6) == 3
    assert log.last_stable_offset(7) == 7
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 1, 5, 3)]  # a commit adds nothing
    assert log.aborted_transactions(6, 100) == []
    log.close()


def test_marker_validation(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0, epoch=2), leader_epoch=0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(1, 1, True, 0, 0)
    log.append_marker(1, 2, False, 5, 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_marker(1, 3, False, 4, 0)
    # a fence: the coordinator aborts with a bumped epoch; the zombie's batches are refused
    log.append_as_leader(txn_batch(1, 2, epoch=2), leader_epoch=0)
    end = log.log_end_offset
    log.append_marker(1, 3, False, 5, 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(txn_batch(1, 4, epoch=2), leader_epoch=0)
    assert log.log_end_offset == end + 1
    with pytest.raises(InvalidRecordError):
        log.append_marker(1, -1, True, 0, 0)
    log.close()


def test_non_transactional_batch_during_a_transaction_is_refused(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0)
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(txn_batch(1, 2, transactional=False), leader_epoch=0)
    with pytest.raises(InvalidTxnStateError):  # a newer epoch while the old epoch's transaction is open
        log.append_as_leader(txn_batch(1, 0, epoch=1), leader_epoch=0)
    # a retry of the transaction's batch is still a duplicate
    dup = log.append_as_leader(txn_batch(1, 0), leader_epoch=0)
    assert dup.position == -1 and dup.base_offset == 0
    log.append_as_leader(txn_batch(1, 2), leader_epoch=0)
    assert log.first_unstable_offset == 0
    log.close()


def test_client_may_not_write_control_batches(tmp_path):
    log = open_log(tmp_path)
    from pylog.storage.control_record import ControlRecordType, EndTransactionMarker
    m = EndTransactionMarker(ControlRecordType.COMMIT, 0)
    b = encode_batch([Record(key=m.key(), value=m.value())], now_ms=0, producer_id=1, producer_epoch=0,
                     transactional=True, control=True)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b, leader_epoch=0)
    log.close()


def test_txnindex_roll_truncate_delete_reopen(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0)      # 0..1
    log.append_marker(1, 0, False, 0, 0)                       # 2
    seg0 = os.path.join(log.dir, "00000000000000000000.txnindex")
    log.roll()
    log.append_as_leader(txn_batch(1, 2), leader_epoch=0)      # 3..4
    log.append_marker(1, 0, False, 0, 0)                       # 5
    seg3 = os.path.join(log.dir, "00000000000000000003.txnindex")
    assert os.path.getsize(seg0) == 34 and os.path.getsize(seg3) == 34
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 0, 2, 3), AbortedTxn(1, 3, 5, 6)]
    # truncation removes the entry and re-opens the transaction
    log.truncate_to(5)
    assert os.path.getsize(seg3) == 0
    assert log.first_unstable_offset == 3
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 0, 2, 3)]
    log.close()
    # reopen (clean): the open transaction comes back from the snapshot
    log = open_log(tmp_path)
    assert log.first_unstable_offset == 3
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 0, 2, 3)]
    log.append_marker(1, 0, False, 0, 0)
    assert log.aborted_transactions(3, 100) == [AbortedTxn(1, 3, 5, 6)]
    # retention deletes the segment with its .txnindex
    log.delete_records_before(3)
    log.enforce_retention()
    assert not os.path.exists(seg0)
    assert log.aborted_transactions(3, 100) == [AbortedTxn(1, 3, 5, 6)]
    log.close()


def test_follower_append_of_fetched_batches_tracks_transactions(tmp_path):
    leader = pylog.Log.open(os.path.join(str(tmp_path), "a", "t-0"))
    leader.append_as_leader(txn_batch(1, 0), leader_epoch=0)
    leader.append_as_leader(txn_batch(2, 0), leader_epoch=0)
    leader.append_marker(1, 0, False, 0, 0)
    leader.append([b"plain"])
    data = leader.fetch(0, 1 << 20)
    follower = pylog.Log.open(os.path.join(str(tmp_path), "b", "t-0"))
    follower.append_batches(data, assign_offsets=False)
    assert follower.first_unstable_offset == 2
    assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100) == [AbortedTxn(1, 0, 4, 2)]
    leader.close()
    follower.close()


def test_crash_rebuilds_txnindex_and_ongoing_transactions(tmp_path):
    io = SimulatedDiskIO()
    log = open_log(tmp_path, file_io=io)
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0)
    log.append_as_leader(txn_batch(2, 0), leader_epoch=0)
    log.flush()
    log.append_marker(1, 0, False, 0, 0)   # 4, its index entry unflushed
    log.flush()
    idx = os.path.join(log.dir, "00000000000000000000.txnindex")
    log.abandon()
    os.truncate(idx, 0)  # the entry is lost (as if never written back)
    log = open_log(tmp_path, file_io=SimulatedDiskIO())
    assert log.first_unstable_offset == 2
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 0, 4, 2)]
    log.close()


def test_snapshot_keeps_ongoing_transactions_and_old_format_loads():
    e = ProducerEntry(7, 3)
    e.txn_first_offset, e.coordinator_epoch = 42, 5
    [back] = decode_snapshot(encode_snapshot([e]))
    assert (back.producer_id, back.epoch, back.txn_first_offset, back.coordinator_epoch, list(back.batches)) == \
        (7, 3, 42, 5, [])
    # a snapshot written before transactions (-1 in both fields) loads with no ongoing transaction
    import struct
    from pylog._native import crc32c
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 9, 0, 4, 10, 4, 123, -1, -1)
    old = struct.pack(">hI", 1, crc32c(body)) + body
    [o] = decode_snapshot(old)
    assert o.txn_first_offset == -1 and o.batches[-1].first_offset == 6


def test_cleaning_a_compacted_log_keeps_the_aborted_entries(tmp_path):
    from pylog.storage.cleaner import Cleaner
    log = open_log(tmp_path, cleanup_policy="compact")
    now = int(time.time() * 1000)
    for i in range(3):
        b = encode_batch([Record(key=b"k", value=b"v%d" % i)], now_ms=now, producer_id=1, producer_epoch=0,
                         base_sequence=i, transactional=True)
        log.append_as_leader(b, leader_epoch=0)
        log.append_marker(1, 0, i != 1, 0, 0)   # the second transaction aborts
    log.append_as_leader(encode_batch([Record(key=b"k", value=b"x")], now_ms=now), leader_epoch=0)
    before = log.aborted_transactions(0, 100)
    assert before == [AbortedTxn(1, 2, 3, 4)]
    log.roll()
    res = Cleaner().clean(log, log.clock_ms, force=True)
    assert res.cleaned
    assert log.aborted_transactions(0, 100) == before
    log.close()
    log = open_log(tmp_path, cleanup_policy="compact")
    assert log.aborted_transactions(0, 100) == before
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_damaged_txnindex_is_rebuilt_from_the_log(tmp_path, clean):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), leader_epoch=0)      # 0..1
    log.append_marker(1, 0, False, 0, 0)                       # 2
    log.roll()                                                 # snapshot at 3
    log.append_as_leader(txn_batch(1, 2), leader_epoch=0)      # 3..4
    log.append_marker(1, 0, False, 0, 0)                       # 5
    log.append_as_leader(txn_batch(2, 0), leader_epoch=0)      # 6..7 (open)
    expected = [AbortedTxn(1, 0, 2, 3), AbortedTxn(1, 3, 5, 6)]
    assert log.aborted_transactions(0, 100) == expected
    idx0 = os.path.join(log.dir, "00000000000000000000.txnindex")
    if clean:
        log.close()
    else:
        log.flush()
        log.abandon()
    with open(idx0, "r+b") as f:  # version 7: not an entry this build reads
        f.write(b"\x00\x07")
    log = open_log(tmp_path)
    assert log.aborted_transactions(0, 100) == expected
    assert log.first_unstable_offset == 6
    log.truncate_to(4)  # truncation goes through the rebuilt index
    assert log.aborted_transactions(0, 100) == expected[:1]
    log.close()


def test_txnindex_holds_no_descriptor_after_a_query_and_survives_segment_release(tmp_path):
    log = open_log(tmp_path, max_open_segments=2)
    expected = []
    for i in range(6):
        r = log.append_as_leader(txn_batch(1, 2 * i), leader_epoch=0)
        m = log.append_marker(1, 0, False, 0, 0)
        expected.append(AbortedTxn(1, r.base_offset, m.base_offset, m.base_offset + 1))
        log.roll()
    log.close()
    log = open_log(tmp_path, max_open_segments=2)
    assert log.aborted_transactions(0, 100) == expected
    held = [b for b, seg in log.segments.items() if seg._txn_index is not None and seg._txn_index._fd is not None]
    assert held == []
    # appends and releases in between: every segment's entries are still there, once each
    for i in range(3):
        log.append([b"x"])
        log.roll()
    assert log.aborted_transactions(0, 100) == expected
    log.truncate_to(expected[-1].last_offset)  # cuts the last marker: its entry goes, its transaction reopens
    assert log.aborted_transactions(0, 100) == expected[:-1]
    assert log.first_unstable_offset == expected[-1].first_offset
    log.close()


@pytest.mark.parametrize("follower", [False, True])
def test_failed_txnindex_append_undoes_the_marker(tmp_path, follower, monkeypatch):
    from pylog.errors import KafkaStorageError
    from pylog.storage.txn_index import TransactionIndex
    leader = pylog.Log.open(os.path.join(str(tmp_path), "a", "t-0"))
    leader.append_as_leader(txn_batch(1, 0), leader_epoch=0)   # 0..1
    leader.append_marker(1, 0, False, 0, 0)                    # 2
    leader.append([b"after"])                                  # 3
    log = pylog.Log.open(os.path.join(str(tmp_path), "b", "t-0"))

    def failing_append(self, txn):
        raise KafkaStorageError(5, "append of transaction index failed: EIO")

    if follower:
        monkeypatch.setattr(TransactionIndex, "append", failing_append)
        with pytest.raises(KafkaStorageError):
            log.append_batches(leader.fetch(0), assign_offsets=False)
    else:
        log.append_as_leader(txn_batch(1, 0), leader_epoch=0)
        monkeypatch.setattr(TransactionIndex, "append", failing_append)
        with pytest.raises(KafkaStorageError):
            log.append_marker(1, 0, False, 0, 0)
    # the marker (and what followed it in the append) is gone, the transaction is open again
    assert log.log_end_offset == 2
    assert log.first_unstable_offset == 0
    monkeypatch.undo()
    if follower:
        log.append_batches(leader.fetch(2), assign_offsets=False)
    else:
        log.append_marker(1, 0, False, 0, 0)
    assert log.aborted_transactions(0, 100) == [AbortedTxn(1, 0, 2, 3)]
    assert log.first_unstable_offset is None
    log.close()
    leader.close()
