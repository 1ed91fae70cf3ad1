"""A follower whose append fails (a failing disk, a batch its config refuses) stops fetching that partition.

Nothing escapes the broker's message handling, the leader shrinks the ISR after
``replica_lag_time_max_ms`` as for any stuck follower, ``acks=all`` producers keep
going once ``min_insync_replicas`` allows, nothing acknowledged is lost, and a
restart of the failed broker recovers it into the ISR (docs/replication.md,
"A follower's append fails").
"""
from __future__ import annotations

import contextlib
import errno
from typing import Iterator

from pylog import errors
from pylog.cluster import Cluster
from pylog.replication.partition import FAILED, FETCHING, records_equal_below


@contextlib.contextmanager
def cluster_healing_disks(path, **kwargs: object) -> Iterator[Cluster]:
    """A simulated cluster whose disks all work again before it closes (a clean close writes)."""
    c = Cluster(path, **kwargs)
    try:
        yield c
    finally:
        for b in c.brokers.values():
            b.disk.fail_write_after = None
        c.close()


def send_acked(p, topic: str, prefix: bytes, n: int, acked: dict, start: int = 0, timeout=None) -> None:
    """Send ``prefix + i`` for i in [start, start + n) one at a time; record each acknowledged offset."""
    for i in range(start, start + n):
        value = prefix + b"%d" % i
        acked[p.send(topic, value).result(timeout=timeout).offset] = value


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
    with cluster_healing_disks(tmp_path, brokers=3, seed=11) as c:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked = {}
        send_acked(p, "t", b"a", 20, acked)
        leader = c.leader_of("t")
        f = next(r for r in c.describe("t")[0].replicas if r != leader)
        disk = c.brokers[f].disk
        disk.fail_errno = errno.ENOSPC
        disk.fail_write_after = disk.writes  # every write from now on fails
        send_acked(p, "t", b"b", 20, acked)  # nothing escapes; goes on once the ISR shrinks
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
        send_acked(p, "t", b"c", 5, acked)
        assert read_all(c, "t", len(acked)) == acked
        c._check()


def test_leader_crash_before_the_shrink_may_elect_the_failed_replica_nothing_escapes_nothing_lost(tmp_path):
    """The controller does not know about the follower's disk (docs/replication.md): if the leader
    crashes while the failed follower is still in the ISR it may be elected. It holds every
    committed record; its appends fail (KafkaStorageError to the producer) until it restarts."""
    with cluster_healing_disks(tmp_path, brokers=3, seed=11) as c:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked = {}
        send_acked(p, "t", b"a", 10, acked)
        old_leader = c.leader_of("t")
        f = c.describe("t")[0].replicas[1]  # elected first from the ISR after the leader (seed 11)
        disk = c.brokers[f].disk
        disk.fail_write_after = disk.writes
        pending = [p.send("t", b"b%d" % i) for i in range(5)]
        c.advance(100)
        assert c.brokers[f].rm.partitions[("t", 0)].follower_state == FAILED
        c.stop_broker(old_leader, clean=False)
        c.advance(8_000)  # session timeout: the controller elects the next ISR member
        d = c.describe("t")[0]
        assert d.leader == f and d.high_watermark == 10, d
        assert c.brokers[f].rm.partitions[("t", 0)].storage_failed
        for fut in pending:  # never acknowledged: refused by the failing leader
            try:
                fut.result()
            except errors.KafkaStorageError as exc:
                assert f"broker-{f}" in str(exc)
            else:
                raise AssertionError("an append on a failing disk was acknowledged")
        c._check()

        disk.fail_write_after = None
        c.stop_broker(f, clean=False)
        c.start_broker(f)
        c.start_broker(old_leader)
        assert c.scheduler.wait_until(lambda: len(c.store.partitions[("t", 0)].isr) == 3, 60_000)
        fp = c.brokers[f].rm.partitions[("t", 0)]  # the restarted broker's replica: its disk works again
        assert not fp.storage_failed and fp.fetch_failure is None
        send_acked(p, "t", b"c", 5, acked)
        assert read_all(c, "t", len(acked)) == acked
        c._check()


