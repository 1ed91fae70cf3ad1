"""Seeded simulation: random topic creations, deletions, partition growth and config changes while brokers
crash and restart; afterwards every broker's disk holds exactly the replicas the metadata assigns it, and a
reopened cluster has exactly the topics of a plain dict model.

Replay one seed:  .venv/bin/python -m pytest tests/sim/test_topic_admin_sim.py -k 'seed-7' -q
Soak (many seeds): PYLOG_SOAK=1 .venv/bin/python -m pytest tests/sim/test_topic_admin_sim.py -m soak -q
"""
from __future__ import annotations

import os
import random
from typing import Dict

import pytest

from pylog.cluster import Cluster
from pylog.errors import LeaderNotAvailableError, TopicAlreadyExistsError

NAMES = ("a", "b", "c", "d")


def _on_disk(c: Cluster, b: int):
    d = os.path.join(c.path, f"broker-{b}")
    parts, deleting = set(), []
    for n in os.listdir(d):
        if n.endswith("-delete"):
            deleting.append(n)
            continue
        t, sep, p = n.rpartition("-")
        if sep and p.isdigit() and os.path.isdir(os.path.join(d, n)):
            parts.add((t, int(p)))
    return parts, deleting


def _check_agrees(c: Cluster, model: Dict[str, int], seed: int) -> None:
    assert c.list_topics() == sorted(model), f"seed {seed}"
    assert c.store.deleting == {}, f"seed {seed}: {c.store.deleting}"
    for t, n in model.items():
        assert [r.partition for r in c.describe(t)] == list(range(n)), f"seed {seed}: {t}"
    for b in c.brokers:
        want = {tp for tp, st in c.store.partitions.items() if b in st.replicas and tp[0] in model}
        parts, deleting = _on_disk(c, b)
        assert parts == want, f"seed {seed}: broker {b} has {sorted(parts - want)} extra, {sorted(want - parts)} missing"
        assert deleting == [], f"seed {seed}: broker {b} kept {deleting}"


def run(path: str, seed: int, steps: int = 40) -> None:
    rng = random.Random(seed)
    model: Dict[str, int] = {}
    c = Cluster(path, brokers=3, seed=seed)
    try:
        producer = c.producer(acks=1)
        for _ in range(steps):
            action = rng.choice(["create", "create", "delete", "grow", "alter", "produce", "crash", "restart"])
            name = rng.choice(NAMES)
            down = [b for b, br in c.brokers.items() if not br.running]
            if action == "create" and name not in model:
                n = rng.randint(1, 3)
                try:
                    c.create_topic(name, partitions=n, replication_factor=rng.randint(1, 3))
                    model[name] = n
                except TopicAlreadyExistsError:
                    assert name in c.store.deleting, f"seed {seed}: {name} refused but not being deleted"
                except LeaderNotAvailableError:  # created; a partition's only replicas are down
                    assert c.store.topics[name].partitions == n, f"seed {seed}"
                    model[name] = n
            elif action == "delete" and name in model:
                c.delete_topic(name)
                del model[name]
            elif action == "grow" and name in model:
                model[name] += rng.randint(1, 2)
                try:
                    c.create_partitions(name, model[name])
                except LeaderNotAvailableError:  # created; a new partition's only replicas are down
                    assert c.store.topics[name].partitions == model[name], f"seed {seed}"
            elif action == "alter" and name in model:
                c.alter_topic_config(name, {"retention.ms": rng.randint(10_000, 100_000)})
            elif action == "produce" and name in model:
                p = rng.randrange(model[name])
                st = c.store.partitions[(name, p)]
                if st.leader >= 0 and c.brokers[st.leader].running:
                    producer.send(name, b"x", partition=p)
            elif action == "crash" and not down:
                c.stop_broker(rng.randrange(3), clean=rng.random() < 0.5)
            elif action == "restart" and down:
                c.start_broker(down[0])
            c.advance(rng.randint(5, 2_000))
        for b, br in c.brokers.items():
            if not br.running:
                c.start_broker(b)
        c.advance(8_000)  # sessions, deletions confirmed, renamed directories removed
        _check_agrees(c, model, seed)
        c._check()
    finally:
        c.close()
    c = Cluster(path, brokers=3, seed=seed)
    try:
        c.advance(2_000)
        _check_agrees(c, model, seed)
    finally:
        c.close()


@pytest.mark.parametrize("seed", range(1, 9), ids=lambda s: f"seed-{s}")
def test_random_topic_admin_with_crashes(tmp_path, seed):
    run(str(tmp_path), seed)


@pytest.mark.soak
@pytest.mark.skipif(os.environ.get("PYLOG_SOAK") != "1", reason="soak run: set PYLOG_SOAK=1")
def test_soak_topic_admin(tmp_path):
    for seed in range(100, 100 + int(os.environ.get("PYLOG_SOAK_SEEDS", "300"))):
        d = tmp_path / f"s{seed}"
        run(str(d), seed, steps=80)
