"""A damaged segment in the middle of a log is never a silent hole (issue 14, item 6).

A middle ``.log`` that was cut (its index pointing past its new end, or cut at
a batch boundary), deleted, or emptied, with the later segments intact, is
corruption, not a torn write: opening the log raises ``CorruptRecordError``
naming the file and the missing offsets and changes no segment file, after a
clean shutdown and after a crash alike; ``repair=True`` truncates the log at
the damage (every later segment deleted, offsets dense); ``pylog verify``
reports it and ``pylog verify --repair --yes`` repairs it. An empty ``.log``
left inside the previous segment's offsets by a roll that failed is deleted on
open. See docs/durability.md, "Damaged or missing segments".
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

import pylog
from pylog.errors import CorruptRecordError

OPTS = dict(segment_bytes=300, index_interval_bytes=40, retention_ms=-1)
N = 30


def _value(i: int) -> bytes:
    return b"value-%03d-" % i + bytes([97 + i % 26]) * 20


def _make(root: str, *, clean: bool) -> Tuple[str, List[int]]:
    """A partition with N one-record batches over several segments; returns its path and segment bases."""
    path = os.path.join(root, "t-0")
    log = pylog.Log.open(path, **OPTS)
    for i in range(N):
        log.append([_value(i)])
    bases = list(log.segments.keys())
    assert len(bases) >= 5
    if clean:
        log.close()
    else:
        log.flush()
        log.abandon()  # a crash: no clean-shutdown marker, recovery from the recovery point
    return path, bases


def _seg(path: str, base: int, ext: str = "log") -> str:
    return os.path.join(path, f"{base:020d}.{ext}")


def _fingerprint(path: str) -> Dict[str, str]:
    return {n: hashlib.sha1(open(os.path.join(path, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(path)) if n.endswith(".log")}


def _batch_starts(log_path: str) -> List[int]:
    from pylog.record import scan

    with open(log_path, "rb") as f:
        return [b.position for b in scan(f.read()).batches]


def _cut_mid_batch(path: str, base: int) -> None:
    """Cut the .log inside its second-to-last batch: its index now points past its end."""
    starts = _batch_starts(_seg(path, base))
    os.truncate(_seg(path, base), starts[-2] + 10)


def _cut_at_batch(path: str, base: int) -> None:
    """Cut the .log at a batch boundary, so the file itself scans clean."""
    starts = _batch_starts(_seg(path, base))
    os.truncate(_seg(path, base), starts[-2])


def _delete(path: str, base: int) -> None:
    os.unlink(_seg(path, base))


def _empty(path: str, base: int) -> None:
    os.truncate(_seg(path, base), 0)


DAMAGE = {"cut_mid_batch": _cut_mid_batch, "cut_at_batch": _cut_at_batch, "deleted": _delete, "emptied": _empty}


def _check_prefix(log: pylog.Log, end: int) -> None:
    assert log.log_end_offset == end
    got = [(r.offset, r.value) for r in log.read(0, max_bytes=1 << 20)]
    assert got == [(i, _value(i)) for i in range(end)]
    log._check()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crashed"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_middle_segment_is_refused_then_repaired(tmp_path, damage: str, clean: bool) -> None:
    path, bases = _make(str(tmp_path), clean=clean)
    victim = bases[2]
    DAMAGE[damage](path, victim)
    before = _fingerprint(path)
    with pytest.raises(CorruptRecordError) as info:
        pylog.Log.open(path, **OPTS)
    msg = str(info.value)
    # names the damaged file (or, when it is gone, the segment the hole follows)
    named = _seg(path, victim) if damage != "deleted" else _seg(path, bases[1])
    assert info.value.path == named, msg
    if damage != "cut_mid_batch":
        assert f"..{bases[3] - 1} are missing" in msg, msg  # the missing offsets
    assert "repair=True" in msg
    assert _fingerprint(path) == before  # refusing changed no segment
    # Still refused on a second try (the refusal did not "fix" anything by itself).
    with pytest.raises(CorruptRecordError):
        pylog.Log.open(path, **OPTS)

    with pylog.Log.open(path, repair=True, **OPTS) as log:
        end = {"cut_mid_batch": None, "cut_at_batch": None, "deleted": victim, "emptied": victim}[damage]
        if end is None:  # the complete batches left in the cut segment
            end = log.log_end_offset
            assert victim < end < bases[3]
        _check_prefix(log, end)
        assert sorted(log.segments.keys())[-1] <= victim
        assert log.recovery is not None and log.recovery.truncated
        assert all(b not in log.segments for b in bases[3:])
        log.append([b"after-repair"])  # the repaired log takes appends at its end
        assert log.get(end).value == b"after-repair"
    with pylog.Log.open(path, **OPTS) as log:  # and reopens cleanly
        assert log.log_end_offset == end + 1


def test_read_of_a_missing_offset_never_returns_a_later_one(tmp_path) -> None:
    """The issue's symptom: read(7) returned offset 9. Now the open refuses instead."""
    path, bases = _make(str(tmp_path), clean=True)
    _cut_at_batch(path, bases[1])
    with pytest.raises(CorruptRecordError):
        pylog.Log.open(path, **OPTS)


def test_torn_tail_of_the_last_segment_is_still_truncated(tmp_path) -> None:
    """Only the last segment's tail can be torn by a crash: that is cut, as before, silently but logged."""
    path, bases = _make(str(tmp_path), clean=False)
    last = _seg(path, bases[-1])
    starts = _batch_starts(last)
    os.truncate(last, starts[-1] + 5)
    with pylog.Log.open(path, **OPTS) as log:
        _check_prefix(log, N - 1)
        assert log.recovery is not None and log.recovery.bytes_truncated == 5


