"""ProducerStateManager against a dict model of sequences; ``.snapshot`` round trips; corrupt snapshots."""
from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog._native import crc32c
from pylog.errors import CorruptRecordError, InvalidProducerEpochError, OutOfOrderSequenceError
from pylog.replication.partition import Partition
from pylog.storage.log import Log
from pylog.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    ProducerEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    last_sequence,
    snapshot_name,
)

INT32_MAX = 0x7FFFFFFF


class Model:
    """Kafka's rules written out plainly: pid -> [epoch, [(first_seq, last_seq, first_offset, last_offset)]]."""

    def __init__(self) -> None:
        self.p: dict = {}
        self.end = 0

    def outcome(self, pid, epoch, first, last):
        if pid not in self.p:
            return "append", None
        e_epoch, batches = self.p[pid]
        if epoch < e_epoch:
            return "fenced", None
        if epoch > e_epoch:
            return ("append", None) if first == 0 else ("oos", None)
        for b in batches:
            if b[0] == first and b[1] == last:
                return "dup", b
        if batches:
            prev = batches[-1][1]
            if not (first == prev + 1 or (first == 0 and prev == INT32_MAX)):
                return "oos", None
        return "append", None

    def append(self, pid, epoch, first, last, count):
        off = self.end
        self.end += count
        if pid not in self.p or epoch > self.p[pid][0]:
            self.p[pid] = [epoch, []]
        self.p[pid][1].append((first, last, off, off + count - 1))
        self.p[pid][1] = self.p[pid][1][-NUM_BATCHES_TO_RETAIN:]
        return off


def _next_seq(model: Model, pid: int) -> int:
    if pid in model.p and model.p[pid][1]:
        return (model.p[pid][1][-1][1] + 1) & INT32_MAX
    return 0


@st.composite
def operations(draw):
    ops = []
    for _ in range(draw(st.integers(1, 60))):
        ops.append((
            draw(st.integers(0, 2)),  # pid
            draw(st.integers(0, 2)),  # epoch
            draw(st.sampled_from(["next", "next", "next", "dup", "gap", "zero", "wrap"])),
            draw(st.integers(1, 4)),  # records
        ))
    return ops


@given(operations())
def test_check_and_update_match_the_model(tmp_path_factory, ops):
    psm = ProducerStateManager(str(tmp_path_factory.mktemp("ps")))
    model = Model()
    for pid, epoch, how, count in ops:
        if how == "next":
            first = _next_seq(model, pid)
        elif how == "dup" and pid in model.p and model.p[pid][1]:
            b = model.p[pid][1][0]
            first, count = b[0], (b[1] - b[0]) % (INT32_MAX + 1) + 1
        elif how == "gap":
            first = _next_seq(model, pid) + 2
        elif how == "wrap":
            first = INT32_MAX - 1
        else:
            first = 0
        last = last_sequence(first, count)
        want, dup = model.outcome(pid, epoch, first, last)
        try:
            got = psm.check(pid, epoch, first, last)
        except InvalidProducerEpochError:
            assert want == "fenced"
            continue
        except OutOfOrderSequenceError:
            assert want == "oos"
            continue
        if got is not None:
            assert want == "dup" and (got.first_offset, got.last_offset) == (dup[2], dup[3])
            continue
        assert want == "append", (want, pid, epoch, first, last)
        off = model.append(pid, epoch, first, last, count)
        psm.update(pid, epoch, first, last, off, off + count - 1, 1000 + off)
        psm._check()
    for pid, (epoch, batches) in model.p.items():
        e = psm.producers[pid]
        assert e.epoch == epoch
        assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches] == batches


@given(st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 32767), st.integers(0, INT32_MAX),
                          st.integers(1, 1000), st.integers(0, 2**40), st.integers(0, 2**41)), max_size=20,
                unique_by=lambda t: t[0]))
def test_snapshot_round_trip(entries):
    es = []
    for pid, epoch, first, count, off, ts in entries:
        e = ProducerEntry(pid, epoch)
        last = last_sequence(first, count)
        from pylog.storage.producer_state import BatchMetadata

        e.batches.append(BatchMetadata(first, last, off, off + count - 1, ts))
        es.append(e)
    data = encode_snapshot(es)
    assert len(data) == 10 + 46 * len(es)
    back = decode_snapshot(data)
    assert [(e.producer_id, e.epoch, list(e.batches)) for e in back] == [(e.producer_id, e.epoch, list(e.batches)) for e in es]


