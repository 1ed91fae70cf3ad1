"""Retention never deletes records at or above a replica's high watermark (Kafka's deletableSegments).

Records appended with ``acks=1`` while the follower is cut off sit above the
HW: a leader change could still truncate them and consumers may not read them
yet. Size and time retention (from the cluster's periodic maintenance and from
the retention a segment roll runs) must keep them, on the leader and on the
follower (each bounded by its own HW), and resume once the HW has moved.
"""
from __future__ import annotations

from typing import Dict, List

import pytest

from pylog.cluster import Cluster

SEGMENT = 1024
VALUE = b"v" * 100


def _replicas(c: Cluster, topic: str) -> Dict[int, object]:
    return {b: c.brokers[b].rm.partitions[(topic, 0)] for b in c.brokers
            if c.brokers[b].running and (topic, 0) in c.brokers[b].rm.partitions}


def _check_replicas(c: Cluster, topic: str) -> None:
    """Every replica: log start <= its own HW, and every offset from the HW to the log end is readable."""
    for b, part in _replicas(c, topic).items():
        log, hw = part.log, part.high_watermark
        assert log.log_start_offset <= hw, f"broker {b}: log start {log.log_start_offset} passed its HW {hw}"
        offsets = [r.offset for r in log.read(hw, 1 << 30)] if hw < log.log_end_offset else []
        assert offsets == list(range(hw, log.log_end_offset)), f"broker {b}: records above the HW {hw} are missing"


def _advance_checking(c: Cluster, topic: str, ms: int, step: int = 500) -> None:
    for _ in range(ms // step):
        c.advance(step)
        _check_replicas(c, topic)


@pytest.mark.parametrize("hold", ["follower_in_isr_min_isr_1", "isr_shrunk_min_isr_2"])
@pytest.mark.parametrize("retention", [{"retention_bytes": 2 * SEGMENT}, {"retention_ms": 1_000}])
def test_retention_keeps_records_above_the_high_watermark(tmp_path, hold: str, retention: Dict[str, int]) -> None:
    min_isr = 1 if hold == "follower_in_isr_min_isr_1" else 2
    # With min ISR 1 the follower stays in the ISR (a long lag time), so the HW waits for it;
    # with min ISR 2 it leaves the ISR and the HW freezes below min ISR (KAFKA-15583).
    lag = 10**9 if min_isr == 1 else None
    c = Cluster(tmp_path, brokers=3, seed=5, replica_lag_time_max_ms=lag)
    try:
        ctl = c.store.controller_id
        # Both replicas away from the controller, so cutting them apart changes no election.
        c.create_topic("t", partitions=1, replication_factor=2, min_insync_replicas=min_isr,
                       start_index=(ctl + 1) % 3, shift=0,
                       config=dict(segment_bytes=SEGMENT, log_cleanup_interval_ms=0, **retention))
        leader = c.leader_of("t")
        (follower,) = [r for r in c.store.partitions[("t", 0)].replicas if r != leader]
        assert ctl not in (leader, follower)
        acked = c.producer(acks="all")
        for i in range(20):
            acked.send("t", VALUE).result()
        parts = _replicas(c, "t")
        c.advance(1_000)
        hw_before = parts[leader].high_watermark
        assert hw_before == 20

        c.partition_network([follower], [leader])
        fast = c.producer(acks=1)
        for i in range(120):  # about 20 segments, all above the HW
            fast.send("t", VALUE).result()
            _check_replicas(c, "t")
        _advance_checking(c, "t", 4 * Cluster.log_maintenance_check_ms)
        lp = parts[leader]
        assert lp.high_watermark == hw_before, "the HW must not move while the follower is cut off"
        assert lp.log.log_end_offset == 140
        assert len(lp.log.segments) > 10  # retention wanted them gone; the HW kept them
        assert lp.log.log_start_offset <= hw_before
        assert not c.maintenance_errors

        c.heal_network()
        assert c.scheduler.wait_until(lambda: parts[leader].high_watermark == 140
                                      and parts[follower].high_watermark == 140, 60_000)
        _advance_checking(c, "t", 4 * Cluster.log_maintenance_check_ms)
        for b, part in _replicas(c, "t").items():
            # Retention resumed up to the new HW: the old segments are gone on both replicas.
            assert part.log.log_start_offset > hw_before, f"broker {b}: retention did not resume"
            assert part.log.log_start_offset <= part.high_watermark
            assert len(part.log.segments) <= 4
        c._check()
        assert not c.maintenance_errors
    finally:
        c.close()


def test_enforce_retention_deletes_only_segments_wholly_below_the_high_watermark(tmp_path) -> None:
    """Kafka's predicate: a segment goes only when ``highWatermark >=`` the next segment's base offset."""
    import pylog

    with pylog.Log.open(tmp_path / "t-0", segment_bytes=SEGMENT, retention_bytes=0) as log:
        hw = [0]
        log.retention_high_watermark = lambda: hw[0]
        for _ in range(60):
            log.append([VALUE])  # rolls run retention too: nothing may go while the HW is 0
        bases = list(log.segments.keys())
        assert len(bases) > 5 and log.log_start_offset == 0
        for target in (bases[2] - 1, bases[2], bases[4] + 1, log.log_end_offset):
            hw[0] = target
            log.enforce_retention()
            # every segment whose next segment starts at or below the HW is gone, no other
            assert log.log_start_offset == max(b for b in bases if b <= target)
            assert log.log_start_offset <= target
            log._check()
