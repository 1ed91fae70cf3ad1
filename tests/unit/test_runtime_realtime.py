"""Real-time mode: brokers on the background loop thread, producers and consumers on user threads."""
from __future__ import annotations

import threading

from pylog.cluster import Cluster

TOPIC = "rt"
PER_PRODUCER = 150


def test_concurrent_clients_with_broker_bounce_no_deadlock_and_close_joins(tmp_path):
    before = set(threading.enumerate())
    c = Cluster(tmp_path, brokers=3, session_timeout_ms=1_000, heartbeat_interval_ms=100, replica_lag_time_max_ms=2_000)
    loop = c.scheduler.thread
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3, min_insync_replicas=2)
        acked = {}
        errors = []
        lock = threading.Lock()
        halfway = threading.Barrier(4)

        def produce(n: int) -> None:
            p = c.producer(acks="all", request_timeout_ms=2_000)
            for i in range(PER_PRODUCER):
                if i == PER_PRODUCER // 2:
                    halfway.wait()
                value = b"p%d-%d" % (n, i)
                try:
                    m = p.send(TOPIC, value).result()
                except Exception as exc:  # noqa: BLE001 - recorded and asserted below
                    errors.append(exc)
                    continue
                with lock:
                    acked[(m.partition, m.offset)] = value

        consumed = {}
        stop = threading.Event()

        def consume() -> None:
            cons = c.consumer("rt-group", [TOPIC], fetch_max_wait_ms=50)
            while not stop.is_set():
                for r in cons.poll(0.1):
                    consumed[(r.partition, r.offset)] = r.value
            cons.commit()
            cons._check()

        producers = [threading.Thread(target=produce, args=(n,), name=f"producer-{n}") for n in range(3)]
        consumer = threading.Thread(target=consume, name="consumer")
        for t in producers + [consumer]:
            t.start()
        halfway.wait()  # every producer is mid-run: bounce the leader of partition 0
        victim = c.leader_of(TOPIC, 0)
        c.stop_broker(victim, clean=False)
        c.start_broker(victim)
        for t in producers:
            t.join(120)
            assert not t.is_alive(), f"{t.name} is stuck (deadlock?)"
        assert len(acked) + len(errors) == 3 * PER_PRODUCER
        assert len(acked) >= PER_PRODUCER  # most writes succeed across the bounce
        rows = c.describe(TOPIC)
        assert rows[0].leader_epoch >= 1  # the bounce really moved leadership
        assert all(r.high_watermark >= 0 for r in rows)
        c.scheduler.wait_until(lambda: all(k in consumed for k in acked), 60_000)
        stop.set()
        consumer.join(60)
        assert not consumer.is_alive()
        missing = [k for k, v in acked.items() if consumed.get(k) != v]
        assert not missing, f"acknowledged records not consumed at their offsets: {missing[:5]}"
        c._check()
    finally:
        c.close()
    assert not loop.is_alive()
    leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not leftover, f"threads left after close(): {leftover}"


def test_open_single_broker_queue_reopens_with_its_topics(tmp_path):
    from pylog.local_queue import open as pylog_open

    q = pylog_open(tmp_path)
    try:
        q.create_topic("jobs", partitions=1, replication_factor=1)
        p = q.producer(acks="all")
        assert [p.send("jobs", b"j%d" % i).result().offset for i in range(3)] == [0, 1, 2]
        c = q.consumer("workers", ["jobs"])
        got = []
        while len(got) < 2:
            got += c.poll(1.0, max_records=2 - len(got))
        c.commit()
    finally:
        q.close()
    q = pylog_open(tmp_path)  # same directory: topics, data and leader epochs come back
    try:
        d = q.describe("jobs")[0]
        assert d.leader == 0 and d.log_end_offsets == {0: 3} and d.leader_epoch >= 1
        assert q.producer(acks="all").send("jobs", b"j3").result().offset == 3
        c = q.consumer(None, ["jobs"])
        got = []
        while len(got) < 4:
            got += c.poll(1.0)
        assert [(r.offset, r.value) for r in got] == [(i, b"j%d" % i) for i in range(4)]
    finally:
        q.close()


def test_close_fails_a_blocked_send_instead_of_hanging(tmp_path):
    """A thread blocked in send().result() gets an error when the cluster closes under it."""
    from pylog.errors import PylogError

    c = Cluster(tmp_path, brokers=2, session_timeout_ms=1_000, heartbeat_interval_ms=100)
    c.create_topic("t", partitions=1, replication_factor=2, min_insync_replicas=2)
    other = next(b for b in c.brokers if b != c.leader_of("t"))
    c.stop_broker(other, clean=False)  # acks=all now waits (ISR shrinks, then NotEnoughReplicas retries)
    p = c.producer(acks="all", delivery_timeout_ms=600_000)
    outcome = []
    started = threading.Event()

    def blocked() -> None:
        fut = p.send("t", b"never")
        started.set()
        try:
            fut.result()
            outcome.append("acked")
        except PylogError as exc:
            outcome.append(type(exc).__name__)

    t = threading.Thread(target=blocked)
    t.start()
    started.wait()
    c.close()
    t.join(60)
    assert not t.is_alive(), "a send blocked across close() never returned"
    assert outcome and outcome[0] != "acked"
