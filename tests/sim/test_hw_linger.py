"""Issue 18: a fetch-session answer whose only news is a high watermark is held back
(``replica_hw_linger_ms``) and rides on the follower's next data answer, instead of costing the
other follower a round of its own every time the leader's HW moves (RF 3, one partition)."""
from __future__ import annotations

from typing import Dict

import pytest

from pylog.cluster import Cluster
from pylog.replication import replica_manager as rm_mod


def _run(tmp_path, mp: pytest.MonkeyPatch, linger_ms: int) -> Dict[str, int]:
    with mp.context() as monkeypatch:
        return _run_patched(tmp_path, monkeypatch, linger_ms)


def _run_patched(tmp_path, monkeypatch: pytest.MonkeyPatch, linger_ms: int) -> Dict[str, int]:
    """Seeded simulated cluster, RF 3, one partition: a producer pipelines 3,000 records (acks=all),
    then the cluster settles. Counts the follower fetch responses that reached a follower and the
    batches the leader appended; every replica's HW must reach the log end after settling."""
    counts = {"responses": 0, "hw_only": 0, "batches": 0}
    real_response = rm_mod.ReplicaManager._on_replica_fetch_response

    def counting_response(self, resp, now_ms, out):
        if resp.partitions:
            counts["responses"] += 1
            if not any(r.records for _, r in resp.partitions):
                counts["hw_only"] += 1
        return real_response(self, resp, now_ms, out)

    monkeypatch.setattr(rm_mod.ReplicaManager, "_on_replica_fetch_response", counting_response)
    c = Cluster(tmp_path / f"linger{linger_ms}", brokers=3, seed=1818)
    c.config.replica_hw_linger_ms = linger_ms
    try:
        c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=2)
        prod = c.producer(acks="all", linger_ms=1, batch_size=2048)
        prod.send("t", b"warm", partition=0).result()
        leader = c.leader_of("t")
        lp = c.brokers[leader].rm.partitions[("t", 0)]
        counts.update(responses=0, hw_only=0)
        batches_before = lp.log_end_offset
        real_append = type(lp).append_as_leader

        def counting_append(self, *a, **k):
            counts["batches"] += 1
            return real_append(self, *a, **k)

        monkeypatch.setattr(type(lp), "append_as_leader", counting_append)
        futures = [prod.send("t", b"v%05d" % i, partition=0) for i in range(3000)]
        for f in futures:
            f.result()
        assert lp.log_end_offset == batches_before + 3000
        c.advance(2_000)  # settle: past the linger and the followers' long-poll
        for b, broker in c.brokers.items():
            p = broker.rm.partitions[("t", 0)]
            assert p.high_watermark == p.log_end_offset == lp.log_end_offset, f"broker {b}"
        c._check()
        return dict(counts)
    finally:
        c.close()


def test_a_hw_move_does_not_cost_the_other_follower_a_round_of_its_own(tmp_path, monkeypatch) -> None:
    held = _run(tmp_path, monkeypatch, rm_mod.ReplicaManagerConfig().replica_hw_linger_ms)
    at_once = _run(tmp_path, monkeypatch, 0)
    assert held["batches"] > 20 and at_once["batches"] > 20
    # Without the linger every HW move is a round of its own for the follower that did not move it:
    # at least one HW-only answer per produced batch on top of the data answers.
    assert at_once["hw_only"] >= at_once["batches"] // 2
    # With it, a HW-only answer goes out only when no data follows within the linger: here once per
    # follower, the last HW after the producer stopped; the data answers carry the others.
    assert held["hw_only"] <= 2
    assert held["responses"] * 3 <= at_once["responses"] * 2
