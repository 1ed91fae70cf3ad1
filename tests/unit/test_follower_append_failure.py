"""``Partition.on_fetch_response`` when the follower's append fails (``Partition.fail_fetching``).

A failure raises nothing: the partition stops fetching (``FAILED``), and the
replica's bookkeeping - LEO, HW, producer state, epoch cache - matches what
actually landed in its log, also when a fetch split across segments fails after
some of its runs were written. The expected producer state is rebuilt from the
leader's batches below the follower's log end (an independent model).
"""
from __future__ import annotations

import errno
import os
from typing import Dict, List

import pytest

from pylog.errors import KafkaStorageError, OffsetOutOfRangeError, RecordTooLargeError
from pylog.replication.messages import (
    FetchRequest,
    FetchResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    PartitionState,
)
from pylog.replication.partition import FAILED, FETCHING, TRUNCATING, Partition, records_equal_below
from pylog.replication.replica_manager import ReplicaManager
from pylog.storage.fileio import FileIO, SimulatedDiskIO
from pylog.storage.log import Log
from pylog.storage.producer_state import ProducerStateManager
from pylog.record import encode_batch


def _state(leader: int, epoch: int = 0) -> PartitionState:
    return PartitionState("t", 0, (0, 1), leader, epoch, (0, 1), epoch, 1)


def _leader(tmp_path, n_batches: int = 12, big_last: bool = False) -> Partition:
    """A leader holding ``n_batches`` idempotent batches of three producers (about 330 bytes each),
    and with ``big_last`` one more batch of 2,000 bytes."""
    p = Partition(0, Log.open(os.path.join(tmp_path, "leader", "t-0"), clock_ms=lambda: 0))
    p.apply_state(_state(0), 0)
    seqs = {7: 0, 8: 0, 9: 0}
    for i in range(n_batches):
        pid = 7 + i % 3
        data = encode_batch([b"%03d" % i + b"v" * 100 for _ in range(3)], now_ms=1_700_000_000_000 + i,
                            producer_id=pid, producer_epoch=0, base_sequence=seqs[pid])
        seqs[pid] += 3
        p.append_as_leader(data, 1, 0)
    if big_last:
        p.append_as_leader(encode_batch([b"B" * 2_000], now_ms=1_700_000_001_000), 1, 0)
    return p


def _follower(path: str, io: FileIO, **config: object) -> Partition:
    p = Partition(1, Log.open(path, clock_ms=lambda: 0, file_io=io, **config))
    p.apply_state(_state(0), 0)
    p.follower_state = FETCHING
    return p


def _expected_producers(leader: Partition, end: int, tmp_path) -> Dict[int, List[object]]:
    """The producer state a replica holding exactly ``[0, end)`` of the leader's log must have."""
    model = ProducerStateManager(os.path.join(tmp_path, "model"))
    model.update_from_infos(leader.log.read_batch_infos(0, end))
    return {pid: list(e.batches) for pid, e in model.producers.items()}


def _producers(p: Partition) -> Dict[int, List[object]]:
    return {pid: list(e.batches) for pid, e in p.producer_state.producers.items() if e.batches}


def _assert_consistent(follower: Partition, leader: Partition, tmp_path) -> None:
    leo = follower.log_end_offset
    assert follower.producer_state.map_end_offset == leo
    assert _producers(follower) == _expected_producers(leader, leo, tmp_path)
    assert records_equal_below(leader.log, follower.log, leo) is None
    assert follower.high_watermark <= leo
    assert follower.log.epochs.entries == [e for e in leader.log.epochs.entries if e[1] < leo]
    follower._check()
    follower.log._check()


