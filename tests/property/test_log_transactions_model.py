"""Random transactional histories against a pure-Python model (issue 17 item 3).

Producers write transactional batches, markers and plain batches; the log is
truncated, rolled, closed cleanly or crashed (SimulatedDiskIO); after every
step the ongoing transactions, the LSO for every HW and the aborted list equal
the model's, which keeps only the list of batches in the log. At the end a
follower copies the log in fetched chunks and must agree. Replay a failure
with the printed example (hypothesis' database is off: -p no:cacheprovider).
"""
from __future__ import annotations

import os
import tempfile
import time
from typing import List, Optional, Tuple

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pylog
from pylog.record import Record, encode_batch
from pylog.storage.fileio import SimulatedDiskIO

PIDS = (1, 2, 3)
# model entry: (kind, pid, first, last) kind in {"txn", "commit", "abort", "plain"}
Entry = Tuple[str, int, int, int]


def model_state(entries: List[Entry]) -> Tuple[dict, List[Tuple[int, int, int]]]:
    """Ongoing transactions {pid: first offset} and aborted [(pid, first, marker, lso)] of a log's entries
    (lso: the first offset of another ongoing transaction when the marker was written, else marker + 1)."""
    ongoing: dict = {}
    aborted = []
    for kind, pid, first, last in entries:
        if kind == "txn":
            ongoing.setdefault(pid, first)
        elif kind in ("commit", "abort"):
            f = ongoing.pop(pid, None)
            if f is not None and kind == "abort":
                aborted.append((pid, f, first, min(ongoing.values(), default=first + 1)))
    return ongoing, aborted


_txn = st.tuples(st.just("txn"), st.sampled_from(PIDS), st.integers(1, 3))
_end = st.tuples(st.sampled_from(["commit", "abort", "abort"]), st.sampled_from(PIDS), st.just(0))
step = st.one_of(
    _txn, _txn, _txn, _end, _end,
    st.tuples(st.just("plain"), st.just(0), st.integers(1, 3)),
    st.tuples(st.just("truncate"), st.just(0), st.integers(0, 3)),  # cut the last 0-3 offsets' batches
    st.tuples(st.sampled_from(["roll", "reopen", "crash", "flush"]), st.just(0), st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=15, max_size=50))
# a truncation's snapshot deletion must be durable: a crash brought back the snapshot of the old
# records at those offsets (an ongoing transaction the new records had committed)
@example([("txn", 1, 1), ("txn", 1, 1), ("plain", 0, 1), ("txn", 1, 1), ("txn", 1, 1), ("txn", 1, 1),
          ("plain", 0, 3), ("plain", 0, 1), ("roll", 0, 0), ("truncate", 0, 2), ("txn", 1, 3), ("commit", 1, 0),
          ("txn", 1, 1), ("truncate", 0, 1), ("crash", 0, 0)])
def test_transactions_match_the_model(steps):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "t-0")
    io = SimulatedDiskIO()
    log = pylog.Log.open(path, file_io=io)
    entries: List[Entry] = []
    durable = 0  # entries known fsynced
    seqs = {p: 0 for p in PIDS}
    now = int(time.time() * 1000)
    try:
        for kind, pid, n in steps:
            ongoing, _ = model_state(entries)
            if kind == "txn":
                b = encode_batch([Record(value=b"x")] * n, now_ms=now, producer_id=pid, producer_epoch=0,
                                 base_sequence=seqs[pid], transactional=True)
                r = log.append_as_leader(b, leader_epoch=0)
                seqs[pid] += n
                entries.append(("txn", pid, r.base_offset, r.last_offset))
            elif kind in ("commit", "abort"):
                r = log.append_marker(pid, 0, kind == "commit", 0, 0)
                entries.append((kind, pid, r.base_offset, r.last_offset))
            elif kind == "plain":
                r = log.append([b"p"] * n)
                entries.append(("plain", -1, r.base_offset, r.last_offset))
            elif kind == "truncate":
                cut = max(log.log_start_offset, log.log_end_offset - n)
                # truncation is at batch granularity: the model keeps the batches ending below the cut
                log.truncate_to(cut)
                entries = [e for e in entries if e[3] < log.log_end_offset]
                durable = min(durable, len(entries))
            elif kind == "roll":
                log.roll()
                durable = len(entries)
            elif kind == "flush":
                log.flush()
                durable = len(entries)
            elif kind == "reopen":
                log.close()
                log = pylog.Log.open(path, file_io=io)
                durable = len(entries)
            elif kind == "crash":
                log.abandon()
                io.crash()
                io = SimulatedDiskIO()
                log = pylog.Log.open(path, file_io=io)
                entries = [e for e in entries if e[3] < log.log_end_offset]
                assert len(entries) >= durable
                durable = len(entries)
            if entries:
                assert log.log_end_offset == entries[-1][3] + 1
            ongoing, aborted = model_state(entries)
            # seqs must follow the log after a truncation or crash
            for p in PIDS:
                seqs[p] = sum(e[3] - e[2] + 1 for e in entries if e[0] == "txn" and e[1] == p)
            assert log.first_unstable_offset == min(ongoing.values(), default=None)
            leo = log.log_end_offset
            assert log.last_stable_offset(leo) == min(list(ongoing.values()) + [leo])
            got = [(a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)
                   for a in log.aborted_transactions(0, leo + 1)]
            assert got == aborted
        # a follower copying the log (fetched chunks, as replication does) ends up with the same state
        follower = pylog.Log.open(os.path.join(d, "f", "t-0"))
        try:
            off = log.log_start_offset
            if off:
                follower.truncate_fully_and_start_at(off)
            while off < log.log_end_offset:
                chunk = log.fetch(off, 200)
                follower.append_batches(chunk, assign_offsets=False)
                off = follower.log_end_offset
            leo = log.log_end_offset
            assert follower.first_unstable_offset == log.first_unstable_offset
            assert follower.last_stable_offset(leo) == log.last_stable_offset(leo)
            assert [(a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset)
                    for a in follower.aborted_transactions(0, leo + 1)] \
                == model_state(entries)[1]
        finally:
            follower.close()
    finally:
        log.close()
