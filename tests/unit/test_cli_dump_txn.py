"""``pylog dump-log`` and transactions (issue 17 item 4): markers, transactional batches, .txnindex files,
``--transaction-log-decoder`` - on real log directories written by Log.append_marker."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Tuple

import pylog
from pylog.record import Record, encode_batch
from pylog.replication import txn_log
from pylog.storage.cleaner import Cleaner
from pylog.storage.txn_index import AbortedTxn


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", *args], capture_output=True, timeout=120)


def seg(part: str, ext: str, base: int = 0) -> str:
    return os.path.join(part, f"{base:020d}.{ext}")


def _txn(log, pid: int, epoch: int, seq: int, n: int = 2) -> int:
    batch = encode_batch([Record(key=b"k%d" % i, value=b"v%d" % i) for i in range(n)], now_ms=1000,
                         producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    return log.append_as_leader(batch, leader_epoch=0).base_offset


def write_txn_log(tmp_path) -> Tuple[str, int, int]:
    part = os.path.join(str(tmp_path), "orders-0")
    log = pylog.Log.open(part)
    try:
        log.append([b"plain"])                      # 0
        _txn(log, 5, 2, 0)                           # 1..2
        _txn(log, 6, 0, 0)                           # 3..4
        commit = log.append_marker(5, 2, True, 7, 0).base_offset   # 5
        abort = log.append_marker(6, 0, False, 7, 0).base_offset   # 6
    finally:
        log.close()
    return part, commit, abort


def test_markers_and_transactional_batches(tmp_path):
    part, commit, abort = write_txn_log(tmp_path)
    r = run("dump-log", seg(part, "log"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()[1:]
    assert len(lines) == 5
    assert "isTransactional: false isControl: false" in lines[0] and "endTxnMarker" not in lines[0]
    assert "isTransactional: true isControl: false producerId: 5 producerEpoch: 2" in lines[1]
    assert lines[3].startswith(f"baseOffset: {commit} ")
    assert "isTransactional: true isControl: true producerId: 5 producerEpoch: 2" in lines[3]
    assert lines[3].endswith("endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert "producerId: 6 producerEpoch: 0" in lines[4] and lines[4].endswith("endTxnMarker: ABORT coordinatorEpoch: 7")
    deep = run("dump-log", "--print-data", seg(part, "log")).stdout.decode().splitlines()
    rec = [ln for ln in deep if ln.startswith(f"| offset: {abort} ")]
    assert len(rec) == 1 and rec[0].endswith("keySize: 4 valueSize: 6 endTxnMarker: ABORT coordinatorEpoch: 7")
    assert "payload" not in rec[0]  # a control record prints its marker, not bytes
    assert "| offset: 1 " in "\n".join(deep) and "key: k0 payload: v0" in "\n".join(deep)


def test_txnindex_entries_and_damage(tmp_path):
    part, commit, abort = write_txn_log(tmp_path)
    path = seg(part, "txnindex")
    r = run("dump-log", path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines()[1:] == [
        f"version: 0 producerId: 6 firstOffset: 3 lastOffset: {abort} lastStableOffset: {abort + 1}"]
    # a torn entry: the whole entries are printed, then the error names the byte position
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00")
    r = run("dump-log", path)
    assert r.returncode == 1
    assert r.stdout.decode().splitlines()[1].startswith("version: 0 producerId: 6 firstOffset: 3")
    assert b"byte position 34" in r.stderr and b"Traceback" not in r.stderr
    # an entry whose marker is not in the .log (an index that does not match its segment)
    with open(path, "wb") as f:
        f.write(AbortedTxn(6, 3, abort, abort + 1).encode() + AbortedTxn(5, 1, 40, 41).encode())
    r = run("dump-log", path)
    assert r.returncode == 1
    assert len(r.stdout.decode().splitlines()) == 3
    assert re.search(rb"entry 1 \(byte position 34\): no ABORT marker of producer 5 at offset 40", r.stderr)


def test_marker_with_a_delete_horizon(tmp_path):
    part = os.path.join(str(tmp_path), "c-0")
    log = pylog.Log.open(part, cleanup_policy="compact", retention_ms=-1, delete_retention_ms=500)
    try:
        _txn(log, 1, 0, 0)
        log.append_marker(1, 0, False, 0, 0)  # 2: ABORT
        _txn(log, 1, 0, 2)                    # 3..4: producer 1's last batch
        log.append_marker(1, 0, True, 0, 0)   # 5
        log.roll()
        for now in (10_000, 10_001):
            Cleaner().clean(log, now, force=True)
    finally:
        log.close()
    lines = run("dump-log", seg(part, "log")).stdout.decode().splitlines()
    marker = [ln for ln in lines if ln.startswith("baseOffset: 2 ")]
    assert len(marker) == 1 and "isControl: true deleteHorizonMs: 10501 producerId: 1" in marker[0]
    assert marker[0].endswith("endTxnMarker: ABORT coordinatorEpoch: 0")


def test_transaction_log_decoder(tmp_path):
    part = os.path.join(str(tmp_path), "__transaction_state-0")
    log = pylog.Log.open(part, cleanup_policy="compact")
    value = txn_log.TxnLogValue(producer_id=4000, producer_epoch=3, transaction_timeout_ms=60000,
                                state=txn_log.TransactionState.ONGOING,
                                partitions=frozenset({("orders", 1), ("orders", 0), ("audit", 2)}),
                                last_update_timestamp_ms=1700000000123, start_timestamp_ms=1700000000000)
    try:
        log.append([Record(key=txn_log.encode_key("copier-1"), value=txn_log.encode_value(value, version=1))])
        log.append([Record(key=txn_log.encode_key("copier-2"), value=None)])
        log.append([Record(key=b"not a txn key", value=b"x")])
    finally:
        log.close()
    r = run("dump-log", "--transaction-log-decoder", seg(part, "log"))
    assert r.returncode == 1  # the last record is not a transaction log record
    out = r.stdout.decode()
    recs = [ln for ln in out.splitlines() if ln.startswith("| offset:")]
    key0, payload0 = re.search(r"key: (\{.*\}) payload: (.*)$", recs[0]).groups()
    assert json.loads(key0) == {"type": "transaction_metadata", "version": 0, "transactionalId": "copier-1"}
    assert json.loads(payload0) == {
        "version": 1, "producerId": 4000, "producerEpoch": 3, "previousProducerId": -1, "nextProducerId": -1,
        "transactionTimeoutMs": 60000, "state": "Ongoing", "partitions": {"audit": [2], "orders": [0, 1]},
        "transactionLastUpdateTimestampMs": 1700000000123, "transactionStartTimestampMs": 1700000000000,
        "clientTransactionVersion": 0}
    assert recs[1].endswith('"transactionalId": "copier-2"} payload: null')
    assert b"offset 2" in r.stderr and b"__transaction_state record" in r.stderr
    assert b"Traceback" not in r.stderr
