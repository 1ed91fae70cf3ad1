"""A follower whose append fails (a failing disk, a batch its config refuses) stops fetching that partition.

Nothing escapes the broker's message handling, the leader shrinks the ISR after
``replica_lag_time_max_ms`` as for any stuck follower, ``acks=all`` producers keep
going once ``min_insync_replicas`` allows, nothing acknowledged is lost, and a
restart of the failed broker recovers it into the ISR (docs/replication.md,
"A follower's append fails").
"""
from __future__ import annotations

import errno

from pylog.cluster import Cluster
from pylog.replication.partition import FAILED, records_equal_below


def read_all(c: Cluster, topic: str, expect: int):
    cons = c.consumer(None, [topic], fetch_max_wait_ms=50)
    got = {}
    for _ in range(200):
        for r in cons.poll(0.2):
            got[r.offset] = r.value
        if len(got) >= expect:
            break
    cons.close()
    return got


def test_follower_disk_full_leaves_isr_keeps_acked_records_and_recovers_on_restart(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=11)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked = {}
        for i in range(20):
            m = p.send("t", b"a%d" % i).result()
            acked[m.offset] = b"a%d" % i
        leader = c.leader_of("t")
        f = next(r for r in c.describe("t")[0].replicas if r != leader)
        disk = c.brokers[f].disk
        disk.fail_errno = errno.ENOSPC
        disk.fail_write_after = disk.writes  # every write from now on fails
        for i in range(20):
            m = p.send("t", b"b%d" % i).result()  # nothing escapes; goes on once the ISR shrinks
            acked[m.offset] = b"b%d" % i
        d = c.describe("t")[0]
        assert f not in d.isr and len(d.isr) == 2, d
        fp = c.brokers[f].rm.partitions[("t", 0)]
        assert fp.follower_state == FAILED
        assert fp.log_end_offset == 20 and fp.high_watermark <= 20
        fp._check()  # producer state, HW and LEO agree with what is in the log
        lp = c.brokers[leader].rm.partitions[("t", 0)]
        assert lp.isr_shrinks >= 1 and lp.high_watermark == 40
        assert records_equal_below(lp.log, fp.log, fp.log_end_offset) is None
        assert read_all(c, "t", len(acked)) == acked

        disk.fail_write_after = None  # the disk is replaced / space freed; restart the broker
        c.stop_broker(f, clean=False)
        c.start_broker(f)
        assert c.scheduler.wait_until(lambda: f in c.store.partitions[("t", 0)].isr, 60_000)
        fp = c.brokers[f].rm.partitions[("t", 0)]
        assert fp.follower_state != FAILED and fp.log_end_offset == 40
        assert records_equal_below(lp.log, fp.log, 40) is None
        for i in range(5):
            m = p.send("t", b"c%d" % i).result()
            acked[m.offset] = b"c%d" % i
        assert read_all(c, "t", len(acked)) == acked
        c._check()
    finally:
        for b in c.brokers.values():
            b.disk.fail_write_after = None
        c.close()