def test_a_batch_one_follower_refuses_fails_only_that_partition_and_a_new_epoch_retries(tmp_path):
    c = Cluster(tmp_path, brokers=3, seed=12)
    try:
        for topic in ("t", "u"):
            c.create_topic(topic, partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked = {"t": {}, "u": {}}
        for i in range(5):
            for topic in ("t", "u"):
                m = p.send(topic, b"%s%d" % (topic.encode(), i)).result()
                acked[topic][m.offset] = b"%s%d" % (topic.encode(), i)
        leader = c.leader_of("t")
        f = next(r for r in c.describe("t")[0].replicas if r != leader)
        fp = c.brokers[f].rm.partitions[("t", 0)]
        fp.log.config = fp.log.config._replace(segment_bytes=500)  # this replica refuses big batches
        big = b"B" * 1_000
        m = p.send("t", big).result()  # completes once the leader drops f from the ISR
        acked["t"][m.offset] = big
        assert fp.follower_state == FAILED and not fp.storage_failed
        assert "RecordTooLargeError" in fp.fetch_failure and "offset 5" in fp.fetch_failure
        assert f not in c.describe("t")[0].isr
        send_acked(p, "u", b"u", 5, acked["u"], start=5)  # the broker's other partition replicates as before
        du = c.describe("u")[0]
        assert sorted(du.isr) == [0, 1, 2] and du.log_end_offsets[f] == 10, du
        fp._check()

        fp.log.config = fp.log.config._replace(segment_bytes=1 << 20)
        c.stop_broker(leader, clean=True)  # a new leader epoch: f's fetcher tries again
        assert c.scheduler.wait_until(lambda: f in c.store.partitions[("t", 0)].isr, 60_000)
        assert c.leader_of("t") != f and fp.follower_state == FETCHING and fp.fetch_failure is None
        c.start_broker(leader)
        send_acked(p, "t", b"t-after", 5, acked["t"])
        assert read_all(c, "t", len(acked["t"])) == acked["t"]
        assert read_all(c, "u", len(acked["u"])) == acked["u"]
        c._check()
    finally:
        c.close()


def test_real_time_cluster_follower_disk_full_nothing_escapes_the_loop(tmp_path):
    """Real time: before the fix the error went to the loop thread's error list and the follower
    retried the failing append every tick; now the partition stops fetching and leaves the ISR."""
    c = Cluster(tmp_path, brokers=3, session_timeout_ms=1_000, heartbeat_interval_ms=100,
                replica_lag_time_max_ms=1_000)
    disk = None
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        acked = {}
        send_acked(p, "t", b"a", 10, acked)
        leader = c.leader_of("t")
        f = next(r for r in c.describe("t")[0].replicas if r != leader)
        disk = c.brokers[f].disk

        def full(fd, data, offset):  # the broker's real FileIO, out of space from now on
            raise OSError(errno.ENOSPC, "No space left on device")

        disk.pwrite = full  # type: ignore[method-assign]
        send_acked(p, "t", b"b", 10, acked, timeout=30)
        assert f not in c.describe("t")[0].isr
        fp = c.scheduler.run_sync(lambda: c.brokers[f].rm.partitions[("t", 0)])
        assert c.scheduler.run_sync(lambda: (fp.follower_state, fp.storage_failed)) == (FAILED, True)
        assert c.scheduler.errors == []  # nothing raised on the loop thread
        assert read_all(c, "t", len(acked)) == acked

        del disk.pwrite
        c.stop_broker(f, clean=False)
        c.start_broker(f)
        assert c.scheduler.wait_until(lambda: f in c.store.partitions[("t", 0)].isr, 30_000)
        c._check()
    finally:
        if disk is not None and "pwrite" in vars(disk):
            del disk.pwrite
        c.close()


def test_a_replica_that_cannot_be_created_on_a_failing_disk_is_skipped_and_created_after_restart(tmp_path):
    """LeaderAndIsr for a new partition on a broker whose disk fails: the open fails, nothing escapes
    (the other states of the request still apply), the leader drops the replica from the ISR."""
    with cluster_healing_disks(tmp_path, brokers=3, seed=13) as c:
        disk = c.brokers[2].disk
        disk.fail_write_after = disk.writes
        # start_index=0, shift=0: t-0 on (0, 1, 2), u-0 on (0, 1, 2) as well; broker 2 follows both.
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2, start_index=0, shift=0)
        c.create_topic("u", partitions=1, replication_factor=1, start_index=0, shift=0)
        assert ("t", 0) not in c.brokers[2].rm.partitions
        p = c.producer(acks="all")
        acked = {}
        send_acked(p, "t", b"a", 10, acked)
        assert sorted(c.describe("t")[0].isr) == [0, 1]
        assert p.send("u", b"x").result().offset == 0  # the cluster's other work goes on

        disk.fail_write_after = None
        c.stop_broker(2, clean=False)
        c.start_broker(2)
        assert c.scheduler.wait_until(lambda: 2 in c.store.partitions[("t", 0)].isr, 60_000)
        assert c.brokers[2].rm.partitions[("t", 0)].log_end_offset == 10
        assert read_all(c, "t", len(acked)) == acked
        c._check()


