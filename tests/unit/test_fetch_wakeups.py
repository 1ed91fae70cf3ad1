"""Parked fetches woken by produces are answered once per scheduler pass (ReplicaManager.fetch_wakeups).

A produce that appends while fetches are parked on its partition no longer
answers them inline: it marks the partition, and the broker runs
``complete_fetch_wakeups`` after the messages already queued. A producer's
pipelined requests are then all appended first, and each parked follower gets
every new batch in one response (one fetch round for several batches, as a
Kafka follower gets whatever accumulated while its fetch was in flight).
"""
from __future__ import annotations

import os

from pylog.cluster import Cluster
from pylog.replication.messages import (
    FetchRequest, FetchResponse, LeaderAndIsrRequest, ReplicaFetchResponse, PartitionState, ProduceRequest, ProduceResponse,
)
from pylog.replication.replica_manager import ReplicaManager, ReplicaManagerConfig
from pylog.record import encode_batch, scan


def _rm(tmp_path) -> ReplicaManager:
    rm = ReplicaManager(0, os.path.join(tmp_path, "broker-0"), clock_ms=lambda: 0,
                        config=ReplicaManagerConfig(replica_lag_time_max_ms=1_000))
    state = PartitionState("t", 0, (0, 1, 2), 0, 0, (0, 1, 2), 0, 2)
    rm.handle(9, LeaderAndIsrRequest(9, 1, (state,)), 0)
    return rm


def _park(rm: ReplicaManager, follower: int, offset: int, corr: int) -> None:
    out = rm.handle(follower, FetchRequest(follower, "t", 0, offset, 0, corr, max_wait_ms=500), 0).items
    assert out == [], out  # nothing to send yet: parked


def test_pipelined_produces_reach_each_parked_follower_in_one_response(tmp_path) -> None:
    rm = _rm(tmp_path)
    _park(rm, 1, 0, 11)
    _park(rm, 2, 0, 12)
    for i in range(3):
        batch = encode_batch([b"a%d" % i, b"b%d" % i], now_ms=1_700_000_000_000)
        out = rm.handle("client", ProduceRequest("t", 0, batch, -1, 5_000, 100 + i), 0).items
        assert not [m for _, m in out if isinstance(m, FetchResponse)], "answered inline, before the pass ended"
    assert rm.fetch_wakeups == {("t", 0)}
    out = rm.complete_fetch_wakeups(0).items
    got = {dst: m for dst, m in out}
    assert set(got) == {1, 2} and len(out) == 2
    for follower, corr in ((1, 11), (2, 12)):
        resp = got[follower]
        assert isinstance(resp, FetchResponse) and resp.correlation_id == corr and resp.error is None
        batches = scan(resp.records).batches
        assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 1), (2, 3), (4, 5)]
    assert rm.fetch_wakeups == set()
    assert rm.complete_fetch_wakeups(0).items == []  # answered once
    rm._check()


def test_a_produce_with_nothing_parked_marks_nothing(tmp_path) -> None:
    rm = _rm(tmp_path)
    rm.handle("client", ProduceRequest("t", 0, encode_batch([b"x"], now_ms=0), -1, 5_000, 1), 0)
    assert rm.fetch_wakeups == set()


def test_acks_all_completes_once_the_followers_fetch_what_the_wakeup_sent(tmp_path) -> None:
    rm = _rm(tmp_path)
    _park(rm, 1, 0, 11)
    _park(rm, 2, 0, 12)
    rm.handle("client", ProduceRequest("t", 0, encode_batch([b"x"], now_ms=0), -1, 5_000, 7), 0)
    assert len(rm.complete_fetch_wakeups(0).items) == 2
    out = rm.handle(1, FetchRequest(1, "t", 0, 1, 0, 13, max_wait_ms=500), 0).items
    assert not [m for _, m in out if isinstance(m, ProduceResponse)]  # the ISR is 0, 1, 2: 2 has not fetched
    out = rm.handle(2, FetchRequest(2, "t", 0, 1, 0, 14, max_wait_ms=500), 0).items
    answers = [m for _, m in out if isinstance(m, ProduceResponse)]
    assert len(answers) == 1 and answers[0].correlation_id == 7 and answers[0].error is None
    rm._check()


def test_closed_replica_manager_answers_nothing(tmp_path) -> None:
    rm = _rm(tmp_path)
    _park(rm, 1, 0, 11)
    rm.handle("client", ProduceRequest("t", 0, encode_batch([b"x"], now_ms=0), -1, 5_000, 7), 0)
    rm.shutdown(clean=True)
    assert rm.complete_fetch_wakeups(0).items == [] and rm.fetch_wakeups == set()


def test_real_time_cluster_replicates_every_record_with_at_most_one_data_response_per_batch(tmp_path) -> None:
    """End to end on the real-time runtime: a producer with requests in flight, RF 3, acks=all.
    Every record is acknowledged at its offset and below the HW, and no follower gets more
    responses with data than there are batches (how many fewer depends on how many requests
    the producer had in flight, i.e. on timing, so only the bound is asserted)."""
    with Cluster(str(tmp_path), brokers=3) as c:
        c.create_topic("b", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", linger_ms=0)
        data_responses = [0]
        transport = c.transport
        deliver = transport._deliver

        def counting(src, dst, msg, generation=-1):
            if msg.__class__ is FetchResponse and msg.records:
                data_responses[0] += 1
            elif msg.__class__ is ReplicaFetchResponse:  # followers fetch per broker pair (one entry per partition)
                data_responses[0] += sum(1 for _, r in msg.partitions if r.records)
            deliver(src, dst, msg, generation)

        transport._deliver = counting  # type: ignore[method-assign]
        b0 = p.batches_sent
        futs = [p.send("b", b"v%d" % i + b"x" * 100, partition=0) for i in range(20_000)]
        offsets = [f.result(timeout=60).offset for f in futs]
        batches = p.batches_sent - b0
        assert offsets == list(range(offsets[0], offsets[0] + 20_000))
        hw = c.describe("b")[0].high_watermark
        assert hw >= offsets[-1] + 1
        assert 0 < data_responses[0] <= 2 * batches, (data_responses[0], batches)
        p.close()
