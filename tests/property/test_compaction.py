"""Compaction against a dict model (hypothesis), and crash safety of the segment swap.

The model is the list of every record appended (offset -> record) plus, per
tombstone, the time of the first clean that kept it. After each clean:

* every surviving offset holds exactly the record appended there;
* offsets strictly increase; nothing at or past the clean's end offset
  (active segment, upper bound) is touched, and the end never passes them;
* below the end, each key appears at most once, and it is the latest
  record of that key below the end - unless that is a tombstone whose
  delete horizon (first clean that kept it + delete_retention_ms) has passed;
* the log reopens with the same content (clean shutdown).

The crash property injects an I/O failure at the N-th file operation of a
clean (write, fsync, rename, unlink, directory fsync), simulates the power
loss, reopens, and checks that every offset reads either as before the
clean or as after it: never lost, never duplicated, never changed.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from typing import Dict, List, Optional, Tuple

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import pylog
from pylog.errors import KafkaStorageError
from pylog.storage.cleaner import Cleaner
from pylog.storage.fileio import FileIO, SimulatedDiskIO

DRM = 1_000  # delete_retention_ms used by the models
Row = Tuple[Optional[bytes], Optional[bytes], Tuple[Tuple[str, Optional[bytes]], ...], int]


class NoSyncIO(FileIO):
    """Real files without real fsyncs (the tests model durability themselves; keeps them fast)."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


