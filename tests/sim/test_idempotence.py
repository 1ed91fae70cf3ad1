"""Idempotent producer in a simulated cluster: lost acknowledgements, leader failover, broker restarts.

Each test runs a control without idempotence where that shows the fault really
causes retries that duplicate records, so "no duplicate" is not vacuous.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import List

import pytest

from pylog.cluster import Cluster


def log_values(c: Cluster, topic: str, broker: int = None, partition: int = 0) -> List[bytes]:
    b = c.leader_of(topic, partition) if broker is None else broker
    log = c.brokers[b].rm.partitions[(topic, partition)].log
    return [r.value for r in log.read(0, 1 << 30)] if log.log_end_offset else []


def lose_acks(c: Cluster, producer, broker: int) -> None:
    """Drop everything ``broker`` sends to ``producer``: requests arrive and are written, replies are lost."""
    c.transport.partition([broker], [producer._node.node_id], one_way=True)


@pytest.mark.parametrize("idempotent", [True, False])
def test_lost_acks_cause_retries_but_no_duplicates(tmp_path, idempotent):
    c = Cluster(tmp_path, brokers=3, seed=11)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", enable_idempotence=idempotent, request_timeout_ms=400, retry_backoff_ms=50,
                       linger_ms=5)
        p.send("t", b"first").result()
        leader = c.leader_of("t")
        lose_acks(c, p, leader)
        futs = [p.send("t", b"v%d" % i) for i in range(30)]
        c.advance(3_000)  # several request timeouts: every batch is resent
        assert p.retries > 0 and not any(f.done() for f in futs)
        c.heal_network()
        metas = [f.result() for f in futs]
        values = log_values(c, "t")
        if not idempotent:
            assert len(values) > 31  # the control: the same faults duplicate without idempotence
            return
        assert values == [b"first"] + [b"v%d" % i for i in range(30)]
        assert [m.offset for m in metas] == list(range(1, 31))  # the original offsets, from the dedup
        assert c.brokers[leader].rm.partitions[("t", 0)].duplicates > 0  # retries reached it and were recognised
        c._check()
    finally:
        c.close()


def test_max_in_flight_with_lossy_network_keeps_order_and_writes_once(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=5, loss=0.15, request_timeout_ms=1_000)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", max_in_flight=5, batch_size=300, request_timeout_ms=300, retry_backoff_ms=20)
        futs = [p.send("t", b"%04d" % i) for i in range(300)]
        metas = [f.result() for f in futs]
        assert p.retries > 0  # the lossy network really made it retry
        values = log_values(c, "t")
        assert values == [b"%04d" % i for i in range(300)]  # in send order, each once
        assert [m.offset for m in metas] == list(range(300))
    finally:
        c.close()


def test_leader_failover_mid_stream_no_duplicates_no_gaps(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=21)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", request_timeout_ms=500, retry_backoff_ms=50, delivery_timeout_ms=60_000)
        futs = [p.send("t", b"a%d" % i) for i in range(40)]
        c.advance(5)
        old = c.leader_of("t")
        lose_acks(c, p, old)  # whatever the old leader wrote is never acknowledged by it
        futs += [p.send("t", b"b%d" % i) for i in range(40)]
        c.advance(30)
        c.stop_broker(old, clean=False)
        futs += [p.send("t", b"c%d" % i) for i in range(40)]
        c.heal_network()
        metas = [f.result() for f in futs]
        new = c.leader_of("t")
        assert new != old
        values = log_values(c, "t")
        counts = Counter(values)
        assert all(n == 1 for n in counts.values()), [v for v, n in counts.items() if n > 1]
        sent = [b"a%d" % i for i in range(40)] + [b"b%d" % i for i in range(40)] + [b"c%d" % i for i in range(40)]
        assert values == sent  # every acknowledged record, once, in order: no gap
        assert [values[m.offset] for m in metas] == sent
        c.start_broker(old)
        c.advance(3_000)
        c._check()
    finally:
        c.close()


@pytest.mark.parametrize("clean", [True, False])
def test_restart_keeps_producer_state(tmp_path, clean):
    """A retry that reaches a restarted leader is still recognised: from the ``.snapshot`` written at a
    clean shutdown, or (after a crash, fsync per message) from replaying the log."""
    c = Cluster(tmp_path, brokers=1, seed=3, log_config={"flush_messages": 1})
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks="all", request_timeout_ms=300, retry_backoff_ms=100, delivery_timeout_ms=60_000)
        for i in range(3):
            p.send("t", b"r%d" % i).result()
        lose_acks(c, p, 0)
        fut = p.send("t", b"lost-ack")
        c.advance(50)  # written, acknowledgement dropped
        assert log_values(c, "t", 0) == [b"r0", b"r1", b"r2", b"lost-ack"] and not fut.done()
        c.stop_broker(0, clean=clean)
        pdir = os.path.join(str(tmp_path), "broker-0", "t-0")
        snaps = sorted(n for n in os.listdir(pdir) if n.endswith(".snapshot"))
        if clean:
            assert snaps == ["00000000000000000004.snapshot"]
        c.heal_network()
        c.start_broker(0)
        meta = fut.result()
        assert meta.offset == 3  # the original offset: deduplicated by the restarted broker
        assert c.brokers[0].rm.partitions[("t", 0)].duplicates == 1  # the retry did arrive, and was recognised
        assert log_values(c, "t", 0) == [b"r0", b"r1", b"r2", b"lost-ack"]
        assert p.send("t", b"next").result().offset == 4
    finally:
        c.close()


@pytest.mark.parametrize("seed", range(6))
def test_random_faults_never_duplicate_and_keep_every_acknowledged_record(tmp_path, seed):
    """Crashes, restarts and network cuts at seeded random moments while 200 records are in flight."""
    import random

    rng = random.Random(seed)
    c = Cluster(tmp_path, brokers=3, seed=seed, loss=0.03, request_timeout_ms=1_000)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", max_in_flight=5, batch_size=400, request_timeout_ms=400, retry_backoff_ms=30,
                       delivery_timeout_ms=120_000)
        futs = []
        down = None
        for step in range(20):
            futs += [p.send("t", b"s%d-%d" % (step, i)) for i in range(10)]
            c.advance(rng.randint(1, 40))
            fault = rng.random()
            if down is None and fault < 0.3:
                down = c.leader_of("t") if rng.random() < 0.7 else rng.randrange(3)
                if down >= 0:
                    c.stop_broker(down, clean=False)
                else:
                    down = None
            elif down is not None and fault < 0.6:
                c.start_broker(down)
                down = None
            elif fault < 0.7:
                c.transport.partition([c.leader_of("t")], [p._node.node_id], one_way=True)
            else:
                c.heal_network()
        c.heal_network()
        if down is not None:
            c.start_broker(down)
        outcomes = []
        for f in futs:
            try:
                outcomes.append(f.result().offset)
            except Exception:  # noqa: BLE001 - a record may fail for good; it must then not be duplicated
                outcomes.append(None)
        c.advance(5_000)
        values = log_values(c, "t")
        counts = Counter(values)
        assert all(n == 1 for n in counts.values()), (seed, [v for v, n in counts.items() if n > 1])
        sent = [b"s%d-%d" % (s, i) for s in range(20) for i in range(10)]
        for v, off in zip(sent, outcomes):
            if off is not None:
                assert values[off] == v, (seed, v, off)
        acked = [v for v, off in zip(sent, outcomes) if off is not None]
        assert [v for v in values if v in set(acked)] == acked  # acknowledged records in send order
        assert len(acked) > 100
        c._check()
    finally:
        c.close()
