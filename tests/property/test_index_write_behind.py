"""Index entries are written behind the memory (pylog/storage/index.py): a model check.

The model is the old behaviour, one positional write per entry: the file
always equals the entries appended (and not truncated away). The write-behind
index must give the same file after every flush and every close, and at any
other moment a whole-entry prefix of it that lags by at most
``PENDING_ENTRIES`` entries; after a simulated power loss, a prefix of it at
least as long as what the last flush made durable. In memory (what lookups
use) it always equals the model.
"""
from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog.storage import index as index_mod
from pylog.storage.fileio import FileIO, SimulatedDiskIO
from pylog.storage.index import OffsetIndex, TimeIndex

BASE = 1000

# (op, argument): append n entries / flush / close and load again / truncate to keep a fraction /
# reset / power loss (SimulatedDiskIO.crash) and load again
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 40)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("truncate"), st.floats(0.0, 1.0)),
        st.tuples(st.just("reset"), st.just(0)),
        st.tuples(st.just("crash"), st.just(0)),
    ),
    max_size=40,
)


def _entry(kind: type, n: int) -> bytes:
    """The n-th entry of a valid index (offsets and positions increase)."""
    if kind is OffsetIndex:
        return struct.pack(">ii", n + 1, 100 * (n + 1))
    return struct.pack(">qi", 5000 + n, n + 1)


def _file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _new_index(tmp_path) -> tuple:
    """A loaded, empty offset index on a simulated disk: (disk, file path, index)."""
    io = SimulatedDiskIO()
    path = str(tmp_path / "00000000000000001000.index")
    idx = OffsetIndex(io, path, BASE)
    idx.load(10**9)
    return io, path, idx


