"""The follower's side of a fetch round (``Partition.on_fetch_response``) on multi-batch chunks.

The follower appends what it fetched in one pass (``Log.append_batches``), and
the log records the batches' producer ids in its producer state from the
headers that pass read; these tests hold the result to what the leader has.
"""
from __future__ import annotations

import os

from pylog.replication.messages import FetchRequest, PartitionState
from pylog.replication.partition import FETCHING, Partition
from pylog.storage.log import Log
from pylog.record import encode_batch


def _partition(tmp_path, broker: int) -> Partition:
    return Partition(broker, Log.open(os.path.join(tmp_path, f"b{broker}", "t-0"), clock_ms=lambda: 0))


def _state(leader: int, epoch: int = 0) -> PartitionState:
    return PartitionState("t", 0, (0, 1), leader, epoch, (0, 1), 0, 1)


def _producer_batches(p: Partition):
    return {pid: list(e.batches) for pid, e in p.producer_state.producers.items()}


def test_a_multi_batch_fetch_appends_every_batch_and_the_same_producer_state(tmp_path) -> None:
    leader, follower = _partition(tmp_path, 0), _partition(tmp_path, 1)
    leader.apply_state(_state(0), 0)
    follower.apply_state(_state(0), 0)
    follower.follower_state = FETCHING
    seqs = {7: 0, 9: 0}
    for i, (pid, n) in enumerate([(7, 3), (9, 2), (-1, 4), (7, 1), (9, 5)]):
        seq = seqs.get(pid, -1)
        data = encode_batch([b"r%d" % j for j in range(n)], now_ms=1_700_000_000_000 + i, producer_id=pid,
                            producer_epoch=0 if pid >= 0 else -1, base_sequence=seq)
        if pid >= 0:
            seqs[pid] += n
        leader.append_as_leader(data, 1, 0)
    req = FetchRequest(1, "t", 0, 0, 0, 1)
    resp, _ = leader.handle_fetch(req, 0)
    assert resp.error is None
    assert follower.on_fetch_response(req, resp, 0) == 15  # the records appended
    assert follower.log_end_offset == leader.log_end_offset == 15
    assert _producer_batches(follower) == _producer_batches(leader)
    assert follower.producer_state.map_end_offset == 15
    follower._check()
    # Nothing new: an empty response appends nothing.
    req2 = FetchRequest(1, "t", 0, 15, 0, 2)
    resp2, _ = leader.handle_fetch(req2, 0)
    assert resp2.records == b"" and follower.on_fetch_response(req2, resp2, 0) == 0
    assert leader.high_watermark == 15
