"""The oracle the transaction checks judge consumers by (:mod:`pylog.simulation.txn`), on a real Log.

It must classify each record from the raw batches and markers alone, and the
read checks must flag what a broken read side would hand out: an aborted or
open record, a record read back with another value, a committed transaction
read in part.
"""
from __future__ import annotations

import os
import random
import time
from collections import namedtuple

import pytest

import pylog
from pylog.record import Record, encode_batch
from pylog.simulation.txn import ABORTED, COMMITTED, OPEN, PLAIN, TxnReadChecks, log_outcomes

Rec = namedtuple("Rec", "topic partition offset value")
TP = ("t", 0)


def txn_batch(pid: int, seq: int, values, transactional: bool = True) -> bytes:
    return encode_batch([Record(value=v) for v in values], now_ms=int(time.time() * 1000), producer_id=pid,
                        producer_epoch=0, base_sequence=seq, transactional=transactional)


def build(tmp_path, seed: int):
    """A random interleaving of three transactional producers (commits, aborts, one left open) and plain
    appends; returns the log and the expected outcome of each value."""
    rng = random.Random(seed)
    log = pylog.Log.open(os.path.join(str(tmp_path), f"t-{seed}"))
    want = {}
    pending = {1: [], 2: [], 3: []}
    seqs = {1: 0, 2: 0, 3: 0}
    n = 0
    for _ in range(60):
        roll = rng.random()
        pid = rng.choice([1, 2, 3])
        if roll < 0.5:
            vals = [b"p%d-%d" % (pid, n + i) for i in range(rng.randint(1, 3))]
            n += len(vals)
            log.append_as_leader(txn_batch(pid, seqs[pid], vals), leader_epoch=0)
            seqs[pid] += len(vals)
            pending[pid] += vals
        elif roll < 0.7:
            v = b"plain-%d" % n
            n += 1
            log.append([v])
            want[v] = PLAIN
        elif pending[pid]:
            commit = rng.random() < 0.6
            log.append_marker(pid, 0, commit, 0, 0)
            for v in pending[pid]:
                want[v] = COMMITTED if commit else ABORTED
            pending[pid] = []
    for vals in pending.values():
        for v in vals:
            want[v] = OPEN
    return log, want


@pytest.mark.parametrize("seed", range(5))
def test_log_outcomes_classifies_every_record_by_its_marker(tmp_path, seed):
    log, want = build(tmp_path, seed)
    try:
        o = log_outcomes(log)
        got = {v: kind for kind, v, _ in o.records.values()}
        assert got == want
        assert set(want.values()) >= {PLAIN, COMMITTED, ABORTED}
        # each transaction's offsets and marker: the marker after every record of it
        for key, offs in o.txns.items():
            assert offs == sorted(offs) and offs[0] == key[1]
            if key in o.txn_marker:
                assert o.txn_marker[key] > offs[-1]
                assert {o.records[x][0] for x in offs} == {o.txn_outcome[key]}
        # a cut below the log end sees a transaction whose marker is past the cut as open
        marker_key = next(k for k, m in sorted(o.txn_marker.items(), key=lambda kv: kv[1]))
        cut = log_outcomes(log, o.txn_marker[marker_key])
        assert all(cut.records[x][0] == OPEN for x in o.txns[marker_key])
    finally:
        log.close()


def test_read_checks_flag_aborted_open_changed_and_partial_reads(tmp_path):
    log, want = build(tmp_path, 3)
    try:
        o = log_outcomes(log)
        by_kind = {}
        for off, (kind, v, _) in o.records.items():
            by_kind.setdefault(kind, []).append((off, v))
        good = TxnReadChecks("good")
        for off, v in by_kind[COMMITTED] + by_kind[PLAIN]:
            good.seen.setdefault(TP, {})[off] = v
        assert good.check_against(TP, o) == ([], [])
        for kind in (ABORTED, OPEN):
            r = TxnReadChecks(kind)
            off, v = by_kind[kind][0]
            r.seen[TP] = {off: v}
            bad, _ = r.check_against(TP, o)
            assert bad and kind in bad[0]
        changed = TxnReadChecks("changed")
        off, v = by_kind[COMMITTED][0]
        changed.seen[TP] = {off: v + b"!"}
        assert changed.check_against(TP, o)[0]
        # a committed transaction with one record left out, read past its marker: partial
        key = next(k for k, kind in o.txn_outcome.items() if kind == COMMITTED and len(o.txns[k]) > 1)
        partial = TxnReadChecks("partial")
        partial.seen[TP] = {x: o.records[x][1] for x in o.txns[key][1:]}
        partial.seen[TP][o.txn_marker[key] + 1] = None  # the consumer is past the marker
        _, part = partial.check_against(TP, o)
        assert part and "read in part" in part[0]
        # across partitions: whole, absent, or in part
        txns = [("a", {("t", 0): {b"x", b"y"}, ("t", 1): {b"z"}})]
        whole = TxnReadChecks("w")
        whole.seen = {("t", 0): {0: b"x", 1: b"y"}, ("t", 1): {0: b"z"}}
        assert whole.check_whole(txns) == []
        half = TxnReadChecks("h")
        half.seen = {("t", 0): {0: b"x", 1: b"y"}}
        assert half.check_whole(txns) and TxnReadChecks("none").check_whole(txns) == []
    finally:
        log.close()
