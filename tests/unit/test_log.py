"""Log: append/read, rolls, retention by size and time, delete_records_before,
offset_for_time, append_batches, and what a clean or crashed reopen scans."""
from __future__ import annotations

import os
from typing import List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pylog
from pylog.errors import InvalidOffsetError, OffsetOutOfRangeError
from pylog.record import encode_batch, scan


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _open(path, clock: Clock = None, **cfg) -> pylog.Log:  # type: ignore[assignment]
    return pylog.Log.open(str(path), clock_ms=clock or Clock(), **cfg)


def _values(log: pylog.Log, start: int = None) -> List[Tuple[int, bytes]]:  # type: ignore[assignment]
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        recs = list(log.read(offset))
        out += [(r.offset, r.value) for r in recs]
        offset = recs[-1].offset + 1
    return out


def test_append_read_round_trip(tmp_path) -> None:
    clock = Clock(5_000)
    with _open(tmp_path / "t-0", clock) as log:
        r1 = log.append([b"a", b"b"])
        assert (r1.base_offset, r1.last_offset, r1.records_count, r1.position) == (0, 1, 2, 0)
        assert r1.max_timestamp == 5_000
        rec = pylog.Record(value=None, key=b"k", headers=[("h", b"1"), ("n", None)], timestamp=42)
        r2 = log.append([rec])
        assert (r2.base_offset, r2.last_offset, r2.max_timestamp) == (2, 2, 42)
        assert r2.position > 0
        got = list(log.read(0))
        assert [(r.offset, r.value, r.key, tuple(r.headers), r.timestamp) for r in got] == [
            (0, b"a", None, (), 5_000), (1, b"b", None, (), 5_000), (2, None, b"k", (("h", b"1"), ("n", None)), 42)
        ]
        assert list(log.read(1))[0].offset == 1  # from the middle of a batch
        assert list(log.read(3)) == []  # at the log end: nothing, no error
        assert (log.log_start_offset, log.log_end_offset) == (0, 3)


def test_read_returns_at_least_one_batch_and_honours_limits(tmp_path) -> None:
    with _open(tmp_path / "t-0") as log:
        for i in range(10):
            log.append([b"%d-%d" % (i, j) + b"x" * 50 for j in range(5)])
        one = list(log.read(0, max_bytes=1))
        assert [r.offset for r in one] == [0, 1, 2, 3, 4]  # one whole batch even when max_bytes is tiny
        assert [r.offset for r in log.read(7, max_bytes=0)] == [7, 8, 9]
        bounded = list(log.read(3, max_offset=12))
        assert [r.offset for r in bounded] == list(range(3, 12))
        assert list(log.read(12, max_offset=12)) == []
        batches = log.read_batches(0, max_bytes=1 << 20)
        assert [(b.base_offset, b.last_offset) for b in batches] == [(5 * i, 5 * i + 4) for i in range(10)]
        raw = log.fetch(10, max_bytes=1 << 20, max_offset=30)
        found = scan(raw)
        assert found.valid_bytes == len(raw)
        assert [(b.base_offset, b.last_offset) for b in found.batches] == [(10, 14), (15, 19), (20, 24), (25, 29)]


def test_rolls_on_segment_bytes(tmp_path) -> None:
    with _open(tmp_path / "t-0", segment_bytes=1024) as log:
        for i in range(40):
            log.append([b"%03d" % i + b"y" * 90])
        sizes = [s.size for s in log.segments.values()]
        assert len(sizes) > 3
        assert all(0 < s <= 1024 for s in sizes)
        bases = list(log.segments.keys())
        names = sorted(n for n in os.listdir(log.dir) if n.endswith(".log"))
        assert names == ["%020d.log" % b for b in bases]
        assert [v for _, v in _values(log)] == [b"%03d" % i + b"y" * 90 for i in range(40)]
        log._check()


