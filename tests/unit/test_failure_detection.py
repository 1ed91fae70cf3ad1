"""Failure detection in real time (issue 19, item 7): the defaults an in-process cluster uses, a stalled loop
thread is not taken for dead brokers, and cluster.consumer(...) does not wait for a crashed broker's fencing."""
from __future__ import annotations

import random
import time

import pylog
from pylog.replication.controller import Controller, MetadataStore, TopicConfig
from pylog.replication.messages import BrokerHeartbeat

SESSION = 1_000


def _controller():
    store = MetadataStore([0, 1, 2], random.Random(1))
    assert store.try_claim(0, 0, SESSION)
    c = Controller(0, store, session_timeout_ms=SESSION, now_ms=0)
    for b in (0, 1, 2):
        c.handle(b, BrokerHeartbeat(b, 1), 0)
    c.create_topic(TopicConfig("t", 1, 3, 2), start_index=0, shift=0)
    return store, c


def test_a_stall_the_controller_could_not_observe_is_not_held_against_brokers():
    store, c = _controller()
    c.handle(1, BrokerHeartbeat(1, 1), 900)
    c.handle(2, BrokerHeartbeat(2, 1), 900)
    # The loop stalls from 950 to 5_950: the next tick sees heartbeats 5 s old.
    c.discount_stall(5_000, 5_950)
    assert c.tick(5_950).items == [] and c.live_brokers() == {0, 1, 2}
    assert store.partitions[("t", 0)].isr == (0, 1, 2)
    # A broker that really stopped (2 keeps heartbeating, 1 does not) is still fenced, a session later.
    c.handle(2, BrokerHeartbeat(2, 1), 6_500)
    assert c.tick(6_500).items == []  # 1's heartbeat counts as of 5_900: 600 ms old
    c.tick(6_901)
    assert c.live_brokers() == {0, 2} and store.partitions[("t", 0)].isr == (0, 2)


def test_without_the_discount_the_same_stall_fences_everyone():
    """The regression the discount prevents (the test above, minus discount_stall)."""
    store, c = _controller()
    c.handle(1, BrokerHeartbeat(1, 1), 900)
    c.handle(2, BrokerHeartbeat(2, 1), 900)
    c.tick(5_950)
    assert c.live_brokers() == {0}


def test_real_time_defaults_are_short_and_stall_tolerant(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3)
    try:
        b = c.brokers[0]
        # docs/replication.md "Failure detection": 3 s sessions, 500 ms heartbeats, stalls discounted.
        assert (b.session_timeout_ms, b.heartbeat_interval_ms, b.stall_grace) == (3_000, 500, True)
    finally:
        c.close()
    sim = pylog.Cluster(str(tmp_path / "sim"), brokers=1, seed=1)
    try:
        assert sim.brokers[0].stall_grace is False  # virtual time never stalls
    finally:
        sim.close()


def test_a_stalled_loop_thread_fences_no_broker(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3)
    try:
        c.create_topic("orders", partitions=3, replication_factor=3, min_insync_replicas=2)
        before = [(i.leader, i.leader_epoch, sorted(i.isr)) for i in c.describe("orders")]
        epoch = c.store.controller_epoch
        # Block the loop every in-process broker shares for longer than the session timeout
        # (a GC pause, a slow disk, a starved process would do the same).
        c.scheduler.run_sync(lambda: time.sleep(4.5))
        c.producer(acks="all").send("orders", b"after the stall", partition=0).result(timeout=60)
        after = [(i.leader, i.leader_epoch, sorted(i.isr)) for i in c.describe("orders")]
        assert after == before and c.store.controller_epoch == epoch
        assert pylog.metrics.find(c.metrics(), "pylog_cluster_brokers_running") == 3
    finally:
        c.close()


def test_consumer_does_not_wait_for_a_crashed_broker_to_be_fenced(tmp_path):
    # On virtual time, so what consumer() waited for is measured exactly: before the fix it waited for
    # every __consumer_offsets leader to serve, i.e. for the crashed broker's fencing (here never within
    # create_topic's 30 s wait, as the session is 60 s).
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=4, session_timeout_ms=60_000)
    try:
        c.create_topic("orders", partitions=1, replication_factor=3, min_insync_replicas=1)
        victim = next(b for b in c.brokers if b != c.store.controller_id)
        c.stop_broker(victim, clean=False)
        start = c.now_ms
        consumer = c.consumer(group_id="billing", topics=["orders"])
        assert c.now_ms - start < 1_000  # virtual ms: it did not wait for the failover
        assert victim in c.describe("orders")[0].isr  # not fenced yet
        assert "__consumer_offsets" in c.store.topics  # requested all the same
        # The group works once the coordinator is served (the consumer's lookup retries until then).
        c.producer(acks=1).send("orders", b"x").result()
        consumer.close(autocommit=False)
    finally:
        c.close()


def test_consumer_reads_after_a_crash_with_the_default_session(tmp_path):
    c = pylog.Cluster(str(tmp_path), brokers=3, seed=8)
    try:
        c.create_topic("orders", partitions=2, replication_factor=3, min_insync_replicas=2)
        p = c.producer(acks="all")
        for i in range(6):
            p.send("orders", b"%d" % i, partition=i % 2).result()
        c.stop_broker(c.leader_of("orders", 0), clean=False)
        consumer = c.consumer(group_id="billing", topics=["orders"], auto_offset_reset="earliest")
        got = []
        while len(got) < 6:
            got += consumer.poll(timeout=1.0)
        assert sorted(r.value for r in got) == [b"%d" % i for i in range(6)]
    finally:
        c.close()
