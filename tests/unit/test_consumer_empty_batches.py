"""The consumer moves past fetched batches that yield no records.

The log cleaner keeps a fully superseded batch as an *empty* batch when it is
its producer's last data batch (the producer state needs it), and a partly
cleaned batch keeps its last offset while losing the records at its end. A
fetch at such a batch hands the consumer no record; the next fetch position
must still move to the batch's last offset + 1 (below the HW), or the consumer
refetches the same batch forever. ``max_partition_fetch_bytes=1`` makes every
fetch response exactly one batch, so each such batch is the last one of its
response. Simulated cluster (virtual time): fetch requests are counted with the
consumer's ``pylog_consumer_fetch_requests_total`` metric.
"""
from __future__ import annotations

from pylog.cluster import Cluster
from pylog.metrics import find
from pylog.storage.cleaner import iter_segment_batches

COMPACT = {"cleanup_policy": "compact", "segment_bytes": 75, "log_cleanup_interval_ms": 0,
           "min_cleanable_dirty_ratio": 0.0}


def _batches(c: Cluster, topic: str):
    log = c.brokers[c.leader_of(topic)].rm.partitions[(topic, 0)].log
    out = []
    for seg in log.segments.values():
        out += [b.info for b in iter_segment_batches(seg)]
    return out


def _fetches(cons) -> float:
    return find(cons.metrics(), "pylog_consumer_fetch_requests_total")


def _drain(cons, want: int, rounds: int = 20):
    got = []
    for _ in range(rounds):
        got += cons.poll(0.5)
        if len(got) >= want:
            break
    return got


def test_empty_batch_kept_by_the_cleaner_does_not_stall_the_consumer(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=31)
    try:
        c.create_topic("c", partitions=1, replication_factor=1, config=COMPACT)
        idem = c.producer(acks="all", linger_ms=0)  # idempotent: has a producer id
        plain = c.producer(acks=1, linger_ms=0)  # no producer id
        assert idem.send("c", b"old", key=b"a", partition=0).result().offset == 0
        assert plain.send("c", b"new", key=b"a", partition=0).result().offset == 1
        assert plain.send("c", b"b", key=b"b", partition=0).result().offset == 2
        c.advance(3 * Cluster.log_maintenance_check_ms)
        infos = _batches(c, "c")
        assert (infos[0].base_offset, infos[0].last_offset, infos[0].records_count) == (0, 0, 0)  # the empty batch
        cons = c.consumer(None, max_partition_fetch_bytes=1, fetch_max_wait_ms=200)
        cons.assign([("c", 0)])
        got = _drain(cons, 2)
        assert [(r.offset, r.value) for r in got] == [(1, b"new"), (2, b"b")]
        assert cons.position("c", 0) == 3
        # Caught up: further polls long-poll (fetch_max_wait_ms) instead of refetching in a loop.
        before = _fetches(cons)
        for _ in range(4):
            assert cons.poll(0.5) == []
        assert _fetches(cons) - before <= 2 * 4 * 500 / 200 + 2
    finally:
        c.close()


def test_batch_whose_remaining_records_are_below_the_position_is_skipped(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=32)
    try:
        c.create_topic("c", partitions=1, replication_factor=1,
                       config=dict(COMPACT, segment_bytes=4096))
        plain = c.producer(acks=1, linger_ms=0)
        futs = [plain.send("c", v, key=k, partition=0) for k, v in ((b"a", b"1"), (b"b", b"1"), (b"c", b"1"))]
        plain.flush()
        assert [f.result().offset for f in futs] == [0, 1, 2]
        infos = _batches(c, "c")
        assert [(i.base_offset, i.last_offset) for i in infos] == [(0, 2)]  # one batch of three records
        # Supersede c; roll both out of the active segment (the cleaner cleans neither it nor by its keys).
        log = c.brokers[0].rm.partitions[("c", 0)].log
        log.roll()
        assert plain.send("c", b"2", key=b"c", partition=0).result().offset == 3
        log.roll()
        assert plain.send("c", b"1", key=b"d", partition=0).result().offset == 4
        c.advance(3 * Cluster.log_maintenance_check_ms)
        infos = _batches(c, "c")
        assert (infos[0].base_offset, infos[0].last_offset, infos[0].records_count) == (0, 2, 2)  # c@2 removed
        cons = c.consumer(None, max_partition_fetch_bytes=1, fetch_max_wait_ms=200)
        cons.assign([("c", 0)])
        cons.seek("c", 0, 2)  # inside the batch, past its remaining records
        got = _drain(cons, 2)
        assert [(r.offset, r.key, r.value) for r in got] == [(3, b"c", b"2"), (4, b"d", b"1")]
        assert cons.position("c", 0) == 5
        before = _fetches(cons)
        for _ in range(4):
            assert cons.poll(0.5) == []
        assert _fetches(cons) - before <= 2 * 4 * 500 / 200 + 2
    finally:
        c.close()
