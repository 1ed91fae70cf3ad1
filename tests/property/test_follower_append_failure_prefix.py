"""Property: whatever fails during a follower's append, its state is a prefix of the leader's log.

Random chunks (batch count and sizes, idempotent producers or none), a random
follower ``segment_bytes`` (so the append may be split into runs, or a batch
may be too large for the follower) and a disk that fails at a random write or
fsync. The model: the follower holds the leader's batches up to some batch
boundary, and its producer state is the one rebuilt from exactly those
batches; ``FETCHING`` iff it holds them all; a failure is marked a disk error
iff the disk failed. The log reopened from its files agrees.
"""
from __future__ import annotations

import errno
import os
import tempfile
from typing import Dict, List, Optional, Tuple

from hypothesis import given
from hypothesis import strategies as st

from pylog.replication.messages import FetchRequest, PartitionState
from pylog.replication.partition import FAILED, FETCHING, Partition, records_equal_below
from pylog.storage.fileio import SimulatedDiskIO
from pylog.storage.log import Log
from pylog.storage.producer_state import ProducerStateManager
from pylog.record import encode_batch

_STATE = PartitionState("t", 0, (0, 1), 0, 0, (0, 1), 0, 1)

batches_st = st.lists(st.tuples(st.sampled_from([-1, 7, 8]), st.integers(1, 4), st.integers(1, 400)),
                      min_size=1, max_size=16)
fault_st = st.one_of(st.none(), st.tuples(st.sampled_from(["write", "fsync"]), st.integers(0, 40)))


def _producers(ps: ProducerStateManager) -> Dict[int, List[object]]:
    return {pid: list(e.batches) for pid, e in ps.producers.items() if e.batches}


@given(batches=batches_st, segment_bytes=st.integers(200, 6_000), fault=fault_st, flush_each=st.booleans())
def test_a_failed_follower_append_leaves_a_prefix_of_the_leader_with_matching_state(
        batches: List[Tuple[int, int, int]], segment_bytes: int, fault: Optional[Tuple[str, int]],
        flush_each: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        leader = Partition(0, Log.open(os.path.join(tmp, "l", "t-0"), clock_ms=lambda: 0))
        leader.apply_state(_STATE, 0)
        seqs = {7: 0, 8: 0}
        for i, (pid, n, size) in enumerate(batches):
            data = encode_batch([bytes([65 + i % 26]) * size for _ in range(n)], now_ms=1_700_000_000_000 + i,
                                producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                base_sequence=seqs.get(pid, -1))
            if pid >= 0:
                seqs[pid] += n
            leader.append_as_leader(data, 1, 0)
        end = leader.log_end_offset
        boundaries = {0} | {b.last_offset + 1 for b in leader.log.read_batches(0, 1 << 24)}

        disk = SimulatedDiskIO(fail_errno=errno.EIO)
        path = os.path.join(tmp, "f", "t-0")
        follower = Partition(1, Log.open(path, clock_ms=lambda: 0, file_io=disk, segment_bytes=segment_bytes,
                                         flush_messages=1 if flush_each else None))
        follower.apply_state(_STATE, 0)
        follower.follower_state = FETCHING
        if fault is not None:
            kind, k = fault
            if kind == "write":
                disk.fail_write_after = disk.writes + k
            else:
                disk.fail_fsync_after = disk.fsyncs + k
        req = FetchRequest(1, "t", 0, 0, 0, 1)
        resp, _ = leader.handle_fetch(req, 0)
        follower.on_fetch_response(req, resp, 0)  # never raises
        disk_failed = (disk.fail_write_after is not None and disk.writes > disk.fail_write_after) or (
            disk.fail_fsync_after is not None and disk.fsyncs > disk.fail_fsync_after)
        disk.fail_write_after = disk.fail_fsync_after = None

        leo = follower.log_end_offset
        assert leo in boundaries
        assert records_equal_below(leader.log, follower.log, leo) is None
        model = ProducerStateManager(os.path.join(tmp, "model"))
        model.update_from_infos(leader.log.read_batch_infos(0, leo))
        assert _producers(follower.producer_state) == _producers(model)
        assert follower.producer_state.map_end_offset == leo
        if follower.follower_state == FETCHING:
            assert leo == end
        else:
            assert follower.follower_state == FAILED and leo < end
            assert follower.storage_failed == disk_failed, follower.fetch_failure
        follower._check()
        follower.log._check()

        follower.log.close()
        with Log.open(path, clock_ms=lambda: 0, segment_bytes=segment_bytes) as again:
            assert again.log_end_offset == leo
            assert records_equal_below(leader.log, again, leo) is None
        leader.log.close()
