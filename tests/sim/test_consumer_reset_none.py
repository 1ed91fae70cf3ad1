"""Issue 14 item 8: with ``auto_offset_reset="none"`` an explicit ``seek()`` is honoured (Kafka runs the
rebalance listener before it resolves positions, and raises NoOffsetForPartition only for partitions
still without one)."""
from __future__ import annotations

import pytest

from pylog import errors
from pylog.cluster import Cluster


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, brokers=1, seed=1)
    c.create_topic("t", partitions=2, replication_factor=1)
    p = c.producer()
    for i in range(5):
        p.send("t", b"%d" % i, partition=0)
        p.send("t", b"%d" % i, partition=1)
    p.flush()
    yield c
    c.close()


class SeekOnAssign:
    def __init__(self, offsets):
        self.offsets = offsets
        self.consumer = None

    def on_partitions_assigned(self, parts):
        for tp in parts:
            if tp in self.offsets:
                self.consumer.seek(tp[0], tp[1], self.offsets[tp])

    def on_partitions_revoked(self, parts):
        pass


def test_seek_in_the_rebalance_listener_is_honoured(cluster):
    listener = SeekOnAssign({("t", 0): 3, ("t", 1): 1})
    cons = cluster.consumer("g", [], auto_offset_reset="none")
    listener.consumer = cons
    cons.subscribe(["t"], listener=listener)
    got = []
    for _ in range(30):  # before the fix: NoOffsetForPartitionError
        got += cons.poll(0.2)
    assert sorted((r.partition, r.offset) for r in got) == [(0, 3), (0, 4), (1, 1), (1, 2), (1, 3), (1, 4)]


def test_partition_left_without_position_still_raises_naming_it(cluster):
    listener = SeekOnAssign({("t", 0): 3})
    cons = cluster.consumer("g", [], auto_offset_reset="none")
    listener.consumer = cons
    cons.subscribe(["t"], listener=listener)
    with pytest.raises(errors.NoOffsetForPartitionError, match=r"t-1 ") as info:
        for _ in range(30):
            cons.poll(0.2)
    assert "t-0" not in str(info.value)
    cons.seek("t", 1, 4)  # after the error, an explicit seek makes it readable
    got = []
    for _ in range(10):
        got += cons.poll(0.2)
    assert sorted((r.partition, r.offset) for r in got) == [(0, 3), (0, 4), (1, 4)]
