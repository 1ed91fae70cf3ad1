"""The log cleaner in detail: what a cleaned batch keeps (offsets, producer fields, headers, codec,
empty batches, control batches), what is never cleaned (active segment, past the upper bound, too
young), when a clean is due, the cleaner checkpoint, reads across compaction gaps, and recovery of
the .cleaned/.swap files a crash leaves (writer and read-only reader)."""
from __future__ import annotations

import os
import shutil
from typing import Dict, List, Optional, Tuple

import pytest

import pylog
from pylog.errors import InvalidConfigurationError, InvalidRecordError, OffsetOutOfRangeError
from pylog.storage import checkpoint
from pylog.storage.cleaner import ATTR_DELETE_HORIZON, Cleaner, build_offset_map, iter_segment_batches
from pylog.storage.fileio import FileIO
from pylog.record import ATTR_COMPRESSION_MASK, Record, RecordBatch, encode_batch, scan

DAY = 86_400_000


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class NoSyncIO(FileIO):
    """Real files, no real fsyncs: durability is not what these tests check (the crash tests
    in tests/property/test_compaction.py are), and fsyncs on a busy machine are slow."""

    def fsync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def _open(path, clock: Optional[Clock] = None, **cfg) -> pylog.Log:
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("retention_ms", -1)
    return pylog.Log.open(str(path), clock_ms=clock or Clock(), file_io=NoSyncIO(), **cfg)


def _rows(log: pylog.Log) -> List[Tuple[int, Optional[bytes], Optional[bytes]]]:
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        recs = list(log.read(off))
        if not recs:
            break
        out += [(r.offset, r.key, r.value) for r in recs]
        off = recs[-1].offset + 1
    return out


def _batches(log: pylog.Log) -> List[RecordBatch]:
    out: List[RecordBatch] = []
    for seg in log.segments.values():
        out += list(iter_segment_batches(seg))
    return out


def _kv(key: bytes, value: Optional[bytes], **kw) -> Record:
    return Record(value=value, key=key, **kw)


