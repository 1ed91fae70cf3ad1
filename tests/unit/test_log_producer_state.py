"""The Log owns its producer state (issue 15, Kafka's UnifiedLog/ProducerStateManager).

No Partition here: a plain Log validates a client batch (``append_as_leader``), records every batch it
writes, snapshots at roll, reloads on truncation and rebuilds from snapshot + log after a crash (kill -9:
the page cache survives; power loss: what was not fsynced is gone, and so must its producer state be).
Each test holds the state to a model: a dict of each producer's last five batches of the records that
are in the log.
"""
from __future__ import annotations

import os
import random
from typing import Dict, List, Tuple

import pytest

import pylog
from pylog.errors import InvalidProducerEpochError, InvalidRecordError, OutOfOrderSequenceError
from pylog.storage.fileio import SimulatedDiskIO
from pylog.storage.producer_state import snapshot_name
from pylog.record import encode_batch

Model = Dict[int, List[Tuple[int, int, int, int]]]  # pid -> [(first seq, last seq, first offset, last offset)]


def _open(path: str, disk=None, **cfg: object) -> pylog.Log:
    return pylog.Log.open(path, file_io=disk, clock_ms=lambda: 1_000, retention_ms=-1, segment_bytes=2048,
                          recovery_checkpoint_interval_ms=0, **cfg)


