"""A hypothesis state machine for :class:`pylog.Log` against a plain list model.

Every rule drives the real log (real files, through :class:`SimulatedDiskIO`
so a power loss can be simulated) and the model the same way, then compares
what the log returns with what the model predicts; ``log._check()`` runs
after every rule. Small ``segment_bytes`` and ``index_interval_bytes`` make
rolls and sparse index entries happen within a few appends.

The model is a list of batches ``(base, epoch, [records])``: Kafka truncates
at batch granularity, so the model must know batch boundaries.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import List, NamedTuple, Optional, Tuple

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import pylog
from pylog.errors import OffsetOutOfRangeError
from pylog.storage.epoch_cache import LeaderEpochCache
from pylog.storage.fileio import SimulatedDiskIO

SEGMENT_BYTES = 600
INDEX_INTERVAL = 100


class MRec(NamedTuple):
    value: Optional[bytes]
    key: Optional[bytes]
    headers: Tuple[Tuple[str, Optional[bytes]], ...]
    timestamp: int


class MBatch(NamedTuple):
    base: int
    epoch: int
    records: List[MRec]

    @property
    def last(self) -> int:
        return self.base + len(self.records) - 1


small_bytes = st.binary(max_size=40)
header = st.tuples(st.text(alphabet="abcxyz", max_size=4), st.one_of(st.none(), st.binary(max_size=8)))
record_input = st.one_of(
    small_bytes,
    st.none(),
    st.builds(
        lambda v, k, h, ts: pylog.Record(value=v, key=k, headers=h, timestamp=ts),
        st.one_of(st.none(), small_bytes),
        st.one_of(st.none(), st.binary(max_size=10)),
        st.lists(header, max_size=3),
        st.one_of(st.none(), st.integers(min_value=0, max_value=2_000)),
    ),
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # tmpfs when there is one (fsyncs are free there; power loss is simulated anyway).
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.root = tempfile.mkdtemp(prefix="pylog-sm-", dir=shm)
        self.path = os.path.join(self.root, "topic.a-3")
        self.now = 1_000
        self.io = SimulatedDiskIO()
        self.batches: List[MBatch] = []
        self.start = 0
        self.end = 0
        self.durable = 0  # every record below this survives a power loss
        self.epoch = -1
        # The epoch cache is mirrored with the same calls Kafka makes at each
        # step (assign on append, truncate_from_end/start, drop entries at or
        # past the log end on reopen); its own rules are tested in
        # tests/unit/test_epoch_cache.py.
        self.epochs = LeaderEpochCache()
        self.log = self._open()

    def _open(self) -> pylog.Log:
        return pylog.Log.open(
            self.path,
            file_io=self.io,
            clock_ms=lambda: self.now,
            segment_bytes=SEGMENT_BYTES,
            index_interval_bytes=INDEX_INTERVAL,
            retention_ms=-1,
        )

    def teardown(self) -> None:
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # ---- model helpers ---------------------------------------------------------
    def model_records(self) -> List[Tuple[int, MRec]]:
        out = []
        for b in self.batches:
            for i, r in enumerate(b.records):
                if b.base + i >= self.start:
                    out.append((b.base + i, r))
        return out

    def model_truncate(self, offset: int) -> None:
        """Drop every batch whose last offset is >= offset (batch granularity)."""
        keep = [b for b in self.batches if b.last < offset]
        cut = [b for b in self.batches if b.last >= offset]
        self.batches = keep
        if cut:
            self.end = cut[0].base
        self.durable = min(self.durable, self.end)
        self.epochs.truncate_from_end(self.end)

    def check_record(self, got: pylog.Record, offset: int, want: MRec) -> None:
        assert got.offset == offset
        assert got.value == want.value, (offset, got, want)
        assert got.key == want.key, (offset, got, want)
        assert tuple(tuple(h) for h in got.headers) == want.headers, (offset, got, want)
        assert got.timestamp == want.timestamp, (offset, got, want)

    # ---- rules -------------------------------------------------------------------
    @rule(records=st.lists(record_input, min_size=1, max_size=6))
    def append(self, records: list) -> None:
        res = self.log.append(records, leader_epoch=self.epoch)
        assert res.base_offset == self.end
        assert res.last_offset == self.end + len(records) - 1
        mrecs = []
        for r in records:
            if isinstance(r, pylog.Record):
                ts = self.now if r.timestamp is None else r.timestamp
                mrecs.append(MRec(r.value, r.key, tuple(tuple(h) for h in r.headers), ts))
            else:
                mrecs.append(MRec(r, None, (), self.now))
        self.batches.append(MBatch(self.end, self.epoch, mrecs))
        self.epochs.assign(self.epoch, self.end)
        self.end += len(records)

    @rule(ms=st.integers(min_value=0, max_value=50))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(become_leader=st.booleans())
    def bump_epoch(self, become_leader: bool) -> None:
        self.epoch += 1
        if become_leader:  # a new leader records its epoch at the log end before appending
            assert self.log.assign_epoch(self.epoch, self.end)
            self.epochs.assign(self.epoch, self.end)

    @rule(data=st.data(), max_bytes=st.sampled_from([0, 1, 50, 200, 1 << 20]),
          bound=st.one_of(st.none(), st.integers(min_value=0, max_value=8)))
    def read(self, data: st.DataObject, max_bytes: int, bound: Optional[int]) -> None:
        offset = data.draw(st.integers(min_value=self.start, max_value=self.end), label="offset")
        max_offset = None if bound is None else offset + bound
        got = list(self.log.read(offset, max_bytes, max_offset=max_offset))
        limit = self.end if max_offset is None else min(max_offset, self.end)
        want = [(o, r) for o, r in self.model_records() if offset <= o < limit]
        # A prefix of what the model holds, at least one record when any is due.
        assert len(got) <= len(want)
        if want:
            assert got, f"read({offset}, {max_bytes}, max_offset={max_offset}) returned nothing"
        if max_bytes == 1 << 20:
            assert len(got) == len(want)
        for g, (o, w) in zip(got, want):
            self.check_record(g, o, w)

    @rule(data=st.data())
    def get(self, data: st.DataObject) -> None:
        """Point read of one record (Log.get)."""
        records = self.model_records()
        if not records:
            return
        offset, want = data.draw(st.sampled_from(records), label="record")
        self.check_record(self.log.get(offset), offset, want)

    @rule(data=st.data())
    def read_out_of_range(self, data: st.DataObject) -> None:
        offset = data.draw(st.one_of(
            st.integers(min_value=self.end + 1, max_value=self.end + 5),
            st.integers(min_value=-3, max_value=self.start - 1) if self.start > 0 else st.just(-1),
        ))
        with pytest.raises(OffsetOutOfRangeError):
            list(self.log.read(offset))

    @rule(data=st.data())
    def offset_for_time(self, data: st.DataObject) -> None:
        ts = data.draw(st.integers(min_value=-1, max_value=self.now + 10), label="ts")
        want = next((o for o, r in self.model_records() if r.timestamp >= ts), None)
        assert self.log.offset_for_time(ts) == want, ts

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        self.log.flush()
        self.durable = self.end

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(min_value=max(0, self.start - 2), max_value=self.end + 2), label="offset")
        self.log.truncate_to(offset)
        if offset >= self.end:
            return
        if offset < self.start:
            # Below the log start Kafka restarts the log empty at that offset.
            self.batches = []
            self.start = self.end = self.durable = offset
            self.epochs.clear()
            return
        self.model_truncate(offset)
        # A batch straddling the log start goes whole: the start follows the end down.
        self.start = min(self.start, self.end)

    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(min_value=0, max_value=self.end), label="offset")
        new_start = self.log.delete_records_before(offset)
        self.start = max(self.start, offset)
        assert new_start == self.start
        self.epochs.truncate_from_start(self.start)

    @rule(retention_bytes=st.integers(min_value=0, max_value=2 * SEGMENT_BYTES))
    def enforce_retention(self, retention_bytes: int) -> None:
        log = self.log
        log.config = log.config._replace(retention_bytes=retention_bytes)
        try:
            sizes_before = [(b, s.size) for b, s in log.segments.items()]
            deleted = log.enforce_retention()
        finally:
            log.config = log.config._replace(retention_bytes=-1)
        # Oldest segments first, never the active one, and only while the rest
        # still holds at least retention_bytes (Kafka's size rule).
        assert deleted == [b for b, _ in sizes_before[: len(deleted)]]
        assert len(deleted) < len(sizes_before)
        remaining = sum(s for _, s in sizes_before[len(deleted):])
        assert remaining >= retention_bytes or not deleted
        if len(deleted) < len(sizes_before) - 1:
            nxt = sizes_before[len(deleted)][1]
            assert remaining - nxt < retention_bytes
        if deleted:
            self.start = max(self.start, sizes_before[len(deleted)][0])
            self.epochs.truncate_from_start(self.start)
        assert log.log_start_offset == self.start

    @rule()
    def clean_reopen(self) -> None:
        self.log.close()
        self.log = self._open()
        self.epochs.truncate_from_end(self.end)
        self.epochs.truncate_from_start(self.start)
        assert self.log.recovery.clean_shutdown
        assert self.log.recovery.segments_scanned == 0

    @rule()
    def crash_reopen(self) -> None:
        """The process dies (no flush, no checkpoint); the page cache survives."""
        self.log.abandon()
        self.log = self._open()
        self.epochs.truncate_from_end(self.end)
        self.epochs.truncate_from_start(self.start)
        assert not self.log.recovery.clean_shutdown
        assert self.log.recovery.bytes_truncated == 0, self.log.recovery

    @rule()
    def power_loss(self) -> None:
        """The machine loses power: everything not fsynced is gone."""
        self.log.abandon()
        self.io.crash()
        self.log = self._open()
        end = self.log.log_end_offset
        # Flushed records survive; the durable log start never moves back (when
        # every surviving record is below it the log restarts empty there).
        assert max(self.durable, self.start) <= end <= self.end, (self.durable, self.start, end, self.end)
        assert self.log.log_start_offset == self.start
        if end < self.end:
            if end > self.start:
                # Unflushed batches may vanish, but only whole batches from the tail.
                assert any(b.base == end for b in self.batches), (end, [b.base for b in self.batches])
            self.model_truncate(end)
            self.end = end
        self.epochs.truncate_from_end(self.end)
        self.epochs.truncate_from_start(self.start)

    # ---- invariants ---------------------------------------------------------------
    @invariant()
    def consistent(self) -> None:
        self.log._check()
        assert self.log.log_start_offset == self.start
        assert self.log.log_end_offset == self.end
        # An entry starting exactly at the log end (an epoch with no record yet)
        # is kept or dropped on reopen depending on the path, as in Kafka's
        # LogLoader; every entry below the log end must match.
        got = self.log.epochs.entries
        assert all(s <= self.end for _, s in got)
        assert [e for e in got if e[1] < self.end] == [e for e in self.epochs.entries if e[1] < self.end]


# Examples come from the HYPOTHESIS_PROFILE (tests/conftest.py: fast 100, ci 500, exhaustive 10,000).
LogMachine.TestCase.settings = settings(stateful_step_count=50, deadline=None)
TestLogStateMachine = LogMachine.TestCase


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(not os.environ.get("PYLOG_SOAK"), reason="soak run: set PYLOG_SOAK=1")
def test_log_state_machine_soak() -> None:
    """Long run: PYLOG_SOAK=1 .venv/bin/python -m pytest tests/property/test_log_state_machine.py -m soak"""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(LogMachine, settings=settings(max_examples=2000, stateful_step_count=80, deadline=None))