def test_rolls_on_segment_ms(tmp_path) -> None:
    clock = Clock(10_000)
    with _open(tmp_path / "t-0", clock, segment_ms=1_000) as log:
        log.append([b"a"])
        clock.now += 1_000
        log.append([b"b"])  # exactly segment_ms: no roll (Kafka: strictly greater)
        assert len(log.segments) == 1
        clock.now += 1
        log.append([b"c"])
        assert list(log.segments.keys()) == [0, 2]
        # The roll made the old segment durable and moved the recovery point.
        assert log.recovery_point == 2


def test_roll_of_an_empty_active_segment_is_a_no_op(tmp_path) -> None:
    with _open(tmp_path / "t-0") as log:
        log.roll()
        log.roll()
        assert list(log.segments.keys()) == [0]
        log.append([b"a"])
        log.roll()
        log.roll()
        assert list(log.segments.keys()) == [0, 1]


def _kafka_size_retention(sizes: List[int], retention_bytes: int) -> int:
    """How many leading segments Kafka's retention.bytes deletes (never the active one)."""
    diff = sum(sizes) - retention_bytes
    n = 0
    for size in sizes[:-1]:
        if diff - size < 0:
            break
        diff -= size
        n += 1
    return n


@pytest.mark.parametrize("retention_bytes", [0, 500, 1500, 3000, 5000, 100_000])
def test_retention_by_size(tmp_path, retention_bytes: int) -> None:
    with _open(tmp_path / "t-0", segment_bytes=1024) as log:
        for i in range(50):
            log.append([b"%03d" % i + b"z" * 90])
        sizes = [s.size for s in log.segments.values()]
        bases = list(log.segments.keys())
        log.config = log.config._replace(retention_bytes=retention_bytes)
        deleted = log.enforce_retention()
        n = _kafka_size_retention(sizes, retention_bytes)
        assert deleted == bases[:n]
        assert list(log.segments.keys()) == bases[n:]
        assert log.log_start_offset == bases[n]
        assert not any(os.path.exists(os.path.join(log.dir, "%020d.log" % b)) for b in deleted)
        assert [o for o, _ in _values(log)] == list(range(bases[n], 50))
        with pytest.raises(OffsetOutOfRangeError):
            list(log.read(bases[n] - 1)) if n else list(log.read(-1))
        log._check()
    with _open(tmp_path / "t-0") as log:  # the new log start was checkpointed
        assert log.log_start_offset == bases[n]


def test_retention_by_size_runs_on_roll(tmp_path) -> None:
    with _open(tmp_path / "t-0", segment_bytes=1024, retention_bytes=2048) as log:
        for i in range(100):
            log.append([b"%03d" % i + b"z" * 90])
            # Enforced at each roll: what is left after it is under retention_bytes
            # plus one segment, and the new active segment fills up to segment_bytes.
            assert log.size_in_bytes <= 2048 + 2 * 1024
        assert log.log_start_offset > 0


def test_retention_by_time(tmp_path) -> None:
    clock = Clock(100_000)
    with _open(tmp_path / "t-0", clock, segment_bytes=1 << 20, retention_ms=10_000) as log:
        # Segment 0: records stamped 90_000..90_004; segment 5: 95_000..; segment 10: now.
        for seg_ts in (90_000, 95_000):
            for i in range(5):
                log.append([pylog.Record(value=b"v", timestamp=seg_ts + i)])
            log.roll()
        log.append([b"active"])
        clock.now = 90_004 + 10_000  # exactly retention_ms old: kept (Kafka: strictly greater)
        assert log.enforce_retention() == []
        clock.now += 1
        assert log.enforce_retention() == [0]
        assert log.log_start_offset == 5
        clock.now = 95_004 + 10_001
        assert log.enforce_retention() == [5]
        clock.now += 10**9
        assert log.enforce_retention() == []  # never the active segment
        assert [v for _, v in _values(log)] == [b"active"]
        log._check()


def test_retention_by_time_stops_at_the_first_young_segment(tmp_path) -> None:
    """Kafka deletes a prefix: an old segment after a young one is kept."""
    clock = Clock(1_000_000)
    with _open(tmp_path / "t-0", clock, retention_ms=1_000) as log:
        for ts in (999_990, 500, 999_995):
            log.append([pylog.Record(value=b"v", timestamp=ts)])
            log.roll()
        assert log.enforce_retention() == []
        assert log.log_start_offset == 0