def test_min_isr_equal_to_rf_refuses_acks_all_until_the_failed_broker_is_back(tmp_path):
    """RF 3, min ISR 3: once the failed follower leaves the ISR nothing can be committed; acks=all
    sends are refused (NotEnoughReplicas, nothing appended) and retried until the broker is back."""
    with cluster_healing_disks(tmp_path, brokers=3, seed=14) as c:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=3)
        p = c.producer(acks="all", delivery_timeout_ms=20_000, request_timeout_ms=5_000)
        acked = {}
        send_acked(p, "t", b"a", 5, acked)
        leader = c.leader_of("t")
        f = next(r for r in c.describe("t")[0].replicas if r != leader)
        disk = c.brokers[f].disk
        disk.fail_write_after = disk.writes
        late = p.send("t", b"late")
        c.advance(15_000)  # past replica_lag_time_max_ms: the ISR shrinks to two
        d = c.describe("t")[0]
        assert f not in d.isr and d.high_watermark == 5, d
        refused = p.send("t", b"refused")
        for fut in (late, refused):  # retried until the delivery timeout, never acknowledged
            try:
                fut.result()
            except errors.NotEnoughReplicasError as exc:
                assert "nothing was appended" in str(exc) and "t-0" in str(exc)
            else:
                raise AssertionError("acknowledged with an ISR below min_insync_replicas")
        d = c.describe("t")[0]
        assert d.high_watermark == 5 and d.log_end_offsets[leader] <= 6  # at most "late"'s first try

        disk.fail_write_after = None
        c.stop_broker(f, clean=False)
        c.start_broker(f)
        assert c.scheduler.wait_until(lambda: len(c.store.partitions[("t", 0)].isr) == 3, 60_000)
        send_acked(p, "t", b"c", 3, acked)
        got = read_all(c, "t", c.describe("t")[0].high_watermark)
        assert all(got.get(o) == v for o, v in acked.items()), (got, acked)
        c._check()


def test_a_leaders_transient_disk_error_is_retried_by_the_producer(tmp_path):
    """KafkaStorageError is retriable, as Kafka's KafkaStorageException (an InvalidMetadataException):
    the producer retries within delivery_timeout_ms instead of failing the record at once, and the
    record lands exactly once when the disk works again."""
    assert errors.KafkaStorageError.retriable and not errors.LogDirLockedError.retriable
    c = Cluster(tmp_path, brokers=1, seed=3)
    try:
        c.create_topic("t", partitions=1, replication_factor=1)
        p = c.producer(acks="all")
        assert p.send("t", b"a").result().offset == 0
        disk = c.brokers[0].disk
        disk.fail_errno = errno.EIO
        disk.fail_write_after = disk.writes  # the leader's next writes fail

        def heal() -> None:
            disk.fail_write_after = None

        c.scheduler.call_later(300, heal)
        assert p.send("t", b"b").result().offset == 1
        assert p.retries >= 1 and p.record_errors == 0
        assert read_all(c, "t", 2) == {0: b"a", 1: b"b"}
    finally:
        c.close()
