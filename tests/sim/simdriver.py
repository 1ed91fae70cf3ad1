"""A seeded fault-injection driver for simulated clusters, with invariant checks after every step.

``run_seed(path, seed)`` builds a 3-broker simulated cluster, one topic with
RF 3 and ``min_insync_replicas=2``, and runs random steps - produce bursts
(``acks=all`` futures left in flight), virtual time, hard crashes, clean
stops, restarts, two-way and one-way network partitions, slow brokers - and
after every step checks:

* every component's ``_check()`` and :meth:`Cluster._check` (leader in ISR,
  ISR never empty, replicas agree on every offset below the leader's HW);
* leader epochs (controller's and each replica incarnation's) only grow;
* each replica's HW never moves back within one incarnation;
* a serving leader holds every offset below the highest HW ever reached
  (no committed record lost) and every acknowledged record;
* the consumer never sees an offset at or above the HW, and what it reads
  matches what was acknowledged at that offset.

Crashes lose every unflushed byte, so a new crash or stop is only injected
while every broker is up and every ISR is full: at most RF - min ISR = 1
replica is ever missing from a write's ISR members, the condition under which
Kafka promises no acknowledged write is lost. Network partitions (which lose
no data) may happen at any time.

At the end the network heals, every broker restarts, every pending send
completes, and a consumer reads each partition to its HW: every acknowledged
record must be there at its acknowledged offset, with no gaps.
"""
from __future__ import annotations

import random
from typing import Dict, List, Tuple

from pylog.cluster import Cluster
from pylog.replication.partition import LEADER

TOPIC = "sim"


class Violation(AssertionError):
    pass


def replay_command(seed: int) -> str:
    return f"PYLOG_SIM_SEED={seed} .venv/bin/python -m pytest tests/sim/test_random_sim.py::test_replay_seed -q"