def test_delete_records_before(tmp_path) -> None:
    with _open(tmp_path / "t-0", segment_bytes=1024) as log:
        for i in range(50):
            log.append([b"%03d" % i + b"q" * 90])
        bases = list(log.segments.keys())
        target = bases[2] + 1  # inside the third segment
        assert log.delete_records_before(target) == target
        assert log.log_start_offset == target
        assert list(log.segments.keys()) == bases[2:]  # whole segments below it are gone
        assert list(log.read(target))[0].offset == target
        with pytest.raises(OffsetOutOfRangeError):
            list(log.read(target - 1))
        assert log.delete_records_before(3) == target  # never moves back
        ckpt = open(os.path.join(os.path.dirname(log.dir), "log-start-offset-checkpoint")).read()
        assert ckpt == f"0\n1\nt 0 {target}\n"  # durable before return
        assert log.delete_records_before(50) == 50
        assert list(log.read(50)) == []
        assert log.append([b"next"]).base_offset == 50
        log._check()


def test_truncate_to(tmp_path) -> None:
    with _open(tmp_path / "t-0", segment_bytes=1024) as log:
        for i in range(30):
            log.append([b"%03d-%d" % (i, j) + b"r" * 40 for j in range(3)])
        assert log.truncate_to(1000) == 0
        removed = log.truncate_to(31)  # inside batch 30..32: the batch goes whole
        assert removed > 0
        assert log.log_end_offset == 30
        assert [o for o, _ in _values(log)] == list(range(30))
        assert log.append([b"new"]).base_offset == 30
        assert list(log.read(30))[0].value == b"new"
        log._check()
    with _open(tmp_path / "t-0") as log:
        assert log.log_end_offset == 31


def test_truncate_below_log_start_restarts_the_log(tmp_path) -> None:
    with _open(tmp_path / "t-0") as log:
        log.append([b"a"] * 10)
        log.delete_records_before(8)
        log.truncate_to(5)
        assert (log.log_start_offset, log.log_end_offset) == (5, 5)
        assert log.append([b"b"]).base_offset == 5
        assert list(log.segments.keys()) == [5]


def _brute_offset_for_time(records: List[Tuple[int, int]], ts: int, start: int) -> int:
    return next((o for o, t in records if o >= start and t >= ts), None)  # type: ignore[return-value]