def _batch(pid: int, seq: int, n: int, epoch: int = 0) -> bytes:
    return encode_batch([b"p%d-s%d-" % (pid, seq + i) + b"x" * 40 for i in range(n)], now_ms=1_000,
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def _state(log: pylog.Log) -> Model:
    return {pid: [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches]
            for pid, e in log.producer_state.producers.items() if e.batches}


def _model_of(log: pylog.Log) -> Model:
    """What the producer state of exactly the records in ``log`` is (each producer's last 5 batches)."""
    out: Model = {}
    for info in log.read_batch_infos(log.log_start_offset, log.log_end_offset):
        if info.producer_id >= 0 and info.base_sequence >= 0:
            span = info.last_offset - info.base_offset
            out.setdefault(info.producer_id, []).append(
                (info.base_sequence, info.base_sequence + span, info.base_offset, info.last_offset))
    return {pid: bs[-5:] for pid, bs in out.items()}


def _assert_matches(state: Model, model: Model) -> None:
    """``state`` is ``model`` up to the older batches a snapshot does not keep: a ``.snapshot`` holds each
    producer's last batch only (Kafka's format), so after a load from one a producer's retained batches
    are a suffix of the model's, ending with the same last batch."""
    assert set(state) == set(model), (state, model)
    for pid, batches in state.items():
        assert batches and batches == model[pid][-len(batches):], (pid, batches, model[pid])


def _produce(log: pylog.Log, rnd: random.Random, seqs: Dict[int, int], batches: int) -> None:
    for _ in range(batches):
        pid = rnd.choice([7, 8, 9])
        n = rnd.randint(1, 4)
        log.append_as_leader(_batch(pid, seqs.get(pid, 0), n), leader_epoch=0)
        seqs[pid] = seqs.get(pid, 0) + n


def test_append_as_leader_validates_against_the_logs_own_state(tmp_path) -> None:
    log = _open(str(tmp_path / "t-0"))
    first = log.append_as_leader(_batch(7, 0, 3), leader_epoch=2)
    assert (first.base_offset, first.last_offset) == (0, 2) and log.epochs.entries == [(2, 0)]
    again = log.append_as_leader(_batch(7, 0, 3), leader_epoch=2)  # a retry: not written again
    assert (again.base_offset, again.last_offset, again.position) == (0, 2, -1)
    assert log.log_end_offset == 3 and log.duplicate_appends_total == 1
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(_batch(7, 5, 1), leader_epoch=2)
    log.append_as_leader(_batch(7, 0, 1, epoch=1), leader_epoch=2)  # a new epoch starts at 0
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(_batch(7, 3, 1, epoch=0), leader_epoch=2)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(_batch(7, 1, 1, epoch=1) + _batch(7, 2, 1, epoch=1), leader_epoch=2)  # two batches
    assert log.log_end_offset == 4 and _state(log) == {7: [(0, 0, 3, 3)]}
    # Plain appends and follower appends are recorded, never validated (as before this moved).
    log.append_batches(_batch(7, 0, 1, epoch=1))
    assert log.log_end_offset == 5
    log._check()
    log.close()


@pytest.mark.parametrize("crash", ["kill", "power"])
def test_recovery_rebuilds_the_producer_state_from_snapshot_and_log(tmp_path, crash: str) -> None:
    """Rolls write snapshots; a crash after more appends; the reopened log's state is that of exactly
    its records (power loss: the unflushed tail and its producers are gone), and a retry of each
    producer's last batch in the log is recognised."""
    rnd = random.Random(5)
    disk = SimulatedDiskIO()
    path = str(tmp_path / "t-0")
    log = _open(path, disk)
    seqs: Dict[int, int] = {}
    _produce(log, rnd, seqs, 60)
    assert len(log.segments) > 2 and log.producer_state.snapshot_offsets()  # rolls snapshotted
    log.flush()
    flushed = log.log_end_offset
    _produce(log, rnd, seqs, 10)  # not flushed
    before = _state(log)
    end_before = log.log_end_offset
    if crash == "power":
        log.producer_state.take_snapshot()  # durable, but above what survives the power loss
    log.abandon()
    if crash == "power":
        disk.crash()
    log = _open(path, disk)
    if crash == "power":
        assert flushed <= log.log_end_offset < end_before  # the flushed records stayed, the tail went
        # The snapshot above the recovered end went at open, before anything could reuse its offsets.
        assert all(int(n[:20]) <= log.log_end_offset for n in os.listdir(path) if n.endswith(".snapshot"))
    state = _state(log)
    _assert_matches(state, _model_of(log))
    if crash == "kill":
        _assert_matches(state, before)  # nothing was lost
    for pid, batches in state.items():
        first_seq, last_seq, first, last = batches[-1]
        res = log.append_as_leader(_batch(pid, first_seq, last_seq - first_seq + 1), leader_epoch=0)
        assert (res.base_offset, res.last_offset, res.position) == (first, last, -1)
    log._check()
    log.close()


def test_truncation_reloads_the_state_and_drops_later_snapshots(tmp_path) -> None:
    rnd = random.Random(9)
    path = str(tmp_path / "t-0")
    log = _open(path)
    seqs: Dict[int, int] = {}
    _produce(log, rnd, seqs, 40)
    snaps = log.producer_state.snapshot_offsets()
    assert snaps
    cut = snaps[-1] - 3
    log.truncate_to(cut)
    assert log.producer_state.map_end_offset == log.log_end_offset <= cut
    _assert_matches(_state(log), _model_of(log))
    assert all(s <= log.log_end_offset for s in log.producer_state.snapshot_offsets())
    log._check()
    log.close()


def test_a_truncation_drops_later_snapshots_even_when_the_state_is_not_loaded(tmp_path) -> None:
    """A log nobody loaded the state of still keeps its snapshot files true: a snapshot above a cut
    would otherwise describe records that are gone once appends reuse its offsets."""
    path = str(tmp_path / "t-0")
    log = _open(path)
    seqs: Dict[int, int] = {}
    _produce(log, random.Random(3), seqs, 40)
    end = log.log_end_offset
    log.producer_state.take_snapshot()
    log.close()
    log = _open(path)
    assert log._producers is None  # not loaded
    log.truncate_to(end - 5)
    assert not os.path.exists(os.path.join(path, snapshot_name(end)))
    for i in range(4):  # other batches at the same offsets, past the old snapshot's
        log.append_batches(_batch(7, 3 * i, 3, epoch=1))
    assert log.log_end_offset > end and log._producers is None
    _assert_matches(_state(log), _model_of(log))  # loaded now: not from the snapshot of the old records
    assert log.producer_state.producers[7].epoch == 1
    log.close()
