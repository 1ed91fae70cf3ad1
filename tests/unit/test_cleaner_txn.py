"""The cleaner and transactions (issue 17 item 3): aborted data, markers and their delete horizon, the
cleaned .txnindex, the last stable offset as the cleaning bound."""
from __future__ import annotations

import os
from typing import List, Tuple

import pylog
from pylog.record import Record, encode_batch
from pylog.storage.cleaner import ATTR_DELETE_HORIZON, Cleaner
from pylog.storage.txn_index import AbortedTxn

RET = 100


def _open(tmp_path, now):
    return pylog.Log.open(os.path.join(str(tmp_path), "t-0"), clock_ms=lambda: now[0], cleanup_policy="compact",
                          retention_ms=-1, delete_retention_ms=RET)


def _txn(log, pid: int, seq: int, *kv: Tuple[bytes, bytes]) -> int:
    batch = encode_batch([Record(key=k, value=v) for k, v in kv], now_ms=0, producer_id=pid, producer_epoch=0,
                         base_sequence=seq, transactional=True)
    return log.append_as_leader(batch, leader_epoch=0).base_offset


def _layout(log) -> List[Tuple[int, bool, int]]:
    return [(b.base_offset, b.is_control, b.records_count) for b in log.read_batches(0, 1 << 20)]


def test_aborted_data_goes_then_its_marker_and_index_entry_after_the_horizon(tmp_path):
    now = [1000]
    log = _open(tmp_path, now)
    _txn(log, 1, 0, (b"a", b"aborted"))          # 0
    log.append_marker(1, 0, False, 0, 0)          # 1 ABORT
    _txn(log, 1, 1, (b"b", b"committed"))         # 2
    log.append_marker(1, 0, True, 0, 0)           # 3 COMMIT
    log.roll()
    cleaner = Cleaner()
    r = cleaner.clean(log, now[0], force=True)
    assert r.aborted_records_removed == 1 and r.markers_removed == 0
    assert _layout(log) == [(1, True, 1), (2, False, 1), (3, True, 1)]
    # the marker stays while its data was seen in this clean, with its index entry
    assert log.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    r = cleaner.clean(log, now[0] + 1, force=True)  # no data left: the marker gets a delete horizon
    marker = log.read_batches(1, 1 << 20)[0]
    assert marker.is_control and marker.info.attributes & ATTR_DELETE_HORIZON
    assert marker.info.base_timestamp == now[0] + 1 + RET
    assert log.aborted_transactions(0, 10) == []  # the entry goes with the data
    r = cleaner.clean(log, now[0] + RET, force=True)  # before the horizon: kept
    assert r.markers_removed == 0 and _layout(log)[0] == (1, True, 1)
    r = cleaner.clean(log, now[0] + 1 + RET, force=True)
    assert r.markers_removed == 1
    assert _layout(log) == [(2, False, 1), (3, True, 1)]  # the COMMIT marker of remaining data stays
    assert [(r.offset, r.value) for r in log.read(0)] == [(2, b"committed")]
    log.close()
    log = _open(tmp_path, now)  # the producer state replays the cleaned log: nothing open
    assert log.first_unstable_offset is None and log.aborted_transactions(0, 10) == []
    log.close()


def test_an_aborted_record_does_not_shadow_the_committed_value(tmp_path):
    now = [1000]
    log = _open(tmp_path, now)
    log.append([Record(key=b"k", value=b"v1")])   # 0
    _txn(log, 7, 0, (b"k", b"aborted"))           # 1
    log.append_marker(7, 0, False, 0, 0)          # 2
    _txn(log, 7, 1, (b"x", b"y"))                 # 3 (producer 7's last data batch)
    log.append_marker(7, 0, True, 0, 0)           # 4
    log.roll()
    Cleaner().clean(log, now[0], force=True)
    assert [(r.offset, r.key, r.value) for r in log.read(0)] == [(0, b"k", b"v1"), (3, b"x", b"y")]
    log.close()


