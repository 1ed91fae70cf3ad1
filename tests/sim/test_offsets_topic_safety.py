"""Committed ``__consumer_offsets`` records survive the issue-14 simulation (item 3).

``pylog sim --brokers 5 --topics sim --partitions 1 --rf 5 --min-isr 3 --seed 702007
--duration 60000ms --produce-rate 0.3 --burst 8 --crash-rate 0.2 --stop-rate 0.045
--restart-rate 0.15 --partition-rate 0.1 --heal-rate 0.08 --slow-rate 0.04 --loss 0
--max-latency-ms 5`` moved the HW of ``__consumer_offsets-0`` back from 5 to 0: the topic had
min ISR 1, and its last ISR member crashed, lost its tail and was re-elected. Now the topic
gets Kafka's replication (RF min(3, brokers), min ISR 2 with 3+ brokers) and an uncleanly
restarted last ISR member gives way to the ELR (docs/replication.md).
"""
from __future__ import annotations

import logging

from pylog.simulation import SimConfig, Simulation


def issue_config(seed: int) -> SimConfig:
    return SimConfig(seed=seed, brokers=5, topics=("sim",), partitions=1, rf=5, min_isr=3, duration_ms=60_000,
                     produce_rate=0.3, max_burst=8, crash_rate=0.2, stop_rate=0.045, restart_rate=0.15,
                     partition_rate=0.1, heal_rate=0.08, slow_rate=0.04, loss=0.0, max_latency_ms=5)


def test_issue_14_seed_702007_keeps_committed_offsets(tmp_path, caplog):
    caplog.set_level(logging.CRITICAL)
    sim = Simulation(str(tmp_path), issue_config(702007))
    result = sim.run()
    assert result.ok, {k: str(v) for k, v in result.violations.items()}
    st = sim.c.store.partitions[("__consumer_offsets", 0)]
    assert len(st.replicas) == 3 and st.min_insync_replicas == 2
    assert result.stats["crashes"] >= 3 and result.stats["acked"] > 50  # the faults and writes happened
