"""The Consumer: positions, seeks, reset policies, pattern subscriptions, lag, iteration, commits, delivery semantics.

Simulated clusters (virtual time) except the one real-time test that a poll is
woken by an append from another thread.
"""
from __future__ import annotations

import re
import threading

import pytest

from pylog.cluster import Cluster
from pylog.metrics import find, render_prometheus
from pylog.errors import InvalidConfigurationError, InvalidGroupIdError, NoOffsetForPartitionError, UnknownTopicOrPartitionError

FAST = dict(session_timeout_ms=2_000, heartbeat_interval_ms=200, rebalance_timeout_ms=3_000, fetch_max_wait_ms=100)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=5)
    c.create_topic("t", partitions=2, replication_factor=1)
    yield c
    c.close()


def produce(c, topic, values, partition=0):
    p = c.producer(acks="all")
    return [p.send(topic, v, partition=partition).result().offset for v in values]


def drain(cons, want, rounds=50):
    got = []
    for _ in range(rounds):
        got += cons.poll(0.2)
        if len(got) >= want:
            break
    return got


def test_assign_seek_position_and_seek_to_ends(cluster):
    produce(cluster, "t", [b"%d" % i for i in range(10)])
    cons = cluster.consumer(None)
    cons.assign([("t", 0)])
    assert cons.assignment() == [("t", 0)]
    assert cons.position("t", 0) == 0
    got = drain(cons, 10)
    assert [r.offset for r in got] == list(range(10)) and got[3].value == b"3"
    assert got[0].topic == "t" and got[0].partition == 0 and got[0].timestamp_type == 0
    assert cons.position("t", 0) == 10
    cons.seek("t", 0, 5)
    assert cons.position("t", 0) == 5
    assert [r.offset for r in drain(cons, 5)] == [5, 6, 7, 8, 9]
    cons.seek_to_beginning()
    assert cons.position("t", 0) == 0
    assert cons.poll(1.0, max_records=2)[0].offset == 0
    cons.seek_to_end(("t", 0))
    assert cons.position("t", 0) == 10
    assert cons.poll(0.3) == []
    with pytest.raises(UnknownTopicOrPartitionError, match="t-1 is not assigned"):
        cons.seek("t", 1, 0)


def test_auto_offset_reset_latest_and_none(cluster):
    produce(cluster, "t", [b"old"] * 3)
    late = cluster.consumer("g-latest", ["t"], auto_offset_reset="latest", **FAST)
    assert late.poll(0.5) == []
    assert late.position("t", 0) == 3
    produce(cluster, "t", [b"new"])
    assert [r.value for r in drain(late, 1)] == [b"new"]
    strict = cluster.consumer("g-none", **FAST, auto_offset_reset="none")
    strict.assign([("t", 0)])
    with pytest.raises(NoOffsetForPartitionError, match="t-0"):
        for _ in range(10):
            strict.poll(0.2)
    with pytest.raises(InvalidConfigurationError):
        cluster.consumer(None, ["t"], auto_offset_reset="smallest")


def test_pattern_subscription_follows_new_topics(cluster):
    cluster.create_topic("orders-eu", partitions=1, replication_factor=1)
    cluster.create_topic("other", partitions=1, replication_factor=1)
    produce(cluster, "orders-eu", [b"eu"])
    produce(cluster, "other", [b"no"])
    cons = cluster.consumer("g-pattern", pattern=r"orders-.*", **FAST)
    assert [r.value for r in drain(cons, 1)] == [b"eu"]
    assert cons.subscription() == {"orders-eu"}
    cluster.create_topic("orders-us", partitions=1, replication_factor=1)
    produce(cluster, "orders-us", [b"us"])
    assert [(r.topic, r.value) for r in drain(cons, 1)] == [("orders-us", b"us")]
    assert set(cons.assignment()) == {("orders-eu", 0), ("orders-us", 0)}
    plain = cluster.consumer(None)
    plain.subscribe(re.compile(r"orders-(eu|us)"))
    assert sorted(r.value for r in drain(plain, 2)) == [b"eu", b"us"]


def test_lag_and_metrics(cluster):
    produce(cluster, "t", [b"x"] * 10)
    cons = cluster.consumer("g-lag", ["t"], **FAST)
    got = []
    while len(got) < 4:
        got += cons.poll(1.0, max_records=4 - len(got))
    assert cons.lag()[("t", 0)] == 6
    ms = cons.metrics()
    assert find(ms, "pylog_consumer_records_lag", topic="t", partition=0) == 6
    assert find(ms, "pylog_consumer_records_consumed_total") == 4
    assert find(ms, "pylog_consumer_rebalances_total") == 1
    assert find(ms, "pylog_consumer_assigned_partitions") == 2
    render_prometheus(ms)  # valid names and labels
    drain(cons, 6)
    assert cons.lag()[("t", 0)] == 0
    assert find(cons.metrics(), "pylog_consumer_records_consumed_total") == 10


def test_iteration_stops_after_consumer_timeout(cluster):
    produce(cluster, "t", [b"%d" % i for i in range(7)], partition=1)
    cons = cluster.consumer(None, ["t"], consumer_timeout_ms=500)
    assert [r.value for r in cons] == [b"%d" % i for i in range(7)]