def test_the_producers_last_batch_is_kept_empty_and_keeps_its_marker(tmp_path):
    now = [1000]
    log = _open(tmp_path, now)
    _txn(log, 1, 0, (b"a", b"x"))                 # 0
    log.append_marker(1, 0, False, 0, 0)          # 1
    log.roll()
    for i in range(3):
        Cleaner().clean(log, now[0] + i * 10 * RET, force=True)
    # the empty batch keeps producer 1's sequence; it is a batch of the aborted transaction, so the marker
    # and the index entry stay with it (Kafka's rule)
    assert _layout(log) == [(0, False, 0), (1, True, 1)]
    assert log.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 1, 2)]
    log.close()


def test_nothing_at_or_above_the_first_unstable_offset_is_cleaned(tmp_path):
    now = [1000]
    log = _open(tmp_path, now)
    log.append([Record(key=b"k", value=b"old")])  # 0
    log.roll()
    _txn(log, 1, 0, (b"k", b"open"))              # 1: stays open
    log.roll()
    log.append([Record(key=b"k", value=b"new")])  # 2
    log.roll()
    r = Cleaner().clean(log, now[0], force=True)
    assert r.end_offset == 1  # the segment holding the open transaction is not cleaned
    assert [(r.offset, r.value) for r in log.read(0)][:1] == [(0, b"old")]
    log.append_marker(1, 0, True, 0, 0)
    log.roll()
    Cleaner().clean(log, now[0], force=True)
    assert [(r.offset, r.value) for r in log.read(0)] == [(2, b"new")]
    log.close()


def test_a_transaction_whose_marker_is_above_the_high_watermark_is_not_cleaned(tmp_path):
    now = [1000]
    log = _open(tmp_path, now)
    log.append([Record(key=b"k", value=b"old")])  # 0
    log.roll()
    _txn(log, 1, 0, (b"k", b"aborted"))           # 1
    log.roll()
    log.append_marker(1, 0, False, 0, 0)          # 2: not replicated yet (HW 2)
    log.roll()
    r = Cleaner().clean(log, now[0], force=True, upper_bound=2)
    assert r.end_offset == 1  # the transaction starting at 1 is unstable below HW 2
    # and the clean did not make the log forget it: the LSO at HW 2 is still 1
    assert log.last_stable_offset(2) == 1
    assert [b.base_offset for b in log.read_batches(0, 1 << 20)] == [0, 1, 2]
    r = Cleaner().clean(log, now[0], force=True, upper_bound=3)
    assert [(r.offset, r.value) for r in log.read(0)] == [(0, b"old")]
    log.close()


def test_a_fencing_marker_survives_so_the_zombie_stays_fenced_after_a_reload(tmp_path):
    import pytest

    from pylog.errors import InvalidProducerEpochError

    now = [1000]
    log = _open(tmp_path, now)
    _txn(log, 1, 0, (b"a", b"zombie"))            # 0: epoch 0
    log.append_marker(1, 1, False, 0, 0)          # 1: the coordinator's fence aborts with epoch 1
    log.append([Record(key=b"b", value=b"x")])    # 2
    log.roll()
    for i in range(4):
        Cleaner().clean(log, now[0] + i * 10 * RET, force=True)
    assert _layout(log) == [(1, True, 1), (2, False, 1)]  # the epoch-0 batch went, the fence stayed
    log.close()
    for n in os.listdir(log.dir):
        if n.endswith(".snapshot"):
            os.remove(os.path.join(log.dir, n))  # the producer state is rebuilt from the cleaned log
    log = _open(tmp_path, now)
    batch = encode_batch([Record(key=b"a", value=b"late")], now_ms=0, producer_id=1, producer_epoch=0,
                         base_sequence=1, transactional=True)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(batch, leader_epoch=0)
    log.close()
