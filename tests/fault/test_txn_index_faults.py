"""A disk fault at every file operation of each ``.txnindex`` step (the harness of
``test_fault_at_every_operation.py``, for :class:`pylog.storage.txn_index.TransactionIndex`).

For each step - the first append (creates the file), an append to a file that
is read first, flush (file and directory fsync), truncate_to, reset, rename_to,
delete_if_exists, and reopen + sanity_check - the test counts the file
operations of a clean run (:attr:`SimulatedDiskIO.ops`), then for every N in
1..count runs it again with operation N failing (EMFILE, ENOSPC, EIO), once or
from N on, and asserts:

* the step returns, or raises :class:`KafkaStorageError` naming the index file;
  never a bare ``OSError``;
* all-or-nothing in memory: after a failure the entries are exactly those
  before the step (or, for a two-call step, after its first call), after a
  return exactly the step's result;
* once the disk heals the index takes another append and a flush, and then
  (``after="reopen"``) a new object reads exactly the entries in memory, or
  (``after="crash"``) the disk loses everything not fsynced and a new object
  still reads exactly them (the flush made them durable), with a clean
  ``sanity_check``: nothing the failed step wrote is half-visible.
"""
from __future__ import annotations

import errno
import os
import tempfile
from typing import Callable, List, NamedTuple, Optional

import pytest

from pylog.errors import KafkaStorageError
from pylog.storage.fileio import SimulatedDiskIO
from pylog.storage.txn_index import AbortedTxn, TransactionIndex

ERRNOS = (errno.EMFILE, errno.ENOSPC, errno.EIO)
E = [AbortedTxn(i, 10 * i, 10 * i + 5, 10 * i) for i in range(6)]
NAME = "00000000000000000000.txnindex"


class Step(NamedTuple):
    name: str
    #: builds the index (entries appended and flushed as given) and returns it
    setup: Callable[[str, SimulatedDiskIO], TransactionIndex]
    #: the step; returns the index to go on with (a new object for reopen/rename)
    run: Callable[[TransactionIndex, str, SimulatedDiskIO], TransactionIndex]
    before: List[AbortedTxn]
    after: List[AbortedTxn]
    #: two calls (e.g. append then flush): a failure in the second leaves the first's result
    composite: bool = False


def _with(n: int, flushed: bool = True, loaded: bool = True) -> Callable[[str, SimulatedDiskIO], TransactionIndex]:
    def setup(path: str, disk: SimulatedDiskIO) -> TransactionIndex:
        idx = TransactionIndex(path, 0, file_io=disk)
        for t in E[:n]:
            idx.append(t)
        if flushed:
            idx.flush()
        if not loaded:  # a fresh object: the step's first call reads the file
            idx.close()
            idx = TransactionIndex(path, 0, file_io=disk)
        return idx
    return setup


def _append(idx: TransactionIndex, path: str, disk: SimulatedDiskIO) -> TransactionIndex:
    idx.append(E[len(idx.all_aborted())])
    return idx


def _append_flush(idx: TransactionIndex, path: str, disk: SimulatedDiskIO) -> TransactionIndex:
    idx.append(E[len(idx.all_aborted())])
    idx.flush()
    return idx


def _truncate(idx: TransactionIndex, path: str, disk: SimulatedDiskIO) -> TransactionIndex:
    idx.truncate_to(E[2].last_offset)
    return idx


def _reset(idx: TransactionIndex, path: str, disk: SimulatedDiskIO) -> TransactionIndex:
    idx.reset()
    return idx


def _rename(idx: TransactionIndex, path: str, disk: SimulatedDiskIO) -> TransactionIndex:
    idx.rename_to(path + ".swap")
    idx.rename_to(path)
    return idx


def _reopen(idx: TransactionIndex, path: str, disk: SimulatedDiskIO) -> TransactionIndex:
    idx.close()
    new = TransactionIndex(path, 0, file_io=disk)
    new.sanity_check()
    return new


STEPS = [
    Step("first_append", _with(0), _append, [], E[:1]),
    Step("first_append_flush", _with(0), _append_flush, [], E[:1], composite=True),
    Step("append_after_read", _with(3, loaded=False), _append, E[:3], E[:4]),
    Step("append_flush", _with(3), _append_flush, E[:3], E[:4], composite=True),
    Step("append_unflushed", _with(3, flushed=False), _append_flush, E[:3], E[:4], composite=True),
    Step("truncate_after_read", _with(4, loaded=False), _truncate, E[:4], E[:2]),
    Step("reset", _with(4), _reset, E[:4], []),
    Step("reset_unread", _with(4, loaded=False), _reset, E[:4], []),
    Step("rename_twice", _with(3), _rename, E[:3], E[:3]),
    Step("reopen_sanity", _with(3), _reopen, E[:3], E[:3]),
]


def _clean_ops(step: Step) -> int:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, NAME)
        disk = SimulatedDiskIO()
        idx = step.setup(path, disk)
        disk.reset_ops()
        idx = step.run(idx, path, disk)
        assert idx.all_aborted() == step.after
        return disk.ops


@pytest.mark.parametrize("after", ["reopen", "crash"])
@pytest.mark.parametrize("count", [1, None], ids=["once", "from_then_on"])
@pytest.mark.parametrize("step", STEPS, ids=[s.name for s in STEPS])
def test_fault_at_every_txn_index_operation(step: Step, count: Optional[int], after: str) -> None:
    total = _clean_ops(step)
    assert total >= 1, step.name
    for at in range(1, total + 1):
        for err in ERRNOS:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, NAME)
                disk = SimulatedDiskIO()
                idx = step.setup(path, disk)
                disk.arm(at, err, count=count)
                where = f"{step.name} {errno.errorcode[err]} at op {at}/{total}"
                try:
                    idx = step.run(idx, path, disk)
                    ok = True
                except KafkaStorageError as exc:
                    ok = False
                    assert NAME in str(exc), (where, exc)
                where += f" ({disk.failed_ops[0][1]} {disk.failed_ops[0][2]})" if disk.failed_ops else ""
                disk.heal()
                if step.run is _reopen and not ok:  # the new object failed to open: open another
                    idx = TransactionIndex(path, 0, file_io=disk)
                if idx.path != path:  # the second rename failed: the index is still named .swap
                    assert step.run is _rename and not ok and idx.path == path + ".swap", where
                    idx.rename_to(path)
                mem = idx.all_aborted()
                if ok:
                    assert mem == step.after, (where, mem)
                elif step.composite:
                    assert mem in (step.before, step.after), (where, mem)
                else:
                    assert mem == step.before, (where, mem)
                idx._check()
                extra = AbortedTxn(99, 90, 95, 90)
                idx.append(extra)
                idx.flush()
                idx.close()
                if after == "crash":
                    disk.crash()
                again = TransactionIndex(path, 0, file_io=disk)
                again.sanity_check()
                assert again.all_aborted() == mem + [extra], where
                again.close()
