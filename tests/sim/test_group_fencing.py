"""An eager (range) member fenced by the coordinator - its session expired while it was cut off - drops its
partitions as soon as it hears so (``on_partitions_lost``, as Kafka's consumer), returns no record of them
while it rejoins, and the group then converges with every partition owned once."""
from __future__ import annotations

from typing import Dict, List, Tuple

import pytest

from pylog.cluster import Cluster
from pylog.replication.offsets_topic import OFFSETS_TOPIC, partition_for_group

TOPIC = "events"
OPTS = dict(session_timeout_ms=3_000, heartbeat_interval_ms=300, rebalance_timeout_ms=4_000,
            enable_auto_commit=False, fetch_max_wait_ms=100, request_timeout_ms=2_000)


def coordinator_of(c: Cluster, group: str) -> int:
    return c.leader_of(OFFSETS_TOPIC, partition_for_group(group, c.store.topics[OFFSETS_TOPIC].partitions))


class Heard:
    def __init__(self, with_lost: bool) -> None:
        self.calls: List[Tuple[str, List[Tuple[str, int]]]] = []
        if with_lost:
            self.on_partitions_lost = lambda parts: self.calls.append(("lost", parts))

    def on_partitions_revoked(self, parts):
        self.calls.append(("revoked", parts))

    def on_partitions_assigned(self, parts):
        self.calls.append(("assigned", parts))


@pytest.mark.parametrize("strategy,with_lost", [("range", True), ("roundrobin", False)])
def test_fenced_eager_member_stops_returning_its_old_partitions_until_it_rejoins(tmp_path, strategy, with_lost):
    c = Cluster(tmp_path, brokers=3, seed=61)
    try:
        c.create_topic(TOPIC, partitions=2, replication_factor=3)
        producer = c.producer(acks="all")
        heard = Heard(with_lost)
        # a long retry backoff: the fenced member waits that long before it sends its JoinGroup
        a = c.consumer("g", [TOPIC], partition_assignment_strategy=strategy, rebalance_listener=heard,
                       retry_backoff_ms=1_500, **OPTS)
        b = c.consumer("g", [TOPIC], partition_assignment_strategy=strategy, **OPTS)
        for _ in range(100):
            a.poll(0.05)
            b.poll(0.05)
            if len(a.assignment()) == 1 and len(b.assignment()) == 1 and a.generation == b.generation:
                break
        (old_tp,) = a.assignment()
        member = a.member_id
        coord = coordinator_of(c, "g")
        c.transport.partition([a._node.node_id], [coord])  # a can still fetch, but not heartbeat
        for _ in range(200):
            a.poll(0.05)
            b.poll(0.05)
            if set(b.assignment()) == {(TOPIC, 0), (TOPIC, 1)}:
                break
        assert set(b.assignment()) == {(TOPIC, 0), (TOPIC, 1)}  # the coordinator expired a
        assert a.assignment() == [old_tp] and a.member_id == member  # a does not know yet (Kafka's zombie)
        c.transport.heal()
        heard.calls.clear()
        history = len(a.assignment_history)
        in_window = 0
        n = 0
        for _ in range(400):
            for p in (0, 1):
                n += 1
                producer.send(TOPIC, b"v%d" % n, partition=p)
            recs = a.poll(0.05)
            b.poll(0.05)
            fenced = a.member_id != member
            if fenced and len(a.assignment_history) == history:
                # told it was fenced, not yet given a new assignment: nothing of what it owned
                in_window += 1
                assert [r for r in recs if (r.topic, r.partition) == old_tp] == [], "records of a lost partition"
                assert old_tp not in a.assignment()
            if len(a.assignment_history) > history and len(a.assignment()) == 1 and len(b.assignment()) == 1:
                break
        assert in_window >= 2, "the test never polled between the fencing error and the rejoin"
        final = [set(a.assignment()), set(b.assignment())]
        assert final[0] | final[1] == {(TOPIC, 0), (TOPIC, 1)} and not final[0] & final[1]
        assert a.member_id and a.member_id != member
        a.poll(0)  # listener calls run on the application's thread, in its next poll
        # the listener heard the loss (on_partitions_revoked when it has no on_partitions_lost) first, once
        first = ("lost" if with_lost else "revoked", [old_tp])
        assert heard.calls[0] == first and heard.calls.count(first) == 1
        assert heard.calls[-1] == ("assigned", sorted(a.assignment()))
        owner: Dict[Tuple[int, Tuple[str, int]], str] = {}  # no partition twice in one generation
        for cons in (a, b):
            for generation, mid, parts in cons.assignment_history:
                for tp in parts:
                    assert owner.setdefault((generation, tp), mid) == mid
        for cons in (a, b):
            cons._check()
    finally:
        c.close()
