"""Many partitions on the seeded simulator (issue 18, item 4).

* Default suite: an idle cluster sends the same number of messages per second whatever its number
  of partitions (followers fetch per broker pair with fetch sessions; heartbeats carry no
  per-partition work), and a produce to every partition is replicated and acknowledged.
* Soak (``PYLOG_SOAK=1``): 10,000 partitions - created, every partition written with acks=all, a
  broker crashed and restarted, the ISR back to full, the directory reopened from its metadata.
  Replay: ``PYLOG_SOAK=1 .venv/bin/python -m pytest tests/sim/test_sim_many_partitions.py -m soak -q``
  (``PYLOG_SOAK_PARTITIONS`` to choose the count).
"""
from __future__ import annotations

import os
import resource
from collections import Counter
from typing import Dict

import pytest

import pylog
from pylog.replication.messages import ReplicaFetchRequest, ReplicaFetchResponse


def _count_messages(c: pylog.Cluster) -> Counter:
    counts: Counter = Counter()
    send = c.transport.send

    def counting(src, dst, msg):
        counts[type(msg).__name__] += 1
        return send(src, dst, msg)

    c.transport.send = counting  # type: ignore[method-assign]
    return counts


def _idle_messages(tmp_path, partitions: int, seed: int = 4) -> Dict[str, int]:
    c = pylog.Cluster(str(tmp_path / f"c{partitions}"), brokers=3, seed=seed)
    try:
        c.create_topic("t", partitions=partitions, replication_factor=3, min_insync_replicas=2)
        c.advance(5_000)  # settle: every follower caught up, sessions open
        counts = _count_messages(c)
        c.advance(20_000)
        c._check()
        return dict(counts)
    finally:
        c.close()


def test_idle_traffic_does_not_grow_with_the_number_of_partitions(tmp_path) -> None:
    few = _idle_messages(tmp_path, 10)
    many = _idle_messages(tmp_path, 300)
    fetches = lambda d: d.get(ReplicaFetchRequest.__name__, 0) + d.get(ReplicaFetchResponse.__name__, 0)
    # 6 (follower, leader) pairs, one long-poll each per replica_fetch_max_wait_ms (500 ms) over 20 s
    assert fetches(many) <= 6 * 2 * (20_000 // 500) + 12
    assert fetches(many) <= fetches(few) * 1.1 + 12
    assert sum(many.values()) <= sum(few.values()) * 1.1 + 20, (few, many)
    assert "FetchRequest" not in many and "FetchResponse" not in many  # no per-partition follower fetch


def test_a_produce_to_every_partition_is_replicated_and_acknowledged(tmp_path) -> None:
    n = 200
    c = pylog.Cluster(str(tmp_path / "c"), brokers=3, seed=8)
    try:
        c.create_topic("t", partitions=n, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        futs = [p.send("t", b"v%d" % i, partition=i) for i in range(n)]
        assert [f.result().offset for f in futs] == [0] * n
        c.advance(2_000)
        info = c.describe("t")
        assert all(pi.high_watermark == 1 and len(pi.isr) == 3 for pi in info)
        assert all(set(pi.log_end_offsets.values()) == {1} for pi in info)
        c._check()
    finally:
        c.close()


def _rf_for(partitions: int) -> int:
    """RF 3 when this process may open a descriptor per replica (about one each, until issue 18's
    segment-file LRU lands), else the largest RF it can (the limit is printed)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    rf = 3
    while rf > 1 and partitions * rf * 1.15 + 2_000 > limit:
        rf -= 1
    print(f"{partitions} partitions: RF {rf} (descriptor limit {limit})")
    return rf


@pytest.mark.soak
@pytest.mark.skipif(not os.environ.get("PYLOG_SOAK"), reason="soak run: set PYLOG_SOAK=1")
def test_ten_thousand_partitions(tmp_path) -> None:
    n = int(os.environ.get("PYLOG_SOAK_PARTITIONS", "10000"))
    rf = _rf_for(n)
    path = str(tmp_path / "c")
    c = pylog.Cluster(path, brokers=3, seed=18)
    try:
        c.create_topic("t", partitions=n, replication_factor=rf, min_insync_replicas=min(2, rf))
        p = c.producer(acks="all")
        futs = [p.send("t", b"v%d" % i, partition=i) for i in range(n)]
        assert [f.result().offset for f in futs] == [0] * n
        c.advance(5_000)
        counts = _count_messages(c)
        c.advance(10_000)
        assert counts["ReplicaFetchRequest"] <= 6 * (10_000 // 500) + 12, counts  # idle: per pair, not per partition
        c._check()
        victim = 1
        c.stop_broker(victim, clean=False)
        c.advance(10_000)
        led = {pi.partition: pi.leader for pi in c.describe("t")}
        # with RF 1 the victim's partitions are offline until it restarts; with RF >= 2 none is
        written = [i for i in range(0, n, 97) if led[i] not in (victim, -1)]
        assert rf == 1 or len(written) == len(range(0, n, 97))
        for i in written:
            assert p.send("t", b"after", partition=i).result().offset == 1
        c.start_broker(victim)
        c.advance(30_000)
        info = c.describe("t")
        assert all(len(pi.isr) == rf for pi in info), "the restarted broker rejoined every ISR"
        wrote = set(written)
        for pi in info:
            if rf == 1 and pi.replicas == (victim,):
                # its only replica crashed: what it had not fsynced is gone (acks=all promised the ISR,
                # which was that replica alone; docs/replication.md, "Durability: acks versus fsync")
                assert pi.high_watermark in (0, 1), pi
            else:
                assert pi.high_watermark == (2 if pi.partition in wrote else 1), pi
        c._check()
        p.close()
    finally:
        c.close()
    c2 = pylog.Cluster(path, brokers=3, seed=19)
    try:
        assert len(c2.describe("t")) == n
        assert c2.store.topics["t"].replication_factor == rf
    finally:
        c2.close()
