"""A disk fault at every single file operation of each multi-file step (issue 14).

For each scenario - an append, a roll (by an append and by ``roll()``), rebuilding
indexes on open, recovery on an unclean open, a cleaner swap, checkpoint
replaces (``delete_records_before``, ``assign_epoch``), ``truncate_to`` and
``truncate_fully_and_start_at`` - the test counts the file operations of a
clean run (:attr:`SimulatedDiskIO.ops`: open, pwrite, fsync, truncate,
rename, unlink, directory fsync, mkdir, listdir, whole-file read), then for
every N in 1..count runs it again with operation N failing (EMFILE, ENOSPC or
EIO in turn), either once or from N on (a full disk or descriptor table stays
full), and asserts:

* the step returns or raises a ``pylog.errors`` exception
  (:class:`KafkaStorageError`); never a bare ``OSError`` or anything else;
* then the disk heals and a log that is still open takes two more appends
  (``append``: acknowledged) and a clean close, or is closed at once
  (``close``: nothing overwrote what the failure left behind), or
  (``crash``) the process dies there and the disk loses everything not
  fsynced;
* reopened, every acknowledged record is readable with its value, offsets are
  dense, and the log ends exactly where the acknowledged records say:
  nothing the failed step wrote is half-visible. A failed roll, and a failed
  segment create anywhere, leave the directory's file names exactly as
  before (one-shot faults, where the undo itself can succeed).

Every log uses ``flush_messages=1``, so "acknowledged" also means durable and
the crash variant can demand every acknowledged record. A failure names the
scenario, N, the errno and the operation that failed, e.g.
``roll_by_append once EMFILE at op 7 (open .../00000000000000000009.index)``.
"""
from __future__ import annotations

import errno
import os
import tempfile
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import pytest

import pylog
from pylog.errors import KafkaStorageError, PylogError
from pylog.storage.cleaner import Cleaner
from pylog.storage.fileio import SimulatedDiskIO

ERRNOS = (errno.EMFILE, errno.ENOSPC, errno.EIO)
NOW = 1_000_000
OPTS = dict(segment_bytes=400, index_interval_bytes=64, retention_ms=-1, flush_messages=1)
Model = Dict[int, Tuple[Optional[bytes], bytes]]  # offset -> (key, value) of each acknowledged record


def _value(i: int) -> bytes:
    return b"v%04d-" % i + bytes([65 + i % 26]) * (i % 29)


def _open(path: str, disk: SimulatedDiskIO, **cfg: object) -> pylog.Log:
    opts = dict(OPTS)
    opts.update(cfg)
    return pylog.Log.open(path, file_io=disk, clock_ms=lambda: NOW, **opts)


def _append(log: pylog.Log, model: Model, n: int, *, keys: int = 0) -> None:
    for _ in range(n):
        i = log.log_end_offset
        key = b"k%d" % (i % keys) if keys else None
        r = log.append([pylog.Record(value=_value(i), key=key)])
        assert r.base_offset == i
        model[i] = (key, _value(i))


class Outcome(NamedTuple):
    ok: bool  # the step returned
    end: int  # the log end offset the step left in memory (-1 when the log was closed or never opened)


class Scenario(NamedTuple):
    name: str
    cfg: dict
    #: builds the log (returns it open, or None when the step opens it) and the acknowledged records
    setup: Callable[[str, SimulatedDiskIO], Tuple[Optional[pylog.Log], Model]]
    #: the step; returns the (possibly newly opened) log
    step: Callable[[Optional[pylog.Log], str, SimulatedDiskIO, Model], Optional[pylog.Log]]
    #: (model before, outcome) -> the (start, end) pairs the reopened log may have, and the model it must hold
    expect: Callable[[Model, Outcome], Tuple[List[Tuple[int, int]], Model]]
    compacted: bool = False
    exact_listing: bool = False  # a failed step leaves exactly the old file names (one-shot faults)
    #: the records an appending step tries to write, as a model: after a failure whose undo failed
    #: too (the fault persists) and a crash, they may be found whole (like an append whose
    #: acknowledgement was lost), never in part
    attempted: Optional[Callable[[int], Model]] = None


def _plain_setup(n: int, **cfg: object) -> Callable[[str, SimulatedDiskIO], Tuple[Optional[pylog.Log], Model]]:
    def setup(path: str, disk: SimulatedDiskIO) -> Tuple[Optional[pylog.Log], Model]:
        log = _open(path, disk, **cfg)
        model: Model = {}
        _append(log, model, n)
        return log, model
    return setup


def _end(model: Model) -> int:
    return max(model) + 1 if model else 0


def _prefix(model: Model, end: int) -> Model:
    return {o: kv for o, kv in model.items() if o < end}


# ---- roll ---------------------------------------------------------------------------------------


def _roll_setup(path: str, disk: SimulatedDiskIO) -> Tuple[Optional[pylog.Log], Model]:
    log = _open(path, disk)
    model: Model = {}
    while True:  # fill the active segment until the next 60-byte append must roll
        seg = log.active_segment
        if log.segments.keys()[-1] > 0 and seg.size + 120 > OPTS["segment_bytes"]:
            break
        _append(log, model, 1)
    return log, model


