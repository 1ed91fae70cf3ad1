"""Fuzzing whole partitions: mutated segments, indexes, time indexes, checkpoints and
producer snapshots, opened with ``Log.open`` (recovery) and read every way.

Each example writes a fresh log directory (on tmpfs when there is one) holding a
partition built by the writer, damages one file, and then:

* ``Log.open`` succeeds or raises a pylog.errors exception - never anything else;
* for a damaged ``.log`` (recovered on open: no clean-shutdown marker), every
  batch that lies wholly before the first damaged byte survives with exactly its
  records: recovery never loses a valid prefix;
* ``read``/``read_batches``/``fetch``/``get``/``offset_for_time`` at every offset
  only return records or raise pylog errors; the log accepts an append afterwards
  and reads it back, and reopens;
* ``pylog verify`` and ``pylog dump-log --deep-iteration --print-data`` on the
  damaged directory return an exit status instead of raising.
"""
from __future__ import annotations

import io
import os
import shutil
import struct
from contextlib import redirect_stderr, redirect_stdout
from typing import Dict, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz_corpus as fc
import pylog
from pylog import cli, errors
from pylog.storage import checkpoint
from pylog.storage.fileio import FileIO

CORPUS = fc.build_log()
SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
FUZZ = settings(suppress_health_check=SUPPRESS)