def test_commit_async_callback_and_committed(cluster):
    produce(cluster, "t", [b"a", b"b", b"c"])
    cons = cluster.consumer("g-async", ["t"], enable_auto_commit=False, **FAST)
    drain(cons, 3)
    seen = []
    fut = cons.commit_async(callback=lambda offsets, exc: seen.append((offsets, exc)))
    assert fut.result(5) == {("t", 0): 3, ("t", 1): 0}
    cons.poll(0.0)  # callbacks run on the caller's thread, in poll
    assert seen == [({("t", 0): 3, ("t", 1): 0}, None)]
    assert cons.committed("t", 0) == 3
    assert cons.commit({("t", 0): 1}) == {("t", 0): 1}
    assert cons.committed("t", 0) == 1
    with pytest.raises(InvalidGroupIdError):
        cluster.consumer(None, ["t"]).commit()


def test_auto_commit_from_poll_and_on_close(cluster):
    produce(cluster, "t", [b"%d" % i for i in range(6)])
    cons = cluster.consumer("g-auto", ["t"], auto_commit_interval_ms=1_000, **FAST)
    got = []
    while len(got) < 2:
        got += cons.poll(1.0, max_records=2 - len(got))
    assert cons.committed("t", 0) is None
    cluster.advance(1_500)
    second = cons.poll(0.0, max_records=2)  # the auto-commit goes out first: the records returned before
    cluster.advance(200)
    assert cons.committed("t", 0) == 2
    more = drain(cons, 4 - len(second))
    assert len(second) + len(more) == 4 and cons.committed("t", 0) == 2
    cons.close()  # the final auto-commit
    other = cluster.consumer("g-auto", ["t"], **FAST)
    assert other.poll(0.5) == []
    assert other.position("t", 0) == 6


def test_isolation_levels_both_read_below_the_hw(cluster):
    produce(cluster, "t", [b"v"] * 3)
    for level in ("read_uncommitted", "read_committed"):
        cons = cluster.consumer(None, ["t"], isolation_level=level)
        assert len(drain(cons, 3)) == 3
    with pytest.raises(InvalidConfigurationError):
        cluster.consumer(None, ["t"], isolation_level="serializable")


def test_context_manager_leaves_the_group(cluster):
    with cluster.consumer("g-cm", ["t"], **FAST) as a:
        a.poll(0.5)
        assert set(a.assignment()) == {("t", 0), ("t", 1)}
    b = cluster.consumer("g-cm", ["t"], **FAST)
    b.poll(0.5)  # a left at close: b owns everything without waiting for a's session to time out
    assert set(b.assignment()) == {("t", 0), ("t", 1)}
    assert b.generation == 3  # a joined (1), a left (2: empty), b joined (3)


# -------------------------------------------------------------- delivery semantics
def test_at_least_once_process_then_crash_before_commit_redelivers(cluster):
    produce(cluster, "t", [b"%d" % i for i in range(6)])
    a = cluster.consumer("billing", ["t"], enable_auto_commit=False, **FAST)
    first = a.poll(2.0, max_records=3)
    a.commit({("t", 0): 3})  # the first three were processed and committed
    rest = drain(a, 3)
    processed = [r.value for r in rest]  # processed ...
    assert processed == [b"3", b"4", b"5"]
    a._crash()  # ... but the process died before committing
    b = cluster.consumer("billing", ["t"], enable_auto_commit=False, **FAST)
    again = drain(b, 3, rounds=100)
    assert [r.value for r in again] == [b"3", b"4", b"5"]  # redelivered: at-least-once
    assert [r.value for r in first] == [b"0", b"1", b"2"]


def test_at_most_once_commit_first_then_crash_does_not_redeliver(cluster):
    produce(cluster, "t", [b"%d" % i for i in range(6)])
    a = cluster.consumer("audit", ["t"], enable_auto_commit=False, **FAST)
    batch = drain(a, 6)
    a.commit()  # committed before processing ...
    a._crash()  # ... and the process died: those records are never processed
    b = cluster.consumer("audit", ["t"], enable_auto_commit=False, **FAST)
    produce(cluster, "t", [b"6"])
    later = drain(b, 1, rounds=100)
    assert [r.value for r in later] == [b"6"]  # not redelivered: at-most-once
    assert len(batch) == 6


# ---------------------------------------------------------------------- real time
def test_real_time_poll_is_woken_by_an_append_from_another_thread(tmp_path):
    c = Cluster(tmp_path, brokers=1)
    try:
        c.create_topic("rt", partitions=1, replication_factor=1)
        cons = c.consumer(None, fetch_max_wait_ms=30_000)  # the broker parks the empty fetch for up to 30 s
        cons.assign([("rt", 0)])
        assert cons.position("rt", 0) == 0
        out = []
        started = threading.Event()

        def reader() -> None:
            started.set()
            out.extend(cons.poll(timeout=60.0))

        t = threading.Thread(target=reader)
        t.start()
        started.wait()
        c.producer(acks=1).send("rt", b"wake up").result()
        t.join(60)
        assert not t.is_alive()
        assert [(r.offset, r.value) for r in out] == [(0, b"wake up")]
        cons.close()
    finally:
        c.close()