class CrashingDisk(SimulatedDiskIO, NoSyncIO):
    """SimulatedDiskIO that "loses power" at its ``fail_at``-th file operation.

    From that operation on, every write, fsync, truncate, rename and unlink
    raises EIO (the process is dead). A rename not yet made durable by a
    directory fsync is undone by :meth:`crash` - the source name comes back -
    as on a journaling file system (rename is atomic).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.fail_at: Optional[int] = None

    def _tick(self, what: str) -> None:
        self.ops += 1
        if self.fail_at is not None and self.ops >= self.fail_at:
            raise OSError(errno.EIO, f"injected power loss at file operation {self.ops} ({what})")

    def pwrite(self, fd: int, data: object, offset: int) -> None:
        self._tick("write")
        super().pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        self._tick("fsync")
        super().fsync(fd)

    def truncate(self, fd: int, size: int) -> None:
        self._tick("truncate")
        super().truncate(fd, size)

    def unlink(self, path: str) -> None:
        self._tick("unlink")
        super().unlink(path)

    def fsync_dir(self, path: str) -> None:
        self._tick("fsync_dir")
        super().fsync_dir(path)

    def replace(self, src: str, dst: str) -> None:
        self._tick("rename")
        src = os.path.abspath(src)
        with self._lock:
            st_ = self._state(src)
            saved = None
            if st_.durable_name:
                with open(src, "rb") as f:
                    saved = f.read()[: st_.synced_size]
        super().replace(src, dst)
        if saved is not None:
            with self._lock:
                self._removed.setdefault(src, saved)
                self._pending_names.setdefault(os.path.dirname(src), set()).add(src)


def _contents(log: pylog.Log) -> Dict[int, Row]:
    out: Dict[int, Row] = {}
    offset = log.log_start_offset
    last = -1
    while offset < log.log_end_offset:
        recs = list(log.read(offset, 1 << 20))
        if not recs:
            break
        for r in recs:
            assert r.offset > last, f"offset {r.offset} after {last}: not strictly increasing"
            last = r.offset
            out[r.offset] = (r.value, r.key, tuple(r.headers), r.timestamp)
        offset = recs[-1].offset + 1
    return out


keys = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f"])
values = st.one_of(st.none(), st.binary(min_size=1, max_size=30))
headers = st.lists(st.tuples(st.sampled_from(["h", "x"]), st.one_of(st.none(), st.binary(max_size=4))), max_size=2)
records = st.lists(st.tuples(keys, values, headers), min_size=1, max_size=5)


class CompactionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="pylog-compact-")
        self.now = 1_000_000
        self.path = os.path.join(self.tmp, "t-0")
        self.log = self._open()
        self.appended: Dict[int, Row] = {}
        self.first_kept: Dict[int, int] = {}  # tombstone offset -> time of the first clean that kept it
        self.pid_seq = 0

    def _open(self) -> pylog.Log:
        return pylog.Log.open(self.path, file_io=NoSyncIO(), clock_ms=lambda: self.now, cleanup_policy="compact", segment_bytes=400,
                              retention_ms=-1, delete_retention_ms=DRM, index_interval_bytes=64)

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(recs=records, compression=st.sampled_from([None, None, "gzip"]), producer=st.booleans())
    def append(self, recs, compression, producer) -> None:
        batch = [pylog.Record(value=v, key=k, headers=h, timestamp=self.now) for k, v, h in recs]
        kw = {}
        if producer:
            kw = dict(producer_id=7, producer_epoch=0, base_sequence=self.pid_seq)
            self.pid_seq += len(batch)
        res = self.log.append(batch, compression=compression, **kw)
        for i, (k, v, h) in enumerate(recs):
            self.appended[res.base_offset + i] = (v, k, tuple(h), self.now)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(frac=st.floats(min_value=0.0, max_value=1.0))
    def truncate(self, frac: float) -> None:
        lo, hi = self.log.log_start_offset, self.log.log_end_offset
        self.log.truncate_to(lo + int(frac * (hi - lo)))
        end = self.log.log_end_offset
        for off in [o for o in self.first_kept if o >= end]:
            del self.first_kept[off]
        cp = self.log.cleaner_checkpoint
        assert cp is None or cp <= end

    @rule(frac=st.floats(min_value=0.0, max_value=1.0))
    def delete_records_before(self, frac: float) -> None:
        lo, hi = self.log.log_start_offset, self.log.log_end_offset
        before = _contents(self.log)
        start = self.log.delete_records_before(lo + int(frac * (hi - lo)))
        assert _contents(self.log) == {o: r for o, r in before.items() if o >= start}

    @rule(ms=st.integers(min_value=1, max_value=2 * DRM))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def reopen(self) -> None:
        before = _contents(self.log)
        self.log.close()
        self.log = self._open()
        assert _contents(self.log) == before

    @rule(bound=st.one_of(st.none(), st.integers(min_value=0, max_value=200)), map_entries=st.sampled_from([3, 1000]))
    def clean(self, bound: Optional[int], map_entries: int) -> None:
        before = _contents(self.log)
        active = self.log.active_segment.base_offset
        res = Cleaner(max_map_entries=map_entries).clean(self.log, self.now, upper_bound=bound, force=True)
        after = _contents(self.log)
        self.log._check()
        end = res.end_offset
        assert end <= active and (bound is None or end <= bound)
        # unchanged records, and nothing at or past the end touched
        for off, row in after.items():
            assert off in before and row == self.appended[off], off
        for off in before:
            if off >= end:
                assert off in after, f"offset {off} >= clean end {end} was removed"
        # below the end: at most one record per key, the latest one (or its expired tombstone is gone)
        latest: Dict[bytes, int] = {}
        for off in sorted(before):
            if off < end:
                latest[before[off][1]] = off  # type: ignore[index]
        seen: Dict[bytes, int] = {}
        for off, row in after.items():
            if off < end:
                assert row[1] not in seen, f"key {row[1]!r} twice below {end}: {seen.get(row[1])} and {off}"
                seen[row[1]] = off  # type: ignore[index]
        for key, off in latest.items():
            value = before[off][0]
            if value is not None:
                assert seen.get(key) == off, f"latest value of {key!r} at {off} did not survive"
                continue
            first = self.first_kept.get(off)
            if first is None:
                assert seen.get(key) == off, f"tombstone at {off} removed on its first clean"
                self.first_kept[off] = self.now
            elif self.now >= first + DRM:
                assert key not in seen, f"tombstone at {off} kept past its horizon {first + DRM} (now {self.now})"
            else:
                assert seen.get(key) == off, f"tombstone at {off} removed before its horizon"
        if not res.cleaned:
            assert after == before

    @invariant()
    def log_is_consistent(self) -> None:
        self.log._check()


CompactionMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_compaction_against_dict_model = CompactionMachine.TestCase


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(records, min_size=3, max_size=25),
    rolls=st.sets(st.integers(min_value=0, max_value=24)),
    pre_clean=st.booleans(),
    tombstones_expire=st.booleans(),
    fail_frac=st.floats(min_value=0.0, max_value=1.0),
    from_end=st.one_of(st.none(), st.integers(min_value=0, max_value=30)),
)
def test_crash_during_clean_leaves_every_offset_original_or_cleaned(batches, rolls, pre_clean, tombstones_expire,
                                                                    fail_frac, from_end) -> None:
    tmp = tempfile.mkdtemp(prefix="pylog-compact-crash-")
    try:
        now = [1_000_000]
        path = os.path.join(tmp, "logs", "t-0")
        cfg = dict(cleanup_policy="compact", segment_bytes=400, retention_ms=-1, delete_retention_ms=DRM,
                   index_interval_bytes=64)
        disk = CrashingDisk()
        log = pylog.Log.open(path, file_io=disk, clock_ms=lambda: now[0], **cfg)
        appended: Dict[int, Row] = {}
        for i, recs in enumerate(batches):
            res = log.append([pylog.Record(value=v, key=k, headers=h, timestamp=now[0]) for k, v, h in recs],
                             compression="gzip" if i % 4 == 3 else None)
            for j, (k, v, h) in enumerate(recs):
                appended[res.base_offset + j] = (v, k, tuple(h), now[0])
            if i in rolls:
                log.roll()
        if pre_clean:
            Cleaner().clean(log, now[0], force=True)
        log.roll()
        log.flush()
        if tombstones_expire:
            now[0] += DRM
        before = _contents(log)
        # The reference: the same clean on a copy, without a crash, counting its file operations.
        log.close()
        ref_dir = os.path.join(tmp, "ref")
        shutil.copytree(os.path.join(tmp, "logs"), ref_dir)
        counter = CrashingDisk()
        ref = pylog.Log.open(os.path.join(ref_dir, "t-0"), file_io=counter, clock_ms=lambda: now[0], **cfg)
        ops0 = counter.ops
        Cleaner().clean(ref, now[0], force=True)
        total = counter.ops - ops0
        cleaned = _contents(ref)
        ref.close()
        log = pylog.Log.open(path, file_io=disk, clock_ms=lambda: now[0], **cfg)
        # Anywhere in the clean, or (from_end) among its last operations: the swap's renames.
        point = int(fail_frac * total) if from_end is None else max(0, total - from_end)
        disk.fail_at = disk.ops + 1 + point
        try:
            Cleaner().clean(log, now[0], force=True)
        except (KafkaStorageError, OSError):
            pass
        log.abandon()
        disk.crash()
        disk.fail_at = None
        log = pylog.Log.open(path, file_io=disk, clock_ms=lambda: now[0], **cfg)
        try:
            log._check()
            got = _contents(log)
            assert set(cleaned) <= set(got) <= set(before), (sorted(set(before) - set(got)), sorted(set(got) - set(before)))
            for off, row in got.items():
                assert row == appended[off]
            # still a working log: append, clean again, reopen
            log.append([pylog.Record(b"z", key=b"a")])
            Cleaner().clean(log, now[0], force=True)
            log._check()
            assert set(_contents(log)) >= set(cleaned) - {o for o, r in before.items() if r[1] == b"a"}
        finally:
            log.close()
        leftovers = [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap", ".deleted"))]
        assert not leftovers
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_crash_at_every_file_operation_of_a_clean(tmp_path) -> None:
    """Exhaustive: one small log (three segments, tombstones, a compressed batch), a power loss
    at each file operation of its clean in turn."""
    now = 1_000_000
    cfg = dict(cleanup_policy="compact", segment_bytes=300, retention_ms=-1, delete_retention_ms=DRM,
               index_interval_bytes=64)
    src = tmp_path / "src"
    log = pylog.Log.open(str(src / "t-0"), file_io=NoSyncIO(), clock_ms=lambda: now, **cfg)
    appended: Dict[int, Row] = {}
    for i in range(12):
        k, v = b"k%d" % (i % 3), (None if i == 7 else b"v%d" % i)
        res = log.append([pylog.Record(v, key=k, timestamp=now)], compression="gzip" if i == 4 else None)
        appended[res.base_offset] = (v, k, (), now)
    log.roll()
    before = _contents(log)
    log.close()
    ref_dir = tmp_path / "ref"
    shutil.copytree(src, ref_dir)
    counter = CrashingDisk()
    ref = pylog.Log.open(str(ref_dir / "t-0"), file_io=counter, clock_ms=lambda: now, **cfg)
    ops0 = counter.ops
    res = Cleaner().clean(ref, now, force=True)
    total = counter.ops - ops0
    cleaned = _contents(ref)
    ref.close()
    assert res.groups >= 2 and cleaned != before
    outcomes = set()
    for point in range(total + 1):
        work = tmp_path / f"crash{point}"
        shutil.copytree(src, work)
        disk = CrashingDisk()
        log = pylog.Log.open(str(work / "t-0"), file_io=disk, clock_ms=lambda: now, **cfg)
        disk.fail_at = disk.ops + 1 + point
        try:
            Cleaner().clean(log, now, force=True)
        except (KafkaStorageError, OSError):
            pass
        log.abandon()
        disk.crash()
        disk.fail_at = None
        log = pylog.Log.open(str(work / "t-0"), file_io=disk, clock_ms=lambda: now, **cfg)
        got = _contents(log)
        log._check()
        log.close()
        assert set(cleaned) <= set(got) <= set(before), (point, sorted(got))
        assert all(row == appended[off] for off, row in got.items()), point
        outcomes.add(tuple(sorted(got)))
        shutil.rmtree(work)
    assert tuple(sorted(before)) in outcomes and tuple(sorted(cleaned)) in outcomes


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(not os.environ.get("PYLOG_SOAK"), reason="soak run: set PYLOG_SOAK=1")
def test_compaction_soak() -> None:
    """Long run: PYLOG_SOAK=1 .venv/bin/python -m pytest tests/property/test_compaction.py -m soak"""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(CompactionMachine,
                              settings=settings(max_examples=1500, stateful_step_count=60, deadline=None))
    settings(max_examples=1500, deadline=None)(
        given(
            batches=st.lists(records, min_size=3, max_size=40),
            rolls=st.sets(st.integers(min_value=0, max_value=39)),
            pre_clean=st.booleans(),
            tombstones_expire=st.booleans(),
            fail_frac=st.floats(min_value=0.0, max_value=1.0),
            from_end=st.one_of(st.none(), st.integers(min_value=0, max_value=30)),
        )(test_crash_during_clean_leaves_every_offset_original_or_cleaned.hypothesis.inner_test)
    )()
