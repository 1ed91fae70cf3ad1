"""Log.get (the cached C point lookup) and Log.read against a model of what was appended.

The model is the list of appended records (value, key, headers) by offset; the
pure-Python decoder (``py_decode_batch``) is the oracle for the bytes on disk.
Every offset of random logs - random batch sizes (beyond 64 records, so a
lookup walks from an anchor that is not the batch's first record), keys,
headers, tombstones, gzip batches (the fallback path), several segments - is
read by ``get`` in random order: before and after a reopen, after a
truncation, and after corruption. What is promised about corruption
(``LogSegment.lookup_record``): a batch damaged before this process first
reads it is refused with CorruptRecordError every time it is asked for, also
when other batches of the segment were read before; a batch that passed the
check stays trusted for the life of the segment object.
"""
from __future__ import annotations

import os
import random
import tempfile
from typing import List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pylog
from pylog.errors import CorruptRecordError
from pylog.record import Record, py_decode_batch, scan

Rec = Tuple[Optional[bytes], Optional[bytes], Tuple[Tuple[str, Optional[bytes]], ...]]

record = st.tuples(
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=8)),
    st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=4))), max_size=2).map(tuple),
)
plain = st.tuples(st.binary(max_size=30), st.none(), st.just(()))
batch = st.tuples(
    st.one_of(st.lists(record, min_size=1, max_size=8), st.integers(65, 200).map(lambda n: [(b"p%d" % i, None, ()) for i in range(n)])),
    st.sampled_from([None, None, None, "gzip"]),
)


def _append(log: pylog.Log, batches: List[Tuple[List[Rec], Optional[str]]], model: List[Rec]) -> None:
    for recs, codec in batches:
        log.append([Record(v, k, list(h)) for v, k, h in recs], compression=codec)
        model.extend(recs)


def _check_get(log: pylog.Log, model: List[Rec], offsets: List[int]) -> None:
    for o in offsets:
        r = log.get(o)
        assert (r.value, r.key, tuple(tuple(h) for h in r.headers), r.offset) == (*model[o], o), o


def _check_read(log: pylog.Log, model: List[Rec], start: int, max_bytes: int) -> None:
    o = start
    while o < len(model):
        got = list(log.read(o, max_bytes))
        assert got, o
        assert [(r.value, r.key, tuple(tuple(h) for h in r.headers), r.offset) for r in got] == [
            (*model[p], p) for p in range(o, o + len(got))]
        o += len(got)


def _batches_on_disk(log: pylog.Log) -> List[Tuple[str, int, int, int, int]]:
    """(path, position, size, base offset, last offset) of every batch, from the files."""
    out = []
    for seg in log.segments.values():
        with open(seg.log_path, "rb") as f:
            data = f.read()
        for info in scan(data).batches:
            out.append((seg.log_path, info.position, info.size, info.base_offset, info.last_offset))
            if not info.attributes & 0x07:  # the pure-Python oracle reads uncompressed batches
                _, recs = py_decode_batch(data[info.position : info.position + info.size])
                assert [r.offset for r in recs] == list(range(info.base_offset, info.last_offset + 1))
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(batch, min_size=1, max_size=8), st.sampled_from([16384, 1 << 20]), st.randoms(use_true_random=False),
       st.integers(1, 1 << 14))
def test_every_offset_before_and_after_reopen_and_truncation(batches, segment_bytes, rnd, max_bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t-0")
        model: List[Rec] = []
        log = pylog.Log.open(path, segment_bytes=segment_bytes)
        try:
            _append(log, batches, model)
            offsets = list(range(len(model)))
            rnd.shuffle(offsets)
            _check_get(log, model, offsets)
            if any(codec or any(not h for _, _, h in recs) for recs, codec in batches):
                # the later reads went through a segment's C PointReader (sendpath.c), not only the method
                assert any(_reader_of(s) is not None for s in log.segments.values())
            _check_get(log, model, offsets[: len(offsets) // 2])  # cached batches
            _check_read(log, model, rnd.randrange(len(model)), max_bytes)
        finally:
            log.close()
        log = pylog.Log.open(path, segment_bytes=segment_bytes)
        try:
            rnd.shuffle(offsets)
            _check_get(log, model, offsets)
            _check_read(log, model, 0, max_bytes)
            # Truncate (at a batch boundary, as Log.truncate_to does), then append other records at the
            # same positions: nothing cached about the old bytes may answer for the new ones.
            log.truncate_to(rnd.randrange(len(model)))
            del model[log.log_end_offset :]
            _append(log, [([(b"new%d" % i, None, ()) for i in range(70)], None)], model)
            offsets = list(range(log.log_start_offset, len(model)))
            rnd.shuffle(offsets)
            _check_get(log, model, offsets)
            _check_read(log, model, 0, max_bytes)
        finally:
            log.close()


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x5A]))