def test_a_batch_the_follower_refuses_stops_fetching_and_keeps_the_runs_that_landed(tmp_path) -> None:
    leader = _leader(tmp_path, big_last=True)
    end = leader.log_end_offset
    follower = _follower(os.path.join(tmp_path, "f", "t-0"), FileIO(), segment_bytes=1024)
    req = FetchRequest(1, "t", 0, 0, 0, 1)
    resp, _ = leader.handle_fetch(req, 0)
    assert len(resp.records) > 3 * 1024
    with pytest.raises(RecordTooLargeError):  # what used to escape through the replica manager
        Log.open(os.path.join(tmp_path, "probe", "t-0"), segment_bytes=1024).append_batches(
            resp.records, assign_offsets=False)
    assert follower.on_fetch_response(req, resp, 0) == 0
    assert follower.follower_state == FAILED and not follower.storage_failed
    assert "RecordTooLargeError" in (follower.fetch_failure or "") and "offset 0" in follower.fetch_failure
    assert follower.log_end_offset == end - 1  # every run before the 2,000-byte batch landed
    assert len(follower.log.segments) >= 3
    _assert_consistent(follower, leader, tmp_path)
    assert follower.next_follower_request(2) is None  # stopped fetching
    # Not a disk error: the next leader epoch retries (Kafka's fetcher re-adds a failed partition).
    follower.apply_state(_state(0, epoch=1), 0)
    assert follower.follower_state == TRUNCATING and follower.fetch_failure is None
    assert follower.next_follower_request(3) is not None


@pytest.mark.parametrize("what", ["write", "fsync"])
def test_a_disk_failing_at_any_point_of_a_split_append_leaves_a_consistent_follower(tmp_path, what) -> None:
    leader = _leader(tmp_path, n_batches=15)
    end = leader.log_end_offset
    req = FetchRequest(1, "t", 0, 0, 0, 1)
    resp, _ = leader.handle_fetch(req, 0)
    outcomes = set()
    for k in range(48):  # every write or fsync of the split append (each roll also snapshots)
        disk = SimulatedDiskIO()
        follower = _follower(os.path.join(tmp_path, f"{what}{k}", "t-0"), disk, segment_bytes=1024,
                             flush_messages=1 if what == "fsync" else None)
        if what == "write":
            disk.fail_write_after = disk.writes + k
        else:
            disk.fail_fsync_after = disk.fsyncs + k
        disk.fail_errno = errno.EIO
        follower.on_fetch_response(req, resp, 0)  # raises nothing, whatever fails
        leo = follower.log_end_offset
        if follower.follower_state == FAILED:
            assert follower.storage_failed and "KafkaStorageError" in (follower.fetch_failure or "")
            assert leo < end
            outcomes.add("partial" if leo > 0 else "none")
        else:
            assert follower.follower_state == FETCHING and leo == end
            outcomes.add("all")
        disk.fail_write_after = disk.fail_fsync_after = None
        _assert_consistent(follower, leader, tmp_path)
        if follower.follower_state == FAILED:
            # A disk error is sticky: a new leader epoch does not restart fetching.
            follower.apply_state(_state(0, epoch=1), 0)
            assert follower.follower_state == FAILED and follower.next_follower_request(5) is None
        follower.log.close()
    assert outcomes == {"none", "partial", "all"}, outcomes


def test_a_failing_truncation_stops_fetching_in_the_replica_manager(tmp_path) -> None:
    """OffsetsForLeaderEpoch says truncate; the disk refuses: nothing escapes ReplicaManager.handle."""
    leader = _leader(tmp_path, n_batches=6)
    disk = SimulatedDiskIO()
    rm = ReplicaManager(1, os.path.join(tmp_path, "b1"), file_io=disk, clock_ms=lambda: 0)
    f = rm.get_or_create("t", 0)
    req = FetchRequest(1, "t", 0, 0, 0, 1)
    resp, _ = leader.handle_fetch(req, 0)
    f.apply_state(_state(0), 0)
    f.follower_state = FETCHING
    f.on_fetch_response(req, resp, 0)
    assert f.log_end_offset == leader.log_end_offset == 18
    f.apply_state(_state(0, epoch=2), 0)  # a new epoch: truncate first
    rm.inflight[("t", 0)] = (99, f.next_follower_request(99), 0)
    disk.fail_fsync_after = disk.fsyncs  # the truncation fsyncs the cut segment: it fails
    disk.fail_errno = errno.EIO
    out = rm.handle(0, OffsetsForLeaderEpochResponse("t", 0, 99, leader_epoch=0, end_offset=9), 0)
    assert f.follower_state == FAILED and f.storage_failed
    assert "truncation at offset" in (f.fetch_failure or "")
    assert not out.items  # no fetch follows
    assert not any(isinstance(m, (FetchRequest, OffsetsForLeaderEpochRequest)) for _, m in rm.tick(20_000).items)
    # The files were cut before the fsync failed: the bookkeeping follows what is in the log.
    assert f.log_end_offset == 9
    assert f.producer_state.map_end_offset == 9
    assert _producers(f) == _expected_producers(leader, 9, tmp_path)
    f._check()
    disk.fail_fsync_after = None
    rm.shutdown(clean=False)