def _run(tmp: str, kind: type, pending: int, script: list) -> None:
    old = index_mod.PENDING_ENTRIES
    index_mod.PENDING_ENTRIES = pending
    try:
        io = SimulatedDiskIO()
        path = os.path.join(tmp, "00000000000000001000" + (".index" if kind is OffsetIndex else ".timeindex"))
        if os.path.exists(path):
            os.unlink(path)
        io.close(io.open(path))
        io.fsync_dir(tmp)
        size = kind.entry_size
        idx = kind(io, path, BASE)
        idx.load(10**9)
        model = b""  # what one pwrite per entry leaves in the file
        durable = 0  # bytes of the model a power loss cannot take (flushed, and not cut since)
        n = 0
        for op, arg in script:
            if op == "append":
                for _ in range(arg):
                    e = _entry(kind, n)
                    n += 1
                    idx.append_raw(e)
                    model += e
            elif op == "flush":
                idx.flush()
                durable = len(model)
                assert _file(path) == model
            elif op == "reopen":
                idx.close()
                assert _file(path) == model
                idx = kind(io, path, BASE)
                idx.load(10**9)
            elif op == "truncate":
                keep = int(len(model) // size * arg)
                idx._truncate_entries(keep)
                model = model[: keep * size]
                durable = min(durable, len(model))
            elif op == "reset":
                idx.reset()
                model, durable = b"", 0
            elif op == "crash":
                idx._fd = None  # the process died with the file open (crash() closes the fds)
                io.crash()
                on_disk = _file(path)
                assert len(on_disk) % size == 0
                assert durable <= len(on_disk) and model.startswith(on_disk), (len(on_disk), durable, len(model))
                idx = kind(io, path, BASE)
                idx.load(10**9)
                model = on_disk
                n = len(model) // size
            assert bytes(idx.data) == model
            on_disk = _file(path)
            assert len(on_disk) % size == 0
            assert model.startswith(on_disk)
            assert len(model) - len(on_disk) <= pending * size
            assert idx.pending_bytes == len(model) - len(on_disk)
        idx.close()
        assert _file(path) == model
    finally:
        index_mod.PENDING_ENTRIES = old


@settings(max_examples=60)
@given(script=ops, pending=st.sampled_from([1, 3, 64]), time_index=st.booleans())
def test_write_behind_index_file_matches_per_entry_writes(tmp_path_factory, script, pending, time_index) -> None:
    tmp = str(tmp_path_factory.mktemp("idx"))
    _run(tmp, TimeIndex if time_index else OffsetIndex, pending, script)


def test_pending_entries_go_out_in_one_write_each_time_the_limit_is_reached(tmp_path) -> None:
    """Kafka writes its index through an mmap; pylog writes it in runs of PENDING_ENTRIES entries."""
    io, path, idx = _new_index(tmp_path)
    limit = index_mod.PENDING_ENTRIES
    for n in range(3 * limit + 5):
        idx.append_raw(_entry(OffsetIndex, n))
    assert io.writes == 3
    assert os.path.getsize(path) == 3 * limit * 8
    assert idx.pending_bytes == 5 * 8
    idx.flush()
    assert io.writes == 4 and os.path.getsize(path) == (3 * limit + 5) * 8
    idx.close()


def test_a_failed_write_of_pending_entries_appends_nothing_and_keeps_them_pending(tmp_path) -> None:
    io, path, idx = _new_index(tmp_path)
    limit = index_mod.PENDING_ENTRIES
    for n in range(limit - 1):
        idx.append_raw(_entry(OffsetIndex, n))
    io.fail_write_after = io.writes
    with pytest.raises(OSError):  # the write of the pending entries fails
        idx.append_raw(_entry(OffsetIndex, limit - 1))
    assert len(idx) == limit - 1 and idx.pending_bytes == (limit - 1) * 8
    io.fail_write_after = None
    idx.append_raw(_entry(OffsetIndex, limit - 1))
    assert idx.pending_bytes == 0
    assert _file(path) == b"".join(_entry(OffsetIndex, n) for n in range(limit))
    idx.close()


def test_close_writes_pending_entries_and_survives_a_failing_write(tmp_path) -> None:
    """close() writes what is pending; a write that fails there is not raised (recovery rebuilds)."""
    io, path, idx = _new_index(tmp_path)
    for n in range(5):
        idx.append_raw(_entry(OffsetIndex, n))
    idx.close()
    assert _file(path) == b"".join(_entry(OffsetIndex, n) for n in range(5))
    idx = OffsetIndex(io, path, BASE)
    idx.load(10**9)
    idx.append_raw(_entry(OffsetIndex, 5))
    io.fail_write_after = io.writes
    idx.close()
    assert idx._fd is None
    assert _file(path) == b"".join(_entry(OffsetIndex, n) for n in range(5))


def test_delete_does_not_write_pending_entries(tmp_path) -> None:
    io, path, idx = _new_index(tmp_path)
    for n in range(5):
        idx.append_raw(_entry(OffsetIndex, n))
    before = io.writes
    idx.delete()
    assert io.writes == before and not os.path.exists(path)


def test_real_file_io_gives_the_same_file(tmp_path) -> None:
    """The same model check on the real file layer (no crash step)."""
    old = index_mod.PENDING_ENTRIES
    index_mod.PENDING_ENTRIES = 4
    try:
        io = FileIO()
        path = str(tmp_path / "00000000000000001000.timeindex")
        idx = TimeIndex(io, path, BASE)
        idx.load(10**9)
        for n in range(10):
            idx.append_raw(_entry(TimeIndex, n))
        assert os.path.getsize(path) == 8 * 12
        idx.truncate_to(BASE + 3)  # entries with relative offset 1, 2 stay (offsets 1001, 1002)
        assert os.path.getsize(path) == 2 * 12 and len(idx) == 2
        idx.flush()
        assert _file(path) == b"".join(_entry(TimeIndex, n) for n in range(2))
        idx.close()
    finally:
        index_mod.PENDING_ENTRIES = old


@pytest.mark.parametrize("kind", [OffsetIndex, TimeIndex])
def test_flush_after_reopen_syncs_what_a_close_wrote(tmp_path, kind) -> None:
    """The case hypothesis once found (append, reopen, flush, power loss): close() writes the
    pending entries without an fsync, so the reopened index's first flush must fsync the file
    although nothing is pending in it - else a flush "succeeds" and the entries are lost."""
    io = SimulatedDiskIO()
    path = str(tmp_path / ("00000000000000001000" + (".index" if kind is OffsetIndex else ".timeindex")))
    io.close(io.open(path))
    io.fsync_dir(str(tmp_path))  # the file's name is durable, as a segment roll makes it
    idx = kind(io, path, BASE)
    idx.load(10**9)
    idx.append_raw(_entry(kind, 0))
    idx.close()  # written, not synced
    again = kind(io, path, BASE)
    again.load(10**9)
    again.flush()  # the caller's durability point: every entry survives power loss from here
    again.close()
    io.crash()
    assert _file(path) == _entry(kind, 0)
