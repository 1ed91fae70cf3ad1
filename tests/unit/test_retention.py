"""Retention: never the active segment, never data a consumer-aware floor protects, exact time and
size boundaries (a hypothesis property against Kafka's rule), and the maintenance task a broker
runs (interval, retention_protect_groups, compaction bounded by the high watermark)."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pylog
from pylog.runtime.log_maintenance import protected_offset, run_maintenance
from pylog.storage.fileio import FileIO


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class NoSyncIO(FileIO):
    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def _log(path, clock: Clock, **cfg) -> pylog.Log:
    return pylog.Log.open(str(path), clock_ms=clock, file_io=NoSyncIO(), **cfg)


def _fill(log: pylog.Log, clock: Clock, segments: int, per_segment: int = 3, step_ms: int = 0) -> List[int]:
    """``segments`` closed segments of ``per_segment`` one-record batches, then an empty active one."""
    for _ in range(segments):
        for _ in range(per_segment):
            log.append([pylog.Record(b"x" * 20, key=b"k", timestamp=clock.now)])
        clock.now += step_ms
        log.roll()
    return list(log.segments.keys())


def test_time_retention_never_removes_the_active_segment(tmp_path) -> None:
    clock = Clock()
    with _log(tmp_path / "t-0", clock, retention_ms=1_000) as log:
        for i in range(5):
            log.append([b"v%d" % i])
        clock.now += 10_000
        assert log.enforce_retention() == []  # the only segment is the active one
        log.roll()  # a roll enforces retention: the closed segment is 10 s old
        assert log.log_start_offset == 5 and list(log.segments.keys()) == [5]
        log.append([b"new"])
        clock.now += 10_000  # now everything is old, but the active segment stays
        assert log.enforce_retention() == []
        assert [r.value for r in log.read(log.log_start_offset)] == [b"new"]
        log._check()


def test_size_retention_zero_keeps_the_active_segment(tmp_path) -> None:
    clock = Clock()
    with _log(tmp_path / "t-0", clock, retention_bytes=0) as log:
        bases = _fill(log, clock, 4)
        log.append([b"active"])
        assert len(log.segments) == 1 and log.log_start_offset == bases[-1]
        assert [r.value for r in log.read(log.log_start_offset)] == [b"active"]


def test_time_retention_boundary_is_strictly_greater(tmp_path) -> None:
    clock = Clock()
    with _log(tmp_path / "t-0", clock, retention_ms=5_000) as log:
        _fill(log, clock, 2, step_ms=1_000)  # segment 0 max ts 1_000_000, segment 3 max ts 1_001_000
        assert log.enforce_retention(1_005_000) == []  # exactly retention_ms old: kept
        assert log.enforce_retention(1_005_001) == [0]
        assert log.enforce_retention(1_006_000) == []
        assert log.enforce_retention(1_006_001) == [3]


def test_size_retention_boundary(tmp_path) -> None:
    clock = Clock()
    with _log(tmp_path / "t-0", clock) as log:
        _fill(log, clock, 3)
        sizes = [s.size for s in log.segments.values()]
        total = sum(sizes)
        log.config = log.config._replace(retention_bytes=total - sizes[0] + 1)
        assert log.enforce_retention() == []  # deleting segment 0 would leave less than retention_bytes
        log.config = log.config._replace(retention_bytes=total - sizes[0])
        assert log.enforce_retention() == [0]  # what stays is exactly retention_bytes


def test_protect_from_keeps_every_segment_holding_protected_offsets(tmp_path) -> None:
    clock = Clock()
    with _log(tmp_path / "t-0", clock, retention_ms=1) as log:
        bases = _fill(log, clock, 4)  # bases 0, 3, 6, 9, active 12
        clock.now += 1_000
        assert log.enforce_retention(protect_from=0) == []
        assert log.enforce_retention(protect_from=5) == [0]  # [0,3) is consumed; [3,6) holds 5
        assert log.enforce_retention(protect_from=6) == [3]  # [3,6) now fully below 6
        assert log.log_start_offset == 6
        log.retention_protect_from = 7  # the maintenance task's floor applies to every caller
        assert log.enforce_retention() == []
        assert log.enforce_retention(protect_from=100) == []  # the lower floor wins
        log.retention_protect_from = None
        assert log.enforce_retention() == [6, 9]
        assert list(log.segments.keys()) == [bases[-1]]


def test_retention_triggered_by_a_roll_honours_the_floor(tmp_path) -> None:
    clock = Clock()
    with _log(tmp_path / "t-0", clock, retention_bytes=1, segment_bytes=200) as log:
        log.retention_protect_from = 0
        for i in range(40):
            log.append([pylog.Record(b"v" * 30, key=b"k")])
        assert log.log_start_offset == 0 and len(log.segments) > 3
        log.retention_protect_from = 40
        log.roll()  # size retention keeps at least retention_bytes: the last closed segment stays
        assert len(log.segments) == 2 and log.log_start_offset == log.segments.keys()[0] > 0


def test_compact_only_logs_have_no_time_or_size_retention(tmp_path) -> None:
    clock = Clock()
    with _log(tmp_path / "t-0", clock, cleanup_policy="compact", retention_ms=1, retention_bytes=0) as log:
        _fill(log, clock, 3)
        clock.now += 10_000
        assert log.enforce_retention() == []
        assert log.log_start_offset == 0


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=6),
    ages=st.lists(st.integers(min_value=0, max_value=3_000), min_size=6, max_size=6),
    retention_ms=st.sampled_from([-1, 1_000, 2_000]),
    retention_bytes=st.sampled_from([-1, 0, 150, 400]),
    protect=st.one_of(st.none(), st.integers(min_value=0, max_value=25)),
)
def test_retention_matches_kafkas_rule(tmp_path_factory, sizes, ages, retention_ms, retention_bytes, protect) -> None:
    clock = Clock(10_000)
    path = tmp_path_factory.mktemp("ret") / "t-0"
    with _log(path, clock, retention_ms=retention_ms, retention_bytes=retention_bytes) as log:
        log.retention_protect_from = -1  # no retention while building (rolls enforce it)
        for n, age in zip(sizes, ages):
            for _ in range(n):
                log.append([pylog.Record(b"y" * 30, key=b"k", timestamp=clock.now - age)])
            log.roll()
        log.append([b"active"])
        bases = list(log.segments.keys())
        segs = [log.segments[b] for b in bases]
        ts = [s.max_timestamp_so_far for s in segs]
        seg_sizes = [s.size for s in segs]
        # the model: Kafka's rule, oldest first, stopping at the first segment kept
        expect: List[int] = []
        total = sum(seg_sizes)
        for i in range(len(bases) - 1):
            if protect is not None and bases[i + 1] > protect:
                break
            old = retention_ms >= 0 and clock.now - ts[i] > retention_ms
            big = retention_bytes >= 0 and total - seg_sizes[i] >= retention_bytes
            if not (old or big):
                break
            expect.append(bases[i])
            total -= seg_sizes[i]
        log.retention_protect_from = None
        assert log.enforce_retention(protect_from=protect) == expect
        assert bases[-1] in log.segments  # never the active segment
        if protect is not None:
            assert log.segments.keys()[0] <= max(protect, bases[0])  # nothing at or past the floor went
        log._check()


# ---------------------------------------------------------------- maintenance task
def _committed(table: Dict[Tuple[str, str, int], int]):
    return lambda group, topic, partition: table.get((group, topic, partition))


def test_protected_offset_is_the_slowest_groups_commit() -> None:
    table = {("a", "t", 0): 30, ("b", "t", 0): 12}
    assert protected_offset("t", 0, ["a", "b"], _committed(table), 0) == 12
    assert protected_offset("t", 0, ["a", "nobody"], _committed(table), 5) == 5  # no commit: protect all
    assert protected_offset("t", 0, [], _committed(table), 0) is None


def test_run_maintenance_retention_with_protected_groups_and_interval(tmp_path) -> None:
    clock = Clock()
    log = _log(tmp_path / "t-0", clock, retention_ms=1_000)
    other = _log(tmp_path / "u-0", clock, retention_ms=1_000)
    try:
        _fill(log, clock, 4)  # 0, 3, 6, 9 | 12
        _fill(other, clock, 2)  # 0, 3 | 6
        clock.now += 5_000
        table = {("billing", "t", 0): 7}
        configs = {"t": {"retention_protect_groups": ["billing"], "log_cleanup_interval_ms": 60_000}}
        logs = {("t", 0): log, ("u", 0): other}
        s = run_maintenance(logs, configs, _committed(table), clock.now)
        assert s.checked == [("t", 0), ("u", 0)]
        assert s.deleted_segments == {("t", 0): [0, 3], ("u", 0): [0, 3]}
        assert s.protected_from == {("t", 0): 7} and not s.errors
        table[("billing", "t", 0)] = 12
        s = run_maintenance(logs, configs, _committed(table), clock.now + 59_999)
        assert ("t", 0) not in s.checked  # its interval has not passed
        s = run_maintenance(logs, configs, _committed(table), clock.now + 60_000)
        assert s.deleted_segments == {("t", 0): [6, 9]}
        assert log.log_start_offset == 12
    finally:
        log.close()
        other.close()


def test_run_maintenance_compacts_below_the_upper_bound_only(tmp_path) -> None:
    clock = Clock()
    log = _log(tmp_path / "t-0", clock, cleanup_policy="compact", retention_ms=-1)
    try:
        _fill(log, clock, 4)  # key k everywhere: 0, 3, 6, 9 | 12
        s = run_maintenance({("t", 0): log}, {}, _committed({}), clock.now, upper_bound=lambda t, p: 7)
        res = s.cleaned[("t", 0)]
        assert res.end_offset == 6  # the segment holding the high watermark is not cleaned
        offsets = [r.offset for r in log.read(0)]
        assert 5 in offsets and [o for o in offsets if o < 5] == []
        assert list(range(6, 12)) == [o for o in offsets if o >= 6]
    finally:
        log.close()


def test_run_maintenance_reports_errors_and_skips_closed_logs(tmp_path) -> None:
    clock = Clock()
    log = _log(tmp_path / "t-0", clock)
    closed = _log(tmp_path / "u-0", clock)
    closed.close()
    try:
        s = run_maintenance({("t", 0): log, ("u", 0): closed}, {"t": {"retention_protect_groups": [3]}},
                            _committed({}), clock.now)
        assert "retention_protect_groups" in s.errors[("t", 0)]
        assert ("u", 0) not in s.checked
    finally:
        log.close()


def test_run_maintenance_reports_a_protect_groups_value_that_is_not_a_list(tmp_path) -> None:
    # Regression: a number there raised a bare TypeError (not iterable) out of the maintenance pass.
    clock = Clock()
    log = _log(tmp_path / "t-0", clock)
    try:
        s = run_maintenance({("t", 0): log}, {"t": {"retention_protect_groups": 5}}, _committed({}), clock.now)
        assert "retention_protect_groups" in s.errors[("t", 0)]
        assert "got 5" in s.errors[("t", 0)]
    finally:
        log.close()
