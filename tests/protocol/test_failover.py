"""Failover seen by a real client: confluent-kafka acks=all while the partition leader is killed and restarted.

Every delivery report without an error must be read back at its reported offset
with its value (no acknowledged write lost, none moved).
"""
from __future__ import annotations

import threading
import time

import pylog


def test_confluent_acks_all_survives_leader_kill_and_restart(tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    c = pylog.Cluster(tmp_path / "c", brokers=3, listen="127.0.0.1:0", session_timeout_ms=3000)
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        reports = []
        p = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 2,
                      "enable.idempotence": True, "message.timeout.ms": 60000,
                      "topic.metadata.refresh.interval.ms": 1000})
        stop = threading.Event()
        produced = [0]

        def run():
            i = 0
            while not stop.is_set():
                v = f"v{i}".encode()
                try:
                    p.produce("t", v, on_delivery=lambda e, m, v=v: reports.append((e, m.offset(), v)))
                except BufferError:
                    p.poll(0.01)
                    continue
                i += 1
                produced[0] = i
                p.poll(0)
                time.sleep(0.0005)

        th = threading.Thread(target=run)
        th.start()
        try:
            deadline = time.monotonic() + 30
            while len(reports) < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            leader = c.leader_of("t", 0)
            c.stop_broker(leader, clean=False)
            before = len(reports)
            deadline = time.monotonic() + 60
            while c.leader_of("t", 0) in (leader, -1) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert c.leader_of("t", 0) not in (leader, -1)
            c.start_broker(leader)  # listens on its old port again
            deadline = time.monotonic() + 60
            while len(reports) < before + 500 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            th.join()
        assert p.flush(60) == 0
        ok = [(off, v) for e, off, v in reports if e is None]
        assert len(ok) > before + 400  # the producer went on after the failover
        hw = c.describe("t")[0].high_watermark
        co = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "check", "enable.auto.commit": False})
        try:
            co.assign([TopicPartition("t", 0, 0)])
            got = {}
            deadline = time.monotonic() + 60
            while len(got) < hw and time.monotonic() < deadline:
                m = co.poll(0.5)
                if m is not None and m.error() is None:
                    got[m.offset()] = m.value()
        finally:
            co.close()
        assert len(got) == hw
        assert [(off, v) for off, v in ok if got.get(off) != v] == []
        assert sorted(got.values()) == sorted(set(got.values()))  # idempotence: no duplicates
    finally:
        c.close()
