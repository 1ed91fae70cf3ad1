"""Cluster.close on a failing disk: a named error, every broker stopped, the directory reopens with every acknowledged record."""
from __future__ import annotations

import errno

import pytest

from pylog import errors
from pylog.cluster import Cluster


def test_close_with_a_failing_fsync_stops_every_broker_and_reopens(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=31)
    c.create_topic("t", partitions=3, replication_factor=3, min_insync_replicas=2)
    p = c.producer(acks="all")
    acked = {}
    for i in range(30):
        m = p.send("t", b"v%d" % i, partition=i % 3).result()
        acked[(m.partition, m.offset)] = b"v%d" % i
    bad = c.brokers[1].disk
    bad.fail_errno = errno.EIO
    bad.fail_fsync_after = bad.fsyncs
    with pytest.raises(errors.KafkaStorageError) as info:
        c.close()
    assert "broker 1" in str(info.value)
    assert not any(b.running for b in c.brokers.values())
    bad.fail_fsync_after = None

    c2 = Cluster(tmp_path, brokers=3, seed=32)
    try:
        cons = c2.consumer(topics=["t"])
        got = {}
        while len(got) < len(acked):
            recs = cons.poll(timeout=2.0)
            assert recs, f"stalled with {len(got)} of {len(acked)}"
            got.update(((r.partition, r.offset), r.value) for r in recs)
        assert got == acked
    finally:
        c2.close()