def test_build_offset_map_is_latest_offset_per_key_skipping_control_batches() -> None:
    data = encode_batch([_kv(b"a", b"1"), _kv(b"b", b"2"), _kv(b"a", None)], now_ms=0, base_offset=10)
    ctl = encode_batch([_kv(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], now_ms=0, base_offset=13, control=True)
    batches = [RecordBatch(scan(b).batches[0], memoryview(b)) for b in (data, ctl)]
    m = build_offset_map(batches)
    assert m.offsets == {b"a": 12, b"b": 11} and m.latest_offset == 12
    assert build_offset_map(batches, start=12).offsets == {b"a": 12}
    assert build_offset_map(batches, start=0, end=12).offsets == {b"a": 10, b"b": 11}


def test_clean_keeps_latest_value_per_key_at_its_offset(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, segment_bytes=300) as log:
        for i in range(40):
            log.append([_kv(b"k%d" % (i % 4), b"v%d" % i)])
        log.roll()
        res = Cleaner().clean(log, clock.now)
        assert res.cleaned and res.end_offset == 40 and res.records_removed == 36
        assert _rows(log) == [(36, b"k0", b"v36"), (37, b"k1", b"v37"), (38, b"k2", b"v38"), (39, b"k3", b"v39")]
        assert log.log_start_offset == 0 and log.log_end_offset == 40
        log._check()


def test_partially_cleaned_batch_keeps_offsets_producer_fields_headers_and_timestamps(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock) as log:
        hdrs = (("trace", b"x1"), ("n", None))
        log.append([_kv(b"a", b"old", headers=hdrs, timestamp=500), _kv(b"b", b"keep", headers=hdrs, timestamp=700),
                    _kv(b"c", b"old", timestamp=600)],
                   leader_epoch=3, producer_id=42, producer_epoch=5, base_sequence=17)
        log.append([_kv(b"a", b"new"), _kv(b"c", b"new")], producer_id=42, producer_epoch=5, base_sequence=20)
        log.roll()
        before = _batches(log)[0].info
        Cleaner().clean(log, clock.now, force=True)
        first = _batches(log)[0]
        info = first.info
        assert (info.base_offset, info.last_offset, info.partition_leader_epoch) == (0, 2, 3)
        assert (info.producer_id, info.producer_epoch, info.base_sequence) == (42, 5, 17)
        assert info.records_count == 1 and info.max_timestamp == 700
        assert info.attributes == before.attributes
        (rec,) = first.records()
        assert (rec.offset, rec.key, rec.value, tuple(rec.headers), rec.timestamp) == (1, b"b", b"keep", hdrs, 700)
        assert log.get(1).headers == hdrs


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batch_is_reencoded_with_the_same_codec(tmp_path, codec) -> None:
    from pylog.record import compression

    try:
        compression.compress(compression.codec_id(codec), b"probe")
    except Exception as exc:  # the codec's optional package is not installed here
        pytest.skip(f"{codec} unavailable: {exc}")
    clock = Clock()
    with _open(tmp_path / "t-0", clock) as log:
        log.append([_kv(b"a", b"1" * 50), _kv(b"b", b"2" * 50), _kv(b"c", b"3" * 50)], compression=codec)
        log.append([_kv(b"b", b"new")])
        log.roll()
        Cleaner().clean(log, clock.now, force=True)
        first = _batches(log)[0]
        assert first.info.attributes & ATTR_COMPRESSION_MASK == compression.codec_id(codec)
        assert [(r.offset, r.value) for r in first.records()] == [(0, b"1" * 50), (2, b"3" * 50)]
        assert _rows(log) == [(0, b"a", b"1" * 50), (2, b"c", b"3" * 50), (3, b"b", b"new")]


def test_fully_superseded_batch_is_dropped_unless_it_is_its_producers_last(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock) as log:
        log.append([_kv(b"a", b"1")], producer_id=1, producer_epoch=0, base_sequence=0)  # offset 0: p1, superseded
        log.append([_kv(b"b", b"1")], producer_id=2, producer_epoch=0, base_sequence=0)  # offset 1: p2's last batch
        log.append([_kv(b"a", b"2")], producer_id=1, producer_epoch=0, base_sequence=1)  # offset 2: p1's last batch
        log.append([_kv(b"b", b"2")])  # offset 3: no producer id
        log.roll()
        res = Cleaner().clean(log, clock.now, force=True)
        infos = [b.info for b in _batches(log)]
        assert [(i.base_offset, i.records_count, i.producer_id) for i in infos] == [(1, 0, 2), (2, 1, 1), (3, 1, -1)]
        assert res.empty_batches_kept == 1 and res.batches_removed == 1
        empty = infos[0]
        assert (empty.last_offset, empty.producer_epoch, empty.base_sequence) == (1, 0, 0)
        assert _rows(log) == [(2, b"a", b"2"), (3, b"b", b"2")]
        assert [r.offset for r in log.read(1)] == [2, 3]  # the empty batch is skipped by reads
        log._check()
    with _open(tmp_path / "t-0", clock) as log:  # and it survives a reopen's validation
        assert _rows(log) == [(2, b"a", b"2"), (3, b"b", b"2")]


def test_control_batches_are_kept_whole(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock) as log:
        log.append([_kv(b"a", b"1")], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)
        marker = encode_batch([_kv(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], now_ms=clock.now,
                              producer_id=9, producer_epoch=0, transactional=True, control=True)
        log.append_batches(marker)
        log.append([_kv(b"\x00\x00\x00\x01", b"data with the marker's key")])
        log.append([_kv(b"a", b"2")])
        log.roll()
        ctl_before = [bytes(b.buffer) for b in _batches(log) if b.is_control]
        Cleaner().clean(log, clock.now, force=True)
        assert [bytes(b.buffer) for b in _batches(log) if b.is_control] == ctl_before
        assert _rows(log) == [(2, b"\x00\x00\x00\x01", b"data with the marker's key"), (3, b"a", b"2")]


def test_active_segment_and_records_past_the_upper_bound_are_untouched(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, segment_bytes=250) as log:
        for i in range(30):
            log.append([_kv(b"k", b"v%d" % i)])
        active = log.active_segment
        with open(active.log_path, "rb") as f:
            active_bytes = f.read()
        bases = list(log.segments.keys())
        bound = bases[3] + 1  # inside the 4th segment: only the first three are cleanable
        res = Cleaner().clean(log, clock.now, upper_bound=bound, force=True)
        assert res.end_offset == bases[3]
        rows = _rows(log)
        assert [o for o, _, _ in rows if o >= bases[3]] == list(range(bases[3], 30))
        assert [o for o, _, _ in rows if o < bases[3]] == [bases[3] - 1]  # the latest k below the bound
        res = Cleaner().clean(log, clock.now, force=True)
        assert res.end_offset == bases[-1]
        with open(active.log_path, "rb") as f:
            assert f.read() == active_bytes
        assert [o for o, _, _ in _rows(log)] == list(range(bases[-1] - 1, 30))


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path) -> None:
    clock = Clock(10_000)
    with _open(tmp_path / "t-0", clock, segment_bytes=250, min_compaction_lag_ms=5_000) as log:
        for i in range(10):
            log.append([_kv(b"k", b"v%d" % i)])
        log.roll()
        clock.now += 4_000
        res = Cleaner().clean(log, clock.now, force=True)
        assert res.end_offset == 0 and len(_rows(log)) == 10
        clock.now += 1_001
        res = Cleaner().clean(log, clock.now, force=True)
        assert res.end_offset == 10 and _rows(log) == [(9, b"k", b"v9")]


def test_dirty_ratio_and_max_compaction_lag_decide_when_a_clean_is_due(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, segment_bytes=250, min_cleanable_dirty_ratio=0.5,
               max_compaction_lag_ms=60_000) as log:
        for i in range(20):
            log.append([_kv(b"k%d" % i, b"v")])  # all distinct: nothing to remove
        log.roll()
        cleaner = Cleaner()
        assert cleaner.dirty_ratio(log, clock.now) == 1.0
        assert cleaner.clean(log, clock.now).cleaned  # ratio 1.0 > 0.5
        assert cleaner.dirty_ratio(log, clock.now) == 0.0
        log.append([_kv(b"k0", b"w")])
        log.roll()
        ratio = cleaner.dirty_ratio(log, clock.now)
        assert 0 < ratio < 0.5
        res = cleaner.clean(log, clock.now)
        assert not res.cleaned and "not above" in res.reason
        clock.now += 60_001  # the dirty record is now older than max_compaction_lag_ms
        res = cleaner.clean(log, clock.now)
        assert res.cleaned and "max_compaction_lag_ms" in res.reason
        assert (0, b"k0", b"v") not in _rows(log) and (20, b"k0", b"w") in _rows(log)


def test_tombstone_survives_delete_retention_then_goes(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, delete_retention_ms=DAY) as log:
        log.append([_kv(b"a", b"1", timestamp=clock.now - 5), _kv(b"b", b"1")])
        log.append([_kv(b"a", None, timestamp=clock.now - 3)])
        log.roll()
        cleaner = Cleaner()
        t0 = clock.now
        res = cleaner.clean(log, clock.now, force=True)
        assert res.tombstones_removed == 0 and _rows(log) == [(1, b"b", b"1"), (2, b"a", None)]
        tomb = _batches(log)[-1]
        assert tomb.info.attributes & ATTR_DELETE_HORIZON and tomb.info.base_timestamp == t0 + DAY
        assert tomb.records()[0].timestamp == t0 - 3  # the record keeps its own timestamp
        clock.now = t0 + DAY - 1
        assert not cleaner.clean(log, clock.now).cleaned  # nothing dirty, horizon not reached
        assert _rows(log)[-1] == (2, b"a", None)
        clock.now = t0 + DAY
        res = cleaner.clean(log, clock.now)  # due because the horizon passed
        assert res.cleaned and res.tombstones_removed == 1 and "horizon" in res.reason
        assert _rows(log) == [(1, b"b", b"1")]
        assert log.log_end_offset == 3


def test_horizon_is_found_again_after_reopen(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, delete_retention_ms=1_000) as log:
        log.append([_kv(b"a", None)])
        log.roll()
        Cleaner().clean(log, clock.now, force=True)
    clock.now += 1_000
    with _open(tmp_path / "t-0", clock, delete_retention_ms=1_000) as log:
        res = Cleaner().clean(log, clock.now)
        assert res.cleaned and res.tombstones_removed == 1 and _rows(log) == []


def test_reads_across_compaction_gaps_return_the_next_record(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, segment_bytes=250) as log:
        for i in range(12):
            log.append([_kv(b"k%d" % (i % 3), b"v%d" % i)])
        log.roll()
        Cleaner().clean(log, clock.now, force=True)
        assert [o for o, _, _ in _rows(log)] == [9, 10, 11]
        for start in range(0, 10):
            assert [r.offset for r in log.read(start)][0] == 9
            assert log.read_batches(start)[0].base_offset == 9
            assert scan(log.fetch(start)).batches[0].base_offset == 9
        with pytest.raises(OffsetOutOfRangeError):
            log.get(4)
        assert log.get(10).value == b"v10"


def test_cleaner_checkpoint_is_written_in_kafka_format_and_used(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, segment_bytes=250) as log:
        for i in range(10):
            log.append([_kv(b"k", b"v%d" % i)])
        log.roll()
        assert log.cleaner_checkpoint is None
        Cleaner().clean(log, clock.now, force=True)
        assert log.cleaner_checkpoint == 10
        text = (tmp_path / "cleaner-offset-checkpoint").read_text()
        assert text == "0\n1\nt 0 10\n"
        for i in range(3):
            log.append([_kv(b"j", b"w%d" % i)])
        log.roll()
        res = Cleaner().clean(log, clock.now, force=True)
        assert res.first_dirty_offset == 10 and res.end_offset == 13
        log.truncate_to(11)  # removes the batch at 12 (10 and 11 were compacted away): the log end is 10
        assert log.log_end_offset == 10
        assert log.cleaner_checkpoint == 10  # the checkpoint may not stay past the log end
    assert checkpoint.read_offsets(FileIO(), str(tmp_path / "cleaner-offset-checkpoint")) == {("t", 0): 10}


def test_delete_policy_logs_are_not_compacted_and_accept_keyless_records(tmp_path) -> None:
    clock = Clock()
    with pylog.Log.open(str(tmp_path / "t-0"), clock_ms=clock) as log:
        log.append([b"no key", _kv(b"k", b"1"), _kv(b"k", b"2")])
        log.roll()
        res = Cleaner().clean(log, clock.now, force=True)
        assert not res.cleaned and len(_rows(log)) == 3


def test_compacted_log_refuses_records_without_a_key(tmp_path) -> None:
    with _open(tmp_path / "t-0") as log:
        with pytest.raises(InvalidRecordError, match="no key"):
            log.append([_kv(b"k", b"1"), b"keyless"])
        with pytest.raises(InvalidRecordError, match="no key"):
            log.append_batches(encode_batch([Record(b"v")], now_ms=0))
        assert log.log_end_offset == 0
        log.append_batches(encode_batch([Record(b"v")], now_ms=0), assign_offsets=False)  # a follower copies as is
        assert log.log_end_offset == 1


@pytest.mark.parametrize("cfg, word", [
    ({"cleanup_policy": "compacted"}, "cleanup_policy"),
    ({"cleanup_policy": "compact,compact"}, "cleanup_policy"),
    ({"cleanup_policy": 1}, "cleanup_policy"),
    ({"min_cleanable_dirty_ratio": 1.5}, "min_cleanable_dirty_ratio"),
    ({"min_cleanable_dirty_ratio": "0.5"}, "min_cleanable_dirty_ratio"),
    ({"delete_retention_ms": -1}, "delete_retention_ms"),
    ({"min_compaction_lag_ms": 10, "max_compaction_lag_ms": 5}, "min_compaction_lag_ms"),
])
def test_cleaner_configs_are_validated(tmp_path, cfg: Dict[str, object], word: str) -> None:
    with pytest.raises(InvalidConfigurationError, match=word):
        pylog.Log.open(str(tmp_path / "t-0"), **cfg)


def test_compact_delete_policy_both_compacts_and_retains(tmp_path) -> None:
    clock = Clock()
    with _open(tmp_path / "t-0", clock, cleanup_policy="compact,delete", segment_bytes=250, retention_ms=1_000) as log:
        for i in range(6):
            log.append([_kv(b"k%d" % (i % 2), b"v")])
        log.roll()
        assert Cleaner().clean(log, clock.now, force=True).cleaned
        clock.now += 1_001
        assert log.enforce_retention() == [0, 3]
        assert log.log_start_offset == 6 and _rows(log) == []


def _prepare_swap(tmp_path, n: int = 30) -> Tuple[str, List[Tuple[int, Optional[bytes], Optional[bytes]]],
                                                  List[Tuple[int, Optional[bytes], Optional[bytes]]]]:
    """A log dir holding a complete ``.swap`` segment next to the live ones it replaces, as a crash
    just after the cleaner's .cleaned -> .swap rename leaves it."""
    clock = Clock()
    part = tmp_path / "logs" / "t-0"
    with _open(part, clock, segment_bytes=100_000) as log:
        for i in range(n):
            log.append([_kv(b"k%d" % (i % 3), b"v%d" % i)])
            if i in (9, 19):
                log.roll()
        log.roll()
        before = _rows(log)
    ref = tmp_path / "ref"
    shutil.copytree(tmp_path / "logs", ref)
    with _open(ref / "t-0", clock, segment_bytes=100_000) as log:
        res = Cleaner().clean(log, clock.now, force=True)
        assert res.groups == 1 and res.segments_replaced == 3
        after = _rows(log)
    for ext in (".log", ".index", ".timeindex"):
        shutil.copy(ref / "t-0" / f"{0:020d}{ext}", part / f"{0:020d}{ext}.swap")
    (part / f"{10:020d}.log.deleted").write_bytes((part / f"{10:020d}.log").read_bytes())
    (part / f"{0:020d}.log.cleaned").write_bytes(b"half written")
    return str(part), before, after


def test_recovery_completes_an_interrupted_swap(tmp_path) -> None:
    part, before, after = _prepare_swap(tmp_path)
    assert before != after
    snapshot = os.path.join(part, f"{10:020d}.snapshot")  # producer state files are left alone
    with open(snapshot, "wb") as f:
        f.write(b"producer state")
    with _open(part) as log:
        assert _rows(log) == after
        assert list(log.segments.keys()) == [0, 30]
        assert sorted(log.recovery.temp_files_removed) != []
        log._check()
    assert not [n for n in os.listdir(part) if n.endswith((".swap", ".cleaned", ".deleted"))]
    assert os.path.exists(snapshot)


def test_a_read_only_reader_sees_the_swap_in_place_of_the_segments_it_replaces(tmp_path) -> None:
    part, before, after = _prepare_swap(tmp_path)
    reader = pylog.Log.open(part, read_only=True)
    try:
        assert _rows(reader) == after
    finally:
        reader.close()
    assert any(n.endswith(".swap") for n in os.listdir(part))  # the reader changed nothing


def test_recovery_discards_a_clean_that_never_reached_swap(tmp_path) -> None:
    clock = Clock()
    part = tmp_path / "t-0"
    with _open(part, clock, segment_bytes=250) as log:
        for i in range(10):
            log.append([_kv(b"k", b"v%d" % i)])
        log.roll()
        before = _rows(log)
    (part / f"{0:020d}.log.cleaned").write_bytes(b"\x00" * 100)
    (part / f"{0:020d}.index.cleaned").write_bytes(b"")
    with _open(part, clock) as log:
        assert _rows(log) == before
        assert f"{0:020d}.log.cleaned" in log.recovery.temp_files_removed
    assert not [n for n in os.listdir(part) if n.endswith(".cleaned")]


def test_metrics_count_appends_and_cleaning(tmp_path) -> None:
    from pylog.metrics import find

    clock = Clock()
    with _open(tmp_path / "t-0", clock) as log:
        log.append([_kv(b"a", b"1"), _kv(b"a", b"2")])
        log.append([_kv(b"a", None)])
        log.roll()
        Cleaner().clean(log, clock.now, force=True)
        m = log.metrics()
        assert find(m, "pylog_log_appended_records_total", topic="t", partition=0) == 3
        assert find(m, "pylog_log_appended_bytes_total") > 0
        assert find(m, "pylog_log_cleaner_runs_total") == 1
        assert find(m, "pylog_log_cleaner_records_removed_total") == 2
        assert find(m, "pylog_log_segments") == 2
        assert find(m, "pylog_log_end_offset") == 3 and find(m, "pylog_log_start_offset") == 0
        assert find(m, "pylog_log_size_bytes") == log.size_in_bytes
        assert find(m, "pylog_log_cleaner_bytes_written_total") < find(m, "pylog_log_cleaner_bytes_read_total")


def test_kafka_python_reads_a_cleaned_log(tmp_path) -> None:
    """An independent reader (kafka-python) accepts what the cleaner writes: a re-encoded
    compressed batch with a delete horizon, and an empty batch kept for its producer."""
    from kafka.record import MemoryRecords

    clock = Clock(5_000)
    with _open(tmp_path / "t-0", clock) as log:
        log.append([_kv(b"a", b"1", headers=(("h", b"x"),), timestamp=4_000), _kv(b"b", b"2", timestamp=4_100)],
                   producer_id=3, producer_epoch=0, base_sequence=0)
        log.append([_kv(b"a", None, timestamp=4_200), _kv(b"c", b"3", timestamp=4_300)], compression="gzip")
        log.append([_kv(b"b", b"9", timestamp=4_400)], producer_id=4, producer_epoch=0, base_sequence=0)
        log.append([_kv(b"b", b"10", timestamp=4_500)], producer_id=3, producer_epoch=0, base_sequence=2)
        log.append([_kv(b"c", b"4", timestamp=4_600)])
        log.roll()
        Cleaner().clean(log, clock.now, force=True)
        records = MemoryRecords(log.fetch(0))
        seen = []
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            seen.append((batch.base_offset, batch.producer_id,
                         [(r.offset, r.key, r.value, r.timestamp) for r in batch]))
        assert seen == [
            (2, -1, [(2, b"a", None, 4_200)]),  # gzip, delete horizon in the base timestamp
            (4, 4, []),  # producer 4's last batch, emptied
            (5, 3, [(5, b"b", b"10", 4_500)]),
            (6, -1, [(6, b"c", b"4", 4_600)]),
        ]


def test_a_follower_copies_a_compacted_leader_by_fetching_at_its_log_end(tmp_path) -> None:
    """Kafka's follower loop over a compacted leader: fetch at the log end, append the batches
    as they are; gaps carry over and the offsets agree."""
    clock = Clock()
    leader = _open(tmp_path / "a" / "t-0", clock, segment_bytes=250)
    follower = _open(tmp_path / "b" / "t-0", clock, segment_bytes=250)
    try:
        for i in range(30):
            leader.append([_kv(b"k%d" % (i % 4), b"v%d" % i)], producer_id=1, producer_epoch=0, base_sequence=i)
        leader.roll()
        leader.append([_kv(b"k0", None)])
        Cleaner().clean(leader, clock.now, force=True)
        while follower.log_end_offset < leader.log_end_offset:
            data = leader.fetch(follower.log_end_offset, 100)
            assert data, follower.log_end_offset
            follower.append_batches(data, assign_offsets=False)
        assert _rows(follower) == _rows(leader)
        assert [(b.base_offset, b.last_offset, b.info.crc) for b in _batches(follower)] == \
            [(b.base_offset, b.last_offset, b.info.crc) for b in _batches(leader)]
        follower._check()
    finally:
        leader.close()
        follower.close()
