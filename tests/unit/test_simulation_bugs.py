"""pylog.simulation.bugs: a known bug is a strategy given to one cluster, not a patch of Partition."""
from __future__ import annotations

import pytest

from pylog.cluster import Cluster
from pylog.errors import InvalidConfigurationError
from pylog.replication.partition import Partition
from pylog.simulation import BUGS, KNOWN_BUGS, SimConfig, Simulation
from pylog.simulation.bugs import bug_named


def _hw_after_isolated_append(c: Cluster) -> tuple:
    """Append one record with the leader cut off from its followers: (partition class, HW, LEO)."""
    c.create_topic("t", partitions=1, replication_factor=3, min_insync_replicas=1)
    leader = c.describe("t")[0].leader
    c.partition_network([leader], [b for b in range(3) if b != leader])
    c.producer(acks=1).send("t", b"x").result()
    c.advance(200)  # well below replica_lag_time_max_ms: the followers stay in the ISR
    p = c.brokers[leader].rm.partitions[("t", 0)]
    return type(p), p.high_watermark, p.log_end_offset


def test_bug_reaches_only_the_cluster_it_is_given_to(tmp_path):
    bug = KNOWN_BUGS["hw-ignores-followers"]
    bugged = Cluster(str(tmp_path / "a"), brokers=3, seed=1, partition_factory=bug.partition_class)
    plain = Cluster(str(tmp_path / "b"), brokers=3, seed=1)  # built while the bugged one runs
    try:
        assert _hw_after_isolated_append(bugged) == (bug.partition_class, 1, 1)  # HW without the ISR
        assert _hw_after_isolated_append(plain) == (Partition, 0, 1)  # Kafka's rule: waits for the ISR
    finally:
        bugged.close()
        plain.close()
    assert "maybe_increment_hw" not in vars(Partition) or vars(Partition)["maybe_increment_hw"].__module__ == \
        "pylog.replication.partition"


def test_bug_names_and_objects():
    assert set(BUGS) == set(KNOWN_BUGS) == {"no-epoch-truncation", "hw-ignores-followers"}
    assert bug_named("no-epoch-truncation") is KNOWN_BUGS["no-epoch-truncation"]
    with pytest.raises(InvalidConfigurationError, match="unknown bug 'nonsense'"):
        Simulation("unused", SimConfig(duration_ms=100), bug="nonsense")
    sim = Simulation("unused", SimConfig(duration_ms=100), bug=KNOWN_BUGS["hw-ignores-followers"])
    assert sim.bug is KNOWN_BUGS["hw-ignores-followers"]