def test_a_failing_restart_of_the_log_after_offset_out_of_range_stops_fetching(tmp_path) -> None:
    """The leader's log starts past the follower's end: the follower empties its log to restart there,
    and the disk fails at its first write: nothing escapes, and since restarting a log is all-or-nothing
    (issue 14: the log-start checkpoint commits it) the log is as before and the state follows it."""
    leader = _leader(tmp_path, n_batches=6)
    disk = SimulatedDiskIO()
    rm = ReplicaManager(1, os.path.join(tmp_path, "b1"), file_io=disk, clock_ms=lambda: 0)
    f = rm.get_or_create("t", 0)
    f.apply_state(_state(0), 0)
    f.follower_state = FETCHING
    req = FetchRequest(1, "t", 0, 0, 0, 1)
    resp, _ = leader.handle_fetch(req, 0)
    f.on_fetch_response(req, resp, 0)
    assert f.log_end_offset == 18 and f.producer_state.producers
    req2 = f.next_follower_request(7)
    rm.inflight[("t", 0)] = (7, req2, 0)
    disk.fail_write_after = disk.writes
    out = rm.handle(0, FetchResponse("t", 0, 7, error=OffsetOutOfRangeError, high_watermark=150,
                                     log_start_offset=100, log_end_offset=200, leader_epoch=0), 0)
    assert not out.items
    assert f.follower_state == FAILED and f.storage_failed
    assert "fetch response at offset 18" in (f.fetch_failure or "")
    assert (f.log.log_start_offset, f.log_end_offset) == (0, 18)  # nothing replaced: all or nothing
    assert f.producer_state.map_end_offset == 18 and _producers(f)
    f._check()
    disk.fail_write_after = None
    rm.shutdown(clean=False)


def test_when_the_landed_headers_cannot_be_read_back_the_producer_state_still_matches_the_log_end(tmp_path) -> None:
    """The disk fails reads too (SimulatedDiskIO cannot, so the log's header reader is made to fail).
    The runs that landed are in the producer state all the same: the log recorded them as it wrote
    them, with no read-back. A truncation whose reload cannot read the log back (the last resort)
    keeps only entries below the new log end. Nothing raises."""
    leader = _leader(tmp_path, big_last=True)
    follower = _follower(os.path.join(tmp_path, "f", "t-0"), FileIO(), segment_bytes=1024)
    req = FetchRequest(1, "t", 0, 0, 0, 1)
    resp, _ = leader.handle_fetch(req, 0)

    reads = []

    def unreadable(start: int, end: int):
        reads.append((start, end))
        raise KafkaStorageError(errno.EIO, f"read of {follower.log.dir} [{start}, {end}) failed")

    follower.log.read_producer_batches = unreadable  # type: ignore[method-assign]
    assert follower.on_fetch_response(req, resp, 0) == 0
    assert follower.follower_state == FAILED and 0 < follower.log_end_offset < leader.log_end_offset
    assert follower.producer_state.map_end_offset == follower.log_end_offset
    assert _producers(follower) == _expected_producers(leader, follower.log_end_offset, tmp_path) != {}
    follower._check()
    before = _producers(follower)
    cut = follower.log_end_offset - 1
    follower.log.truncate_to(cut)  # the reload cannot read the log: entries below the new end stay
    assert reads  # the reload did try to read the log back (and failed)
    leo = follower.log_end_offset
    assert leo <= cut and follower.producer_state.map_end_offset == leo
    after = _producers(follower)
    assert all(b.last_offset < leo and b in before[pid] for pid, bs in after.items() for b in bs)
    assert any(b.last_offset >= leo for bs in before.values() for b in bs)  # something was above the cut
    follower._check()