def _clean_dir() -> Dict[str, bytes]:
    """Every file of a cleanly closed log dir holding CORPUS's records (relative path -> bytes)."""
    d = fc.scratch_dir()
    try:
        with pylog.Log.open(os.path.join(d, "fz-0"), index_interval_bytes=64, clock_ms=lambda: fc.CLOCK,
                            retention_ms=-1) as log:
            for start in range(0, len(CORPUS.records), 3):
                log.append([CORPUS.records[o] for o in range(start, start + 3)],
                           compression=[None, "gzip", "zstd", "lz4", "snappy"][start // 3 % 5])
            log.assign_epoch(3, 9)
            log.assign_epoch(5, 18)
        out = {}
        for root, _dirs, files in os.walk(d):
            for name in files:
                full = os.path.join(root, name)
                out[os.path.relpath(full, d)] = open(full, "rb").read()
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


CLEAN = _clean_dir()
assert "fz-0/00000000000000000000.index" in CLEAN and "fz-0/00000000000000000000.timeindex" in CLEAN, sorted(CLEAN)


def _materialise(files: Dict[str, bytes]) -> str:
    d = fc.scratch_dir()
    for rel, data in files.items():
        full = os.path.join(d, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    return d


def _exercise(log: pylog.Log) -> Dict[int, pylog.Record]:
    """Every reader at every offset; returns the records read (offset -> record)."""
    seen: Dict[int, pylog.Record] = {}
    start, end = log.log_start_offset, log.log_end_offset
    assert 0 <= start <= end
    # A flipped baseOffset (outside the CRC) can leave a legal gap of millions
    # of offsets: read the first ones, the last ones, and each side of a gap.
    offsets = set(range(start, min(end, start + 40) + 1)) | set(range(max(start, end - 4), end + 1))
    batches = fc.drain(lambda: log.read_batches(start, 1 << 20)) if start < end else []
    for b in batches if isinstance(batches, list) else []:
        offsets |= {b.base_offset - 1, b.base_offset, b.last_offset, b.last_offset + 1}
    for off in sorted(o for o in offsets if start <= o <= end):
        try:  # read() yields a batch's records before decoding the next (which may be bad)
            for r in log.read(off, 300):
                assert isinstance(r, pylog.Record)
                seen.setdefault(r.offset, r)
        except errors.PylogError:
            pass
        fc.drain(lambda: log.read_batches(off, 1))
        fc.drain(lambda: log.fetch(off, 200, max_offset=end))
        if off < end:
            fc.drain(lambda: log.get(off))
    for ts in (-1, 0, fc.CLOCK - 1_000, fc.CLOCK - 990, fc.CLOCK, 2**62):
        fc.drain(lambda: log.offset_for_time(ts))
    return seen


def _usable_afterwards(log: pylog.Log, path: str) -> None:
    res = log.append([b"after-the-damage"])
    assert [r.value for r in log.read(res.base_offset)] == [b"after-the-damage"]
    end = log.log_end_offset
    log.close()
    with pylog.Log.open(path) as again:
        assert again.log_end_offset == end
        assert again.get(end - 1).value == b"after-the-damage"


def _same(r: pylog.Record, want: pylog.Record) -> bool:
    return (r.value, r.key, r.timestamp, [tuple(h) for h in r.headers]) == (
        want.value, want.key, want.timestamp, [tuple(h) for h in want.headers])


def _cli(*argv: str) -> int:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = cli.main(list(argv))
    assert isinstance(rc, int)
    return rc


@FUZZ
@given(fc.mutations(st))
@pytest.mark.timeout(600)
def test_recovery_keeps_the_valid_prefix(mut) -> None:
    ops, do_reseal = mut
    damaged = fc.apply(CORPUS.log, ops, CORPUS.batches, do_reseal)
    first_bad = fc.first_difference(CORPUS.log, damaged)
    intact = [b for b in CORPUS.batches if b[0] + b[1] <= first_bad]
    d = _materialise({"fz-0/" + fc.SEG: damaged})
    try:
        path = os.path.join(d, "fz-0")
        log = pylog.Log.open(path)  # recovery must succeed: it truncates, it does not refuse
        assert log.recovery is not None and not log.recovery.clean_shutdown
        if intact:
            assert log.log_end_offset >= intact[-1][3] + 1
        seen = _exercise(log)
        for _pos, _size, base, last in intact:
            for off in range(base, last + 1):
                assert off in seen and _same(seen[off], CORPUS.records[off]), off
        _usable_afterwards(log, path)
        rc = _cli("verify", d)
        assert rc in (0, 1)
    finally:
        shutil.rmtree(d, ignore_errors=True)


INDEX_FILES = ["fz-0/00000000000000000000.index", "fz-0/00000000000000000000.timeindex"]


@FUZZ
@given(st.sampled_from(INDEX_FILES), fc.mutations(st), st.booleans())
@pytest.mark.timeout(600)
def test_damaged_indexes(name: str, mut, clean: bool) -> None:
    """Indexes carry no checksum: one that fails validation is rebuilt; one that passes
    but lies must still never make a read return a wrong record or crash."""
    ops, _ = mut
    files = dict(CLEAN)
    files[name] = fc.apply(files[name], ops, [], False)
    if not clean:
        files.pop(".kafka_cleanshutdown", None)
    d = _materialise(files)
    try:
        path = os.path.join(d, "fz-0")
        log = pylog.Log.open(path)
        assert log.log_end_offset == len(CORPUS.records)
        seen = _exercise(log)
        for off, r in seen.items():
            assert _same(r, CORPUS.records[off]), off
        _usable_afterwards(log, path)
        assert _cli("dump-log", "--deep-iteration", "--print-data", os.path.join(d, name),
                    os.path.join(path, fc.SEG)) in (0, 1)
    finally:
        shutil.rmtree(d, ignore_errors=True)


CHECKPOINTS = ["recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "fz-0/leader-epoch-checkpoint",
               "cleaner-offset-checkpoint", "replication-offset-checkpoint"]
TEXT = st.one_of(
    st.binary(max_size=120),
    st.text(alphabet="0123456789 -\nfz\t.+e_x", max_size=120).map(str.encode),
    st.tuples(st.integers(-3, 3), st.integers(-3, 5),
              st.lists(st.tuples(st.sampled_from(["fz", "", "x y", "fz-0"]), st.integers(-2, 2),
                                 st.integers(-(2**64), 2**64)), max_size=4)).map(
        lambda t: ("%d\n%d\n" % (t[0], t[1]) + "".join("%s %d %d\n" % e for e in t[2])).encode()),
)


@FUZZ
@given(st.sampled_from(CHECKPOINTS), TEXT, st.booleans())
@pytest.mark.timeout(600)
def test_damaged_checkpoints(name: str, text: bytes, clean: bool) -> None:
    """Checkpoint readers raise only CorruptCheckpointError; the log opens and, from
    whatever log start it settles on, every record reads back exactly."""
    d = fc.scratch_dir()
    try:
        p = os.path.join(d, "cp")
        with open(p, "wb") as f:
            f.write(text)
        for reader in (checkpoint.read_offsets, checkpoint.read_epochs):
            got = fc.drain(lambda: reader(FileIO(), p))
            assert not isinstance(got, errors.PylogError) or isinstance(got, errors.CorruptCheckpointError)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    files = dict(CLEAN)
    files[name] = text
    if not clean:
        files.pop(".kafka_cleanshutdown", None)
    d = _materialise(files)
    try:
        path = os.path.join(d, "fz-0")
        log = pylog.Log.open(path)
        assert log.log_end_offset == len(CORPUS.records)
        seen = _exercise(log)
        for off in range(log.log_start_offset, log.log_end_offset):
            assert off in seen and _same(seen[off], CORPUS.records[off]), off
        _usable_afterwards(log, path)
        assert _cli("describe", d) in (0, 1)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _snapshot_target() -> Optional[object]:
    try:
        from pylog.storage import producer_state
    except ImportError:  # pragma: no cover - the module is new
        return None
    return producer_state


@FUZZ
@given(fc.mutations(st), st.binary(max_size=200), st.booleans())
@pytest.mark.timeout(600)
def test_damaged_producer_snapshots(mut, junk: bytes, use_junk: bool) -> None:
    """``.snapshot`` files: decode_snapshot raises only CorruptRecordError naming the file."""
    ps = _snapshot_target()
    assert ps is not None, "pylog.storage.producer_state is gone: update this test"
    entries = []
    for pid in range(3):
        e = ps.ProducerEntry(1000 + pid, pid)
        e.batches.append(ps.BatchMetadata(0, 4 + pid, 10 * pid, 10 * pid + 4, fc.CLOCK))
        entries.append(e)
    good = ps.encode_snapshot(entries)
    back = ps.decode_snapshot(good, "00000000000000000030.snapshot")
    assert [(e.producer_id, e.epoch) for e in back] == [(1000, 0), (1001, 1), (1002, 2)]
    ops, _ = mut
    data = junk if use_junk else fc.apply(good, ops, [], False)
    if not use_junk and data != good:
        # a fresh CRC half the time, so the entry checks run too
        if ops and ops[0][0] == "flip" and len(data) >= 10:
            import pylog._native as native
            data = data[:2] + struct.pack(">I", native.crc32c(data[6:])) + data[6:]
    got = fc.drain(lambda: ps.decode_snapshot(data, "00000000000000000030.snapshot"))
    if isinstance(got, Exception):
        assert isinstance(got, errors.CorruptRecordError) and "00000000000000000030.snapshot" in str(got)
