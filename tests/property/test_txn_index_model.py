"""The ``.txnindex`` against a pure-Python list model (hypothesis state machine).

Rules: append, truncate_to, reset, flush, reopen (close and open again), crash
(the simulated disk drops what was not fsynced), and queries. After every rule
the index's entries equal the model's list, ``collect_aborted`` equals the
model's filter (Kafka's ``collectAbortedTxns``, with its early stop at the
first entry whose LSO reaches the upper bound), and ``_check()`` holds. After a
reopen the file's bytes are exactly the model's entries, 34 bytes each.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import List, Tuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pylog.storage.fileio import SimulatedDiskIO
from pylog.storage.txn_index import AbortedTxn, TransactionIndex

START = 100


def model_collect(entries: List[AbortedTxn], fetch: int, upper: int) -> Tuple[List[AbortedTxn], bool]:
    found = []
    for e in entries:
        if e.last_offset >= fetch and e.first_offset < upper:
            found.append(e)
        if e.last_stable_offset >= upper:
            return found, True
    return found, False


class TxnIndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="txnidx-")
        self.path = os.path.join(self.dir, "00000000000000000100.txnindex")
        self.disk = SimulatedDiskIO()
        self.idx = TransactionIndex(self.path, START, file_io=self.disk)
        self.model: List[AbortedTxn] = []
        self.durable = 0  # entries that survive a crash

    def teardown(self) -> None:
        self.idx.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(pid=st.integers(0, 2**63 - 1), gap=st.integers(1, 50), span=st.integers(0, 200), lso=st.integers(0, 400))
    def append(self, pid: int, gap: int, span: int, lso: int) -> None:
        last = (self.model[-1].last_offset if self.model else START - 1) + gap
        t = AbortedTxn(pid, last - span, last, lso)  # first may lie in an earlier segment (below START)
        self.idx.append(t)
        self.model.append(t)

    @rule(offset=st.integers(0, 2000))
    def truncate_to(self, offset: int) -> None:
        self.idx.truncate_to(offset)
        self.model = [e for e in self.model if e.last_offset < offset]
        self.durable = min(self.durable, len(self.model))

    @rule()
    def reset(self) -> None:
        self.idx.reset()
        self.model = []
        self.durable = 0

    @rule()
    def flush(self) -> None:
        self.idx.flush()
        self.durable = len(self.model)

    @rule(flush=st.booleans())
    def reopen(self, flush: bool) -> None:
        if flush:
            self.flush()
        self.idx.close()
        data = open(self.path, "rb").read() if os.path.exists(self.path) else b""
        assert data == b"".join(e.encode() for e in self.model)
        self.idx = TransactionIndex(self.path, START, file_io=self.disk)

    @rule()
    def crash(self) -> None:
        self.idx.close()
        self.disk.crash()
        self.model = self.model[: self.durable]
        self.idx = TransactionIndex(self.path, START, file_io=self.disk)
        self.idx.sanity_check()

    @rule(fetch=st.integers(0, 2000), length=st.integers(0, 500))
    def query(self, fetch: int, length: int) -> None:
        assert self.idx.collect_aborted(fetch, fetch + length) == model_collect(self.model, fetch, fetch + length)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def query_around_an_entry(self, data: st.DataObject) -> None:
        e = data.draw(st.sampled_from(self.model))
        fetch = data.draw(st.integers(e.first_offset - 3, e.last_offset + 3))
        upper = data.draw(st.integers(fetch, e.last_offset + 10))
        assert self.idx.collect_aborted(fetch, upper) == model_collect(self.model, fetch, upper)

    @invariant()
    def same_entries(self) -> None:
        assert self.idx.all_aborted() == self.model
        assert self.idx.last_offset == (self.model[-1].last_offset if self.model else None)
        self.idx._check()


TestTxnIndexModel = TxnIndexMachine.TestCase