def test_empty_segment_left_by_a_failed_roll_is_dropped(tmp_path) -> None:
    """An empty .log whose offsets belong to the segment before it (a roll that failed and could not
    remove its file, then more appends to the old segment) is deleted; it must not hide them."""
    path, bases = _make(str(tmp_path), clean=True)
    inside_last = bases[-1] + 1  # inside the active segment's offsets: it would become "active", ending the log there
    assert inside_last < N
    open(_seg(path, inside_last), "wb").close()
    inside_middle = bases[1] + 1  # inside a middle segment: it would shadow the offsets after its base
    open(_seg(path, inside_middle), "wb").close()
    open(_seg(path, inside_middle, "index"), "wb").close()
    with pylog.Log.open(path, **OPTS) as log:
        _check_prefix(log, N)
        assert log.recovery is not None
        assert sorted(log.recovery.abandoned_segments) == [inside_middle, inside_last]
        assert not log.recovery.truncated
    assert not os.path.exists(_seg(path, inside_last)) and not os.path.exists(_seg(path, inside_middle))


def test_compacted_log_accepts_gaps_between_segments(tmp_path) -> None:
    """Compaction leaves offset gaps (Kafka): a compacted log with a segment ending below the next
    one's base opens, and reads skip the removed offsets."""
    path = os.path.join(str(tmp_path), "t-0")
    cfg = dict(OPTS, cleanup_policy="compact")
    with pylog.Log.open(path, **cfg) as log:
        for i in range(N):
            log.append([pylog.Record(key=b"k%d" % (i % 3), value=_value(i))])
        bases = list(log.segments.keys())
    _cut_at_batch(path, bases[1])  # what a clean of that segment could leave
    with pylog.Log.open(path, **cfg) as log:
        assert log.log_end_offset == N
        assert log.get(N - 1).value == _value(N - 1)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylog", *args], capture_output=True, timeout=120)


@pytest.mark.parametrize("damage", ["deleted", "emptied", "cut_at_batch"])
def test_verify_reports_the_hole_and_repair_fixes_it(tmp_path, damage: str) -> None:
    path, bases = _make(str(tmp_path), clean=True)
    DAMAGE[damage](path, bases[2])
    r = _cli("verify", str(tmp_path))
    out = r.stdout.decode()
    assert r.returncode == 1, out
    assert f"..{bases[3] - 1} are missing" in out and "problems: 0" not in out, out
    r = _cli("verify", "--repair", "--yes", str(tmp_path))
    assert r.returncode == 0, (r.stdout.decode(), r.stderr.decode())
    r = _cli("verify", str(tmp_path))
    assert r.returncode == 0 and "problems: 0" in r.stdout.decode(), r.stdout.decode()
    with pylog.Log.open(path, **OPTS) as log:
        _check_prefix(log, log.log_end_offset)
        assert log.log_end_offset <= bases[3]


def test_reader_ignores_an_empty_segment_left_by_a_failed_roll(tmp_path) -> None:
    """A read-only reader (another process) changes nothing, but an abandoned empty last .log must not
    end its view of the log either."""
    path, bases = _make(str(tmp_path), clean=True)
    open(_seg(path, bases[-1] + 1), "wb").close()
    reader = pylog.Log.open(path, read_only=True)
    try:
        assert reader.log_end_offset == N
        assert [r.value for r in reader.read(bases[-1] + 1)] == [_value(i) for i in range(bases[-1] + 1, N)]
    finally:
        reader.close()
    assert os.path.exists(_seg(path, bases[-1] + 1))  # the reader wrote nothing


def test_empty_segment_left_by_a_failed_roll_then_a_truncation_is_dropped(tmp_path) -> None:
    """A roll fails and cannot remove its new .log (the fault persists); a truncation then moves the
    log end below that file's base. It is not a hole: the roll never completed (its base is above the
    durable recovery point), so the open deletes it. Found by the state machine's disk_fault rule."""
    import errno

    from pylog.errors import KafkaStorageError
    from pylog.storage.fileio import SimulatedDiskIO

    class FailAfterOpening(SimulatedDiskIO):
        """Every counted operation after the open of ``after`` fails with EMFILE (until healed)."""

        after = ""
        tripped = False

        def _op(self, kind: str, path: object) -> None:
            super()._op(kind, path)
            if self.tripped:
                raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))
            if kind == "open" and str(path) == self.after:
                self.tripped = True

    path = os.path.join(str(tmp_path), "t-0")
    disk = FailAfterOpening()
    log = pylog.Log.open(path, file_io=disk, **OPTS)
    log.append([_value(0)])
    # Fail the roll from the first file operation after its new .log is created, so that the
    # removal fails too. (Searched for with disk.arm(at) before; the number of operations a
    # retried roll makes before its create shrinks once the old segment is flushed.)
    disk.after = os.path.abspath(_seg(path, 1))
    with pytest.raises(KafkaStorageError):
        log.roll()
    disk.after, disk.tripped = "", False
    assert os.path.exists(_seg(path, 1)) and len(log.segments) == 1, "the fault left no new .log behind"
    log.truncate_to(0)
    log.close()
    with pylog.Log.open(path, **OPTS) as log:
        assert log.log_end_offset == 0 and list(log.segments.keys()) == [0]
        assert log.recovery is not None and log.recovery.abandoned_segments == [1]
        log.append([_value(0)])
        assert log.get(0).value == _value(0)