@settings(max_examples=max(25, settings.default.max_examples // 4), deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=5), min_size=1, max_size=25),
    targets=st.lists(st.integers(-5, 1010), min_size=1, max_size=10),
    start_frac=st.floats(0, 1),
)
def test_offset_for_time_matches_brute_force(tmp_path_factory, batches, targets, start_frac) -> None:
    path = tmp_path_factory.mktemp("oft") / "t-0"
    records: List[Tuple[int, int]] = []
    with _open(path, Clock(2_000), segment_bytes=300, index_interval_bytes=64, retention_ms=-1) as log:
        for stamps in batches:
            res = log.append([pylog.Record(value=b"v" * 20, timestamp=t) for t in stamps])
            records += [(res.base_offset + i, t) for i, t in enumerate(stamps)]
        start = int(start_frac * log.log_end_offset)
        log.delete_records_before(start)
        start = log.log_start_offset
        for ts in targets:
            assert log.offset_for_time(ts) == _brute_offset_for_time(records, ts, start), (ts, start)


def test_clean_reopen_scans_nothing(tmp_path) -> None:
    with _open(tmp_path / "t-0", segment_bytes=2048) as log:
        for i in range(200):
            log.append([b"%d" % i + b"c" * 40])
        end, nseg = log.log_end_offset, len(log.segments)
    assert nseg > 3
    with _open(tmp_path / "t-0") as log:
        assert log.recovery.clean_shutdown
        assert (log.recovery.segments_scanned, log.recovery.bytes_scanned) == (0, 0)
        assert log.log_end_offset == end and log.recovery_point == end


def test_crash_reopen_scans_only_from_the_recovery_point_segment(tmp_path) -> None:
    with _open(tmp_path / "t-0", segment_bytes=2048) as log:
        for i in range(200):
            log.append([b"%d" % i + b"c" * 40])
        end = log.log_end_offset
        last = log.active_segment
        tail_bytes = last.size
        rp = log.recovery_point  # moved by the last roll
        assert last.base_offset == rp
        log.abandon()
    with _open(tmp_path / "t-0") as log:
        assert not log.recovery.clean_shutdown
        assert log.recovery.recovery_point == rp
        assert log.recovery.segments_scanned == 1
        assert log.recovery.bytes_scanned == tail_bytes
        assert log.log_end_offset == end
        log._check()
    # Without the recovery-point checkpoint, everything is rescanned (slow but safe).
    with _open(tmp_path / "t-0") as log:
        n = len(log.segments)
        log.abandon()
    os.unlink(tmp_path / "recovery-point-offset-checkpoint")
    with _open(tmp_path / "t-0") as log:
        assert log.recovery.segments_scanned == n
        assert log.log_end_offset == end


def test_flush_moves_the_recovery_point(tmp_path) -> None:
    with _open(tmp_path / "t-0") as log:
        log.append([b"a"] * 5)
        assert log.recovery_point == 0
        log.flush()
        assert log.recovery_point == 5
    with _open(tmp_path / "t-0", flush_messages=3) as log:
        log.append([b"b"])
        assert log.recovery_point == 5
        log.append([b"b", b"c"])  # 3 unflushed records: flushed
        assert log.recovery_point == 8
        log.append([b"d"] * 7)  # one append over the count: flushed at once
        assert log.recovery_point == 15


def test_append_batches_as_leader_and_follower(tmp_path) -> None:
    with _open(tmp_path / "t-0") as log:
        log.append([b"x"] * 3)
        raw = encode_batch([b"p", b"q"], now_ms=7, base_offset=0) + encode_batch([b"r"], now_ms=7, base_offset=2)
        res = log.append_batches(bytes(raw), leader_epoch=4)  # a leader assigns offsets
        assert (res.base_offset, res.last_offset) == (3, 5)
        assert [(r.offset, r.value) for r in log.read(3)] == [(3, b"p"), (4, b"q"), (5, b"r")]
        assert log.epochs.entries == [(4, 3)]
        copy = bytes(encode_batch([b"s"], now_ms=7, base_offset=6, partition_leader_epoch=5))
        res = log.append_batches(copy, assign_offsets=False)  # a follower keeps them
        assert (res.base_offset, res.last_offset) == (6, 6)
        assert log.epochs.entries == [(4, 3), (5, 6)]
        stale = bytes(encode_batch([b"t"], now_ms=7, base_offset=2))
        with pytest.raises(InvalidOffsetError) as info:
            log.append_batches(stale, assign_offsets=False)
        assert "below the log end offset 7" in str(info.value)
        assert log.log_end_offset == 7
        log._check()


def test_leader_epochs_survive_reopen(tmp_path) -> None:
    with _open(tmp_path / "t-0") as log:
        log.append([b"a"], leader_epoch=1)
        log.append([b"b"], leader_epoch=1)
        log.append([b"c"], leader_epoch=3)
        assert log.epochs.entries == [(1, 0), (3, 2)]
        assert log.latest_epoch == 3
    with open(tmp_path / "t-0" / "leader-epoch-checkpoint", "rb") as f:
        assert f.read() == b"0\n2\n1 0\n3 2\n"
    with _open(tmp_path / "t-0") as log:
        assert log.epochs.entries == [(1, 0), (3, 2)]
        log.abandon()
    os.unlink(tmp_path / "t-0" / "leader-epoch-checkpoint")
    with _open(tmp_path / "t-0") as log:  # rebuilt from the batches
        assert log.epochs.entries == [(1, 0), (3, 2)]


def test_batches_larger_than_the_read_chunk(tmp_path) -> None:
    """Batches bigger than the 64 KiB search chunk and than max_bytes: lookups step over
    them whole, reads return one whole batch, recovery keeps them."""
    sizes = [70_000, 10, 300_000, 5, 131_072, 65_536]
    values = [bytes([i]) * n for i, n in enumerate(sizes)]
    with _open(tmp_path / "t-0", index_interval_bytes=4096) as log:
        for v in values:
            log.append([v, b"tail"])
        for i, v in enumerate(values):
            assert [r.value for r in log.read(2 * i, max_bytes=1)] == [v, b"tail"]
            assert [r.value for r in log.read(2 * i + 1, max_bytes=1)] == [b"tail"]
            assert log.get(2 * i).value == v
        log.abandon()
    with _open(tmp_path / "t-0") as log:
        assert log.recovery.bytes_truncated == 0
        assert log.log_end_offset == 2 * len(values)
        assert [r.value for r in log.read(0, max_bytes=1 << 30) if r.value != b"tail"] == values


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy"])
def test_compressed_batches(tmp_path, codec: str) -> None:
    if codec != "gzip":
        pytest.importorskip("cramjam", reason=f"{codec} needs pip install 'pylog-kafka[codecs]'")
    vals = [b"%d" % i * 30 for i in range(200)]
    with _open(tmp_path / "t-0", segment_bytes=4096, index_interval_bytes=256) as log:
        for i in range(0, 200, 20):
            log.append(vals[i:i + 20], compression=codec)
        assert [v for _, v in _values(log)] == vals
        assert [r.offset for r in log.read(37, max_bytes=1)][0] == 37
        assert log.get(37).value == vals[37]
        log.truncate_to(45)  # inside batch 40..59: the batch goes whole
        assert log.log_end_offset == 40
        log.abandon()
    with _open(tmp_path / "t-0") as log:
        assert [v for _, v in _values(log)] == vals[:40]
        assert log.read_batches(0)[0].compression != 0


def test_threads_share_one_log(tmp_path) -> None:
    """Every public method takes the log's lock: concurrent appends stay whole and dense."""
    import threading

    with _open(tmp_path / "t-0", segment_bytes=8192, index_interval_bytes=512) as log:
        errors: list = []

        def writer(t: int) -> None:
            try:
                for i in range(150):
                    log.append([b"t%d-%d-%d" % (t, i, j) for j in range(3)])
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def reader() -> None:
            try:
                for _ in range(150):
                    end = log.log_end_offset
                    if end:
                        recs = list(log.read(max(0, end - 10)))
                        assert [r.offset for r in recs] == list(range(recs[0].offset, recs[0].offset + len(recs)))
            except Exception as exc:  # pragma: no cover
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)] + [threading.Thread(target=reader)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        vals = _values(log)
        assert [o for o, _ in vals] == list(range(4 * 150 * 3))
        # Each append's three records are adjacent: batches were never interleaved.
        for k in range(0, len(vals), 3):
            prefixes = {v.rsplit(b"-", 1)[0] for _, v in vals[k:k + 3]}
            assert len(prefixes) == 1, vals[k:k + 3]
        assert sorted(v for _, v in vals) == sorted(b"t%d-%d-%d" % (t, i, j) for t in range(4) for i in range(150)
                                                    for j in range(3))
        log._check()


def test_recovery_is_logged_and_reported(tmp_path, caplog) -> None:
    import logging

    with _open(tmp_path / "t-0") as log:
        log.append([b"a" * 100])
        log.append([b"b" * 100])
        log.abandon()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    size = os.path.getsize(seg)
    os.truncate(seg, size - 7)  # a torn tail
    with caplog.at_level(logging.INFO, logger="pylog.storage"):
        with _open(tmp_path / "t-0") as log:
            r = log.recovery
            assert not r.clean_shutdown and r.truncated
            assert r.segments_scanned == 1 and r.bytes_scanned == size - 7
            assert log.log_end_offset == 1
            assert r.bytes_truncated == size - 7 - log.active_segment.size
            assert len(r.truncated_at) == 1 and r.truncated_at[0].startswith(f"{seg}@{log.active_segment.size}")
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING and rec.name.startswith("pylog.storage")]
    assert len(warnings) == 1
    assert str(seg) in warnings[0].getMessage() and "truncated" in warnings[0].getMessage()
