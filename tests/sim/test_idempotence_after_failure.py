"""An idempotent producer keeps working after a batch failed for good (no sequence gap left behind)."""
from __future__ import annotations

import errno

import pytest

from pylog import errors
from pylog.cluster import Cluster


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_same_producer_sends_again_after_a_storage_error(tmp_path, where):
    c = Cluster(tmp_path, brokers=3, seed=8, log_config={"flush_messages": 1})
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")  # idempotent by default
        acked = {p.send("t", b"a%d" % i).result().offset: b"a%d" % i for i in range(3)}
        disk = c.brokers[c.leader_of("t", 0)].disk
        disk.fail_errno = errno.EIO
        if where == "write":
            disk.fail_write_after = disk.writes
        else:
            disk.fail_fsync_after = disk.fsyncs
        try:
            with pytest.raises(errors.KafkaStorageError):
                p.send("t", b"never-acked").result()
        finally:
            disk.fail_write_after = disk.fail_fsync_after = None
        c.advance(3_000)
        # The same producer: its next records are written (a fresh producer id, no gap refused).
        for i in range(3):
            meta = p.send("t", b"b%d" % i).result()
            acked[meta.offset] = b"b%d" % i
        cons = c.consumer(topics=["t"])
        got = {}
        while len(got) < len(acked):
            recs = cons.poll(timeout=2.0)
            assert recs, f"stalled with {sorted(got)}"
            got.update((r.offset, r.value) for r in recs if r.value != b"never-acked")
        assert {o: v for o, v in got.items() if o in acked} == acked
    finally:
        c.close()
