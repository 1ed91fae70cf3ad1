"""Issue 14 item 4: a batch of unknown outcome is never re-sent under a new producer identity (KIP-360).

Network partitions only (no crash): the leader writes every request but its replies to the producer are
lost, so every batch's outcome is unknown. The oldest batch reaches its delivery timeout and fails to the
caller; the batches sent after it are still being retried. Before the fix the producer took a new producer
id at once and renumbered those later batches from sequence 0, so the leader wrote them a second time
(one value at two offsets, under two producer ids) and acknowledged the second copy.
"""
from __future__ import annotations

from collections import Counter

import pytest

from pylog import errors
from pylog.cluster import Cluster


def leader_values(c: Cluster, topic: str, partition: int = 0):
    log = c.brokers[c.leader_of(topic, partition)].rm.partitions[(topic, partition)].log
    return [r.value for r in log.read(0, 1 << 30)] if log.log_end_offset else []


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_expired_batch_does_not_make_later_batches_written_twice(tmp_path, seed):
    c = Cluster(tmp_path, brokers=3, seed=seed)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", request_timeout_ms=1_000, delivery_timeout_ms=3_000, retry_backoff_ms=100)
        p.send("t", b"warm-up", partition=0).result()
        leader = c.leader_of("t")
        # Requests reach the leader (and are written and replicated); its replies to the producer are lost.
        c.transport.partition([leader], [p._node.node_id], one_way=True)
        first = p.send("t", b"a", partition=0)
        c.advance(900)
        later = [p.send("t", b"b%d" % i, partition=0) for i in range(3)]
        c.advance(50)
        later += [p.send("t", b"c%d" % i, partition=0) for i in range(3)]
        # "a" fails for good (its delivery timeout passes while its outcome is unknown); the others are
        # still being retried when that happens.
        c.scheduler.wait_until(first.done, 10_000)
        with pytest.raises(errors.RequestTimedOutError):
            first.result()
        assert not any(f.done() for f in later)
        c.heal_network()
        for f in later:
            try:
                f.result()
            except errors.PylogError:
                pass  # failing to the caller is allowed; writing twice is not
        values = leader_values(c, "t")
        twice = {v: n for v, n in Counter(values).items() if n > 1}
        assert not twice, f"written twice: {twice} in {values}"
        # The later batches were retried under their own sequence and recognised as duplicates: acknowledged
        # at the offsets of their first (unacknowledged) write, right after "a".
        assert [f.result().offset for f in later] == list(range(2, 8))
        assert values == [b"warm-up", b"a", b"b0", b"b1", b"b2", b"c0", b"c1", b"c2"]
        # "a" was written after all (a later sequence was acknowledged): no new identity was needed, and the
        # producer goes on under the same producer id and epoch.
        assert p.epoch_bumps == 0
        assert p.send("t", b"d", partition=0).result().offset == 8
        c._check()
    finally:
        c.close()


def test_unwritten_expired_batch_fails_the_unknown_ones_and_the_producer_goes_on_under_a_new_epoch(tmp_path):
    """The other outcome: "a" never reached the leader, nor did the first attempts of the batches after it.
    After "a" fails, their retries are refused (OutOfOrderSequence: the leader lacks "a"), but as their
    first attempts' outcome is unknown they are not renumbered: they fail to the caller too (a leader that
    lost track of an appended batch answers the same). Once none is pending, the producer bumps its epoch
    (KIP-360) and the next records are written once, from sequence 0; the leader fences the old epoch."""
    c = Cluster(tmp_path, brokers=3, seed=6)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", request_timeout_ms=1_000, delivery_timeout_ms=3_000, retry_backoff_ms=100)
        p.send("t", b"warm-up", partition=0).result()
        pid, epoch = p.producer_id, p.producer_epoch
        leader = c.leader_of("t")
        c.transport.partition([p._node.node_id], [leader], one_way=True)  # requests lost: nothing written
        first = p.send("t", b"a", partition=0)
        c.advance(900)
        later = [p.send("t", b"b%d" % i, partition=0) for i in range(3)]
        c.scheduler.wait_until(first.done, 10_000)
        with pytest.raises(errors.RequestTimedOutError):
            first.result()
        c.heal_network()
        for f in later:
            with pytest.raises((errors.OutOfOrderSequenceError, errors.RequestTimedOutError)):
                f.result()
        assert p.send("t", b"d", partition=0).result().offset == 1
        assert leader_values(c, "t") == [b"warm-up", b"d"]
        assert (p.producer_id, p.producer_epoch) == (pid, epoch + 1) and p.epoch_bumps == 1
        log = c.brokers[leader].rm.partitions[("t", 0)].log
        assert [(bt.producer_epoch, bt.base_sequence) for bt in log.read_batches(0, 1 << 30)][-1] == (epoch + 1, 0)
        c._check()
    finally:
        c.close()


def test_batch_only_ever_refused_after_a_gap_is_renumbered_and_written_once(tmp_path):
    """A batch whose every attempt the leader refused is certainly not in the log: after the gap it is
    renumbered under the bumped epoch and delivered (not failed)."""
    c = Cluster(tmp_path, brokers=3, seed=7)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all", request_timeout_ms=1_000, delivery_timeout_ms=3_000, retry_backoff_ms=100,
                       linger_ms=0)
        p.send("t", b"warm-up", partition=0).result()
        leader = c.leader_of("t")
        ps = p._parts["t"][0]
        # "a" takes sequence 1 but is lost; "b" (sequence 2) reaches the leader and is refused (the leader
        # lacks sequence 1); then every resend of "a" is lost too, until its delivery timeout.
        c.transport.partition([p._node.node_id], [leader], one_way=True)
        first = p.send("t", b"a", partition=0)
        c.advance(10)
        c.heal_network()
        c.advance(890)
        second = p.send("t", b"b", partition=0)
        c.advance(50)
        assert ps.retry_mode  # "b" was refused: it waits for "a"
        c.transport.partition([p._node.node_id], [leader], one_way=True)
        c.scheduler.wait_until(first.done, 10_000)
        c.heal_network()
        with pytest.raises(errors.RequestTimedOutError):
            first.result()
        assert second.result().offset == 1
        assert leader_values(c, "t") == [b"warm-up", b"b"]
        assert p.epoch_bumps == 1
        c._check()
    finally:
        c.close()
