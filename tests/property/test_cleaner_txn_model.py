"""Compaction of transactional data (issue 17 item 3) against a pure-Python model.

Random histories on a compacted log: plain keyed records and tombstones, three transactional producers
whose transactions commit, abort or stay open, rolls, and cleans at random times (delete_retention_ms
small, so horizons pass). After every clean:

* the committed view by key (a read_committed reader of the log - ReadCommittedFilter with the log's
  aborted list, below the LSO - keeping the last value per key) equals the model's (the last committed
  or plain value per key below the LSO; a tombstone is no value);
* no record of an aborted transaction remains below the cleaned end;
* every transaction with a batch still in the log keeps its marker, and every `.txnindex` entry's
  marker is in the log (an entry without its marker would abort the producer's next transaction);
* nothing at or above the LSO changed.

At the end every transaction is ended, four cleans pass the horizons, and every marker left in the
cleaned section belongs to a transaction with a batch left (or is its producer's only kind of batch);
a reopen (producer state replayed from the cleaned log) gives the same committed view.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Set, Tuple

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pylog
from pylog.client.txn_filter import ReadCommittedFilter
from pylog.record import Record, RecordBatch, encode_batch
from pylog.storage.cleaner import Cleaner
from pylog.storage.fileio import FileIO

RETENTION = 1_000
KEYS = [b"a", b"b", b"c", b"d"]


class NoSyncIO(FileIO):
    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


class Model:
    """What the history means, without reading markers or indexes."""

    def __init__(self) -> None:
        self.records: List[Tuple[int, bytes, Optional[bytes], Optional[int]]] = []  # offset, key, value, txn
        self.txn_outcome: Dict[int, Optional[bool]] = {}  # txn -> committed? (None: open)
        self.txn_of_batch: Dict[int, int] = {}  # data batch base offset -> txn
        self.txn_marker: Dict[int, int] = {}  # txn -> marker offset
        self.txn_pid: Dict[int, int] = {}
        self.open_txn: Dict[int, int] = {}  # pid -> txn

    def committed_view(self, lso: int) -> Dict[bytes, bytes]:
        view: Dict[bytes, Optional[bytes]] = {}
        for off, key, value, txn in self.records:
            if off >= lso:
                break
            if txn is not None and not self.txn_outcome[txn]:
                continue
            view[key] = value
        return {k: v for k, v in view.items() if v is not None}


def all_batches(log: pylog.Log) -> List[RecordBatch]:
    out: List[RecordBatch] = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        got = log.read_batches(off, 1 << 20)
        if not got:
            break
        out += [b for b in got if b.last_offset >= off]
        off = got[-1].last_offset + 1
    return out


def committed_view(log: pylog.Log) -> Dict[bytes, bytes]:
    lso = log.last_stable_offset(log.log_end_offset)
    filt = ReadCommittedFilter(log.aborted_transactions(log.log_start_offset, lso))
    view: Dict[bytes, Optional[bytes]] = {}
    for b in all_batches(log):
        if b.base_offset >= lso:
            break
        if filt.keep(b):
            for r in b.records():
                assert r.key is not None
                view[bytes(r.key)] = None if r.value is None else bytes(r.value)
    return {k: v for k, v in view.items() if v is not None}


op = st.one_of(
    st.tuples(st.just("plain"), st.sampled_from(KEYS), st.booleans()),
    st.tuples(st.just("txn"), st.integers(1, 3), st.lists(st.tuples(st.sampled_from(KEYS), st.booleans()),
                                                             min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("roll"),),
    st.tuples(st.just("clean"), st.integers(0, 2 * RETENTION)),
)


def check(log: pylog.Log, model: Model, cleaned_end: int) -> None:
    lso = log.last_stable_offset(log.log_end_offset)
    assert committed_view(log) == model.committed_view(lso)
    batches = all_batches(log)
    present_txns: Set[int] = set()
    markers = {b.base_offset for b in batches if b.is_control}
    for b in batches:
        if b.is_control:
            continue
        txn = model.txn_of_batch.get(b.base_offset)
        if txn is None:
            continue
        present_txns.add(txn)
        if b.records_count and b.base_offset < cleaned_end:
            assert model.txn_outcome[txn] is not False, f"aborted records remain at {b.base_offset}"
    for txn in present_txns:
        if txn in model.txn_marker:
            assert model.txn_marker[txn] in markers, f"marker of txn {txn} with data left was removed"
    for entry in log.aborted_transactions(log.log_start_offset, log.log_end_offset):
        assert entry.last_offset in markers, f"txnindex entry {entry} without its marker"
    # above the LSO nothing was cleaned: every record the model has there is still there
    above = {(r.offset, r.key, r.value) for b in batches if b.base_offset >= lso and not b.is_control
             for r in b.records()}
    assert above == {(o, k, v) for o, k, v, _ in model.records if o >= lso}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=40))
# an aborted batch that is not its producer's last: its marker and .txnindex entry must go together
@example(ops=[("txn", 1, [(b"a", False)]), ("end", 1, False), ("txn", 1, [(b"b", False)]), ("end", 1, True)])
def test_compaction_of_transactional_histories(tmp_path_factory, ops):
    d = tmp_path_factory.mktemp("cleantxn")
    now = [1_000_000]
    log = pylog.Log.open(os.path.join(str(d), "t-0"), clock_ms=lambda: now[0], file_io=NoSyncIO(),
                         cleanup_policy="compact", retention_ms=-1, delete_retention_ms=RETENTION)
    model = Model()
    seq: Dict[int, int] = {1: 0, 2: 0, 3: 0}
    cleaner = Cleaner()
    cleaned_end = 0

    def end_txn(pid: int, commit: bool) -> None:
        txn = model.open_txn.pop(pid)
        model.txn_marker[txn] = log.log_end_offset
        model.txn_outcome[txn] = commit
        log.append_marker(pid, 0, commit, 0, 0)

    def do_clean(at: int) -> int:
        res = cleaner.clean(log, at, force=True)
        return max(cleaned_end, res.end_offset) if res.cleaned else cleaned_end

    try:
        for o in ops:
            now[0] += 10
            if o[0] == "plain":
                _, key, tomb = o
                res = log.append([Record(key=key, value=None if tomb else b"p%d" % log.log_end_offset)])
                model.records.append((res.base_offset, key, None if tomb else b"p%d" % res.base_offset, None))
            elif o[0] == "txn":
                _, pid, recs = o
                txn = model.open_txn.get(pid)
                if txn is None:
                    txn = model.open_txn[pid] = len(model.txn_outcome)
                    model.txn_outcome[txn] = None
                    model.txn_pid[txn] = pid
                base = log.log_end_offset
                values = [(k, None if tomb else b"t%d" % (base + i)) for i, (k, tomb) in enumerate(recs)]
                batch = encode_batch([Record(key=k, value=v) for k, v in values], now_ms=now[0], producer_id=pid,
                                     producer_epoch=0, base_sequence=seq[pid], transactional=True)
                seq[pid] += len(recs)
                res = log.append_as_leader(batch, leader_epoch=0)
                assert res.base_offset == base
                model.txn_of_batch[base] = txn
                model.records += [(base + i, k, v, txn) for i, (k, v) in enumerate(values)]
            elif o[0] == "end":
                _, pid, commit = o
                if pid in model.open_txn:
                    end_txn(pid, commit)
            elif o[0] == "roll":
                if log.segments[log.segments.keys()[-1]].size:
                    log.roll()
            else:
                now[0] += o[1]
                cleaned_end = do_clean(now[0])
                check(log, model, cleaned_end)
        # the end: every transaction ended, everything cleanable, horizons passed
        for pid in sorted(model.open_txn):
            end_txn(pid, pid % 2 == 0)
        log.append([Record(key=b"z", value=b"last")])
        model.records.append((log.log_end_offset - 1, b"z", b"last", None))
        log.roll()
        # four cleans: a tombstone's horizon is set, passes (its batch goes, seen once more by its
        # marker's clean), then the data-less marker's horizon is set, and passes
        for _ in range(4):
            now[0] += RETENTION + 1
            cleaned_end = do_clean(now[0])
            check(log, model, cleaned_end)
        batches = all_batches(log)
        present = {model.txn_of_batch[b.base_offset] for b in batches
                   if not b.is_control and b.base_offset in model.txn_of_batch}
        data_pids = {b.producer_id for b in batches if not b.is_control and b.producer_id >= 0}
        marker_txn = {m: t for t, m in model.txn_marker.items()}
        for b in batches:
            if b.is_control and b.base_offset < cleaned_end:
                txn = marker_txn[b.base_offset]
                assert txn in present or b.producer_id not in data_pids, \
                    f"marker at {b.base_offset} outlived its transaction's data and its horizon"
        view = committed_view(log)
        log.close()
        log = pylog.Log.open(os.path.join(str(d), "t-0"), clock_ms=lambda: now[0], file_io=NoSyncIO(),
                             cleanup_policy="compact", retention_ms=-1, delete_retention_ms=RETENTION)
        assert log.first_unstable_offset is None  # the replay of the cleaned log ends every transaction
        assert committed_view(log) == view == model.committed_view(log.log_end_offset)
    finally:
        log.close()