@settings(max_examples=25, deadline=None)
@given(st.lists(batch, min_size=2, max_size=6), st.randoms(use_true_random=False), st.booleans())
def test_a_corrupt_batch_is_refused_even_after_reads_of_its_neighbours(batches, rnd, warm) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t-0")
        model: List[Rec] = []
        log = pylog.Log.open(path)
        _append(log, batches, model)
        log.close()
        on_disk = _batches_on_disk(pylog.Log.open(path, read_only=True))
        victim = rnd.choice(on_disk)
        vpath, vpos, vsize, vbase, vlast = victim
        log = pylog.Log.open(path)
        try:
            if warm:  # read every other batch first: their checks must not vouch for the victim
                _check_get(log, model, [o for o in range(len(model)) if not vbase <= o <= vlast])
            # A byte the batch CRC covers (attributes onwards), in this process's page cache.
            _flip(vpath, vpos + 21 + rnd.randrange(vsize - 21))
            for _ in range(2):  # refused every time, not only the first
                for o in range(vbase, vlast + 1):
                    with pytest.raises(CorruptRecordError):
                        log.get(o)
            # Batches before the victim are untouched. One after it may be reached only by walking
            # over the victim's header from an index entry before it: a damaged length or count there
            # refuses it too (never a wrong record).
            _check_get(log, model, list(range(vbase)))
            for o in range(vlast + 1, len(model)):
                try:
                    r = log.get(o)
                except CorruptRecordError:
                    continue
                assert (r.value, r.key, tuple(tuple(h) for h in r.headers), r.offset) == (*model[o], o)
        finally:
            log.close()


def test_crc_is_checked_once_per_batch_and_again_after_truncation(tmp_path) -> None:
    log = pylog.Log.open(tmp_path / "t-0")
    try:
        for i in range(4):
            log.append([b"%d-%d" % (i, j) for j in range(500)])
        log.close()
        log = pylog.Log.open(tmp_path / "t-0")
        seg = log.segments.values()[0]
        rnd = random.Random(5)
        offsets = [rnd.randrange(2000) for _ in range(400)]
        for o in offsets:
            assert log.get(o).value == b"%d-%d" % divmod(o, 500)
        stats = seg.lookup_stats()
        # Each of the 4 batches was checked once, however many lookups it served, and the
        # verified ranges merged into one (the batches touch).
        assert stats["crc_checks"] == 4 and stats["tables_built"] == 4, stats
        assert stats["hits"] == 400 - 4 and stats["verified_ranges"] == 1, stats
        log.truncate_to(1000)
        log.append([b"again-%d" % j for j in range(500)])
        assert log.get(1200).value == b"again-200"
        assert seg.lookup_stats()["crc_checks"] == 1  # a new cache: the old bytes' checks are gone
    finally:
        log.close()


def test_lookups_walk_at_most_a_stride_of_records(tmp_path) -> None:
    """A 6,400-record batch has anchors every 100 records: every offset is still found (the
    first record after an anchor, the anchor itself, the last record of the batch)."""
    log = pylog.Log.open(tmp_path / "t-0")
    try:
        log.append([b"v%d" % i for i in range(6400)])
        log.append([b"w%d" % i for i in range(3)])
        for o in (0, 1, 99, 100, 101, 6399, 6400, 6402, 3333):
            want = b"v%d" % o if o < 6400 else b"w%d" % (o - 6400)
            assert log.get(o).value == want
    finally:
        log.close()


