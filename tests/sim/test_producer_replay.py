"""A seeded simulation with a producer replays exactly, whatever the heap looks like."""
from __future__ import annotations

import gc

from pylog.cluster import Cluster


def _run(path, seed):
    c = Cluster(path, brokers=3, seed=seed)
    try:
        c.create_topic("a", partitions=6, replication_factor=3, min_insync_replicas=2)
        c.create_topic("b", partitions=6, replication_factor=2, min_insync_replicas=1)
        prod = c.producer(acks="all", linger_ms=5, batch_size=512)
        futs = []
        for i in range(240):
            topic = "a" if i % 3 else "b"
            futs.append(prod.send(topic, b"v%d" % i, partition=(i * 7) % 6))
            if i % 40 == 39:
                c.advance(3)
        return [(f.result().topic, f.result().partition, f.result().offset, f.result().timestamp) for f in futs] + [
            c.now_ms]
    finally:
        c.close()


def test_same_seed_same_acks_and_times_with_a_different_heap(tmp_path):
    first = _run(tmp_path / "one", 99)
    # Shuffle the heap: objects created now take the addresses the first run's objects had.
    junk = [object() for _ in range(50_000)] + [[i] for i in range(10_000)]
    gc.collect()
    second = _run(tmp_path / "two", 99)
    del junk
    assert first == second