def _roll_by_append(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    before = log.active_segment.base_offset
    r = log.append([b"r" * 100])
    assert log.active_segment.base_offset > before  # it did roll
    model[r.base_offset] = (None, b"r" * 100)
    return log


def _append_one(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    r = log.append([b"a" * 30, b"b" * 30])
    model[r.base_offset] = (None, b"a" * 30)
    model[r.base_offset + 1] = (None, b"b" * 30)
    return log


def _roll_explicit(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    log.roll()
    return log


# ---- opening: index rebuild, recovery -----------------------------------------------------------


def _indexes_lost_setup(path: str, disk: SimulatedDiskIO) -> Tuple[Optional[pylog.Log], Model]:
    log, model = _plain_setup(25)(path, disk)
    assert log is not None
    log.close()
    for n in os.listdir(path):
        if n.endswith((".index", ".timeindex")):
            os.unlink(os.path.join(path, n))
    return None, model


def _unclean_setup(path: str, disk: SimulatedDiskIO) -> Tuple[Optional[pylog.Log], Model]:
    log, model = _plain_setup(25)(path, disk)
    assert log is not None
    log.abandon()  # a killed process: no marker, so the next open recovers from the recovery point
    root = os.path.dirname(path)
    os.unlink(os.path.join(root, "recovery-point-offset-checkpoint"))  # ... from the first segment
    return None, model


def _open_and_read(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is None
    log = _open(path, disk)
    try:
        got = {r.offset: r.value for r in log.read(0, max_bytes=1 << 30)}
        assert got == {o: v for o, (_, v) in model.items()}
        for o in model:  # point reads (the index lookups) too
            assert log.get(o).value == model[o][1]
    except BaseException:
        log.abandon()
        raise
    return log


def _same_expect(model: Model, out: Outcome) -> Tuple[List[Tuple[int, int]], Model]:
    """The step adds or removes no record: the log holds exactly the acknowledged ones."""
    return [(0, _end(model))], model


# ---- cleaner swap -------------------------------------------------------------------------------


def _compacted_setup(path: str, disk: SimulatedDiskIO) -> Tuple[Optional[pylog.Log], Model]:
    log = _open(path, disk, cleanup_policy="compact")
    model: Model = {}
    _append(log, model, 24, keys=5)
    log.roll()
    return log, model


def _clean(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    res = Cleaner().clean(log, NOW, force=True)
    assert res.cleaned
    return log


# ---- checkpoints --------------------------------------------------------------------------------


def _delete_before(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    log.delete_records_before(13)
    return log


def _delete_before_expect(model: Model, out: Outcome) -> Tuple[List[Tuple[int, int]], Model]:
    end = _end(model)
    starts = [13] if out.ok else list(range(0, 14))  # the log start moves forward or not at all
    return [(s, end) for s in starts], model


def _assign_epoch(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    assert log.assign_epoch(7, log.log_end_offset)
    return log


# ---- truncation ---------------------------------------------------------------------------------

TRUNCATE_TO = 9


def _truncate(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    log.truncate_to(TRUNCATE_TO)
    return log


def _truncate_expect(model: Model, out: Outcome) -> Tuple[List[Tuple[int, int]], Model]:
    if out.ok:
        return [(0, TRUNCATE_TO)], _prefix(model, TRUNCATE_TO)
    if out.end >= 0:  # failed, log still open: a consistent prefix between the target and the old end
        assert TRUNCATE_TO <= out.end <= _end(model), out
        return [(0, out.end)], _prefix(model, out.end)
    return [(0, e) for e in range(TRUNCATE_TO, _end(model) + 1)], model  # crashed: any prefix in between


START_AT = 100


def _truncate_fully(log: Optional[pylog.Log], path: str, disk: SimulatedDiskIO, model: Model) -> Optional[pylog.Log]:
    assert log is not None
    log.truncate_fully_and_start_at(START_AT)
    return log


def _truncate_fully_expect(model: Model, out: Outcome) -> Tuple[List[Tuple[int, int]], Model]:
    if out.ok:
        return [(START_AT, START_AT)], {}
    if out.end >= 0:  # failed with the log open: nothing happened
        assert out.end == _end(model), out
        return [(0, _end(model))], model
    # failed and the log was closed (or a crash): the next open finishes the job, or it never began
    return [(0, _end(model)), (START_AT, START_AT)], model


SCENARIOS = [
    Scenario("append", {}, _plain_setup(3), _append_one, _same_expect,
             attempted=lambda end: {end: (None, b"a" * 30), end + 1: (None, b"b" * 30)}),
    Scenario("roll_by_append", {}, _roll_setup, _roll_by_append, _same_expect, exact_listing=True,
             attempted=lambda end: {end: (None, b"r" * 100)}),
    Scenario("roll_explicit", {}, _roll_setup, _roll_explicit, _same_expect, exact_listing=True),
    Scenario("index_rebuild_on_open", {}, _indexes_lost_setup, _open_and_read, _same_expect),
    Scenario("recovery_on_unclean_open", {}, _unclean_setup, _open_and_read, _same_expect),
    Scenario("cleaner_swap", {"cleanup_policy": "compact"}, _compacted_setup, _clean, _same_expect,
             compacted=True),
    Scenario("checkpoint_delete_records_before", {}, _plain_setup(25), _delete_before, _delete_before_expect),
    Scenario("checkpoint_leader_epoch", {}, _plain_setup(25), _assign_epoch, _same_expect),
    Scenario("truncate_to", {}, _plain_setup(25), _truncate, _truncate_expect),
    Scenario("truncate_fully_and_start_at", {}, _plain_setup(25), _truncate_fully, _truncate_fully_expect),
]


def _listing(path: str) -> List[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def _check_reopened(sc: Scenario, log: pylog.Log, bounds: List[Tuple[int, int]], model: Model, where: str) -> None:
    start, end = log.log_start_offset, log.log_end_offset
    assert (start, end) in bounds, f"{where}: log is [{start}, {end}), expected one of {bounds[:6]}"
    got = {r.offset: (r.key, r.value) for r in log.read(start, max_bytes=1 << 30)} if end > start else {}
    if sc.compacted:
        # Compaction may have dropped superseded records: what is there is exactly what was
        # appended at that offset, and each key's latest record is there.
        for o, kv in got.items():
            assert model.get(o) == kv, f"{where}: offset {o} holds {kv}, appended {model.get(o)}"
        latest: Dict[Optional[bytes], int] = {}
        for o, (k, _) in sorted(model.items()):
            latest[k] = o
        for k, o in latest.items():
            assert o in got, f"{where}: the latest record of key {k!r} (offset {o}) is gone"
    else:
        assert sorted(got) == list(range(start, end)), f"{where}: offsets not dense"
        for o in range(start, end):
            assert got[o] == model[o], f"{where}: offset {o} holds {got[o]}, acknowledged {model[o]}"
    log._check()


def _run(sc: Scenario, root: str, at: Optional[int], err: int, count: Optional[int], after: str) -> int:
    """One run with operation ``at`` failing (None: no fault); returns the operations counted."""
    path = os.path.join(root, f"{sc.name}-{at}-{count}-{after}", "t-0")
    disk = SimulatedDiskIO()
    log, model = sc.setup(path, disk)
    listing = _listing(path)
    base = log.segments.keys()[-1] if log is not None else -1
    before = dict(model)
    if at is None:
        disk.reset_ops()
    else:
        disk.arm(at, err, count=count)
    where = (f"{sc.name} {'once' if count == 1 else 'from then on'} {errno.errorcode[err]} at op {at}"
             if at is not None else f"{sc.name} without a fault")
    ok = True
    try:
        log = sc.step(log, path, disk, model)
    except PylogError as exc:
        ok = False
        assert at is not None, f"{sc.name} fails without a fault: {exc!r}"
        assert isinstance(exc, KafkaStorageError), f"{where}: {exc!r}"
        where += f" ({disk.failed_ops[0][1]} {disk.failed_ops[0][2]})" if disk.failed_ops else ""
    ops = disk.ops
    disk.heal()
    open_log = log is not None and not log.closed
    out = Outcome(ok, log.log_end_offset if open_log and log is not None else -1)
    if not ok and sc.exact_listing and count == 1 and open_log and log is not None and log.segments.keys()[-1] == base:
        # The roll did not complete (the old segment is still active): nothing of it is left.
        assert _listing(path) == listing, f"{where}: the failed step left {set(_listing(path)) ^ set(listing)}"
    if after == "crash":
        if open_log and log is not None:
            log.abandon()
        disk.crash()
        out = Outcome(ok, -1)
        bounds, model = sc.expect(before if not ok else model, out)
        if not ok and count is None and sc.attempted is not None:
            extra = sc.attempted(_end(model))
            model = {**model, **extra}
            bounds = bounds + [(s, max(extra) + 1) for s, _ in bounds]
    else:
        bounds, model = sc.expect(before if not ok else model, out)
        if open_log and log is not None:
            if after == "append":
                # The log keeps working once the disk heals; these appends are acknowledged too.
                _append(log, model, 2, keys=5 if sc.compacted else 0)
                bounds = sorted({(s, log.log_end_offset) for s, _ in bounds})
            log.close()  # ("close": right after the failure, nothing may have overwritten what it left)
    reopened = _open(path, disk, **sc.cfg)
    try:
        _check_reopened(sc, reopened, bounds, model, where)
    finally:
        reopened.close()
    return ops


@pytest.mark.parametrize("after", ["append", "close", "crash"])
@pytest.mark.parametrize("count", [1, None], ids=["once", "from_then_on"])
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_fault_at_every_operation(sc: Scenario, count: Optional[int], after: str) -> None:
    # On tmpfs where there is one: the scenarios fsync on every append (flush_messages=1).
    with tempfile.TemporaryDirectory(prefix="pylog-sweep-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as root:
        total = _run(sc, root, None, 0, None, after)
        assert total > 0
        for n in range(1, total + 1):
            _run(sc, root, n, ERRNOS[n % len(ERRNOS)], count, after)