def _mixed_log(path) -> Tuple[pylog.Log, List[Rec]]:
    log = pylog.Log.open(path)
    model: List[Rec] = []
    _append(log, [([(b"v%d" % i, None if i % 3 else b"k%d" % i, ()) for i in range(150)], None),
                  ([(b"h", b"k", (("a", b"1"), ("b", None))), (None, b"tomb", ())], None),
                  ([(b"z%d" % i, None, ()) for i in range(80)], "gzip")], model)
    return log, model


def test_without_the_extension_the_python_paths_give_the_same_records(tmp_path, monkeypatch) -> None:
    """sendpath.c's point_lookup / make_records and their cffi + map/zip fallbacks agree (the fallbacks
    run where the extension is not built)."""
    from pylog._native import index as native_index
    from pylog.storage import reader

    log, model = _mixed_log(tmp_path / "t-0")
    try:
        fast_get = [log.get(o) for o in range(len(model))]
        fast_read = list(log.read(0, 1 << 20))
        monkeypatch.setattr(native_index, "_point_lookup", None)
        monkeypatch.setattr(reader, "_make_records", None)
        log.close()
        log = pylog.Log.open(tmp_path / "t-0")
        assert [log.get(o) for o in range(len(model))] == fast_get
        assert list(log.read(0, 1 << 20)) == fast_read
        _check_get(log, model, list(range(len(model))))
        _check_read(log, model, 0, 1 << 20)
    finally:
        log.close()


def test_records_of_bytes_and_ints_are_not_tracked_by_the_cycle_collector(tmp_path) -> None:
    import gc

    from pylog.storage import reader

    if reader._make_records is None:
        pytest.skip("sendpath.c is not built: records are built by map/zip and stay tracked")
    log, model = _mixed_log(tmp_path / "t-0")
    try:
        recs = list(log.read(0, 1 << 20))
        assert len(recs) == len(model)
        plain = [r for r in recs if not r.headers]
        assert plain and not any(gc.is_tracked(r) for r in plain)
        assert all(gc.is_tracked(r) for r in recs if r.headers)  # a header list/tuple could hold anything
        del recs, plain
        gc.collect()  # untracked records are still freed by reference counting
    finally:
        log.close()


def _reader_of(seg):
    """The PointReader a segment installed as its lookup_record (sendpath.c), or None."""
    r = seg.__dict__.get("lookup_record")
    return r if type(r).__name__ == "PointReader" else None


def test_get_goes_through_the_segment_reader_and_a_kept_reader_follows_the_map(tmp_path) -> None:
    """The C PointReader a segment installs after its first point read answers later reads; it is
    closed and replaced when the map goes (truncation, a remap when the file outgrows the map), so a
    reference kept to an old one answers through the method, from the current bytes, never the old map."""
    from pylog._native import index as native_index

    assert native_index.PointReader is not None, "the send-path extension is built in this environment"
    log = pylog.Log.open(tmp_path / "t-0")
    try:
        log.append([b"a%d" % i for i in range(300)])
        log.append([b"b%d" % i for i in range(300)])
        seg = log.segments.values()[0]
        assert _reader_of(seg) is None
        assert log.get(5).value == b"a5"
        kept = _reader_of(seg)
        assert kept is not None
        before = seg.lookup_stats()["hits"]
        assert log.get(450).value == b"b150" and kept(299).value == b"a299"
        assert seg.lookup_stats()["hits"] == before + 1  # the reader's calls go through the same cache
        assert kept(600) is None and kept(-1) is None
        log.truncate_to(300)  # the map is dropped: the reader is closed
        assert _reader_of(seg) is None
        log.append([b"c%d" % i for i in range(300)])
        assert kept(450).value == b"c150"  # the method, over the new bytes
        assert log.get(450).value == b"c150" and _reader_of(seg) not in (None, kept)
        # Grow the file past the map's headroom: the next read remaps and installs a new reader.
        second = _reader_of(seg)
        big = b"x" * 1000
        while seg.size < 2 * (1 << 20) + 4096:
            log.append([big] * 100)
        end = log.log_end_offset
        assert second(end - 1) == log.read(end - 1, 1 << 20).__next__()
        assert log.get(end - 1).value == big and _reader_of(seg) not in (None, second)
        with pytest.raises(TypeError):
            second()  # type: ignore[call-arg]
    finally:
        log.close()
