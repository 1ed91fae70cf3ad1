"""Kafka's replication system test (tests/kafkatest/tests/core/replication_test.py) on a simulated cluster.

3 brokers, topic with 3 partitions, RF 3, ``min_insync_replicas=2``, a
producer with ``acks=all`` sending continuously and a background consumer.
Failure modes, applied to the leader of partition 0 or to the controller:

* ``clean_shutdown`` - controlled shutdown, broker left down;
* ``hard_shutdown`` - crash (unflushed bytes lost), broker left down;
* ``clean_bounce`` - 5 x controlled shutdown + restart of the current target;
* ``hard_bounce`` - 5 x crash, wait past the session timeout, restart.

Validation (Kafka's ``validate_delivery``): every acknowledged record is
consumed, at its acknowledged offset, and each partition's consumed offsets
have no gaps.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from pylog.cluster import Cluster

TOPIC = "test_topic"
MODES = ["clean_shutdown", "hard_shutdown", "clean_bounce", "hard_bounce"]


class Run:
    def __init__(self, path, seed: int):
        self.c = Cluster(path, brokers=3, seed=seed)
        self.c.create_topic(TOPIC, partitions=3, replication_factor=3, min_insync_replicas=2)
        self.producer = self.c.producer(acks="all")
        self.consumer = self.c.consumer("verifiable-consumer", [TOPIC], fetch_max_wait_ms=100)
        self.n = 0
        self.pending: List[Tuple[object, bytes]] = []
        self.acked: Dict[Tuple[int, int], bytes] = {}
        self.consumed: Dict[Tuple[int, int], bytes] = {}

    def harvest(self) -> int:
        keep = []
        for fut, value in self.pending:
            if not fut.done():
                keep.append((fut, value))
            elif fut.exception() is None:
                m = fut.result()
                assert (m.partition, m.offset) not in self.acked, f"offset {m.offset} of partition {m.partition} acked twice"
                self.acked[(m.partition, m.offset)] = value
        self.pending = keep
        records = self.consumer.poll(0.0)
        for r in records:
            key = (r.partition, r.offset)
            assert self.consumed.get(key, r.value) == r.value, f"offset {key} changed after it was consumed"
            self.consumed[key] = r.value
        return len(records)

    def pump(self, ms: int, every_ms: int = 10) -> None:
        """Produce one record every ``every_ms`` virtual ms for ``ms`` ms, consuming alongside."""
        for _ in range(ms // every_ms):
            self.n += 1
            value = b"%d" % self.n
            self.pending.append((self.producer.send(TOPIC, value), value))
            self.c.advance(every_ms)
            self.harvest()
        self.c._check()
        self.consumer._check()

    def pump_until_in_sync(self) -> None:
        for _ in range(100):
            self.pump(200)
            if all(len(p.isr) == 3 for p in self.c.describe(TOPIC)):
                return
        raise AssertionError(f"ISR never recovered: {self.c.describe(TOPIC)}")

    def finish(self) -> None:
        for fut, _ in self.pending:
            try:
                fut.result()
            except Exception:
                pass
        self.harvest()
        hws = {p.partition: p.high_watermark for p in self.c.describe(TOPIC)}
        for _ in range(1000):
            got = self.harvest()
            if not got and all(self.consumer.position(TOPIC, p) >= hw for p, hw in hws.items()):
                break  # caught up and nothing left buffered
            self.c.advance(50)
        self.consumer._check()


def target_of(c: Cluster, broker_type: str) -> int:
    return c.leader_of(TOPIC, 0) if broker_type == "leader" else c.store.controller_id


@pytest.mark.parametrize("broker_type", ["leader", "controller"])
@pytest.mark.parametrize("mode", MODES)
def test_replication_with_broker_failure(tmp_path, mode, broker_type):
    run = Run(tmp_path, seed=MODES.index(mode) * 10 + (broker_type == "controller"))
    c = run.c
    try:
        run.pump(2_000)
        bounces = 5 if "bounce" in mode else 1
        stopped = []
        for _ in range(bounces):
            t = target_of(c, broker_type)
            assert t is not None and t >= 0
            clean = mode.startswith("clean")
            c.stop_broker(t, clean=clean)
            stopped.append(t)
            if "shutdown" in mode:
                run.pump(6_000)  # left down; the rest carry on (ISR 2 = min ISR)
                assert all(t not in p.isr for p in c.describe(TOPIC))
                assert c.store.controller_id != t
            else:
                run.pump(500 if clean else 4_000)  # hard: past the session timeout, as Kafka's test waits
                c.start_broker(t)
                run.pump_until_in_sync()
        run.pump(2_000)
        run.finish()
        # Kafka's validate_delivery: every acked record consumed, at its offset, no gaps.
        assert len(run.acked) > 500
        missing = {k: v for k, v in run.acked.items() if run.consumed.get(k) != v}
        assert not missing, f"{len(missing)} acknowledged records not consumed at their offsets, e.g. {sorted(missing)[:5]}"
        for p in range(3):
            offsets = sorted(o for (q, o) in run.consumed if q == p)
            assert offsets == list(range(len(offsets))), f"gap in partition {p}"
            assert offsets, f"nothing consumed from partition {p}"
        # The failures really moved leadership / the controller.
        assert len(stopped) == bounces
        epochs = [p.leader_epoch for p in c.describe(TOPIC)]
        if broker_type == "leader":
            assert epochs[0] >= bounces
        else:
            assert c.store.controller_epoch >= 1 + bounces
    finally:
        c.close()