def run_seed(path: str, seed: int, *, steps: int = 30, partitions: int = 0) -> Dict[str, int]:
    rng = random.Random(seed ^ 0x5EED)
    partitions = partitions or rng.choice([1, 1, 2])
    loss = rng.choice([0.0, 0.0, 0.01, 0.05])
    c = Cluster(path, brokers=3, seed=seed, replica_lag_time_max_ms=2_000, session_timeout_ms=1_500,
                heartbeat_interval_ms=250, request_timeout_ms=3_000, max_latency_ms=rng.choice([2, 5, 20]), loss=loss)
    try:
        c.create_topic(TOPIC, partitions=partitions, replication_factor=3, min_insync_replicas=2)
        producer = c.producer(acks="all", request_timeout_ms=3_000, delivery_timeout_ms=20_000)
        consumer = c.consumer("sim", [TOPIC], fetch_max_wait_ms=100)
        futures: List[Tuple[object, bytes]] = []
        acked: Dict[Tuple[str, int], Dict[int, bytes]] = {}
        consumed: Dict[Tuple[Tuple[str, int], int], bytes] = {}
        max_epoch: Dict[Tuple[str, int], int] = {}
        replica_epoch: Dict[Tuple[int, int, Tuple[str, int]], int] = {}
        replica_hw: Dict[Tuple[int, int, Tuple[str, int]], int] = {}
        max_hw: Dict[Tuple[str, int], int] = {}
        down: Dict[int, bool] = {}
        stats = {"crashes": 0, "stops": 0, "partitions": 0, "acked": 0}
        n = 0

        def harvest() -> None:
            keep = []
            for fut, value in futures:
                if not fut.done():
                    keep.append((fut, value))
                elif fut.exception() is None:
                    m = fut.result()
                    slot = acked.setdefault((m.topic, m.partition), {})
                    if m.offset in slot and slot[m.offset] != value:
                        raise Violation(f"two acks for offset {m.offset}: {slot[m.offset]!r} and {value!r}")
                    slot[m.offset] = value
            futures[:] = keep

        def check(step: int, what: str) -> None:
            try:
                harvest()
                c._check()
                consumer._check()
                for tp, st in c.store.partitions.items():
                    if st.leader_epoch < max_epoch.get(tp, -1):
                        raise Violation(f"{tp}: controller leader epoch went back to {st.leader_epoch}")
                    max_epoch[tp] = st.leader_epoch
                for b in c.brokers.values():
                    if not b.running or b.rm is None:
                        continue
                    for tp, p in b.rm.partitions.items():
                        key = (b.broker_id, b.incarnation, tp)
                        if p.leader_epoch < replica_epoch.get(key, -1):
                            raise Violation(f"broker {b.broker_id} {tp}: leader epoch went back")
                        replica_epoch[key] = p.leader_epoch
                        if p.high_watermark < replica_hw.get(key, 0):
                            raise Violation(f"broker {b.broker_id} {tp}: HW moved back {replica_hw[key]} -> {p.high_watermark}")
                        replica_hw[key] = p.high_watermark
                        if p.role == LEADER and p.leader_epoch == c.store.partitions[tp].leader_epoch:
                            max_hw[tp] = max(max_hw.get(tp, 0), p.high_watermark)
                            if p.log_end_offset < max_hw[tp]:
                                raise Violation(f"{tp}: leader {b.broker_id} LEO {p.log_end_offset} < committed HW {max_hw[tp]}")
                            mine = acked.get(tp, {})
                            if mine and p.log_end_offset <= max(mine):
                                raise Violation(f"{tp}: leader {b.broker_id} lacks acknowledged offset {max(mine)}")
                for r in consumer.poll(0.0):
                    tp = (r.topic, r.partition)
                    if (tp, r.offset) in consumed and consumed[(tp, r.offset)] != r.value:
                        raise Violation(f"{tp} offset {r.offset} read as {consumed[(tp, r.offset)]!r} then {r.value!r}")
                    consumed[(tp, r.offset)] = r.value
                    want = acked.get(tp, {}).get(r.offset)
                    if want is not None and want != r.value:
                        raise Violation(f"{tp} offset {r.offset}: acked {want!r}, consumed {r.value!r}")
            except AssertionError as exc:
                raise Violation(f"seed {seed} step {step} ({what}): {exc}\nreplay: {replay_command(seed)}") from exc

        def all_in_sync() -> bool:
            # Every broker up, registered with the controller under its current incarnation
            # (a restarted broker is dropped from ISRs at registration), and every ISR full again.
            registered = all(c.store.broker_incarnations.get(b) == c.brokers[b].incarnation for b in range(3))
            full = all(len(st.isr) == 3 and st.leader >= 0 for st in c.store.partitions.values())
            return registered and full and not any(down.values())

        for step in range(steps):
            roll = rng.random()
            what = ""
            if roll < 0.40:
                k = rng.randint(1, 8)
                for _ in range(k):
                    n += 1
                    value = b"s%d-%d" % (seed, n)
                    futures.append((producer.send(TOPIC, value, partition=rng.randrange(partitions)), value))
                what = f"produce {k}"
            elif roll < 0.55 and all_in_sync() and not c.transport.blocked:
                target = rng.choice([c.store.partitions[(TOPIC, 0)].leader, c.store.controller_id, rng.randrange(3)])
                clean = rng.random() < 0.3
                c.stop_broker(target, clean=clean)
                down[target] = True
                stats["stops" if clean else "crashes"] += 1
                what = f"stop {target} clean={clean}"
            elif roll < 0.70 and any(down.values()):
                b = rng.choice([b for b, d in down.items() if d])
                c.start_broker(b)
                down[b] = False
                what = f"start {b}"
            elif roll < 0.78 and not c.transport.blocked:
                a = rng.randrange(3)
                one_way = rng.random() < 0.3
                c.partition_network([a], [x for x in range(3) if x != a], one_way=one_way)
                stats["partitions"] += 1
                what = f"partition {a} one_way={one_way}"
            elif roll < 0.86:
                c.heal_network()
                what = "heal"
            elif roll < 0.90:
                b = rng.randrange(3)
                c.transport.slow(b, rng.choice([0, 50, 400]))
                what = f"slow {b}"
            c.advance(rng.choice([5, 50, 200, 800, 2_000]))
            what += " +time"
            check(step, what)

        # Settle: heal, restart everyone, finish every send, read everything.
        c.heal_network()
        c.transport.loss = 0.0
        for b in range(3):
            c.transport.slow(b, 0)
            if down.get(b):
                c.start_broker(b)
                down[b] = False
        for fut, _ in list(futures):
            try:
                fut.result()
            except Exception:
                pass
        check(steps, "settle")
        c.advance(5_000)
        check(steps + 1, "settled")
        for tp, offsets in acked.items():
            stats["acked"] += len(offsets)
            hw = c.describe(tp[0])[tp[1]].high_watermark
            reader = c.consumer(None, [tp[0]], fetch_max_wait_ms=50)
            got: Dict[int, bytes] = {}
            for _ in range(200):
                for r in reader.poll(0.5):
                    if r.partition == tp[1]:
                        got[r.offset] = r.value
                if len(got) >= hw:
                    break
            if sorted(got) != list(range(len(got))):
                raise Violation(f"seed {seed}: gap in consumed offsets of {tp}\nreplay: {replay_command(seed)}")
            for off, value in offsets.items():
                if got.get(off) != value:
                    raise Violation(
                        f"seed {seed}: acknowledged {value!r} at {tp} offset {off} was not consumed there "
                        f"(got {got.get(off)!r}, HW {hw})\nreplay: {replay_command(seed)}"
                    )
            reader._check()
        return stats
    finally:
        c.close()