def test_snapshot_bytes_are_kafkas_layout():
    # Kafka's empty snapshot is 10 bytes: version 1, CRC-32C of the count field, count 0.
    empty = encode_snapshot([])
    assert empty == struct.pack(">hIi", 1, crc32c(struct.pack(">i", 0)), 0)
    e = ProducerEntry(4001, 0)
    from pylog.storage.producer_state import BatchMetadata

    e.batches.append(BatchMetadata(0, 11, 0, 11, 1660065823488))
    data = encode_snapshot([e])
    pid, epoch, last_seq, last_off, delta, ts, coord, txn = struct.unpack_from(">qhiqiqiq", data, 10)
    assert (pid, epoch, last_seq, last_off, delta, ts, coord, txn) == (4001, 0, 11, 11, 11, 1660065823488, -1, -1)


def _write_log(path, batches):
    """Append idempotent batches (pid, epoch, first_seq, count) to a real log; returns it open."""
    log = Log.open(path)
    for pid, epoch, first, count in batches:
        log.append([b"v%d" % i for i in range(count)], producer_id=pid, producer_epoch=epoch, base_sequence=first)
    return log


BATCHES = [(7, 0, 0, 3), (8, 0, 0, 2), (7, 0, 3, 1), (9, 1, 0, 4), (7, 0, 4, 2), (8, 0, 2, 5)]


def _state(p: Partition):
    return {pid: (e.epoch, list(e.batches)) for pid, e in p.producer_state.producers.items()}


def test_rebuilt_from_log_replay_equals_live_state(tmp_path):
    log = _write_log(str(tmp_path / "t-0"), BATCHES)
    p = Partition(0, log)
    full = _state(p)
    assert full[7][1][-1].last_seq == 5 and full[8][1][-1].last_offset == 16
    p.producer_state.take_snapshot()
    log.close()
    p2 = Partition(0, Log.open(str(tmp_path / "t-0")))
    # A snapshot keeps the last batch per producer; the sequence check continues from it.
    assert {pid: (ep, [b[-1]]) for pid, (ep, b) in full.items()} == _state(p2)
    with pytest.raises(OutOfOrderSequenceError):
        p2.producer_state.check(7, 0, 9, 9)
    assert p2.producer_state.check(7, 0, 4, 5) is not None  # the last batch is still a known duplicate
    p2.log.close()


@settings(max_examples=40)
@given(st.data())
def test_corrupt_snapshot_is_ignored_and_state_rebuilt(tmp_path_factory, data):
    d = str(tmp_path_factory.mktemp("c") / "t-0")
    log = _write_log(d, BATCHES)
    p = Partition(0, log)
    full = _state(p)
    path = p.producer_state.take_snapshot()
    log.close()
    raw = bytearray(open(path, "rb").read())
    how = data.draw(st.sampled_from(["flip", "truncate", "extend", "empty"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    elif how == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif how == "extend":
        raw += b"\x00" * data.draw(st.integers(1, 50))
    else:
        raw = bytearray()
    with open(path, "wb") as f:
        f.write(raw)
    with pytest.raises(CorruptRecordError) as ei:
        decode_snapshot(bytes(raw), path)
    assert path in str(ei.value)
    p2 = Partition(0, Log.open(d))  # never a crash: the bad snapshot is dropped, the log replayed
    assert _state(p2) == full
    assert p2.producer_state.corrupt_snapshots == 1 and not os.path.exists(path)
    p2.log.close()


def test_truncation_rebuilds_state_and_drops_later_snapshots(tmp_path):
    log = _write_log(str(tmp_path / "t-0"), BATCHES[:3])
    p = Partition(0, log)
    p.producer_state.take_snapshot()  # covers offsets < 6
    for pid, epoch, first, count in BATCHES[3:]:
        log.append([b"x"] * count, producer_id=pid, producer_epoch=epoch, base_sequence=first)
    p.producer_state.update_from_infos([b.info for b in log.read_batches(6, 1 << 20)])
    p.producer_state.take_snapshot()
    assert p.producer_state.snapshot_offsets() == [6, log.log_end_offset]
    p._truncate(5)  # cuts (7, 0, 3, 1) at offset 5 and everything after
    assert p.producer_state.snapshot_offsets() == []  # snapshot 6 covered the cut batch
    assert p.producer_state.map_end_offset == 5
    assert _state(p)[7][1][-1].last_seq == 2 and 9 not in _state(p)
    assert p.producer_state.check(7, 0, 3, 3) is None  # the cut batch may be written again
    p._check()
    log.close()


def test_snapshot_file_name_is_the_offset():
    assert snapshot_name(38) == "00000000000000000038.snapshot"
